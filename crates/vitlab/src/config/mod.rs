//! Experiment configuration: one TOML file (data, not code) plus `--set key=value`
//! overrides. Every key is documented in docs/CONFIG.md; unknown keys and bad
//! values are errors that name the key. [`flatten_config`] gives a config's
//! flat `key = value` view, which reports and sweeps compare runs by.

mod flat;
mod sections;
#[cfg(test)]
mod tests;

pub use flat::{flatten, flatten_config, parse_override, set_key, short_names};
pub use sections::*;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::data::Augment;
use crate::{Error, Result};

/// An experiment: a classifier or a CycleGAN (`task`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExperimentConfig {
    pub task: TaskKind,
    pub seed: u64,
    pub epochs: usize,
    pub batch_size: usize,
    pub backend: Backend,
    pub precision: Precision,
    /// Stop after this many optimiser steps in total (0: no limit); for stability studies.
    pub max_steps: usize,
    /// Early stopping: epochs without a validation-accuracy gain (0: off).
    pub patience: usize,
    /// Also write TensorBoard event files (`RUN_DIR/tensorboard/`).
    pub tensorboard: bool,
    pub model: ModelSection,
    pub data: DataSection,
    pub augment: Augment,
    pub optim: OptimSection,
    pub schedule: ScheduleSection,
    pub loss: LossSection,
    pub stabilizers: StabilizerSection,
    pub monitor: MonitorSection,
    pub checkpoint: CheckpointSection,
    pub cyclegan: CycleganSection,
    pub ema: EmaSection,
    pub init: InitSection,
}

impl Default for ExperimentConfig {
    fn default() -> Self {
        ExperimentConfig {
            task: TaskKind::Classify,
            seed: 0,
            epochs: 10,
            batch_size: 128,
            backend: Backend::Flex,
            precision: Precision::Fp32,
            max_steps: 0,
            patience: 0,
            tensorboard: true,
            model: ModelSection::default(),
            data: DataSection::default(),
            augment: Augment::standard(),
            optim: OptimSection::default(),
            schedule: ScheduleSection::default(),
            loss: LossSection::default(),
            stabilizers: StabilizerSection::default(),
            monitor: MonitorSection::default(),
            checkpoint: CheckpointSection::default(),
            cyclegan: CycleganSection::default(),
            ema: EmaSection::default(),
            init: InitSection::default(),
        }
    }
}

impl ExperimentConfig {
    /// Builds a config from a TOML table; errors name the offending key path.
    pub fn from_table(table: toml::Table, source: &str) -> Result<Self> {
        let de = toml::Value::Table(table);
        let config: ExperimentConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            Error::config(if path == "." { source.to_string() } else { format!("{source}: {path}") }, e.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a TOML file (if any) and applies `key=value` overrides.
    pub fn load(path: Option<&Path>, overrides: &[String]) -> Result<Self> {
        let (mut table, source) = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| Error::io(p, e))?;
                let t: toml::Table = toml::from_str(&text).map_err(|e| Error::config(p.display().to_string(), e.to_string()))?;
                (t, p.display().to_string())
            }
            None => (toml::Table::new(), "config".to_string()),
        };
        for o in overrides {
            let (k, v) = parse_override(o)?;
            set_key(&mut table, &k, &v)?;
        }
        Self::from_table(table, &source)
    }

    fn validate_cyclegan(&self) -> Result<()> {
        let c = &self.cyclegan;
        for (field, v) in [("cyclegan.lambda_cycle", c.lambda_cycle), ("cyclegan.lambda_identity", c.lambda_identity)] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(Error::config(field, "must be a non-negative number"));
            }
        }
        if c.load_size != 0 && c.load_size < self.model.image_size {
            return Err(Error::config(
                "cyclegan.load_size",
                format!("{} is smaller than the crop, model.image_size = {}", c.load_size, self.model.image_size),
            ));
        }
        crate::models::inception::Tap::parse("cyclegan.fid_feature", &c.fid_feature.to_string())?;
        crate::metrics::features::Resize::parse("cyclegan.fid_preprocess", &c.fid_preprocess)?;
        if !(0.0..=1.0).contains(&c.sample_every) {
            return Err(Error::config("cyclegan.sample_every", "a fraction of the training steps, in [0, 1]"));
        }
        if self.data.path == "synthetic" {
            return Err(Error::config("data.path", "a CycleGAN run needs an unpaired folder (trainA/ trainB/ testA/ testB/)"));
        }
        Ok(())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("config serialises")
    }

    /// The error for a warmup of `schedule.warmup_epochs` that a run of `run_epochs`
    /// epochs (`what` says how that length was set) never finishes.
    pub fn warmup_error(&self, run_epochs: f64, what: &str) -> Error {
        let w = self.schedule.warmup_epochs;
        let peak = self.optim.lr * (run_epochs / w).min(1.0);
        Error::config(
            "schedule.warmup_epochs",
            format!(
                "{w} epochs of warmup do not end within the run ({what}, {run_epochs:.3} epochs): the learning rate \
                 would never reach optim.lr = {:e} (at most {peak:.3e}); set schedule.warmup_epochs below the run \
                 length, e.g. --set schedule.warmup_epochs={:.2}",
                self.optim.lr,
                (run_epochs * 0.1).max(0.01)
            ),
        )
    }

    pub fn validate(&self) -> Result<()> {
        if self.epochs == 0 && self.max_steps == 0 {
            return Err(Error::config("epochs", "must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(Error::config("batch_size", "must be at least 1"));
        }
        if !(self.optim.lr > 0.0 && self.optim.lr.is_finite()) {
            return Err(Error::config("optim.lr", "must be a positive number"));
        }
        if !(0.0..1.0).contains(&self.loss.label_smoothing) {
            return Err(Error::config("loss.label_smoothing", "must be in [0, 1)"));
        }
        if self.data.path.is_empty() {
            return Err(Error::config("data.path", "is required (a dataset path, or \"synthetic\")"));
        }
        self.augment.validate()?;
        self.ema.validate()?;
        if !(self.optim.layer_decay > 0.0 && self.optim.layer_decay <= 1.0) {
            return Err(Error::config(
                "optim.layer_decay",
                format!("{} is not in (0, 1] (1 turns layer-wise decay off)", self.optim.layer_decay),
            ));
        }
        if self.init.freeze && self.init.from.is_empty() {
            return Err(Error::config("init.freeze", "freezes pretrained weights: set init.from to a checkpoint"));
        }
        if self.init.freeze && self.model.drop_path > 0.0 {
            return Err(Error::config(
                "model.drop_path",
                "init.freeze trains the head only, on the frozen trunk's features: set model.drop_path = 0",
            ));
        }
        if !(0.0..1.0).contains(&self.model.drop_path) {
            return Err(Error::config(
                "model.drop_path",
                format!("{} is not a drop rate in [0, 1) (the last block's rate; 0 turns it off)", self.model.drop_path),
            ));
        }
        if self.task == TaskKind::Cyclegan {
            for (key, on) in [
                ("augment.policy", self.augment.policy != "none"),
                ("augment.erase_prob", self.augment.erase_prob > 0.0),
                ("augment.mixup_alpha", self.augment.mixes()),
                ("augment.repeats", self.augment.repeats != 1 || self.augment.passes != 1),
                ("model.drop_path", self.model.drop_path > 0.0),
                ("ema.decay", self.ema.enabled()),
                ("init.from", !self.init.from.is_empty()),
                ("optim.layer_decay", self.optim.layer_decay != 1.0),
            ] {
                if on {
                    return Err(Error::config(key, "is a classification setting; a CycleGAN run does not use it"));
                }
            }
        }
        if self.precision == Precision::Bf16 && !matches!(self.backend, Backend::Tch | Backend::TchCuda) {
            // No silent fp32 fallback: say what runs where.
            return Err(Error::config(
                "precision",
                format!(
                    "bf16 mixed precision runs on LibTorch (backend = \"tch\" or \"tch-cuda\"), not on {}; use precision = \"fp32\" there",
                    self.backend
                ),
            ));
        }
        // A warmup the run never finishes keeps the LR below optim.lr throughout: refuse it
        // (runs limited by max_steps are checked by the loop, which knows the steps per epoch).
        if self.max_steps == 0 && self.schedule.warmup_epochs > 0.0 && self.schedule.warmup_epochs >= self.epochs as f64 {
            return Err(self.warmup_error(self.epochs as f64, &format!("epochs = {}", self.epochs)));
        }
        if self.schedule.milestones.iter().any(|m| !(0.0..=1.0).contains(m)) {
            return Err(Error::config("schedule.milestones", "milestones are fractions of the epochs, in [0, 1]"));
        }
        if self.schedule.name == ScheduleName::Linear {
            let d = self.schedule.decay_epochs;
            if d == 0 || (self.max_steps == 0 && d > self.epochs) {
                return Err(Error::config(
                    "schedule.decay_epochs",
                    format!(
                        "{d} epochs of decay with epochs = {}: the linear schedule decays over the last \
                         decay_epochs epochs of the run, so it needs 1 <= decay_epochs <= epochs \
                         (CycleGAN's 100 + 100 is epochs = 200, decay_epochs = 100)",
                        self.epochs
                    ),
                ));
            }
        }
        if self.task == TaskKind::Cyclegan {
            self.validate_cyclegan()?;
        }
        Ok(())
    }
}
