//! End-to-end tests of the `vitlab` binary.

use std::process::{Command, Output};

fn vitlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vitlab")).args(args).output().expect("run vitlab")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const PAPER_224: &[&str] = &["--preset", "paper", "--image-size", "224", "--patch-size", "16", "--num-classes", "10"];

#[test]
fn models_table_reads_the_papers_parameter_counts() {
    let out = vitlab(&[&["models"], PAPER_224].concat());
    assert!(out.status.success());
    let text = stdout(&out);
    let vit_params: Vec<&str> =
        text.lines().filter(|l| l.starts_with("vit ")).map(|l| l.split_whitespace().last().unwrap()).collect();
    assert_eq!(vit_params, ["5.67M", "22.26M", "88.16M", "307.47M", "637.40M"], "{text}");
    // Every variant x size is listed.
    assert_eq!(text.lines().filter(|l| l.contains("  tiny ")).count(), 5, "{text}");
}

#[test]
fn models_csv_and_json_give_exact_integers() {
    let csv = stdout(&vitlab(&[&["models", "--format", "csv"], PAPER_224].concat()));
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("block,size,depth,width,mlp,heads,params"));
    assert!(csv.contains("\nvit,tiny,12,192,768,3,5673034\n"), "{csv}");
    assert!(csv.contains("\nvit,large,24,1024,4096,16,307465226\n"), "{csv}");
    assert_eq!(lines.count(), 25);

    let json = stdout(&vitlab(&[&["models", "--format", "json"], PAPER_224].concat()));
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 25);
    let small = rows.iter().find(|r| r["block"] == "vit" && r["size"] == "small").unwrap();
    assert_eq!(small["params"], 22257802);
    assert_eq!(small["heads"], 6);
}

/// The generators at the paper's 256 px / patch 16 (counts from tools/make_fixtures.py's PyTorch reference).
#[test]
fn models_generators_lists_the_vitunets() {
    let csv = stdout(&vitlab(&["models", "--generators", "--format", "csv"]));
    assert_eq!(
        csv,
        "generator,block,depth,width,mlp,heads,refiner,params\n\
         vitunet,vit,12,384,1536,6,4x128,11407523\n\
         vit22bunet,vit22b,12,384,1536,6,4x128,11391747\n"
    );
    let out = vitlab(&["models", "--generators", "--image-size", "100"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("generator.image_size") && err.contains("patch size 16"), "{err}");
    // Classifier-only options are refused rather than ignored.
    let out = vitlab(&["models", "--generators", "--num-classes", "100"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--num-classes") && err.contains("--generators"), "{err}");
}

#[test]
fn a_bad_image_size_exits_non_zero_with_a_clear_message() {
    let out = vitlab(&["models", "--image-size", "30", "--patch-size", "4"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model.image_size") && err.contains("not divisible"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_unknown_preset_lists_the_choices() {
    let out = vitlab(&["models", "--preset", "fancy"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("default") && err.contains("paper"), "{err}");
}

/// Writes a small image-folder dataset: `root/{train,test}/<class>/*.png`,
/// classes told apart by colour.
fn write_image_folder(root: &std::path::Path, per_class_train: usize, per_class_test: usize) {
    let colours = [("red", [200u8, 30, 30]), ("green", [30, 200, 30]), ("blue", [30, 30, 200])];
    for (split, n) in [("train", per_class_train), ("test", per_class_test)] {
        for (ci, (name, rgb)) in colours.iter().enumerate() {
            let dir = root.join(split).join(name);
            std::fs::create_dir_all(&dir).unwrap();
            for i in 0..n {
                let img = image::RgbImage::from_fn(16, 16, |x, y| {
                    let noise = ((x * 7 + y * 13 + i as u32 * 31 + ci as u32 * 5) % 40) as u8;
                    image::Rgb([rgb[0].saturating_add(noise), rgb[1].saturating_add(noise), rgb[2].saturating_add(noise)])
                });
                img.save(dir.join(format!("{i:03}.png"))).unwrap();
            }
        }
    }
}

/// `vitlab train` of a one-block model on the image folder `data` into `run`,
/// with `extra` overrides after the common ones.
fn train_args(run: &str, data: &str, extra: &[&str]) -> Vec<String> {
    let common = [
        format!("data.path={data}"),
        "data.val_size=12".into(),
        "model.image_size=16".into(),
        "model.patch_size=4".into(),
        "model.depth=1".into(),
        "model.dim=32".into(),
        "model.mlp_dim=32".into(),
        "model.heads=2".into(),
        "batch_size=12".into(),
    ];
    let mut args = vec!["train".to_string(), "--out".into(), run.into(), "--quiet".into()];
    for s in common.iter().map(String::as_str).chain(extra.iter().copied()) {
        args.extend(["--set".to_string(), s.to_string()]);
    }
    args
}

#[test]
fn train_eval_predict_end_to_end_on_a_generated_image_folder() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("colours");
    write_image_folder(&data, 24, 6);
    let run = dir.path().join("run");
    let data_s = data.to_str().unwrap();
    let run_s = run.to_str().unwrap();
    let args = train_args(run_s, data_s, &["epochs=3", "optim.lr=3e-3"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = vitlab(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(summary["exit_cause"], "completed");
    assert_eq!(summary["epochs"], 3);
    for f in [
        "config.toml",
        "metrics.csv",
        "steps.csv",
        "blocks.csv",
        "results.json",
        "checkpoints/latest.safetensors",
        "checkpoints/best.safetensors",
    ] {
        assert!(run.join(f).exists(), "missing {f}");
    }
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["test"]["count"], 18);
    assert_eq!(results["classes"], serde_json::json!(["blue", "green", "red"]));
    // Colours are trivially separable: the model must have learned them.
    let top1 = results["test"]["top1"].as_f64().unwrap();
    assert!(top1 > 0.9, "test top-1 {top1}");

    // eval prints and writes the same metrics.
    let eval_json = dir.path().join("eval.json");
    let out = vitlab(&["eval", run_s, "--data", data_s, "--format", "json", "--out", eval_json.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(e["top1"], results["test"]["top1"]);
    assert_eq!(e["count"], 18);
    assert!(eval_json.exists());

    // predict: the top class of a red image is "red".
    let red = data.join("test/red/000.png");
    let out = vitlab(&["predict", run_s, red.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(p[0]["top"][0][0], "red");
    assert_eq!(p[0]["top"].as_array().unwrap().len(), 3);

    // attention: per image a grid (a row per block: the image, each head, their mean),
    // the rollout beside the image, and the raw maps; the EMA-less run's trained weights.
    let att = dir.path().join("attention");
    let green = data.join("test/green/001.png");
    let images = [red.to_str().unwrap(), green.to_str().unwrap()];
    let out = vitlab(&[&["attention", run_s], &images[..], &["--out", att.to_str().unwrap(), "--format", "json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (s["weights"].as_str(), s["query"].as_str(), s["blocks"].as_u64(), s["heads"].as_u64()),
        (Some("model"), Some("class token"), Some(1), Some(2))
    );
    assert_eq!(s["images"][0]["predicted"], "red");
    // 16 px images enlarged to 96 px tiles, 2 px gaps.
    let size = |f: &str| image::image_dimensions(att.join(f)).unwrap();
    assert_eq!(size("000/grid.png"), (4 * 96 + 5 * 2, 96 + 2 * 2));
    assert_eq!(size("001/rollout.png"), (2 * 96 + 3 * 2, 96 + 2 * 2));
    let (maps, meta) = vitlab::models::weights::read_safetensors(&att.join("001/maps.safetensors")).unwrap();
    assert_eq!(maps["attention"].shape, [1, 2, 17, 17]);
    assert_eq!((maps["query"].shape.as_slice(), maps["rollout"].shape.as_slice()), (&[1, 2, 4, 4][..], &[4, 4][..]));
    assert!(maps["attention"].data.chunks(17).all(|row| (row.iter().sum::<f32>() - 1.0).abs() < 1e-5), "softmax rows");
    assert_eq!(meta["image"], images[1]);
    assert!(att.join("attention.json").exists());
    // Bad input: a discard ratio outside [0, 1) is a usage error; an image is not a checkpoint.
    let out = vitlab(&["attention", run_s, images[0], "--out", att.to_str().unwrap(), "--discard-ratio", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--discard-ratio"));
    let out = vitlab(&["attention", images[1], images[0], "--out", att.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("001.png"), "{}", String::from_utf8_lossy(&out.stderr));

    // Training again into the same folder is refused with a hint to resume.
    let again = vitlab(&args);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));
}

#[test]
fn the_test_metrics_of_a_run_equal_eval_of_its_best_checkpoint_with_a_batchnorm_head() {
    // The paper's `vit22b-code` model has a BatchNorm head; the run trains past its
    // best epoch (max_steps), so the best checkpoint's BatchNorm statistics differ
    // from the training state's at the end.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("colours");
    write_image_folder(&data, 24, 6);
    let run = dir.path().join("run");
    let (data_s, run_s) = (data.to_str().unwrap(), run.to_str().unwrap());
    let args = train_args(run_s, data_s, &["model.block=vit22b-code", "model.preset=paper", "epochs=3", "max_steps=13"]);
    let out = vitlab(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["test_checkpoint"], "best");
    assert_eq!(results["steps"], 13);
    let out = vitlab(&["eval", &format!("{run_s}/checkpoints/best.safetensors"), "--data", data_s, "--format", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let e: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!((&e["loss"], &e["top1"]), (&results["test"]["loss"], &results["test"]["top1"]));
}

#[test]
fn config_errors_name_the_key() {
    let out = vitlab(&["train", "--out", "/tmp/never", "--set", "data.path=synthetic", "--set", "optim.lrr=1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("optim") && err.contains("lrr"), "{err}");
    let out = vitlab(&["train", "--out", "/tmp/never", "--set", "data.path=synthetic", "--set", "model.block=vit23"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("model.block"), "{err}");
    let out = vitlab(&["train", "--config", "/nonexistent.toml", "--out", "/tmp/never"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("/nonexistent.toml"), "{err}");
    // The README's first try of the modern recipe: 2 epochs inside a 5-epoch warmup.
    let modern = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/modern-cifar10.toml");
    let out = vitlab(&["train", "--config", modern, "--out", "/tmp/never", "--set", "data.path=synthetic", "--set", "epochs=2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("schedule.warmup_epochs") && err.contains("epochs = 2"), "{err}");
    assert!(err.contains("--set schedule.warmup_epochs=0.20"), "{err}");
}

/// SIGKILL a training run at several moments (it writes a checkpoint every
/// step, so kills land during writes too): every time, `latest` loads and
/// `--resume` finishes the run. Kills are timed by progress (new rows in
/// steps.csv), not by the clock, so the test holds on fast and slow machines.
/// Kills `vitlab train ARGS` (then `--resume`) four times, each after a few more
/// steps.csv rows (it writes a checkpoint every step, so kills land during writes
/// too); every time `latest` loads, and a last `--resume` completes `total` steps.
fn kill_and_resume(run: &std::path::Path, args: Vec<String>, total: u64) {
    let run_s = run.to_str().unwrap();
    let latest = run.join("checkpoints/latest.safetensors");
    let steps = run.join("steps.csv");
    let rows = || std::fs::read_to_string(&steps).map(|t| t.lines().count()).unwrap_or(0);
    for (kill, extra_steps) in [3usize, 5, 7, 4].into_iter().enumerate() {
        let before = rows();
        let mut child = Command::new(env!("CARGO_BIN_EXE_vitlab"))
            .args(if latest.exists() {
                vec!["train".to_string(), "--resume".into(), run_s.into(), "--quiet".into()]
            } else {
                args.clone()
            })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while rows() < before + extra_steps {
            assert!(child.try_wait().unwrap().is_none(), "kill {kill}: the run ended before it was killed");
            assert!(started.elapsed().as_secs() < 120, "kill {kill}: no progress");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let ck = vitlab::train::Checkpoint::load(&latest).expect("latest loads after a kill");
        assert!(ck.tensors.values().all(|t| t.data.iter().all(|v| v.is_finite())));
    }
    let out = vitlab(&["train", "--resume", run_s, "--quiet"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(summary["exit_cause"], "completed");
    assert_eq!(summary["steps"], total);
}

/// `vitlab train --out RUN --quiet --set S...`.
fn train_sets(run: &std::path::Path, sets: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec!["train".into(), "--out".into(), run.to_str().unwrap().into(), "--quiet".into()];
    for s in sets {
        args.push("--set".into());
        args.push(s.to_string());
    }
    args
}

#[test]
fn a_run_killed_at_any_moment_leaves_a_loadable_checkpoint_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("killed");
    let sets = [
        "data.path=synthetic",
        "data.synthetic_train=640",
        "data.synthetic_test=32",
        "data.synthetic_size=16",
        "data.val_size=0",
        "model.image_size=16",
        "model.patch_size=4",
        "model.depth=2",
        "model.dim=64",
        "model.mlp_dim=128",
        "model.heads=4",
        "epochs=2",
        "batch_size=16",
        "checkpoint.every_steps=1",
        "monitor.block_every=0",
    ];
    kill_and_resume(&run, train_sets(&run, &sets), 80);
}

/// The same for a CycleGAN run, whose checkpoints also hold four optimisers and two history pools.
#[test]
fn a_cyclegan_run_killed_at_any_moment_leaves_a_loadable_checkpoint_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("unpaired");
    for (folder, n) in [("trainA", 40u32), ("trainB", 40), ("testA", 2), ("testB", 2)] {
        std::fs::create_dir_all(data.join(folder)).unwrap();
        for i in 0..n {
            let img =
                image::RgbImage::from_fn(24, 24, |x, y| image::Rgb([(x * 9 + i) as u8, (y * 7) as u8, folder.len() as u8 * 20]));
            img.save(data.join(folder).join(format!("{i:02}.png"))).unwrap();
        }
    }
    let run = dir.path().join("killed");
    let path = format!("data.path={}", data.display());
    let sets = [
        "task=cyclegan",
        path.as_str(),
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
        "cyclegan.pool_size=5",
        "cyclegan.fid_every=0",
        "cyclegan.sample_every=0",
        "checkpoint.every_steps=1",
        "monitor.block_every=0",
    ];
    kill_and_resume(&run, train_sets(&run, &sets), 40);
}

/// A flag value outside its closed set is clap's usage error (exit 2) naming the flag and
/// listing the accepted values, before any work (the paths need not exist).
#[test]
fn a_value_outside_a_flags_choices_is_a_usage_error_listing_them() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["translate", "run", "in.png", "--out", "o", "--direction", "sideways"], &["--direction", "a2b", "b2a"]),
        (&["eval", "run", "--split", "val"], &["--split", "test", "train"]),
        (&["eval", "run", "--backend", "gpu"], &["--backend", "flex", "tch", "tch-cuda", "cuda"]),
        (&["data", "bench", "d", "--augment", "heavy"], &["--augment", "standard", "paper", "none"]),
        (&["data", "bench", "d", "--normalize", "unit"], &["--normalize", "cifar", "imagenet", "minus-one-one"]),
        (&["stability", "--model-preset", "released"], &["--model-preset", "default", "paper"]),
        (&["stability", "--blocks", "vit,vit23"], &["--blocks", "vit22b-nonorm", "vit22b-code"]),
        (&["stability", "--stabilizers", "none,dropout"], &["--stabilizers", "clip", "z-loss"]),
        (&["bench", "--discriminator", "unet"], &["--discriminator", "patchgan", "released"]),
        (&["bench", "--backend", "gpu"], &["--backend", "all", "flex", "tch-cuda"]),
        (&["bench", "--only", "both"], &["--only", "train", "infer"]),
        (&["fid", "a", "b", "--feature", "1000"], &["--feature", "64", "192", "768", "2048"]),
        (&["models", "--preset", "fancy"], &["--preset", "default", "paper"]),
    ];
    for (args, expected) in cases {
        let out = vitlab(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("invalid value") && err.contains("possible values"), "{args:?}: {err}");
        for e in *expected {
            assert!(err.contains(e), "{args:?}: {e} not in {err}");
        }
    }
    // `--help` says what each value means.
    let help = stdout(&vitlab(&["eval", "--help"]));
    assert!(help.contains("Compute backend") && help.contains("tch-cuda:") && help.contains("train:"), "{help}");
}

#[test]
fn train_needs_out_or_resume_and_not_both() {
    for args in [
        &["train", "--set", "data.path=synthetic"][..],
        &["train", "--config", "/nonexistent.toml"],
        &["train", "--resume", "/tmp/never", "--out", "/tmp/never2"],
    ] {
        let out = vitlab(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--out") && err.contains("Usage:"), "{args:?}: {err}");
    }
    // An error past the flags (here a run directory without a run) is exit 1.
    let dir = tempfile::tempdir().unwrap();
    let out = vitlab(&["train", "--resume", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    // `--out` a folder that holds a run is a usage error too (exit 2), naming the flag
    // and the command that continues it; the run is left alone.
    let ck = dir.path().join("checkpoints");
    std::fs::create_dir_all(&ck).unwrap();
    std::fs::write(ck.join("latest.safetensors"), b"kept").unwrap();
    let out = vitlab(&["train", "--set", "data.path=synthetic", "--out", dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("error: --out:") && err.contains("--resume"), "{err}");
    assert_eq!(std::fs::read(ck.join("latest.safetensors")).unwrap(), b"kept");
}

/// A run that diverges exits with 3 (a finished one with 0), and still records why.
#[test]
fn a_diverging_training_run_exits_with_3_and_records_the_explosion() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("boom");
    let sets = [
        "data.path=synthetic",
        "data.synthetic_train=256",
        "data.synthetic_test=64",
        "data.synthetic_size=16",
        "data.val_size=64",
        "model.image_size=16",
        "model.patch_size=4",
        "model.depth=2",
        "model.dim=32",
        "model.mlp_dim=64",
        "model.heads=4",
        "epochs=2",
        "batch_size=32",
        "monitor.block_every=0",
        "optim.lr=1e4",
        "stabilizers.clip_grad_norm=0",
    ];
    let args = train_sets(&run, &sets);
    let out = vitlab(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(summary["exit_cause"], "exploded");
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["exit_cause"], "exploded");
    assert!(results["explosion"]["step"].as_u64().is_some(), "{results}");
}

/// A backend the binary cannot run (here `tch-cuda`: not compiled into the default
/// build, or no GPU in a `tch` build) is an error naming it before the run directory
/// is made, so the same `--out` works once the backend does.
#[test]
fn a_backend_that_cannot_run_is_refused_before_the_run_exists() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let args = train_sets(&run, &["data.path=synthetic", "backend=\"tch-cuda\""]);
    let out = vitlab(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error: backend tch-cuda:"), "{err}");
    assert!(!run.exists(), "the run directory was made for a run that cannot start");
}

/// Without `--quiet` and with stderr not a terminal (a log file, `nohup`, `mpiexec`),
/// the epoch lines still reach stderr: the progress bar is not drawn there, and a
/// hidden bar would drop them.
#[test]
fn a_run_logged_to_a_file_still_prints_its_epoch_lines() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("logged");
    let sets = [
        "data.path=synthetic",
        "data.synthetic_train=64",
        "data.synthetic_test=16",
        "data.synthetic_size=16",
        "data.val_size=16",
        "model.image_size=16",
        "model.patch_size=4",
        "model.depth=1",
        "model.dim=16",
        "model.mlp_dim=16",
        "model.heads=2",
        "epochs=2",
        "batch_size=16",
    ];
    let mut args = train_sets(&run, &sets);
    args.retain(|a| a != "--quiet");
    let out = vitlab(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for epoch in ["epoch 1/2: train_loss", "epoch 2/2: train_loss"] {
        assert!(err.contains(epoch), "no {epoch:?} line in stderr:\n{err}");
    }
}

#[test]
fn the_top_level_help_documents_the_exit_codes() {
    let help = stdout(&vitlab(&["--help"]));
    for code in ["0  finished", "1  error", "2  usage error", "3  vitlab train"] {
        assert!(help.contains(code), "{code} in\n{help}");
    }
}

/// `vitlab bench` measures each mode in a child process and reports what a
/// user compares: images/s, GFLOP/s from the model's FLOP count, peak memory.
#[test]
fn bench_times_training_and_inference_and_reports_throughput_and_memory() {
    let out = vitlab(&[
        "bench",
        "--model",
        "vit-tiny",
        "--image-size",
        "8",
        "--patch-size",
        "4",
        "--num-classes",
        "3",
        "--batch",
        "2",
        "--infer-batch",
        "3",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--backend",
        "flex",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json rows");
    let rows = rows.as_array().unwrap();
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["train", "infer"]);
    for (r, batch) in rows.iter().zip([2, 3]) {
        assert_eq!((r["stack"].as_str(), r["batch"].as_u64(), r["steps"].as_u64()), (Some("flex"), Some(batch), Some(2)));
        let (ms, ips) = (r["median_ms"].as_f64().unwrap(), r["images_per_s"].as_f64().unwrap());
        assert!(ms > 0.0 && (ips - batch as f64 / (ms / 1000.0)).abs() < 1e-6 * ips, "{r}");
        assert!(r["gflops"].as_f64().unwrap() > 0.0 && r["peak_rss_mib"].as_f64().unwrap() > 1.0, "{r}");
        assert!(r["min_ms"].as_f64().unwrap() <= ms && r["vs_pytorch"].is_null(), "{r}");
    }
    // A CycleGAN iteration (two generators, two discriminators) on the synthetic pairs.
    let out = vitlab(&[
        "bench",
        "--model",
        "vitunet-tiny",
        "--depth",
        "6",
        "--image-size",
        "24",
        "--patch-size",
        "4",
        "--batch",
        "1",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--refiner-width",
        "8",
        "--backend",
        "flex",
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json rows");
    assert_eq!(rows.as_array().map(Vec::len), Some(1));
    assert_eq!(rows[0]["mode"], "train");
    assert!(rows[0]["images_per_s"].as_f64().unwrap() > 0.0);
}

/// `mpiexec -n 2` of a binary built without MPI would start two runs that each train
/// alone and overwrite each other's files: refused, saying how to build it.
#[cfg(not(feature = "mpi"))]
#[test]
fn several_ranks_without_the_mpi_feature_are_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    for var in ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"] {
        let o = Command::new(env!("CARGO_BIN_EXE_vitlab"))
            .args(["train", "--config", concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs/demo-synthetic.toml")])
            .args(["--out", &out.display().to_string()])
            .env(var, "2")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{var}: {err}");
        assert!(err.contains("built without the `mpi` feature") && err.contains("2 ranks"), "{var}: {err}");
        assert!(!out.exists(), "nothing is written");
    }
}
