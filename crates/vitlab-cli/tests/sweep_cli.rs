//! End-to-end tests of `vitlab sweep`, `vitlab report` and `vitlab stability`.

use std::process::{Command, Output};

fn vitlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vitlab")).args(args).output().expect("run vitlab")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A tiny model on a small generated dataset: a run takes well under a second.
const TINY: &[&str] = &[
    "--set",
    "data.path=synthetic",
    "--set",
    "data.synthetic_train=96",
    "--set",
    "data.synthetic_test=32",
    "--set",
    "data.synthetic_size=8",
    "--set",
    "data.val_size=32",
    "--set",
    "data.workers=1",
    "--set",
    "model.image_size=8",
    "--set",
    "model.patch_size=4",
    "--set",
    "model.depth=1",
    "--set",
    "model.dim=16",
    "--set",
    "model.mlp_dim=32",
    "--set",
    "model.heads=2",
    "--set",
    "batch_size=32",
    "--set",
    "monitor.block_every=0",
];

#[test]
fn a_parallel_sweep_runs_every_cell_and_seed_as_child_processes_then_reports() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let out_s = out.to_str().unwrap();
    let args = [
        &[
            "sweep",
            "--grid",
            "model.block=vit,vit22b-nonorm",
            "--seeds",
            "2",
            "--jobs",
            "2",
            "--out",
            out_s,
            "--report",
            "--quiet",
        ],
        TINY,
        &["--set", "epochs=1"],
    ]
    .concat();
    let o = vitlab(&args);
    assert!(o.status.success(), "{}", text(&o));
    for cell in ["block=vit", "block=vit22b-nonorm"] {
        for seed in [0, 1] {
            let run = out.join(cell).join(format!("seed={seed}"));
            assert!(run.join("results.json").exists(), "{}", run.display());
            assert!(run.join("train.log").exists(), "child process log of {}", run.display());
        }
    }
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(manifest["runs"].as_array().unwrap().len(), 4);
    assert_eq!(manifest["seeds"], serde_json::json!([0, 1]));
    let md = std::fs::read_to_string(out.join("report/report.md")).unwrap();
    assert!(md.contains("| block=vit22b-nonorm | 2 |"), "{md}");
    assert!(out.join("report/figures/accuracy.png").exists());

    // Again: nothing left to do.
    let o = vitlab(&args);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(text(&o).matches("skipped").count(), 8, "4 log lines + 4 table rows:\n{}", text(&o));

    // `vitlab report` on the sweep, with an explicit baseline.
    let rep = dir.path().join("rep");
    let o = vitlab(&["report", out_s, "--out", rep.to_str().unwrap(), "--baseline", "model.block=vit22b-nonorm"]);
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    assert!(md.contains("`model.block=vit22b-nonorm`"), "{md}");
    assert!(rep.join("report.html").exists() && rep.join("figures/stability.svg").exists());

    // A baseline no cell has is an error naming the cells, with a non-zero exit.
    let o = vitlab(&["report", out_s, "--out", rep.to_str().unwrap(), "--baseline", "model.block=vit22b-ln"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("no cell has model.block=vit22b-ln") && text(&o).contains("vit22b-nonorm"), "{}", text(&o));
}

#[test]
fn a_failing_run_makes_the_sweep_exit_non_zero_after_the_others_ran() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let args = [
        &["sweep", "--grid", "data.path=synthetic,/no/such/dataset", "--out", out.to_str().unwrap(), "--quiet"],
        TINY,
        &["--set", "epochs=1"],
    ]
    .concat();
    // The grid value comes after TINY's data.path in the override order.
    let o = vitlab(&args);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("1 of 2 runs failed"), "{t}");
    assert!(out.join("path=synthetic/seed=0/results.json").exists());
    assert!(std::fs::read_to_string(out.join("path=_no_such_dataset/seed=0/error.txt")).unwrap().contains("/no/such/dataset"));
}

#[test]
fn stability_plans_blocks_by_stabilisers_by_seeds_and_runs_a_small_study() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stab");
    let out_s = out.to_str().unwrap();
    // The default study: 5 blocks x 3 stabilisers x 3 seeds.
    let o = vitlab(&["stability", "--dry-run", "--out", out_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("45 runs"), "{}", text(&o));
    assert!(text(&o).contains("block=vit22b-nonorm,stabilizer=z-loss/seed=2"), "{}", text(&o));
    assert!(!out.exists(), "a dry run writes nothing");

    // A small one that runs: 2 blocks x 2 stabilisers, 1 seed, 4 steps, plus an LR axis.
    let args = [
        &[
            "stability",
            "--steps",
            "4",
            "--seeds",
            "1",
            "--blocks",
            "vit,vit22b-nonorm",
            "--stabilizers",
            "none,z-loss",
            "--lr",
            "1e-3,1e4",
            "--out",
            out_s,
            "--quiet",
        ],
        TINY,
    ]
    .concat();
    let o = vitlab(&args);
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(out.join("report/report.md")).unwrap();
    assert!(md.contains("# Training stability"), "{md}");
    assert!(md.contains("| lr=1e-3,block=vit,stabilizer=none | 0 / 1 |"), "{md}");
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("lr=1e-3,block=vit22b-nonorm,stabilizer=z-loss/seed=0/results.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(results["steps"], 4);
    assert_eq!(results["exit_cause"], "max_steps");
    let config = std::fs::read_to_string(out.join("lr=1e-3,block=vit22b-nonorm,stabilizer=z-loss/seed=0/config.toml")).unwrap();
    for line in ["z_loss = 0.0001", "batch_size = 32", "max_steps = 4", "preset = \"paper\""] {
        assert!(config.contains(line), "{line} in\n{config}");
    }
    assert!(out.join("report/figures/stability.png").exists());
}

/// A diverging run is a result of a sweep, not a failure, also when it ran as a child
/// process (which exits with 3): the sweep records `exploded` and exits 0.
#[test]
fn a_parallel_sweep_records_a_diverging_run_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let args = [
        &["sweep", "--grid", "optim.lr=1e-3,1e4", "--jobs", "2", "--out", out.to_str().unwrap(), "--quiet"],
        TINY,
        &["--set", "data.synthetic_train=128", "--set", "epochs=2", "--set", "stabilizers.clip_grad_norm=0"],
    ]
    .concat();
    let o = vitlab(&args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cause = |cell: &str| {
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(cell).join("seed=0/results.json")).unwrap()).unwrap();
        r["exit_cause"].clone()
    };
    assert_eq!(cause("lr=1e-3"), "completed");
    assert_eq!(cause("lr=1e4"), "exploded");
    assert!(!text(&o).contains("FAILED"), "{}", text(&o));
}
