//! `vitlab`: the command-line program. A thin layer over the `vitlab` library:
//! each subcommand parses its flags, calls the library, and prints.

mod commands;
mod progress;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The exit statuses (README.md, "Exit codes"); clap itself exits with 2 on a usage error.
const EXIT_CODES: &str = "Exit status:
  0  finished (a training run completed, stopped early or reached max_steps)
  1  error (a message on stderr says what)
  2  usage error: an unknown flag, a missing argument, a value outside a flag's choices
     or a flag's value the command cannot use (e.g. `train --out` a folder holding a run)
  3  vitlab train: the run stopped because it diverged (results.json records exit_cause \"exploded\")
`sweep` and `stability` record diverged runs as results and go on: they exit 0 when every run
ended (diverged or not), 1 when any run failed.";

#[derive(Parser)]
#[command(name = "vitlab", version, about = "Train, probe and compare Vision Transformers", after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every block variant x size with its dimensions and parameter count.
    Models(commands::models::Args),
    /// Train a classifier or a CycleGAN from a TOML experiment config (or resume a run).
    Train(commands::train::Args),
    /// Translate images with a generator of a CycleGAN run.
    Translate(commands::translate::Args),
    /// Test metrics of a checkpoint or run directory on a dataset.
    Eval(commands::eval::Args),
    /// Top classes of image files under a trained model.
    Predict(commands::predict::Args),
    /// Attention maps (per block and head) and attention rollout of image files under a trained classifier.
    Attention(commands::attention::Args),
    /// FID and KID of two image folders with the FID Inception network (or save a folder's features).
    Fid(commands::fid::Args),
    /// Training and inference throughput per backend, optionally against PyTorch.
    Bench(commands::bench::Args),
    /// Datasets: `info` (what a path holds), `download`, `bench` (loader speed), `unpaired` (two classes -> a CycleGAN folder).
    Data(commands::data::Args),
    /// Run every grid cell x seed as its own run directory (restartable).
    Sweep(commands::sweep::Args),
    /// Tables (mean ± std over seeds, t-tests, stability) and figures over runs.
    Report(commands::report::Args),
    /// The training-stability study: block variants x stabilisers x seeds, then its report.
    Stability(commands::stability::Args),
}

/// Runs a command; its exit status when it ran to its end (see [`EXIT_CODES`]).
fn run(command: Command) -> vitlab::Result<ExitCode> {
    let finished = |result: vitlab::Result<()>| result.map(|()| ExitCode::SUCCESS);
    match command {
        Command::Models(args) => finished(commands::models::run(args)),
        Command::Train(args) => commands::train::run(args),
        Command::Translate(args) => finished(commands::translate::run(args)),
        Command::Eval(args) => finished(commands::eval::run(args)),
        Command::Predict(args) => finished(commands::predict::run(args)),
        Command::Attention(args) => finished(commands::attention::run(args)),
        Command::Fid(args) => finished(commands::fid::run(args)),
        Command::Bench(args) => finished(commands::bench::run(args)),
        Command::Data(args) => finished(commands::data::run(args)),
        Command::Sweep(args) => finished(commands::sweep::run(args)),
        Command::Report(args) => finished(commands::report::run(args)),
        Command::Stability(args) => finished(commands::stability::run(args)),
    }
}

fn main() -> ExitCode {
    vitlab::backend::tune_allocator();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                // A flag's value that clap could not check: a usage error, as clap's own.
                vitlab::Error::Usage { .. } => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}
