//! Throughput benchmarks: timed training steps (forward + backward + AdamW
//! step) and inference batches of a model on one backend, and the analytic
//! FLOP count used to report achieved GFLOP/s.
//!
//! `vitlab bench` runs every measurement in its own child process (so each
//! reports its own peak memory) and alternates backends and PyTorch
//! (tools/bench_pytorch.py) so that machine noise hits all of them alike.

use std::time::Instant;

use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::config::OptimSection;
use crate::models::{HeadKind, ModelConfig, Pool, Vit};
use crate::tensor_file::tensor_to_vec;
use crate::train::optim::Optimizer;
use crate::util::Rng;
use crate::Result;

/// What to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Train,
    Infer,
}

/// Timings of one child process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    pub stack: String,
    pub mode: Mode,
    pub batch: usize,
    /// Milliseconds per timed step (after warm-up).
    pub step_ms: Vec<f64>,
    /// Peak resident memory of the process (KiB) after the run, and before the model was built.
    pub peak_rss_kib: u64,
    pub base_rss_kib: u64,
}

impl Measurement {
    pub fn median_ms(&self) -> f64 {
        let mut v = self.step_ms.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            return f64::NAN;
        }
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }
    pub fn min_ms(&self) -> f64 {
        self.step_ms.iter().copied().fold(f64::INFINITY, f64::min)
    }
    pub fn images_per_s(&self) -> f64 {
        self.batch as f64 / (self.median_ms() / 1000.0)
    }
}

/// Peak resident set size of this process in KiB (Linux `VmHWM`), 0 where unknown.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// Forward-pass FLOPs of one image (a multiply-add counts 2), from the model's shapes.
pub fn forward_flops(c: &ModelConfig) -> f64 {
    let (d, m, k) = (c.dim as f64, c.mlp_dim as f64, c.num_classes as f64);
    let n = c.num_patches() as f64;
    let t = c.num_tokens() as f64;
    let patch = 2.0 * n * (c.patch_size * c.patch_size * c.channels) as f64 * d;
    let attn = 2.0 * t * d * 3.0 * d + 2.0 * 2.0 * t * t * d + 2.0 * t * d * d;
    let mlp = 2.0 * 2.0 * t * d * m;
    let blocks = c.depth as f64 * (attn + mlp);
    let map = if c.pool == Pool::Map { 2.0 * (d * d + t * 2.0 * d * d + 2.0 * t * d + d * d + 2.0 * d * m) } else { 0.0 };
    let head = match c.head {
        HeadKind::Linear => 2.0 * d * k,
        HeadKind::Paper => 2.0 * (d * m + m * k),
    };
    patch + blocks + map + head
}

/// Training FLOPs of one image: forward + backward (twice the forward).
pub fn train_flops(c: &ModelConfig) -> f64 {
    3.0 * forward_flops(c)
}

fn random_batch(c: &ModelConfig, batch: usize, device: &Device) -> (Tensor<4>, Tensor<2>) {
    // From vitlab's generator, not burn's process-global one (see models::init).
    let shape = [batch, c.channels, c.image_size, c.image_size];
    let mut rng = Rng::new(0);
    let pixels = (0..shape.iter().product()).map(|_| rng.normal() as f32).collect::<Vec<_>>();
    let x = Tensor::<4>::from_data(TensorData::new(pixels, shape), device);
    let k = c.num_classes;
    let mut onehot = vec![0f32; batch * k];
    for i in 0..batch {
        onehot[i * k + (i * 7) % k] = 1.0;
    }
    (x, Tensor::from_data(TensorData::new(onehot, [batch, k]), device))
}

/// Times `steps` training steps (cross-entropy, AdamW lr 1e-3) after `warmup` untimed ones.
pub fn time_training(c: &ModelConfig, device: &Device, batch: usize, warmup: usize, steps: usize) -> Result<Vec<f64>> {
    let ad = device.clone().autodiff();
    let mut model = Vit::seeded(c, &ad, 0)?;
    let mut optim = Optimizer::new(OptimSection::default());
    let (x, target) = random_batch(c, batch, &ad);
    let mut times = Vec::with_capacity(steps);
    for i in 0..warmup + steps {
        let start = Instant::now();
        let logits = model.forward(x.clone());
        let loss = (log_softmax(logits, 1) * target.clone()).sum_dim(1).mean().neg();
        let grads = loss.backward();
        model = optim.step(model, &grads, 1e-3, 1.0);
        // Wait for the step to finish: read a parameter back.
        let _ = tensor_to_vec(model.head.bias.as_ref().expect("head bias").val().inner());
        if i >= warmup {
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(times)
}

/// Times `steps` inference batches (no autodiff) after `warmup` untimed ones.
pub fn time_inference(c: &ModelConfig, device: &Device, batch: usize, warmup: usize, steps: usize) -> Result<Vec<f64>> {
    let model = Vit::seeded(c, device, 0)?;
    let (x, _) = random_batch(c, batch, device);
    let mut times = Vec::with_capacity(steps);
    for i in 0..warmup + steps {
        let start = Instant::now();
        let _ = tensor_to_vec(model.forward(x.clone()));
        if i >= warmup {
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(times)
}

/// Times FID feature extraction, as `vitlab fid` runs it: `batch` random uint8
/// `image_size`² images through the preprocessing (bilinear resize to 299) and the
/// FID InceptionV3 to its 2048-d pool features, with stand-in weights (speed does
/// not depend on their values).
pub fn time_fid_features(device: &Device, batch: usize, image_size: usize, warmup: usize, steps: usize) -> Vec<f64> {
    use crate::data::decode::Img;
    use crate::metrics::features::{Extractor, Resize};
    use crate::models::inception::{FidInception, Tap};
    let extractor = Extractor::new(FidInception::deterministic(device), device.clone(), Resize::PytorchFid, batch);
    let mut rng = crate::data::loader::Rng::new(0);
    let images: Vec<Img> = (0..batch)
        .map(|_| Img {
            h: image_size,
            w: image_size,
            chw: (0..3 * image_size * image_size).map(|_| rng.below(256) as u8).collect(),
        })
        .collect();
    let mut times = Vec::with_capacity(steps);
    for i in 0..warmup + steps {
        let start = Instant::now();
        let _ = extractor.features(&images, Tap::F2048);
        if i >= warmup {
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times
}

/// Times CycleGAN iterations of the trainer (`train::cyclegan`): both generators and
/// both discriminators forward and backward, four Adam steps and the history pools,
/// on random `batch`-image batches per domain, after `warmup` untimed ones. `config` is
/// a `task = "cyclegan"` config (FID and sample grids are switched off here).
pub fn time_cyclegan(config: &crate::config::ExperimentConfig, device: &Device, warmup: usize, steps: usize) -> Result<Vec<f64>> {
    use crate::data::pairs::UnpairedData;
    use crate::train::cyclegan::CycleGan;
    use crate::train::{RunDir, StepContext, Task};
    let mut c = config.clone();
    c.cyclegan.fid_every = 0;
    c.cyclegan.sample_every = 0.0;
    let data = UnpairedData::synthetic(c.batch_size * (warmup + steps), c.model.image_size, 0);
    let scratch = std::env::temp_dir().join(format!("vitlab-bench-{}", std::process::id()));
    let mut task = CycleGan::new(&c, data, device, &RunDir::new(&scratch))?;
    let mut times = Vec::with_capacity(steps);
    for (i, batch) in task.train_batches(0, 0).take(warmup + steps).enumerate() {
        let ctx = StepContext {
            step: i as u64 + 1,
            epoch: 0,
            lr: c.optim.lr,
            probe_blocks: false,
            max_logit_threshold: 0.0,
            max_grad_threshold: 0.0,
            clip_grad_norm: 0.0,
        };
        let start = Instant::now();
        // The step reads its losses back, so it has finished when it returns.
        task.step(batch, &ctx)?;
        if i >= warmup {
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok(times)
}

/// What [`loader_throughput`] measured.
#[derive(Clone, Copy, Debug)]
pub struct LoaderThroughput {
    pub images: usize,
    pub batches: usize,
    pub seconds: f64,
}

impl LoaderThroughput {
    pub fn images_per_second(&self) -> f64 {
        self.images as f64 / self.seconds
    }
}

/// Pull batches from `loader` (epoch after epoch) for about `seconds`.
pub fn loader_throughput(loader: &crate::data::loader::Loader, seconds: f64) -> LoaderThroughput {
    let start = Instant::now();
    let (mut images, mut batches, mut epoch) = (0usize, 0usize, 0u64);
    let mut checksum = 0f64;
    'outer: loop {
        for b in loader.epoch(epoch, 0) {
            images += b.labels.len();
            batches += 1;
            checksum += b.images[0] as f64;
            if start.elapsed().as_secs_f64() >= seconds {
                break 'outer;
            }
        }
        epoch += 1;
    }
    std::hint::black_box(checksum);
    LoaderThroughput { images, batches, seconds: start.elapsed().as_secs_f64() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(step_ms: Vec<f64>) -> Measurement {
        Measurement { stack: "flex".into(), mode: Mode::Train, batch: 64, step_ms, peak_rss_kib: 0, base_rss_kib: 0 }
    }

    #[test]
    fn throughput_is_the_batch_over_the_median_step() {
        let odd = m(vec![30.0, 10.0, 20.0]);
        assert_eq!((odd.median_ms(), odd.min_ms()), (20.0, 10.0));
        assert_eq!(odd.images_per_s(), 64.0 / 0.020);
        assert_eq!(m(vec![40.0, 10.0, 20.0, 30.0]).median_ms(), 25.0);
        assert!(m(vec![]).median_ms().is_nan());
    }

    /// ViT-Tiny/4 at 32 px (d 192, MLP 768, 12 blocks, 65 tokens, 10 classes),
    /// counted by hand: patch embedding 2*64*48*192, per block QKV 2*65*192*576,
    /// QK^T and PV 2*2*65^2*192, projection 2*65*192^2, MLP 2*2*65*192*768, head 2*192*10.
    #[test]
    fn the_flop_count_of_vit_tiny_matches_a_hand_count() {
        let c = crate::models::ModelConfig::new(crate::models::BlockVariant::Vit, crate::models::Size::Tiny)
            .with_image(32, 4)
            .with_classes(10);
        let (t, d, m) = (65.0, 192.0, 768.0);
        let block = 2.0 * t * d * 3.0 * d + 4.0 * t * t * d + 2.0 * t * d * d + 4.0 * t * d * m;
        let head = if c.head == HeadKind::Linear { 2.0 * d * 10.0 } else { 2.0 * (d * m + m * 10.0) };
        let want = 2.0 * 64.0 * 48.0 * d + 12.0 * block + head;
        assert_eq!(forward_flops(&c), want);
        assert_eq!(train_flops(&c), 3.0 * want);
    }
}
