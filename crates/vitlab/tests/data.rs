//! The data layer on small synthetic datasets written to temporary folders:
//! every reader, the cache, the split, the loader's determinism, and the errors
//! bad inputs give (downloads: tests/download.rs).
//!
//! The python-pickle fixtures in `tests/fixtures/data/` were written by
//! Python 3.12 + numpy 2 (`pickle.dumps(d, protocol=p)` for p in 2, 4, 5) with
//! `d = {b'batch_label': ..., b'labels': [3, 1, 4, 9], b'data': uint8 array
//! (4, 3072) from numpy.random.default_rng(0).integers(0, 256), b'filenames': [...]}`
//! and, for CIFAR-100, `b'fine_labels': [99, 0, 42, 7], b'coarse_labels': [19, 4, 0, 3]`.

use std::fs;
use std::path::{Path, PathBuf};

use vitlab::data::loader::Rng;
mod common;

use common::{assert_err, opts, tmp, write_png};
use vitlab::data::{cache, cifar, open, open_with, stratified_split, CacheStatus, DataFormat, Dataset, OpenOptions};

// ---------------------------------------------------------------- CIFAR writers

/// A deterministic 3072-byte image for record `i`.
fn pixels(i: usize) -> Vec<u8> {
    (0..3072).map(|p| ((p * 7 + i * 31) % 256) as u8).collect()
}

fn cifar10_records(first: usize, n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in first..first + n {
        v.push((i % 10) as u8);
        v.extend(pixels(i));
    }
    v
}

fn cifar100_records(first: usize, n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in first..first + n {
        v.push((i % 20) as u8);
        v.push((i * 7 % 100) as u8);
        v.extend(pixels(i));
    }
    v
}

/// CIFAR-10 binary release: 5 train batches of 2 records, a test batch of 3.
fn write_cifar10_bin(root: &Path) -> PathBuf {
    let d = root.join("cifar-10-batches-bin");
    fs::create_dir_all(&d).unwrap();
    for b in 0..5 {
        fs::write(d.join(format!("data_batch_{}.bin", b + 1)), cifar10_records(b * 2, 2)).unwrap();
    }
    fs::write(d.join("test_batch.bin"), cifar10_records(100, 3)).unwrap();
    fs::write(d.join("batches.meta.txt"), cifar::CIFAR10_CLASSES.join("\n") + "\n\n").unwrap();
    d
}

fn write_cifar100_bin(root: &Path) -> PathBuf {
    let d = root.join("cifar-100-binary");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("train.bin"), cifar100_records(0, 5)).unwrap();
    fs::write(d.join("test.bin"), cifar100_records(50, 2)).unwrap();
    let fine: Vec<String> = (0..100).map(|i| format!("fine{i}")).collect();
    let coarse: Vec<String> = (0..20).map(|i| format!("coarse{i}")).collect();
    fs::write(d.join("fine_label_names.txt"), fine.join("\n")).unwrap();
    fs::write(d.join("coarse_label_names.txt"), coarse.join("\n")).unwrap();
    d
}

/// Packs `dir` (as its own top folder) into `out` (.tar.gz).
fn tar_gz(dir: &Path, out: &Path) {
    let f = fs::File::create(out).unwrap();
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    let mut t = tar::Builder::new(gz);
    t.append_dir_all(dir.file_name().unwrap(), dir).unwrap();
    t.into_inner().unwrap().finish().unwrap();
}

/// Pickle values in the style of Python 2's cPickle protocol 2 (as the
/// official CIFAR python release was written).
enum Py {
    Str(Vec<u8>),
    Ints(Vec<i64>),
    Strs(Vec<String>),
    Array(Vec<u8>, usize, usize),
}

fn py2_pickle(entries: Vec<(&str, Py)>) -> Vec<u8> {
    fn s(out: &mut Vec<u8>, b: &[u8]) {
        if b.len() < 256 {
            out.push(b'U');
            out.push(b.len() as u8);
        } else {
            out.push(b'T');
            out.extend((b.len() as u32).to_le_bytes());
        }
        out.extend(b);
    }
    fn int(out: &mut Vec<u8>, v: i64) {
        if (0..256).contains(&v) {
            out.extend([b'K', v as u8]);
        } else {
            out.push(b'J');
            out.extend((v as i32).to_le_bytes());
        }
    }
    let mut o = b"\x80\x02}q\x01(".to_vec();
    let mut memo = 2u8;
    for (k, v) in entries {
        s(&mut o, k.as_bytes());
        o.extend([b'q', memo]);
        memo = memo.wrapping_add(1);
        match v {
            Py::Str(b) => s(&mut o, &b),
            Py::Ints(v) => {
                o.extend(b"]q\x00(");
                for x in v {
                    int(&mut o, x);
                }
                o.push(b'e');
            }
            Py::Strs(v) => {
                o.extend(b"](");
                for x in v {
                    s(&mut o, x.as_bytes());
                }
                o.push(b'e');
            }
            Py::Array(data, rows, cols) => {
                o.extend(b"cnumpy.core.multiarray\n_reconstruct\nq\x03cnumpy\nndarray\nq\x04K\x00\x85U\x01b\x87R(K\x01");
                int(&mut o, rows as i64);
                int(&mut o, cols as i64);
                o.extend(
                    b"\x86cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89",
                );
                s(&mut o, &data);
                o.extend(b"tb");
            }
        }
    }
    o.extend(b"u.");
    o
}

fn py_batch(first: usize, n: usize) -> Vec<u8> {
    let data: Vec<u8> = (first..first + n).flat_map(pixels).collect();
    py2_pickle(vec![
        ("batch_label", Py::Str(b"training batch".to_vec())),
        ("labels", Py::Ints((first..first + n).map(|i| (i % 10) as i64).collect())),
        ("data", Py::Array(data, n, 3072)),
        ("filenames", Py::Strs((0..n).map(|i| format!("img{i}.png")).collect())),
    ])
}

fn write_cifar10_py(root: &Path) -> PathBuf {
    let d = root.join("cifar-10-batches-py");
    fs::create_dir_all(&d).unwrap();
    for b in 0..5 {
        fs::write(d.join(format!("data_batch_{}", b + 1)), py_batch(b * 2, 2)).unwrap();
    }
    fs::write(d.join("test_batch"), py_batch(100, 3)).unwrap();
    let names = cifar::CIFAR10_CLASSES.iter().map(|s| s.to_string()).collect();
    fs::write(
        d.join("batches.meta"),
        py2_pickle(vec![("num_cases_per_batch", Py::Ints(vec![])), ("label_names", Py::Strs(names))]),
    )
    .unwrap();
    d
}

// ---------------------------------------------------------------- image writers

fn write_jpg(path: &Path, w: u32, h: u32, rgb: [u8; 3]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    image::RgbImage::from_pixel(w, h, image::Rgb(rgb)).save(path).unwrap();
}

/// ROOT/{train,test}/{cat,dog}/ with 3 + 1 PNGs per class (8x8, one colour per class).
fn write_folder(root: &Path) {
    for (split, n) in [("train", 3), ("test", 1)] {
        for (c, rgb) in [("dog", [200, 10, 10]), ("cat", [10, 200, 10])] {
            for i in 0..n {
                write_png(&root.join(split).join(c).join(format!("{i}.png")), 8, 8, rgb);
            }
        }
    }
}

// ---------------------------------------------------------------- readers

#[test]
fn cifar10_binary_folder_and_archive_agree() {
    let t = tmp();
    let dir = write_cifar10_bin(t.path());
    let a = open_with(&dir, &opts(t.path())).unwrap();
    assert_eq!(a.format, DataFormat::Cifar10Binary);
    assert_eq!((a.train.len(), a.test.as_ref().unwrap().len()), (10, 3));
    assert_eq!(a.train.classes[0], "airplane");
    assert_eq!(a.train.classes.len(), 10);
    assert_eq!((a.train.channels, a.train.height, a.train.width), (3, 32, 32));
    assert_eq!(a.train.image(7), &pixels(7)[..]);
    assert_eq!(a.train.labels[7], 7);
    assert_eq!(a.test.as_ref().unwrap().image(2), &pixels(102)[..]);
    // The parent folder is recognised too, and the archive gives the same content.
    let b = open_with(t.path(), &opts(t.path())).unwrap();
    assert_eq!(b.checksum, a.checksum);
    let archive = t.path().join("cifar-10-binary.tar.gz");
    tar_gz(&dir, &archive);
    let c = open_with(&archive, &opts(t.path())).unwrap();
    assert_eq!(c.format, DataFormat::Cifar10Binary);
    assert_eq!(c.checksum, a.checksum);
    assert_eq!(c.train, a.train);
    assert!(a.summary().contains("10 train, 3 test"), "{}", a.summary());
}

#[test]
fn cifar100_binary_has_fine_and_coarse_labels() {
    let t = tmp();
    let dir = write_cifar100_bin(t.path());
    let ds = open_with(&dir, &opts(t.path())).unwrap();
    assert_eq!(ds.format, DataFormat::Cifar100Binary);
    assert_eq!(ds.train.classes.len(), 100);
    assert_eq!(ds.train.labels, vec![0, 7, 14, 21, 28]);
    let coarse = ds.coarse.clone().unwrap();
    assert_eq!(coarse.classes.len(), 20);
    assert_eq!(coarse.train, vec![0, 1, 2, 3, 4]);
    assert_eq!(coarse.test, vec![10, 11]);
    let c = ds.with_coarse_labels().unwrap();
    assert_eq!(c.train.labels, vec![0, 1, 2, 3, 4]);
    assert_eq!(c.train.classes[3], "coarse3");
    // Round trip through the cache keeps the coarse labels.
    let again = open_with(&dir, &opts(t.path())).unwrap();
    assert!(matches!(again.cache, CacheStatus::Hit(_)));
    assert_eq!(again.coarse.unwrap().test, vec![10, 11]);
}

#[test]
fn python_pickles_of_every_protocol_parse_alike() {
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data");
    let mut first: Option<cifar::Batch> = None;
    for p in [2, 4, 5] {
        let path = fx.join(format!("cifar10_batch_p{p}.pkl"));
        let b = cifar::parse_python_batch(&fs::read(&path).unwrap(), false, &path).unwrap();
        assert_eq!(b.fine, vec![3, 1, 4, 9], "protocol {p}");
        assert_eq!(b.pixels.len(), 4 * 3072);
        assert_eq!(&b.pixels[..8], &[95, 130, 194, 217, 207, 235, 15, 163]);
        assert_eq!(&b.pixels[4 * 3072 - 4..], &[27, 230, 109, 198]);
        assert_eq!(b.pixels.iter().map(|&v| v as u64).sum::<u64>(), 1_574_132);
        if let Some(f) = &first {
            assert_eq!(f.pixels, b.pixels);
        }
        first = Some(b);
    }
    let path = fx.join("cifar100_train_p2.pkl");
    let b = cifar::parse_python_batch(&fs::read(&path).unwrap(), true, &path).unwrap();
    assert_eq!(b.fine, vec![99, 0, 42, 7]);
    assert_eq!(b.coarse, vec![19, 4, 0, 3]);
    assert_eq!(b.pixels, first.unwrap().pixels);
}

#[test]
fn cifar10_python_release_as_folder_and_archive() {
    let t = tmp();
    let dir = write_cifar10_py(t.path());
    let ds = open_with(&dir, &opts(t.path())).unwrap();
    assert_eq!(ds.format, DataFormat::Cifar10Python);
    assert_eq!((ds.train.len(), ds.test.as_ref().unwrap().len()), (10, 3));
    assert_eq!(ds.train.classes[9], "truck");
    assert_eq!(ds.train.image(4), &pixels(4)[..]);
    // Same content as the binary release of the same images.
    let bin = open_with(write_cifar10_bin(t.path()), &opts(t.path())).unwrap();
    assert_eq!(ds.train, bin.train);
    let archive = t.path().join("cifar-10-python.tar.gz");
    tar_gz(&dir, &archive);
    let a = open_with(&archive, &opts(t.path())).unwrap();
    assert_eq!(a.format, DataFormat::Cifar10Python);
    assert_eq!(a.checksum, ds.checksum);
}

#[test]
fn image_folder_with_splits() {
    let t = tmp();
    let root = t.path().join("pets");
    write_folder(&root);
    let ds = open_with(&root, &opts(t.path())).unwrap();
    assert_eq!(ds.format, DataFormat::ImageFolder);
    assert_eq!(ds.train.classes, vec!["cat", "dog"]); // sorted folder names
    assert_eq!(ds.train.len(), 6);
    assert_eq!(ds.test.as_ref().unwrap().len(), 2);
    assert_eq!(Dataset::class_counts(&ds.train), vec![3, 3]);
    assert_eq!((ds.train.height, ds.train.width), (8, 8));
    // cat (label 0) images are green: exact for PNG, R plane then G then B.
    let img = ds.train.image(0);
    assert_eq!(ds.train.labels[0], 0);
    assert_eq!((img[0], img[64], img[128]), (10, 200, 10));
    let j = ds.info_json();
    assert_eq!(j["splits"]["train"]["per_class"]["dog"], 3);
    assert_eq!(j["splits"]["test"]["count"], 2);
    assert_eq!(j["format"], "image-folder");
}

#[test]
fn image_folder_without_splits_resizes_to_the_common_size() {
    let t = tmp();
    let root = t.path().join("flat");
    write_jpg(&root.join("a").join("1.jpg"), 16, 16, [100, 100, 100]);
    write_jpg(&root.join("a").join("2.JPG"), 16, 16, [100, 100, 100]);
    write_png(&root.join("b").join("1.png"), 24, 12, [50, 60, 70]);
    fs::write(root.join("b").join("notes.txt"), "not an image").unwrap();
    let ds = open_with(&root, &opts(t.path())).unwrap();
    assert!(ds.test.is_none());
    assert_eq!(ds.train.len(), 3);
    assert_eq!((ds.train.height, ds.train.width), (16, 16));
    assert!(ds.notes.iter().any(|n| n.contains("resized to the most common size 16x16")), "{:?}", ds.notes);
    // A solid image stays solid when resized.
    let b = ds.train.image(2);
    assert!(b[..256].iter().all(|&v| v == 50) && b[256..512].iter().all(|&v| v == 60));
    // A forced size resizes everything, and has its own cache file.
    let forced = open_with(&root, &OpenOptions { image_size: Some(4), ..opts(t.path()) }).unwrap();
    assert_eq!((forced.train.height, forced.train.width), (4, 4));
    assert!(matches!(forced.cache, CacheStatus::Built { .. }));
    assert!(matches!(open_with(&root, &opts(t.path())).unwrap().cache, CacheStatus::Hit(_)));
}

#[test]
fn unpaired_folders() {
    let t = tmp();
    let root = t.path().join("horse2zebra");
    for (d, n) in [("trainA", 3), ("trainB", 2), ("testA", 1), ("testB", 1)] {
        for i in 0..n {
            write_jpg(&root.join(d).join(format!("{i}.jpg")), 8, 8, [i as u8 * 40, 0, 0]);
        }
    }
    let ds = open_with(&root, &opts(t.path())).unwrap();
    assert_eq!(ds.format, DataFormat::Unpaired);
    assert_eq!(ds.train.classes, vec!["A", "B"]);
    assert_eq!(Dataset::domain_indices(&ds.train, 0), vec![0, 1, 2]);
    assert_eq!(Dataset::domain_indices(&ds.train, 1), vec![3, 4]);
    assert_eq!(ds.test.unwrap().labels, vec![0, 1]);
    // testA without testB is a missing split.
    fs::remove_dir_all(root.join("testB")).unwrap();
    assert_err(open_with(&root, &opts(t.path())), "testB", "missing split");
}

#[test]
fn tiny_imagenet_layout() {
    let t = tmp();
    let root = t.path().join("tiny-imagenet-200");
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("wnids.txt"), "n02\nn01\n").unwrap();
    for (w, rgb) in [("n01", [1, 2, 3]), ("n02", [4, 5, 6])] {
        for i in 0..2 {
            write_jpg(&root.join("train").join(w).join("images").join(format!("{w}_{i}.JPEG")), 64, 64, rgb);
        }
        fs::write(root.join("train").join(w).join(format!("{w}_boxes.txt")), "").unwrap();
    }
    write_jpg(&root.join("val/images/val_0.JPEG"), 64, 64, [4, 5, 6]);
    write_jpg(&root.join("val/images/val_1.JPEG"), 64, 64, [1, 2, 3]);
    fs::write(root.join("val/val_annotations.txt"), "val_0.JPEG\tn02\t0\t0\t10\t10\nval_1.JPEG\tn01\t1\t1\t9\t9\n").unwrap();
    // The parent folder is recognised too.
    let ds = open_with(t.path(), &opts(t.path())).unwrap();
    assert_eq!(ds.format, DataFormat::TinyImagenet);
    assert_eq!(ds.train.classes, vec!["n01", "n02"]);
    assert_eq!(ds.train.labels, vec![0, 0, 1, 1]);
    assert_eq!(ds.test_split, "val");
    assert_eq!(ds.test.as_ref().unwrap().labels, vec![1, 0]);
    assert_eq!((ds.train.height, ds.train.width), (64, 64));
    // An annotation naming an unknown class is an error naming the file and line.
    fs::write(root.join("val/val_annotations.txt"), "val_0.JPEG\tn99\t0\t0\t1\t1\n").unwrap();
    assert_err(open_with(&root, &opts(t.path())), "val_annotations.txt", "line 1: class \"n99\" is not in wnids.txt");
}

// ---------------------------------------------------------------- cache

#[test]
fn cache_is_reused_then_rebuilt_when_stale_or_corrupt() {
    let t = tmp();
    let root = t.path().join("pets");
    write_folder(&root);
    let o = opts(&t.path().join("cache"));
    let first = open_with(&root, &o).unwrap();
    let CacheStatus::Built { path: cache_path, replaced: None } = first.cache.clone() else {
        panic!("expected a fresh cache, got {:?}", first.cache)
    };
    let second = open_with(&root, &o).unwrap();
    assert_eq!(second.cache, CacheStatus::Hit(cache_path.clone()));
    assert_eq!((second.train.clone(), second.test.clone()), (first.train.clone(), first.test.clone()));
    assert_eq!(second.checksum, first.checksum);

    // A changed source makes the cache stale.
    write_png(&root.join("train/cat/new.png"), 8, 8, [1, 2, 3]);
    let third = open_with(&root, &o).unwrap();
    match &third.cache {
        CacheStatus::Built { replaced: Some(why), .. } => assert!(why.contains("stale"), "{why}"),
        other => panic!("expected a rebuilt cache, got {other:?}"),
    }
    assert_eq!(third.train.len(), 7);

    // A corrupted byte is caught by the CRC.
    let mut bytes = fs::read(&cache_path).unwrap();
    let hlen = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    bytes[16 + hlen + 3] ^= 0xff; // a pixel of the first image
    fs::write(&cache_path, &bytes).unwrap();
    assert_err(cache::read(&cache_path, None), cache_path.to_str().unwrap(), "CRC mismatch");
    let fourth = open_with(&root, &o).unwrap();
    assert!(matches!(&fourth.cache, CacheStatus::Built { replaced: Some(w), .. } if w.contains("corrupt")));

    // Truncated.
    let bytes = fs::read(&cache_path).unwrap();
    fs::write(&cache_path, &bytes[..bytes.len() / 2]).unwrap();
    assert_err(cache::read(&cache_path, None), "vitlab-cache", "truncated or corrupt");

    // Another version.
    let mut bytes = bytes.clone();
    bytes[8..12].copy_from_slice(&(cache::VERSION + 1).to_le_bytes());
    fs::write(&cache_path, &bytes).unwrap();
    assert_err(cache::read(&cache_path, None), "vitlab-cache", "another version of vitlab");
    let fifth = open_with(&root, &o).unwrap();
    assert!(matches!(&fifth.cache, CacheStatus::Built { replaced: Some(w), .. } if w.contains("another version")));
    assert_eq!(fifth.checksum, third.checksum);

    // Not a cache at all.
    fs::write(&cache_path, b"hello, this is not a cache file at all").unwrap();
    assert_err(cache::read(&cache_path, None), "vitlab-cache", "bad magic");

    // Caching off: nothing read or written.
    let off = open_with(&root, &OpenOptions { cache: false, ..o.clone() }).unwrap();
    assert_eq!(off.cache, CacheStatus::Disabled);
}

#[test]
fn default_cache_sits_beside_the_data() {
    let t = tmp();
    let dir = write_cifar10_bin(t.path());
    let ds = open(&dir).unwrap();
    let beside = t.path().join("cifar-10-batches-bin.vitlab-cache");
    assert!(matches!(&ds.cache, CacheStatus::Built { path, .. } if *path == beside.canonicalize().unwrap()));
    assert!(matches!(open(&dir).unwrap().cache, CacheStatus::Hit(_)));
}

// ---------------------------------------------------------------- bad inputs

#[test]
fn truncated_archive() {
    let t = tmp();
    let dir = write_cifar10_bin(t.path());
    let archive = t.path().join("c.tar.gz");
    tar_gz(&dir, &archive);
    let bytes = fs::read(&archive).unwrap();
    fs::write(&archive, &bytes[..bytes.len() / 2]).unwrap();
    assert_err(open_with(&archive, &opts(t.path())), "c.tar.gz", "archive");
    // An empty file, and garbage, too.
    fs::write(&archive, b"").unwrap();
    assert_err(open_with(&archive, &opts(t.path())), "c.tar.gz", "archive");
    fs::write(&archive, vec![7u8; 5000]).unwrap();
    assert_err(open_with(&archive, &opts(t.path())), "c.tar.gz", "archive");
}

#[test]
fn wrong_record_size() {
    let t = tmp();
    let dir = write_cifar10_bin(t.path());
    let mut rec = cifar10_records(0, 2);
    rec.push(0);
    fs::write(dir.join("data_batch_3.bin"), rec).unwrap();
    assert_err(open_with(&dir, &opts(t.path())), "data_batch_3.bin", "wrong record size");
}

#[test]
fn label_out_of_range() {
    let t = tmp();
    let dir = write_cifar10_bin(t.path());
    let mut rec = cifar10_records(0, 3);
    rec[3073] = 10;
    fs::write(dir.join("test_batch.bin"), rec).unwrap();
    assert_err(open_with(&dir, &opts(t.path())), "test_batch.bin", "record 1: label 10 out of range");
    let dir = write_cifar100_bin(t.path());
    let mut rec = cifar100_records(0, 2);
    rec[0] = 20; // coarse
    fs::write(dir.join("train.bin"), rec).unwrap();
    assert_err(open_with(&dir, &opts(t.path())), "train.bin", "coarse label 20 out of range");
    // Python release: a label of 11 in a pickle.
    let pdir = write_cifar10_py(t.path());
    let bad = py2_pickle(vec![("labels", Py::Ints(vec![11])), ("data", Py::Array(pixels(0), 1, 3072))]);
    fs::write(pdir.join("data_batch_2"), bad).unwrap();
    assert_err(open_with(&pdir, &opts(t.path())), "data_batch_2", "label 11 out of range");
}

#[test]
fn missing_split() {
    let t = tmp();
    let dir = write_cifar10_bin(t.path());
    fs::remove_file(dir.join("test_batch.bin")).unwrap();
    fs::remove_file(dir.join("data_batch_4.bin")).unwrap();
    assert_err(open_with(&dir, &opts(t.path())), "data_batch_4.bin", "missing split");
    let root = t.path().join("folder");
    write_png(&root.join("test/cat/0.png"), 4, 4, [0, 0, 0]);
    assert_err(open_with(&root, &opts(t.path())), "train", "missing split");
    let un = t.path().join("un");
    write_png(&un.join("trainA/0.png"), 4, 4, [0, 0, 0]);
    assert_err(open_with(&un, &opts(t.path())), "trainB", "missing split");
    assert_err(open_with(t.path().join("nowhere"), &opts(t.path())), "nowhere", "cannot read dataset");
}

#[test]
fn empty_class_folder() {
    let t = tmp();
    let root = t.path().join("pets");
    write_folder(&root);
    fs::create_dir_all(root.join("train/emu")).unwrap();
    fs::write(root.join("train/emu/readme.txt"), "no images here").unwrap();
    assert_err(open_with(&root, &opts(t.path())), "train/emu", "class folder has no images");
}

#[test]
fn undecodable_image() {
    let t = tmp();
    let root = t.path().join("pets");
    write_folder(&root);
    fs::write(root.join("train/dog/broken.jpg"), b"\xff\xd8\xff\xe0 this is not really a jpeg").unwrap();
    assert_err(open_with(&root, &opts(t.path())), "broken.jpg", "cannot decode image");
    fs::write(root.join("train/dog/broken.jpg"), b"plain text").unwrap();
    assert_err(open_with(&root, &opts(t.path())), "broken.jpg", "cannot decode image");
    // A truncated PNG.
    let png = root.join("train/cat/0.png");
    let bytes = fs::read(&png).unwrap();
    fs::remove_file(root.join("train/dog/broken.jpg")).unwrap();
    fs::write(&png, &bytes[..bytes.len() / 2]).unwrap();
    assert_err(open_with(&root, &opts(t.path())), "0.png", "cannot decode image");
}

#[test]
fn unreadable_pickle() {
    let t = tmp();
    let dir = write_cifar10_py(t.path());
    let good = fs::read(dir.join("data_batch_1")).unwrap();
    fs::write(dir.join("data_batch_1"), &good[..good.len() - 100]).unwrap();
    assert_err(open_with(&dir, &opts(t.path())), "data_batch_1", "unreadable pickle: truncated");
    let no_data = py2_pickle(vec![("labels", Py::Ints(vec![1]))]);
    fs::write(dir.join("data_batch_1"), no_data).unwrap();
    assert_err(open_with(&dir, &opts(t.path())), "data_batch_1", "no \"data\" entry");
    let short = py2_pickle(vec![("labels", Py::Ints(vec![1, 2])), ("data", Py::Array(pixels(0), 1, 3072))]);
    fs::write(dir.join("data_batch_1"), short).unwrap();
    assert_err(open_with(&dir, &opts(t.path())), "data_batch_1", "has 2 entries for 1 images");
}

/// A short, bounded version of the fuzz target (`fuzz/`): mutated CIFAR
/// records, pickles, archives and caches must give errors, never panics.
#[test]
fn mutated_inputs_never_panic() {
    let t = tmp();
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data");
    let root = t.path().join("pets");
    write_folder(&root);
    let ds = open_with(&root, &opts(t.path())).unwrap();
    let CacheStatus::Built { path: cache_path, .. } = &ds.cache else { panic!() };
    let dir = write_cifar10_bin(t.path());
    let archive = t.path().join("c.tar.gz");
    tar_gz(&dir, &archive);
    let seeds: Vec<Vec<u8>> = vec![
        fs::read(fx.join("cifar10_batch_p2.pkl")).unwrap(),
        fs::read(fx.join("cifar10_batch_p5.pkl")).unwrap(),
        fs::read(fx.join("cifar100_train_p2.pkl")).unwrap(),
        fs::read(cache_path).unwrap(),
        fs::read(&archive).unwrap(),
        cifar10_records(0, 2),
    ];
    let mut rng = Rng::new(42);
    let p = Path::new("mutant");
    for round in 0..300 {
        let mut b = seeds[round % seeds.len()].clone();
        for _ in 0..1 + rng.below(8) {
            let i = rng.below(b.len());
            match rng.below(4) {
                0 => b[i] = rng.next_u64() as u8,
                1 => b.truncate(i),
                2 => b[i] ^= 1 << rng.below(8),
                _ => b.insert(i, rng.next_u64() as u8),
            }
            if b.is_empty() {
                break;
            }
        }
        let _ = cifar::parse_python_batch(&b, round % 2 == 0, p);
        let _ = cifar::parse_python_meta(&b, round % 2 == 0, p);
        let _ = cifar::parse_binary_batch(&b, round % 2 == 0, p);
        let _ = cifar::parse_archive(&b, p);
        let _ = cache::read_from(&b[..], b.len() as u64, p, None);
    }
}

// ---------------------------------------------------------------- split

#[test]
fn stratified_split_is_stratified_seeded_and_complete() {
    let labels: Vec<u32> = (0..1000)
        .map(|i| {
            if i < 700 {
                0
            } else if i < 900 {
                1
            } else {
                2
            }
        })
        .collect();
    let (train, val) = stratified_split(&labels, 100, 7);
    assert_eq!((train.len(), val.len()), (900, 100));
    let count = |idx: &[usize], c| idx.iter().filter(|&&i| labels[i] == c).count();
    assert_eq!((count(&val, 0), count(&val, 1), count(&val, 2)), (70, 20, 10));
    let mut all: Vec<usize> = train.iter().chain(&val).copied().collect();
    all.sort();
    assert_eq!(all, (0..1000).collect::<Vec<_>>());
    assert_eq!(stratified_split(&labels, 100, 7), (train.clone(), val.clone()));
    assert_ne!(stratified_split(&labels, 100, 8).1, val);
    // Remainders: 10 over 3 equal classes of 30.
    let eq: Vec<u32> = (0..90).map(|i| i % 3).collect();
    let (_, v) = stratified_split(&eq, 10, 1);
    assert_eq!(v.len(), 10);
    let c: Vec<usize> = (0..3).map(|k| v.iter().filter(|&&i| eq[i] == k).count()).collect();
    assert_eq!(c, vec![4, 3, 3]);
    // CIFAR-sized default: 5,000 of 50,000, 500 per class.
    let cifar: Vec<u32> = (0..50_000).map(|i| (i % 10) as u32).collect();
    let (t, v) = stratified_split(&cifar, 5000, 0);
    assert_eq!((t.len(), v.len()), (45_000, 5000));
    assert!((0..10).all(|k| v.iter().filter(|&&i| cifar[i] == k).count() == 500));
    // Degenerate sizes do not panic.
    assert_eq!(stratified_split(&[], 5, 0), (vec![], vec![]));
    assert_eq!(stratified_split(&[0, 1], 5, 0).1, vec![0, 1]);
}
