//! torchvision's policy augmentations in pure Rust: AutoAugment (cifar10, imagenet
//! and svhn policies), RandAugment (with timm's magnitude noise) and
//! TrivialAugmentWide, on vitlab's planar CHW `u8` images.
//!
//! [`apply`] runs one [`Op`] exactly as torchvision 0.24's `_apply_op` does on a PIL
//! image (NEAREST interpolation, fill 0), so a vitlab run sees the same pixels as
//! the usual PyTorch CIFAR pipeline; `tools/make_augment_fixtures.py` makes the
//! golden outputs the tests compare against. [`Space`] holds torchvision's
//! magnitude bins, [`Policy`] the policies and their config names, and
//! [`apply_policy`] draws a policy's operations from vitlab's [`Rng`] and applies them.
//! The draws follow torchvision's distributions, not torch's random stream.
//!
//! Layout: this file (operations, magnitudes, policies), `ops.rs` (the pixel
//! kernels), `tests.rs` (fixture and policy tests).

mod ops;
#[cfg(test)]
mod tests;

use crate::util::rng::Rng;
use std::cell::RefCell;
use std::fmt;
use std::str::FromStr;

/// One augmentation operation (torchvision's op names in snake case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Identity,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Brightness,
    Color,
    Contrast,
    Sharpness,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
    Invert,
}

impl Op {
    pub const ALL: [Op; 15] = [
        Op::Identity,
        Op::ShearX,
        Op::ShearY,
        Op::TranslateX,
        Op::TranslateY,
        Op::Rotate,
        Op::Brightness,
        Op::Color,
        Op::Contrast,
        Op::Sharpness,
        Op::Posterize,
        Op::Solarize,
        Op::AutoContrast,
        Op::Equalize,
        Op::Invert,
    ];

    /// The config / CLI name: `identity`, `shear_x`, ..., `autocontrast`, `invert`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Identity => "identity",
            Op::ShearX => "shear_x",
            Op::ShearY => "shear_y",
            Op::TranslateX => "translate_x",
            Op::TranslateY => "translate_y",
            Op::Rotate => "rotate",
            Op::Brightness => "brightness",
            Op::Color => "color",
            Op::Contrast => "contrast",
            Op::Sharpness => "sharpness",
            Op::Posterize => "posterize",
            Op::Solarize => "solarize",
            Op::AutoContrast => "autocontrast",
            Op::Equalize => "equalize",
            Op::Invert => "invert",
        }
    }

    /// Whether torchvision negates this op's magnitude with probability 1/2.
    pub fn signed(self) -> bool {
        use Op::*;
        matches!(self, ShearX | ShearY | TranslateX | TranslateY | Rotate | Brightness | Color | Contrast | Sharpness)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = AugmentError;
    fn from_str(s: &str) -> Result<Op, AugmentError> {
        Op::ALL.into_iter().find(|op| op.name() == s).ok_or_else(|| AugmentError::UnknownOp(s.to_string()))
    }
}

/// A bad op or policy name, or a parameter out of range. The messages list the
/// accepted names; callers add the config key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AugmentError {
    UnknownOp(String),
    UnknownPolicy(String),
    /// A parameter (by its [`RandAugment`] / [`TrivialAugmentWide`] field name) and why.
    Invalid(&'static str, String),
}

impl fmt::Display for AugmentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AugmentError::UnknownOp(s) => {
                let names: Vec<_> = Op::ALL.iter().map(|op| op.name()).collect();
                write!(f, "unknown augmentation op `{s}`; accepted: {}", names.join(", "))
            }
            AugmentError::UnknownPolicy(s) => {
                write!(f, "unknown augmentation policy `{s}`; accepted: {}", Policy::NAMES.join(", "))
            }
            AugmentError::Invalid(param, why) => write!(f, "{param}: {why}"),
        }
    }
}

impl std::error::Error for AugmentError {}

/// The message, for error types that take a `String` (`Error::config(key, e)`).
impl From<AugmentError> for String {
    fn from(e: AugmentError) -> String {
        e.to_string()
    }
}

/// Applies `op` to the `channels x h x w` image `img` into `out` (resized to fit).
///
/// `magnitude` is the op's value as torchvision's `_apply_op` takes it, sign
/// included: the shear factor (ShearX/Y), pixels (TranslateX/Y, truncated to an
/// integer), degrees counter-clockwise (Rotate), the enhancement factor minus 1
/// (Brightness, Color, Contrast, Sharpness), bits kept (Posterize, truncated), the
/// threshold (Solarize); ignored by the others. One channel is treated as PIL's
/// mode "L" and three as "RGB"; Color and Contrast leave images with another
/// channel count unchanged, the other ops work per channel.
pub fn apply(op: Op, magnitude: f32, img: &[u8], channels: usize, h: usize, w: usize, out: &mut Vec<u8>) {
    assert_eq!(img.len(), channels * h * w, "image is not {channels}x{h}x{w}");
    out.clear();
    out.resize(img.len(), 0);
    let m = magnitude as f64;
    let hw = h * w;
    match op {
        Op::Identity => out.copy_from_slice(img),
        Op::ShearX => ops::shear(img, channels, h, w, m, true, out),
        Op::ShearY => ops::shear(img, channels, h, w, m, false, out),
        Op::TranslateX => ops::translate(img, channels, h, w, m as i64, 0, out),
        Op::TranslateY => ops::translate(img, channels, h, w, 0, m as i64, out),
        Op::Rotate => ops::rotate(img, channels, h, w, m, out),
        Op::Brightness => ops::brightness(img, 1.0 + m, out),
        Op::Color => ops::color(img, channels, hw, 1.0 + m, out),
        Op::Contrast => ops::contrast(img, channels, hw, 1.0 + m, out),
        Op::Sharpness => ops::sharpness(img, channels, h, w, 1.0 + m, out),
        Op::Posterize => ops::posterize(img, m as i64, out),
        Op::Solarize => ops::solarize(img, m, out),
        Op::AutoContrast => ops::autocontrast(img, channels, hw, out),
        Op::Equalize => ops::equalize(img, channels, hw, out),
        Op::Invert => ops::invert(img, out),
    }
}

/// torchvision's magnitude tables: `Standard` is `_augmentation_space(num_bins,
/// image_size)` of AutoAugment (10 bins) and RandAugment, `Wide` is
/// TrivialAugmentWide's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Standard,
    Wide,
}

impl Space {
    /// The ops RandAugment (`Standard`) and TrivialAugmentWide (`Wide`) choose from,
    /// in torchvision's order (both the same 14: AutoAugment's without Invert, plus Identity).
    pub const OPS: [Op; 14] = [
        Op::Identity,
        Op::ShearX,
        Op::ShearY,
        Op::TranslateX,
        Op::TranslateY,
        Op::Rotate,
        Op::Brightness,
        Op::Color,
        Op::Contrast,
        Op::Sharpness,
        Op::Posterize,
        Op::Solarize,
        Op::AutoContrast,
        Op::Equalize,
    ];

    /// `(start, end)` of the `torch.linspace` an op's bins come from (f32, as torch
    /// converts them); None for Posterize and the ops without a magnitude.
    fn line(self, op: Op, h: usize, w: usize) -> Option<(f32, f32)> {
        let (standard, wide) = match op {
            Op::ShearX | Op::ShearY => (0.3, 0.99),
            Op::TranslateX => (150.0 / 331.0 * w as f64, 32.0),
            Op::TranslateY => (150.0 / 331.0 * h as f64, 32.0),
            Op::Rotate => (30.0, 135.0),
            Op::Brightness | Op::Color | Op::Contrast | Op::Sharpness => (0.9, 0.99),
            Op::Solarize => return Some((255.0, 0.0)),
            _ => return None,
        };
        let end = if self == Space::Wide { wide } else { standard };
        Some((0.0, end as f32))
    }

    /// Posterize's bits are `8 - round(i / ((num_bins - 1) / D))`.
    fn posterize_divisor(self) -> f64 {
        if self == Space::Wide {
            6.0
        } else {
            4.0
        }
    }

    /// The (unsigned) magnitude of bin `bin` of `num_bins` for an `h x w` image,
    /// bit-identical to torchvision's float32 tables; 0 for ops without a magnitude.
    pub fn magnitude(self, op: Op, bin: usize, num_bins: usize, h: usize, w: usize) -> f32 {
        assert!(num_bins >= 2 && bin < num_bins, "bin {bin} of {num_bins}");
        if let Some((start, end)) = self.line(op, h, w) {
            // torch.linspace on CPU: an f32 step, then start + step * i for the first
            // half and end - step * (n - 1 - i) for the second, rounded to f32 once
            // (checked bit-identical to torch 2.9 for 2..90 bins).
            let step = ((end - start) / (num_bins - 1) as f32) as f64;
            return if bin < num_bins / 2 {
                (start as f64 + step * bin as f64) as f32
            } else {
                (end as f64 - step * (num_bins - 1 - bin) as f64) as f32
            };
        }
        if op == Op::Posterize {
            // torch: int64 arange / python float, in f32, rounded half to even.
            let d = ((num_bins - 1) as f64 / self.posterize_divisor()) as f32;
            return 8.0 - (bin as f32 / d).round_ties_even();
        }
        0.0
    }

    /// The magnitude at a fractional bin `level` in [0, num_bins - 1] (RandAugment
    /// with magnitude noise): the same line evaluated between bins, equal to
    /// [`Space::magnitude`] at whole levels.
    pub fn magnitude_at(self, op: Op, level: f64, num_bins: usize, h: usize, w: usize) -> f32 {
        if level.fract() == 0.0 {
            return self.magnitude(op, level as usize, num_bins, h, w);
        }
        let t = level / (num_bins - 1) as f64;
        match (self.line(op, h, w), op) {
            (Some((start, end)), _) => (start as f64 + (end as f64 - start as f64) * t) as f32,
            (None, Op::Posterize) => 8.0 - (t * self.posterize_divisor()).round_ties_even() as f32,
            _ => 0.0,
        }
    }
}

/// AutoAugment's learned policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoAugmentPolicy {
    Cifar10,
    Imagenet,
    Svhn,
}

/// One step of a sub-policy: the op, the probability of applying it, and its
/// magnitude bin of 10 (None for AutoContrast, Equalize, Invert).
pub type Step = (Op, f32, Option<u8>);

/// The random decisions of one AutoAugment call: the sub-policy, and per step the
/// uniform draw (the step runs when it is <= the step's probability) and whether a
/// signed magnitude is negated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub sub: usize,
    pub probs: [f32; 2],
    pub negate: [bool; 2],
}

impl AutoAugmentPolicy {
    /// torchvision's sub-policy table (`AutoAugment._get_policies`).
    pub fn subpolicies(self) -> &'static [[Step; 2]; 25] {
        use Op::*;
        const N: Option<u8> = None;
        static CIFAR10: [[Step; 2]; 25] = [
            [(Invert, 0.1, N), (Contrast, 0.2, Some(6))],
            [(Rotate, 0.7, Some(2)), (TranslateX, 0.3, Some(9))],
            [(Sharpness, 0.8, Some(1)), (Sharpness, 0.9, Some(3))],
            [(ShearY, 0.5, Some(8)), (TranslateY, 0.7, Some(9))],
            [(AutoContrast, 0.5, N), (Equalize, 0.9, N)],
            [(ShearY, 0.2, Some(7)), (Posterize, 0.3, Some(7))],
            [(Color, 0.4, Some(3)), (Brightness, 0.6, Some(7))],
            [(Sharpness, 0.3, Some(9)), (Brightness, 0.7, Some(9))],
            [(Equalize, 0.6, N), (Equalize, 0.5, N)],
            [(Contrast, 0.6, Some(7)), (Sharpness, 0.6, Some(5))],
            [(Color, 0.7, Some(7)), (TranslateX, 0.5, Some(8))],
            [(Equalize, 0.3, N), (AutoContrast, 0.4, N)],
            [(TranslateY, 0.4, Some(3)), (Sharpness, 0.2, Some(6))],
            [(Brightness, 0.9, Some(6)), (Color, 0.2, Some(8))],
            [(Solarize, 0.5, Some(2)), (Invert, 0.0, N)],
            [(Equalize, 0.2, N), (AutoContrast, 0.6, N)],
            [(Equalize, 0.2, N), (Equalize, 0.6, N)],
            [(Color, 0.9, Some(9)), (Equalize, 0.6, N)],
            [(AutoContrast, 0.8, N), (Solarize, 0.2, Some(8))],
            [(Brightness, 0.1, Some(3)), (Color, 0.7, Some(0))],
            [(Solarize, 0.4, Some(5)), (AutoContrast, 0.9, N)],
            [(TranslateY, 0.9, Some(9)), (TranslateY, 0.7, Some(9))],
            [(AutoContrast, 0.9, N), (Solarize, 0.8, Some(3))],
            [(Equalize, 0.8, N), (Invert, 0.1, N)],
            [(TranslateY, 0.7, Some(9)), (AutoContrast, 0.9, N)],
        ];
        static IMAGENET: [[Step; 2]; 25] = [
            [(Posterize, 0.4, Some(8)), (Rotate, 0.6, Some(9))],
            [(Solarize, 0.6, Some(5)), (AutoContrast, 0.6, N)],
            [(Equalize, 0.8, N), (Equalize, 0.6, N)],
            [(Posterize, 0.6, Some(7)), (Posterize, 0.6, Some(6))],
            [(Equalize, 0.4, N), (Solarize, 0.2, Some(4))],
            [(Equalize, 0.4, N), (Rotate, 0.8, Some(8))],
            [(Solarize, 0.6, Some(3)), (Equalize, 0.6, N)],
            [(Posterize, 0.8, Some(5)), (Equalize, 1.0, N)],
            [(Rotate, 0.2, Some(3)), (Solarize, 0.6, Some(8))],
            [(Equalize, 0.6, N), (Posterize, 0.4, Some(6))],
            [(Rotate, 0.8, Some(8)), (Color, 0.4, Some(0))],
            [(Rotate, 0.4, Some(9)), (Equalize, 0.6, N)],
            [(Equalize, 0.0, N), (Equalize, 0.8, N)],
            [(Invert, 0.6, N), (Equalize, 1.0, N)],
            [(Color, 0.6, Some(4)), (Contrast, 1.0, Some(8))],
            [(Rotate, 0.8, Some(8)), (Color, 1.0, Some(2))],
            [(Color, 0.8, Some(8)), (Solarize, 0.8, Some(7))],
            [(Sharpness, 0.4, Some(7)), (Invert, 0.6, N)],
            [(ShearX, 0.6, Some(5)), (Equalize, 1.0, N)],
            [(Color, 0.4, Some(0)), (Equalize, 0.6, N)],
            [(Equalize, 0.4, N), (Solarize, 0.2, Some(4))],
            [(Solarize, 0.6, Some(5)), (AutoContrast, 0.6, N)],
            [(Invert, 0.6, N), (Equalize, 1.0, N)],
            [(Color, 0.6, Some(4)), (Contrast, 1.0, Some(8))],
            [(Equalize, 0.8, N), (Equalize, 0.6, N)],
        ];
        static SVHN: [[Step; 2]; 25] = [
            [(ShearX, 0.9, Some(4)), (Invert, 0.2, N)],
            [(ShearY, 0.9, Some(8)), (Invert, 0.7, N)],
            [(Equalize, 0.6, N), (Solarize, 0.6, Some(6))],
            [(Invert, 0.9, N), (Equalize, 0.6, N)],
            [(Equalize, 0.6, N), (Rotate, 0.9, Some(3))],
            [(ShearX, 0.9, Some(4)), (AutoContrast, 0.8, N)],
            [(ShearY, 0.9, Some(8)), (Invert, 0.4, N)],
            [(ShearY, 0.9, Some(5)), (Solarize, 0.2, Some(6))],
            [(Invert, 0.9, N), (AutoContrast, 0.8, N)],
            [(Equalize, 0.6, N), (Rotate, 0.9, Some(3))],
            [(ShearX, 0.9, Some(4)), (Solarize, 0.3, Some(3))],
            [(ShearY, 0.8, Some(8)), (Invert, 0.7, N)],
            [(Equalize, 0.9, N), (TranslateY, 0.6, Some(6))],
            [(Invert, 0.9, N), (Equalize, 0.6, N)],
            [(Contrast, 0.3, Some(3)), (Rotate, 0.8, Some(4))],
            [(Invert, 0.8, N), (TranslateY, 0.0, Some(2))],
            [(ShearY, 0.7, Some(6)), (Solarize, 0.4, Some(8))],
            [(Invert, 0.6, N), (Rotate, 0.8, Some(4))],
            [(ShearY, 0.3, Some(7)), (TranslateX, 0.9, Some(3))],
            [(ShearX, 0.1, Some(6)), (Invert, 0.6, N)],
            [(Solarize, 0.7, Some(2)), (TranslateY, 0.6, Some(7))],
            [(ShearY, 0.8, Some(4)), (Invert, 0.8, N)],
            [(ShearX, 0.7, Some(9)), (TranslateY, 0.8, Some(3))],
            [(ShearY, 0.8, Some(5)), (AutoContrast, 0.7, N)],
            [(ShearX, 0.7, Some(2)), (Invert, 0.1, N)],
        ];
        match self {
            AutoAugmentPolicy::Cifar10 => &CIFAR10,
            AutoAugmentPolicy::Imagenet => &IMAGENET,
            AutoAugmentPolicy::Svhn => &SVHN,
        }
    }

    /// Draws one call's decisions, always 5 draws in this order: `below(25)` for the
    /// sub-policy, then per step a `uniform()` compared with its probability
    /// (torchvision: `torch.rand(2)`, applied when `<= p`) and a `uniform()`, `< 0.5`
    /// negating a signed magnitude (torchvision: `torch.randint(2, (2,)) == 0`).
    pub fn draw(self, rng: &mut Rng) -> Decision {
        let sub = rng.below(self.subpolicies().len());
        let (p0, n0) = (rng.uniform(), rng.uniform() < 0.5);
        let (p1, n1) = (rng.uniform(), rng.uniform() < 0.5);
        Decision { sub, probs: [p0, p1], negate: [n0, n1] }
    }

    /// Calls `f(op, signed magnitude)` for each step that `d` applies, in order,
    /// with AutoAugment's magnitudes (10 bins at `h x w`).
    pub fn for_each_op(self, d: &Decision, h: usize, w: usize, mut f: impl FnMut(Op, f32)) {
        for (i, &(op, p, bin)) in self.subpolicies()[d.sub].iter().enumerate() {
            if d.probs[i] <= p {
                let m = bin.map_or(0.0, |b| Space::Standard.magnitude(op, b as usize, 10, h, w));
                f(op, if op.signed() && d.negate[i] { -m } else { m });
            }
        }
    }
}

/// RandAugment: `num_ops` ops drawn uniformly from [`Space::OPS`], each at bin
/// `magnitude` of `num_magnitude_bins` (torchvision's `RandAugment`), optionally
/// with timm's magnitude noise: `magnitude_std > 0` draws each op's level from
/// N(magnitude, magnitude_std), `inf` from U[0, magnitude), clipped to
/// [0, num_magnitude_bins - 1] and evaluated between bins ([`Space::magnitude_at`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RandAugment {
    pub num_ops: usize,
    pub magnitude: f64,
    pub magnitude_std: f64,
    pub num_magnitude_bins: usize,
}

impl Default for RandAugment {
    /// torchvision's defaults: 2 ops at magnitude 9 of 31 bins, no noise.
    fn default() -> Self {
        RandAugment { num_ops: 2, magnitude: 9.0, magnitude_std: 0.0, num_magnitude_bins: 31 }
    }
}

impl RandAugment {
    pub fn validate(&self) -> Result<(), AugmentError> {
        let bad = |p, why: String| Err(AugmentError::Invalid(p, why));
        if self.num_magnitude_bins < 2 {
            return bad("num_magnitude_bins", format!("{} must be at least 2", self.num_magnitude_bins));
        }
        let top = (self.num_magnitude_bins - 1) as f64;
        if !(self.magnitude >= 0.0 && self.magnitude <= top) {
            return bad("magnitude", format!("{} is not in [0, {top}] (num_magnitude_bins - 1)", self.magnitude));
        }
        if self.magnitude_std.is_nan() || self.magnitude_std < 0.0 {
            return bad("magnitude_std", format!("{} must be >= 0 (0: off, inf: uniform)", self.magnitude_std));
        }
        Ok(())
    }

    /// Draws and reports the ops of one call; per op, in order: `below(14)` for the
    /// op, the level noise when `magnitude_std > 0` (`normal()`, or `uniform_f64()`
    /// when infinite), and a `uniform()` that negates a signed magnitude when `< 0.5`.
    pub fn for_each_op(&self, h: usize, w: usize, rng: &mut Rng, mut f: impl FnMut(Op, f32)) {
        let top = (self.num_magnitude_bins - 1) as f64;
        for _ in 0..self.num_ops {
            let op = Space::OPS[rng.below(Space::OPS.len())];
            let level = if self.magnitude_std == f64::INFINITY {
                rng.uniform_f64() * self.magnitude
            } else if self.magnitude_std > 0.0 {
                self.magnitude + self.magnitude_std * rng.normal()
            } else {
                self.magnitude
            };
            let m = Space::Standard.magnitude_at(op, level.clamp(0.0, top), self.num_magnitude_bins, h, w);
            let negate = rng.uniform() < 0.5;
            f(op, if op.signed() && negate { -m } else { m });
        }
    }
}

/// TrivialAugmentWide: one op drawn uniformly from [`Space::OPS`] at a uniformly
/// drawn bin of torchvision's wide magnitudes.
#[derive(Clone, Debug, PartialEq)]
pub struct TrivialAugmentWide {
    pub num_magnitude_bins: usize,
}

impl Default for TrivialAugmentWide {
    fn default() -> Self {
        TrivialAugmentWide { num_magnitude_bins: 31 }
    }
}

impl TrivialAugmentWide {
    /// Draws, in order: `below(14)` for the op, `below(num_magnitude_bins)` for the
    /// bin, and a `uniform()` that negates a signed magnitude when `< 0.5`.
    pub fn for_each_op(&self, h: usize, w: usize, rng: &mut Rng, mut f: impl FnMut(Op, f32)) {
        let op = Space::OPS[rng.below(Space::OPS.len())];
        let bin = rng.below(self.num_magnitude_bins);
        let m = Space::Wide.magnitude(op, bin, self.num_magnitude_bins, h, w);
        let negate = rng.uniform() < 0.5;
        f(op, if op.signed() && negate { -m } else { m });
    }
}

/// An augmentation policy, as named in configs (see [`Policy::NAMES`]).
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Policy {
    #[default]
    None,
    AutoAugment(AutoAugmentPolicy),
    RandAugment(RandAugment),
    TrivialAugmentWide(TrivialAugmentWide),
}

impl Policy {
    /// The accepted config names.
    pub const NAMES: [&'static str; 6] =
        ["none", "autoaugment-cifar10", "autoaugment-imagenet", "autoaugment-svhn", "randaugment", "trivialaugment"];

    /// The policy named `name` (one of [`Policy::NAMES`]). `randaugment` takes the
    /// [`RandAugment`] parameters given here (validated; the other policies ignore
    /// them); `trivialaugment` uses 31 bins.
    pub fn parse(
        name: &str,
        num_ops: usize,
        magnitude: f64,
        magnitude_std: f64,
        num_magnitude_bins: usize,
    ) -> Result<Policy, AugmentError> {
        Ok(match name {
            "none" => Policy::None,
            "autoaugment-cifar10" => Policy::AutoAugment(AutoAugmentPolicy::Cifar10),
            "autoaugment-imagenet" => Policy::AutoAugment(AutoAugmentPolicy::Imagenet),
            "autoaugment-svhn" => Policy::AutoAugment(AutoAugmentPolicy::Svhn),
            "randaugment" => {
                let ra = RandAugment { num_ops, magnitude, magnitude_std, num_magnitude_bins };
                ra.validate()?;
                Policy::RandAugment(ra)
            }
            "trivialaugment" => Policy::TrivialAugmentWide(TrivialAugmentWide::default()),
            _ => return Err(AugmentError::UnknownPolicy(name.to_string())),
        })
    }

    pub fn is_none(&self) -> bool {
        *self == Policy::None
    }

    /// The config name (parameters aside).
    pub fn name(&self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::AutoAugment(AutoAugmentPolicy::Cifar10) => "autoaugment-cifar10",
            Policy::AutoAugment(AutoAugmentPolicy::Imagenet) => "autoaugment-imagenet",
            Policy::AutoAugment(AutoAugmentPolicy::Svhn) => "autoaugment-svhn",
            Policy::RandAugment(_) => "randaugment",
            Policy::TrivialAugmentWide(_) => "trivialaugment",
        }
    }

    /// Draws one call's ops for an `h x w` image and calls `f(op, signed magnitude)`
    /// for each, in the order they apply (the draw orders are documented on
    /// [`AutoAugmentPolicy::draw`], [`RandAugment::for_each_op`] and
    /// [`TrivialAugmentWide::for_each_op`]).
    pub fn for_each_op(&self, h: usize, w: usize, rng: &mut Rng, mut f: impl FnMut(Op, f32)) {
        match self {
            Policy::None => {}
            Policy::AutoAugment(p) => p.for_each_op(&p.draw(rng), h, w, f),
            Policy::RandAugment(r) => r.for_each_op(h, w, rng, &mut f),
            Policy::TrivialAugmentWide(t) => t.for_each_op(h, w, rng, &mut f),
        }
    }

    /// The ops one call would apply (a convenience around [`Policy::for_each_op`]).
    pub fn sample(&self, h: usize, w: usize, rng: &mut Rng) -> Vec<(Op, f32)> {
        let mut ops = Vec::new();
        self.for_each_op(h, w, rng, |op, m| ops.push((op, m)));
        ops
    }

    /// Applies the policy to one image: [`apply_policy`].
    pub fn apply(&self, img: &[u8], channels: usize, h: usize, w: usize, rng: &mut Rng, out: &mut Vec<u8>) {
        apply_policy(self, img, channels, h, w, rng, out)
    }
}

impl FromStr for Policy {
    type Err = AugmentError;
    /// Parses with RandAugment's defaults (2 ops, magnitude 9 of 31, no noise).
    fn from_str(s: &str) -> Result<Policy, AugmentError> {
        let ra = RandAugment::default();
        Policy::parse(s, ra.num_ops, ra.magnitude, ra.magnitude_std, ra.num_magnitude_bins)
    }
}

thread_local! {
    /// The previous image while a policy chains ops (kept per thread: no allocation per call).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Applies `policy` to the `channels x h x w` image `img` into `out`, drawing from `rng`.
pub fn apply_policy(policy: &Policy, img: &[u8], channels: usize, h: usize, w: usize, rng: &mut Rng, out: &mut Vec<u8>) {
    SCRATCH.with(|scratch| {
        let mut prev = scratch.borrow_mut();
        let mut applied = false;
        policy.for_each_op(h, w, rng, |op, m| {
            if applied {
                std::mem::swap(&mut *prev, out);
                apply(op, m, &prev, channels, h, w, out);
            } else {
                apply(op, m, img, channels, h, w, out);
                applied = true;
            }
        });
        if !applied {
            out.clear();
            out.extend_from_slice(img);
        }
    });
}
