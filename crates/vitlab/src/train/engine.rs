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
use super::tensorboard::{self, EventWriter};
use super::RunDir;
use crate::config::ExperimentConfig;
use crate::distributed::World;
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

    /// Records the validation of epoch `epoch` (1-based) against the best so far;
    /// whether it is a new best. The score is kept oriented so that higher is better.
    fn record(&mut self, selection: Option<&Selection>, val: Option<&Validation>, epoch: usize) -> bool {
        let score = match (selection, val) {
            (Some(s), Some(v)) => Some(v.score).filter(|v| !v.is_nan()).map(|v| if s.higher_is_better { v } else { -v }),
            _ => None,
        };
        let improved = match (score, self.best) {
            (Some(v), Some(best)) => v > best,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if improved {
            self.best = score;
            self.best_epoch = Some(epoch);
            self.epochs_since_best = 0;
        } else {
            self.epochs_since_best += 1;
        }
        improved
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
    /// Images written since the last call (e.g. sample grids): a tag and a PNG
    /// file each, for TensorBoard.
    fn take_images(&mut self) -> Vec<(String, std::path::PathBuf)> {
        Vec::new()
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

/// The run's three CSV files, and its TensorBoard events when `tensorboard = true`.
struct Logs {
    metrics: CsvLog,
    steps: CsvLog,
    blocks: CsvLog,
    tensorboard: Option<EventWriter>,
}

pub const BLOCKS_HEADER: &str = "step,block,grad_norm,act_rms,max_attn_logit";

impl Logs {
    /// Opens the files of `run`, keeping only the rows written before `state`.
    fn open<T: Task>(task: &T, config: &ExperimentConfig, run: &RunDir, state: &LoopState) -> Result<Logs> {
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
        let tensorboard = match config.tensorboard {
            // A resumed run's file starts at the step after its checkpoint: TensorBoard then
            // drops what earlier files logged past the checkpoint (see train/tensorboard.rs).
            true => {
                let mut w = EventWriter::create(&run.tensorboard(), (done_steps > 0).then_some(done_steps + 1))?;
                w.summary(done_steps, vec![tensorboard::text("config", &config.to_toml())]);
                Some(w)
            }
            false => None,
        };
        Ok(Logs { metrics, steps, blocks, tensorboard })
    }

    /// The logs of a rank other than 0 of a data-parallel run: rank 0 writes the files.
    fn discard() -> Logs {
        Logs { metrics: CsvLog::discard(), steps: CsvLog::discard(), blocks: CsvLog::discard(), tensorboard: None }
    }

    /// The first write error, once, through the observer (metrics are best effort
    /// once a run is going: a full disk must not end training; checkpoints fail loudly).
    fn report(&mut self, observer: &mut dyn Observer) {
        let tb = self.tensorboard.as_mut().and_then(EventWriter::take_error);
        let csv = [&mut self.metrics, &mut self.steps, &mut self.blocks].into_iter().filter_map(|l| l.take_error());
        for e in csv.chain(tb) {
            observer.message(&format!("warning: {e}; the run goes on"));
        }
    }

    /// Scalars `GROUP/NAME` at `step`, the NaNs (columns without a value) left out.
    fn scalars(&mut self, step: u64, group: &str, names: &[String], values: &[f64]) {
        if let Some(tb) = &mut self.tensorboard {
            let values = names
                .iter()
                .zip(values)
                .filter(|(_, v)| !v.is_nan())
                .map(|(n, &v)| tensorboard::scalar(&format!("{group}/{n}"), v))
                .collect();
            tb.summary(step, values);
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
    world: &World,
    observer: &mut dyn Observer,
) -> Result<LoopOutcome> {
    let batches = task.batches_per_epoch();
    check_length(config, batches)?;
    let state = match resume {
        Some(ck) => {
            task.restore(&ck.tensors, &ck.state, &ck.path)?;
            let mut s = ck.state.clone();
            s.upgrade(task.train_columns().len());
            s
        }
        None => LoopState::default(),
    };
    let logs = if world.writes() { Logs::open(task, config, run, &state)? } else { Logs::discard() };
    let epochs = config.epochs.max(1);
    let total_steps = if config.max_steps > 0 { config.max_steps as u64 } else { (epochs * batches) as u64 };
    let mut l = Loop {
        // The task's columns, asked once: the loop names values with them every step and epoch.
        step_columns: task.step_columns(),
        train_columns: task.train_columns(),
        val_columns: task.validation_columns(),
        selection: task.selection(),
        task,
        config,
        run,
        world,
        observer,
        logs,
        elapsed_before: state.elapsed_s,
        state,
        started: Instant::now(),
        batches,
        epochs,
        total_steps,
        explosion: None,
    };
    l.observer.start(total_steps, l.state.step);
    let cause = loop {
        if l.state.epoch >= epochs {
            break ExitCause::Completed;
        }
        if let Some(cause) = l.train_epoch()? {
            break cause;
        }
        if let Some(cause) = l.end_epoch()? {
            break cause;
        }
    };
    if cause == ExitCause::MaxSteps && l.state.batch > 0 {
        // Stopped mid-epoch: make `latest` the state at the last step.
        l.save(&run.latest())?;
    }
    if let Some(tb) = &mut l.logs.tensorboard {
        tb.flush();
    }
    l.logs.report(l.observer);
    l.observer.finish();
    l.state.elapsed_s = l.elapsed();
    let best_score = l.state.best_score(l.selection.as_ref());
    Ok(LoopOutcome { cause, explosion: l.explosion, wall_time_s: l.state.elapsed_s, best_score, state: l.state })
}

/// The loop's working state: the task, where it writes, and where it is.
struct Loop<'a, T: Task> {
    task: &'a mut T,
    config: &'a ExperimentConfig,
    run: &'a RunDir,
    /// The ranks of a data-parallel run: only rank 0 writes logs and checkpoints.
    world: &'a World,
    observer: &'a mut dyn Observer,
    logs: Logs,
    state: LoopState,
    step_columns: Vec<String>,
    train_columns: Vec<String>,
    val_columns: Vec<String>,
    selection: Option<Selection>,
    /// Wall time of the sessions before this one, and this one's start.
    elapsed_before: f64,
    started: Instant,
    batches: usize,
    epochs: usize,
    total_steps: u64,
    explosion: Option<Explosion>,
}

impl<T: Task> Loop<'_, T> {
    fn elapsed(&self) -> f64 {
        self.elapsed_before + self.started.elapsed().as_secs_f64()
    }

    fn save(&mut self, path: &Path) -> Result<()> {
        self.state.elapsed_s = self.elapsed();
        if !self.world.writes() {
            return Ok(());
        }
        // The events up to this step reach the disk before the checkpoint that a
        // resumed session's SessionLog.START refers to.
        if let Some(tb) = &mut self.logs.tensorboard {
            tb.flush();
        }
        save_checkpoint(self.task, self.config, path, &self.state)
    }

    fn context(&self, epoch: usize) -> StepContext {
        let (c, s) = (self.config, &self.state);
        StepContext {
            step: s.step + 1,
            epoch,
            lr: learning_rate(c.optim.lr, &c.schedule, epoch as f64 + s.batch as f64 / self.batches as f64, self.epochs),
            probe_blocks: c.monitor.block_every > 0 && (s.step + 1) % c.monitor.block_every as u64 == 0,
            max_logit_threshold: c.monitor.max_logit,
            max_grad_threshold: c.monitor.max_grad,
            clip_grad_norm: c.stabilizers.clip_grad_norm,
        }
    }

    /// The rest of the current epoch's steps; `Some` when the run stops inside it.
    fn train_epoch(&mut self) -> Result<Option<ExitCause>> {
        let epoch = self.state.epoch;
        self.observer.epoch(epoch, self.epochs);
        let epoch_started = Instant::now();
        let seconds_before = self.state.epoch_seconds;
        self.world.take_comm_times();
        if self.state.epoch_sums.len() != self.train_columns.len() {
            self.state.epoch_sums = vec![0.0; self.train_columns.len()];
        }
        let max_steps = self.config.max_steps as u64;
        for batch in self.task.train_batches(epoch, self.state.batch) {
            if max_steps > 0 && self.state.step >= max_steps {
                return Ok(Some(ExitCause::MaxSteps));
            }
            let n = T::batch_len(&batch);
            let ctx = self.context(epoch);
            let out = self.task.step(batch, &ctx)?;
            self.log_step(&ctx, &out);
            if let Some(e) = out.explosion {
                self.observer.message(&format!("exploded at step {} (epoch {}): {}", e.step, e.epoch + 1, e.cause));
                self.explosion = Some(e);
                return Ok(Some(ExitCause::Exploded));
            }
            let s = &mut self.state;
            s.step = ctx.step;
            s.batch += 1;
            for (sum, v) in s.epoch_sums.iter_mut().zip(&out.epoch_values) {
                *sum += v * n as f64;
            }
            s.epoch_count += n as u64;
            s.epoch_seconds = seconds_before + epoch_started.elapsed().as_secs_f64();
            let rate = s.epoch_count as f64 / s.epoch_seconds.max(1e-9);
            self.observer.step(s.step, out.loss, &self.train_columns, &epoch_means(s), rate);
            self.task.after_step(self.state.step, self.total_steps)?;
            self.log_images(self.state.step);
            let every = self.config.checkpoint.every_steps as u64;
            if every > 0 && self.state.step.is_multiple_of(every) && self.state.batch < self.batches {
                self.save(&self.run.latest())?;
            }
            self.logs.report(self.observer);
        }
        if self.world.size() > 1 {
            self.observer.message(&self.world.take_comm_times().describe(epoch_started.elapsed()));
        }
        Ok(None)
    }

    /// steps.csv and blocks.csv rows of one step (and their TensorBoard scalars).
    fn log_step(&mut self, ctx: &StepContext, out: &StepOutput) {
        let row: Vec<String> =
            [ctx.step.to_string(), ctx.epoch.to_string()].into_iter().chain(out.values.iter().map(|&v| fmt(v))).collect();
        self.logs.steps.row(&row);
        self.logs.scalars(ctx.step, "step", &self.step_columns, &out.values);
        for (i, b) in out.blocks.iter().enumerate() {
            self.logs.blocks.row(&[ctx.step.to_string(), i.to_string(), fmt(b.grad_norm), fmt(b.act_rms), fmt(b.max_attn_logit)]);
            let names = ["grad_norm", "act_rms", "max_attn_logit"].map(|n| format!("{n}/{i}"));
            self.logs.scalars(ctx.step, "blocks", &names, &[b.grad_norm, b.act_rms, b.max_attn_logit]);
        }
    }

    /// The images the task wrote at `step` (sample grids), as TensorBoard images.
    fn log_images(&mut self, step: u64) {
        if let Some(tb) = &mut self.logs.tensorboard {
            for (tag, path) in self.task.take_images() {
                if let Some(image) = png_image(&tag, &path) {
                    tb.summary(step, vec![image]);
                }
            }
        }
    }

    /// Epoch end: validation, the metrics row, `best`, `latest`, early stopping;
    /// `Some` when the run stops here.
    fn end_epoch(&mut self) -> Result<Option<ExitCause>> {
        let epoch = self.state.epoch;
        let mut val = self.task.validate(epoch + 1)?;
        if self.world.size() > 1 {
            // Rank 0's validation on every rank: `best` and early stopping decide alike.
            if let Some(v) = &mut val {
                self.world.from_rank0(&mut v.values)?;
                v.score = self.world.from_rank0(&mut [v.score])?[0];
            }
            let tensors = self.task.checkpoint_tensors();
            self.world.check_replicas(&tensors, "weights or optimiser state")?;
        }
        self.log_epoch(epoch, val.as_ref());
        let s = &mut self.state;
        s.epoch += 1;
        s.batch = 0;
        s.epoch_sums.iter_mut().for_each(|v| *v = 0.0);
        s.epoch_count = 0;
        s.epoch_seconds = 0.0;
        let improved = s.record(self.selection.as_ref(), val.as_ref(), epoch + 1);
        if improved || self.selection.is_none() {
            self.save(&self.run.best())?;
        }
        self.save(&self.run.latest())?;
        self.logs.report(self.observer);
        let s = &self.state;
        if self.config.patience > 0 && s.epochs_since_best >= self.config.patience && s.epoch < self.epochs {
            self.observer.message(&format!(
                "early stop: no validation gain for {} epochs (best {} {:.4} at epoch {})",
                s.epochs_since_best,
                self.selection.as_ref().map_or("score", |s| s.name.as_str()),
                s.best_score(self.selection.as_ref()).unwrap_or(f64::NAN),
                s.best_epoch.unwrap_or(0)
            ));
            return Ok(Some(ExitCause::EarlyStopped));
        }
        let max_steps = self.config.max_steps as u64;
        Ok((max_steps > 0 && s.step >= max_steps).then_some(ExitCause::MaxSteps))
    }

    /// The epoch's metrics.csv row and its line through the observer.
    fn log_epoch(&mut self, epoch: usize, val: Option<&Validation>) {
        let s = &self.state;
        let train = epoch_means(s);
        let images_per_s = s.epoch_count as f64 / s.epoch_seconds.max(1e-9);
        let lr = learning_rate(self.config.optim.lr, &self.config.schedule, epoch as f64 + 1.0 - 1e-9, self.epochs);
        let val_values: Vec<f64> =
            (0..self.val_columns.len()).map(|i| val.and_then(|v| v.values.get(i).copied()).unwrap_or(f64::NAN)).collect();
        let mut row = vec![(epoch + 1).to_string(), s.step.to_string()];
        row.extend(train.iter().chain(&val_values).map(|&v| fmt(v)));
        row.extend([fmt(lr), format!("{:.3}", s.epoch_seconds), format!("{images_per_s:.1}")]);
        self.logs.metrics.row(&row);
        let step = s.step;
        self.logs.scalars(step, "train", &self.train_columns, &train);
        self.logs.scalars(step, "val", &self.val_columns, &val_values);
        self.logs.scalars(step, "epoch", &["lr".into(), "images_per_s".into()], &[lr, images_per_s]);
        if let Some(tb) = &mut self.logs.tensorboard {
            tb.flush();
        }
        let named = |names: &[String], values: &[f64]| -> Vec<String> {
            names.iter().zip(values).filter(|(_, v)| !v.is_nan()).map(|(n, v)| format!("{n} {v:.4}")).collect()
        };
        let detail = [named(&self.train_columns, &train), named(&self.val_columns, &val_values)].concat().join(" ");
        self.observer.epoch_done(epoch, self.epochs, &detail, images_per_s);
    }
}

/// An image event from a PNG file (its size read from the IHDR chunk); `None`
/// when the file cannot be read as a PNG (the run goes on without it).
fn png_image(tag: &str, path: &Path) -> Option<tensorboard::Value> {
    let bytes = std::fs::read(path).ok()?;
    let dim = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize);
    (bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.get(12..16) == Some(b"IHDR")).then_some(())?;
    let (w, h) = (dim(16)?, dim(20)?);
    Some(tensorboard::image(tag, bytes, h, w))
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
