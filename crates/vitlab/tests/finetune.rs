//! Fine-tuning from pretrained weights (`init.from`, `init.freeze`,
//! `optim.layer_decay`): what is loaded, resampled and reset, linear probing,
//! and the errors for weights that do not fit.

mod common;

use common::{assert_close, Fixture};
use vitlab::config::ExperimentConfig;
use vitlab::models::finetune::resample_pos_embed;
use vitlab::models::weights::{collect, read_safetensors, write_safetensors, HostTensor, TensorMap};
use vitlab::train::classify::{self, load_splits, Classifier, Start};
use vitlab::train::progress::Progress;
use vitlab::train::{Checkpoint, Observer, RunDir};

/// A small model on generated data; `size` px images, `classes` classes.
fn config(size: usize, classes: usize, extra: &[&str]) -> ExperimentConfig {
    let mut overrides: Vec<String> = vec![
        "data.path=synthetic".into(),
        "data.synthetic_train=128".into(),
        "data.synthetic_test=32".into(),
        format!("data.synthetic_size={size}"),
        format!("data.synthetic_classes={classes}"),
        "data.val_size=32".into(),
        "data.workers=2".into(),
        format!("model.image_size={size}"),
        "model.patch_size=4".into(),
        "model.depth=2".into(),
        "model.dim=32".into(),
        "model.mlp_dim=64".into(),
        "model.heads=4".into(),
        "epochs=1".into(),
        "batch_size=32".into(),
        "schedule.warmup_epochs=0".into(),
        "tensorboard=false".into(),
    ];
    overrides.extend(extra.iter().map(|s| s.to_string()));
    ExperimentConfig::load(None, &overrides).unwrap()
}

/// The messages of a run (the log lines a user sees).
struct Messages(Vec<String>);

impl Observer for Messages {
    fn start(&mut self, _: u64, _: u64) {}
    fn epoch(&mut self, _: usize, _: usize) {}
    fn step(&mut self, _: u64, _: f64, _: &[String], _: &[f64], _: f64) {}
    fn epoch_done(&mut self, _: usize, _: usize, _: &str, _: f64) {}
    fn message(&mut self, line: &str) {
        self.0.push(line.to_string());
    }
    fn finish(&mut self) {}
}

fn model_weights(run: &RunDir, group: &str) -> TensorMap {
    vitlab::models::weights::group(&Checkpoint::load(&run.latest()).unwrap().tensors, group)
}

/// Trains 1 epoch at 16 px on 10 classes (with a weight average); returns the run.
fn pretrain(dir: &std::path::Path) -> RunDir {
    let run = RunDir::new(dir.join("pretrain"));
    classify::train(Start::New(&config(16, 10, &["ema.decay=0.5"])), &run, &mut Progress::silent()).unwrap();
    run
}

#[test]
fn fine_tuning_at_another_size_and_class_count_keeps_the_blocks_resamples_positions_and_resets_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let pre = pretrain(dir.path());
    let ema = model_weights(&pre, "ema");

    let from = format!("init.from={}", pre.root.display());
    let cfg = config(32, 4, &[&from]);
    let splits = load_splits(&cfg).unwrap();
    let device = cfg.backend.device().unwrap();
    let mut task = Classifier::new(&cfg, &splits, &device).unwrap();
    let note = task.init_from(std::path::Path::new(&cfg.init.from)).unwrap();
    for part in ["weight average (EMA)", "from a 4x4 to a 8x8 patch grid", "head.bias, head.weight newly initialised"] {
        assert!(note.contains(part), "{part:?} in {note}");
    }
    let got = collect(&task.model);
    for (key, t) in &got {
        match key.as_str() {
            "pos_embed" => assert_eq!(t, &resample_pos_embed(&ema["pos_embed"], 4, 8, 1)),
            "head.weight" => assert_eq!(t.shape, [4, 32]),
            "head.bias" => assert_eq!(t.shape, [4]),
            _ => assert_eq!(t, &ema[key], "{key} is the pretrained EMA's"),
        }
    }

    // End to end: the run trains from them and says so.
    let run = RunDir::new(dir.path().join("finetune"));
    let mut log = Messages(Vec::new());
    let r = classify::train(Start::New(&cfg), &run, &mut log).unwrap();
    assert_eq!(r.classes.len(), 4);
    assert!(log.0.iter().any(|m| m.contains("position embeddings resampled")), "{:?}", log.0);
}

#[test]
fn linear_probing_trains_the_head_only() {
    let dir = tempfile::tempdir().unwrap();
    let pre = pretrain(dir.path());
    let loaded = model_weights(&pre, "ema");
    let run = RunDir::new(dir.path().join("probe"));
    let from = format!("init.from={}", pre.root.display());
    let cfg = config(16, 3, &[&from, "init.freeze=true", "optim.lr=0.01"]);
    classify::train(Start::New(&cfg), &run, &mut Progress::silent()).unwrap();
    let trained = model_weights(&run, "model");
    let mut changed = Vec::new();
    for (key, t) in &trained {
        if key.starts_with("head.") {
            changed.push(key.clone());
        } else {
            assert_eq!(t, &loaded[key], "{key} is frozen");
        }
    }
    assert_eq!(changed, ["head.bias", "head.weight"]);
    // The head did train (its initial weights are the seeded model's).
    let fresh = Classifier::new(&cfg, &load_splits(&cfg).unwrap(), &cfg.backend.device().unwrap()).unwrap();
    assert_ne!(collect(&fresh.model)["head.weight"], trained["head.weight"]);
}

#[test]
fn timm_weights_fine_tune_at_another_grid_and_class_count() {
    let f = Fixture::load("timm_vit");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timm.safetensors");
    write_safetensors(&path, &f.group("param"), Default::default()).unwrap();
    // The fixture is timm's ViT at 32 px / patch 4 (8x8), width 64, depth 2, 10 classes.
    let from = format!("init.from={}", path.display());
    let cfg = config(16, 4, &[&from, "model.dim=64", "model.mlp_dim=128", "model.qkv_bias=true"]);
    let splits = load_splits(&cfg).unwrap();
    let mut task = Classifier::new(&cfg, &splits, &cfg.backend.device().unwrap()).unwrap();
    let note = task.init_from(&path).unwrap();
    assert!(note.contains("timm weights") && note.contains("from a 8x8 to a 4x4"), "{note}");
    let got = collect(&task.model);
    let pos = f.get("param.pos_embed");
    assert_close("pos_embed", &got["pos_embed"], &resample_pos_embed(pos, 8, 4, 1), 0.0);
    assert_eq!(got["blocks.1.mlp.fc2.bias"], *f.get("param.blocks.1.mlp.fc2.bias"));

    // A model it does not fit: every key that differs is listed in one error.
    let cfg = config(16, 4, &[&from, "model.dim=32", "model.depth=3"]);
    let mut task = Classifier::new(&cfg, &load_splits(&cfg).unwrap(), &cfg.backend.device().unwrap()).unwrap();
    let e = task.init_from(&path).unwrap_err().to_string();
    for part in
        ["timm.safetensors", "blocks.0.attn.qkv.weight: shape [192, 64], the model's [96, 32]", "blocks.2.norm1.weight: missing"]
    {
        assert!(e.contains(part), "{part:?} in {e}");
    }
}

#[test]
fn bad_fine_tuning_settings_are_errors_naming_the_key() {
    let err = |extra: &[&str]| {
        let overrides: Vec<String> = ["data.path=synthetic"].iter().chain(extra).map(|s| s.to_string()).collect();
        ExperimentConfig::load(None, &overrides).unwrap_err().to_string()
    };
    for bad in ["optim.layer_decay=0", "optim.layer_decay=1.5", "optim.layer_decay=-0.1"] {
        let e = err(&[bad]);
        assert!(e.contains("optim.layer_decay") && e.contains("(0, 1]"), "{bad}: {e}");
    }
    assert!(err(&["init.freeze=true"]).contains("init.freeze"));
    assert!(err(&["init.from=x", "init.freeze=true", "model.drop_path=0.1"]).contains("model.drop_path"));

    let cfg = config(16, 4, &["init.from=/nonexistent/weights.safetensors"]);
    let run = tempfile::tempdir().unwrap();
    let e =
        classify::train(Start::New(&cfg), &RunDir::new(run.path().join("r")), &mut Progress::silent()).unwrap_err().to_string();
    assert!(e.contains("init.from") && e.contains("/nonexistent/weights.safetensors"), "{e}");
    // A file that is not weights: named, with what was expected.
    let junk = run.path().join("notes.txt");
    std::fs::write(&junk, "not weights").unwrap();
    let cfg = config(16, 4, &[&format!("init.from={}", junk.display())]);
    let e =
        classify::train(Start::New(&cfg), &RunDir::new(run.path().join("s")), &mut Progress::silent()).unwrap_err().to_string();
    assert!(e.contains("notes.txt"), "{e}");
}

#[test]
fn position_embeddings_resample_as_timm() {
    // tools/make_finetune_fixtures.py: timm's resample_abs_pos_embed (bicubic, antialias).
    let (t, meta) = read_safetensors(&common::fixture_path("finetune_pos_embed.safetensors")).unwrap();
    let cases: Vec<(String, usize, usize, usize)> = serde_json::from_str(&meta["cases"]).unwrap();
    assert_eq!(cases.len(), 4);
    for (name, old, new, prefix) in cases {
        let got: HostTensor = resample_pos_embed(&t[&format!("{name}.input")], old, new, prefix);
        assert_close(&name, &got, &t[&format!("{name}.output")], 1e-5);
    }
}
