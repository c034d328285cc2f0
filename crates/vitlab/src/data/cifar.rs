//! CIFAR-10 and CIFAR-100, both official releases, as the downloaded archive
//! (`.tar.gz`, or `.tar`) or extracted:
//!
//! - binary version: CIFAR-10 `data_batch_{1..5}.bin`, `test_batch.bin`
//!   (records of 1 label byte + 3072 pixel bytes, RGB planes of 32x32),
//!   `batches.meta.txt`; CIFAR-100 `train.bin`, `test.bin` (records of coarse
//!   label, fine label, 3072 pixel bytes), `fine_label_names.txt`,
//!   `coarse_label_names.txt`;
//! - python version: the same content as pickled dicts (`data_batch_N`,
//!   `test_batch`, `batches.meta`; CIFAR-100 `train`, `test`, `meta`), read by
//!   the bounded [`crate::tensor_file::pickle`] reader (no Python, no code execution).
//!
//! Every malformed input is an error naming the file and the problem: a
//! record size that does not divide the file, a label out of range, a
//! missing batch, a truncated archive, an unreadable pickle.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::types::{CoarseLabels, DataFormat, Decoded};
use super::ImageSet;
use crate::tensor_file::pickle::{self, Value};
use crate::{Error, Result};

pub const CIFAR10_CLASSES: [&str; 10] =
    ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"];

const PIXELS: usize = 3 * 32 * 32;

/// The member files of one release, by base name.
type Files = BTreeMap<String, (PathBuf, Vec<u8>)>;

fn train_names(fmt: DataFormat) -> Vec<String> {
    match fmt {
        DataFormat::Cifar10Binary => (1..=5).map(|i| format!("data_batch_{i}.bin")).collect(),
        DataFormat::Cifar10Python => (1..=5).map(|i| format!("data_batch_{i}")).collect(),
        DataFormat::Cifar100Binary => vec!["train.bin".into()],
        _ => vec!["train".into()],
    }
}

fn test_name(fmt: DataFormat) -> &'static str {
    match fmt {
        DataFormat::Cifar10Binary => "test_batch.bin",
        DataFormat::Cifar10Python => "test_batch",
        DataFormat::Cifar100Binary => "test.bin",
        _ => "test",
    }
}

fn meta_names(fmt: DataFormat) -> &'static [&'static str] {
    match fmt {
        DataFormat::Cifar10Binary => &["batches.meta.txt"],
        DataFormat::Cifar10Python => &["batches.meta"],
        DataFormat::Cifar100Binary => &["fine_label_names.txt", "coarse_label_names.txt"],
        _ => &["meta"],
    }
}

fn wanted(name: &str) -> bool {
    DataFormat::ALL[..4]
        .iter()
        .any(|&f| train_names(f).iter().any(|n| n == name) || test_name(f) == name || meta_names(f).contains(&name))
}

/// Which CIFAR release a folder holds, from its file names.
pub fn detect_dir(dir: &Path) -> Option<DataFormat> {
    let has = |n: &str| dir.join(n).is_file();
    if has("data_batch_1.bin") || has("test_batch.bin") {
        Some(DataFormat::Cifar10Binary)
    } else if has("data_batch_1") || has("test_batch") {
        Some(DataFormat::Cifar10Python)
    } else if has("train.bin") || has("test.bin") {
        Some(DataFormat::Cifar100Binary)
    } else if has("meta") && (has("train") || has("test")) {
        Some(DataFormat::Cifar100Python)
    } else {
        None
    }
}

fn detect_files(files: &Files) -> Option<DataFormat> {
    let has = |n: &str| files.contains_key(n);
    if has("data_batch_1.bin") || has("test_batch.bin") {
        Some(DataFormat::Cifar10Binary)
    } else if has("data_batch_1") || has("test_batch") {
        Some(DataFormat::Cifar10Python)
    } else if has("train.bin") || has("test.bin") {
        Some(DataFormat::Cifar100Binary)
    } else if has("meta") && (has("train") || has("test")) {
        Some(DataFormat::Cifar100Python)
    } else {
        None
    }
}

/// Reads an extracted release.
pub(crate) fn read_dir(dir: &Path, fmt: DataFormat) -> Result<Decoded> {
    let mut files = Files::new();
    let mut names = train_names(fmt);
    names.push(test_name(fmt).to_string());
    names.extend(meta_names(fmt).iter().map(|s| s.to_string()));
    for n in names {
        let p = dir.join(&n);
        if p.is_file() {
            let bytes = fs::read(&p).map_err(|e| Error::io(&p, e))?;
            files.insert(n, (p, bytes));
        }
    }
    parse(fmt, &files, dir)
}

/// Reads a release archive (`.tar.gz`, `.tgz` or `.tar`).
pub(crate) fn read_archive(path: &Path) -> Result<Decoded> {
    let f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    read_archive_from(std::io::BufReader::with_capacity(1 << 20, f), path)
}

/// Parses a release archive held in memory (for tests and fuzzing): the train
/// and test splits.
pub fn parse_archive(bytes: &[u8], path: &Path) -> Result<(ImageSet, Option<ImageSet>)> {
    let d = read_archive_from(bytes, path)?;
    Ok((d.train, d.test))
}

fn read_archive_from(mut r: impl std::io::BufRead, path: &Path) -> Result<Decoded> {
    let corrupt = |e: std::io::Error| Error::data(path, format!("truncated or corrupt archive: {e}"));
    let gz = r.fill_buf().map_err(|e| Error::io(path, e))?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn Read> = if gz { Box::new(flate2::bufread::MultiGzDecoder::new(r)) } else { Box::new(r) };
    let mut archive = tar::Archive::new(reader);
    let mut files = Files::new();
    let entries = archive.entries().map_err(corrupt)?;
    let mut seen = 0usize;
    for entry in entries {
        let mut entry = entry.map_err(corrupt)?;
        seen += 1;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let member = entry.path().map_err(corrupt)?.into_owned();
        let Some(base) = member.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        if !wanted(&base) {
            continue;
        }
        let size = entry.header().size().map_err(corrupt)?;
        // Members are at most a few hundred MB; the read stops at the data
        // actually present, so a lying header cannot force a huge allocation.
        let mut bytes = Vec::with_capacity(size.min(256 << 20) as usize);
        entry.read_to_end(&mut bytes).map_err(corrupt)?;
        if (bytes.len() as u64) < size {
            return Err(Error::data(path, format!("truncated archive: member {} is cut short", member.display())));
        }
        files.insert(base, (path.join(&member), bytes));
    }
    if seen == 0 {
        return Err(Error::data(path, "empty or corrupt archive: no members"));
    }
    let fmt = detect_files(&files).ok_or_else(|| {
        Error::data(path, "archive holds no CIFAR files (looked for data_batch_1.bin, data_batch_1, train.bin, train + meta)")
    })?;
    parse(fmt, &files, path)
}

fn parse(fmt: DataFormat, files: &Files, root: &Path) -> Result<Decoded> {
    let hundred = matches!(fmt, DataFormat::Cifar100Binary | DataFormat::Cifar100Python);
    let python = matches!(fmt, DataFormat::Cifar10Python | DataFormat::Cifar100Python);
    let get = |n: &str| -> Result<&(PathBuf, Vec<u8>)> {
        files.get(n).ok_or_else(|| Error::data(root.join(n), format!("missing split: {fmt} needs {n}, which is not there")))
    };
    let batch = |n: &str| -> Result<Batch> {
        let (p, bytes) = get(n)?;
        if python {
            parse_python_batch(bytes, hundred, p)
        } else {
            parse_binary_batch(bytes, hundred, p)
        }
    };
    let mut train = Batch::default();
    for n in train_names(fmt) {
        let b = batch(&n)?;
        train.pixels.extend_from_slice(&b.pixels);
        train.fine.extend_from_slice(&b.fine);
        train.coarse.extend_from_slice(&b.coarse);
    }
    let test = batch(test_name(fmt))?;
    let mut notes = Vec::new();
    let (fine_names, coarse_names) = class_names(fmt, files, root, &mut notes)?;
    let n_fine = if hundred { 100 } else { 10 };
    for (n, names) in [(n_fine, Some(&fine_names)), (20, coarse_names.as_ref())] {
        if let Some(names) = names {
            if names.len() != n {
                return Err(Error::data(
                    root.join(meta_names(fmt)[0]),
                    format!("lists {} class names, expected {n}", names.len()),
                ));
            }
        }
    }
    let coarse = hundred.then(|| CoarseLabels {
        classes: coarse_names.clone().unwrap_or_else(|| (0..20).map(|i| format!("superclass{i}")).collect()),
        train: std::mem::take(&mut train.coarse),
        test: test.coarse.clone(),
    });
    let set =
        |b: Batch| ImageSet { pixels: b.pixels, labels: b.fine, channels: 3, height: 32, width: 32, classes: fine_names.clone() };
    Ok(Decoded { format: fmt, train: set(train), test: Some(set(test)), test_split: "test".into(), coarse, notes })
}

/// Decoded records of one batch file.
#[derive(Default)]
pub struct Batch {
    pub pixels: Vec<u8>,
    pub fine: Vec<u32>,
    /// CIFAR-100 only.
    pub coarse: Vec<u32>,
}

/// Parses a binary-version batch file (`data_batch_N.bin`, or CIFAR-100's `train.bin`).
pub fn parse_binary_batch(bytes: &[u8], hundred: bool, path: &Path) -> Result<Batch> {
    let labels = if hundred { 2 } else { 1 };
    let rec = labels + PIXELS;
    if bytes.is_empty() || !bytes.len().is_multiple_of(rec) {
        return Err(Error::data(
            path,
            format!(
                "wrong record size: {} bytes is not a whole number of {rec}-byte {} records (truncated, or not this release)",
                bytes.len(),
                if hundred { "CIFAR-100" } else { "CIFAR-10" }
            ),
        ));
    }
    let n = bytes.len() / rec;
    let mut b = Batch {
        pixels: Vec::with_capacity(n * PIXELS),
        fine: Vec::with_capacity(n),
        coarse: Vec::with_capacity(if hundred { n } else { 0 }),
    };
    for (i, r) in bytes.chunks_exact(rec).enumerate() {
        let (fine, coarse) = if hundred { (r[1], Some(r[0])) } else { (r[0], None) };
        check_label(fine as i64, if hundred { 100 } else { 10 }, i, "label", path)?;
        b.fine.push(fine as u32);
        if let Some(c) = coarse {
            check_label(c as i64, 20, i, "coarse label", path)?;
            b.coarse.push(c as u32);
        }
        b.pixels.extend_from_slice(&r[labels..]);
    }
    Ok(b)
}

fn check_label(l: i64, n: i64, i: usize, what: &str, path: &Path) -> Result<()> {
    if l < 0 || l >= n {
        return Err(Error::data(path, format!("record {i}: {what} {l} out of range (0..{n})")));
    }
    Ok(())
}

/// Parses a python-version batch (a pickled dict with `data` and `labels`, or
/// CIFAR-100's `fine_labels` and `coarse_labels`).
pub fn parse_python_batch(bytes: &[u8], hundred: bool, path: &Path) -> Result<Batch> {
    let v = pickle::parse(bytes).map_err(|m| Error::data(path, format!("unreadable pickle: {m}")))?;
    let field = |k: &str| v.get(k).ok_or_else(|| Error::data(path, format!("pickle has no {k:?} entry")));
    let (shape, data) =
        crate::tensor_file::numpy::ndarray_u8(field("data")?).map_err(|m| Error::data(path, format!("\"data\": {m}")))?;
    if shape.len() != 2 || shape[1] != PIXELS {
        return Err(Error::data(path, format!("\"data\" has shape {shape:?}, expected (N, {PIXELS})")));
    }
    let n = shape[0];
    let ints = |k: &str| -> Result<Vec<i64>> {
        let l = field(k)?.as_ints().ok_or_else(|| Error::data(path, format!("{k:?} is not a list of ints")))?;
        if l.len() != n {
            return Err(Error::data(path, format!("{k:?} has {} entries for {n} images", l.len())));
        }
        Ok(l)
    };
    let mut b = Batch { pixels: data.to_vec(), ..Batch::default() };
    let (fine_key, n_fine) = if hundred { ("fine_labels", 100) } else { ("labels", 10) };
    for (i, l) in ints(fine_key)?.into_iter().enumerate() {
        check_label(l, n_fine, i, "label", path)?;
        b.fine.push(l as u32);
    }
    if hundred {
        for (i, l) in ints("coarse_labels")?.into_iter().enumerate() {
            check_label(l, 20, i, "coarse label", path)?;
            b.coarse.push(l as u32);
        }
    }
    Ok(b)
}

/// Parses a python-version meta file: (fine or only class names, coarse names).
pub fn parse_python_meta(bytes: &[u8], hundred: bool, path: &Path) -> Result<(Vec<String>, Option<Vec<String>>)> {
    let v = pickle::parse(bytes).map_err(|m| Error::data(path, format!("unreadable pickle: {m}")))?;
    let names = |k: &str| -> Result<Vec<String>> {
        v.get(k).and_then(Value::as_strings).ok_or_else(|| Error::data(path, format!("pickle has no list of strings {k:?}")))
    };
    if hundred {
        Ok((names("fine_label_names")?, Some(names("coarse_label_names")?)))
    } else {
        Ok((names("label_names")?, None))
    }
}

fn text_names(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes).lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
}

fn class_names(
    fmt: DataFormat,
    files: &Files,
    root: &Path,
    notes: &mut Vec<String>,
) -> Result<(Vec<String>, Option<Vec<String>>)> {
    let default10 = || CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let missing = |n: &str, notes: &mut Vec<String>| {
        notes.push(format!("{} not found; class names are the defaults", root.join(n).display()));
    };
    Ok(match fmt {
        DataFormat::Cifar10Binary => match files.get("batches.meta.txt") {
            Some((_, b)) => (text_names(b), None),
            None => {
                missing("batches.meta.txt", notes);
                (default10(), None)
            }
        },
        DataFormat::Cifar10Python => match files.get("batches.meta") {
            Some((p, b)) => parse_python_meta(b, false, p)?,
            None => {
                missing("batches.meta", notes);
                (default10(), None)
            }
        },
        DataFormat::Cifar100Binary => {
            let fine = match files.get("fine_label_names.txt") {
                Some((_, b)) => text_names(b),
                None => {
                    missing("fine_label_names.txt", notes);
                    (0..100).map(|i| format!("class{i}")).collect()
                }
            };
            let coarse = match files.get("coarse_label_names.txt") {
                Some((_, b)) => text_names(b),
                None => {
                    missing("coarse_label_names.txt", notes);
                    (0..20).map(|i| format!("superclass{i}")).collect()
                }
            };
            (fine, Some(coarse))
        }
        _ => match files.get("meta") {
            Some((p, b)) => parse_python_meta(b, true, p)?,
            None => {
                missing("meta", notes);
                ((0..100).map(|i| format!("class{i}")).collect(), Some((0..20).map(|i| format!("superclass{i}")).collect()))
            }
        },
    })
}
