//! One module per subcommand.

pub mod attention;
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

use clap::ValueEnum;

/// Output formats shared by listing commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// An aligned text table.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// Pretty-printed JSON.
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

/// The help of every `--backend` that picks one backend.
pub const BACKEND_HELP: &str = "Compute backend; one not compiled into this binary is an error naming the cargo feature";

/// `--backend`: [`vitlab::backend::Backend`] with help per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    /// burn's pure-Rust CPU backend (always built).
    Flex,
    /// LibTorch on the CPU (a build with `--features tch`).
    Tch,
    /// LibTorch on CUDA device 0 (`--features tch` with a CUDA libtorch).
    TchCuda,
    /// burn's CubeCL CUDA backend (`--features cuda`).
    Cuda,
}

impl From<BackendArg> for vitlab::backend::Backend {
    fn from(b: BackendArg) -> Self {
        match b {
            BackendArg::Flex => Self::Flex,
            BackendArg::Tch => Self::Tch,
            BackendArg::TchCuda => Self::TchCuda,
            BackendArg::Cuda => Self::Cuda,
        }
    }
}

/// A model preset ([`vitlab::models::Preset`], docs/MODELS.md "Presets").
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PresetArg {
    /// vitlab's standard choices.
    Default,
    /// Exactly the released code's model for each block variant.
    Paper,
}

impl From<PresetArg> for vitlab::models::Preset {
    fn from(p: PresetArg) -> Self {
        match p {
            PresetArg::Default => Self::Default,
            PresetArg::Paper => Self::Paper,
        }
    }
}

/// clap value parser of a [`ValueEnum`] in a comma-separated list: spaces around a value
/// are ignored (`--blocks "vit, vit22b"`), as they were when these lists were plain strings.
#[derive(Clone)]
pub struct Trimmed<E: ValueEnum + Clone + Send + Sync + 'static>(clap::builder::EnumValueParser<E>);

impl<E: ValueEnum + Clone + Send + Sync + 'static> Trimmed<E> {
    pub fn new() -> Self {
        Trimmed(clap::builder::EnumValueParser::new())
    }
}

impl<E: ValueEnum + Clone + Send + Sync + 'static> clap::builder::TypedValueParser for Trimmed<E> {
    type Value = E;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr) -> Result<E, clap::Error> {
        let value = value.to_str().map_or(value, |v| std::ffi::OsStr::new(v.trim()));
        self.0.parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        self.0.possible_values()
    }
}

/// The command-line spelling of a value (what `--help` lists).
pub fn value_name<E: ValueEnum>(v: &E) -> String {
    v.to_possible_value().expect("no skipped values").get_name().to_string()
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

#[cfg(test)]
pub(crate) mod tests {
    use clap::ValueEnum;

    /// A command-line enum mirrors a library one: every value's spelling is the library's
    /// name of the value it maps to, and every library value has a spelling.
    pub fn assert_mirrors<C, L>(library_values: usize, parse: impl Fn(&str) -> Option<L>)
    where
        C: ValueEnum + Copy + std::fmt::Debug,
        L: From<C> + PartialEq + std::fmt::Debug,
    {
        for v in C::value_variants() {
            let name = super::value_name(v);
            assert_eq!(parse(&name), Some(L::from(*v)), "{v:?} is spelt {name:?}");
        }
        assert_eq!(C::value_variants().len(), library_values, "{}", std::any::type_name::<L>());
    }

    #[test]
    fn backend_and_preset_spell_the_library_names() {
        use vitlab::backend::Backend;
        use vitlab::models::Preset;
        assert_mirrors::<super::BackendArg, Backend>(Backend::ALL.len(), |s| s.parse().ok());
        assert_mirrors::<super::PresetArg, Preset>(Preset::ALL.len(), |s| s.parse().ok());
    }
}
