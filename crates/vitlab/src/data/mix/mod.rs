//! Mixup / CutMix, the batch-level mixing of the DeiT/timm "strong recipe",
//! in plain Rust on normalised f32 NCHW batches, drawing only from [`Rng`]
//! (deterministic given its state):
//!
//! - [`Mixup`]: Mixup / CutMix as timm's `timm.data.mixup.Mixup` in its
//!   default `mode='batch'` (one lam and one box for the whole batch, image `i`
//!   mixed with image `n-1-i`), or as Lee et al. 2021 ("Vision Transformer for
//!   Small-Size Datasets", their `utils/mix.py`: a random permutation as the
//!   partner, the box of the original CutMix code). It writes soft targets.
//! - `soft_target_ce`: the loss the soft targets are meant for, on the host
//!   (the tests' reference for the tensor loss training computes).
//!
//! The rest of the recipe: random erasing in [`super::erase`], repeated
//! augmentation and epoch orders in [`super::sampler`].
//!
//! **Soft-target cross-entropy.** Every target row [`Mixup::apply`] writes sums
//! to 1, and the loss is `mean_i( -sum_k target[i,k] * log_softmax(logits[i])_k )`
//! (timm's `SoftTargetCrossEntropy`). Targets are written even when a batch is
//! not mixed (they are then the label-smoothed one-hots), so the training loss
//! can always be this one. With smoothing `s` over `K` classes, a one-hot
//! smoothed as timm does (`on = 1 - s + s/K`, `off = s/K`) is exactly
//! `(1 - s) * onehot + s/K`, which makes soft-target CE against it equal to
//! timm's / Lee et al.'s `LabelSmoothingCrossEntropy` (`(1-s) * nll + s *
//! mean_k(-log p_k)`). Lee et al.'s mixed loss `lam * LSCE(y_a) + (1 - lam) *
//! LSCE(y_b)` is linear in the target distribution, so it equals soft-target CE
//! against `lam * smooth(y_a) + (1 - lam) * smooth(y_b)`: the targets written
//! here for [`Partner::Permutation`]. The fixture `lee_mix.json` checks this.
//!
//! Golden outputs come from `tools/make_mix_fixtures.py` (timm 1.0.31), which
//! records every random draw of the reference code; the tests replay them
//! through the crate-private `Draws` trait (shared with [`super::erase`]) and
//! compare bit for bit.

use crate::util::rng::Rng;

/// Where the random numbers come from: [`Rng`] in use, a recorded script in
/// the fixture tests. One method per kind of draw the references make.
pub(crate) trait Draws {
    /// Uniform in [0, 1) (numpy `rand()`, Python `random.random()`).
    fn unit(&mut self) -> f64;
    /// Uniform integer in [0, n) (`randint(lo, hi)` is `lo + below(hi - lo)`).
    fn below(&mut self, n: usize) -> usize;
    fn beta(&mut self, a: f64, b: f64) -> f64;
    fn normal(&mut self) -> f64;
    /// A uniform permutation of 0..n (Fisher-Yates, as [`Rng::shuffle`]).
    fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i + 1);
            p.swap(i, j);
        }
        p
    }
}

impl Draws for Rng {
    fn unit(&mut self) -> f64 {
        self.uniform_f64()
    }
    fn below(&mut self, n: usize) -> usize {
        Rng::below(self, n)
    }
    fn beta(&mut self, a: f64, b: f64) -> f64 {
        Rng::beta(self, a, b)
    }
    fn normal(&mut self) -> f64 {
        Rng::normal(self)
    }
}

/// numpy's `randint(lo, hi)` (exclusive `hi`); an empty range, where numpy
/// raises, gives `lo` without a draw.
fn randint<D: Draws>(d: &mut D, lo: usize, hi: usize) -> usize {
    if hi <= lo {
        lo
    } else {
        lo + d.below(hi - lo)
    }
}

// ------------------------------------------------------------ Mixup / CutMix

/// Which image each image is mixed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partner {
    /// Image `i` with image `n-1-i` (timm's `x.flip(0)`); the middle image of
    /// an odd batch is mixed with itself (timm's `__call__` asserts an even
    /// batch; its `_mix_batch`, reproduced here, handles odd ones this way).
    Flip,
    /// Image `i` with image `perm[i]` of a fresh random permutation (Lee et al.,
    /// `torch.randperm`); an image may be its own partner.
    Permutation,
}

/// How the CutMix box is placed around its centre `c` (cut length `cut`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoxRule {
    /// timm 1.0.31: `[c - cut//2, c + (cut+1)//2)`, clipped; unclipped it is
    /// exactly `cut` long.
    Timm,
    /// The original CutMix code, older timm and Lee et al.: `[c - cut//2,
    /// c + cut//2)`, clipped; one shorter than `cut` when `cut` is odd.
    Symmetric,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixKind {
    None,
    Mixup,
    Cutmix,
}

/// A half-open pixel rectangle: rows `y0..y1`, columns `x0..x1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bbox {
    pub y0: usize,
    pub y1: usize,
    pub x0: usize,
    pub x1: usize,
}

impl Bbox {
    pub fn area(&self) -> usize {
        (self.y1 - self.y0) * (self.x1 - self.x0)
    }
}

/// What [`Mixup::apply`] did to a batch (for logs and tests).
#[derive(Clone, Debug, PartialEq)]
pub struct MixInfo {
    pub kind: MixKind,
    /// The weight of each image's own label (after the CutMix area correction);
    /// 1 when nothing was mixed.
    pub lam: f64,
    /// The CutMix box (the same for every image of the batch).
    pub bbox: Option<Bbox>,
    /// `partners[i]`: the image mixed into image `i`; empty when not mixed.
    pub partners: Vec<usize>,
}

/// Mixup / CutMix parameters, named as timm's `Mixup` (`prob` is its
/// `mix_prob`). Per batch: with probability `prob` mix, else not; when both
/// alphas are positive choose CutMix with probability `switch_prob`; `lam ~
/// Beta(alpha, alpha)` of the chosen method. A `cutmix_minmax` box takes its
/// side lengths uniformly from `[min, max)` of the image's and always corrects
/// lam (timm also forces `cutmix_alpha = 1` then, which only enables CutMix).
#[derive(Clone, Debug, PartialEq)]
pub struct Mixup {
    pub mixup_alpha: f64,
    pub cutmix_alpha: f64,
    pub cutmix_minmax: Option<(f64, f64)>,
    pub prob: f64,
    pub switch_prob: f64,
    /// Set lam to `1 - box_area / (H * W)` after clipping the CutMix box.
    pub correct_lam: bool,
    pub label_smoothing: f64,
    pub num_classes: usize,
    pub partner: Partner,
    pub box_rule: BoxRule,
}

impl Mixup {
    /// timm's `Mixup()` defaults: mixup 1.0, no CutMix, prob 1, switch 0.5,
    /// smoothing 0.1.
    pub fn timm(num_classes: usize) -> Self {
        Mixup {
            mixup_alpha: 1.0,
            cutmix_alpha: 0.0,
            cutmix_minmax: None,
            prob: 1.0,
            switch_prob: 0.5,
            correct_lam: true,
            label_smoothing: 0.1,
            num_classes,
            partner: Partner::Flip,
            box_rule: BoxRule::Timm,
        }
    }

    /// DeiT's recipe (its `main.py` defaults): mixup 0.8, CutMix 1.0.
    pub fn deit(num_classes: usize) -> Self {
        Mixup { mixup_alpha: 0.8, cutmix_alpha: 1.0, ..Self::timm(num_classes) }
    }

    /// Lee et al.'s `main.py` defaults: both alphas 1, mixed with probability
    /// 0.5, CutMix or Mixup half the time each, smoothing 0.1 (their
    /// `LabelSmoothingCrossEntropy()` default), permutation partner.
    pub fn lee(num_classes: usize) -> Self {
        Mixup {
            cutmix_alpha: 1.0,
            prob: 0.5,
            partner: Partner::Permutation,
            box_rule: BoxRule::Symmetric,
            ..Self::timm(num_classes)
        }
    }

    fn cutmix_alpha(&self) -> f64 {
        if self.cutmix_minmax.is_some() {
            1.0
        } else {
            self.cutmix_alpha
        }
    }

    /// Whether a batch can be mixed at all (an alpha or a minmax box set).
    pub fn is_active(&self) -> bool {
        self.mixup_alpha > 0.0 || self.cutmix_alpha() > 0.0
    }

    pub fn validate(&self) -> crate::Result<()> {
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        if self.num_classes == 0 {
            return Err(crate::Error::config("Mixup.num_classes", "must be positive"));
        }
        if !(self.mixup_alpha >= 0.0 && self.cutmix_alpha >= 0.0) {
            return Err(crate::Error::config("Mixup.mixup_alpha", "the alphas must be >= 0"));
        }
        if !(unit(self.prob) && unit(self.switch_prob) && (0.0..1.0).contains(&self.label_smoothing)) {
            return Err(crate::Error::config("Mixup.prob", "prob and switch_prob must be in [0, 1], label_smoothing in [0, 1)"));
        }
        if let Some((lo, hi)) = self.cutmix_minmax {
            if !(0.0 <= lo && lo < hi && hi <= 1.0) {
                return Err(crate::Error::config(
                    "Mixup.cutmix_minmax",
                    format!("({lo}, {hi}) must satisfy 0 <= min < max <= 1"),
                ));
            }
        }
        Ok(())
    }

    /// Mixes `batch` (`shape = [n, c, h, w]`) in place and writes the soft
    /// targets `[n, num_classes]` (rows sum to 1; the smoothed one-hots when not
    /// mixed). A configuration with no alpha never mixes and draws nothing.
    pub fn apply(&self, batch: &mut [f32], shape: [usize; 4], labels: &[u32], targets: &mut [f32], rng: &mut Rng) -> MixInfo {
        self.apply_with(batch, shape, labels, targets, rng)
    }

    fn apply_with<D: Draws>(
        &self,
        batch: &mut [f32],
        shape: [usize; 4],
        labels: &[u32],
        targets: &mut [f32],
        d: &mut D,
    ) -> MixInfo {
        let [n, c, h, w] = shape;
        assert_eq!(batch.len(), n * c * h * w, "mixup: batch length does not match its shape");
        assert_eq!(labels.len(), n, "mixup: one label per image");
        assert_eq!(targets.len(), n * self.num_classes, "mixup: targets must be [n, num_classes]");
        let none = MixInfo { kind: MixKind::None, lam: 1.0, bbox: None, partners: Vec::new() };
        // Draw order as timm's `_params_per_batch`: the mix decision, the
        // switch (only when both methods are on), lam; then the partners
        // (permutation) and the box.
        if !self.is_active() || d.unit() >= self.prob {
            smoothed_one_hot(labels, self.num_classes, self.label_smoothing, targets);
            return none;
        }
        let (mix_a, cut_a) = (self.mixup_alpha, self.cutmix_alpha());
        let cutmix = if mix_a > 0.0 && cut_a > 0.0 { d.unit() < self.switch_prob } else { cut_a > 0.0 };
        let alpha = if cutmix { cut_a } else { mix_a };
        let mut lam = d.beta(alpha, alpha);
        if lam == 1.0 {
            // timm returns before touching the batch
            smoothed_one_hot(labels, self.num_classes, self.label_smoothing, targets);
            return none;
        }
        let partners: Vec<usize> = match self.partner {
            Partner::Flip => (0..n).rev().collect(),
            Partner::Permutation => d.permutation(n),
        };
        let img = c * h * w;
        let src = batch.to_vec(); // the partners are read from the unmixed batch (timm's flip() copies)
        let mut bbox = None;
        if cutmix {
            let (b, l) = cutmix_box_with(d, h, w, lam, self.cutmix_minmax, self.correct_lam, self.box_rule);
            lam = l;
            bbox = Some(b);
            for (i, &p) in partners.iter().enumerate() {
                for ch in 0..c {
                    for y in b.y0..b.y1 {
                        let row = ch * h * w + y * w;
                        batch[i * img + row + b.x0..i * img + row + b.x1]
                            .copy_from_slice(&src[p * img + row + b.x0..p * img + row + b.x1]);
                    }
                }
            }
        } else {
            // torch scales an f32 tensor by a Python float cast to f32:
            // x * f32(lam) + x_partner * f32(1 - lam), each product rounded.
            let (l, m) = (lam as f32, (1.0 - lam) as f32);
            for (i, &p) in partners.iter().enumerate() {
                let (dst, other) = (&mut batch[i * img..(i + 1) * img], &src[p * img..(p + 1) * img]);
                for (x, &y) in dst.iter_mut().zip(other) {
                    *x = *x * l + y * m;
                }
            }
        }
        mixup_target(labels, &partners, self.num_classes, lam, self.label_smoothing, targets);
        MixInfo { kind: if cutmix { MixKind::Cutmix } else { MixKind::Mixup }, lam, bbox, partners }
    }
}

fn check_label(l: u32, k: usize) -> usize {
    assert!((l as usize) < k, "label {l} out of range for {k} classes");
    l as usize
}

/// timm's smoothed one-hot values `(on, off)` as f32: `off = s / K`,
/// `on = 1 - s + off`, computed in f64 as Python does.
fn on_off(num_classes: usize, smoothing: f64) -> (f32, f32) {
    let off = smoothing / num_classes as f64;
    ((1.0 - smoothing + off) as f32, off as f32)
}

/// Label-smoothed one-hot targets `[n, num_classes]` (timm's `mixup_target`
/// with lam = 1).
pub fn smoothed_one_hot(labels: &[u32], num_classes: usize, smoothing: f64, out: &mut [f32]) {
    assert_eq!(out.len(), labels.len() * num_classes);
    let (on, off) = on_off(num_classes, smoothing);
    for (row, &l) in out.chunks_mut(num_classes).zip(labels) {
        row.fill(off);
        row[check_label(l, num_classes)] = on;
    }
}

/// timm's `mixup_target` with any partner list: row `i` is
/// `lam * smooth(labels[i]) + (1 - lam) * smooth(labels[partners[i]])`, in
/// f32 with `lam` and `1 - lam` cast to f32 as torch does.
pub fn mixup_target(labels: &[u32], partners: &[usize], num_classes: usize, lam: f64, smoothing: f64, out: &mut [f32]) {
    assert_eq!(partners.len(), labels.len());
    assert_eq!(out.len(), labels.len() * num_classes);
    let (on, off) = on_off(num_classes, smoothing);
    let (l, m) = (lam as f32, (1.0 - lam) as f32);
    for (i, row) in out.chunks_mut(num_classes).enumerate() {
        let (a, b) = (check_label(labels[i], num_classes), check_label(labels[partners[i]], num_classes));
        for (k, t) in row.iter_mut().enumerate() {
            let y1 = if k == a { on } else { off };
            let y2 = if k == b { on } else { off };
            *t = y1 * l + y2 * m;
        }
    }
}

fn cutmix_box_with<D: Draws>(
    d: &mut D,
    h: usize,
    w: usize,
    lam: f64,
    minmax: Option<(f64, f64)>,
    correct_lam: bool,
    rule: BoxRule,
) -> (Bbox, f64) {
    let b = if let Some((lo, hi)) = minmax {
        // rand_bbox_minmax: side lengths uniform in [int(S*min), int(S*max)),
        // then the corner uniform over every position that fits
        let cut_h = randint(d, (h as f64 * lo) as usize, (h as f64 * hi) as usize);
        let cut_w = randint(d, (w as f64 * lo) as usize, (w as f64 * hi) as usize);
        let y0 = randint(d, 0, h - cut_h + 1);
        let x0 = randint(d, 0, w - cut_w + 1);
        Bbox { y0, y1: y0 + cut_h, x0, x1: x0 + cut_w }
    } else {
        // A box of about (1 - lam) of the area: sides S * sqrt(1 - lam)
        // truncated, centred on a uniform pixel (rows drawn first), clipped.
        let ratio = (1.0 - lam).sqrt();
        let (cut_h, cut_w) = ((h as f64 * ratio) as usize, (w as f64 * ratio) as usize);
        let (cy, cx) = (d.below(h), d.below(w));
        let hi_half = |cut: usize| match rule {
            BoxRule::Timm => cut.div_ceil(2),
            BoxRule::Symmetric => cut / 2,
        };
        Bbox {
            y0: cy.saturating_sub(cut_h / 2),
            y1: (cy + hi_half(cut_h)).min(h),
            x0: cx.saturating_sub(cut_w / 2),
            x1: (cx + hi_half(cut_w)).min(w),
        }
    };
    let lam = if correct_lam || minmax.is_some() { 1.0 - b.area() as f64 / (h * w) as f64 } else { lam };
    (b, lam)
}

/// Soft-target cross-entropy (see the module header), in f64: the mean over
/// `n` rows of `-sum_k targets[i,k] * log_softmax(logits[i])_k`.
#[cfg(test)]
pub fn soft_target_ce(logits: &[f32], targets: &[f32], n: usize, k: usize) -> f64 {
    assert!(logits.len() == n * k && targets.len() == n * k && n > 0);
    let mut total = 0.0;
    for (z, t) in logits.chunks(k).zip(targets.chunks(k)) {
        let m = z.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let lse = m + z.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        total -= z.iter().zip(t).map(|(&v, &p)| p as f64 * (v as f64 - lse)).sum::<f64>();
    }
    total / n as f64
}

#[cfg(test)]
pub(crate) mod tests;
