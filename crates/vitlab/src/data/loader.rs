//! The batch loader: seeded shuffling, augmentation and normalisation on
//! worker threads, batches delivered in order while the model trains.
//!
//! Determinism: the epoch's order is a permutation drawn from `(seed, epoch)`,
//! and each image's augmentation draws from its own generator seeded by
//! `(seed, epoch, position)`, so the batches are identical for any number of
//! workers, and an epoch can start at any batch (resuming mid-epoch).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;

use super::{Augment, Batch, ImageSet, Normalize};

/// A small, fast, seedable generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator for a tuple of ids, independent of the order they are used in.
    pub fn keyed(parts: &[u64]) -> Self {
        let mut r = Rng(0x243F6A8885A308D3);
        for p in parts {
            r.0 ^= p.wrapping_add(0x9E3779B97F4A7C15);
            r.next_u64();
        }
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 32) * n as u64 >> 32) as usize
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// How a loader builds batches.
#[derive(Clone, Debug, PartialEq)]
pub struct LoaderConfig {
    pub batch_size: usize,
    /// Output size (square); images are resized (bilinear) when they differ.
    pub image_size: usize,
    pub augment: Augment,
    pub normalize: Normalize,
    pub shuffle: bool,
    /// Drop the last incomplete batch.
    pub drop_last: bool,
    /// Worker threads; 0 builds batches on the calling thread.
    pub workers: usize,
    pub seed: u64,
}

/// Batches over a subset (`indices`) of an [`ImageSet`].
pub struct Loader {
    set: Arc<ImageSet>,
    indices: Arc<Vec<usize>>,
    config: LoaderConfig,
}

impl Loader {
    pub fn new(set: Arc<ImageSet>, indices: Vec<usize>, config: LoaderConfig) -> Self {
        assert!(config.batch_size > 0, "batch size must be positive");
        Loader {
            set,
            indices: Arc::new(indices),
            config,
        }
    }

    pub fn len(&self) -> usize {
        self.indices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    pub fn set(&self) -> &ImageSet {
        &self.set
    }

    pub fn batches_per_epoch(&self) -> usize {
        let (n, b) = (self.indices.len(), self.config.batch_size);
        if self.config.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// The order of the epoch's images (dataset indices).
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order = (*self.indices).clone();
        if self.config.shuffle {
            Rng::keyed(&[self.config.seed, epoch, 0x5348_5546]).shuffle(&mut order);
        }
        order
    }

    /// The batches of `epoch`, from batch number `start` on.
    pub fn epoch(&self, epoch: u64, start: usize) -> EpochIter {
        let order = Arc::new(self.order(epoch));
        let batches = self.batches_per_epoch();
        let job = Arc::new(Job {
            set: self.set.clone(),
            order,
            config: self.config.clone(),
            epoch,
        });
        let workers = self.config.workers;
        let (tx, rx) = mpsc::sync_channel::<(usize, Batch)>(workers.max(1) * 2);
        let mut handles = Vec::new();
        if workers > 0 {
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(start));
            for _ in 0..workers {
                let (job, next, tx) = (job.clone(), next.clone(), tx.clone());
                handles.push(std::thread::spawn(move || loop {
                    let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if b >= batches || tx.send((b, job.batch(b))).is_err() {
                        break;
                    }
                }));
            }
        }
        EpochIter {
            job,
            next: start,
            end: batches,
            rx: (workers > 0).then_some(rx),
            pending: BTreeMap::new(),
            _handles: handles,
        }
    }
}

struct Job {
    set: Arc<ImageSet>,
    order: Arc<Vec<usize>>,
    config: LoaderConfig,
    epoch: u64,
}

impl Job {
    fn batch(&self, b: usize) -> Batch {
        let c = &self.config;
        let from = b * c.batch_size;
        let to = (from + c.batch_size).min(self.order.len());
        let (ch, s) = (self.set.channels, c.image_size);
        let (mean, std) = c.normalize.mean_std();
        let mut images = vec![0f32; (to - from) * ch * s * s];
        let mut labels = Vec::with_capacity(to - from);
        let mut scratch = Vec::new();
        for (k, pos) in (from..to).enumerate() {
            let idx = self.order[pos];
            labels.push(self.set.labels[idx]);
            let mut rng = Rng::keyed(&[c.seed, self.epoch, pos as u64, 0x4155_4755]);
            let out = &mut images[k * ch * s * s..(k + 1) * ch * s * s];
            augment_into(&self.set, idx, s, &c.augment, &mut rng, &mean, &std, &mut scratch, out);
        }
        Batch {
            shape: [to - from, ch, s, s],
            images,
            labels,
            positions: from..to,
        }
    }
}

/// Resizes (if needed), crops, flips and normalises one image into `out`.
#[allow(clippy::too_many_arguments)]
fn augment_into(
    set: &ImageSet,
    idx: usize,
    size: usize,
    aug: &Augment,
    rng: &mut Rng,
    mean: &[f32],
    std: &[f32],
    scratch: &mut Vec<u8>,
    out: &mut [f32],
) {
    let ch = set.channels;
    let src: &[u8] = if set.height == size && set.width == size {
        set.image(idx)
    } else {
        resize_bilinear(set.image(idx), ch, set.height, set.width, size, scratch);
        scratch
    };
    let pad = aug.crop_padding;
    let (dy, dx) = if pad > 0 {
        (rng.below(2 * pad + 1) as isize - pad as isize, rng.below(2 * pad + 1) as isize - pad as isize)
    } else {
        (0, 0)
    };
    let hflip = aug.hflip > 0.0 && rng.uniform() < aug.hflip;
    let vflip = aug.vflip > 0.0 && rng.uniform() < aug.vflip;
    for c in 0..ch {
        let scale = 1.0 / (255.0 * std[c % std.len()]);
        let shift = mean[c % mean.len()] / std[c % std.len()];
        let plane = &src[c * size * size..(c + 1) * size * size];
        let o = &mut out[c * size * size..(c + 1) * size * size];
        for y in 0..size {
            let ty = if vflip { size - 1 - y } else { y };
            let sy = y as isize + dy;
            for x in 0..size {
                let tx = if hflip { size - 1 - x } else { x };
                let sx = x as isize + dx;
                let v = if sy >= 0 && sx >= 0 && (sy as usize) < size && (sx as usize) < size {
                    plane[sy as usize * size + sx as usize]
                } else {
                    0
                };
                o[ty * size + tx] = v as f32 * scale - shift;
            }
        }
    }
}

/// Bilinear resize with half-pixel centres (as torchvision's antialias=False), per channel.
pub fn resize_bilinear(src: &[u8], ch: usize, h: usize, w: usize, size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(ch * size * size, 0);
    let (sy, sx) = (h as f32 / size as f32, w as f32 / size as f32);
    for c in 0..ch {
        let plane = &src[c * h * w..(c + 1) * h * w];
        for y in 0..size {
            let fy = ((y as f32 + 0.5) * sy - 0.5).max(0.0);
            let y0 = (fy as usize).min(h - 1);
            let y1 = (y0 + 1).min(h - 1);
            let wy = fy - y0 as f32;
            for x in 0..size {
                let fx = ((x as f32 + 0.5) * sx - 0.5).max(0.0);
                let x0 = (fx as usize).min(w - 1);
                let x1 = (x0 + 1).min(w - 1);
                let wx = fx - x0 as f32;
                let p = |yy: usize, xx: usize| plane[yy * w + xx] as f32;
                let v = (1.0 - wy) * ((1.0 - wx) * p(y0, x0) + wx * p(y0, x1))
                    + wy * ((1.0 - wx) * p(y1, x0) + wx * p(y1, x1));
                out[c * size * size + y * size + x] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

/// The batches of one epoch, in order.
pub struct EpochIter {
    job: Arc<Job>,
    next: usize,
    end: usize,
    rx: Option<mpsc::Receiver<(usize, Batch)>>,
    pending: BTreeMap<usize, Batch>,
    _handles: Vec<std::thread::JoinHandle<()>>,
}

impl Iterator for EpochIter {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        if self.next >= self.end {
            return None;
        }
        let b = self.next;
        self.next += 1;
        let Some(rx) = &self.rx else {
            return Some(self.job.batch(b));
        };
        loop {
            if let Some(batch) = self.pending.remove(&b) {
                return Some(batch);
            }
            match rx.recv() {
                Ok((i, batch)) => {
                    self.pending.insert(i, batch);
                }
                Err(_) => return Some(self.job.batch(b)),
            }
        }
    }
}
