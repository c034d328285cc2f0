//! The decoded-dataset cache: one compact binary file per dataset.
//!
//! Layout (all integers little-endian):
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `VITLABDS` |
//! | 4 | format version ([`VERSION`]) |
//! | 4 | header length `H` (at most 16 MiB) |
//! | `H` | header, JSON: data format, source fingerprint, options, content checksum, and per split its name, count, channels, height, width and class names |
//! | ... | per split: pixels (uint8 NCHW), then labels (u32 each); then CIFAR-100's coarse labels (u32, train then test) |
//! | 4 | CRC-32 of everything before it |
//!
//! The reader checks the magic, the version, that the file's length is exactly
//! what the header implies (before allocating anything), every label against
//! its class count, and the CRC; any failure is an error naming the file and
//! the problem, and [`super::open`] then rebuilds the cache from the source.
//! Writes go to a temporary file that is synced and renamed into place.

use std::fs;
use std::io::{BufWriter, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::types::{CacheStatus, CoarseLabels, DataFormat, Dataset};
use super::ImageSet;
use crate::{Error, Result};

pub const MAGIC: &[u8; 8] = b"VITLABDS";
/// Bumped whenever the layout or the decoding changes, so older caches are rebuilt.
pub const VERSION: u32 = 1;
const MAX_HEADER: usize = 16 << 20;

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    fingerprint: String,
    options: String,
    checksum: String,
    test_split: String,
    notes: Vec<String>,
    splits: Vec<SplitHeader>,
    coarse_classes: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize)]
struct SplitHeader {
    name: String,
    count: usize,
    channels: usize,
    height: usize,
    width: usize,
    classes: Vec<String>,
}

/// Writes `ds` to `path` atomically (temporary file, sync, rename).
pub fn write(path: &Path, ds: &Dataset, options_key: &str) -> Result<()> {
    let header = Header {
        format: ds.format.name().to_string(),
        fingerprint: ds.fingerprint.clone(),
        options: options_key.to_string(),
        checksum: ds.checksum.clone(),
        test_split: ds.test_split.clone(),
        notes: ds.notes.clone(),
        splits: ds
            .splits()
            .into_iter()
            .map(|(name, s)| SplitHeader {
                name: name.to_string(),
                count: s.len(),
                channels: s.channels,
                height: s.height,
                width: s.width,
                classes: s.classes.clone(),
            })
            .collect(),
        coarse_classes: ds.coarse.as_ref().map(|c| c.classes.clone()),
    };
    let header = serde_json::to_vec(&header).map_err(|e| Error::data(path, format!("cache header: {e}")))?;
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut w =
            CrcWriter { inner: BufWriter::with_capacity(1 << 20, fs::File::create(&tmp)?), crc: crc32fast::Hasher::new() };
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(header.len() as u32).to_le_bytes())?;
        w.write_all(&header)?;
        for (_, s) in ds.splits() {
            w.write_all(&s.pixels)?;
            write_u32s(&mut w, &s.labels)?;
        }
        if let Some(c) = &ds.coarse {
            write_u32s(&mut w, &c.train)?;
            write_u32s(&mut w, &c.test)?;
        }
        let crc = w.crc.clone().finalize();
        w.inner.write_all(&crc.to_le_bytes())?;
        let f = w.inner.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

fn write_u32s(w: &mut impl Write, v: &[u32]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(v.len() * 4);
    for x in v {
        buf.extend_from_slice(&x.to_le_bytes());
    }
    w.write_all(&buf)
}

struct CrcWriter<W: Write> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Reads a cache file. With `expect = Some((fingerprint, options))`, a cache
/// written for another source state or other options is an error ("stale").
pub fn read(path: &Path, expect: Option<(&str, &str)>) -> Result<Dataset> {
    let f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    read_from(f, len, path, expect)
}

/// Parses a cache from any reader of `len` bytes (`path` names it in errors).
pub fn read_from(r: impl Read, len: u64, path: &Path, expect: Option<(&str, &str)>) -> Result<Dataset> {
    let err = |m: String| Error::data(path, m);
    let mut r = CrcReader { inner: r, crc: crc32fast::Hasher::new() };
    let io = |e: std::io::Error| read_error(path, e);
    let mut head = [0u8; 16];
    if len < 20 {
        return Err(err(format!("cache file is truncated ({len} bytes)")));
    }
    r.read_exact(&mut head).map_err(io)?;
    if &head[..8] != MAGIC {
        return Err(err("not a vitlab dataset cache (bad magic)".into()));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
    if version != VERSION {
        return Err(err(format!(
            "cache written by another version of vitlab (cache format {version}, this build reads {VERSION})"
        )));
    }
    let hlen = u32::from_le_bytes(head[12..16].try_into().unwrap()) as usize;
    if hlen > MAX_HEADER || hlen as u64 > len - 20 {
        return Err(err(format!("cache header length {hlen} is impossible for a {len}-byte file")));
    }
    let mut hbytes = vec![0u8; hlen];
    r.read_exact(&mut hbytes).map_err(io)?;
    let header: Header = serde_json::from_slice(&hbytes).map_err(|e| err(format!("cache header is corrupt: {e}")))?;
    let format = DataFormat::from_name(&header.format)
        .ok_or_else(|| err(format!("cache header names an unknown format {:?}", header.format)))?;
    if let Some((fp, opts)) = expect {
        if header.fingerprint != fp {
            return Err(err("stale cache: the source's files changed since it was written".into()));
        }
        if header.options != opts {
            return Err(err(format!("stale cache: written with {}, wanted {opts}", header.options)));
        }
    }
    if header.splits.is_empty() || header.splits.len() > 2 {
        return Err(err(format!("cache header has {} splits, expected 1 or 2", header.splits.len())));
    }
    // The exact size the header implies, checked before any large allocation.
    let (expected, sizes) = split_sizes(&header, hlen, path)?;
    if expected != len {
        return Err(err(format!("cache file is {len} bytes, its header implies {expected} (truncated or corrupt)")));
    }
    let mut sets = Vec::new();
    for (s, &(px, lb)) in header.splits.iter().zip(&sizes) {
        let mut pixels = vec![0u8; px as usize];
        r.read_exact(&mut pixels).map_err(io)?;
        let labels = read_u32s(&mut r, lb as usize).map_err(io)?;
        if let Some((i, l)) = labels.iter().enumerate().find(|(_, &l)| l as usize >= s.classes.len()) {
            return Err(err(format!(
                "cache split {:?}: label {l} of image {i} out of range ({} classes)",
                s.name,
                s.classes.len()
            )));
        }
        sets.push(ImageSet {
            pixels,
            labels,
            channels: s.channels,
            height: s.height,
            width: s.width,
            classes: s.classes.clone(),
        });
    }
    let coarse = match &header.coarse_classes {
        Some(classes) => Some(read_coarse(&mut r, &header, classes, path)?),
        None => None,
    };
    let crc = r.crc.clone().finalize();
    let mut stored = [0u8; 4];
    r.inner.read_exact(&mut stored).map_err(io)?;
    if u32::from_le_bytes(stored) != crc {
        return Err(err("cache file is corrupt (CRC mismatch)".into()));
    }
    let mut it = sets.into_iter();
    let train = it.next().ok_or_else(|| err("cache has no train split".into()))?;
    let test = it.next();
    Ok(Dataset {
        format,
        source: path.to_path_buf(),
        train,
        test,
        test_split: header.test_split,
        coarse,
        fingerprint: header.fingerprint,
        checksum: header.checksum,
        notes: header.notes,
        cache: CacheStatus::Hit(path.to_path_buf()),
    })
}

/// The file size the header implies, and each split's (pixel, label) byte counts.
fn split_sizes(header: &Header, hlen: usize, path: &Path) -> Result<(u64, Vec<(u64, u64)>)> {
    let err = |m: String| Error::data(path, m);
    let mut expected: u64 = 16 + hlen as u64 + 4;
    let mut sizes = Vec::new();
    for s in &header.splits {
        if !(1..=4).contains(&s.channels) || s.height == 0 || s.width == 0 {
            return Err(err(format!(
                "cache split {:?} has an impossible image shape {}x{}x{}",
                s.name, s.channels, s.height, s.width
            )));
        }
        let px = (s.count as u64)
            .checked_mul(s.channels as u64)
            .and_then(|v| v.checked_mul(s.height as u64))
            .and_then(|v| v.checked_mul(s.width as u64))
            .ok_or_else(|| err(format!("cache split {:?} is impossibly large", s.name)))?;
        let lb = (s.count as u64).saturating_mul(4);
        sizes.push((px, lb));
        expected = expected.saturating_add(px).saturating_add(lb);
    }
    if header.coarse_classes.is_some() {
        let n = header.splits.iter().fold(0u64, |a, s| a.saturating_add((s.count as u64).saturating_mul(4)));
        expected = expected.saturating_add(n);
    }
    Ok((expected, sizes))
}

/// A read error; running out of bytes means the file is truncated.
fn read_error(path: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Error::data(path, "cache file is truncated")
    } else {
        Error::io(path, e)
    }
}

/// The coarse labels after the splits (CIFAR-100's superclasses).
fn read_coarse(r: &mut impl Read, header: &Header, classes: &[String], path: &Path) -> Result<CoarseLabels> {
    let mut parts = Vec::new();
    for s in &header.splits {
        let v = read_u32s(r, s.count * 4).map_err(|e| read_error(path, e))?;
        if v.iter().any(|&l| l as usize >= classes.len()) {
            return Err(Error::data(path, format!("cache: a coarse label of split {:?} is out of range", s.name)));
        }
        parts.push(v);
    }
    let test = if parts.len() > 1 { parts.pop().unwrap_or_default() } else { Vec::new() };
    let train = parts.pop().unwrap_or_default();
    Ok(CoarseLabels { classes: classes.to_vec(), train, test })
}

fn read_u32s(r: &mut impl Read, nbytes: usize) -> std::io::Result<Vec<u32>> {
    let mut buf = vec![0u8; nbytes];
    r.read_exact(&mut buf)?;
    Ok(buf.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect())
}

struct CrcReader<R: Read> {
    inner: R,
    crc: crc32fast::Hasher,
}

impl<R: Read> Read for CrcReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}
