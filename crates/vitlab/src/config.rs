//! Experiment configuration: one TOML file (data, not code) plus `--set key=value`
//! overrides. Every key is documented in docs/CONFIG.md; unknown keys and bad
//! values are errors that name the key. [`flatten_config`] gives a config's
//! flat `key = value` view, which reports and sweeps compare runs by.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::backend::Backend;
use crate::data::{Augment, Normalize};
use crate::models::{AttnScale, BlockVariant, DropPathSchedule, HeadKind, Init, ModelConfig, Pool, Preset, Size};
use crate::{Error, Result};

/// The model section: a block variant and size preset, plus optional overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelSection {
    pub block: BlockVariant,
    pub size: Size,
    pub image_size: usize,
    pub patch_size: usize,
    pub preset: Preset,
    /// Defaults to the dataset's class count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_classes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<Pool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<HeadKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attn_scale: Option<AttnScale>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_norm: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qkv_bias: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm_eps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm_center: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init: Option<Init>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dim: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mlp_dim: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heads: Option<usize>,
    /// Stochastic depth: the drop rate of the last block (training only; 0: off).
    pub drop_path: f64,
    /// How the rate grows over the blocks: `linear` (timm) or `uniform` (Lee et al.).
    pub drop_path_schedule: DropPathSchedule,
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            block: BlockVariant::Vit,
            size: Size::Tiny,
            image_size: 32,
            patch_size: 4,
            preset: Preset::Default,
            num_classes: None,
            pool: None,
            head: None,
            attn_scale: None,
            final_norm: None,
            qkv_bias: None,
            norm_eps: None,
            norm_center: None,
            init: None,
            depth: None,
            dim: None,
            mlp_dim: None,
            heads: None,
            drop_path: 0.0,
            drop_path_schedule: DropPathSchedule::Linear,
        }
    }
}

impl ModelSection {
    /// The resolved model for a dataset with `classes` classes and `channels` channels.
    pub fn resolve(&self, classes: usize, channels: usize) -> Result<ModelConfig> {
        let mut c = ModelConfig::new(self.block, self.size)
            .with_preset(self.preset)
            .with_image(self.image_size, self.patch_size)
            .with_classes(self.num_classes.unwrap_or(classes));
        c.channels = channels;
        macro_rules! over {
            ($($field:ident),*) => { $( if let Some(v) = self.$field { c.$field = v; } )* };
        }
        over!(pool, head, attn_scale, final_norm, qkv_bias, norm_eps, norm_center, init, depth, dim, mlp_dim, heads);
        c.validate()?;
        Ok(c)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataSection {
    /// A dataset path (any format `vitlab data info` recognises), or
    /// `synthetic` for a generated dataset (see `synthetic_*`).
    pub path: String,
    /// Train on N training images, a seeded class-stratified subset (0: all).
    pub limit: usize,
    /// Images held out from train for validation (stratified, seeded).
    pub val_size: usize,
    /// Validate on the test split, as the paper's code does (warns).
    pub val_on_test: bool,
    /// Loader worker threads.
    pub workers: usize,
    pub normalize: Normalize,
    /// Generated dataset (path = "synthetic"): images per split, classes, side.
    pub synthetic_train: usize,
    pub synthetic_test: usize,
    pub synthetic_classes: usize,
    pub synthetic_size: usize,
}

impl Default for DataSection {
    fn default() -> Self {
        DataSection {
            path: String::new(),
            limit: 0,
            val_size: 5000,
            val_on_test: false,
            workers: 2,
            normalize: Normalize::Cifar,
            synthetic_train: 2000,
            synthetic_test: 500,
            synthetic_classes: 10,
            synthetic_size: 32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimName {
    Adamw,
    Adam,
    Sgd,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimSection {
    pub name: OptimName,
    pub lr: f64,
    /// AdamW: decoupled (p -= lr * wd * p); Adam and SGD: L2 added to the gradient (PyTorch semantics).
    pub weight_decay: f64,
    pub betas: [f64; 2],
    pub eps: f64,
    /// SGD momentum (0: plain SGD).
    pub momentum: f64,
    pub nesterov: bool,
    /// No weight decay on biases, norm scales and the position embedding,
    /// cls token and MAP probe (timm's `filter_bias_and_bn` + `no_weight_decay`).
    pub skip_decay_1d: bool,
}

impl Default for OptimSection {
    fn default() -> Self {
        OptimSection {
            name: OptimName::Adamw,
            lr: 1e-3,
            weight_decay: 1e-4,
            betas: [0.9, 0.999],
            eps: 1e-8,
            momentum: 0.9,
            nesterov: false,
            skip_decay_1d: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleName {
    Constant,
    Multistep,
    Cosine,
    /// Constant, then linear decay towards 0 over the last `decay_epochs` epochs, changing
    /// at epoch boundaries as pytorch-CycleGAN-and-pix2pix's `linear` policy (its
    /// `--n_epochs 100 --n_epochs_decay 100` is `epochs = 200`, `decay_epochs = 100`).
    Linear,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScheduleSection {
    pub name: ScheduleName,
    /// Multistep: epochs, as fractions of the total, after which the LR is multiplied by `gamma`.
    pub milestones: Vec<f64>,
    pub gamma: f64,
    /// Linear warmup from 0 over this many epochs (fractional allowed), for any schedule.
    pub warmup_epochs: f64,
    /// Cosine: the final LR as a fraction of the peak.
    pub min_lr_ratio: f64,
    /// Linear: the epochs of decay at the end of the run (whole epochs).
    pub decay_epochs: usize,
}

impl Default for ScheduleSection {
    fn default() -> Self {
        ScheduleSection {
            name: ScheduleName::Constant,
            milestones: vec![0.3, 0.6, 0.9],
            gamma: 0.5,
            warmup_epochs: 0.0,
            min_lr_ratio: 0.0,
            decay_epochs: 0,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossSection {
    pub label_smoothing: f64,
}

/// Stabilisers, each defined in docs/CONFIG.md; 0 disables.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StabilizerSection {
    /// Clip the global gradient norm (over all parameters) to this value.
    pub clip_grad_norm: f64,
    /// z-loss: coef * mean over the batch of logsumexp(logits)^2 (PaLM).
    pub z_loss: f64,
    /// coef * mean over the batch and classes of logits^2.
    pub logit_l2: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MonitorSection {
    /// Per-block gradient norm, activation RMS and max attention logit every N steps (0: never).
    pub block_every: usize,
    /// Stop as exploded when the max logit exceeds this (0: no threshold).
    pub max_logit: f64,
    /// Stop as exploded when the max |gradient| exceeds this (0: no threshold).
    pub max_grad: f64,
}

impl Default for MonitorSection {
    fn default() -> Self {
        MonitorSection { block_every: 50, max_logit: 1e4, max_grad: 1e4 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointSection {
    /// Also write `latest` every N steps within an epoch (0: at epoch ends only).
    pub every_steps: usize,
}

impl Default for CheckpointSection {
    fn default() -> Self {
        CheckpointSection { every_steps: 500 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Bf16,
}

/// What a run trains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    /// An image classifier (`[model]` is the ViT).
    #[default]
    Classify,
    /// Unpaired image-to-image translation: two ViTUnet generators (`[model]`) and two
    /// discriminators trained as CycleGAN (`[cyclegan]`).
    Cyclegan,
}

/// The CycleGAN trainer's settings (docs/CONFIG.md). The generators are `[model]`
/// (block, size, image and patch size, and the dimension overrides), the optimiser
/// `[optim]` (Adam 2e-4, betas (0.5, 0.999) in configs/cyclegan-*.toml), the schedule
/// `[schedule]` (`linear`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CycleganSection {
    pub discriminator: crate::models::DiscriminatorKind,
    /// Weight of the L1 cycle-consistency terms.
    pub lambda_cycle: f64,
    /// Weight of the identity terms, relative to `lambda_cycle` (0 disables them).
    pub lambda_identity: f64,
    /// Generated images the discriminators replay (0: no history pool).
    pub pool_size: usize,
    /// Training images are resized to this side, then randomly cropped to
    /// `model.image_size` (0: resized to `model.image_size`, no crop).
    pub load_size: usize,
    /// Random horizontal flips of training images.
    pub flip: bool,
    /// The generators' CNN refiner width (64 in the paper).
    pub refiner_width: usize,
    /// FID feature layer (64, 192, 768 or 2048; the paper's torchmetrics FID uses 64).
    pub fid_feature: usize,
    /// FID preprocessing: pytorch-fid, torch-fidelity or torchmetrics.
    pub fid_preprocess: String,
    /// Measure FID_A / FID_B every N epochs and after the last (0: never).
    pub fid_every: usize,
    /// Test images per domain FID uses (0: all).
    pub fid_images: usize,
    /// The FID weights file ("": the usual places, see docs/FID.md).
    pub fid_weights: String,
    /// Test images per domain in the sample grids.
    pub samples: usize,
    /// Sample grids every this fraction of the training steps (0: none).
    pub sample_every: f64,
}

impl Default for CycleganSection {
    fn default() -> Self {
        CycleganSection {
            discriminator: crate::models::DiscriminatorKind::Patchgan,
            lambda_cycle: 10.0,
            lambda_identity: 0.5,
            pool_size: 50,
            load_size: 0,
            flip: true,
            refiner_width: 64,
            fid_feature: 64,
            fid_preprocess: "torchmetrics".into(),
            fid_every: 1,
            fid_images: 0,
            fid_weights: String::new(),
            samples: 8,
            sample_every: 0.1,
        }
    }
}

/// `[ema]`: the weight average (docs/CONFIG.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmaSection {
    /// The decay per optimiser step (0: no EMA). timm's default is 0.9998; DeiT's 0.99996.
    pub decay: f64,
    /// Ramp the decay up from 0 as timm's `use_warmup` (`1 - (1 + t / gamma)^-power`).
    pub warmup: bool,
    pub warmup_gamma: f64,
    pub warmup_power: f64,
    /// The smallest decay the warmup may give.
    pub min_decay: f64,
}

impl Default for EmaSection {
    fn default() -> Self {
        EmaSection { decay: 0.0, warmup: false, warmup_gamma: 1.0, warmup_power: 2.0 / 3.0, min_decay: 0.0 }
    }
}

impl EmaSection {
    pub fn enabled(&self) -> bool {
        self.decay > 0.0
    }

    /// The decay of update number `t` (1-based).
    pub fn decay_at(&self, t: u64) -> f64 {
        let t = t.saturating_sub(1);
        if t == 0 {
            return 0.0;
        }
        if self.warmup {
            let d = 1.0 - (1.0 + t as f64 / self.warmup_gamma).powf(-self.warmup_power);
            d.min(self.decay).max(self.min_decay)
        } else {
            self.decay
        }
    }

    pub fn validate(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.decay) {
            return Err(Error::config("ema.decay", format!("{} is not in [0, 1) (0 turns the EMA off)", self.decay)));
        }
        if !(0.0..1.0).contains(&self.min_decay) || self.min_decay > self.decay.max(0.0) && self.enabled() {
            return Err(Error::config("ema.min_decay", "must be in [0, ema.decay]"));
        }
        if !(self.warmup_gamma > 0.0 && self.warmup_power > 0.0) {
            return Err(Error::config("ema.warmup_gamma", "ema.warmup_gamma and ema.warmup_power must be positive"));
        }
        Ok(())
    }
}

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
        }
    }
}

/// Parses `value` as a TOML value (number, bool, array, quoted string), or a bare string.
fn parse_value(value: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        Err(_) => toml::Value::String(value.to_string()),
    }
}

/// Sets `a.b.c = value` in a TOML table, creating tables on the way.
pub fn set_key(table: &mut toml::Table, key: &str, value: &str) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config(key, "not a valid key (expected e.g. optim.lr)"));
    }
    let mut t = table;
    for p in &parts[..parts.len() - 1] {
        let entry = t.entry(p.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = entry.as_table_mut().ok_or_else(|| Error::config(key, format!("{p} is a value, not a section")))?;
    }
    t.insert(parts[parts.len() - 1].to_string(), parse_value(value));
    Ok(())
}

/// Splits a `key=value` override.
pub fn parse_override(s: &str) -> Result<(String, String)> {
    let (k, v) = s.split_once('=').ok_or_else(|| Error::config(s, "an override must look like key=value, e.g. optim.lr=3e-4"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

/// Leaf keys of a TOML table, dotted, with values as text (strings unquoted).
pub fn flatten(table: &toml::Table) -> BTreeMap<String, String> {
    fn walk(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (k, v) in t {
            let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            match v {
                toml::Value::Table(inner) => walk(&key, inner, out),
                toml::Value::String(s) => {
                    out.insert(key, s.clone());
                }
                other => {
                    out.insert(key, other.to_string());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", table, &mut out);
    out
}

/// Leaf keys of a resolved config, as [`flatten`] gives them: the flat view by
/// which reports group runs into cells and sweeps compare a run's saved config.
pub fn flatten_config(config: &ExperimentConfig) -> BTreeMap<String, String> {
    let table: toml::Table = toml::from_str(&config.to_toml()).expect("config round-trips");
    flatten(&table)
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
            ] {
                if on {
                    return Err(Error::config(key, "is a classification setting; a CycleGAN run does not use it"));
                }
            }
        }
        if self.precision == Precision::Bf16 {
            // No silent fp32 fallback: say what runs where.
            return Err(Error::config(
                "precision",
                format!(
                    "bf16 mixed precision is not available on the {} backend yet; the CPU backends train in fp32 (precision = \"fp32\")",
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
