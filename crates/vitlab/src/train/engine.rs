//! The task-neutral training engine: the [`Task`] a trainer implements and the
//! loop ([`run_loop`]) every task runs on.
//!
//! A task does one optimiser step on a batch and reports named scalars; it
//! declares its columns (steps.csv, and the training and validation columns of
//! metrics.csv), the validation column that selects the `best` checkpoint and
//! its direction, and signals divergence with an [`Explosion`]. The loop owns
//! epochs, the learning-rate schedule, the metrics files, the epoch means,
//! checkpoints and `best`, early stopping, explosions and resumption, and
//! reports to an [`Observer`], so every task gets them the same way.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::checkpoint::Checkpoint;
use super::csv::{fmt, CsvLog};
use super::optim::{learning_rate, GradStats};
use super::progress::Observer;
use super::RunDir;
use crate::config::ExperimentConfig;
use crate::tensor_file::TensorMap;
use crate::{Error, Result};

/// Where the loop stands; saved in every checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoopState {
    /// Epoch in progress (0-based).
    pub epoch: usize,
    /// Next batch of that epoch.
    pub batch: usize,
    /// Optimiser steps taken.
    pub step: u64,
    /// The best selection score so far, oriented so that higher is better (a
    /// lower-is-better score such as FID_A + FID_B is stored negated). Its name
    /// in checkpoints predates the engine and is kept so that they still load.
    #[serde(rename = "best_val_acc")]
    pub best: Option<f64>,
    pub best_epoch: Option<usize>,
    pub epochs_since_best: usize,
    /// Training seconds before this process (resumed runs add up).
    pub elapsed_s: f64,
    /// Running sums of the epoch in progress, in [`Task::train_columns`] order
    /// (each value times its batch's sample count), so that a mid-epoch resume
    /// reports the same epoch row.
    #[serde(default)]
    pub epoch_sums: Vec<f64>,
    pub epoch_count: u64,
    pub epoch_seconds: f64,
    /// The running sums as checkpoints before the engine wrote them (read only).
    #[serde(default, skip_serializing)]
    epoch_loss_sum: f64,
    #[serde(default, skip_serializing)]
    epoch_correct: u64,
    #[serde(default, skip_serializing)]
    epoch_extra_sums: Vec<f64>,
}

impl LoopState {
    /// The epoch sums of a checkpoint written before the engine: the loss, the
    /// correct count (for tasks with one more training column than step extras:
    /// classification's `train_acc`), then the task's extra sums.
    fn upgrade(&mut self, columns: usize) {
        if !self.epoch_sums.is_empty() || self.epoch_count == 0 {
            return;
        }
        let mut sums = vec![self.epoch_loss_sum];
        if columns == self.epoch_extra_sums.len() + 2 {
            sums.push(self.epoch_correct as f64);
        }
        sums.extend(&self.epoch_extra_sums);
        if sums.len() == columns {
            self.epoch_sums = sums;
        }
    }

    /// The best score in the task's own orientation.
    pub fn best_score(&self, selection: Option<&Selection>) -> Option<f64> {
        self.best.map(|b| match selection {
            Some(s) if !s.higher_is_better => -b,
            _ => b,
        })
    }
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

/// What a step needs to know from the loop, and the explosion check's thresholds (`[monitor]`).
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
    /// a non-finite loss or gradient, or a monitored value (`max_logit`: the
    /// task's largest output, e.g. a classifier's logit) past its threshold.
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
        cause.map(|cause| Explosion { step: self.step, epoch: self.epoch, cause })
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

/// Per-block monitors of one step (blocks.csv).
#[derive(Clone, Debug)]
pub struct BlockMonitor {
    pub grad_norm: f64,
    pub act_rms: f64,
    pub max_attn_logit: f64,
}

/// What one training step reports.
#[derive(Clone, Debug)]
pub struct StepOutput {
    /// The training loss (shown in the progress display).
    pub loss: f64,
    /// steps.csv's values, in [`Task::step_columns`] order.
    pub values: Vec<f64>,
    /// Per-sample means of this batch, in [`Task::train_columns`] order: metrics.csv
    /// gets their epoch means weighted by the batch sizes.
    pub epoch_values: Vec<f64>,
    pub blocks: Vec<BlockMonitor>,
    /// Set when the step diverged; the parameters were then left unchanged.
    pub explosion: Option<Explosion>,
}

/// Validation after an epoch.
#[derive(Clone, Debug)]
pub struct Validation {
    /// In [`Task::validation_columns`] order.
    pub values: Vec<f64>,
    /// The score that selects `best` ([`Task::selection`]), in its own orientation.
    pub score: f64,
}

/// What selects the `best` checkpoint: a score the task computes at validation, and its direction.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// Its name in results and messages (`val_acc`, `FID_A + FID_B`).
    pub name: String,
    pub higher_is_better: bool,
}

/// A trainer plugged into [`run_loop`].
pub trait Task {
    type Batch;
    fn batches_per_epoch(&self) -> usize;
    /// The training batches of `epoch` from batch `start` on (deterministic).
    fn train_batches(&self, epoch: usize, start: usize) -> Box<dyn Iterator<Item = Self::Batch>>;
    /// Samples in a batch (the weight of its values in the epoch means).
    fn batch_len(batch: &Self::Batch) -> usize;
    /// steps.csv's columns after `step,epoch`.
    fn step_columns(&self) -> Vec<String>;
    /// metrics.csv's training columns (epoch means of [`StepOutput::epoch_values`]).
    fn train_columns(&self) -> Vec<String>;
    /// metrics.csv's validation columns ([`Validation::values`]).
    fn validation_columns(&self) -> Vec<String>;
    /// What selects `best`; `None`: the task does not validate, and `best` is the
    /// latest state.
    fn selection(&self) -> Option<Selection>;
    fn step(&mut self, batch: Self::Batch, ctx: &StepContext) -> Result<StepOutput>;
    /// Validation after `epochs_done` epochs (`None`: nothing measured this time).
    fn validate(&mut self, epochs_done: usize) -> Result<Option<Validation>>;
    /// Tensors of a checkpoint (model and optimiser state).
    fn checkpoint_tensors(&self) -> TensorMap;
    /// Restores [`Task::checkpoint_tensors`].
    fn restore(&mut self, tensors: &TensorMap, state: &LoopState, source: &Path) -> Result<()>;
    /// Extra metadata of checkpoints (e.g. the model config), as JSON strings.
    fn checkpoint_metadata(&self) -> HashMap<String, String>;
    /// Called after every optimiser step (`step` of `total_steps`), e.g. to write samples.
    fn after_step(&mut self, _step: u64, _total_steps: u64) -> Result<()> {
        Ok(())
    }
}

/// How a call to [`run_loop`] ended.
#[derive(Clone, Debug)]
pub struct LoopOutcome {
    pub cause: ExitCause,
    pub explosion: Option<Explosion>,
    pub state: LoopState,
    pub wall_time_s: f64,
    /// The best selection score in the task's orientation (`None`: never validated).
    pub best_score: Option<f64>,
}

/// The run's three CSV files.
struct Logs {
    metrics: CsvLog,
    steps: CsvLog,
    blocks: CsvLog,
}

pub const BLOCKS_HEADER: &str = "step,block,grad_norm,act_rms,max_attn_logit";

impl Logs {
    /// Opens the files of `run`, keeping only the rows written before `state`.
    fn open<T: Task>(task: &T, run: &RunDir, state: &LoopState) -> Result<Logs> {
        let (done_epochs, done_steps) = (state.epoch, state.step);
        let header = |parts: &[&[String]]| parts.concat().join(",");
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let metrics_header = header(&[
            &s(&["epoch", "step"]),
            &task.train_columns(),
            &task.validation_columns(),
            &s(&["lr", "seconds", "images_per_s"]),
        ]);
        // metrics.csv numbers epochs from 1: row e is complete when e <= epochs done.
        let metrics = CsvLog::open(&run.metrics(), &metrics_header, |f| f[0].parse::<usize>().is_ok_and(|e| e <= done_epochs))?;
        let steps_header = header(&[&s(&["step", "epoch"]), &task.step_columns()]);
        let before = |f: &[&str]| f[0].parse::<u64>().is_ok_and(|s| s <= done_steps);
        let steps = CsvLog::open(&run.steps(), &steps_header, before)?;
        let blocks = CsvLog::open(&run.blocks(), BLOCKS_HEADER, before)?;
        Ok(Logs { metrics, steps, blocks })
    }

    /// The first write error, once, through the observer (metrics are best effort
    /// once a run is going: a full disk must not end training; checkpoints fail loudly).
    fn report(&mut self, observer: &mut dyn Observer) {
        for log in [&mut self.metrics, &mut self.steps, &mut self.blocks] {
            if let Some(e) = log.take_error() {
                observer.message(&format!("warning: {e}; the run goes on"));
            }
        }
    }
}

/// Checks a run's length against its warmup before anything starts.
fn check_length(config: &ExperimentConfig, batches: usize) -> Result<()> {
    if batches == 0 {
        return Err(Error::config("batch_size", "the training set is smaller than one batch"));
    }
    if config.max_steps > 0 {
        let run_epochs = config.max_steps as f64 / batches as f64;
        let w = config.schedule.warmup_epochs;
        if w > 0.0 && w >= run_epochs.min(config.epochs.max(1) as f64) {
            return Err(
                config.warmup_error(run_epochs, &format!("max_steps = {}, {batches} batches per epoch", config.max_steps))
            );
        }
    }
    Ok(())
}

/// Runs (or resumes, from `resume`) training of `task` in `run`.
pub fn run_loop<T: Task>(
    task: &mut T,
    config: &ExperimentConfig,
    run: &RunDir,
    resume: Option<&Checkpoint>,
    observer: &mut dyn Observer,
) -> Result<LoopOutcome> {
    let batches = task.batches_per_epoch();
    check_length(config, batches)?;
    // The task's columns, asked once: the loop names values with them every step and epoch.
    let (train_columns, val_columns) = (task.train_columns(), task.validation_columns());
    let columns = train_columns.len();
    let mut state = match resume {
        Some(ck) => {
            task.restore(&ck.tensors, &ck.state, &ck.path)?;
            let mut s = ck.state.clone();
            s.upgrade(columns);
            s
        }
        None => LoopState::default(),
    };
    let mut logs = Logs::open(task, run, &state)?;
    let started = Instant::now();
    let elapsed_before = state.elapsed_s;
    let epochs = config.epochs.max(1);
    let total_steps = if config.max_steps > 0 { config.max_steps as u64 } else { (epochs * batches) as u64 };
    observer.start(total_steps, state.step);
    let (mut explosion, mut cause) = (None, ExitCause::Completed);
    let selection = task.selection();
    let elapsed = |started: &Instant| elapsed_before + started.elapsed().as_secs_f64();

    'epochs: while state.epoch < epochs {
        let epoch = state.epoch;
        observer.epoch(epoch, epochs);
        let epoch_started = Instant::now();
        let seconds_before = state.epoch_seconds;
        if state.epoch_sums.len() != columns {
            state.epoch_sums = vec![0.0; columns];
        }
        for batch in task.train_batches(epoch, state.batch) {
            if config.max_steps > 0 && state.step >= config.max_steps as u64 {
                cause = ExitCause::MaxSteps;
                break 'epochs;
            }
            let n = T::batch_len(&batch);
            let ctx = StepContext {
                step: state.step + 1,
                epoch,
                lr: learning_rate(config.optim.lr, &config.schedule, epoch as f64 + state.batch as f64 / batches as f64, epochs),
                probe_blocks: config.monitor.block_every > 0 && (state.step + 1) % config.monitor.block_every as u64 == 0,
                max_logit_threshold: config.monitor.max_logit,
                max_grad_threshold: config.monitor.max_grad,
                clip_grad_norm: config.stabilizers.clip_grad_norm,
            };
            let out = task.step(batch, &ctx)?;
            let row: Vec<String> =
                [ctx.step.to_string(), epoch.to_string()].into_iter().chain(out.values.iter().map(|&v| fmt(v))).collect();
            logs.steps.row(&row);
            for (i, b) in out.blocks.iter().enumerate() {
                logs.blocks.row(&[ctx.step.to_string(), i.to_string(), fmt(b.grad_norm), fmt(b.act_rms), fmt(b.max_attn_logit)]);
            }
            if let Some(e) = out.explosion {
                observer.message(&format!("exploded at step {} (epoch {}): {}", e.step, e.epoch + 1, e.cause));
                explosion = Some(e);
                cause = ExitCause::Exploded;
                break 'epochs;
            }
            state.step = ctx.step;
            state.batch += 1;
            for (s, v) in state.epoch_sums.iter_mut().zip(&out.epoch_values) {
                *s += v * n as f64;
            }
            state.epoch_count += n as u64;
            state.epoch_seconds = seconds_before + epoch_started.elapsed().as_secs_f64();
            let means = epoch_means(&state);
            observer.step(state.step, out.loss, &train_columns, &means, state.epoch_count as f64 / state.epoch_seconds.max(1e-9));
            task.after_step(state.step, total_steps)?;
            if config.checkpoint.every_steps > 0
                && state.step % config.checkpoint.every_steps as u64 == 0
                && state.batch < batches
            {
                state.elapsed_s = elapsed(&started);
                save_checkpoint(task, config, &run.latest(), &state)?;
            }
            logs.report(observer);
        }
        // Epoch end: the metrics row, `best`, `latest`, early stopping.
        let train = epoch_means(&state);
        let images_per_s = state.epoch_count as f64 / state.epoch_seconds.max(1e-9);
        let val = task.validate(epoch + 1)?;
        let lr = learning_rate(config.optim.lr, &config.schedule, epoch as f64 + 1.0 - 1e-9, epochs);
        let val_values: Vec<f64> =
            (0..val_columns.len()).map(|i| val.as_ref().and_then(|v| v.values.get(i).copied()).unwrap_or(f64::NAN)).collect();
        let mut row = vec![(epoch + 1).to_string(), state.step.to_string()];
        row.extend(train.iter().chain(&val_values).map(|&v| fmt(v)));
        row.extend([fmt(lr), format!("{:.3}", state.epoch_seconds), format!("{images_per_s:.1}")]);
        logs.metrics.row(&row);
        let named = |names: &[String], values: &[f64]| -> Vec<String> {
            names.iter().zip(values).filter(|(_, v)| !v.is_nan()).map(|(n, v)| format!("{n} {v:.4}")).collect()
        };
        let detail = [named(&train_columns, &train), named(&val_columns, &val_values)].concat().join(" ");
        observer.epoch_done(epoch, epochs, &detail, images_per_s);

        state.epoch += 1;
        state.batch = 0;
        state.epoch_sums.iter_mut().for_each(|s| *s = 0.0);
        state.epoch_count = 0;
        state.epoch_seconds = 0.0;
        // The selection score, oriented so that higher is better.
        let score = match (&selection, &val) {
            (Some(s), Some(v)) => Some(v.score).filter(|v| !v.is_nan()).map(|v| if s.higher_is_better { v } else { -v }),
            _ => None,
        };
        let improved = match (score, state.best) {
            (Some(v), Some(best)) => v > best,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if improved {
            state.best = score;
            state.best_epoch = Some(epoch + 1);
            state.epochs_since_best = 0;
        } else {
            state.epochs_since_best += 1;
        }
        state.elapsed_s = elapsed(&started);
        if improved || selection.is_none() {
            save_checkpoint(task, config, &run.best(), &state)?;
        }
        save_checkpoint(task, config, &run.latest(), &state)?;
        logs.report(observer);
        if config.patience > 0 && state.epochs_since_best >= config.patience && state.epoch < epochs {
            observer.message(&format!(
                "early stop: no validation gain for {} epochs (best {} {:.4} at epoch {})",
                state.epochs_since_best,
                selection.as_ref().map_or("score", |s| s.name.as_str()),
                state.best_score(selection.as_ref()).unwrap_or(f64::NAN),
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
        state.elapsed_s = elapsed(&started);
        save_checkpoint(task, config, &run.latest(), &state)?;
    }
    observer.finish();
    state.elapsed_s = elapsed(&started);
    Ok(LoopOutcome { cause, explosion, wall_time_s: state.elapsed_s, best_score: state.best_score(selection.as_ref()), state })
}

/// The epoch means so far of the training columns.
fn epoch_means(state: &LoopState) -> Vec<f64> {
    state.epoch_sums.iter().map(|s| s / state.epoch_count.max(1) as f64).collect()
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
