//! `vitlab sweep`: every grid cell x seed as its own run directory, restartable.

use std::path::{Path, PathBuf};

use vitlab::report::{self, Report};
use vitlab::sweep::{self, Axis, Runner, Summary, SweepOptions, SweepSpec};
use vitlab::Error;

#[derive(clap::Args)]
pub struct Args {
    /// Base experiment config (TOML; see configs/ and docs/CONFIG.md).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// A grid axis `KEY=V1,V2,...` (repeatable; the cells are the product of the axes).
    #[arg(long = "grid", value_name = "KEY=V1,V2")]
    grid: Vec<String>,
    /// Seeds per cell: SEED_BASE, SEED_BASE+1, ...
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    seed_base: u64,
    /// Sweep directory (sweep.json, summary.json, one folder per cell and seed).
    #[arg(long, short)]
    out: PathBuf,
    /// Runs at a time (child processes; 1 runs in this process).
    #[arg(long, short, default_value_t = 1)]
    jobs: usize,
    /// Override a config key in every run, e.g. `--set epochs=20` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Write a report of the sweep to OUT/report when it is done.
    #[arg(long)]
    report: bool,
    /// Print the planned runs and what would happen to each; run nothing.
    #[arg(long)]
    dry_run: bool,
    /// No progress bars; one line per run.
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let grid = args.grid.iter().map(|g| Axis::parse(g)).collect::<vitlab::Result<Vec<_>>>()?;
    let spec = SweepSpec {
        config: args.config.clone(),
        overrides: args.overrides.clone(),
        grid,
        seeds: (args.seed_base..args.seed_base + args.seeds).collect(),
    };
    let summary = run_spec(&spec, &args.out, args.jobs, args.quiet, args.dry_run)?;
    if let Some(summary) = summary {
        if args.report {
            write_report(&args.out, &args.out.join("report"), "Sweep report", None)?;
        }
        finish(&summary)?;
    }
    Ok(())
}

/// Plans and runs a sweep (or prints the plan); shared with `vitlab stability`.
pub fn run_spec(spec: &SweepSpec, out: &Path, jobs: usize, quiet: bool, dry_run: bool) -> vitlab::Result<Option<Summary>> {
    let mut plan = sweep::plan(spec, out)?;
    plan.manifest.command = std::env::args().collect();
    if dry_run {
        for r in &plan.manifest.runs {
            let state = sweep::run_state(&vitlab::train::RunDir::new(out.join(&r.dir)));
            let what = match state {
                sweep::RunState::Finished => "finished: skip",
                sweep::RunState::Resumable => "checkpoint: resume",
                sweep::RunState::Fresh => "start",
            };
            println!("{}  ({what})  {}", r.dir, r.cell_overrides.join(" "));
        }
        println!("{} runs in {}", plan.manifest.runs.len(), out.display());
        return Ok(None);
    }
    let runner = if jobs > 1 {
        Runner::Subprocess { program: std::env::current_exe().map_err(|e| Error::io("vitlab executable", e))? }
    } else {
        Runner::InProcess { quiet }
    };
    eprintln!("sweep: {} runs in {} ({} at a time)", plan.manifest.runs.len(), out.display(), jobs.max(1));
    let summary = sweep::run(&plan, &SweepOptions { jobs, runner, verbose: true })?;
    Ok(Some(summary))
}

/// Writes the report of the sweep in `input` to `out` (the CycleGAN report for
/// a CycleGAN sweep).
pub fn write_report(input: &Path, out: &Path, title: &str, baseline: Option<&str>) -> vitlab::Result<()> {
    let gan = report::cyclegan::load_runs(&[input.to_path_buf()])?;
    if !gan.is_empty() {
        // A CycleGAN sweep: FID_A / FID_B per cell.
        let (mut r, _) = build_keeping_the_report(baseline, |b| report::cyclegan::GanReport::build(title, gan.clone(), b))?;
        r.notes.push(format!("Made by `{}`.", super::report::command_line()));
        r.write(out)?;
        eprintln!("report: {}", out.join("report.md").display());
        return Ok(());
    }
    let runs = report::load_runs(&[input.to_path_buf()])?;
    let (mut r, baseline) = build_keeping_the_report(baseline, |b| Report::build(title, runs.clone(), b))?;
    super::report::note_not_started(&mut r, &[input.to_path_buf()])?;
    r.notes.push(format!(
        "Made by `{}`; regenerate the report alone with `vitlab report {} --out {} --title '{title}'{}`.",
        super::report::command_line(),
        input.display(),
        out.display(),
        baseline.map(|b| format!(" --baseline '{b}'")).unwrap_or_default()
    ));
    r.write(out)?;
    eprintln!("report: {}", out.join("report.md").display());
    Ok(())
}

/// Builds a report with `baseline`, or, when that fails, without one: the sweep
/// has run, so a baseline that fits no cell costs the p-values, not the report.
/// Returns the baseline used.
fn build_keeping_the_report<R>(
    baseline: Option<&str>,
    build: impl Fn(Option<Vec<(String, String)>>) -> vitlab::Result<R>,
) -> vitlab::Result<(R, Option<&str>)> {
    let parsed = baseline.map(report::parse_baseline).transpose()?;
    match build(parsed) {
        Ok(r) => Ok((r, baseline)),
        Err(e) if baseline.is_some() => {
            eprintln!("report: {e}; writing the report without a baseline");
            Ok((build(None)?, None))
        }
        Err(e) => Err(e),
    }
}

/// Prints the summary table; an error if any run failed (after everything ran).
pub fn finish(summary: &Summary) -> vitlab::Result<()> {
    let rows: Vec<Vec<String>> = summary
        .runs
        .iter()
        .map(|r| {
            vec![
                r.dir.clone(),
                format!("{:?}", r.action).to_lowercase(),
                match (&r.exit_cause, &r.error) {
                    (Some(c), _) => serde_json::to_value(c).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
                    (None, _) => "FAILED".into(),
                },
                r.steps.map_or("-".into(), |s| s.to_string()),
                r.test_top1.map_or("-".into(), |t| format!("{t:.4}")),
                match (&r.score_name, r.score) {
                    (Some(name), Some(s)) => format!("{name} {s:.4}"),
                    _ => "-".into(),
                },
                r.explosion_step.map_or("-".into(), |s| s.to_string()),
            ]
        })
        .collect();
    let header = ["run", "action", "exit", "steps", "test top-1", "best score", "exploded at"];
    println!("{}", super::render_table(&header, &rows));
    let failed = summary.failed();
    if failed > 0 {
        for r in summary.runs.iter().filter(|r| r.error.is_some()) {
            eprintln!("{}: {}", r.dir, r.error.as_deref().unwrap_or(""));
        }
        return Err(Error::run(
            "sweep",
            format!(
                "{failed} of {} runs failed (see error.txt in their folders); run the sweep again to retry them",
                summary.runs.len()
            ),
        ));
    }
    Ok(())
}
