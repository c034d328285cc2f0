//! `vitlab data download`: the datasets vitlab knows, fetched from their
//! official URLs, resumably (HTTP `Range` on a `.part` file), verified by
//! checksum, and unpacked where they come as zips.
//!
//! Checksums: CIFAR's MD5s are the ones published on the CIFAR page;
//! Tiny-ImageNet has no published checksum, and the MD5 used is the one the
//! common loaders (torchvision-style) check; the CycleGAN zips have none
//! either, and their SHA-256s and sizes are those recorded by the TensorFlow
//! Datasets catalogue. [`Remote::checksum_source`] says which for each.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use md5::Md5;
use sha2::{Digest, Sha256};

use super::dataset::hex;
use crate::{Error, Result};

/// An expected checksum (lowercase hex).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checksum {
    Md5(String),
    Sha256(String),
}

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Checksum::Md5(h) => write!(f, "md5 {h}"),
            Checksum::Sha256(h) => write!(f, "sha256 {h}"),
        }
    }
}

/// A downloadable dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct Remote {
    pub name: String,
    pub url: String,
    /// The file name it is saved as.
    pub file: String,
    pub checksum: Checksum,
    /// Where the checksum comes from.
    pub checksum_source: &'static str,
    /// Size in bytes, where known.
    pub size: Option<u64>,
    /// For zips: the folder they unpack to (the dataset path); `None` for
    /// CIFAR archives, which vitlab reads as they are.
    pub unpack_to: Option<String>,
    pub description: &'static str,
}

const CIFAR_PAGE: &str = "published on the CIFAR page";
const TINY_SRC: &str = "no published checksum; the md5 the common loaders check";
const CYCLEGAN_SRC: &str = "no published checksum; sha256 and size recorded by the TensorFlow Datasets catalogue";

/// Every dataset `vitlab data download` knows.
pub fn catalog() -> Vec<Remote> {
    let cifar = |name: &str, file: &str, md5: &str, size: u64, description| Remote {
        name: name.into(),
        url: format!("https://www.cs.toronto.edu/~kriz/{file}"),
        file: file.into(),
        checksum: Checksum::Md5(md5.into()),
        checksum_source: CIFAR_PAGE,
        size: Some(size),
        unpack_to: None,
        description,
    };
    let mut v = vec![
        cifar(
            "cifar10",
            "cifar-10-python.tar.gz",
            "c58f30108f718f92721af3b95e74349a",
            170_498_071,
            "CIFAR-10, python version (as torchvision)",
        ),
        cifar(
            "cifar10-binary",
            "cifar-10-binary.tar.gz",
            "c32a1d4ab5d03f1284b67883e8d87530",
            170_052_171,
            "CIFAR-10, binary version",
        ),
        cifar(
            "cifar100",
            "cifar-100-python.tar.gz",
            "eb9058c3a382ffc7106e4002c42a8d85",
            169_001_437,
            "CIFAR-100, python version (fine and coarse labels)",
        ),
        cifar(
            "cifar100-binary",
            "cifar-100-binary.tar.gz",
            "03b5dce01913d631647c71ecec9e9cb8",
            168_513_733,
            "CIFAR-100, binary version (fine and coarse labels)",
        ),
        Remote {
            name: "tiny-imagenet".into(),
            url: "http://cs231n.stanford.edu/tiny-imagenet-200.zip".into(),
            file: "tiny-imagenet-200.zip".into(),
            checksum: Checksum::Md5("90528d7ca1a48142e341f4ef8d21d0de".into()),
            checksum_source: TINY_SRC,
            size: None,
            unpack_to: Some("tiny-imagenet-200".into()),
            description: "Tiny-ImageNet-200 (64x64, 200 classes)",
        },
    ];
    for (name, size, sha) in [
        ("apple2orange", 78_456_409, "845a191e9af8926408ea597001cd03a452e3300a1f44a79fe329b3d59f6e3eb8"),
        ("horse2zebra", 116_867_962, "a74d9d392eecca9966b51287a76ca126af473d9de4f3e8fc0e9cda08fa1730a1"),
        ("monet2photo", 305_231_073, "88f91b00fc228f97c9411fbf1880ec1d119c98f1722e4cfcfaa2fb35fac05b04"),
        ("summer2winter_yosemite", 132_640_856, "167fe1726807a9d22bd106b4a6c0bd7953b688af924ac1bf967439c4961e49f9"),
        ("cezanne2photo", 279_885_071, "3a6c10ca21f9485862f1cbd707744b9dc258954a04631271d23a3605eeb63cff"),
        ("ukiyoe2photo", 292_946_532, "02a2a2fb5ecf425ca1bf86aca7304377da64a2a1d3b86df54eb65e4068bf3b08"),
        ("vangogh2photo", 306_590_349, "362c3473e70be0944bda08d49d660eafdc2854df55d697835b8186d1d79caaff"),
        ("iphone2dslr_flower", 339_964_458, "8fcb5e374d631b107e1d961b8c4cd0a186aa2a4ff3e279923f4c426128de7113"),
        ("facades", 35_135_868, "9a31ebf3a31b9b5cd195dd5bf62e9308e00cb94604d1019e3889ac84248695c0"),
        ("cityscapes", 279_601_602, "d2f6910fd056c1ee9873777ae838e7ac4a2c833598ae62a04188e5ab2f4ea036"),
        ("maps", 1_476_754_427, "639534f69dbf9f36bef8d6292a7698006361221f83f0285d7c9ca78afe6e8a9e"),
    ] {
        v.push(Remote {
            name: name.into(),
            url: format!("http://efrosgans.eecs.berkeley.edu/cyclegan/datasets/{name}.zip"),
            file: format!("{name}.zip"),
            checksum: Checksum::Sha256(sha.into()),
            checksum_source: CYCLEGAN_SRC,
            size: Some(size),
            unpack_to: Some(name.into()),
            description: "CycleGAN unpaired set (trainA/ trainB/ testA/ testB/)",
        });
    }
    v
}

/// The catalogue entry called `name`; the error lists the known names.
pub fn find(name: &str) -> Result<Remote> {
    let all = catalog();
    all.iter().find(|r| r.name == name).cloned().ok_or_else(|| {
        Error::config(
            "dataset",
            format!("unknown dataset {name:?}; known: {}", all.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")),
        )
    })
}

/// Progress callback: `(bytes so far, total if known)`.
pub type Progress<'a> = &'a mut dyn FnMut(u64, Option<u64>);

/// Downloads `remote` into `dir` (resuming a previous partial download),
/// verifies it, unpacks zips, and returns the path to open as a dataset.
/// A file already at `dir/<file>` (e.g. put there by hand) is verified and used.
pub fn download(remote: &Remote, dir: &Path, progress: Progress) -> Result<PathBuf> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let dest = dir.join(&remote.file);
    if dest.is_file() {
        verify(&dest, &remote.checksum)
            .map_err(|e| Error::data(&dest, format!("{e}; delete it and run `vitlab data download {}` again", remote.name)))?;
    } else {
        let hint = format!(
            "If this machine is offline, download {} elsewhere and put it at {} ({}), then run \
             `vitlab data download {} --dir {}` again: it verifies the file{}.",
            remote.url,
            dest.display(),
            remote.checksum,
            remote.name,
            dir.display(),
            if remote.unpack_to.is_some() { " and unpacks it" } else { " and uses it" }
        );
        fetch(&remote.url, &dest, &remote.checksum, &hint, progress)?;
    }
    match &remote.unpack_to {
        None => Ok(dest),
        Some(folder) => {
            let target = dir.join(folder);
            if !target.join(UNPACKED_MARKER).is_file() {
                unzip(&dest, dir)?;
                if !target.is_dir() {
                    return Err(Error::data(&dest, format!("the zip did not contain the folder {folder}/")));
                }
                fs::write(target.join(UNPACKED_MARKER), remote.checksum.to_string())
                    .map_err(|e| Error::io(target.join(UNPACKED_MARKER), e))?;
            }
            Ok(target)
        }
    }
}

const UNPACKED_MARKER: &str = ".vitlab-unpacked";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// Fetches `url` to `dest` through `dest.part`, resuming from what that holds
/// (and retrying a dropped connection a few times), then verifies `checksum`
/// and renames the file into place. `offline_hint` is appended to errors that
/// mean the server could not be reached.
pub fn fetch(url: &str, dest: &Path, checksum: &Checksum, offline_hint: &str, progress: Progress) -> Result<()> {
    let part = PathBuf::from(format!("{}.part", dest.display()));
    let agent = agent();
    let mut attempts_left = 5;
    loop {
        let have = fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        let mut req = agent.get(url);
        if have > 0 {
            req = req.header("Range", format!("bytes={have}-"));
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(e) => {
                return Err(Error::data(dest, format!("cannot download {url}: {e}. {offline_hint}")));
            }
        };
        let status = resp.status().as_u16();
        let header = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
        let (mut offset, total) = match status {
            206 => {
                // Content-Range: bytes START-END/TOTAL
                let cr = header("content-range").unwrap_or_default();
                let start =
                    cr.strip_prefix("bytes ").and_then(|r| r.split('-').next()).and_then(|s| s.trim().parse::<u64>().ok());
                let total = cr.rsplit('/').next().and_then(|t| t.trim().parse::<u64>().ok());
                if start != Some(have) {
                    // A range we did not ask for: start again.
                    let _ = fs::remove_file(&part);
                    attempts_left -= 1;
                    if attempts_left == 0 {
                        return Err(Error::data(dest, format!("{url}: server answered an unexpected range {cr:?}")));
                    }
                    continue;
                }
                (have, total)
            }
            200 => {
                let len = header("content-length").and_then(|l| l.parse::<u64>().ok());
                (0, len)
            }
            416 if have > 0 => break, // we already have it all
            s => return Err(Error::data(dest, format!("cannot download {url}: the server answered HTTP {s}. {offline_hint}"))),
        };
        let mut file = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(offset > 0)
            .truncate(offset == 0)
            .open(&part)
            .map_err(|e| Error::io(&part, e))?;
        let mut body = resp.into_body().into_reader();
        let mut buf = vec![0u8; 1 << 20];
        let mut failed = None;
        progress(offset, total);
        loop {
            match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    file.write_all(&buf[..n]).map_err(|e| Error::io(&part, e))?;
                    offset += n as u64;
                    progress(offset, total);
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        file.sync_all().map_err(|e| Error::io(&part, e))?;
        let short = total.is_some_and(|t| offset < t);
        if failed.is_none() && !short {
            break;
        }
        attempts_left -= 1;
        if attempts_left == 0 {
            let why = failed.map(|e| e.to_string()).unwrap_or_else(|| "connection closed early".into());
            return Err(Error::data(
                dest,
                format!(
                    "download of {url} interrupted at {offset} bytes ({why}); the partial file {} is kept: \
                     run the command again to resume",
                    part.display()
                ),
            ));
        }
    }
    if let Err(e) = verify(&part, checksum) {
        let _ = fs::remove_file(&part);
        return Err(Error::data(dest, format!("{e}; the download was removed, run the command again")));
    }
    fs::rename(&part, dest).map_err(|e| Error::io(dest, e))
}

/// Checks a file against a checksum; the error gives both values.
pub fn verify(path: &Path, checksum: &Checksum) -> Result<()> {
    let got = match checksum {
        Checksum::Md5(_) => hash_file::<Md5>(path)?,
        Checksum::Sha256(_) => hash_file::<Sha256>(path)?,
    };
    let (Checksum::Md5(want) | Checksum::Sha256(want)) = checksum;
    if got != want.to_lowercase() {
        let kind = if matches!(checksum, Checksum::Md5(_)) { "md5" } else { "sha256" };
        return Err(Error::data(path, format!("checksum mismatch: {kind} is {got}, expected {want}")));
    }
    Ok(())
}

fn hash_file<D: Digest>(path: &Path) -> Result<String> {
    let mut f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut h = D::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Unpacks a zip into `dir` (entries that would land outside it are refused).
pub fn unzip(zip_path: &Path, dir: &Path) -> Result<()> {
    let corrupt = |e: zip::result::ZipError| Error::data(zip_path, format!("corrupt zip: {e}"));
    let f = fs::File::open(zip_path).map_err(|e| Error::io(zip_path, e))?;
    let mut archive = zip::ZipArchive::new(std::io::BufReader::new(f)).map_err(corrupt)?;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(corrupt)?;
        let Some(rel) = entry.enclosed_name().map(Path::to_path_buf) else {
            return Err(Error::data(zip_path, format!("zip entry {:?} would unpack outside the folder", entry.name())));
        };
        let out = dir.join(rel);
        if entry.is_dir() {
            fs::create_dir_all(&out).map_err(|e| Error::io(&out, e))?;
            continue;
        }
        if let Some(p) = out.parent() {
            fs::create_dir_all(p).map_err(|e| Error::io(p, e))?;
        }
        let mut w = fs::File::create(&out).map_err(|e| Error::io(&out, e))?;
        std::io::copy(&mut entry, &mut w)
            .map_err(|e| Error::data(zip_path, format!("corrupt zip entry {}: {e}", entry.name())))?;
    }
    Ok(())
}
