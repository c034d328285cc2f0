//! The `[augment]` section: what the loader does to each training image and
//! batch, and its translation into the pieces that do it ([`AugmentPlan`]):
//! the policy ([`super::autoaugment`]), random erasing ([`super::erase`]),
//! Mixup / CutMix ([`super::mix`]) and the epoch's sampler ([`super::sampler`]).

use serde::{Deserialize, Serialize};

use super::autoaugment::Policy;
use super::erase::{EraseFill, EraseVariant, RandomErasing};
use super::mix::{BoxRule, Mixup, Partner};
use crate::{Error, Result};

/// Augmentations applied to training batches, in this order: resize to
/// `image_size`, random crop with zero padding, flips, the policy
/// (AutoAugment, RandAugment or TrivialAugment), normalisation, random
/// erasing; then per batch Mixup or CutMix. `repeats` and `passes` shape the
/// epoch (docs/CONFIG.md defines every key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Augment {
    /// Pixels of zero padding for the random crop; 0 disables cropping.
    pub crop_padding: usize,
    pub hflip: f32,
    pub vflip: f32,
    /// `none`, `autoaugment-cifar10`, `autoaugment-imagenet`, `autoaugment-svhn`,
    /// `randaugment`, `trivialaugment` (torchvision's operations and magnitudes).
    pub policy: String,
    /// RandAugment: operations per image, magnitude (of `randaugment_bins` bins),
    /// magnitude noise (timm's `mstd`; 0: fixed), number of bins.
    pub randaugment_ops: usize,
    pub randaugment_magnitude: f64,
    pub randaugment_mstd: f64,
    pub randaugment_bins: usize,
    /// Random erasing (Zhong et al.; timm's `RandomErasing`), after normalisation.
    pub erase_prob: f64,
    pub erase_min_area: f64,
    pub erase_max_area: f64,
    pub erase_min_aspect: f64,
    /// `const` (zeros), `rand` (normal per channel), `pixel` (normal per pixel),
    /// `value` (`erase_value` per channel, e.g. the dataset mean as Lee et al.).
    pub erase_mode: String,
    pub erase_value: Vec<f32>,
    /// `timm` (10 attempts, log-uniform aspect) or `lee` (Lee et al.'s code: 100
    /// attempts, uniform aspect).
    pub erase_variant: String,
    /// Mixup / CutMix (timm's `Mixup`): Beta parameters (0: off), the probability
    /// that a batch is mixed, that a mixed batch uses CutMix when both are on,
    /// and each image's partner (`flip`: image n-1-i as timm, `permutation`: a random
    /// permutation as Lee et al.).
    pub mixup_alpha: f64,
    pub cutmix_alpha: f64,
    pub mix_prob: f64,
    pub switch_prob: f64,
    pub mix_partner: String,
    /// Repeated augmentation (DeiT's `RASampler`): each selected image appears this
    /// many times per epoch with different augmentations, the epoch length unchanged.
    pub repeats: usize,
    /// Passes over the training set per epoch, each a fresh permutation (Lee et al.'s
    /// sampler with `len_factor = 3`, which their code calls repeated augmentation).
    pub passes: usize,
}

impl Default for Augment {
    fn default() -> Self {
        Augment::none()
    }
}

impl Augment {
    pub fn none() -> Self {
        Augment {
            crop_padding: 0,
            hflip: 0.0,
            vflip: 0.0,
            policy: "none".into(),
            randaugment_ops: 2,
            randaugment_magnitude: 9.0,
            randaugment_mstd: 0.0,
            randaugment_bins: 31,
            erase_prob: 0.0,
            erase_min_area: 0.02,
            erase_max_area: 1.0 / 3.0,
            erase_min_aspect: 0.3,
            erase_mode: "const".into(),
            erase_value: Vec::new(),
            erase_variant: "timm".into(),
            mixup_alpha: 0.0,
            cutmix_alpha: 0.0,
            mix_prob: 1.0,
            switch_prob: 0.5,
            mix_partner: "flip".into(),
            repeats: 1,
            passes: 1,
        }
    }

    /// The paper's recipe: vertical and horizontal flips with probability 0.33.
    pub fn paper() -> Self {
        Augment { hflip: 0.33, vflip: 0.33, ..Augment::none() }
    }

    /// Random crop with 4 px padding and horizontal flips (the standard CIFAR recipe).
    pub fn standard() -> Self {
        Augment { crop_padding: 4, hflip: 0.5, ..Augment::none() }
    }

    /// Checks every key; errors name it (`augment.<key>`) and say what was expected.
    pub fn validate(&self) -> Result<()> {
        let prob = |key: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(Error::config(format!("augment.{key}"), format!("{p} is not a probability in [0, 1]")))
            }
        };
        prob("hflip", self.hflip as f64)?;
        prob("vflip", self.vflip as f64)?;
        prob("erase_prob", self.erase_prob)?;
        prob("mix_prob", self.mix_prob)?;
        prob("switch_prob", self.switch_prob)?;
        for (key, v) in [
            ("mixup_alpha", self.mixup_alpha),
            ("cutmix_alpha", self.cutmix_alpha),
            ("randaugment_magnitude", self.randaugment_magnitude),
            ("randaugment_mstd", self.randaugment_mstd),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(Error::config(format!("augment.{key}"), format!("{v} must be a non-negative number")));
            }
        }
        if self.randaugment_bins < 2 || self.randaugment_magnitude > (self.randaugment_bins - 1) as f64 {
            return Err(Error::config(
                "augment.randaugment_magnitude",
                format!(
                    "magnitude {} of {} bins: needs randaugment_bins >= 2 and a magnitude in [0, bins - 1]",
                    self.randaugment_magnitude, self.randaugment_bins
                ),
            ));
        }
        if !(0.0 < self.erase_min_area && self.erase_min_area <= self.erase_max_area && self.erase_max_area < 1.0) {
            return Err(Error::config(
                "augment.erase_max_area",
                format!(
                    "erase_min_area = {} and erase_max_area = {}: need 0 < min <= max < 1 (fractions of the image)",
                    self.erase_min_area, self.erase_max_area
                ),
            ));
        }
        if !(self.erase_min_aspect > 0.0 && self.erase_min_aspect <= 1.0) {
            return Err(Error::config("augment.erase_min_aspect", format!("{} is not in (0, 1]", self.erase_min_aspect)));
        }
        if self.repeats == 0 || self.passes == 0 {
            return Err(Error::config("augment.repeats", "augment.repeats and augment.passes must be at least 1"));
        }
        if self.repeats > 1 && self.passes > 1 {
            return Err(Error::config(
                "augment.passes",
                "choose one: repeats (DeiT's repeated augmentation) or passes (Lee et al.'s longer epochs)",
            ));
        }
        self.plan(1, 0.0).map(|_| ())
    }

    /// The pieces that carry out this section, for a dataset of `num_classes`
    /// classes and the run's label smoothing (folded into Mixup's soft targets).
    pub fn plan(&self, num_classes: usize, label_smoothing: f64) -> Result<AugmentPlan> {
        let policy = Policy::parse(
            &self.policy,
            self.randaugment_ops,
            self.randaugment_magnitude,
            self.randaugment_mstd,
            self.randaugment_bins,
        )
        .map_err(|e| Error::config("augment.policy", e.to_string()))?;
        let policy = (!policy.is_none()).then_some(policy);
        let fill = match self.erase_mode.as_str() {
            "const" => EraseFill::Const,
            "rand" => EraseFill::Rand,
            "pixel" => EraseFill::Pixel,
            "value" if !self.erase_value.is_empty() => EraseFill::Value(self.erase_value.clone()),
            "value" => {
                return Err(Error::config(
                    "augment.erase_value",
                    "erase_mode = \"value\" needs the fill per channel, e.g. erase_value = [0.4914, 0.4822, 0.4465]",
                ))
            }
            other => {
                return Err(Error::config(
                    "augment.erase_mode",
                    format!("unknown mode {other:?}; expected const, rand, pixel or value"),
                ))
            }
        };
        let variant = match self.erase_variant.as_str() {
            "timm" => EraseVariant::Timm,
            "lee" => EraseVariant::Lee,
            other => {
                return Err(Error::config("augment.erase_variant", format!("unknown variant {other:?}; expected timm or lee")))
            }
        };
        let erasing = (self.erase_prob > 0.0).then(|| RandomErasing {
            probability: self.erase_prob,
            min_area: self.erase_min_area,
            max_area: self.erase_max_area,
            min_aspect: self.erase_min_aspect,
            max_aspect: 1.0 / self.erase_min_aspect,
            min_count: 1,
            max_count: 1,
            fill,
            variant,
        });
        let partner = match self.mix_partner.as_str() {
            "flip" => Partner::Flip,
            "permutation" => Partner::Permutation,
            other => {
                return Err(Error::config(
                    "augment.mix_partner",
                    format!("unknown partner {other:?}; expected flip (timm) or permutation (Lee et al.)"),
                ))
            }
        };
        let mixup = self.mixes().then_some(Mixup {
            mixup_alpha: self.mixup_alpha,
            cutmix_alpha: self.cutmix_alpha,
            cutmix_minmax: None,
            prob: self.mix_prob,
            switch_prob: self.switch_prob,
            correct_lam: true,
            label_smoothing,
            num_classes,
            partner,
            // timm's box with the flip partner, the original CutMix code's with a permutation.
            box_rule: match partner {
                Partner::Flip => BoxRule::Timm,
                Partner::Permutation => BoxRule::Symmetric,
            },
        });
        Ok(AugmentPlan { policy, erasing, mixup, repeats: self.repeats, passes: self.passes })
    }

    /// Whether batches carry soft targets (Mixup or CutMix on).
    pub fn mixes(&self) -> bool {
        self.mix_prob > 0.0 && (self.mixup_alpha > 0.0 || self.cutmix_alpha > 0.0)
    }
}

/// What the loader runs for an [`Augment`] section (see [`Augment::plan`]).
#[derive(Clone, Debug)]
pub struct AugmentPlan {
    /// `None`: no policy.
    pub policy: Option<Policy>,
    pub erasing: Option<RandomErasing>,
    pub mixup: Option<Mixup>,
    pub repeats: usize,
    pub passes: usize,
}

#[cfg(test)]
mod tests {
    use crate::config::ExperimentConfig;

    /// The error of a synthetic-data config with `set` overrides.
    fn error(set: &[&str]) -> String {
        let mut o = vec!["data.path=synthetic".to_string()];
        o.extend(set.iter().map(|s| s.to_string()));
        ExperimentConfig::load(None, &o).unwrap_err().to_string()
    }

    #[test]
    fn bad_augment_values_are_errors_naming_the_key() {
        for (set, key, says) in [
            ("augment.erase_prob=1.5", "augment.erase_prob", "probability"),
            ("augment.mix_prob=-0.1", "augment.mix_prob", "probability"),
            ("augment.switch_prob=2", "augment.switch_prob", "probability"),
            ("augment.hflip=1.1", "augment.hflip", "probability"),
            ("augment.policy=autoaugment-cifar", "augment.policy", "autoaugment-cifar10"),
            ("augment.randaugment_magnitude=-1", "augment.randaugment_magnitude", "non-negative"),
            ("augment.randaugment_magnitude=31", "augment.randaugment_magnitude", "bins"),
            ("augment.mixup_alpha=-1", "augment.mixup_alpha", "non-negative"),
            ("augment.erase_mode=zero", "augment.erase_mode", "const, rand, pixel or value"),
            ("augment.erase_mode=value", "augment.erase_value", "per channel"),
            ("augment.erase_variant=deit", "augment.erase_variant", "timm or lee"),
            ("augment.mix_partner=shuffle", "augment.mix_partner", "permutation"),
            ("augment.erase_max_area=1.2", "augment.erase_max_area", "0 < min <= max < 1"),
            ("augment.repeats=0", "augment.repeats", "at least 1"),
            ("model.drop_path=1.0", "model.drop_path", "[0, 1)"),
            ("ema.decay=1.0", "ema.decay", "[0, 1)"),
        ] {
            let e = error(&[set]);
            assert!(e.contains(key) && e.contains(says), "{set}: {e}");
        }
        let e = error(&["augment.repeats=3", "augment.passes=3"]);
        assert!(e.contains("augment.passes"), "{e}");
        // A classification key in a CycleGAN run is refused rather than ignored.
        let e = error(&["task=cyclegan", "data.path=somewhere", "model.drop_path=0.1"]);
        assert!(e.contains("model.drop_path") && e.contains("CycleGAN"), "{e}");
    }

    #[test]
    fn the_strong_presets_load_and_plan() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        for name in ["strong-cifar10.toml", "strong-cifar100.toml"] {
            let c = ExperimentConfig::load(Some(&root.join(name)), &[]).unwrap();
            let plan = c.augment.plan(10, c.loss.label_smoothing).unwrap();
            assert!(plan.policy.is_some() && plan.erasing.is_some() && plan.mixup.is_some(), "{name}");
            assert_eq!((plan.repeats, c.model.drop_path, c.ema.decay), (3, 0.1, 0.9998), "{name}");
        }
    }
}
