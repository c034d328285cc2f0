//! The input of an unpaired image-to-image run (CycleGAN): one [`Loader`] per
//! domain over its training images, on the loader's worker threads, zipped into
//! [`PairBatch`]es; the test images at the model size for FID and sample sheets.
//!
//! Training images are resized to the load size, randomly cropped to the model
//! size and flipped (pytorch-CycleGAN-and-pix2pix's `resize_and_crop` + flip),
//! then mapped to `[-1, 1]`. Each epoch visits max(|A|, |B|) images of each
//! domain: the smaller domain's shuffled order repeats from its start. The two
//! domains draw their orders and augmentations from generators keyed by the
//! run's seed and the domain, so batches depend on (seed, epoch, batch) alone
//! and an epoch can start at any batch (resume).

use std::sync::Arc;

use super::decode::Img;
use super::loader::{EpochIter, Loader, LoaderConfig};
use super::{Augment, Batch, DataFormat, Dataset, ImageSet, Normalize};
use crate::util::rng::Rng;
use crate::{Error, Result};

/// How an unpaired run's input is built (from the experiment config by the task).
#[derive(Clone, Debug, PartialEq)]
pub struct PairConfig {
    pub batch_size: usize,
    /// The model's (crop) size.
    pub image_size: usize,
    /// The size training images are resized to before the crop (0: the model size).
    pub load_size: usize,
    /// Random horizontal flips (probability 0.5).
    pub flip: bool,
    /// Worker threads in all (half per domain, at least one each when not 0).
    pub workers: usize,
    pub seed: u64,
    /// Train on a seeded subset of this many images per domain (0: all).
    pub limit: usize,
}

/// One domain's images at the model size, uint8 CHW (test images).
pub struct DomainImages {
    pixels: Vec<u8>,
    pub len: usize,
    pub side: usize,
}

impl DomainImages {
    fn new(set: &ImageSet, indices: &[usize], side: usize) -> DomainImages {
        let mut pixels = Vec::with_capacity(indices.len() * 3 * side * side);
        let mut buf = Vec::new();
        for &i in indices {
            if set.height == side && set.width == side {
                pixels.extend_from_slice(set.image(i));
            } else {
                super::loader::resize_bilinear(set.image(i), set.channels, set.height, set.width, side, &mut buf);
                pixels.extend_from_slice(&buf);
            }
        }
        DomainImages { pixels, len: indices.len(), side }
    }

    fn image(&self, i: usize) -> &[u8] {
        let n = 3 * self.side * self.side;
        &self.pixels[i * n..(i + 1) * n]
    }

    /// The first `count` images, as decoded images (for the FID network).
    pub fn images(&self, count: usize) -> Vec<Img> {
        (0..count).map(|i| Img { h: self.side, w: self.side, chw: self.image(i).to_vec() }).collect()
    }

    /// The first `count` images as `[count, 3, side, side]` floats in `[-1, 1]`.
    pub fn floats(&self, count: usize) -> Vec<f32> {
        (0..count).flat_map(|i| self.image(i).iter().map(|&p| p as f32 / 127.5 - 1.0)).collect()
    }
}

/// A batch of real A and real B images, `[n, 3, S, S]` each.
pub struct PairBatch {
    pub a: Batch,
    pub b: Batch,
}

impl PairBatch {
    pub fn len(&self) -> usize {
        self.a.shape[0]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows `rows` of both domains' images (a data-parallel rank's slice).
    pub fn rows(self, rows: std::ops::Range<usize>) -> PairBatch {
        PairBatch { a: self.a.rows(rows.clone()), b: self.b.rows(rows) }
    }
}

/// The unpaired dataset of a run, prepared for training.
pub struct UnpairedData {
    train_a: Loader,
    train_b: Loader,
    pub test_a: Option<DomainImages>,
    pub test_b: Option<DomainImages>,
    pub description: String,
}

impl UnpairedData {
    /// Opens the unpaired folder at `path` (trainA/ trainB/ testA/ testB/).
    pub fn load(path: &str, config: &PairConfig) -> Result<UnpairedData> {
        let ds = super::open(path)?;
        if ds.format != DataFormat::Unpaired {
            return Err(Error::config(
                "data.path",
                format!(
                    "{path} is a {:?} dataset; a CycleGAN run needs an unpaired folder with trainA/ trainB/ testA/ testB/ \
                     (make one from two classes with `vitlab data unpaired`)",
                    ds.format
                ),
            ));
        }
        let size = config.image_size;
        let train = Arc::new(ds.train);
        let indices = |d: u32| {
            let mut idx = Dataset::domain_indices(&train, d);
            if config.limit > 0 && config.limit < idx.len() {
                Rng::keyed(&[config.seed, 0x4C494D, d as u64]).shuffle(&mut idx);
                idx.truncate(config.limit);
                idx.sort_unstable();
            }
            idx
        };
        let (test_a, test_b) = match &ds.test {
            Some(t) => (
                Some(DomainImages::new(t, &Dataset::domain_indices(t, 0), size)),
                Some(DomainImages::new(t, &Dataset::domain_indices(t, 1), size)),
            ),
            None => (None, None),
        };
        let mut data = Self::from_sets(train.clone(), (indices(0), indices(1)), config, (test_a, test_b))?;
        let load = if config.load_size == 0 { size } else { config.load_size };
        data.description = format!(
            "{path}: {} + {} train images (A + B, {}x{} -> {load} px, crops of {size}), {} test",
            data.train_a.len(),
            data.train_b.len(),
            train.height,
            train.width,
            data.test_a.as_ref().map_or("no".to_string(), |t| format!(
                "{} + {}",
                t.len,
                data.test_b.as_ref().map_or(0, |b| b.len)
            )),
        );
        Ok(data)
    }

    /// `n` random images per domain of `side` px, no test split (benchmarks).
    pub fn synthetic(n: usize, side: usize, seed: u64) -> UnpairedData {
        let mut rng = Rng::new(seed);
        let pixels = (0..2 * n * 3 * side * side).map(|_| rng.below(256) as u8).collect();
        let labels = (0..2 * n).map(|i| (i / n) as u32).collect();
        let set = ImageSet { pixels, labels, channels: 3, height: side, width: side, classes: vec!["A".into(), "B".into()] };
        let config = PairConfig { batch_size: 1, image_size: side, load_size: 0, flip: false, workers: 0, seed, limit: 0 };
        let mut data = Self::from_sets(Arc::new(set), ((0..n).collect(), (n..2 * n).collect()), &config, (None, None))
            .expect("a valid synthetic set");
        data.description = format!("synthetic: {n} + {n} images of {side} px");
        data
    }

    fn from_sets(
        train: Arc<ImageSet>,
        (a, b): (Vec<usize>, Vec<usize>),
        config: &PairConfig,
        (test_a, test_b): (Option<DomainImages>, Option<DomainImages>),
    ) -> Result<UnpairedData> {
        let epoch_images = a.len().max(b.len());
        let loader = |indices: Vec<usize>, domain: u64| {
            let workers = if config.workers == 0 { 0 } else { config.workers.div_ceil(2) };
            let augment = Augment { hflip: if config.flip { 0.5 } else { 0.0 }, ..Augment::none() };
            let c = LoaderConfig {
                batch_size: config.batch_size,
                image_size: config.image_size,
                augment,
                normalize: Normalize::MinusOneOne,
                shuffle: true,
                drop_last: true,
                workers,
                seed: Rng::keyed(&[config.seed, 0x000D_03A1, domain]).next_u64(),
                label_smoothing: 0.0,
                load_size: config.load_size,
                epoch_images,
            };
            Loader::new(train.clone(), indices, c)
        };
        Ok(UnpairedData { train_a: loader(a, 0xA)?, train_b: loader(b, 0xB)?, test_a, test_b, description: String::new() })
    }

    /// Training images per domain, (A, B).
    pub fn train_len(&self) -> (usize, usize) {
        (self.train_a.len(), self.train_b.len())
    }

    /// Batches per epoch (incomplete batches are dropped).
    pub fn batches_per_epoch(&self) -> usize {
        self.train_a.batches_per_epoch()
    }

    /// The batches of `epoch` from batch `start` on.
    pub fn epoch(&self, epoch: u64, start: usize) -> PairIter {
        PairIter { a: self.train_a.epoch(epoch, start), b: self.train_b.epoch(epoch, start) }
    }

    /// The first `n` images of each domain at the model size, `[n, 3, S, S]` in
    /// `[-1, 1]`: test images, or training images (uncropped, unflipped) when
    /// there is no test split; `n` is capped by the smaller domain.
    pub fn sample_images(&self, n: usize) -> (usize, Vec<f32>, Vec<f32>) {
        if let (Some(a), Some(b)) = (&self.test_a, &self.test_b) {
            let n = n.min(a.len).min(b.len);
            return (n, a.floats(n), b.floats(n));
        }
        let n = n.min(self.train_a.len()).min(self.train_b.len());
        let side = self.train_a.config().image_size;
        let first = |l: &Loader| -> Vec<f32> {
            let set = l.set();
            let idx: Vec<usize> = l.indices()[..n].to_vec();
            DomainImages::new(set, &idx, side).floats(n)
        };
        (n, first(&self.train_a), first(&self.train_b))
    }
}

/// The batches of one epoch: domain A's and domain B's loaders side by side.
pub struct PairIter {
    a: EpochIter,
    b: EpochIter,
}

impl Iterator for PairIter {
    type Item = PairBatch;

    fn next(&mut self) -> Option<PairBatch> {
        Some(PairBatch { a: self.a.next()?, b: self.b.next()? })
    }
}
