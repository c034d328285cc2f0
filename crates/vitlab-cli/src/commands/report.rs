//! `vitlab report`: tables and figures over runs and sweeps.

use std::path::PathBuf;

use vitlab::report::{self, Report};

#[derive(clap::Args)]
pub struct Args {
    /// Folders to read: sweeps, run directories, or folders holding them.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Report folder (report.md, report.html, report.json, figures/).
    #[arg(long, short)]
    out: PathBuf,
    /// The cell the p-values compare against, `KEY=VALUE[,KEY=VALUE]`; each
    /// cell is compared with the cell that has these values and its other
    /// values (default: `model.block=vit` when the block varies and a vit cell exists).
    #[arg(long)]
    baseline: Option<String>,
    /// Report title.
    #[arg(long, default_value = "vitlab report")]
    title: String,
}

/// The command line as typed, for "regenerate with".
pub fn command_line() -> String {
    std::env::args()
        .map(|a| if a.contains([' ', '\'', '"', '*', '$']) { format!("'{}'", a.replace('\'', "'\\''")) } else { a })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Says in the report how many runs a sweep under `dirs` planned and has not started.
pub fn note_not_started(r: &mut Report, dirs: &[PathBuf]) -> vitlab::Result<()> {
    let pending = report::not_started(dirs)?;
    if !pending.is_empty() {
        r.notes.push(format!("{} planned runs of the sweep have not started yet.", pending.len()));
    }
    Ok(())
}

pub fn run(args: Args) -> vitlab::Result<()> {
    for d in &args.dirs {
        if !d.is_dir() {
            return Err(vitlab::Error::data(d, "not a folder"));
        }
    }
    let gan = report::cyclegan::load_runs(&args.dirs)?;
    if !gan.is_empty() {
        if report::has_classification_runs(&args.dirs)? {
            return Err(vitlab::Error::config(
                "DIRS",
                "these folders hold both CycleGAN and classification runs; report them separately",
            ));
        }
        let baseline = args.baseline.as_deref().map(report::parse_baseline).transpose()?;
        let mut r = report::cyclegan::GanReport::build(&args.title, gan, baseline)?;
        r.notes.push(format!("Regenerate with `{}`.", command_line()));
        for p in r.write(&args.out)? {
            println!("{}", p.display());
        }
        return Ok(());
    }
    let runs = report::load_runs(&args.dirs)?;
    if runs.is_empty() {
        return Err(vitlab::Error::config(
            "DIRS",
            "no run directories found (a run directory holds config.toml and results.json, error.txt, a checkpoint or steps.csv)",
        ));
    }
    let baseline = args.baseline.as_deref().map(report::parse_baseline).transpose()?;
    let mut r = Report::build(&args.title, runs, baseline)?;
    note_not_started(&mut r, &args.dirs)?;
    r.notes.push(format!("Regenerate with `{}`.", command_line()));
    let written = r.write(&args.out)?;
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}
