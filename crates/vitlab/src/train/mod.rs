//! Training: the task-neutral engine ([`engine`]: the [`Task`] trait and the
//! loop every trainer runs on), the run directory layout ([`RunDir`]), one
//! entry point for any task ([`train()`]) with the summary every run's
//! results.json shares ([`Summary`]), checkpoints, optimisers, the weight
//! average, and the two tasks: classification ([`classify`]) and CycleGAN
//! ([`cyclegan`], with its losses in [`gan`]). docs/ARCHITECTURE.md describes
//! how they fit and how to add a task.

pub(crate) mod checkpoint;
pub mod classify;
mod csv;
pub mod cyclegan;
pub(crate) mod ema;
pub(crate) mod engine;
pub(crate) mod gan;
pub mod optim;
pub mod predict;
pub(crate) mod pretrained;
pub mod preview;
pub mod progress;
pub mod tensorboard;
mod translate;

use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::ExperimentConfig;
use crate::distributed::World;
use crate::{Error, Result};

pub use checkpoint::Checkpoint;
pub use engine::{
    run_loop, BlockMonitor, ExitCause, Explosion, LoopOutcome, LoopState, Selection, StepContext, StepOutput, Task, Validation,
};
pub use progress::{Observer, Progress};

/// The files of a run directory (docs/RUNS.md):
///
/// ```text
/// RUN_DIR/config.toml                  the resolved experiment config
/// RUN_DIR/metrics.csv                  one row per epoch
/// RUN_DIR/steps.csv                    one row per optimiser step (the monitors)
/// RUN_DIR/blocks.csv                   per-block monitors every `monitor.block_every` steps
/// RUN_DIR/checkpoints/latest.safetensors
/// RUN_DIR/checkpoints/best.safetensors best validation accuracy so far
/// RUN_DIR/results.json                 final metrics and the exit cause
/// ```
#[derive(Clone, Debug)]
pub struct RunDir {
    pub root: PathBuf,
}

impl RunDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RunDir { root: root.into() }
    }
    pub fn config(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn metrics(&self) -> PathBuf {
        self.root.join("metrics.csv")
    }
    pub fn steps(&self) -> PathBuf {
        self.root.join("steps.csv")
    }
    pub fn blocks(&self) -> PathBuf {
        self.root.join("blocks.csv")
    }
    pub fn checkpoints(&self) -> PathBuf {
        self.root.join("checkpoints")
    }
    pub fn latest(&self) -> PathBuf {
        self.checkpoints().join("latest.safetensors")
    }
    pub fn best(&self) -> PathBuf {
        self.checkpoints().join("best.safetensors")
    }
    pub fn results(&self) -> PathBuf {
        self.root.join("results.json")
    }
    /// TensorBoard event files (`tensorboard = true`), one per session of the run.
    pub fn tensorboard(&self) -> PathBuf {
        self.root.join("tensorboard")
    }
    /// Why a sweep's run failed (written by the sweep, removed when the run succeeds).
    pub fn error(&self) -> PathBuf {
        self.root.join("error.txt")
    }

    pub fn create(&self) -> Result<()> {
        fs::create_dir_all(self.checkpoints()).map_err(|e| Error::io(self.checkpoints(), e))
    }
}

/// How a training run starts.
pub enum Start<'a> {
    /// A new run with this config.
    New(&'a ExperimentConfig),
    /// Continue from the run's latest checkpoint, with its config and these
    /// `key=value` overrides (e.g. a larger `epochs` or `max_steps`).
    Resume(&'a [String]),
}

/// Creates the run directory, loads the checkpoint to resume from, resolves the
/// config (a resumed run continues with the config it started with, plus
/// overrides) and writes it as config.toml.
/// Only rank 0 of a data-parallel run writes; the others read the same checkpoint.
pub fn prepare(start: &Start, run: &RunDir, world: &World) -> Result<(ExperimentConfig, Option<Checkpoint>)> {
    let checkpoint = match start {
        Start::Resume(_) => {
            let path = run.latest();
            if !path.exists() {
                return Err(Error::config(
                    "--resume",
                    format!("{} has no checkpoint to resume from ({} is missing)", run.root.display(), path.display()),
                ));
            }
            Some(Checkpoint::load(&path)?)
        }
        Start::New(_) => None,
    };
    let config = match (start, &checkpoint) {
        (Start::New(c), _) => (*c).clone(),
        (Start::Resume(overrides), Some(ck)) => {
            let mut table: toml::Table = toml::from_str(&ck.config.to_toml()).expect("config round-trips");
            for o in overrides.iter() {
                let (k, v) = crate::config::parse_override(o)?;
                crate::config::set_key(&mut table, &k, &v)?;
            }
            ExperimentConfig::from_table(table, "--set")?
        }
        (Start::Resume(_), None) => unreachable!("resume loads a checkpoint"),
    };
    check_world(&config, world)?;
    // A backend this binary lacks, or tch-cuda without a GPU: refused before the run exists.
    config.backend.device()?;
    if world.writes() {
        run.create()?;
        crate::util::fs::atomic_write(&run.config(), config.to_toml().as_bytes())?;
    }
    Ok((config, checkpoint))
}

/// What a data-parallel run cannot train, refused before anything is written.
pub(crate) fn check_world(config: &ExperimentConfig, world: &World) -> Result<()> {
    let k = world.size();
    if k == 1 {
        return Ok(());
    }
    if !config.batch_size.is_multiple_of(k) {
        return Err(Error::config(
            "batch_size",
            format!("{} is not a multiple of the {k} ranks (each takes an equal slice of every batch)", config.batch_size),
        ));
    }
    Ok(())
}

/// What a run produced, by task.
pub enum Outcome {
    Classify(classify::Results),
    Cyclegan(cyclegan::Results),
}

impl Outcome {
    /// The part of results.json every task shares.
    pub fn summary(&self) -> &Summary {
        match self {
            Outcome::Classify(r) => &r.summary,
            Outcome::Cyclegan(r) => &r.summary,
        }
    }
}

/// The part of results.json every task writes (flattened into it): what sweeps
/// and reports read of any run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `classify` or `cyclegan` (results.json of classifiers written before this
    /// field existed read as `classify`).
    #[serde(default = "classify_task")]
    pub task: crate::config::TaskKind,
    pub exit_cause: ExitCause,
    pub explosion: Option<Explosion>,
    /// The selection score of the `best` checkpoint (`score_name`; for a classifier
    /// the best validation accuracy, for a CycleGAN the best FID_A + FID_B).
    #[serde(default)]
    pub score: Option<f64>,
    #[serde(default)]
    pub score_name: Option<String>,
    #[serde(default)]
    pub higher_is_better: Option<bool>,
    pub best_epoch: Option<usize>,
    pub epochs: usize,
    pub steps: u64,
    /// Trainable parameters (a CycleGAN: both generators and both discriminators).
    #[serde(default)]
    pub params: usize,
    pub wall_time_s: f64,
    pub backend: String,
}

fn classify_task() -> crate::config::TaskKind {
    crate::config::TaskKind::Classify
}

impl Summary {
    /// The summary of a finished loop.
    pub fn new(
        task: crate::config::TaskKind,
        outcome: &LoopOutcome,
        selection: Option<Selection>,
        params: usize,
        config: &ExperimentConfig,
    ) -> Self {
        Summary {
            task,
            exit_cause: outcome.cause,
            explosion: outcome.explosion.clone(),
            score: outcome.best_score,
            score_name: selection.as_ref().map(|s| s.name.clone()),
            higher_is_better: selection.as_ref().map(|s| s.higher_is_better),
            best_epoch: outcome.state.best_epoch,
            epochs: outcome.state.epoch,
            steps: outcome.state.step,
            params,
            wall_time_s: outcome.wall_time_s,
            backend: config.backend.to_string(),
        }
    }

    /// Reads the summary of a run's results.json (of any task).
    pub fn read(run: &RunDir) -> Result<Summary> {
        let path = run.results();
        let text = fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        serde_json::from_str(&text).map_err(|e| Error::data(&path, format!("not a vitlab results.json: {e}")))
    }
}

/// Trains (or resumes) the run's task (`task` in the config) in `run`: the one
/// entry point to training.
pub fn train(start: Start, run: &RunDir, progress: &mut dyn Observer) -> Result<Outcome> {
    train_in(&World::single(), start, run, progress)
}

/// [`train()`] as one rank of a data-parallel `world` (every rank calls it with the
/// same arguments; rank 0 writes the run directory).
pub fn train_in(world: &World, start: Start, run: &RunDir, progress: &mut dyn Observer) -> Result<Outcome> {
    let (config, checkpoint) = prepare(&start, run, world)?;
    // Training, validation and the final test in the run's precision; FID's Inception
    // network computes in fp32 either way (it never asks for the products' dtype).
    let _precision = crate::models::precision::autocast(config.precision.compute_dtype());
    match config.task {
        crate::config::TaskKind::Classify => {
            classify::train_prepared(config, checkpoint, run, world, progress).map(Outcome::Classify)
        }
        crate::config::TaskKind::Cyclegan => {
            cyclegan::train_prepared(config, checkpoint, run, world, progress).map(Outcome::Cyclegan)
        }
    }
}
