//! Random erasing, the per-image part of the DeiT/timm "strong recipe" run
//! after normalisation, in plain Rust on normalised f32 CHW images (one image
//! or each image of an NCHW batch), drawing only from [`Rng`] (deterministic
//! given its state): [`RandomErasing`] as timm's `RandomErasing` (Zhong et al.
//! 2017), or Lee et al. 2021's variant ([`EraseVariant::Lee`]).
//!
//! Golden outputs (`erase.json`) come from `tools/make_mix_fixtures.py` (timm
//! 1.0.31), which records every random draw of the reference code; the tests
//! replay them through the crate-private `Draws` trait of [`super::mix`] and
//! compare bit for bit.

use super::mix::{Bbox, Draws};
use crate::util::rng::Rng;

/// What an erased rectangle is filled with (values of the normalised tensor).
#[derive(Clone, Debug, PartialEq)]
pub enum EraseFill {
    /// 0 in every channel (timm 'const'): the dataset mean colour, since the
    /// tensor is already normalised.
    Const,
    /// One standard normal per channel (timm 'rand').
    Rand,
    /// A standard normal per value (timm 'pixel', DeiT's choice).
    Pixel,
    /// A given value per channel (one value: every channel). Lee et al. fill
    /// with the dataset MEAN (0.4914, 0.4822, 0.4465 on CIFAR-10) but erase
    /// after `Normalize`, so in pixel terms the block is `mean + mean * std`
    /// (about 0.61 for CIFAR-10 red), not the mean colour; reproduced as is.
    /// Their single-channel path fills with `mean[1]`: pass that one value.
    Value(Vec<f32>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EraseVariant {
    /// timm: up to 10 attempts per box, aspect log-uniform in
    /// `[min_aspect, max_aspect]`.
    Timm,
    /// Lee et al.: up to 100 attempts, aspect uniform (not log-uniform) in
    /// `[min_aspect, max_aspect]`, one box.
    Lee,
}

/// Random erasing, per image of a normalised batch. With probability
/// `probability` it erases `count` boxes (uniform in `[min_count, max_count]`),
/// each of area `U(min_area, max_area) * H * W / count` (fractions of the
/// image) and aspect `h / w` from `[min_aspect, max_aspect]`; a draw whose box
/// does not fit strictly inside the image (`h < H`, `w < W`) is retried, and a
/// box that fails every attempt is skipped.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomErasing {
    pub probability: f64,
    pub min_area: f64,
    pub max_area: f64,
    pub min_aspect: f64,
    pub max_aspect: f64,
    pub min_count: usize,
    pub max_count: usize,
    pub fill: EraseFill,
    pub variant: EraseVariant,
}

impl RandomErasing {
    /// timm's defaults: area [0.02, 1/3], aspect [0.3, 1/0.3], one box, 'const'.
    pub fn timm(probability: f64) -> Self {
        RandomErasing {
            probability,
            min_area: 0.02,
            max_area: 1.0 / 3.0,
            min_aspect: 0.3,
            max_aspect: 1.0 / 0.3,
            min_count: 1,
            max_count: 1,
            fill: EraseFill::Const,
            variant: EraseVariant::Timm,
        }
    }

    /// DeiT's `--reprob 0.25 --remode pixel --recount 1`.
    pub fn deit() -> Self {
        RandomErasing { fill: EraseFill::Pixel, ..Self::timm(0.25) }
    }

    /// Lee et al.'s `main.py` defaults: probability 0.25, area [0.02, 0.4],
    /// aspect [0.3, 1/0.3], filled with `mean` (see [`EraseFill::Value`]).
    pub fn lee(mean: &[f32]) -> Self {
        RandomErasing { max_area: 0.4, fill: EraseFill::Value(mean.to_vec()), variant: EraseVariant::Lee, ..Self::timm(0.25) }
    }

    pub fn validate(&self) -> crate::Result<()> {
        if !(0.0..=1.0).contains(&self.probability) {
            return Err(crate::Error::config("RandomErasing.probability", "must be in [0, 1]"));
        }
        if !(0.0 < self.min_area && self.min_area <= self.max_area && self.max_area <= 1.0) {
            return Err(crate::Error::config("RandomErasing.min_area", "need 0 < min_area <= max_area <= 1"));
        }
        if !(0.0 < self.min_aspect && self.min_aspect <= self.max_aspect) {
            return Err(crate::Error::config("RandomErasing.min_aspect", "need 0 < min_aspect <= max_aspect"));
        }
        if !(1 <= self.min_count && self.min_count <= self.max_count) {
            return Err(crate::Error::config("RandomErasing.min_count", "need 1 <= min_count <= max_count"));
        }
        Ok(())
    }

    /// Erases boxes of one `[c, h, w]` image; returns the boxes erased (none
    /// when skipped).
    pub fn erase_image(&self, img: &mut [f32], c: usize, h: usize, w: usize, rng: &mut Rng) -> Vec<Bbox> {
        self.erase_with(img, c, h, w, rng)
    }

    /// [`RandomErasing::erase_image`] on each image of an NCHW batch in turn.
    pub fn erase_batch(&self, batch: &mut [f32], shape: [usize; 4], rng: &mut Rng) -> Vec<Vec<Bbox>> {
        let [n, c, h, w] = shape;
        assert_eq!(batch.len(), n * c * h * w, "random erasing: batch length does not match its shape");
        if c * h * w == 0 {
            return vec![Vec::new(); n];
        }
        batch.chunks_mut(c * h * w).map(|img| self.erase_with(img, c, h, w, rng)).collect()
    }

    fn erase_with<D: Draws>(&self, img: &mut [f32], c: usize, h: usize, w: usize, d: &mut D) -> Vec<Bbox> {
        assert_eq!(img.len(), c * h * w, "random erasing: image length does not match its shape");
        if let EraseFill::Value(v) = &self.fill {
            assert!(v.len() == c || v.len() == 1, "random erasing: {} fill values for {c} channels", v.len());
        }
        // timm skips when random() > p; `p <= 0` also skips the u == 0 case
        if d.unit() > self.probability || self.probability <= 0.0 {
            return Vec::new();
        }
        let area = (h * w) as f64;
        let count = if self.min_count == self.max_count {
            self.min_count
        } else {
            self.min_count + d.below(self.max_count - self.min_count + 1)
        };
        let (attempts, log_aspect) = match self.variant {
            EraseVariant::Timm => (10, true),
            EraseVariant::Lee => (100, false),
        };
        let (lo, hi) = if log_aspect { (self.min_aspect.ln(), self.max_aspect.ln()) } else { (self.min_aspect, self.max_aspect) };
        let mut boxes = Vec::new();
        for _ in 0..count {
            for _ in 0..attempts {
                // Python's uniform(a, b) is a + (b - a) * random(); the same
                // products in the same order keep the rounding identical.
                let target = (self.min_area + (self.max_area - self.min_area) * d.unit()) * area / count as f64;
                let a = lo + (hi - lo) * d.unit();
                let aspect = if log_aspect { a.exp() } else { a };
                // Python's round() rounds halves to even
                let bh = (target * aspect).sqrt().round_ties_even() as usize;
                let bw = (target / aspect).sqrt().round_ties_even() as usize;
                if bw < w && bh < h {
                    // random.randint(0, H - h) includes H - h
                    let top = d.below(h - bh + 1);
                    let left = d.below(w - bw + 1);
                    for ch in 0..c {
                        let fixed = match &self.fill {
                            EraseFill::Const => Some(0.0),
                            EraseFill::Rand => Some(d.normal() as f32),
                            EraseFill::Pixel => None,
                            EraseFill::Value(v) => Some(v[if v.len() == 1 { 0 } else { ch }]),
                        };
                        for y in top..top + bh {
                            for v in &mut img[ch * h * w + y * w + left..ch * h * w + y * w + left + bw] {
                                *v = fixed.unwrap_or_else(|| d.normal() as f32);
                            }
                        }
                    }
                    boxes.push(Bbox { y0: top, y1: top + bh, x0: left, x1: left + bw });
                    break;
                }
            }
        }
        boxes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::mix::tests::{batch, f32s, fixture, num, usizes, Script};

    #[test]
    fn fixture_random_erasing() {
        for c in fixture("erase.json") {
            let g = &c["config"];
            let min_count = g["min_count"].as_u64().unwrap_or(1) as usize;
            let e = RandomErasing {
                probability: num(&g["probability"]),
                min_area: num(&g["min_area"]),
                max_area: num(&g["max_area"]),
                min_aspect: num(&g["min_aspect"]),
                max_aspect: 1.0 / num(&g["min_aspect"]),
                min_count,
                max_count: g["max_count"].as_u64().map_or(min_count, |v| v as usize),
                fill: match g["mode"].as_str() {
                    Some("const") => EraseFill::Const,
                    Some("rand") => EraseFill::Rand,
                    Some("pixel") => EraseFill::Pixel,
                    _ => EraseFill::Value(f32s(&g["value"])),
                },
                variant: if c["variant"] == "lee" { EraseVariant::Lee } else { EraseVariant::Timm },
            };
            e.validate().unwrap();
            let [c_, h, w]: [usize; 3] = usizes(&c["shape"]).try_into().unwrap();
            let mut img = f32s(&c["input"]);
            let mut s = Script::new(&c["draws"]);
            e.erase_with(&mut img, c_, h, w, &mut s);
            s.done();
            assert_eq!(img, f32s(&c["output"]), "{}", c["name"]);
        }
    }

    fn ones_image(c: usize, h: usize, w: usize) -> Vec<f32> {
        (0..c * h * w).map(|i| 1.0 + i as f32).collect()
    }

    #[test]
    fn erasing_at_probability_zero_changes_nothing() {
        let e = RandomErasing { fill: EraseFill::Pixel, ..RandomErasing::timm(0.0) };
        let mut x = ones_image(3, 16, 16);
        for seed in 0..100 {
            assert!(e.erase_image(&mut x, 3, 16, 16, &mut Rng::new(seed)).is_empty());
        }
        assert_eq!(x, ones_image(3, 16, 16));
    }

    #[test]
    fn erasing_at_probability_one_erases_one_rectangle_of_the_right_area() {
        let (c, h, w) = (3, 32, 32);
        let mean = [0.4914, 0.4822, 0.4465];
        for e in [RandomErasing::timm(1.0), RandomErasing { probability: 1.0, ..RandomErasing::lee(&mean) }] {
            let mut erased = 0;
            for seed in 0..200 {
                let mut x = ones_image(c, h, w);
                let boxes = e.erase_image(&mut x, c, h, w, &mut Rng::new(seed));
                assert!(boxes.len() <= 1);
                let Some(b) = boxes.first() else { continue };
                erased += 1;
                let (bh, bw) = (b.y1 - b.y0, b.x1 - b.x0);
                assert!(bh < h && bw < w);
                let slack = 0.5 * (bh + bw + 1) as f64 + 0.25; // both sides rounded to integers
                let (a, full) = (b.area() as f64, (h * w) as f64);
                assert!(a >= e.min_area * full - slack && a <= e.max_area * full + slack, "{b:?}");
                for (q, (&v, &v0)) in x.iter().zip(&ones_image(c, h, w)).enumerate() {
                    let (ch, yy, xx) = (q / (h * w), q / w % h, q % w);
                    let inside = (b.y0..b.y1).contains(&yy) && (b.x0..b.x1).contains(&xx);
                    let fill = if e.variant == EraseVariant::Lee { mean[ch] } else { 0.0 };
                    assert_eq!(v, if inside { fill } else { v0 });
                }
            }
            assert!(erased > 150, "{erased} of 200 erased");
        }
    }

    #[test]
    fn erasing_counts_and_batches() {
        let e = RandomErasing { min_count: 2, max_count: 4, fill: EraseFill::Rand, ..RandomErasing::deit() };
        let e = RandomErasing { probability: 1.0, ..e };
        let mut x = batch(4 * 3 * 24 * 24, 6);
        let boxes = e.erase_batch(&mut x, [4, 3, 24, 24], &mut Rng::new(7));
        assert_eq!(boxes.len(), 4);
        assert!(boxes.iter().all(|b| (1..=4).contains(&b.len())));
        assert!(e.validate().is_ok() && RandomErasing { min_area: 0.5, max_area: 0.1, ..e }.validate().is_err());
    }
}
