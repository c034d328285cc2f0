//! Training: one loop skeleton ([`run_loop`]) shared by every trainer, the run
//! directory layout ([`RunDir`]), checkpoints and the optimisers.
//!
//! A trainer implements [`Task`] (one optimiser step on a batch, validation,
//! its checkpoint tensors); the loop owns epochs, the learning-rate schedule,
//! progress display, metrics files, checkpoints, early stopping, explosion
//! handling and resumption, so every trainer gets them the same way.

pub mod checkpoint;
pub mod classify;
pub mod cyclegan;
pub mod ema;
pub mod gan;
pub mod optim;
pub mod preview;
pub mod progress;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::config::ExperimentConfig;
use crate::tensor_file::TensorMap;
use crate::{Error, Result};

pub use checkpoint::Checkpoint;
use optim::{learning_rate, GradStats};
use progress::Progress;

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
    /// Why a sweep's run failed (written by the sweep, removed when the run succeeds).
    pub fn error(&self) -> PathBuf {
        self.root.join("error.txt")
    }

    pub fn create(&self) -> Result<()> {
        fs::create_dir_all(self.checkpoints()).map_err(|e| Error::io(self.checkpoints(), e))
    }
}

/// Where the loop stands; saved in every checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// Epoch in progress (0-based).
    pub epoch: usize,
    /// Next batch of that epoch.
    pub batch: usize,
    /// Optimiser steps taken.
    pub step: u64,
    /// The best validation score so far: accuracy for a classifier, minus
    /// (FID_A + FID_B) for a CycleGAN (higher is better for both).
    pub best_val_acc: Option<f64>,
    pub best_epoch: Option<usize>,
    pub epochs_since_best: usize,
    /// Training seconds before this process (resumed runs add up).
    pub elapsed_s: f64,
    /// Running sums of the epoch in progress (so a mid-epoch resume reports the same epoch row).
    pub epoch_loss_sum: f64,
    pub epoch_correct: u64,
    pub epoch_count: u64,
    pub epoch_seconds: f64,
    /// Running sums of the task's own step columns ([`Task::step_columns`]).
    #[serde(default)]
    pub epoch_extra_sums: Vec<f64>,
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitCause {
    Completed,
    EarlyStopped,
    MaxSteps,
    Exploded,
}

/// A detected divergence: the step at which it happened and what was seen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explosion {
    pub step: u64,
    pub epoch: usize,
    pub cause: String,
}

/// Thresholds of the explosion check (from `[monitor]`).
#[derive(Clone, Debug)]
pub struct StepContext {
    pub step: u64,
    pub epoch: usize,
    pub lr: f64,
    /// Measure per-block monitors this step.
    pub probe_blocks: bool,
    pub max_logit_threshold: f64,
    pub max_grad_threshold: f64,
    pub clip_grad_norm: f64,
}

impl StepContext {
    /// The explosion check, run after backward and before the optimiser step:
    /// a non-finite loss or gradient, or a monitored value past its threshold.
    pub fn check(&self, loss: f64, max_logit: f64, grads: &GradStats) -> Option<Explosion> {
        let cause = if !loss.is_finite() {
            Some(format!("non-finite loss ({loss})"))
        } else if !grads.finite {
            Some("non-finite gradient".to_string())
        } else if !max_logit.is_finite() {
            Some(format!("non-finite logit ({max_logit})"))
        } else if self.max_logit_threshold > 0.0 && max_logit > self.max_logit_threshold {
            Some(format!("max logit {max_logit:.4e} > threshold {:.4e}", self.max_logit_threshold))
        } else if self.max_grad_threshold > 0.0 && grads.max_abs > self.max_grad_threshold {
            Some(format!("max |gradient| {:.4e} > threshold {:.4e}", grads.max_abs, self.max_grad_threshold))
        } else {
            None
        };
        cause.map(|cause| Explosion {
            step: self.step,
            epoch: self.epoch,
            cause,
        })
    }

    /// The factor gradients are multiplied by for clipping by global norm (1 when off).
    pub fn clip_scale(&self, grads: &GradStats) -> f64 {
        if self.clip_grad_norm > 0.0 && grads.global_norm > self.clip_grad_norm {
            self.clip_grad_norm / (grads.global_norm + 1e-6)
        } else {
            1.0
        }
    }
}

/// Per-block monitors of one step.
#[derive(Clone, Debug)]
pub struct BlockMonitor {
    pub grad_norm: f64,
    pub act_rms: f64,
    pub max_attn_logit: f64,
}

/// What one training step reports.
#[derive(Clone, Debug)]
pub struct StepOutput {
    pub loss: f64,
    pub correct: usize,
    pub count: usize,
    pub max_logit: f64,
    pub grads: GradStats,
    pub blocks: Vec<BlockMonitor>,
    /// Set when the step diverged; the parameters were then left unchanged.
    pub explosion: Option<Explosion>,
    /// The task's own monitors, in [`Task::step_columns`] order.
    pub extra: Vec<f64>,
}

/// Validation result of an epoch.
#[derive(Clone, Debug)]
pub struct Validation {
    pub loss: f64,
    /// The score the best checkpoint is chosen by (higher is better).
    pub accuracy: f64,
    /// The task's own validation metrics, in [`Task::validation_columns`] order.
    pub extra: Vec<f64>,
}

/// A trainer plugged into [`run_loop`].
pub trait Task {
    type Batch;
    fn batches_per_epoch(&self) -> usize;
    /// The training batches of `epoch` from batch `start` on (deterministic).
    fn train_batches(&self, epoch: usize, start: usize) -> Box<dyn Iterator<Item = Self::Batch>>;
    fn batch_len(batch: &Self::Batch) -> usize;
    fn step(&mut self, batch: Self::Batch, ctx: &StepContext) -> Result<StepOutput>;
    /// Validation after `epochs_done` epochs (`None`: nothing measured this time).
    fn validate(&mut self, epochs_done: usize) -> Result<Option<Validation>>;
    /// Tensors of a checkpoint (model and optimiser state).
    fn checkpoint_tensors(&self) -> TensorMap;
    /// Restores [`Task::checkpoint_tensors`].
    fn restore(&mut self, tensors: &TensorMap, state: &LoopState, source: &Path) -> Result<()>;
    /// Extra metadata of checkpoints (e.g. the model config), as JSON strings.
    fn checkpoint_metadata(&self) -> HashMap<String, String>;
    /// Whether [`Task::validate`] can give a score: when not, `best` is the latest state.
    fn validates(&self) -> bool {
        true
    }
    /// Whether steps report a training accuracy (`train_acc`, `acc` in the progress).
    fn has_accuracy(&self) -> bool {
        true
    }
    /// The task's own columns of steps.csv (after the common ones); metrics.csv gets
    /// their epoch means.
    fn step_columns(&self) -> Vec<String> {
        Vec::new()
    }
    /// The task's own validation columns of metrics.csv (after the epoch means).
    fn validation_columns(&self) -> Vec<String> {
        Vec::new()
    }
    /// Called after every optimiser step (`step` of `total_steps`), e.g. to write samples.
    fn after_step(&mut self, _step: u64, _total_steps: u64) -> Result<()> {
        Ok(())
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
pub fn prepare(start: &Start, run: &RunDir) -> Result<(ExperimentConfig, Option<Checkpoint>)> {
    run.create()?;
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
    crate::util::fs::atomic_write(&run.config(), config.to_toml().as_bytes())?;
    Ok((config, checkpoint))
}

/// What a run produced, by task.
pub enum Outcome {
    Classify(classify::Results),
    Cyclegan(cyclegan::Results),
}

/// Trains (or resumes) the run's task (`task` in the config) in `run`.
pub fn train(start: Start, run: &RunDir, progress: &mut Progress) -> Result<Outcome> {
    let (config, checkpoint) = prepare(&start, run)?;
    match config.task {
        crate::config::TaskKind::Classify => {
            classify::train_prepared(config, checkpoint, run, progress).map(Outcome::Classify)
        }
        crate::config::TaskKind::Cyclegan => {
            cyclegan::train_prepared(config, checkpoint, run, progress).map(Outcome::Cyclegan)
        }
    }
}

/// How a call to [`run_loop`] ended.
#[derive(Clone, Debug)]
pub struct LoopOutcome {
    pub cause: ExitCause,
    pub explosion: Option<Explosion>,
    pub state: LoopState,
    pub wall_time_s: f64,
}

/// An append-only CSV file that, on resume, keeps only the rows a predicate accepts.
struct Csv {
    file: File,
}

impl Csv {
    fn open(path: &Path, header: &str, keep: impl Fn(&[&str]) -> bool) -> Result<Csv> {
        let io = |e| Error::io(path, e);
        let mut kept = Vec::new();
        if path.exists() {
            let f = File::open(path).map_err(io)?;
            for (i, line) in BufReader::new(f).lines().enumerate() {
                let line = line.map_err(io)?;
                if i == 0 || line.is_empty() {
                    continue;
                }
                let fields: Vec<&str> = line.split(',').collect();
                if keep(&fields) {
                    kept.push(line);
                }
            }
        }
        let mut text = format!("{header}\n");
        for l in kept {
            text.push_str(&l);
            text.push('\n');
        }
        crate::util::fs::atomic_write(path, text.as_bytes())?;
        let file = OpenOptions::new().append(true).open(path).map_err(io)?;
        Ok(Csv { file })
    }

    fn row(&mut self, fields: &[String]) {
        // Metrics are best effort once the run is going: a full disk must not kill training.
        let _ = writeln!(self.file, "{}", fields.join(","));
    }
}

fn fmt(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.6e}")
    }
}

pub const METRICS_HEADER: &str = "epoch,step,train_loss,train_acc,val_loss,val_acc,lr,seconds,images_per_s";
pub const STEPS_HEADER: &str = "step,epoch,loss,max_logit,max_grad,grad_norm,lr,clip_scale";
pub const BLOCKS_HEADER: &str = "step,block,grad_norm,act_rms,max_attn_logit";

/// Runs (or resumes) training. `resume` holds the checkpoint to continue from.
pub fn run_loop<T: Task>(
    task: &mut T,
    config: &ExperimentConfig,
    run: &RunDir,
    resume: Option<&Checkpoint>,
    progress: &mut Progress,
) -> Result<LoopOutcome> {
    let batches = task.batches_per_epoch();
    if batches == 0 {
        return Err(Error::config("batch_size", "the training set is smaller than one batch"));
    }
    if config.max_steps > 0 {
        let run_epochs = config.max_steps as f64 / batches as f64;
        let w = config.schedule.warmup_epochs;
        if w > 0.0 && w >= run_epochs.min(config.epochs.max(1) as f64) {
            return Err(config.warmup_error(run_epochs, &format!("max_steps = {}, {batches} batches per epoch", config.max_steps)));
        }
    }
    let mut state = match resume {
        Some(ck) => {
            task.restore(&ck.tensors, &ck.state, &ck.path)?;
            ck.state.clone()
        }
        None => LoopState::default(),
    };
    // Keep only the rows written before the checkpoint we resume from.
    let (done_epochs, done_steps) = (state.epoch, state.step);
    // metrics.csv numbers epochs from 1: row e is complete when e <= epochs done.
    let extra_steps = task.step_columns();
    let extra_val = task.validation_columns();
    let header = |base: &str, extra: &[String]| std::iter::once(base.to_string()).chain(extra.iter().cloned()).collect::<Vec<_>>().join(",");
    let metrics_header = header(METRICS_HEADER, &[extra_steps.clone(), extra_val.clone()].concat());
    let mut metrics = Csv::open(&run.metrics(), &metrics_header, |f| {
        f[0].parse::<usize>().is_ok_and(|e| e <= done_epochs)
    })?;
    let mut steps = Csv::open(&run.steps(), &header(STEPS_HEADER, &extra_steps), |f| f[0].parse::<u64>().is_ok_and(|s| s <= done_steps))?;
    let mut blocks_csv = Csv::open(&run.blocks(), BLOCKS_HEADER, |f| {
        f[0].parse::<u64>().is_ok_and(|s| s <= done_steps)
    })?;

    let started = Instant::now();
    let elapsed_before = state.elapsed_s;
    let epochs = config.epochs.max(1);
    let total_steps = if config.max_steps > 0 {
        config.max_steps as u64
    } else {
        (epochs * batches) as u64
    };
    progress.start(total_steps, state.step);
    let mut explosion = None;
    let mut cause = ExitCause::Completed;

    'epochs: while state.epoch < epochs {
        let epoch = state.epoch;
        progress.epoch(epoch, epochs, batches, state.batch);
        let epoch_started = Instant::now();
        let seconds_before = state.epoch_seconds;
        let mut batch_index = state.batch;
        for batch in task.train_batches(epoch, state.batch) {
            if config.max_steps > 0 && state.step >= config.max_steps as u64 {
                cause = ExitCause::MaxSteps;
                break 'epochs;
            }
            let n = T::batch_len(&batch);
            let lr = learning_rate(
                config.optim.lr,
                &config.schedule,
                epoch as f64 + batch_index as f64 / batches as f64,
                epochs,
            );
            let ctx = StepContext {
                step: state.step + 1,
                epoch,
                lr,
                probe_blocks: config.monitor.block_every > 0
                    && (state.step + 1) % config.monitor.block_every as u64 == 0,
                max_logit_threshold: config.monitor.max_logit,
                max_grad_threshold: config.monitor.max_grad,
                clip_grad_norm: config.stabilizers.clip_grad_norm,
            };
            let out = task.step(batch, &ctx)?;
            let mut row = vec![
                ctx.step.to_string(),
                epoch.to_string(),
                fmt(out.loss),
                fmt(out.max_logit),
                fmt(out.grads.max_abs),
                fmt(out.grads.global_norm),
                fmt(lr),
                fmt(ctx.clip_scale(&out.grads)),
            ];
            row.extend(out.extra.iter().map(|&v| fmt(v)));
            steps.row(&row);
            for (i, b) in out.blocks.iter().enumerate() {
                blocks_csv.row(&[ctx.step.to_string(), i.to_string(), fmt(b.grad_norm), fmt(b.act_rms), fmt(b.max_attn_logit)]);
            }
            if let Some(e) = out.explosion {
                progress.message(&format!("exploded at step {} (epoch {}): {}", e.step, e.epoch + 1, e.cause));
                explosion = Some(e);
                cause = ExitCause::Exploded;
                break 'epochs;
            }
            state.step = ctx.step;
            batch_index += 1;
            state.batch = batch_index;
            state.epoch_loss_sum += out.loss * n as f64;
            state.epoch_correct += out.correct as u64;
            state.epoch_count += n as u64;
            state.epoch_extra_sums.resize(out.extra.len(), 0.0);
            for (s, v) in state.epoch_extra_sums.iter_mut().zip(&out.extra) {
                *s += v * n as f64;
            }
            state.epoch_seconds = seconds_before + epoch_started.elapsed().as_secs_f64();
            let ips = (state.epoch_count as f64) / state.epoch_seconds.max(1e-9);
            let acc = task.has_accuracy().then(|| state.epoch_correct as f64 / state.epoch_count.max(1) as f64);
            progress.step(state.step, out.loss, acc, ips);
            task.after_step(state.step, total_steps)?;
            if config.checkpoint.every_steps > 0
                && state.step % config.checkpoint.every_steps as u64 == 0
                && batch_index < batches
            {
                state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();
                save_checkpoint(task, config, &run.latest(), &state)?;
            }
        }
        // Epoch end.
        let train_loss = state.epoch_loss_sum / state.epoch_count.max(1) as f64;
        let train_acc = if task.has_accuracy() {
            state.epoch_correct as f64 / state.epoch_count.max(1) as f64
        } else {
            f64::NAN
        };
        let extra_means: Vec<f64> = (0..extra_steps.len())
            .map(|i| state.epoch_extra_sums.get(i).copied().unwrap_or(f64::NAN) / state.epoch_count.max(1) as f64)
            .collect();
        let seconds = state.epoch_seconds;
        let images_per_s = state.epoch_count as f64 / seconds.max(1e-9);
        let val = task.validate(epoch + 1)?;
        let lr = learning_rate(config.optim.lr, &config.schedule, epoch as f64 + 1.0 - 1e-9, epochs);
        let mut row = vec![
            (epoch + 1).to_string(),
            state.step.to_string(),
            fmt(train_loss),
            fmt(train_acc),
            fmt(val.as_ref().map_or(f64::NAN, |v| v.loss)),
            fmt(val.as_ref().map_or(f64::NAN, |v| v.accuracy)),
            fmt(lr),
            format!("{seconds:.3}"),
            format!("{images_per_s:.1}"),
        ];
        row.extend(extra_means.iter().map(|&v| fmt(v)));
        row.extend((0..extra_val.len()).map(|i| fmt(val.as_ref().and_then(|v| v.extra.get(i).copied()).unwrap_or(f64::NAN))));
        metrics.row(&row);
        let detail = if task.has_accuracy() {
            let val = val.as_ref().map_or(String::new(), |v| format!(" val_loss {:.4} val_acc {:.4}", v.loss, v.accuracy));
            format!("train_loss {train_loss:.4} train_acc {train_acc:.4}{val}")
        } else {
            let named = |names: &[String], values: &[f64]| -> String {
                names.iter().zip(values).map(|(n, v)| format!(" {n} {v:.4}")).collect()
            };
            let val = val.as_ref().map_or(String::new(), |v| named(&extra_val, &v.extra));
            format!("loss {train_loss:.4}{}{val}", named(&extra_steps, &extra_means))
        };
        progress.epoch_done(epoch, epochs, &detail, images_per_s);

        state.epoch += 1;
        state.batch = 0;
        state.epoch_loss_sum = 0.0;
        state.epoch_correct = 0;
        state.epoch_count = 0;
        state.epoch_seconds = 0.0;
        state.epoch_extra_sums.clear();
        let improved = match (&val, state.best_val_acc) {
            (Some(v), Some(best)) => v.accuracy > best,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if improved {
            state.best_val_acc = val.as_ref().map(|v| v.accuracy);
            state.best_epoch = Some(epoch + 1);
            state.epochs_since_best = 0;
        } else {
            state.epochs_since_best += 1;
        }
        state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();
        if improved || (val.is_none() && !task.validates()) {
            save_checkpoint(task, config, &run.best(), &state)?;
        }
        save_checkpoint(task, config, &run.latest(), &state)?;
        if config.patience > 0 && state.epochs_since_best >= config.patience && state.epoch < epochs {
            progress.message(&format!(
                "early stop: no validation gain for {} epochs (best {:.4} at epoch {})",
                state.epochs_since_best,
                state.best_val_acc.unwrap_or(f64::NAN),
                state.best_epoch.unwrap_or(0)
            ));
            cause = ExitCause::EarlyStopped;
            break;
        }
        if config.max_steps > 0 && state.step >= config.max_steps as u64 {
            cause = ExitCause::MaxSteps;
            break;
        }
    }
    if cause == ExitCause::MaxSteps && state.batch > 0 {
        // Stopped mid-epoch: make `latest` the state at the last step.
        state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();
        save_checkpoint(task, config, &run.latest(), &state)?;
    }
    progress.finish();
    state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();
    Ok(LoopOutcome {
        cause,
        explosion,
        wall_time_s: state.elapsed_s,
        state,
    })
}

fn save_checkpoint<T: Task>(task: &T, config: &ExperimentConfig, path: &Path, state: &LoopState) -> Result<()> {
    Checkpoint {
        path: path.to_path_buf(),
        tensors: task.checkpoint_tensors(),
        state: state.clone(),
        config: config.clone(),
        metadata: task.checkpoint_metadata(),
    }
    .save()
}
