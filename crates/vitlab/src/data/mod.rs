//! The data layer: dataset readers (CIFAR-10/100 binary and pickle, image
//! folders, CycleGAN-style unpaired folders, Tiny-ImageNet), a decoded-dataset
//! cache, downloads, a multi-threaded augmenting batch loader, and
//! [`make_unpaired()`] (two classes of a labelled dataset as an unpaired folder).
//!
//! Everything decodes to an in-memory [`ImageSet`] (uint8 NCHW + labels); the
//! [`loader`] turns index lists into normalised float batches on worker threads.
//!
//! [`open`] is the single entry point: it recognises the layout of a path
//! (see [`DataFormat`]), decodes it once, and caches the decoded dataset in a
//! compact binary file ([`cache`]) that later starts read in a fraction of a
//! second. `docs/DATA.md` describes the formats, the cache and the downloads.
//!
//! Layout: `dataset.rs` ([`open`]: detection and dispatch), `types.rs` (what
//! the readers and `open` share: [`DataFormat`], [`OpenOptions`], [`Dataset`],
//! ...), one file per reader ([`cifar`], [`folder`], [`unpaired`],
//! [`tiny_imagenet`]), [`cache`], [`decode`] (image files), [`grid`] (PNG
//! image grids), [`loader`] and what it applies ([`augment`],
//! [`autoaugment`], [`mix`], [`erase`], [`sampler`]).

pub(crate) mod augment;
pub mod autoaugment;
pub mod cache;
pub mod cifar;
pub mod decode;
pub mod download;
pub(crate) mod erase;
pub(crate) mod folder;
pub mod grid;
pub mod loader;
pub mod make_unpaired;
pub(crate) mod mix;
pub(crate) mod pairs;
pub(crate) mod sampler;
pub(crate) mod tiny_imagenet;
pub(crate) mod unpaired;

mod dataset;
mod split;
mod types;

pub use augment::{Augment, AugmentPlan};
pub use dataset::{open, open_with, user_cache_dir};
pub use make_unpaired::{make_unpaired, write_unpaired, UnpairedFolder, UnpairedOptions, UnpairedSummary};
pub use split::stratified_split;
pub use types::{CacheStatus, CoarseLabels, DataFormat, Dataset, OpenOptions};

use serde::{Deserialize, Serialize};

/// Decodes image files (JPEG or PNG) into one [`ImageSet`] of `size` x `size`
/// (bilinear resize where needed), with label 0 and the given class names;
/// for prediction on loose files.
pub fn read_images(paths: &[std::path::PathBuf], size: usize, classes: Vec<String>) -> crate::Result<ImageSet> {
    let imgs = decode::decode_all(paths, 2)?;
    let labels = vec![0; imgs.len()];
    Ok(decode::pack(imgs, labels, classes, (size, size)))
}

/// Decoded images of one split: uint8, NCHW, all the same size.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageSet {
    /// `len * channels * height * width` bytes, image after image, channel-major.
    pub pixels: Vec<u8>,
    /// One class index per image (`< classes.len()`).
    pub labels: Vec<u32>,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    /// Class names in label order.
    pub classes: Vec<String>,
}

impl ImageSet {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn image_bytes(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// The pixels of image `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.image_bytes();
        &self.pixels[i * n..(i + 1) * n]
    }

    /// A deterministic synthetic dataset for tests and demos: each class is a
    /// distinct colour/stripe pattern plus noise, so a model can learn it.
    pub fn synthetic(n: usize, classes: usize, size: usize, seed: u64) -> ImageSet {
        let mut rng = crate::util::Rng::keyed(&[seed, 0x0053_594E]);
        let mut pixels = Vec::with_capacity(n * 3 * size * size);
        let mut labels = Vec::with_capacity(n);
        for i in 0..n {
            let label = (i % classes) as u32;
            labels.push(label);
            for c in 0..3 {
                for y in 0..size {
                    for x in 0..size {
                        let stripe = ((x + y * (label as usize % 3)) / (1 + label as usize % 4)) % 2;
                        let base = 40 + 50 * ((label as usize + c) % 4) + 60 * stripe;
                        let noise = rng.below(41);
                        pixels.push((base + noise).min(255) as u8);
                    }
                }
            }
        }
        ImageSet {
            pixels,
            labels,
            channels: 3,
            height: size,
            width: size,
            classes: (0..classes).map(|c| format!("class{c}")).collect(),
        }
    }
}

/// Per-channel normalisation applied after augmentation: `(x/255 - mean) / std`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Normalize {
    /// CIFAR mean/std as in the paper: (0.4914, 0.4822, 0.4465) / (0.2023, 0.1994, 0.2010).
    Cifar,
    /// ImageNet mean/std: (0.485, 0.456, 0.406) / (0.229, 0.224, 0.225).
    Imagenet,
    /// To [-1, 1]: mean 0.5, std 0.5.
    MinusOneOne,
    /// Explicit per-channel mean and std.
    Custom { mean: Vec<f32>, std: Vec<f32> },
}

impl Normalize {
    pub fn mean_std(&self) -> (Vec<f32>, Vec<f32>) {
        match self {
            Normalize::Cifar => (vec![0.4914, 0.4822, 0.4465], vec![0.2023, 0.1994, 0.2010]),
            Normalize::Imagenet => (vec![0.485, 0.456, 0.406], vec![0.229, 0.224, 0.225]),
            Normalize::MinusOneOne => (vec![0.5; 3], vec![0.5; 3]),
            Normalize::Custom { mean, std } => (mean.clone(), std.clone()),
        }
    }
}

/// A batch ready for the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// `[n, channels, size, size]` float32, normalised.
    pub images: Vec<f32>,
    pub labels: Vec<u32>,
    /// `[n, channels, size, size]`
    pub shape: [usize; 4],
    /// Positions of these images in the loader's index list (for bookkeeping).
    pub positions: std::ops::Range<usize>,
    /// Soft targets `[n, classes]` when the batch was mixed (Mixup / CutMix), with
    /// label smoothing folded in; `None`: the labels are the targets.
    pub targets: Option<Vec<f32>>,
}

impl Batch {
    /// The images `rows` of this batch (a data-parallel rank's slice), with their labels,
    /// targets and positions.
    pub fn rows(self, rows: std::ops::Range<usize>) -> Batch {
        let n = self.shape[0];
        if rows == (0..n) {
            return self;
        }
        let cut = |v: Vec<f32>| {
            let per = v.len() / n.max(1);
            v[rows.start * per..rows.end * per].to_vec()
        };
        let mut shape = self.shape;
        shape[0] = rows.len();
        let start = self.positions.start;
        Batch {
            labels: self.labels.get(rows.clone()).map(<[u32]>::to_vec).unwrap_or_default(),
            images: cut(self.images),
            targets: self.targets.map(cut),
            shape,
            positions: start + rows.start..start + rows.end,
        }
    }
}
