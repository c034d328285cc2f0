//! The sections of an experiment config (`[model]`, `[data]`, `[optim]`, ...):
//! their fields, defaults and the checks that need only the section itself.

use serde::{Deserialize, Serialize};

use crate::data::Normalize;
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
    /// Layer-wise learning-rate decay (BEiT, timm's `layer_decay`): the head's
    /// parameters train at `lr`, block i's at `lr * layer_decay^(depth - i)`, the
    /// embeddings at `lr * layer_decay^(depth + 1)`. 1: off.
    pub layer_decay: f64,
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
            layer_decay: 1.0,
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

impl Precision {
    /// The dtype of the matrix products under autocast (models/precision.rs); `None` for fp32.
    pub fn compute_dtype(self) -> Option<burn::tensor::FloatDType> {
        match self {
            Precision::Fp32 => None,
            Precision::Bf16 => Some(burn::tensor::FloatDType::BF16),
        }
    }
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

/// `[init]`: where a classifier's weights start (docs/CONFIG.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InitSection {
    /// Pretrained weights: a vitlab run directory or checkpoint, or a state dict
    /// (safetensors or `.pth`) in vitlab's, timm's or the paper code's layout.
    /// Empty: random initialisation.
    pub from: String,
    /// Train the head only (`head*`), the rest kept as loaded: linear probing.
    pub freeze: bool,
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
