//! Data-parallel training, with ranks as threads of this process
//! (`vitlab::distributed::LocalGroup`, the same semantics as MPI): N ranks on slices
//! of every batch train the model one process trains on the whole batch; rank 0
//! alone writes the run; bad setups and a silent peer are clear errors.

use std::path::Path;
use std::time::Duration;

use vitlab::config::ExperimentConfig;
use vitlab::distributed::{LocalGroup, World};
use vitlab::models::weights::{read_safetensors, TensorMap};
use vitlab::train::progress::Progress;
use vitlab::train::{train_in, Outcome, RunDir, Start};

mod common;

/// 256 generated 16-px images (192 to train: 6 batches of 32 an epoch), a 2-block
/// ViT, and the strong recipe's every random piece: AutoAugment, random erasing,
/// Mixup/CutMix with a permutation partner, repeated augmentation, stochastic depth
/// and the weight average, whose draws must not depend on the number of ranks.
fn config(extra: &[&str]) -> ExperimentConfig {
    let mut overrides: Vec<String> = [
        "data.path=synthetic",
        "data.synthetic_train=256",
        "data.synthetic_test=32",
        "data.synthetic_size=16",
        "data.val_size=64",
        "data.workers=1",
        "model.image_size=16",
        "model.patch_size=4",
        "model.depth=2",
        "model.dim=32",
        "model.mlp_dim=64",
        "model.heads=4",
        "epochs=1",
        "batch_size=32",
        "schedule.name=constant",
        "schedule.warmup_epochs=0",
        "augment.policy=autoaugment-cifar10",
        "augment.erase_prob=0.5",
        "augment.mixup_alpha=1.0",
        "augment.cutmix_alpha=1.0",
        "augment.mix_prob=0.8",
        "augment.mix_partner=permutation",
        "augment.repeats=3",
        "model.drop_path=0.2",
        "ema.decay=0.9",
        "monitor.block_every=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    overrides.extend(extra.iter().map(|s| s.to_string()));
    ExperimentConfig::load(None, &overrides).unwrap()
}

/// Trains `config` in `run` on `worlds`, one thread each; the outcomes in rank order.
fn train_ranks(worlds: Vec<World>, config: &ExperimentConfig, run: &RunDir) -> Vec<vitlab::Result<Outcome>> {
    std::thread::scope(|s| {
        let handles: Vec<_> =
            worlds.into_iter().map(|w| s.spawn(move || train_in(&w, Start::New(config), run, &mut Progress::silent()))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn model_tensors(path: &Path) -> TensorMap {
    read_safetensors(path).unwrap().0.into_iter().filter(|(k, _)| k.starts_with("model.") || k.starts_with("ema.")).collect()
}

/// The largest |a - b| over every tensor (same names required).
fn max_diff(a: &TensorMap, b: &TensorMap) -> f32 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    a.iter().flat_map(|(k, t)| t.data.iter().zip(&b[k].data).map(|(x, y)| (x - y).abs())).fold(0f32, f32::max)
}

/// steps.csv's loss column (the third).
fn losses(run: &RunDir) -> Vec<f64> {
    std::fs::read_to_string(run.steps()).unwrap().lines().skip(1).map(|l| l.split(',').nth(2).unwrap().parse().unwrap()).collect()
}

/// Two ranks of 16 images against one process of 32: the same weights (up to the
/// order of float sums), the same logged losses, one writer.
fn two_ranks_train_as_one(extra: &[&str], tol: f32) {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (RunDir::new(dir.path().join("one")), RunDir::new(dir.path().join("two")));
    let c = config(extra);
    let single = train_ranks(vec![World::single()], &c, &one).pop().unwrap().unwrap();
    let ranks = train_ranks(LocalGroup::worlds(2, Duration::from_secs(120)), &c, &two);
    let ranks: Vec<Outcome> = ranks.into_iter().map(Result::unwrap).collect();
    assert_eq!(ranks[0].summary().steps, 6);
    assert_eq!(single.summary().steps, 6);

    let d = max_diff(&model_tensors(&one.latest()), &model_tensors(&two.latest()));
    eprintln!("{extra:?}: largest difference of any weight, 2 ranks vs 1 process: {d:e}");
    assert!(d <= tol, "{extra:?}: 2 ranks end {d:e} away from 1 process (tolerance {tol:e})");
    let (l1, l2) = (losses(&one), losses(&two));
    assert_eq!(l1.len(), 6, "one row per step");
    assert_eq!(l2.len(), 6, "rank 1 writes no rows of its own");
    for (a, b) in l1.iter().zip(&l2) {
        assert!((a - b).abs() <= 1e-4 * a.abs(), "logged loss {b} (2 ranks) vs {a} (1 process)");
    }
    // Rank 0 measured the test set and wrote results.json; rank 1 did neither.
    let (Outcome::Classify(r0), Outcome::Classify(r1)) = (&ranks[0], &ranks[1]) else { panic!("classifiers") };
    assert!(r0.test.is_some() && r1.test.is_none());
    assert!(two.results().exists());
}

#[test]
fn two_ranks_train_the_model_one_process_trains_with_adamw() {
    two_ranks_train_as_one(&["stabilizers.clip_grad_norm=1.0"], 2e-5);
}

/// AdamW normalises the gradient's scale away (and clipping bounds it), so a wrong
/// scale of the summed gradients would hide there: plain SGD shows it.
#[test]
fn two_ranks_train_the_model_one_process_trains_with_sgd() {
    two_ranks_train_as_one(&["optim.name=sgd", "optim.lr=0.1", "optim.momentum=0.9", "optim.weight_decay=0"], 2e-5);
}

/// On LibTorch too: burn 0.22.1's dispatch backend cannot replace a LibTorch
/// gradient (`grad_replace` panics there), which distributed/grads.rs goes around.
#[cfg(feature = "tch")]
#[test]
fn two_ranks_train_the_model_one_process_trains_on_libtorch() {
    let sgd = ["backend=\"tch\"", "optim.name=sgd", "optim.lr=0.1", "optim.momentum=0.9", "optim.weight_decay=0"];
    two_ranks_train_as_one(&sgd, 2e-5);
}

#[test]
fn a_batch_the_ranks_cannot_share_equally_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path().join("r"));
    for r in train_ranks(LocalGroup::worlds(3, Duration::from_secs(60)), &config(&[]), &run) {
        let e = r.err().expect("refused").to_string();
        assert!(e.contains("batch_size") && e.contains("not a multiple of the 3 ranks"), "{e}");
    }
    assert!(!run.root.exists(), "refused before anything is written");
}

#[test]
fn a_rank_that_stops_answering_is_named_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::new(dir.path().join("r"));
    let mut worlds = LocalGroup::worlds(2, Duration::from_millis(500));
    worlds.pop(); // rank 1 never starts
    let started = std::time::Instant::now();
    let e = train_ranks(worlds, &config(&[]), &run).pop().unwrap().err().expect("times out").to_string();
    assert!(e.contains("rank 1 did not answer within 0.5 s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// A CycleGAN on 2 ranks of 2 images against one process of 4: the same four
/// networks, optimiser states and history pools (pool size 3, so that the pools
/// replace images at random from the first step's fourth image on), the same
/// logged losses. With SGD and momentum, not the usual Adam: the convolution
/// biases right before an InstanceNorm have a zero gradient in exact arithmetic,
/// rounding noise in practice, and Adam turns that noise into full learning-rate
/// steps of random sign, which then move the other gradients by several per cent
/// (measured: Adam moments 5 % apart after 3 steps, the same for one process
/// against itself with sums in another order); SGD keeps the noise noise, and a
/// wrong gradient scale cannot hide behind Adam's normalisation.
///
/// Two runs. One step (4 training images): both sides compute the same forward
/// values (a rank's rows as in the whole batch) and differ only in the order of
/// the gradient sums, so everything agrees within 1e-4 of its scale, which a
/// gradient share off by a per cent already breaks. Three steps (12 images): the
/// weights after the first step differ by rounding, and a ReLU or LeakyReLU input
/// that lies within rounding of zero can then fall on the other side of it. That
/// position's contribution to its layer's gradient switches on or off, a jump,
/// not noise: over 12 seeds per backend on an Intel Xeon, 4 of 24 three-step runs
/// ended with a momentum buffer 1.9e-3 to 3.4e-3 of its scale apart (the other 20
/// within 2.2e-5), and an AMD EPYC's rounding tipped this config's own seed into
/// 1.3e-3 (flex) and 1.4e-2 (LibTorch). So after three steps the momentum buffers
/// are held to 5e-2 and the weights, which move by the learning rate (0.01) times
/// them, the pools and the losses to 1e-3: rows, pools or momentum out of step
/// between the ranks at a later step give differences of order 1.
#[test]
fn two_ranks_train_the_cyclegan_one_process_trains() {
    two_ranks_train_a_cyclegan(&[]);
}

#[cfg(feature = "tch")]
#[test]
fn two_ranks_train_the_cyclegan_one_process_trains_on_libtorch() {
    two_ranks_train_a_cyclegan(&["backend=\"tch\""]);
}

fn two_ranks_train_a_cyclegan(extra: &[&str]) {
    // (training images, steps, tolerance of the momentum buffers, of everything else)
    for (images, steps, momentum_tol, tol) in [(4, 1, 1e-4, 1e-4), (12, 3, 5e-2, 1e-3)] {
        two_ranks_train_a_cyclegan_for(extra, images, steps, momentum_tol, tol);
    }
}

fn two_ranks_train_a_cyclegan_for(extra: &[&str], images: usize, steps: usize, momentum_tol: f32, tol: f32) {
    let dir = tempfile::tempdir().unwrap();
    let data = common::unpaired(dir.path(), images, 2);
    let c = ExperimentConfig::load(
        None,
        &[
            "task=cyclegan",
            "epochs=1",
            "batch_size=4",
            "model.image_size=24",
            "model.patch_size=4",
            "model.depth=6",
            "model.dim=16",
            "model.mlp_dim=32",
            "model.heads=2",
            "optim.name=sgd",
            "optim.lr=0.01",
            "optim.momentum=0.9",
            "optim.weight_decay=0.0",
            "schedule.name=constant",
            "cyclegan.discriminator=released",
            "cyclegan.refiner_width=4",
            "cyclegan.load_size=28",
            "cyclegan.pool_size=3",
            "cyclegan.sample_every=0",
            "cyclegan.fid_every=0",
            "monitor.block_every=0",
            format!("data.path={}", data.display()).as_str(),
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
    )
    .unwrap();
    let (one, two) = (RunDir::new(dir.path().join("one")), RunDir::new(dir.path().join("two")));
    let single = train_ranks(vec![World::single()], &c, &one).pop().unwrap().unwrap();
    let ranks: Vec<Outcome> =
        train_ranks(LocalGroup::worlds(2, Duration::from_secs(120)), &c, &two).into_iter().map(Result::unwrap).collect();
    assert_eq!(single.summary().steps as usize, steps);
    assert_eq!(ranks[0].summary().steps as usize, steps);
    let everything = |p: &Path| read_safetensors(p).unwrap().0;
    let (a, b) = (everything(&one.latest()), everything(&two.latest()));
    assert!(a.keys().any(|k| k.starts_with("pool_a")), "the checkpoint holds the pools");
    assert!(a.keys().any(|k| k.starts_with("optim_g_a.m.")), "the checkpoint holds the momentum buffers");
    // Each tensor on its own scale, at least 1 (the momentum buffers reach 12, the pixels 1; the buffers of the biases right before an InstanceNorm hold only rounding noise).
    // The worst of the optimisers' momentum buffers, and of the rest (weights, pooled images).
    let mut worst = [(0f32, String::new()), (0f32, String::new())];
    for (k, t) in &a {
        let scale = t.data.iter().fold(1f32, |m, v| m.max(v.abs()));
        let d = t.data.iter().zip(&b[k].data).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale;
        let w = &mut worst[usize::from(!k.starts_with("optim_"))];
        if d > w.0 {
            *w = (d, k.clone());
        }
    }
    let [(dm, km), (dw, kw)] = worst;
    eprintln!("CycleGAN, {steps} step(s), 2 ranks vs 1 process, largest difference of its tensor's max |value|: momentum {dm:.2e} ({km}), weights and pooled pixels {dw:.2e} ({kw})");
    assert!(
        dm <= momentum_tol,
        "after {steps} step(s) 2 ranks end {dm:e} away from 1 process in {km} (at most {momentum_tol:e})"
    );
    assert!(dw <= tol, "after {steps} step(s) 2 ranks end {dw:e} away from 1 process in {kw} (at most {tol:e})");
    for (x, y) in losses(&one).iter().zip(&losses(&two)) {
        assert!((x - y).abs() <= f64::from(tol) * x.abs(), "logged loss {y} (2 ranks) vs {x} (1 process)");
    }
    assert_eq!(losses(&two).len(), steps, "rank 1 writes no rows of its own");
    assert!(two.results().exists());
}
