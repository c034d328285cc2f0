//! Builds a CycleGAN-style unpaired folder (`trainA/ trainB/ testA/ testB/`,
//! see [`super::unpaired`]) from two classes of any labelled dataset that
//! [`super::open`] reads: e.g. automobile <-> truck from CIFAR-10.
//!
//! Domain A is one class, domain B another; each split of the source gives
//! its images of those classes, optionally a seeded random subset
//! (`limit_*`) and resized (`size`), written as PNG files `00000.png`, ...
//! in source order. A source without an evaluation split gives `trainA/` and
//! `trainB/` only (the unpaired reader accepts that). The folder is written
//! under a temporary sibling name (`DIR.tmp-<pid>`) and renamed to `DIR` at
//! the end, so `DIR` is never half-written; an existing non-empty `DIR` is
//! refused. `DIR/unpaired.json` records how it was made.

use std::fs;
use std::path::{Path, PathBuf};

use super::loader::{resize_bilinear, Rng};
use super::{open_with, Dataset, ImageSet, OpenOptions};
use crate::util::png::encode_png;
use crate::{Error, Result};

/// What [`make_unpaired`] builds.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct UnpairedOptions {
    /// The class of domain A, matched exactly against the dataset's class names.
    pub a: String,
    /// The class of domain B.
    pub b: String,
    /// Resize every image to `size` x `size` (bilinear, half-pixel centres);
    /// `None` keeps the source size.
    pub size: Option<usize>,
    /// At most this many training images per domain, a seeded random subset; 0 = all.
    pub limit_train: usize,
    /// At most this many test images per domain, a seeded random subset; 0 = all.
    pub limit_test: usize,
    /// Seed of the subsets: a class's subset depends on the seed, the split
    /// and the class, not on the other domain's class.
    pub seed: u64,
    /// Threads for encoding the PNG files; 0 uses every core.
    pub threads: usize,
}

/// One folder written: `trainA`, `trainB`, `testA` or `testB`.
#[derive(Clone, Debug, PartialEq)]
pub struct UnpairedFolder {
    pub name: String,
    /// The source class it holds.
    pub class: String,
    /// Images written.
    pub count: usize,
    /// Images of that class in the source split.
    pub available: usize,
}

/// What [`make_unpaired`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct UnpairedSummary {
    pub out: PathBuf,
    /// `Dataset::summary()` of the source.
    pub source: String,
    /// The folders written, train before test, A before B.
    pub folders: Vec<UnpairedFolder>,
    /// The size of the written images.
    pub height: usize,
    pub width: usize,
    /// The source's image size.
    pub source_height: usize,
    pub source_width: usize,
    /// Remarks: the source's (e.g. images resized when read), a missing test split.
    pub notes: Vec<String>,
}

/// Opens `source` with `open` and writes the unpaired folder `out` from its
/// classes `options.a` and `options.b` (see the module documentation).
///
/// Errors (each naming the flag or path): `a` equal to `b`, a size of 0,
/// `out` existing and not empty, `out` inside the source, an unknown class
/// (listing the dataset's classes), anything [`open_with`] refuses.
pub fn make_unpaired(source: &Path, out: &Path, options: &UnpairedOptions, open: &OpenOptions) -> Result<UnpairedSummary> {
    // Everything that can be checked before the (possibly long) decode.
    check_options(options)?;
    check_out(out)?;
    let ds = open_with(source, open)?;
    write_unpaired(&ds, out, options)
}

/// Writes the unpaired folder `out` from an opened dataset (what
/// [`make_unpaired`] does after opening it).
pub fn write_unpaired(ds: &Dataset, out: &Path, options: &UnpairedOptions) -> Result<UnpairedSummary> {
    check_options(options)?;
    let label = |set: &ImageSet, flag: &str, class: &str| -> Result<u32> {
        set.classes.iter().position(|c| c == class).map(|i| i as u32).ok_or_else(|| {
            Error::config(
                flag,
                format!(
                    "unknown class {class:?} in {} ({}); its classes are: {}",
                    ds.source.display(),
                    ds.format,
                    set.classes.join(", ")
                ),
            )
        })
    };
    let (la, lb) = (label(&ds.train, "--a", &options.a)?, label(&ds.train, "--b", &options.b)?);
    check_out(out)?;
    check_not_inside(&ds.source, out)?;

    let mut notes = ds.notes.clone();
    // (folder name, set, label, class, limit, split key for the subset's seed)
    let mut plan: Vec<(&str, &ImageSet, u32, &str, usize, u64)> = vec![
        ("trainA", &ds.train, la, &options.a, options.limit_train, 0),
        ("trainB", &ds.train, lb, &options.b, options.limit_train, 0),
    ];
    match &ds.test {
        None => {
            notes.push(format!(
                "{} has no test split: wrote trainA/ and trainB/ only{}",
                ds.source.display(),
                if options.limit_test > 0 { " (--limit-test not used)" } else { "" }
            ));
        }
        Some(test) => {
            let (ta, tb) = (label(test, "--a", &options.a)?, label(test, "--b", &options.b)?);
            let count = |l: u32| test.labels.iter().filter(|&&x| x == l).count();
            let empty: Vec<&str> =
                [(ta, &options.a), (tb, &options.b)].iter().filter(|(l, _)| count(*l) == 0).map(|(_, c)| c.as_str()).collect();
            if empty.is_empty() {
                plan.push(("testA", test, ta, &options.a, options.limit_test, 1));
                plan.push(("testB", test, tb, &options.b, options.limit_test, 1));
            } else {
                notes.push(format!(
                    "the {} split has no images of {}: wrote trainA/ and trainB/ only",
                    ds.test_split,
                    empty.join(" and ")
                ));
            }
        }
    }

    let tmp = tmp_sibling(out)?;
    let guard = RemoveOnDrop(Some(tmp.clone()));
    if tmp.exists() {
        // A leftover of an interrupted run that had this process id.
        fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    if let Some(parent) = tmp.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    fs::create_dir(&tmp).map_err(|e| Error::io(&tmp, e))?;

    let (source_height, source_width) = (ds.train.height, ds.train.width);
    let (height, width) = options.size.map(|s| (s, s)).unwrap_or((source_height, source_width));
    let mut folders = Vec::new();
    for (name, set, l, class, limit, split_key) in plan {
        let (picked, available) = pick(set, l, limit, options.seed, split_key);
        if picked.is_empty() {
            return Err(Error::data(&ds.source, format!("the train split has no images of class {class:?}")));
        }
        write_folder(set, &picked, &tmp.join(name), options.size, options.threads)?;
        folders.push(UnpairedFolder { name: name.to_string(), class: class.to_string(), count: picked.len(), available });
    }
    let record = serde_json::json!({
        "source": ds.source,
        "source_format": ds.format,
        "source_checksum": format!("sha256:{}", ds.checksum),
        "a": options.a,
        "b": options.b,
        "size": options.size,
        "height": height,
        "width": width,
        "limit_train": options.limit_train,
        "limit_test": options.limit_test,
        "seed": options.seed,
        "folders": folders.iter().map(|f| serde_json::json!({
            "name": f.name, "class": f.class, "count": f.count, "available": f.available,
        })).collect::<Vec<_>>(),
        "notes": notes,
    });
    let json = tmp.join("unpaired.json");
    fs::write(&json, serde_json::to_string_pretty(&record).expect("json") + "\n").map_err(|e| Error::io(&json, e))?;

    // Someone may have created `out` meanwhile: check again, then replace an empty folder.
    check_out(out)?;
    if out.is_dir() {
        fs::remove_dir(out).map_err(|e| Error::io(out, e))?;
    }
    fs::rename(&tmp, out).map_err(|e| Error::data(out, format!("cannot rename {} to it: {e}", tmp.display())))?;
    guard.disarm();
    Ok(UnpairedSummary {
        out: out.to_path_buf(),
        source: ds.summary(),
        folders,
        height,
        width,
        source_height,
        source_width,
        notes,
    })
}

fn check_options(options: &UnpairedOptions) -> Result<()> {
    if options.a == options.b {
        return Err(Error::usage("--b", format!("is the same class as --a ({:?}): the two domains must differ", options.a)));
    }
    if let Some(s) = options.size {
        if s == 0 || s > 4096 {
            return Err(Error::usage("--size", format!("{s} is not in 1..=4096")));
        }
    }
    Ok(())
}

/// `out` must not exist, or be an empty folder.
fn check_out(out: &Path) -> Result<()> {
    match fs::symlink_metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(out, e)),
        Ok(m) if m.is_dir() => {
            let mut rd = fs::read_dir(out).map_err(|e| Error::io(out, e))?;
            if rd.next().is_some() {
                Err(Error::data(out, "already exists and is not empty: give another --out, or remove it first"))
            } else {
                Ok(())
            }
        }
        Ok(_) => Err(Error::data(out, "already exists and is not a folder: give another --out")),
    }
}

/// Refuses an `out` inside the source folder (it would become part of the dataset).
fn check_not_inside(source: &Path, out: &Path) -> Result<()> {
    let Ok(src) = source.canonicalize() else { return Ok(()) };
    if !src.is_dir() {
        return Ok(());
    }
    // The deepest existing ancestor of `out`, canonical, then the rest.
    let mut existing = out.to_path_buf();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = if parent.as_os_str().is_empty() { PathBuf::from(".") } else { parent.to_path_buf() };
            }
            _ => return Ok(()),
        }
    }
    let Ok(mut abs) = existing.canonicalize() else { return Ok(()) };
    abs.extend(rest.iter().rev());
    if abs.starts_with(&src) {
        return Err(Error::data(out, format!("is inside the source dataset {}: write it elsewhere", source.display())));
    }
    Ok(())
}

/// `DIR.tmp-<pid>` beside `DIR`.
fn tmp_sibling(out: &Path) -> Result<PathBuf> {
    let name =
        out.file_name().ok_or_else(|| Error::data(out, "is not a folder name: give --out a path such as data/auto2truck"))?;
    Ok(out.with_file_name(format!("{}.tmp-{}", name.to_string_lossy(), std::process::id())))
}

struct RemoveOnDrop(Option<PathBuf>);

impl RemoveOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// The indices of class `label` in `set` (and how many there are): all, or a
/// seeded random subset of `limit`, in source order.
fn pick(set: &ImageSet, label: u32, limit: usize, seed: u64, split_key: u64) -> (Vec<usize>, usize) {
    let mut idx: Vec<usize> = (0..set.len()).filter(|&i| set.labels[i] == label).collect();
    let available = idx.len();
    if limit > 0 && limit < available {
        Rng::keyed(&[seed, split_key, label as u64]).shuffle(&mut idx);
        idx.truncate(limit);
        idx.sort_unstable();
    }
    (idx, available)
}

/// Writes images `picked` of `set` into the new folder `dir` as `00000.png`, ...
/// (at least 5 digits, more when needed so that the names sort in order).
fn write_folder(set: &ImageSet, picked: &[usize], dir: &Path, size: Option<usize>, threads: usize) -> Result<()> {
    fs::create_dir(dir).map_err(|e| Error::io(dir, e))?;
    let digits = picked.len().saturating_sub(1).to_string().len().max(5);
    let threads = if threads > 0 { threads } else { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) };
    let chunk = picked.len().div_ceil(threads.clamp(1, 64)).max(1);
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = picked
            .chunks(chunk)
            .enumerate()
            .map(|(c, part)| {
                scope.spawn(move || -> Result<()> {
                    let mut resized = Vec::new();
                    for (k, &i) in part.iter().enumerate() {
                        let path = dir.join(format!("{:0digits$}.png", c * chunk + k));
                        let (pixels, h, w) = match size {
                            Some(s) if (s, s) != (set.height, set.width) => {
                                resize_bilinear(set.image(i), set.channels, set.height, set.width, s, &mut resized);
                                (&resized[..], s, s)
                            }
                            _ => (set.image(i), set.height, set.width),
                        };
                        let png = encode_png(pixels, set.channels, h, w).map_err(|m| Error::data(&path, m))?;
                        fs::write(&path, png).map_err(|e| Error::io(&path, e))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::data(dir, "a writing thread failed")))).collect()
    });
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_round_trip_keeps_pixels() {
        let set = ImageSet::synthetic(1, 1, 5, 3);
        let png = encode_png(set.image(0), 3, 5, 5).unwrap();
        let back = super::super::decode::decode_bytes(&png).unwrap();
        assert_eq!((back.h, back.w), (5, 5));
        assert_eq!(back.chw, set.image(0));
    }

    #[test]
    fn subsets_are_seeded_per_class_and_in_order() {
        let set = ImageSet::synthetic(40, 2, 2, 0);
        let (a, n) = pick(&set, 1, 5, 7, 0);
        assert_eq!(n, 20);
        assert_eq!(a.len(), 5);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a.iter().all(|&i| set.labels[i] == 1));
        assert_eq!(pick(&set, 1, 5, 7, 0).0, a);
        assert_ne!(pick(&set, 1, 5, 8, 0).0, a);
        assert_eq!(pick(&set, 1, 0, 7, 0).0.len(), 20);
        assert_eq!(pick(&set, 1, 50, 7, 0).0.len(), 20);
    }
}
