//! The batch loader: seeded shuffling, augmentation and normalisation on
//! worker threads, batches delivered in order while the model trains.
//!
//! Determinism: the epoch's order is a permutation drawn from `(seed, epoch)`
//! (laid out by the sampler of `[augment] repeats / passes`), each image's
//! augmentation draws from its own generator seeded by `(seed, epoch,
//! position)` and each batch's Mixup / CutMix from one seeded by `(seed, epoch,
//! batch)`, so the batches are identical for any number of workers, and an
//! epoch can start at any batch (resuming mid-epoch).

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;

use super::{Augment, AugmentPlan, Batch, ImageSet, Normalize};
pub use crate::util::rng::Rng;
use crate::Result;

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
    /// Folded into the soft targets of mixed batches (Mixup / CutMix).
    pub label_smoothing: f64,
    /// Resize images to this size (square) before the random crop of
    /// `image_size` (torchvision's `Resize(load_size)` + `RandomCrop(image_size)`;
    /// CycleGAN's load size); 0: resize to `image_size`, crops only from padding.
    pub load_size: usize,
    /// Images per epoch when more than the sampler gives: its order is repeated
    /// from the start as often as needed (the smaller domain of an unpaired run
    /// visits as many images as the larger); 0: the sampler's length.
    pub epoch_images: usize,
}

/// Batches over a subset (`indices`) of an [`ImageSet`].
pub struct Loader {
    set: Arc<ImageSet>,
    indices: Arc<Vec<usize>>,
    config: LoaderConfig,
    plan: Arc<AugmentPlan>,
}

impl Loader {
    /// Fails when `config.augment` is invalid (the error names the key) or the batch size is 0.
    pub fn new(set: Arc<ImageSet>, indices: Vec<usize>, config: LoaderConfig) -> Result<Self> {
        if config.batch_size == 0 {
            return Err(crate::Error::config("batch_size", "must be at least 1"));
        }
        if config.load_size != 0 && config.load_size < config.image_size {
            return Err(crate::Error::config(
                "load_size",
                format!("{} is smaller than the crop of {} px", config.load_size, config.image_size),
            ));
        }
        let plan = config.augment.plan(set.classes.len().max(1), config.label_smoothing)?;
        Ok(Loader { set, indices: Arc::new(indices), config, plan: Arc::new(plan) })
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

    /// The images this loader draws from (indices into [`Loader::set`]).
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// Images per epoch: the index list's length, unless the sampler of a
    /// shuffled loader says otherwise (`repeats`: DeiT's selection; `passes`:
    /// that many times the list).
    pub fn epoch_len(&self) -> usize {
        let n = self.indices.len();
        let sampled = match (self.config.shuffle, &*self.plan) {
            (true, p) if p.repeats > 1 => super::sampler::ra_num_selected(n, p.repeats, 1),
            (true, p) => n * p.passes,
            (false, _) => n,
        };
        sampled.max(self.config.epoch_images)
    }

    pub fn batches_per_epoch(&self) -> usize {
        let (n, b) = (self.epoch_len(), self.config.batch_size);
        if self.config.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// The order of the epoch's images (dataset indices).
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order = self.sampled_order(epoch);
        let (n, len) = (order.len(), self.epoch_len());
        if n > 0 && len > n {
            let wrapped: Vec<usize> = (n..len).map(|i| order[i % n]).collect();
            order.extend(wrapped);
        }
        order
    }

    /// The sampler's order of the epoch, before [`LoaderConfig::epoch_images`].
    fn sampled_order(&self, epoch: u64) -> Vec<usize> {
        if !self.config.shuffle {
            return (*self.indices).clone();
        }
        let mut rng = Rng::keyed(&[self.config.seed, epoch, 0x5348_5546]);
        let n = self.indices.len();
        let positions = if self.plan.repeats > 1 {
            super::sampler::ra_order(n, self.plan.repeats, 1, 0, &mut rng)
        } else if self.plan.passes > 1 {
            super::sampler::concat_permutations(n, self.plan.passes as f64, &mut rng)
        } else {
            let mut order = (*self.indices).clone();
            rng.shuffle(&mut order);
            return order;
        };
        positions.into_iter().map(|p| self.indices[p]).collect()
    }

    /// The batches of `epoch`, from batch number `start` on.
    pub fn epoch(&self, epoch: u64, start: usize) -> EpochIter {
        let order = Arc::new(self.order(epoch));
        let batches = self.batches_per_epoch();
        let job = Arc::new(Job { set: self.set.clone(), order, config: self.config.clone(), plan: self.plan.clone(), epoch });
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
        EpochIter { job, next: start, end: batches, rx: (workers > 0).then_some(rx), pending: BTreeMap::new(), _handles: handles }
    }
}

struct Job {
    set: Arc<ImageSet>,
    order: Arc<Vec<usize>>,
    config: LoaderConfig,
    plan: Arc<AugmentPlan>,
    epoch: u64,
}

impl Job {
    fn batch(&self, b: usize) -> Batch {
        let c = &self.config;
        let from = b * c.batch_size;
        let to = (from + c.batch_size).min(self.order.len());
        let (ch, s) = (self.set.channels, c.image_size);
        let luts = Luts::new(&c.normalize, ch);
        let mut images = vec![0f32; (to - from) * ch * s * s];
        let mut labels = Vec::with_capacity(to - from);
        let mut scratch = Scratch::default();
        for (k, pos) in (from..to).enumerate() {
            let idx = self.order[pos];
            labels.push(self.set.labels[idx]);
            let mut rng = Rng::keyed(&[c.seed, self.epoch, pos as u64, 0x4155_4755]);
            let out = &mut images[k * ch * s * s..(k + 1) * ch * s * s];
            let keep_bytes = self.plan.policy.is_some();
            augment_into(&self.set, idx, (c.load_size, s), &c.augment, keep_bytes, &mut rng, &luts, &mut scratch, out);
            if let Some(policy) = &self.plan.policy {
                // The crop and flips were written to `scratch.image`; the policy works on bytes.
                policy.apply(&scratch.image, ch, s, s, &mut rng, &mut scratch.policy);
                for (c, (o, p)) in out.chunks_mut(s * s).zip(scratch.policy.chunks(s * s)).enumerate() {
                    let lut = &luts.0[c];
                    for (d, &v) in o.iter_mut().zip(p) {
                        *d = lut[v as usize];
                    }
                }
            }
            if let Some(erasing) = &self.plan.erasing {
                erasing.erase_image(out, ch, s, s, &mut rng);
            }
        }
        let shape = [to - from, ch, s, s];
        let targets = self.plan.mixup.as_ref().map(|m| {
            let mut t = vec![0f32; (to - from) * m.num_classes];
            let mut rng = Rng::keyed(&[c.seed, self.epoch, b as u64, 0x4D49_5855]);
            m.apply(&mut images, shape, &labels, &mut t, &mut rng);
            t
        });
        Batch { shape, images, labels, positions: from..to, targets }
    }
}

/// Per-thread buffers of the augmentation.
#[derive(Default)]
struct Scratch {
    /// The resized image.
    resized: Vec<u8>,
    /// The cropped and flipped image as bytes (when a policy follows).
    image: Vec<u8>,
    /// The policy's output.
    policy: Vec<u8>,
}

/// Per-channel lookup tables `u8 -> (v/255 - mean) / std`.
struct Luts(Vec<[f32; 256]>);

impl Luts {
    fn new(norm: &Normalize, ch: usize) -> Luts {
        let (mean, std) = norm.mean_std();
        Luts(
            (0..ch)
                .map(|c| {
                    let pick = |v: &[f32], d: f32| if v.is_empty() { d } else { v[c % v.len()] };
                    let (m, sd) = (pick(&mean, 0.0), pick(&std, 1.0));
                    let mut t = [0f32; 256];
                    for (v, x) in t.iter_mut().enumerate() {
                        // Same arithmetic as `v * (1 / (255 * std)) - mean / std`.
                        *x = v as f32 * (1.0 / (255.0 * sd)) - m / sd;
                    }
                    t
                })
                .collect(),
        )
    }
}

/// Resizes (if needed), crops, flips and normalises one image into `out`; with a
/// policy to follow (`keep_bytes`) the cropped and flipped bytes also go to
/// `scratch.image` for it. The draws from `rng` are, in order: crop offset y,
/// crop offset x (when the crop has room: padding, or a load size above the
/// output size), horizontal flip, vertical flip (when their
/// probability > 0); the policy's and random erasing's come after.
#[allow(clippy::too_many_arguments)]
fn augment_into(
    set: &ImageSet,
    idx: usize,
    (load, size): (usize, usize),
    aug: &Augment,
    keep_bytes: bool,
    rng: &mut Rng,
    luts: &Luts,
    scratch: &mut Scratch,
    out: &mut [f32],
) {
    let ch = set.channels;
    let load = if load == 0 { size } else { load };
    let src: &[u8] = if set.height == load && set.width == load {
        set.image(idx)
    } else {
        super::decode::resize_planes(set.image(idx), ch, set.height, set.width, load, load, &mut scratch.resized);
        &scratch.resized
    };
    if keep_bytes {
        scratch.image.clear();
        scratch.image.resize(ch * size * size, 0);
    }
    // The crop's offset in the padded source: [-pad, load - size + pad] per axis.
    let pad = aug.crop_padding;
    let slack = load - size + 2 * pad;
    let (dy, dx) = if slack > 0 {
        (rng.below(slack + 1) as isize - pad as isize, rng.below(slack + 1) as isize - pad as isize)
    } else {
        (0, 0)
    };
    let hflip = aug.hflip > 0.0 && rng.uniform() < aug.hflip;
    let vflip = aug.vflip > 0.0 && rng.uniform() < aug.vflip;
    let (n, ln) = (size as isize, load as isize);
    // Output columns [x0, x1) read source columns x + dx; the rest is padding.
    let x0 = (-dx).clamp(0, n) as usize;
    let x1 = (ln - dx).clamp(0, n) as usize;
    for c in 0..ch {
        let lut = &luts.0[c];
        let zero = lut[0];
        let plane = &src[c * load * load..(c + 1) * load * load];
        let o = &mut out[c * size * size..(c + 1) * size * size];
        for y in 0..size {
            let ty = if vflip { size - 1 - y } else { y };
            let row = &mut o[ty * size..(ty + 1) * size];
            let sy = y as isize + dy;
            if sy < 0 || sy >= ln || x0 >= x1 {
                row.fill(zero);
                continue;
            }
            let srow = &plane[sy as usize * load..(sy as usize + 1) * load];
            let sx0 = (x0 as isize + dx) as usize;
            let from = &srow[sx0..sx0 + (x1 - x0)];
            if hflip {
                // Output column x goes to size - 1 - x.
                row[size - x0..].fill(zero);
                row[..size - x1].fill(zero);
                for (d, &v) in row[size - x1..size - x0].iter_mut().rev().zip(from) {
                    *d = lut[v as usize];
                }
            } else {
                row[..x0].fill(zero);
                row[x1..].fill(zero);
                for (d, &v) in row[x0..x1].iter_mut().zip(from) {
                    *d = lut[v as usize];
                }
            }
            if keep_bytes {
                // The same pixels as bytes (padding stays 0, as torchvision's RandomCrop fill).
                let start = (c * size + ty) * size;
                let brow = &mut scratch.image[start..start + size];
                if hflip {
                    brow[size - x1..size - x0].iter_mut().rev().zip(from).for_each(|(d, &v)| *d = v);
                } else {
                    brow[x0..x1].copy_from_slice(from);
                }
            }
        }
    }
}

/// Bilinear resize with half-pixel centres (as torchvision's antialias=False), per channel.
pub fn resize_bilinear(src: &[u8], ch: usize, h: usize, w: usize, size: usize, out: &mut Vec<u8>) {
    super::decode::resize_planes(src, ch, h, w, size, size, out)
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
