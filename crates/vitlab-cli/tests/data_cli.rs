//! `vitlab data info | download | bench` end to end on a tiny CIFAR-10 binary
//! release; `vitlab data unpaired` on a tiny image folder.

use std::fs;
use std::path::Path;
use std::process::Command;

fn vitlab(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vitlab")).args(args).output().expect("run vitlab");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// 5 train batches of 4 records and a test batch of 2, labels i % 10.
fn tiny_cifar(root: &Path) -> std::path::PathBuf {
    let d = root.join("cifar-10-batches-bin");
    fs::create_dir_all(&d).unwrap();
    let recs = |first: usize, n: usize| -> Vec<u8> {
        (first..first + n)
            .flat_map(|i| std::iter::once((i % 10) as u8).chain((0..3072).map(move |p| ((p + i) % 256) as u8)))
            .collect()
    };
    for b in 0..5 {
        fs::write(d.join(format!("data_batch_{}.bin", b + 1)), recs(b * 4, 4)).unwrap();
    }
    fs::write(d.join("test_batch.bin"), recs(0, 2)).unwrap();
    d
}

#[test]
fn data_info_json_then_from_cache() {
    let t = tempfile::tempdir().unwrap();
    let dir = tiny_cifar(t.path());
    let cache = t.path().join("cache");
    let args = ["data", "info", dir.to_str().unwrap(), "--format", "json", "--cache-dir", cache.to_str().unwrap()];
    let (ok, out, err) = vitlab(&args);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["format"], "cifar10-binary");
    assert_eq!(v["splits"]["train"]["count"], 20);
    assert_eq!(v["splits"]["test"]["count"], 2);
    assert_eq!(v["splits"]["train"]["per_class"]["airplane"], 2);
    assert_eq!((v["height"].as_u64(), v["width"].as_u64()), (Some(32), Some(32)));
    assert_eq!(v["cache"]["status"], "built");
    assert!(v["checksum"].as_str().unwrap().starts_with("sha256:"));
    let (ok, out, _) = vitlab(&args);
    assert!(ok);
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(w["cache"]["status"], "hit");
    assert_eq!(w["checksum"], v["checksum"]);
    // The table form lists the classes with their counts per split.
    let (ok, out, _) = vitlab(&["data", "info", dir.to_str().unwrap(), "--cache-dir", cache.to_str().unwrap()]);
    assert!(ok);
    assert!(out.contains("cifar10-binary") && out.contains("train        20 images"), "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("truck") && l.split_whitespace().collect::<Vec<_>>() == ["truck", "2", "0"]),
        "{out}"
    );
}

#[test]
fn data_errors_name_the_file() {
    let t = tempfile::tempdir().unwrap();
    let dir = tiny_cifar(t.path());
    fs::write(dir.join("data_batch_2.bin"), vec![0u8; 3074]).unwrap();
    let (ok, _, err) = vitlab(&["data", "info", dir.to_str().unwrap(), "--no-cache"]);
    assert!(!ok);
    assert!(err.contains("data_batch_2.bin") && err.contains("wrong record size"), "{err}");
    let (ok, _, err) = vitlab(&["data", "download", "mnist", "--dir", t.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("unknown dataset") && err.contains("cifar10"), "{err}");
}

#[test]
fn data_download_list_and_bench() {
    let (ok, out, _) = vitlab(&["data", "download", "--list"]);
    assert!(ok);
    assert!(out.contains("cifar100-binary") && out.contains("03b5dce01913d631647c71ecec9e9cb8"), "{out}");
    let t = tempfile::tempdir().unwrap();
    let dir = tiny_cifar(t.path());
    let (ok, out, err) = vitlab(&["data", "bench", dir.to_str().unwrap(), "--batch", "8", "--seconds", "0.2", "--no-cache"]);
    assert!(ok, "{err}");
    assert!(out.contains("images/s"), "{out}");
}

/// The pixels of image `i` of class `c`: each image different, lossless in PNG.
fn pattern(c: u32, i: u32, size: u32) -> image::RgbImage {
    image::RgbImage::from_fn(size, size, |x, y| {
        image::Rgb([(c * 80 + x) as u8, (i * 20 + y) as u8, (c * 7 + i * 3 + x * y) as u8])
    })
}

/// An image folder `root/{train,test}/<class>/NN.png` of 4x4 images (or
/// `root/<class>/` when `test` is 0): classes cat, dog, fox.
fn tiny_folder(root: &Path, train: u32, test: u32) -> std::path::PathBuf {
    for (ci, class) in ["cat", "dog", "fox"].iter().enumerate() {
        let splits: Vec<(&str, u32)> = if test == 0 { vec![("", train)] } else { vec![("train", train), ("test", test)] };
        for (split, n) in splits {
            let dir = root.join(split).join(class);
            fs::create_dir_all(&dir).unwrap();
            for i in 0..n {
                pattern(ci as u32, i + if split == "test" { 100 } else { 0 }, 4).save(dir.join(format!("{i:02}.png"))).unwrap();
            }
        }
    }
    root.to_path_buf()
}

/// The sorted file names of a folder and the decoded images.
fn pngs(dir: &Path) -> Vec<(String, image::RgbImage)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), image::open(&p).unwrap().into_rgb8())
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Nothing but `keep` in `dir` (no `*.tmp-*` leftovers).
fn only(dir: &Path, keep: &[&str]) {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut keep: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
    keep.sort();
    assert_eq!(names, keep);
}

#[test]
fn data_unpaired_writes_a_folder_that_data_info_reads() {
    let t = tempfile::tempdir().unwrap();
    let src = tiny_folder(&t.path().join("src"), 5, 2);
    let out = t.path().join("cat2fox");
    let s = src.to_str().unwrap();
    let (ok, stdout, err) =
        vitlab(&["data", "unpaired", s, "--a", "cat", "--b", "fox", "--out", out.to_str().unwrap(), "--no-cache"]);
    assert!(ok, "{err}");
    assert!(stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["trainA", "cat", "5", "5"]), "{stdout}");
    assert!(stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["testB", "fox", "2", "2"]), "{stdout}");
    assert!(stdout.contains("size     4x4 (the source's size)"), "{stdout}");
    only(t.path(), &["src", "cat2fox"]);
    only(&out, &["trainA", "trainB", "testA", "testB", "unpaired.json"]);
    // Source order, pixels unchanged (PNG is lossless): trainB/00003.png is train/fox/03.png.
    let train_b = pngs(&out.join("trainB"));
    let names: Vec<&str> = train_b.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["00000.png", "00001.png", "00002.png", "00003.png", "00004.png"]);
    assert_eq!(train_b[3].1, pattern(2, 3, 4));
    assert_eq!(pngs(&out.join("testA"))[1].1, pattern(0, 101, 4));
    let record: serde_json::Value = serde_json::from_str(&fs::read_to_string(out.join("unpaired.json")).unwrap()).unwrap();
    assert_eq!((record["a"].as_str(), record["b"].as_str()), (Some("cat"), Some("fox")));

    let info = |dir: &Path| -> serde_json::Value {
        let (ok, stdout, err) = vitlab(&["data", "info", dir.to_str().unwrap(), "--format", "json", "--no-cache"]);
        assert!(ok, "{err}");
        serde_json::from_str(&stdout).unwrap()
    };
    let v = info(&out);
    assert_eq!(v["format"], "unpaired");
    assert_eq!(v["splits"]["train"]["per_class"], serde_json::json!({"A": 5, "B": 5}));
    assert_eq!(v["splits"]["test"]["per_class"], serde_json::json!({"A": 2, "B": 2}));
    assert_eq!((v["height"].as_u64(), v["width"].as_u64()), (Some(4), Some(4)));

    // --size resizes; an existing empty --out is used.
    let out8 = t.path().join("cat2dog-8");
    fs::create_dir(&out8).unwrap();
    let (ok, stdout, err) = vitlab(&[
        "data",
        "unpaired",
        s,
        "--a",
        "dog",
        "--b",
        "cat",
        "--out",
        out8.to_str().unwrap(),
        "--size",
        "8",
        "--no-cache",
    ]);
    assert!(ok, "{err}");
    assert!(stdout.contains("size     8x8 (resized from 4x4, bilinear)"), "{stdout}");
    assert!(pngs(&out8.join("testB")).iter().all(|(_, im)| im.dimensions() == (8, 8)));
    let v = info(&out8);
    assert_eq!((v["height"].as_u64(), v["splits"]["train"]["count"].as_u64()), (Some(8), Some(10)));

    // A source without a test split gives trainA/ trainB/ and says so.
    let flat = tiny_folder(&t.path().join("flat"), 3, 0);
    let out_flat = t.path().join("flat-out");
    let (ok, stdout, err) = vitlab(&[
        "data",
        "unpaired",
        flat.to_str().unwrap(),
        "--a",
        "cat",
        "--b",
        "dog",
        "--out",
        out_flat.to_str().unwrap(),
        "--no-cache",
    ]);
    assert!(ok, "{err}");
    assert!(stdout.contains("has no test split: wrote trainA/ and trainB/ only"), "{stdout}");
    only(&out_flat, &["trainA", "trainB", "unpaired.json"]);
    let v = info(&out_flat);
    assert_eq!(v["splits"]["train"]["count"], 6);
    assert!(v["splits"].get("test").is_none(), "{v}");
}

#[test]
fn data_unpaired_errors() {
    let t = tempfile::tempdir().unwrap();
    let src = tiny_folder(&t.path().join("src"), 2, 1);
    let s = src.to_str().unwrap();
    let out = t.path().join("out");
    let o = out.to_str().unwrap();
    let (ok, _, err) = vitlab(&["data", "unpaired", s, "--a", "cat", "--b", "horse", "--out", o, "--no-cache"]);
    assert!(!ok);
    assert!(err.contains("--b") && err.contains("unknown class \"horse\"") && err.contains("cat, dog, fox"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let (ok, _, err) = vitlab(&["data", "unpaired", s, "--a", "dog", "--b", "dog", "--out", o, "--no-cache"]);
    assert!(!ok);
    assert!(err.contains("--b") && err.contains("must differ"), "{err}");
    assert!(!out.exists());
    // An existing non-empty --out is refused and left as it was.
    fs::create_dir(&out).unwrap();
    fs::write(out.join("keep.txt"), "mine").unwrap();
    let (ok, _, err) = vitlab(&["data", "unpaired", s, "--a", "cat", "--b", "dog", "--out", o, "--no-cache"]);
    assert!(!ok);
    assert!(err.contains(o) && err.contains("not empty"), "{err}");
    only(&out, &["keep.txt"]);
    only(t.path(), &["src", "out"]);
    // An --out inside the source would become part of it.
    let inside = src.join("train").join("made");
    let (ok, _, err) =
        vitlab(&["data", "unpaired", s, "--a", "cat", "--b", "dog", "--out", inside.to_str().unwrap(), "--no-cache"]);
    assert!(!ok);
    assert!(err.contains("inside the source"), "{err}");
    only(&src.join("train"), &["cat", "dog", "fox"]);
}

#[test]
fn data_unpaired_seeded_limits_pick_the_same_images() {
    let t = tempfile::tempdir().unwrap();
    let src = tiny_folder(&t.path().join("src"), 8, 4);
    let s = src.to_str().unwrap();
    let run = |name: &str, seed: &str| -> std::path::PathBuf {
        let out = t.path().join(name);
        let args = [
            "data",
            "unpaired",
            s,
            "--a",
            "fox",
            "--b",
            "cat",
            "--out",
            out.to_str().unwrap(),
            "--limit-train",
            "3",
            "--limit-test",
            "2",
            "--seed",
            seed,
            "--no-cache",
        ];
        let (ok, stdout, err) = vitlab(&args);
        assert!(ok, "{err}");
        assert!(stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["trainA", "fox", "3", "8"]), "{stdout}");
        assert!(stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["testB", "cat", "2", "4"]), "{stdout}");
        out
    };
    let (one, two, other) = (run("one", "5"), run("two", "5"), run("other", "6"));
    let mut differs = false;
    for d in ["trainA", "trainB", "testA", "testB"] {
        let (a, b, c) = (pngs(&one.join(d)), pngs(&two.join(d)), pngs(&other.join(d)));
        assert_eq!(a, b, "{d}");
        differs |= a != c;
        // Each picked image is one of the source's images of that class, in source order.
        let (class, split, n, first) = match d {
            "trainA" => (2, "train", 8, 0),
            "trainB" => (0, "train", 8, 0),
            "testA" => (2, "test", 4, 100),
            _ => (0, "test", 4, 100),
        };
        let positions: Vec<u32> = a
            .iter()
            .map(|(_, im)| {
                (0..n)
                    .find(|&i| *im == pattern(class, first + i, 4))
                    .unwrap_or_else(|| panic!("{d}: not a source image of {split}"))
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{d}: {positions:?}");
    }
    assert!(differs, "seeds 5 and 6 picked the same images everywhere");
}

/// The README's image-to-image chain on a tiny labelled folder: two classes to an
/// unpaired folder, a CycleGAN run on it, then `vitlab translate`; and translate's errors.
#[test]
fn unpaired_folder_then_cyclegan_training_then_translate() {
    let t = tempfile::tempdir().unwrap();
    let src = tiny_folder(&t.path().join("src"), 6, 2);
    let (u, run, out) = (t.path().join("unpaired"), t.path().join("run"), t.path().join("translated"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let (ok, _, err) = vitlab(&["data", "unpaired", &s(&src), "--a", "cat", "--b", "dog", "--out", &s(&u), "--size", "24"]);
    assert!(ok, "{err}");
    let sets = [
        "task=cyclegan",
        "epochs=2",
        "batch_size=2",
        "model.image_size=24",
        "model.patch_size=4",
        "model.depth=6",
        "model.dim=16",
        "model.mlp_dim=32",
        "model.heads=2",
        "optim.name=adam",
        "optim.lr=2e-4",
        "schedule.name=linear",
        "schedule.decay_epochs=1",
        "cyclegan.discriminator=released",
        "cyclegan.refiner_width=4",
        "cyclegan.fid_every=0",
        "cyclegan.samples=2",
        "monitor.block_every=0",
    ];
    let mut args =
        vec!["train".to_string(), "--out".into(), s(&run), "--quiet".into(), "--set".into(), format!("data.path={}", s(&u))];
    for x in sets {
        args.extend(["--set".to_string(), x.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, err) = vitlab(&args);
    assert!(ok, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((summary["task"].as_str(), summary["steps"].as_u64()), (Some("cyclegan"), Some(6)), "{summary}");
    assert_eq!(summary["fid_note"], "cyclegan.fid_every = 0");
    assert!(err.contains("FID_A / FID_B not measured"), "{err}");
    for f in
        ["config.toml", "steps.csv", "metrics.csv", "results.json", "checkpoints/best.safetensors", "samples/step_0000006.png"]
    {
        assert!(run.join(f).exists(), "{f}");
    }

    // The CycleGAN report: its table, loss figure and the run's last sample grid.
    let rep = t.path().join("report");
    let (ok, _, err) = vitlab(&["report", &s(&run), "--out", &s(&rep), "--title", "tiny"]);
    assert!(ok, "{err}");
    let md = fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(md.contains("| all runs | 0 | - |") && md.contains("step_0000006.png"), "{md}");
    for f in ["report.json", "figures/losses.svg", "figures/losses.png"] {
        assert!(rep.join(f).exists(), "{f}");
    }

    let (ok, _, err) =
        vitlab(&["translate", &s(&run), &s(&u.join("testA")), "--direction", "a2b", "--out", &s(&out), "--size", "32"]);
    assert!(ok, "{err}");
    let written = pngs(&out);
    assert_eq!(written.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["00000.png", "00001.png"]);
    assert_eq!(written[0].1.dimensions(), (32, 32));

    // Errors: one line naming what is wrong, nothing written.
    let err_of = |args: &[&str]| {
        let (ok, _, err) = vitlab(args);
        assert!(!ok && err.lines().count() == 1, "{err}");
        err
    };
    // A bad --direction is a usage error of several lines (tests/cli.rs checks it).
    let e = err_of(&["translate", &s(&run), &s(&t.path().join("nope.png")), "--direction", "a2b", "--out", &s(&out)]);
    assert!(e.contains("nope.png"), "{e}");
    let e = err_of(&[
        "translate",
        &s(&t.path().join("src")),
        &s(&u.join("testA")),
        "--direction",
        "b2a",
        "--out",
        &s(&t.path().join("o2")),
    ]);
    assert!(e.contains("not a (started) run directory"), "{e}");
    assert!(!t.path().join("o2").exists());
}

#[test]
fn data_preview_and_augment_show_what_the_loader_does() {
    let t = tempfile::tempdir().unwrap();
    let dir = tiny_cifar(t.path());
    let cache = t.path().join("cache");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = root.join("configs/strong-cifar10.toml");
    let grid = t.path().join("grid.png");
    let args = [
        "data",
        "preview",
        dir.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--out",
        grid.to_str().unwrap(),
        "--count",
        "12",
        "--set",
        "batch_size=4",
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    let (ok, out, err) = vitlab(&args);
    assert!(ok, "{err}");
    // 12 images as two columns of 8 (the second padded), a label line per image.
    let img = image::open(&grid).unwrap().to_rgb8();
    assert_eq!((img.width(), img.height()), (2 * 32 + 3 * 2, 8 * 32 + 9 * 2));
    let rows: Vec<&str> = out.lines().filter(|l| l.trim_start().starts_with("row ")).collect();
    assert_eq!(rows.len(), 12, "{out}");
    // The strong recipe mixes about half of the batches: those rows name two classes.
    assert!(rows.iter().all(|l| l.contains(": ")), "{out}");
    // Deterministic: the same command writes the same grid.
    let first = fs::read(&grid).unwrap();
    assert!(vitlab(&args).0);
    assert_eq!(fs::read(&grid).unwrap(), first);

    // One operation on one file: rotate by 90 degrees is a transpose of a square image.
    let src = t.path().join("in.png");
    let mut im = image::RgbImage::new(16, 16);
    for (x, y, p) in im.enumerate_pixels_mut() {
        *p = image::Rgb([(x * 16) as u8, (y * 16) as u8, 7]);
    }
    im.save(&src).unwrap();
    let rotated = t.path().join("rot.png");
    let (ok, _, err) = vitlab(&[
        "data",
        "augment",
        src.to_str().unwrap(),
        "--op",
        "rotate",
        "--magnitude",
        "90",
        "--out",
        rotated.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let r = image::open(&rotated).unwrap().to_rgb8();
    // Counter-clockwise: the top-right pixel moves to the top-left.
    assert_eq!(r.get_pixel(0, 0), im.get_pixel(15, 0));
    assert_eq!(r.get_pixel(0, 15), im.get_pixel(0, 0));
    // Errors name the option and list the operations.
    let (ok, _, err) = vitlab(&["data", "augment", src.to_str().unwrap(), "--op", "twist", "--out", rotated.to_str().unwrap()]);
    assert!(!ok && err.contains("--op") && err.contains("shear_x"), "{err}");
    let missing = t.path().join("nope.png");
    let (ok, _, err) =
        vitlab(&["data", "augment", missing.to_str().unwrap(), "--op", "invert", "--out", rotated.to_str().unwrap()]);
    assert!(!ok && err.contains("nope.png"), "{err}");
}
