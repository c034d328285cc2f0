//! [`open`]: format detection, the decoded-dataset cache, and what a dataset reports.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{cache, cifar, folder, tiny_imagenet, unpaired, ImageSet};
use crate::{Error, Result};

/// The layouts [`open`] recognises.
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

/// How [`open_with`] reads a dataset.
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
        OpenOptions {
            cache: true,
            cache_dir: None,
            image_size: None,
            threads: 0,
        }
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
    /// The path given to [`open`].
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
        let mut s = format!(
            "{} at {}: {} train",
            self.format,
            self.source.display(),
            t.len()
        );
        if let Some(test) = &self.test {
            s.push_str(&format!(", {} {}", test.len(), self.test_split));
        }
        s.push_str(&format!(
            " images, {} classes, {}x{}x{}",
            t.classes.len(),
            t.channels,
            t.height,
            t.width
        ));
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
            let per_class: serde_json::Map<String, serde_json::Value> = set
                .classes
                .iter()
                .zip(Dataset::class_counts(set))
                .map(|(c, n)| (c.clone(), n.into()))
                .collect();
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

/// Opens a dataset with the default options (cache beside the data).
pub fn open(path: impl AsRef<Path>) -> Result<Dataset> {
    open_with(path, &OpenOptions::default())
}

/// Recognises the layout at `path`, and returns the decoded dataset, from the
/// cache when it is current, else decoding the source (and writing the cache).
pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Dataset> {
    let path = path.as_ref();
    if let Some(s) = options.image_size {
        if s == 0 || s > 4096 {
            return Err(Error::config("image_size", format!("{s} is not in 1..=4096")));
        }
    }
    let layout = detect(path)?;
    let fingerprint = fingerprint(&layout)?;
    let key = options.key();
    let mut replaced = None;
    let candidates = if options.cache { cache_candidates(path, options) } else { Vec::new() };
    for cand in &candidates {
        if !cand.exists() {
            continue;
        }
        match cache::read(cand, Some((&fingerprint, &key))) {
            Ok(mut ds) => {
                ds.source = path.to_path_buf();
                ds.cache = CacheStatus::Hit(cand.clone());
                return Ok(ds);
            }
            Err(e) => {
                replaced.get_or_insert_with(|| e.to_string());
            }
        }
    }
    let decoded = match &layout {
        Layout::CifarArchive(p) => cifar::read_archive(p)?,
        Layout::CifarDir(p, fmt) => cifar::read_dir(p, *fmt)?,
        Layout::Folder(p) => folder::read(p, options)?,
        Layout::Unpaired(p) => unpaired::read(p, options)?,
        Layout::TinyImagenet(p) => tiny_imagenet::read(p, options)?,
    };
    let mut ds = Dataset {
        checksum: content_checksum(&decoded),
        format: decoded.format,
        source: path.to_path_buf(),
        train: decoded.train,
        test: decoded.test,
        test_split: decoded.test_split,
        coarse: decoded.coarse,
        fingerprint,
        notes: decoded.notes,
        cache: CacheStatus::Disabled,
    };
    if options.cache {
        let mut why_not = String::from("no cache location");
        for cand in &candidates {
            match cache::write(cand, &ds, &key) {
                Ok(()) => {
                    ds.cache = CacheStatus::Built {
                        path: cand.clone(),
                        replaced: replaced.clone(),
                    };
                    break;
                }
                Err(e) => why_not = e.to_string(),
            }
        }
        if !matches!(ds.cache, CacheStatus::Built { .. }) {
            ds.cache = CacheStatus::Unwritten(why_not);
        }
    }
    Ok(ds)
}

/// A recognised layout and the folder or file holding it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Layout {
    CifarArchive(PathBuf),
    CifarDir(PathBuf, DataFormat),
    Folder(PathBuf),
    Unpaired(PathBuf),
    TinyImagenet(PathBuf),
}

pub(crate) fn detect(path: &Path) -> Result<Layout> {
    let meta = fs::metadata(path).map_err(|e| Error::data(path, format!("cannot read dataset: {e}")))?;
    if meta.is_file() {
        let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
        if name.ends_with(".tar.gz") || name.ends_with(".tgz") || name.ends_with(".tar") {
            return Ok(Layout::CifarArchive(path.to_path_buf()));
        }
        if name.ends_with(".zip") {
            return Err(Error::data(
                path,
                "a zip archive: unpack it first (`vitlab data download` unpacks the zips it fetches)",
            ));
        }
        return Err(Error::data(
            path,
            "not a dataset: expected a CIFAR .tar.gz archive or a dataset folder",
        ));
    }
    // The folder itself, or the one folder an archive unpacks to.
    let mut dirs = vec![path.to_path_buf()];
    for sub in [
        "cifar-10-batches-bin",
        "cifar-10-batches-py",
        "cifar-100-binary",
        "cifar-100-python",
        "tiny-imagenet-200",
    ] {
        if path.join(sub).is_dir() {
            dirs.push(path.join(sub));
        }
    }
    for d in &dirs {
        if let Some(fmt) = cifar::detect_dir(d) {
            return Ok(Layout::CifarDir(d.clone(), fmt));
        }
        if d.join("wnids.txt").is_file() && d.join("train").is_dir() {
            return Ok(Layout::TinyImagenet(d.clone()));
        }
    }
    if ["trainA", "trainB", "testA", "testB"].iter().any(|s| path.join(s).is_dir()) {
        return Ok(Layout::Unpaired(path.to_path_buf()));
    }
    Ok(Layout::Folder(path.to_path_buf()))
}

/// SHA-256 (hex) over the relative paths, sizes and modification times of the
/// source's files (hidden files excluded).
pub(crate) fn fingerprint(layout: &Layout) -> Result<String> {
    let (root, recursive) = match layout {
        Layout::CifarArchive(p) => (p.as_path(), false),
        Layout::CifarDir(p, _) => (p.as_path(), false),
        Layout::Folder(p) | Layout::Unpaired(p) | Layout::TinyImagenet(p) => (p.as_path(), true),
    };
    let mut entries: Vec<(String, u64, u128)> = Vec::new();
    let stat = |p: &Path| -> Result<(u64, u128)> {
        let m = fs::metadata(p).map_err(|e| Error::io(p, e))?;
        let t = m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_nanos()).unwrap_or(0);
        Ok((m.len(), t))
    };
    if root.is_file() {
        let (len, t) = stat(root)?;
        let name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        entries.push((name, len, t));
    } else {
        walk(root, root, recursive, &mut entries)?;
    }
    entries.sort();
    let mut h = Sha256::new();
    for (name, len, t) in &entries {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(len.to_le_bytes());
        h.update(t.to_le_bytes());
    }
    Ok(hex(&h.finalize()))
}

fn walk(root: &Path, dir: &Path, recursive: bool, out: &mut Vec<(String, u64, u128)>) -> Result<()> {
    let rd = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let ft = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
        let p = entry.path();
        if ft.is_dir() {
            if recursive {
                walk(root, &p, recursive, out)?;
            }
            continue;
        }
        let m = entry.metadata().map_err(|e| Error::io(&p, e))?;
        let t = m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_nanos()).unwrap_or(0);
        let rel = p.strip_prefix(root).unwrap_or(&p).to_string_lossy().into_owned();
        out.push((rel, m.len(), t));
    }
    Ok(())
}

/// The user's cache folder: `$XDG_CACHE_HOME` when it is an absolute path (the XDG
/// rule), else `~/.cache`. vitlab keeps dataset caches and the FID weights below it.
pub fn user_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 (hex) over the decoded content.
fn content_checksum(d: &Decoded) -> String {
    let mut h = Sha256::new();
    let mut set = |name: &str, s: &ImageSet| {
        h.update(name.as_bytes());
        for v in [s.len(), s.channels, s.height, s.width, s.classes.len()] {
            h.update((v as u64).to_le_bytes());
        }
        for c in &s.classes {
            h.update(c.as_bytes());
            h.update([0]);
        }
        h.update(&s.pixels);
        for l in &s.labels {
            h.update(l.to_le_bytes());
        }
    };
    set("train", &d.train);
    if let Some(t) = &d.test {
        set(&d.test_split, t);
    }
    if let Some(c) = &d.coarse {
        for name in &c.classes {
            h.update(name.as_bytes());
            h.update([0]);
        }
        for l in c.train.iter().chain(&c.test) {
            h.update(l.to_le_bytes());
        }
    }
    hex(&h.finalize())
}

/// Where the cache for `source` may live, in order of preference.
pub(crate) fn cache_candidates(source: &Path, options: &OpenOptions) -> Vec<PathBuf> {
    let abs = source.canonicalize().unwrap_or_else(|_| source.to_path_buf());
    let name = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "dataset".into());
    let suffix = match options.image_size {
        Some(s) => format!(".{s}px.vitlab-cache"),
        None => ".vitlab-cache".to_string(),
    };
    let tag = &hex(&Sha256::digest(abs.to_string_lossy().as_bytes()))[..12];
    if let Some(dir) = &options.cache_dir {
        return vec![dir.join(format!("{name}-{tag}{suffix}"))];
    }
    let mut v = Vec::new();
    if let Some(parent) = abs.parent() {
        v.push(parent.join(format!("{name}{suffix}")));
    }
    if let Some(u) = user_cache_dir() {
        v.push(u.join("vitlab").join(format!("{name}-{tag}{suffix}")));
    }
    v
}
