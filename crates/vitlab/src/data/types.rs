//! What the dataset readers and [`open`](super::open) share: the layouts
//! ([`DataFormat`]), the reading options ([`OpenOptions`]), what a reader
//! produces ([`Decoded`]) and what a decoded dataset holds and reports
//! ([`Dataset`], [`CoarseLabels`], [`CacheStatus`]).

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use super::ImageSet;
use crate::{Error, Result};

/// The layouts [`open`](super::open) recognises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataFormat {
    /// CIFAR-10 binary version (`data_batch_N.bin`, 1 label byte + 3072 pixel bytes per record).
    Cifar10Binary,
    /// CIFAR-10 python version (pickled `data_batch_N` dicts).
    Cifar10Python,
    /// CIFAR-100 binary version (`train.bin`, coarse + fine label bytes + 3072 pixel bytes).
    Cifar100Binary,
    /// CIFAR-100 python version (pickled `train`/`test` dicts with fine and coarse labels).
    Cifar100Python,
    /// `ROOT/<split>/<class>/*.jpg|png` or `ROOT/<class>/*.jpg|png`.
    ImageFolder,
    /// CycleGAN-style `trainA/ trainB/ testA/ testB/` (label 0 = A, 1 = B).
    Unpaired,
    /// Tiny-ImageNet-200 (`wnids.txt`, `train/<wnid>/images/`, `val/val_annotations.txt`).
    TinyImagenet,
}

impl DataFormat {
    pub const ALL: &'static [DataFormat] = &[
        DataFormat::Cifar10Binary,
        DataFormat::Cifar10Python,
        DataFormat::Cifar100Binary,
        DataFormat::Cifar100Python,
        DataFormat::ImageFolder,
        DataFormat::Unpaired,
        DataFormat::TinyImagenet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DataFormat::Cifar10Binary => "cifar10-binary",
            DataFormat::Cifar10Python => "cifar10-python",
            DataFormat::Cifar100Binary => "cifar100-binary",
            DataFormat::Cifar100Python => "cifar100-python",
            DataFormat::ImageFolder => "image-folder",
            DataFormat::Unpaired => "unpaired",
            DataFormat::TinyImagenet => "tiny-imagenet",
        }
    }

    pub fn from_name(s: &str) -> Option<DataFormat> {
        DataFormat::ALL.iter().copied().find(|f| f.name() == s)
    }
}

impl fmt::Display for DataFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// CIFAR-100's 20 superclasses, beside the 100 fine labels that `ImageSet::labels` holds.
#[derive(Clone, Debug, PartialEq)]
pub struct CoarseLabels {
    pub classes: Vec<String>,
    pub train: Vec<u32>,
    pub test: Vec<u32>,
}

/// Where the decoded dataset came from.
#[derive(Clone, Debug, PartialEq)]
pub enum CacheStatus {
    /// Caching was turned off.
    Disabled,
    /// Read from this cache file.
    Hit(PathBuf),
    /// Decoded from the source and written to this cache file; `replaced` says
    /// why an existing cache was not used (stale, corrupt, other version).
    Built { path: PathBuf, replaced: Option<String> },
    /// Decoded, but no cache could be written (the reason).
    Unwritten(String),
}

/// How [`open_with`](super::open_with) reads a dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenOptions {
    /// Read and write the decoded-dataset cache (default true).
    pub cache: bool,
    /// Where to keep the cache; default: beside the data (`<path>.vitlab-cache`),
    /// or, where that is not writable, `$XDG_CACHE_HOME/vitlab` (`~/.cache/vitlab`).
    pub cache_dir: Option<PathBuf>,
    /// Resize every image to this square size at decode (image folders,
    /// unpaired, Tiny-ImageNet). Without it, images of differing sizes are
    /// resized to the most common size among them.
    pub image_size: Option<usize>,
    /// Decoding threads; 0 uses every core.
    pub threads: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { cache: true, cache_dir: None, image_size: None, threads: 0 }
    }
}

impl OpenOptions {
    /// The part of the options that changes the decoded data (stored in the cache header).
    pub(crate) fn key(&self) -> String {
        match self.image_size {
            Some(s) => format!("image_size={s}"),
            None => "image_size=native".to_string(),
        }
    }

    pub(crate) fn thread_count(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        }
    }
}

/// A decoded dataset: the train split, the evaluation split if the source has
/// one, and what was found.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub format: DataFormat,
    /// The path given to [`open`](super::open).
    pub source: PathBuf,
    pub train: ImageSet,
    /// The labelled evaluation split (`test`, or `val` where that is the source's name for it).
    pub test: Option<ImageSet>,
    /// The source's name for the evaluation split (`test` or `val`).
    pub test_split: String,
    /// CIFAR-100's coarse labels.
    pub coarse: Option<CoarseLabels>,
    /// Hash over the source's file names, sizes and modification times: decides
    /// whether the cache is current.
    pub fingerprint: String,
    /// SHA-256 over the decoded content (shapes, classes, pixels, labels):
    /// equal on any machine for the same data.
    pub checksum: String,
    /// Remarks made while decoding (resized images, skipped files, ...).
    pub notes: Vec<String>,
    pub cache: CacheStatus,
}

/// What a reader produces, before checksums and caching.
pub(crate) struct Decoded {
    pub format: DataFormat,
    pub train: ImageSet,
    pub test: Option<ImageSet>,
    pub test_split: String,
    pub coarse: Option<CoarseLabels>,
    pub notes: Vec<String>,
}

impl Dataset {
    /// A one-line account of what was found, for `--data PATH` messages.
    pub fn summary(&self) -> String {
        let t = &self.train;
        let mut s = format!("{} at {}: {} train", self.format, self.source.display(), t.len());
        if let Some(test) = &self.test {
            s.push_str(&format!(", {} {}", test.len(), self.test_split));
        }
        s.push_str(&format!(" images, {} classes, {}x{}x{}", t.classes.len(), t.channels, t.height, t.width));
        if let Some(c) = &self.coarse {
            s.push_str(&format!(" ({} coarse classes)", c.classes.len()));
        }
        match &self.cache {
            CacheStatus::Hit(p) => s.push_str(&format!(" (from cache {})", p.display())),
            CacheStatus::Built { path, .. } => s.push_str(&format!(" (decoded, cached at {})", path.display())),
            CacheStatus::Unwritten(why) => s.push_str(&format!(" (decoded, not cached: {why})")),
            CacheStatus::Disabled => s.push_str(" (decoded, cache off)"),
        }
        s
    }

    /// The splits by name, train first.
    pub fn splits(&self) -> Vec<(&str, &ImageSet)> {
        let mut v = vec![("train", &self.train)];
        if let Some(t) = &self.test {
            v.push((self.test_split.as_str(), t));
        }
        v
    }

    /// Replaces the fine labels with CIFAR-100's 20 coarse labels.
    pub fn with_coarse_labels(mut self) -> Result<Dataset> {
        let Some(c) = self.coarse.take() else {
            return Err(Error::data(&self.source, format!("{} has no coarse labels", self.format)));
        };
        self.train.labels = c.train;
        self.train.classes = c.classes.clone();
        if let Some(t) = &mut self.test {
            t.labels = c.test;
            t.classes = c.classes;
        }
        Ok(self)
    }

    /// Images per class of a split, in class order.
    pub fn class_counts(set: &ImageSet) -> Vec<usize> {
        let mut counts = vec![0usize; set.classes.len()];
        for &l in &set.labels {
            if let Some(c) = counts.get_mut(l as usize) {
                *c += 1;
            }
        }
        counts
    }

    /// The indices of one domain (0 = A, 1 = B) of an unpaired split.
    pub fn domain_indices(set: &ImageSet, domain: u32) -> Vec<usize> {
        (0..set.len()).filter(|&i| set.labels[i] == domain).collect()
    }

    /// Everything `vitlab data info` reports, as JSON.
    pub fn info_json(&self) -> serde_json::Value {
        let split = |set: &ImageSet| {
            let per_class: serde_json::Map<String, serde_json::Value> =
                set.classes.iter().zip(Dataset::class_counts(set)).map(|(c, n)| (c.clone(), n.into())).collect();
            serde_json::json!({ "count": set.len(), "per_class": per_class })
        };
        let mut splits = serde_json::Map::new();
        for (name, set) in self.splits() {
            splits.insert(name.to_string(), split(set));
        }
        let (cache_status, cache_path, cache_note) = match &self.cache {
            CacheStatus::Disabled => ("disabled", None, None),
            CacheStatus::Hit(p) => ("hit", Some(p.clone()), None),
            CacheStatus::Built { path, replaced } => ("built", Some(path.clone()), replaced.clone()),
            CacheStatus::Unwritten(why) => ("unwritten", None, Some(why.clone())),
        };
        serde_json::json!({
            "format": self.format,
            "path": self.source,
            "channels": self.train.channels,
            "height": self.train.height,
            "width": self.train.width,
            "classes": self.train.classes,
            "coarse_classes": self.coarse.as_ref().map(|c| &c.classes),
            "splits": splits,
            "checksum": format!("sha256:{}", self.checksum),
            "fingerprint": self.fingerprint,
            "cache": { "status": cache_status, "path": cache_path, "note": cache_note },
            "notes": self.notes,
        })
    }
}
