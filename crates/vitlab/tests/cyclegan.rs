//! The CycleGAN trainer as its users rely on it: a resumed run equals an
//! uninterrupted one (networks, optimisers, history pools, losses), FID_A / FID_B
//! in metrics.csv when the FID weights are there and the reason when not, sample
//! grids, `translate`, and clear errors for bad configs and data.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use vitlab::config::ExperimentConfig;
use vitlab::models::inception::FidInception;
use vitlab::models::weights::{read_safetensors, write_safetensors};
use vitlab::train::cyclegan::{load_generator, translate_files, translate_page, Direction, PageInfo};
use vitlab::train::progress::Progress;
use vitlab::train::{train, Checkpoint, ExitCause, Outcome, RunDir, Start};

mod common;
use common::unpaired;

fn config(data: &Path, extra: &[&str]) -> ExperimentConfig {
    let mut o: Vec<String> = [
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
        "optim.betas=[0.5, 0.999]",
        "optim.weight_decay=0.0",
        "schedule.name=linear",
        "schedule.decay_epochs=1",
        "cyclegan.discriminator=released",
        "cyclegan.refiner_width=4",
        "cyclegan.load_size=28",
        "cyclegan.pool_size=3",
        "cyclegan.samples=2",
        "cyclegan.sample_every=0.5",
        "cyclegan.fid_every=0",
        "checkpoint.every_steps=1",
        "monitor.block_every=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    o.push(format!("data.path={}", data.display()));
    o.extend(extra.iter().map(|s| s.to_string()));
    ExperimentConfig::load(None, &o).unwrap()
}

fn cyclegan(o: Outcome) -> vitlab::train::cyclegan::Results {
    match o {
        Outcome::Cyclegan(r) => r,
        Outcome::Classify(_) => panic!("a classification outcome"),
    }
}

/// metrics.csv without the timing columns (seconds, images/s).
/// metrics.csv without the timing columns (seconds, images/s), which differ run to run.
fn metrics_without_timing(run: &RunDir) -> Vec<String> {
    let text = std::fs::read_to_string(run.metrics()).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let timing = |i: usize| matches!(header.get(i), Some(&"seconds") | Some(&"images_per_s"));
    text.lines()
        .map(|l| l.split(',').enumerate().filter(|(i, _)| !timing(*i)).map(|(_, v)| v).collect::<Vec<_>>().join(","))
        .collect()
}

#[test]
fn a_stopped_and_resumed_cyclegan_run_equals_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = unpaired(dir.path(), 6, 2);
    let whole = RunDir::new(dir.path().join("whole"));
    let parts = RunDir::new(dir.path().join("parts"));
    let c = config(&data, &[]);
    let a = cyclegan(train(Start::New(&c), &whole, &mut Progress::silent()).unwrap());
    assert_eq!((a.exit_cause, a.epochs, a.steps), (ExitCause::Completed, 2, 6));

    // Stop mid-epoch (after step 4 of 6), then resume to the end.
    let first = config(&data, &["max_steps=4"]);
    let b1 = cyclegan(train(Start::New(&first), &parts, &mut Progress::silent()).unwrap());
    assert_eq!((b1.exit_cause, b1.steps), (ExitCause::MaxSteps, 4));
    let b = cyclegan(train(Start::Resume(&["max_steps=0".to_string()]), &parts, &mut Progress::silent()).unwrap());
    assert_eq!((b.exit_cause, b.steps), (ExitCause::Completed, 6));

    // Every tensor of the checkpoint: both generators, both discriminators, the four
    // optimisers and the two history pools.
    let (w, p) = (read_safetensors(&whole.latest()).unwrap().0, read_safetensors(&parts.latest()).unwrap().0);
    assert_eq!(w.keys().collect::<Vec<_>>(), p.keys().collect::<Vec<_>>());
    for prefix in ["g_a.", "g_b.", "d_a.", "d_b.", "optim_g_a.", "optim_d_b.", "pool_a.images", "pool_b.rng"] {
        assert!(w.keys().any(|k| k.starts_with(prefix)), "no {prefix} in the checkpoint");
    }
    let differing: Vec<&String> = w.iter().filter(|(k, t)| p[*k] != **t).map(|(k, _)| k).collect();
    assert!(differing.is_empty(), "tensors differ after resume: {differing:?}");
    assert_eq!(std::fs::read_to_string(whole.steps()).unwrap(), std::fs::read_to_string(parts.steps()).unwrap());
    assert_eq!(metrics_without_timing(&whole), metrics_without_timing(&parts));

    // The loss columns as pytorch-CycleGAN names them, finite; the linear decay in the last epoch.
    let steps = std::fs::read_to_string(whole.steps()).unwrap();
    let header: Vec<&str> = steps.lines().next().unwrap().split(',').collect();
    for col in ["D_A", "D_B", "G_A", "G_B", "cycle_A", "cycle_B", "idt_A", "idt_B", "max_grad_G_A", "max_grad_D_B", "lr"] {
        assert!(header.contains(&col), "{header:?}");
    }
    let lr_col = header.iter().position(|h| *h == "lr").unwrap();
    let lrs: Vec<f64> = steps.lines().skip(1).map(|l| l.split(',').nth(lr_col).unwrap().parse().unwrap()).collect();
    assert_eq!(lrs.len(), 6);
    assert!(lrs[..3].iter().all(|&v| (v - 2e-4).abs() < 1e-12) && lrs[3..].iter().all(|&v| (v - 1e-4).abs() < 1e-12), "{lrs:?}");
    for line in steps.lines().skip(1) {
        assert!(line.split(',').skip(2).all(|v| v.parse::<f64>().unwrap().is_finite()), "{line}");
    }

    // Sample grids every half of the run: 2 columns of 24 px ... 6 columns.
    let samples: Vec<String> = std::fs::read_dir(whole.root.join("samples"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        samples.contains(&"step_0000003.png".to_string()) && samples.contains(&"step_0000006.png".to_string()),
        "{samples:?}"
    );
    let grid = image::open(whole.root.join("samples/step_0000006.png")).unwrap();
    assert_eq!((grid.width(), grid.height()), (6 * 24 + 7 * 2, 2 * 24 + 3 * 2));

    // No FID: the columns are empty and results.json says why.
    assert!(a.fid_a.is_none() && a.fid_note.as_deref() == Some("cyclegan.fid_every = 0"), "{:?}", a.fid_note);
}

#[test]
fn fid_is_measured_each_epoch_when_the_weights_are_there_and_the_reason_recorded_when_not() {
    let dir = tempfile::tempdir().unwrap();
    let data = unpaired(dir.path(), 4, 66);
    // The FID network with stand-in weights: the numbers are not the real FID, the plumbing is.
    let weights = dir.path().join("standin.safetensors");
    let (_, map) = FidInception::deterministic_with_state_dict(&Device::flex());
    write_safetensors(&weights, &map, HashMap::new()).unwrap();
    let w = format!("cyclegan.fid_weights={}", weights.display());
    let run = RunDir::new(dir.path().join("fid"));
    let c = config(&data, &["cyclegan.fid_every=1", &w, "cyclegan.fid_feature=64", "cyclegan.sample_every=0"]);
    let r = cyclegan(train(Start::New(&c), &run, &mut Progress::silent()).unwrap());
    let (fa, fb) = (r.fid_a.unwrap(), r.fid_b.unwrap());
    assert!(fa.is_finite() && fb.is_finite() && fa > 0.0 && fb > 0.0, "{fa} {fb}");
    assert!(r.fid_note.is_none());
    let metrics = std::fs::read_to_string(run.metrics()).unwrap();
    let header: Vec<&str> = metrics.lines().next().unwrap().split(',').collect();
    let (ia, ib) = (header.iter().position(|h| *h == "FID_A").unwrap(), header.iter().position(|h| *h == "FID_B").unwrap());
    for line in metrics.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        assert!(f[ia].parse::<f64>().unwrap() > 0.0 && f[ib].parse::<f64>().unwrap() > 0.0, "{line}");
    }
    let last: Vec<&str> = metrics.lines().last().unwrap().split(',').collect();
    assert!((last[ia].parse::<f64>().unwrap() - fa).abs() <= 1e-5 * fa, "{metrics}");
    // The best checkpoint is the epoch of the lowest FID_A + FID_B.
    let best = Checkpoint::load(&run.best()).unwrap();
    assert_eq!(best.state.best_epoch, r.best_epoch);
    assert!(r.best_fid_sum.unwrap() <= fa + fb + 1e-9);

    // Weights that are not there: training goes on, the columns stay empty, the reason is kept.
    let run = RunDir::new(dir.path().join("nofid"));
    let c = config(
        &data,
        &["cyclegan.fid_every=1", "cyclegan.fid_weights=/nonexistent/fid.safetensors", "epochs=1", "schedule.decay_epochs=1"],
    );
    let r = cyclegan(train(Start::New(&c), &run, &mut Progress::silent()).unwrap());
    assert!(r.fid_a.is_none());
    assert!(r.fid_note.as_deref().unwrap().contains("/nonexistent/fid.safetensors"), "{:?}", r.fid_note);
    let text = std::fs::read_to_string(run.metrics()).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = text.lines().last().unwrap().split(',').collect();
    let fid: Vec<&str> = ["FID_A", "FID_B"].iter().map(|c| row[header.iter().position(|h| h == c).unwrap()]).collect();
    assert_eq!(fid, ["", ""], "empty FID columns: {text}");
    assert!(run.best().exists(), "without validation, best is the latest state");
}

/// Every sample grid of a CycleGAN run is also a TensorBoard image, with the PNG's own size.
fn sample_grids_are_tensorboard_images(run: &RunDir) {
    let tb: Vec<_> = std::fs::read_dir(run.tensorboard()).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(tb.len(), 1);
    let images: Vec<(i32, i32, usize)> = vitlab::train::tensorboard::read_events(&tb[0])
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.what {
            Some(vitlab::train::tensorboard::What::Summary(s)) => Some(s.value),
            _ => None,
        })
        .flatten()
        .filter(|v| v.tag == "samples")
        .filter_map(|v| match v.kind {
            Some(vitlab::train::tensorboard::Kind::Image(i)) => Some((i.width, i.height, i.encoded_image_string.len())),
            _ => None,
        })
        .collect();
    let grids: Vec<_> = std::fs::read_dir(run.root.join("samples")).unwrap().collect();
    assert!(!images.is_empty() && images.len() == grids.len(), "{} images for {} grids", images.len(), grids.len());
    let first = image::open(grids[0].as_ref().unwrap().path()).unwrap();
    assert!(images.iter().all(|&(w, h, n)| (w as u32, h as u32) == (first.width(), first.height()) && n > 0));
}

#[test]
fn translate_writes_pngs_named_like_the_inputs_and_refuses_a_classifier() {
    let dir = tempfile::tempdir().unwrap();
    let data = unpaired(dir.path(), 4, 2);
    let run = RunDir::new(dir.path().join("run"));
    let c = config(&data, &["epochs=1", "schedule.decay_epochs=1"]);
    cyclegan(train(Start::New(&c), &run, &mut Progress::silent()).unwrap());
    sample_grids_are_tensorboard_images(&run);

    let device = Device::flex();
    let (g, gc, from) = load_generator(&run.root, Direction::AToB, &device).unwrap();
    assert_eq!(from, run.best());
    let inputs: Vec<PathBuf> = ["000", "001"].iter().map(|n| data.join(format!("testA/{n}.png"))).collect();
    let out = dir.path().join("out");
    let written = translate_files(&g, &gc, &inputs, &out, Some(40), &device).unwrap();
    assert_eq!(written, vec![out.join("000.png"), out.join("001.png")]);
    let img = image::open(&written[0]).unwrap();
    assert_eq!((img.width(), img.height()), (40, 40));
    // The two directions are different networks.
    let (g_b, _, _) = load_generator(&run.root, Direction::BToA, &device).unwrap();
    let out_b = dir.path().join("out_b");
    translate_files(&g_b, &gc, &inputs[..1], &out_b, None, &device).unwrap();
    assert_ne!(
        image::open(out_b.join("000.png")).unwrap().to_rgb8().into_raw(),
        image::open(out.join("000.png"))
            .unwrap()
            .resize_exact(24, 24, image::imageops::FilterType::Triangle)
            .to_rgb8()
            .into_raw()
    );

    // The test page: input, translation, and its reconstruction by the other generator,
    // for inputs named with several dots and characters a URL must escape.
    let named: Vec<PathBuf> = ["cat.4001.png", "cat 4002#.png"].iter().map(|n| dir.path().join(n)).collect();
    for (src, dst) in inputs.iter().zip(&named) {
        std::fs::copy(src, dst).unwrap();
    }
    let page_dir = dir.path().join("page_out");
    let info = PageInfo { checkpoint: &from, direction: Direction::AToB };
    let index = translate_page(&g, &g_b, &gc, &named, &page_dir, None, info, &device).unwrap();
    let html = std::fs::read_to_string(&index).unwrap();
    assert_eq!(html.matches("<tr><td>").count(), 2, "{html}");
    for (name, url) in [("cat.4001", "cat.4001"), ("cat 4002#", "cat%204002%23")] {
        assert!(
            html.contains(&format!("src=\"{url}.png\"")) && html.contains(&format!("src=\"page/{url}.input.png\"")),
            "{html}"
        );
        for f in [format!("{name}.png"), format!("page/{name}.input.png"), format!("page/{name}.reconstruction.png")] {
            assert_eq!(image::open(page_dir.join(&f)).unwrap().width(), 24, "{f}");
        }
    }
    // The reconstruction is G_B of the translation G_A(x), and the page's translation
    // is the one translate_files writes.
    assert_eq!(std::fs::read(page_dir.join("cat.4001.png")).unwrap(), {
        let o = dir.path().join("plain");
        translate_files(&g, &gc, &named[..1], &o, None, &device).unwrap();
        std::fs::read(o.join("cat.4001.png")).unwrap()
    });
    let fake_b = page_dir.join("cat.4001.png");
    let rec = dir.path().join("rec");
    translate_files(&g_b, &gc, &[fake_b], &rec, None, &device).unwrap();
    let (a, b) = (
        image::open(rec.join("cat.4001.png")).unwrap().to_rgb8().into_raw(),
        image::open(page_dir.join("page/cat.4001.reconstruction.png")).unwrap().to_rgb8().into_raw(),
    );
    // The page feeds the unquantised translation to G_B; a PNG round trip moves pixels by a step or two.
    let worst = a.iter().zip(&b).map(|(x, y)| x.abs_diff(*y)).max().unwrap();
    assert!(worst <= 8, "reconstruction differs by {worst}");

    // Two inputs that would write one file.
    let jpg = dir.path().join("000.jpg");
    image::open(&inputs[0]).unwrap().save(&jpg).unwrap();
    let e = translate_files(&g, &gc, &[inputs[0].clone(), jpg.clone()], &out, None, &device).unwrap_err().to_string();
    assert!(e.contains("000.jpg") && e.contains("000.png"), "{e}");

    // A classification run is not a generator.
    let cls = RunDir::new(dir.path().join("cls"));
    let cc = ExperimentConfig::load(
        None,
        &[
            "data.path=synthetic",
            "data.synthetic_train=64",
            "data.synthetic_test=16",
            "data.synthetic_size=8",
            "data.val_size=0",
            "model.image_size=8",
            "model.patch_size=4",
            "model.depth=1",
            "model.dim=8",
            "model.mlp_dim=8",
            "model.heads=2",
            "epochs=1",
            "batch_size=32",
        ]
        .map(String::from),
    )
    .unwrap();
    train(Start::New(&cc), &cls, &mut Progress::silent()).unwrap();
    let e = load_generator(&cls.root, Direction::AToB, &device).err().unwrap().to_string();
    assert!(e.contains("classification checkpoint") && e.contains("best.safetensors"), "{e}");
}

#[test]
fn bad_cyclegan_configs_and_data_are_errors_naming_the_key_or_path() {
    let dir = tempfile::tempdir().unwrap();
    let data = unpaired(dir.path(), 4, 2);
    let err = |extra: &[&str]| {
        let mut o = vec!["task=cyclegan".to_string(), format!("data.path={}", data.display()), "schedule.name=linear".into()];
        o.extend(extra.iter().map(|s| s.to_string()));
        ExperimentConfig::load(None, &o).unwrap_err().to_string()
    };
    let e = err(&["epochs=2", "schedule.decay_epochs=3"]);
    assert!(e.contains("schedule.decay_epochs") && e.contains("epochs = 2"), "{e}");
    let e = err(&["schedule.decay_epochs=1", "cyclegan.load_size=16", "model.image_size=24"]);
    assert!(e.contains("cyclegan.load_size"), "{e}");
    let e = err(&["schedule.decay_epochs=1", "cyclegan.fid_feature=100"]);
    assert!(e.contains("cyclegan.fid_feature"), "{e}");
    let e = err(&["schedule.decay_epochs=1", "cyclegan.discriminatr=released"]);
    assert!(e.contains("discriminatr"), "{e}");

    // A labelled dataset is not an unpaired one; a folder without trainB/ is incomplete.
    let folder = dir.path().join("classes");
    for c in ["cat", "dog"] {
        std::fs::create_dir_all(folder.join(c)).unwrap();
        image::RgbImage::new(24, 24).save(folder.join(c).join("0.png")).unwrap();
    }
    let run = RunDir::new(dir.path().join("r1"));
    let c = config(&folder, &[]);
    let e = train(Start::New(&c), &run, &mut Progress::silent()).err().unwrap().to_string();
    assert!(e.contains("data.path") && e.contains("vitlab data unpaired"), "{e}");
    std::fs::remove_dir_all(data.join("trainB")).unwrap();
    let run = RunDir::new(dir.path().join("r2"));
    let e = train(Start::New(&config(&data, &[])), &run, &mut Progress::silent()).err().unwrap().to_string();
    assert!(e.contains("trainB"), "{e}");
}

#[test]
fn a_cyclegan_sweep_of_two_cells_and_two_seeds_runs_and_reports() {
    use vitlab::report::cyclegan::{load_runs, GanReport};
    use vitlab::sweep::{self, Axis, Runner, SweepOptions, SweepSpec};
    let dir = tempfile::tempdir().unwrap();
    let data = unpaired(dir.path(), 4, 2);
    let c = config(&data, &["epochs=1", "schedule.decay_epochs=1", "cyclegan.sample_every=0", "checkpoint.every_steps=0"]);
    let table: toml::Table = toml::from_str(&c.to_toml()).unwrap();
    let cfg_path = dir.path().join("gan.toml");
    std::fs::write(&cfg_path, toml::to_string(&table).unwrap()).unwrap();
    let spec = SweepSpec {
        config: Some(cfg_path),
        overrides: Vec::new(),
        grid: vec![Axis::parse("model.block=vit,vit22b").unwrap()],
        seeds: vec![0, 1],
    };
    let root = dir.path().join("sweep");
    let plan = sweep::plan(&spec, &root).unwrap();
    let options = SweepOptions { jobs: 1, runner: Runner::InProcess { quiet: true }, verbose: false };
    let summary = sweep::run(&plan, &options).unwrap();
    assert_eq!(summary.runs.len(), 4);
    assert_eq!(summary.failed(), 0, "{:?}", summary.runs.iter().map(|r| &r.error).collect::<Vec<_>>());
    assert!(summary.runs.iter().all(|r| r.exit_cause == Some(ExitCause::Completed) && r.steps == Some(2)));
    // Every run's results.json carries the common summary: task and steps.
    for r in &summary.runs {
        let s = vitlab::train::Summary::read(&RunDir::new(root.join(&r.dir))).unwrap();
        assert_eq!((s.task, s.steps), (vitlab::config::TaskKind::Cyclegan, 2));
        assert!(s.params > 0);
    }
    // The report tabulates both cells over their two seeds.
    let runs = load_runs(std::slice::from_ref(&root)).unwrap();
    assert_eq!(runs.len(), 4);
    let report = GanReport::build("gan sweep", runs, None).unwrap();
    let files = report.write(&dir.path().join("report")).unwrap();
    let md = std::fs::read_to_string(files.iter().find(|f| f.extension().is_some_and(|e| e == "md")).unwrap()).unwrap();
    assert!(md.contains("vit22b") && md.contains("vit"), "{md}");
}
