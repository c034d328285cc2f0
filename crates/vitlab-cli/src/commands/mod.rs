//! One module per subcommand.

pub mod bench;
pub mod data;
mod data_preview;
pub mod eval;
pub mod fid;
pub mod models;
pub mod predict;
pub mod report;
pub mod stability;
pub mod sweep;
pub mod train;
pub mod translate;

use std::str::FromStr;

/// Output formats shared by listing commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// Which weights of a checkpoint `eval` and `predict` use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsArg {
    /// The weight average when the run kept one ([ema]), else the trained weights.
    Auto,
    /// The weight average (an error when the checkpoint has none).
    Ema,
    /// The trained weights.
    Model,
}

impl From<WeightsArg> for vitlab::train::classify::Weights {
    fn from(w: WeightsArg) -> Self {
        match w {
            WeightsArg::Auto => Self::Auto,
            WeightsArg::Ema => Self::Ema,
            WeightsArg::Model => Self::Model,
        }
    }
}

/// clap value parser for vitlab's named enums (their `FromStr` errors list the accepted values).
pub fn parse_named<T: FromStr<Err = vitlab::Error>>(s: &str) -> Result<T, String> {
    s.parse::<T>().map_err(|e| match e {
        vitlab::Error::Config { message, .. } => message,
        other => other.to_string(),
    })
}

/// clap value parser for `--backend`.
pub fn parse_named_backend(s: &str) -> Result<vitlab::backend::Backend, String> {
    parse_named(s)
}

/// Renders rows as an aligned text table.
pub fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| if i == 0 { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    out.push_str(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}
