//! `vitlab data info | download | bench` end to end on a tiny CIFAR-10 binary release.

use std::fs;
use std::path::Path;
use std::process::Command;

fn vitlab(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vitlab")).args(args).output().expect("run vitlab");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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
    assert!(out.lines().any(|l| l.starts_with("truck") && l.split_whitespace().collect::<Vec<_>>() == ["truck", "2", "0"]), "{out}");
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
