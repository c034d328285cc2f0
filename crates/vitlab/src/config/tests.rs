//! What a user of the config system relies on: `--set` reaches any key with the
//! value's TOML type, every mistake names its key, every shipped preset loads and
//! survives the round trip through a run's saved config.toml, and the checks
//! across sections refuse runs that would silently not do what they say.

use std::path::{Path, PathBuf};

use super::*;

/// A config from overrides alone, on the synthetic dataset (data.path is required).
fn load(overrides: &[&str]) -> Result<ExperimentConfig> {
    let overrides: Vec<String> = ["data.path=synthetic"].iter().chain(overrides).map(|s| s.to_string()).collect();
    ExperimentConfig::load(None, &overrides)
}

/// The error's config key (panics on anything but a config error).
fn field_of(e: Error) -> String {
    match e {
        Error::Config { field, .. } => field,
        other => panic!("expected a config error, got {other}"),
    }
}

fn presets() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn overrides_set_nested_keys_with_the_values_toml_type() {
    let c = load(&["optim.lr=3e-4", "model.block=vit22b", "augment.hflip=0", "model.qkv_bias=true", "seed=7"]).unwrap();
    assert_eq!(c.optim.lr, 3e-4);
    assert_eq!(c.model.block, crate::models::BlockVariant::Vit22b);
    assert_eq!(c.augment.hflip, 0.0, "an integer literal is accepted where a float is expected");
    assert_eq!(c.model.qkv_bias, Some(true));
    assert_eq!(c.seed, 7);
    // Arrays and quoted strings parse as TOML; anything else is a bare string.
    let mut t = toml::Table::new();
    set_key(&mut t, "optim.betas", "[0.9, 0.95]").unwrap();
    set_key(&mut t, "data.path", "some/folder").unwrap();
    set_key(&mut t, "schedule.name", "\"cosine\"").unwrap();
    let flat = flatten(&t);
    assert_eq!(flat["optim.betas"], "[0.9, 0.95]");
    assert_eq!(flat["data.path"], "some/folder");
    assert_eq!(flat["schedule.name"], "cosine");
}

#[test]
fn malformed_overrides_and_unknown_keys_are_errors_naming_the_key() {
    assert_eq!(field_of(parse_override("optim.lr").unwrap_err()), "optim.lr");
    assert_eq!(parse_override(" optim.lr = 1e-3 ").unwrap(), ("optim.lr".to_string(), "1e-3".to_string()));
    assert_eq!(field_of(load(&["optim..lr=1"]).unwrap_err()), "optim..lr");
    // A key below a value, not a section.
    let e = load(&["seed=1", "seed.x=2"]).unwrap_err();
    assert!(e.to_string().contains("seed is a value, not a section"), "{e}");
    // Unknown keys and wrong types name the full path.
    let e = load(&["optim.lrr=1"]).unwrap_err().to_string();
    assert!(e.contains("optim") && e.contains("lrr"), "{e}");
    let f = field_of(load(&["optim.lr=fast"]).unwrap_err());
    assert!(f.ends_with("optim.lr"), "{f}");
    let f = field_of(load(&["model.block=transformer"]).unwrap_err());
    assert!(f.ends_with("model.block"), "{f}");
}

#[test]
fn a_toml_file_is_read_and_overrides_win_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "epochs = 3\n[data]\npath = \"synthetic\"\n[optim]\nlr = 0.01\n").unwrap();
    let c = ExperimentConfig::load(Some(&path), &["optim.lr=0.002".to_string()]).unwrap();
    assert_eq!((c.epochs, c.optim.lr), (3, 0.002));
    // Bad TOML names the file; a missing file is an I/O error naming it.
    std::fs::write(&path, "epochs = = 3\n").unwrap();
    let e = ExperimentConfig::load(Some(&path), &[]).unwrap_err();
    assert!(field_of(e).contains("c.toml"));
    let missing = dir.path().join("missing.toml");
    let e = ExperimentConfig::load(Some(&missing), &[]).unwrap_err();
    assert!(matches!(&e, Error::Io { path, .. } if path == &missing), "{e}");
}

#[test]
fn every_shipped_preset_loads_and_round_trips_through_its_saved_toml() {
    let files = presets();
    assert!(files.len() >= 5, "configs/ holds the presets: {files:?}");
    for p in files {
        let c = ExperimentConfig::load(Some(&p), &[]).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let table: toml::Table = toml::from_str(&c.to_toml()).unwrap();
        let again = ExperimentConfig::from_table(table, "saved").unwrap();
        assert_eq!(c, again, "{}", p.display());
        assert_eq!(flatten_config(&c), flatten_config(&again));
    }
}

#[test]
fn the_flat_view_has_every_leaf_key_once_with_strings_unquoted() {
    let c = load(&["optim.lr=0.001", "data.path=data/x"]).unwrap();
    let flat = flatten_config(&c);
    assert_eq!(flat["optim.lr"], "0.001");
    assert_eq!(flat["data.path"], "data/x", "the later override wins");
    assert_eq!(flat["model.block"], "vit");
    assert!(flat.keys().all(|k| !k.is_empty() && !k.ends_with('.')));
    // `1e-3` and `0.001` are the same value in the flat view.
    assert_eq!(flatten_config(&load(&["optim.lr=1e-3"]).unwrap())["optim.lr"], "0.001");
}

#[test]
fn cross_section_checks_refuse_runs_that_would_not_do_what_they_say() {
    // A warmup that never ends within the run.
    let e = load(&["epochs=5", "schedule.warmup_epochs=5"]).unwrap_err();
    assert!(e.to_string().contains("--set schedule.warmup_epochs="), "{e}");
    assert_eq!(field_of(e), "schedule.warmup_epochs");
    // ... which the loop checks itself when max_steps bounds the run.
    assert!(load(&["epochs=5", "schedule.warmup_epochs=5", "max_steps=10"]).is_ok());
    for (set, key) in [
        (&["epochs=0"][..], "epochs"),
        (&["batch_size=0"], "batch_size"),
        (&["optim.lr=0"], "optim.lr"),
        (&["optim.lr=nan"], "optim.lr"),
        (&["loss.label_smoothing=1"], "loss.label_smoothing"),
        (&["data.path="], "data.path"),
        (&["model.drop_path=1"], "model.drop_path"),
        (&["ema.decay=1"], "ema.decay"),
        (&["ema.decay=0.99", "ema.min_decay=0.995"], "ema.min_decay"),
        (&["precision=bf16"], "precision"),
        (&["schedule.milestones=[0.5, 1.5]"], "schedule.milestones"),
        (&["schedule.name=linear", "schedule.decay_epochs=0"], "schedule.decay_epochs"),
        (&["schedule.name=linear", "epochs=10", "schedule.decay_epochs=11"], "schedule.decay_epochs"),
    ] {
        assert_eq!(field_of(load(set).unwrap_err()), key, "{set:?}");
    }
}

#[test]
fn a_cyclegan_run_refuses_classification_settings_and_checks_its_own() {
    let gan = |extra: &[&str]| {
        let mut set = vec!["task=cyclegan", "data.path=some/unpaired"];
        set.extend_from_slice(extra);
        load(&set)
    };
    assert!(gan(&[]).is_ok());
    for (set, key) in [
        ("augment.policy=autoaugment-cifar10", "augment.policy"),
        ("augment.erase_prob=0.25", "augment.erase_prob"),
        ("augment.mixup_alpha=1", "augment.mixup_alpha"),
        ("augment.repeats=3", "augment.repeats"),
        ("model.drop_path=0.1", "model.drop_path"),
        ("ema.decay=0.999", "ema.decay"),
        ("cyclegan.lambda_cycle=-1", "cyclegan.lambda_cycle"),
        ("cyclegan.load_size=16", "cyclegan.load_size"),
        ("cyclegan.sample_every=2", "cyclegan.sample_every"),
        ("data.path=synthetic", "data.path"),
    ] {
        assert_eq!(field_of(gan(&[set]).unwrap_err()), key, "{set}");
    }
}

#[test]
fn the_ema_decay_follows_timms_warmup_rule() {
    let e = EmaSection { decay: 0.9998, ..EmaSection::default() };
    assert_eq!(e.decay_at(1), 0.0, "the first update copies the weights");
    assert_eq!(e.decay_at(2), 0.9998);
    let w = EmaSection { decay: 0.9998, warmup: true, ..EmaSection::default() };
    // timm ModelEmaV3.get_decay: 1 - (1 + step / gamma) ** -power, step counted from 0.
    let want = 1.0 - (1.0f64 + 9.0).powf(-2.0 / 3.0);
    assert!((w.decay_at(10) - want).abs() < 1e-15);
    assert_eq!(w.decay_at(10_000_000), 0.9998, "capped at ema.decay");
    assert!(!EmaSection::default().enabled());
}
