//! `vitlab train`: train a classifier or a CycleGAN (`task`) from a TOML experiment config.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use vitlab::config::ExperimentConfig;
use vitlab::distributed::World;
use vitlab::train::{ExitCause, Outcome, RunDir, Start};
use vitlab::Error;

#[derive(clap::Args)]
#[command(after_help = "Exit status: 0 when the run finished (completed, stopped early or at max_steps), \
3 when it stopped because it diverged (results.json records exit_cause \"exploded\"), 1 on an error (under mpiexec also when a peer stopped answering or another rank failed), 2 on a usage error.")]
pub struct Args {
    /// Experiment config (TOML; see configs/ and docs/CONFIG.md).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Run directory to create (config, metrics, checkpoints, results).
    #[arg(long, short, required_unless_present = "resume")]
    out: Option<PathBuf>,
    /// Override a config key, e.g. `--set optim.lr=3e-4` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Continue the run in this directory from its latest checkpoint.
    /// `--set` overrides then apply on top of the run's config (e.g. `--set epochs=200`).
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["config", "out"])]
    resume: Option<PathBuf>,
    /// No progress bar; one log line per epoch.
    #[arg(long, short)]
    quiet: bool,
    /// Under `mpiexec` (data-parallel, `--features mpi`): how long a rank waits for the
    /// others in a collective before ending the job with an error naming the wait.
    #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = positive_seconds)]
    peer_timeout: f64,
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("expected a positive number of seconds, got '{s}'")),
    }
}

/// Exit status 0 when the run finished (completed, stopped early or at `max_steps`),
/// [`vitlab::sweep::EXIT_DIVERGED`] when it stopped because it diverged (`exploded`).
pub fn run(args: Args) -> vitlab::Result<ExitCode> {
    let world = World::from_launch(Duration::from_secs_f64(args.peer_timeout))?;
    if world.size() == 1 {
        return train(args, &world);
    }
    // One write, so that mpiexec does not interleave the ranks' lines.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("{}\n", world.describe()).as_bytes());
    // An error on one rank alone would leave the others waiting for it in their next
    // collective: it ends the whole job instead.
    Ok(train(args, &world).unwrap_or_else(|e| world.abort(&e.to_string())))
}

fn train(args: Args, world: &World) -> vitlab::Result<ExitCode> {
    // One progress display: rank 0's (the others print errors only).
    let mut progress = crate::progress::Bar::new(args.quiet);
    let mut silent = vitlab::train::Progress::silent();
    let progress: &mut dyn vitlab::train::Observer = if world.writes() { &mut progress } else { &mut silent };
    let (run, results) = match args.resume {
        Some(dir) => {
            let run = RunDir::new(dir);
            let results = vitlab::train::train_in(world, Start::Resume(&args.overrides), &run, progress)?;
            (run, results)
        }
        None => {
            let config = ExperimentConfig::load(args.config.as_deref(), &args.overrides)?;
            let out = args.out.expect("clap requires --out without --resume");
            // Every rank checks (no rank writes a checkpoint before all have taken a step).
            if out.join("checkpoints").join("latest.safetensors").exists() {
                return Err(Error::usage(
                    "--out",
                    format!(
                        "{} already holds a run; continue it with `vitlab train --resume {}` or choose another --out",
                        out.display(),
                        out.display()
                    ),
                ));
            }
            let run = RunDir::new(out);
            let results = vitlab::train::train_in(world, Start::New(&config), &run, progress)?;
            (run, results)
        }
    };
    let exit_cause = match &results {
        Outcome::Classify(results) => &results.exit_cause,
        Outcome::Cyclegan(results) => &results.exit_cause,
    };
    let status =
        if *exit_cause == ExitCause::Exploded { ExitCode::from(vitlab::sweep::EXIT_DIVERGED) } else { ExitCode::SUCCESS };
    let summary = match results {
        Outcome::Classify(results) => serde_json::json!({
            "run": run.root,
            "exit_cause": results.exit_cause,
            "explosion": results.explosion,
            "epochs": results.epochs,
            "steps": results.steps,
            "best_val_acc": results.best_val_acc,
            "test_top1": results.test.as_ref().map(|t| t.top1),
            "test_top5": results.test.as_ref().map(|t| t.top5),
            "test_auroc": results.test.as_ref().and_then(|t| t.auroc),
            "wall_time_s": results.wall_time_s,
        }),
        Outcome::Cyclegan(results) => serde_json::json!({
            "run": run.root,
            "task": "cyclegan",
            "exit_cause": results.exit_cause,
            "explosion": results.explosion,
            "epochs": results.epochs,
            "steps": results.steps,
            "fid_a": results.fid_a,
            "fid_b": results.fid_b,
            "fid_note": results.fid_note,
            "best_epoch": results.best_epoch,
            "wall_time_s": results.wall_time_s,
        }),
    };
    if world.writes() {
        println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
    }
    Ok(status)
}
