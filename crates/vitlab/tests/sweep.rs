//! Sweeps: restarting skips finished runs, resumes interrupted ones and starts
//! the rest; exploding and failing runs are recorded without stopping the
//! sweep; the report reads it all back.

use std::path::Path;

use vitlab::config::ExperimentConfig;
use vitlab::sweep::{self, Action, Axis, Runner, SweepOptions, SweepSpec};
use vitlab::train::classify::{self, Start};
use vitlab::train::progress::Progress;
use vitlab::train::{Checkpoint, ExitCause, RunDir};

/// Tiny runs on generated data: 96 train images, 3 batches of 32 per epoch, 2 epochs.
fn base_overrides(extra: &[&str]) -> Vec<String> {
    let mut o: Vec<String> = [
        "data.path=synthetic",
        "data.synthetic_train=128",
        "data.synthetic_test=32",
        "data.synthetic_size=8",
        "data.val_size=32",
        "data.workers=1",
        "model.image_size=8",
        "model.patch_size=4",
        "model.depth=1",
        "model.dim=16",
        "model.mlp_dim=32",
        "model.heads=2",
        "epochs=2",
        "batch_size=32",
        "monitor.block_every=0",
        "checkpoint.every_steps=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    o.extend(extra.iter().map(|s| s.to_string()));
    o
}

fn in_process() -> SweepOptions {
    SweepOptions { jobs: 1, runner: Runner::InProcess { quiet: true }, verbose: false }
}

fn spec(grid: &[&str], seeds: &[u64], extra: &[&str]) -> SweepSpec {
    SweepSpec {
        config: None,
        overrides: base_overrides(extra),
        grid: grid.iter().map(|g| Axis::parse(g).unwrap()).collect(),
        seeds: seeds.to_vec(),
    }
}

fn steps_column(run: &RunDir) -> Vec<u64> {
    std::fs::read_to_string(run.steps()).unwrap().lines().skip(1).map(|l| l.split(',').next().unwrap().parse().unwrap()).collect()
}

#[test]
fn a_restarted_sweep_skips_finished_runs_resumes_interrupted_ones_and_starts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sweep");
    // `max_steps=0` is the default; naming it lets the resumed run drop the
    // interruption's limit below.
    let plan = sweep::plan(&spec(&["optim.lr=1e-3,2e-3,3e-3"], &[0], &["max_steps=0"]), &root).unwrap();
    let dirs: Vec<String> = plan.manifest.runs.iter().map(|r| r.dir.clone()).collect();
    assert_eq!(dirs, ["lr=1e-3/seed=0", "lr=2e-3/seed=0", "lr=3e-3/seed=0"]);
    let run = |i: usize| RunDir::new(root.join(&dirs[i]));

    // Run 0 finished before; run 1 was interrupted after 2 of its 6 steps
    // (a checkpoint, no results); run 2 never started.
    classify::train(Start::New(&plan.configs[0]), &run(0), &mut Progress::silent()).unwrap();
    let mut interrupted: ExperimentConfig = plan.configs[1].clone();
    interrupted.max_steps = 2;
    classify::train(Start::New(&interrupted), &run(1), &mut Progress::silent()).unwrap();
    std::fs::remove_file(run(1).results()).unwrap();
    assert_eq!(Checkpoint::load(&run(1).latest()).unwrap().state.step, 2);
    let finished_before = std::fs::read(run(0).results()).unwrap();
    let mtime_before = std::fs::metadata(run(0).results()).unwrap().modified().unwrap();

    let summary = sweep::run(&plan, &in_process()).unwrap();
    let actions: Vec<Action> = summary.runs.iter().map(|r| r.action).collect();
    assert_eq!(actions, [Action::Skipped, Action::Resumed, Action::Started]);
    assert_eq!(summary.failed(), 0);

    // The finished run is untouched.
    assert_eq!(std::fs::read(run(0).results()).unwrap(), finished_before);
    assert_eq!(std::fs::metadata(run(0).results()).unwrap().modified().unwrap(), mtime_before);
    // The interrupted run continued from step 2 to the end, keeping its first steps.
    let resumed = &summary.runs[1];
    assert_eq!(resumed.exit_cause, Some(ExitCause::Completed));
    assert_eq!(resumed.steps, Some(6));
    assert_eq!(steps_column(&run(1)), (1..=6).collect::<Vec<u64>>());
    // The fresh run ran to the end.
    assert_eq!(summary.runs[2].steps, Some(6));
    assert!(run(2).results().exists());

    // The manifest and summary are on disk; a third invocation only skips.
    let manifest = sweep::Manifest::read(&root).unwrap().unwrap();
    assert_eq!(manifest.runs.len(), 3);
    assert_eq!(manifest.runs[1].cell_overrides, ["optim.lr=2e-3"]);
    assert!(root.join("summary.json").exists());
    let again = sweep::run(&plan, &in_process()).unwrap();
    assert!(again.runs.iter().all(|r| r.action == Action::Skipped));
    assert_eq!(again.runs[2].test_top1, summary.runs[2].test_top1);

    // The same folders planned with another setting are not taken for the new runs:
    // each is refused, naming the setting, and left as it was.
    let changed = spec(&["optim.lr=1e-3,2e-3,3e-3"], &[0], &["max_steps=0", "loss.label_smoothing=0.1"]);
    let replanned = sweep::plan(&changed, &root).unwrap();
    let refused = sweep::run(&replanned, &in_process()).unwrap();
    assert_eq!(refused.failed(), 3);
    let why = refused.runs[0].error.as_deref().unwrap();
    assert!(why.contains("loss.label_smoothing = 0.0 (now 0.1)") && why.contains("--out"), "{why}");
    assert_eq!(std::fs::read(run(0).results()).unwrap(), finished_before);
}

#[test]
fn an_exploding_run_and_a_failing_run_do_not_stop_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sweep");
    let spec = spec(&["data.path=synthetic,/nonexistent/dataset", "optim.lr=1e-3,1e4"], &[0], &["epochs=1"]);
    let plan = sweep::plan(&spec, &root).unwrap();
    let summary = sweep::run(&plan, &in_process()).unwrap();
    let by_dir = |d: &str| summary.runs.iter().find(|r| r.dir == d).unwrap_or_else(|| panic!("{d}"));

    let ok = by_dir("path=synthetic,lr=1e-3/seed=0");
    assert_eq!(ok.exit_cause, Some(ExitCause::Completed));
    let boom = by_dir("path=synthetic,lr=1e4/seed=0");
    assert_eq!(boom.exit_cause, Some(ExitCause::Exploded));
    assert!(boom.explosion_step.is_some());
    assert!(boom.error.is_none());

    // Both runs of the missing dataset failed, with the reason recorded.
    assert_eq!(summary.failed(), 2);
    let failed = by_dir("path=_nonexistent_dataset,lr=1e-3/seed=0");
    assert!(failed.error.as_ref().unwrap().contains("nonexistent"), "{failed:?}");
    let error_txt = root.join(&failed.dir).join("error.txt");
    assert!(std::fs::read_to_string(error_txt).unwrap().contains("nonexistent"));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("summary.json")).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 4);
    assert!(Path::new(&root.join(&boom.dir).join("results.json")).exists());
}

#[test]
fn the_report_of_a_sweep_tabulates_every_cell_and_draws_the_figures() {
    use vitlab::report::{self, Report};

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sweep");
    let spec = spec(
        &["model.block=vit,vit22b-nonorm", "optim.lr=1e-3,1e4"],
        &[0, 1],
        &["stabilizers.clip_grad_norm=0", "monitor.block_every=2"],
    );
    let plan = sweep::plan(&spec, &root).unwrap();
    let summary = sweep::run(&plan, &in_process()).unwrap();
    assert_eq!(summary.runs.len(), 8);
    assert_eq!(summary.failed(), 0);

    let runs = report::load_runs(std::slice::from_ref(&root)).unwrap();
    assert_eq!(runs.len(), 8);
    let r = Report::build("test sweep", runs, None).unwrap();
    assert_eq!(r.keys, ["model.block", "optim.lr"]);
    let labels: Vec<&str> = r.cells.iter().map(|c| c.label.as_str()).collect();
    // The sweep's cell names (config-derived ones, `block=vit, lr=0.001`, for runs of no sweep).
    assert_eq!(labels, ["block=vit,lr=1e-3", "block=vit,lr=1e4", "block=vit22b-nonorm,lr=1e-3", "block=vit22b-nonorm,lr=1e4"]);
    for c in &r.cells {
        assert_eq!(c.seeds, [0, 1], "{}", c.label);
        assert_eq!(c.top1.unwrap().n, 2);
        assert!(c.params.unwrap() > 0);
    }
    // lr = 1e4 explodes every seed; lr = 1e-3 never does.
    assert_eq!((r.cells[0].exploded, r.cells[1].exploded), (0, 2));
    assert_eq!(r.cells[3].exploded, 2);
    assert_eq!(r.cells[1].explosion_steps.len(), 2);
    // The default baseline is model.block=vit at the same learning rate.
    assert_eq!(r.baseline, [("model.block".to_string(), "vit".to_string())]);
    assert_eq!(r.cells[2].baseline.as_deref(), Some("block=vit,lr=1e-3"));
    assert!(r.cells[2].t_test.is_some() || r.cells[2].top1.unwrap().std == 0.0);
    assert!(r.cells[0].t_test.is_none());

    let out = dir.path().join("report");
    let written = r.write(&out).unwrap();
    for f in [
        "report.md",
        "report.html",
        "report.json",
        "figures/accuracy.png",
        "figures/accuracy.svg",
        "figures/stability.png",
        "figures/stability.svg",
        "figures/curves.png",
        "figures/blocks.png",
    ] {
        assert!(out.join(f).exists(), "{f} missing; wrote {written:?}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for c in &r.cells {
        assert!(md.contains(&format!("| {} | 2 |", c.label)), "accuracy row of {}:\n{md}", c.label);
    }
    assert!(md.contains("| block=vit,lr=1e4 | 2 / 2 |"), "{md}");
    assert!(md.contains("| block=vit,lr=1e-3 | 0 / 2 | - |"), "{md}");
    assert!(md.contains("![") && md.contains("figures/stability.png"));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<td>block=vit22b-nonorm,lr=1e-3</td>") && html.contains("figures/accuracy.png"));
    // PNGs are real images of the requested size.
    let png = image::open(out.join("figures/stability.png")).unwrap();
    assert_eq!((png.width(), png.height()), (1500, 620));

    // An explicit baseline (values normalised like the config's); runs found
    // without their sweep's manifest get labels from their configs.
    let runs: Vec<_> = report::load_runs(std::slice::from_ref(&root))
        .unwrap()
        .into_iter()
        .map(|mut r| {
            r.sweep_cell = None;
            r
        })
        .collect();
    let r2 = Report::build("t", runs.clone(), Some(report::parse_baseline("optim.lr=1e-3").unwrap())).unwrap();
    assert_eq!(r2.cells[1].label, "block=vit, lr=10000.0");
    assert_eq!(r2.cells[1].baseline.as_deref(), Some("block=vit, lr=0.001"));
    // Numbers match as numbers: `1e4` as written, `10000.0` in the config.
    let r3 = Report::build("t", runs.clone(), Some(report::parse_baseline("optim.lr=10000").unwrap())).unwrap();
    assert_eq!(r3.cells[0].baseline.as_deref(), Some("block=vit, lr=10000.0"));
    // A baseline that compares nothing is an error naming what would work, not a
    // report where every cell reads "baseline".
    let same = Report::build("t", runs.clone(), Some(report::parse_baseline("stabilizers.clip_grad_norm=0").unwrap()));
    let msg = same.unwrap_err().to_string();
    assert!(msg.contains("stabilizers.clip_grad_norm") && msg.contains("model.block, optim.lr"), "{msg}");
    let none = Report::build("t", runs, Some(report::parse_baseline("model.block=vit22b").unwrap()));
    let msg = none.unwrap_err().to_string();
    assert!(msg.contains("no cell has model.block=vit22b") && msg.contains("block=vit22b-nonorm, lr=0.001"), "{msg}");

    // A run that started but has no checkpoint yet is listed as unfinished; the same
    // seed reached twice in a cell is flagged.
    let src = root.join("block=vit,lr=1e-3/seed=0");
    let copy = root.join("extra/seed=0");
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["config.toml", "steps.csv"] {
        std::fs::copy(src.join(f), copy.join(f)).unwrap();
    }
    let runs = report::load_runs(std::slice::from_ref(&root)).unwrap();
    assert_eq!(runs.len(), 9);
    let r4 = Report::build("t", runs, None).unwrap();
    let cell = r4.cells.iter().find(|c| c.label == "block=vit, lr=0.001").unwrap();
    assert_eq!((cell.finished, cell.unfinished, cell.top1.unwrap().n), (2, 1, 2));
    assert!(r4.notes.iter().any(|n| n.contains("seed 0 more than once")), "{:?}", r4.notes);
    let out = dir.path().join("report4");
    r4.write(&out).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| block=vit, lr=0.001 | 2 (+1 unfinished) |"), "{md}");
}
