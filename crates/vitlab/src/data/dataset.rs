//! [`open`]: recognises a dataset's layout, and dispatches to the reader for it
//! ([`super::cifar`], [`super::folder`], [`super::unpaired`],
//! [`super::tiny_imagenet`]) or to the decoded-dataset [`super::cache`]; the
//! source's fingerprint and the content's checksum that decide the cache. The
//! types the readers share are in [`super::types`].

use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::types::{CacheStatus, DataFormat, Dataset, Decoded, OpenOptions};
use super::{cache, cifar, folder, tiny_imagenet, unpaired, ImageSet};
use crate::{Error, Result};

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
                    ds.cache = CacheStatus::Built { path: cand.clone(), replaced: replaced.clone() };
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
            return Err(Error::data(path, "a zip archive: unpack it first (`vitlab data download` unpacks the zips it fetches)"));
        }
        return Err(Error::data(path, "not a dataset: expected a CIFAR .tar.gz archive or a dataset folder"));
    }
    // The folder itself, or the one folder an archive unpacks to.
    let mut dirs = vec![path.to_path_buf()];
    for sub in ["cifar-10-batches-bin", "cifar-10-batches-py", "cifar-100-binary", "cifar-100-python", "tiny-imagenet-200"] {
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
    let name =
        abs.file_name().map(|n| n.to_string_lossy().into_owned()).filter(|n| !n.is_empty()).unwrap_or_else(|| "dataset".into());
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
