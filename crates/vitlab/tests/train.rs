//! Training behaviour users rely on: exact resumption, explosion stops with a
//! usable last-good checkpoint, and checkpoints that survive a crash mid-write.

use vitlab::config::ExperimentConfig;
use vitlab::models::weights::{read_safetensors, TensorMap};
use vitlab::train::classify::{self, Start};
use vitlab::train::progress::Progress;
use vitlab::train::{Checkpoint, ExitCause, RunDir};

/// A small, fast experiment on generated data: 192 train images, 6 batches/epoch.
fn tiny_config(extra: &[&str]) -> ExperimentConfig {
    let mut overrides: Vec<String> = [
        "data.path=synthetic",
        "data.synthetic_train=256",
        "data.synthetic_test=64",
        "data.synthetic_size=16",
        "data.val_size=64",
        "data.workers=2",
        "model.image_size=16",
        "model.patch_size=4",
        "model.depth=2",
        "model.dim=32",
        "model.mlp_dim=64",
        "model.heads=4",
        "epochs=2",
        "batch_size=32",
        "schedule.name=cosine",
        "schedule.warmup_epochs=0.5",
        "stabilizers.clip_grad_norm=1.0",
        "loss.label_smoothing=0.1",
        "monitor.block_every=2",
        "checkpoint.every_steps=2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    overrides.extend(extra.iter().map(|s| s.to_string()));
    ExperimentConfig::load(None, &overrides).unwrap()
}

fn model_tensors(path: &std::path::Path) -> TensorMap {
    read_safetensors(path).unwrap().0
}

/// CSV rows without the timing columns (seconds, images/s), which differ run to run.
fn metrics_without_timing(run: &RunDir) -> Vec<String> {
    std::fs::read_to_string(run.metrics()).unwrap().lines().map(|l| l.split(',').take(7).collect::<Vec<_>>().join(",")).collect()
}

#[test]
fn a_stopped_and_resumed_run_equals_an_uninterrupted_one() {
    resumes_exactly(&[]);
}

/// The strong recipe's every piece on: the policy, random erasing, Mixup/CutMix,
/// repeated augmentation, stochastic depth and the weight average.
const STRONG: &[&str] = &[
    "augment.policy=autoaugment-cifar10",
    "augment.erase_prob=0.5",
    "augment.erase_mode=value",
    "augment.erase_value=[0.4914, 0.4822, 0.4465]",
    "augment.erase_variant=lee",
    "augment.mixup_alpha=1.0",
    "augment.cutmix_alpha=1.0",
    "augment.mix_prob=0.8",
    "augment.mix_partner=permutation",
    "augment.repeats=3",
    "model.drop_path=0.2",
    "ema.decay=0.9",
    "ema.warmup=true",
];

#[test]
fn a_stopped_and_resumed_strong_recipe_run_equals_an_uninterrupted_one() {
    let (whole, _dir) = resumes_exactly(STRONG);
    // The average is in the checkpoint, selects `best`, and results.json says so.
    let ck = Checkpoint::load(&whole.latest()).unwrap();
    assert!(ck.tensors.keys().any(|k| k.starts_with("ema.")));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(whole.results()).unwrap()).unwrap();
    assert_eq!(json["test_weights"], "ema");
    assert!(json["test_model"]["top1"].is_number(), "{json}");
    let header = std::fs::read_to_string(whole.metrics()).unwrap();
    assert!(header.lines().next().unwrap().contains("val_loss,val_acc,model_val_loss,model_val_acc,lr"), "{header}");
}

/// Trains the tiny config with `extra` whole, and again stopped at step 5 and
/// resumed; asserts both end identical and returns the whole run.
fn resumes_exactly(extra: &[&str]) -> (RunDir, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let whole = RunDir::new(dir.path().join("whole"));
    let parts = RunDir::new(dir.path().join("parts"));

    let config = tiny_config(extra);
    let a = classify::train(Start::New(&config), &whole, &mut Progress::silent()).unwrap();
    assert_eq!(a.exit_cause, ExitCause::Completed);
    assert_eq!(a.steps, 12);

    // Stop mid-epoch (step 5 of 6), then resume to the end.
    let first = tiny_config(&[extra, &["max_steps=5"]].concat());
    let b1 = classify::train(Start::New(&first), &parts, &mut Progress::silent()).unwrap();
    assert_eq!(b1.exit_cause, ExitCause::MaxSteps);
    assert_eq!(b1.steps, 5);
    let ck = Checkpoint::load(&parts.latest()).unwrap();
    assert_eq!((ck.state.epoch, ck.state.batch, ck.state.step), (0, 5, 5));
    let b = classify::train(Start::Resume(&["max_steps=0".to_string()]), &parts, &mut Progress::silent()).unwrap();
    assert_eq!(b.exit_cause, ExitCause::Completed);
    assert_eq!(b.steps, 12);

    // Identical weights and optimiser state, per-step monitors and epoch metrics.
    let (w, p) = (model_tensors(&whole.latest()), model_tensors(&parts.latest()));
    assert_eq!(w.keys().collect::<Vec<_>>(), p.keys().collect::<Vec<_>>());
    let differing: Vec<String> = w
        .iter()
        .filter(|(k, t)| p[*k] != **t)
        .map(|(k, t)| {
            let d = t.data.iter().zip(&p[k].data).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            format!("{k} (max |diff| {d:e})")
        })
        .collect();
    assert!(differing.is_empty(), "tensors differ after resume: {differing:?}");
    assert_eq!(std::fs::read_to_string(whole.steps()).unwrap(), std::fs::read_to_string(parts.steps()).unwrap());
    assert_eq!(std::fs::read_to_string(whole.blocks()).unwrap(), std::fs::read_to_string(parts.blocks()).unwrap());
    assert_eq!(metrics_without_timing(&whole), metrics_without_timing(&parts));
    assert_eq!(a.test, b.test);
    assert_eq!(a.best_val_acc, b.best_val_acc);
    // TensorBoard shows the same curves: the resumed session's file starts past the
    // checkpoint, and what the interrupted one logged up to there is kept.
    for tag in ["step/loss", "step/lr", "train/train_loss", "val/val_acc", "blocks/act_rms/0"] {
        let (w, p) = (tensorboard_scalars(&whole, tag), tensorboard_scalars(&parts, tag));
        assert!(!w.is_empty(), "{tag} is logged");
        assert_eq!(w, p, "{tag}");
    }
    assert_eq!(tensorboard_scalars(&whole, "step/loss").len(), 12);
    (whole, dir)
}

/// `(step, value)` of one scalar over a run's event files in the order TensorBoard
/// reads them, with its purge: `SessionLog.START` at step S drops the earlier events
/// at S or later.
fn tensorboard_scalars(run: &RunDir, tag: &str) -> Vec<(i64, f32)> {
    use vitlab::train::tensorboard::{read_events, Kind, What};
    let mut files: Vec<_> = std::fs::read_dir(run.tensorboard()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut out: Vec<(i64, f32)> = Vec::new();
    for f in files {
        for e in read_events(&f).unwrap() {
            match e.what {
                Some(What::SessionLog(l)) if l.status == 1 => out.retain(|(s, _)| *s < e.step),
                Some(What::Summary(s)) => out.extend(s.value.iter().filter(|v| v.tag == tag).filter_map(|v| match v.kind {
                    Some(Kind::SimpleValue(x)) => Some((e.step, x)),
                    _ => None,
                })),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn a_diverging_run_stops_with_the_cause_and_a_loadable_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path().join("boom"));
    let config = tiny_config(&["optim.lr=1e4", "stabilizers.clip_grad_norm=0", "checkpoint.every_steps=1"]);
    let r = classify::train(Start::New(&config), &run, &mut Progress::silent()).unwrap();
    assert_eq!(r.exit_cause, ExitCause::Exploded);
    let e = r.explosion.clone().expect("explosion recorded");
    assert!(e.step >= 2, "{e:?}");
    assert!(e.cause.contains("max logit") || e.cause.contains("non-finite") || e.cause.contains("gradient"), "{e:?}");

    // results.json records it.
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run.results()).unwrap()).unwrap();
    assert_eq!(json["exit_cause"], "exploded");
    assert_eq!(json["explosion"]["step"], e.step);

    // The latest checkpoint is the state after the last good step, loadable and finite.
    let ck = Checkpoint::load(&run.latest()).unwrap();
    assert_eq!(ck.state.step, e.step - 1);
    assert!(ck.tensors.values().all(|t| t.data.iter().all(|v| v.is_finite())));
    let (model, _) = classify::load_model(&run.latest(), &burn::tensor::Device::flex()).unwrap();
    assert_eq!(model.blocks.len(), 2);

    // The steps file shows the explosion step's monitors.
    let steps = std::fs::read_to_string(run.steps()).unwrap();
    let last = steps.lines().last().unwrap();
    assert!(last.starts_with(&format!("{},", e.step)), "{last}");
}

#[test]
fn resuming_a_finished_run_with_more_epochs_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path().join("more"));
    let config = tiny_config(&["epochs=1", "schedule.name=constant"]);
    let r1 = classify::train(Start::New(&config), &run, &mut Progress::silent()).unwrap();
    assert_eq!((r1.epochs, r1.steps), (1, 6));
    let r2 = classify::train(Start::Resume(&["epochs=2".to_string()]), &run, &mut Progress::silent()).unwrap();
    assert_eq!((r2.epochs, r2.steps), (2, 12));
    let rows = std::fs::read_to_string(run.metrics()).unwrap();
    assert_eq!(rows.lines().count(), 3, "header + 2 epochs:\n{rows}");
}

#[test]
fn a_stale_temporary_file_from_a_crash_does_not_hide_the_checkpoint() {
    // A crash during a checkpoint write leaves a partial temporary file beside
    // the previous, complete checkpoint.
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path().join("crash"));
    let config = tiny_config(&["epochs=1"]);
    classify::train(Start::New(&config), &run, &mut Progress::silent()).unwrap();
    let before = model_tensors(&run.latest());
    let partial = run.checkpoints().join(".latest.safetensors.tmp-99999");
    let bytes = std::fs::read(run.latest()).unwrap();
    std::fs::write(&partial, &bytes[..bytes.len() / 3]).unwrap();
    assert_eq!(model_tensors(&run.latest()), before);
    let r = classify::train(Start::Resume(&["epochs=2".to_string()]), &run, &mut Progress::silent()).unwrap();
    assert_eq!(r.epochs, 2);
}

#[test]
fn early_stopping_ends_a_run_that_stops_improving_and_keeps_its_best_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path().join("patience"));
    // A learning rate too small to change any prediction: validation accuracy never
    // improves on epoch 1, so patience 2 stops the run after epoch 3 of 6.
    let config = tiny_config(&["epochs=6", "patience=2", "optim.lr=1e-12", "schedule.name=constant", "schedule.warmup_epochs=0"]);
    let r = classify::train(Start::New(&config), &run, &mut Progress::silent()).unwrap();
    assert_eq!(r.exit_cause, ExitCause::EarlyStopped);
    assert_eq!((r.epochs, r.steps, r.best_epoch), (3, 18, Some(1)));
    let rows = std::fs::read_to_string(run.metrics()).unwrap();
    assert_eq!(rows.lines().count(), 4, "header + 3 epochs:\n{rows}");
    assert_eq!(Checkpoint::load(&run.best()).unwrap().state.best_epoch, Some(1));
}
