//! `vitlab`: the command-line program. A thin layer over the `vitlab` library:
//! each subcommand parses its flags, calls the library, and prints.

mod commands;
mod progress;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "vitlab", version, about = "Train, probe and compare Vision Transformers")]
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

fn main() -> ExitCode {
    vitlab::backend::tune_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Models(args) => commands::models::run(args),
        Command::Train(args) => commands::train::run(args),
        Command::Translate(args) => commands::translate::run(args),
        Command::Eval(args) => commands::eval::run(args),
        Command::Predict(args) => commands::predict::run(args),
        Command::Fid(args) => commands::fid::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Data(args) => commands::data::run(args),
        Command::Sweep(args) => commands::sweep::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Stability(args) => commands::stability::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
