//! Unpaired image-to-image translation (SPEC §5): two ViTUnet generators and two
//! discriminators trained as CycleGAN, on the shared loop ([`super::run_loop`]),
//! and `vitlab translate` from the checkpoints.
//!
//! Naming follows pytorch-CycleGAN-and-pix2pix, so its users read the same loss
//! log: `G_A` maps A -> B and `D_A` judges its output against real B; `G_B`
//! maps B -> A and `D_B` judges real A. Per step, on a batch of real A and real B:
//!
//! - generators: `G_A = LS(D_A(G_A(A)))`, `G_B = LS(D_B(G_B(B)))`,
//!   `cycle_A = λc |G_B(G_A(A)) - A|`, `cycle_B = λc |G_A(G_B(B)) - B|`,
//!   `idt_A = λc λi |G_A(B) - B|`, `idt_B = λc λi |G_B(A) - A|`; one backward
//!   pass, Adam steps on both generators;
//! - discriminators, on the generated images passed through each one's history
//!   pool (detached): `D_A = mean((D_A(B) - 1)^2) + mean(D_A(pool(G_A(A)))^2)`,
//!   likewise `D_B` (SPEC's loss; the reference halves it, which Adam all but ignores).
//!
//! Training images are resized to `cyclegan.load_size`, randomly cropped to
//! `model.image_size` and flipped; each epoch visits max(|A|, |B|) images of each
//! domain in seeded orders ([`crate::data::pairs`], on the loader's worker
//! threads). FID_A (real test A vs G_B(test B)) and FID_B are
//! measured every `cyclegan.fid_every` epochs when the FID weights are found.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::gan::{l1, lsgan_discriminator_loss, lsgan_generator_loss, ImagePool};
use super::optim::{grad_stats, GradStats, Optimizer};
use super::{
    run_loop, Checkpoint, Explosion, LoopState, Observer, RunDir, Selection, StepContext, StepOutput, Summary, Task, Validation,
};
use crate::config::ExperimentConfig;
use crate::data::decode::Img;
use crate::data::loader::Rng;
use crate::data::pairs::{DomainImages, PairBatch, PairConfig, UnpairedData};
use crate::distributed::{all_gather_rows, all_reduce_gradients, Reduce, World};
use crate::metrics::features::{Extractor, Resize};
use crate::metrics::fid::{frechet_distance, FeatureStats};
use crate::models::inception::Tap;
use crate::models::weights::{apply, collect};
use crate::models::{seeded, Discriminator, DiscriminatorConfig, VitUnet, VitUnetConfig};
use crate::tensor_file::{group, tensor_to_vec, HostTensor, TensorMap};
use crate::{Error, Result};

pub use super::translate::{load_generator, translate_files, translate_page, Direction, PageInfo};

/// The step columns of steps.csv (and their epoch means in metrics.csv).
pub const STEP_COLUMNS: [&str; 12] = [
    "D_A",
    "D_B",
    "G_A",
    "G_B",
    "cycle_A",
    "cycle_B",
    "idt_A",
    "idt_B",
    "max_grad_G_A",
    "max_grad_G_B",
    "max_grad_D_A",
    "max_grad_D_B",
];
pub const VALIDATION_COLUMNS: [&str; 2] = ["FID_A", "FID_B"];

/// The generator of a run's config: `[model]` gives the block, the size preset
/// (depth, width, MLP width, heads; depth a multiple of 6), the overrides, and the
/// image and patch size; `cyclegan.refiner_width` the refiner.
pub fn generator_config(config: &ExperimentConfig) -> Result<VitUnetConfig> {
    let m = &config.model;
    let (depth, dim, mlp_dim, heads) = m.size.dims();
    let mut c = VitUnetConfig::new(m.block).with_image(m.image_size, m.patch_size);
    c.depth = m.depth.unwrap_or(depth);
    c.dim = m.dim.unwrap_or(dim);
    c.mlp_dim = m.mlp_dim.unwrap_or(mlp_dim);
    c.heads = m.heads.unwrap_or(heads);
    c.refiner_width = config.cyclegan.refiner_width;
    macro_rules! over {
        ($($field:ident),*) => { $( if let Some(v) = m.$field { c.$field = v; } )* };
    }
    over!(qkv_bias, attn_scale, norm_eps, norm_center, init);
    c.validate().map_err(|e| match e {
        Error::Config { field, message } => Error::config(format!("model ({field} of the generator)"), message),
        other => other,
    })?;
    Ok(c)
}

/// FID of the generators' test translations.
struct FidEval {
    extractor: Extractor,
    tap: Tap,
    real_a: FeatureStats,
    real_b: FeatureStats,
    /// Test images per domain used.
    count: usize,
}

/// Quantises generated images (`[-1, 1]`) to uint8 as a saved PNG would hold them.
pub(crate) fn to_images(values: &[f32], n: usize, side: usize) -> Vec<Img> {
    let per = 3 * side * side;
    (0..n)
        .map(|i| Img {
            h: side,
            w: side,
            chw: values[i * per..(i + 1) * per].iter().map(|&v| crate::data::grid::to_u8(v)).collect(),
        })
        .collect()
}

/// The CycleGAN trainer.
pub struct CycleGan {
    pub g_a: VitUnet,
    pub g_b: VitUnet,
    pub d_a: Discriminator,
    pub d_b: Discriminator,
    opt: [Optimizer; 4],
    pool_a: ImagePool,
    pool_b: ImagePool,
    pub generator: VitUnetConfig,
    pub discriminator: DiscriminatorConfig,
    config: ExperimentConfig,
    device: Device,
    data: UnpairedData,
    fid: Option<FidEval>,
    /// Why FID is not measured, when it is not.
    pub fid_note: Option<String>,
    pub last_fid: Option<(f64, f64)>,
    samples_dir: PathBuf,
    /// Sample grids written since TensorBoard last took them.
    new_samples: Vec<(String, PathBuf)>,
    /// The ranks of a data-parallel run (see [`CycleGan::in_world`]).
    world: World,
}

/// The four networks' checkpoint prefixes, in the optimiser order.
const NETS: [&str; 4] = ["g_a", "g_b", "d_a", "d_b"];

impl CycleGan {
    /// Builds the networks (seeded) on `device` (without autodiff; it is added here).
    pub fn new(config: &ExperimentConfig, data: UnpairedData, device: &Device, run: &RunDir) -> Result<Self> {
        let generator = generator_config(config)?;
        let discriminator = DiscriminatorConfig::new(config.cyclegan.discriminator);
        discriminator.check_image_size("model.image_size", config.model.image_size)?;
        let (len_a, len_b) = data.train_len();
        if len_a.max(len_b) < config.batch_size {
            return Err(Error::config(
                "batch_size",
                format!("{} is larger than both domains ({len_a} A, {len_b} B images)", config.batch_size),
            ));
        }
        let ad = device.clone().autodiff();
        let key = |i: u64| Rng::keyed(&[config.seed, 0xC7C1E, i]).next_u64();
        let g_a = seeded(&ad, key(0), || VitUnet::new(&generator, &ad))?;
        let g_b = seeded(&ad, key(1), || VitUnet::new(&generator, &ad))?;
        let d_a = seeded(&ad, key(2), || Discriminator::new(&discriminator, &ad))?;
        let d_b = seeded(&ad, key(3), || Discriminator::new(&discriminator, &ad))?;
        let opt = std::array::from_fn(|_| Optimizer::new(config.optim.clone()));
        let pool = |i: u64| ImagePool::new(config.cyclegan.pool_size, key(10 + i));
        let (fid, fid_note) = match Self::fid_eval(config, &data, device) {
            Ok(f) => (Some(f), None),
            Err(note) => (None, Some(note)),
        };
        Ok(CycleGan {
            g_a,
            g_b,
            d_a,
            d_b,
            opt,
            pool_a: pool(0),
            pool_b: pool(1),
            generator,
            discriminator,
            config: config.clone(),
            device: ad,
            data,
            fid,
            fid_note,
            last_fid: None,
            samples_dir: run.root.join("samples"),
            new_samples: Vec::new(),
            world: World::single(),
        })
    }

    /// Trains as one rank of `world`: each rank runs the four networks on its slice of
    /// every global batch and the gradients are summed over the ranks (weighted by the
    /// slices' shares), as for classifiers. The history pools see the whole batch's
    /// generated images on every rank, in order ([`all_gather_rows`]), so that their
    /// draws, their contents and every rank's checkpoint are those of one process;
    /// each rank's discriminators then score its own rows of the pooled batch.
    /// Rank 0 alone measures FID (the loop hands its values to the others) and writes
    /// sample grids.
    pub fn in_world(mut self, world: World) -> Result<Self> {
        super::check_world(&self.config, &world)?;
        self.world = world;
        Ok(self)
    }

    /// The FID network and the real test images' statistics, or why FID is off.
    fn fid_eval(config: &ExperimentConfig, data: &UnpairedData, device: &Device) -> std::result::Result<FidEval, String> {
        let c = &config.cyclegan;
        if c.fid_every == 0 {
            return Err("cyclegan.fid_every = 0".into());
        }
        let (Some(ta), Some(tb)) = (&data.test_a, &data.test_b) else {
            return Err("the dataset has no testA/ testB/".into());
        };
        let tap = Tap::parse("cyclegan.fid_feature", &c.fid_feature.to_string()).map_err(|e| e.to_string())?;
        let mut count = ta.len.min(tb.len);
        if c.fid_images > 0 {
            count = count.min(c.fid_images);
        }
        if count <= tap.dim() {
            return Err(format!(
                "{count} test images per domain for {}-dimensional features: the covariance would be singular \
                 (use more test images or a smaller cyclegan.fid_feature)",
                tap.dim()
            ));
        }
        let resize = Resize::parse("cyclegan.fid_preprocess", &c.fid_preprocess).map_err(|e| e.to_string())?;
        let weights = (!c.fid_weights.is_empty()).then(|| Path::new(&c.fid_weights));
        let extractor = Extractor::load(weights, device.clone(), resize, 50).map_err(|e| e.to_string())?;
        let stats = |d: &DomainImages, name: &str| {
            FeatureStats::from_features(&extractor.features(&d.images(count), tap), tap.dim(), name).map_err(|e| e.to_string())
        };
        let real_a = stats(ta, "real test A")?;
        let real_b = stats(tb, "real test B")?;
        Ok(FidEval { extractor, tap, real_a, real_b, count })
    }

    /// `g` applied to `images` (`[n, 3, S, S]`, host) in inference batches.
    pub(crate) fn translate(g: &VitUnet, images: &[f32], n: usize, side: usize, device: &Device) -> Vec<f32> {
        let per = 3 * side * side;
        let mut out = Vec::with_capacity(n * per);
        for start in (0..n).step_by(32) {
            let k = (n - start).min(32);
            let x = Tensor::<4>::from_data(
                TensorData::new(images[start * per..(start + k) * per].to_vec(), [k, 3, side, side]),
                device,
            );
            out.extend(tensor_to_vec(g.forward(x)));
        }
        out
    }

    /// The sample sheet: columns A, G_A(A), G_B(G_A(A)), B, G_B(B), G_A(G_B(B)) on the
    /// first `cyclegan.samples` test images (train images when there is no test split).
    pub fn write_samples(&self, path: &Path) -> Result<()> {
        let (n, ra, rb) = self.data.sample_images(self.config.cyclegan.samples.max(1));
        let side = self.config.model.image_size;
        let inner = self.device.clone().inner();
        let (g_a, g_b) = (self.g_a.valid(), self.g_b.valid());
        let fb = Self::translate(&g_a, &ra, n, side, &inner);
        let rec_a = Self::translate(&g_b, &fb, n, side, &inner);
        let fa = Self::translate(&g_b, &rb, n, side, &inner);
        let rec_b = Self::translate(&g_a, &fa, n, side, &inner);
        let shape = vec![n, 3, side, side];
        let cols: Vec<HostTensor> =
            [ra, fb, rec_a, rb, fa, rec_b].into_iter().map(|d| HostTensor::new(shape.clone(), d)).collect();
        crate::data::grid::write_image_grid(path, &cols)
    }

    fn pool_tensors(pool: &ImagePool, prefix: &str, out: &mut TensorMap) {
        let (images, rng) = pool.state();
        if let Some(first) = images.first() {
            let [c, h, w] = first.dims();
            let data: Vec<f32> = images.iter().flat_map(|t| tensor_to_vec(t.clone().inner())).collect();
            out.insert(format!("{prefix}.images"), HostTensor::new(vec![images.len(), c, h, w], data));
        }
        // The 64-bit generator state as four exact 16-bit pieces.
        let pieces = (0..4).map(|i| ((rng >> (16 * i)) & 0xFFFF) as f32).collect();
        out.insert(format!("{prefix}.rng"), HostTensor::new(vec![4], pieces));
    }

    fn restore_pool(pool: &mut ImagePool, tensors: &TensorMap, prefix: &str, device: &Device, source: &Path) -> Result<()> {
        let rng = tensors
            .get(&format!("{prefix}.rng"))
            .filter(|t| t.data.len() == 4)
            .ok_or_else(|| Error::weights(source, format!("checkpoint has no `{prefix}.rng` (the history pool's state)")))?;
        let state = rng.data.iter().enumerate().fold(0u64, |s, (i, &v)| s | ((v as u64) << (16 * i)));
        let images = match tensors.get(&format!("{prefix}.images")) {
            Some(t) => {
                let [n, c, h, w] = t.shape[..] else {
                    return Err(Error::weights(source, format!("`{prefix}.images` has shape {:?}", t.shape)));
                };
                let all = Tensor::<4>::from_data(TensorData::new(t.data.clone(), [n, c, h, w]), device);
                (0..n).map(|i| all.clone().narrow(0, i, 1).reshape([c, h, w])).collect()
            }
            None => Vec::new(),
        };
        pool.restore(images, state)
    }
}

fn combine(stats: &[&GradStats]) -> GradStats {
    GradStats {
        max_abs: stats.iter().map(|s| s.max_abs).fold(0.0, f64::max),
        global_norm: stats.iter().map(|s| s.global_norm.powi(2)).sum::<f64>().sqrt(),
        finite: stats.iter().all(|s| s.finite),
        block_norms: Vec::new(),
    }
}

impl Task for CycleGan {
    type Batch = PairBatch;

    fn batches_per_epoch(&self) -> usize {
        self.data.batches_per_epoch()
    }

    fn train_batches(&self, epoch: usize, start: usize) -> Box<dyn Iterator<Item = PairBatch>> {
        Box::new(self.data.epoch(epoch as u64, start))
    }

    fn batch_len(batch: &PairBatch) -> usize {
        batch.len()
    }

    fn step(&mut self, batch: PairBatch, ctx: &StepContext) -> Result<StepOutput> {
        let s = self.config.model.image_size;
        let global = batch.len();
        let rows = self.world.slice(global);
        let share = rows.len() as f64 / global.max(1) as f64;
        let batch = batch.rows(rows.clone());
        let shape = [batch.len(), 3, s, s];
        let real_a = Tensor::<4>::from_data(TensorData::new(batch.a.images, shape), &self.device);
        let real_b = Tensor::<4>::from_data(TensorData::new(batch.b.images, shape), &self.device);
        let (lc, li) = (self.config.cyclegan.lambda_cycle, self.config.cyclegan.lambda_identity);

        // Generators.
        let fake_b = self.g_a.forward(real_a.clone());
        let fake_a = self.g_b.forward(real_b.clone());
        let rec_a = self.g_b.forward(fake_b.clone());
        let rec_b = self.g_a.forward(fake_a.clone());
        // The discriminators score the fakes with their parameters frozen (fresh untracked
        // leaves over the same weights, as PyTorch's `requires_grad_(False)`): the G loss
        // backpropagates into the images only, not into gradients the G step would discard.
        let (frozen_a, frozen_b) = (self.d_a.clone().no_grad(), self.d_b.clone().no_grad());
        let (score_b, score_a) = (frozen_a.forward(fake_b.clone()), frozen_b.forward(fake_a.clone()));
        let max_score = Tensor::cat(vec![score_b.clone().detach().abs().max(), score_a.clone().detach().abs().max()], 0).max();
        let g_a = lsgan_generator_loss(score_b);
        let g_b = lsgan_generator_loss(score_a);
        let cycle_a = l1(rec_a, real_a.clone()).mul_scalar(lc);
        let cycle_b = l1(rec_b, real_b.clone()).mul_scalar(lc);
        let (idt_a, idt_b) = if li > 0.0 {
            (
                l1(self.g_a.forward(real_b.clone()), real_b.clone()).mul_scalar(lc * li),
                l1(self.g_b.forward(real_a.clone()), real_a.clone()).mul_scalar(lc * li),
            )
        } else {
            (Tensor::zeros([1], &self.device), Tensor::zeros([1], &self.device))
        };
        let loss_g = g_a.clone() + g_b.clone() + cycle_a.clone() + cycle_b.clone() + idt_a.clone() + idt_b.clone();
        let mut grads_g = loss_g.backward();
        all_reduce_gradients(&[&self.g_a, &self.g_b], &mut grads_g, share, &self.world)?;
        let (st_ga, st_gb) = (grad_stats(&self.g_a, &grads_g), grad_stats(&self.g_b, &grads_g));

        // Discriminators, on detached generated images through the history pools (over
        // the whole batch, in order, on every rank; then this rank's rows).
        let pooled = |pool: &mut ImagePool, fake: Tensor<4>| -> Result<Tensor<4>> {
            let all = pool.query(all_gather_rows(&self.world, fake, global)?);
            Ok(if rows.len() == global { all } else { all.narrow(0, rows.start, rows.len()) })
        };
        let pooled_b = pooled(&mut self.pool_a, fake_b)?;
        let pooled_a = pooled(&mut self.pool_b, fake_a)?;
        let d_a = lsgan_discriminator_loss(self.d_a.forward(real_b), self.d_a.forward(pooled_b));
        let d_b = lsgan_discriminator_loss(self.d_b.forward(real_a), self.d_b.forward(pooled_a));
        let mut grads_d = (d_a.clone() + d_b.clone()).backward();
        all_reduce_gradients(&[&self.d_a, &self.d_b], &mut grads_d, share, &self.world)?;
        let (st_da, st_db) = (grad_stats(&self.d_a, &grads_d), grad_stats(&self.d_b, &grads_d));

        // One transfer for every scalar; over the ranks, the share-weighted sum of the
        // losses (the whole batch's means) and the largest score.
        let parts = vec![d_a, d_b, g_a, g_b, cycle_a, cycle_b, idt_a, idt_b, max_score.reshape([1])];
        let mut v: Vec<f64> =
            tensor_to_vec(Tensor::cat(parts.into_iter().map(|t| t.detach()).collect(), 0)).into_iter().map(f64::from).collect();
        if self.world.size() > 1 {
            v[..8].iter_mut().for_each(|x| *x *= share);
            self.world.all_reduce_f64(&mut v[..8], Reduce::Sum)?;
            self.world.all_reduce_f64(&mut v[8..], Reduce::Max)?;
        }
        let loss = v[2..8].iter().sum::<f64>();
        let all = combine(&[&st_ga, &st_gb, &st_da, &st_db]);
        let explosion: Option<Explosion> = ctx.check(loss + v[0] + v[1], v[8], &all);
        let (gs, ds) = (ctx.clip_scale(&combine(&[&st_ga, &st_gb])), ctx.clip_scale(&combine(&[&st_da, &st_db])));
        if explosion.is_none() {
            let [oga, ogb, oda, odb] = &mut self.opt;
            self.g_a = oga.step(self.g_a.clone(), &grads_g, ctx.lr, gs);
            self.g_b = ogb.step(self.g_b.clone(), &grads_g, ctx.lr, gs);
            self.d_a = oda.step(self.d_a.clone(), &grads_d, ctx.lr, ds);
            self.d_b = odb.step(self.d_b.clone(), &grads_d, ctx.lr, ds);
        }
        let mut extra = v[..8].to_vec();
        extra.extend([st_ga.max_abs, st_gb.max_abs, st_da.max_abs, st_db.max_abs]);
        let values = [vec![loss, v[8], all.max_abs, all.global_norm, ctx.lr, gs, ds], extra.clone()].concat();
        Ok(StepOutput { loss, values, epoch_values: [vec![loss], extra].concat(), blocks: Vec::new(), explosion })
    }

    fn validate(&mut self, epochs_done: usize) -> Result<Option<Validation>> {
        let Some(fid) = &self.fid else { return Ok(None) };
        let (Some(ta), Some(tb)) = (&self.data.test_a, &self.data.test_b) else { return Ok(None) };
        // Measured every fid_every epochs and after the last.
        if !epochs_done.is_multiple_of(self.config.cyclegan.fid_every) && epochs_done != self.config.epochs {
            return Ok(None);
        }
        if !self.world.writes() {
            // The loop replaces these by rank 0's values.
            return Ok(Some(Validation { values: vec![f64::NAN; 2], score: f64::NAN }));
        }
        let inner = self.device.clone().inner();
        let (n, side) = (fid.count, self.config.model.image_size);
        let fake_a = Self::translate(&self.g_b.valid(), &tb.floats(n), n, side, &inner);
        let fake_b = Self::translate(&self.g_a.valid(), &ta.floats(n), n, side, &inner);
        let stats = |v: &[f32], name: &str| {
            FeatureStats::from_features(&fid.extractor.features(&to_images(v, n, side), fid.tap), fid.tap.dim(), name)
        };
        let fid_a = frechet_distance(&fid.real_a, "real test A", &stats(&fake_a, "G_B(test B)")?, "G_B(test B)")?;
        let fid_b = frechet_distance(&fid.real_b, "real test B", &stats(&fake_b, "G_A(test A)")?, "G_A(test A)")?;
        self.last_fid = Some((fid_a, fid_b));
        Ok(Some(Validation { values: vec![fid_a, fid_b], score: fid_a + fid_b }))
    }

    fn selection(&self) -> Option<Selection> {
        self.fid.as_ref().map(|_| Selection { name: "FID_A + FID_B".into(), higher_is_better: false })
    }

    fn checkpoint_tensors(&self) -> TensorMap {
        let mut t = TensorMap::new();
        let nets = [collect(&self.g_a), collect(&self.g_b), collect(&self.d_a), collect(&self.d_b)];
        for ((name, net), opt) in NETS.iter().zip(nets).zip(&self.opt) {
            t.extend(net.into_iter().map(|(k, v)| (format!("{name}.{k}"), v)));
            t.extend(opt.state().into_iter().map(|(k, v)| (format!("optim_{name}.{k}"), v)));
        }
        Self::pool_tensors(&self.pool_a, "pool_a", &mut t);
        Self::pool_tensors(&self.pool_b, "pool_b", &mut t);
        t
    }

    fn restore(&mut self, tensors: &TensorMap, state: &LoopState, source: &Path) -> Result<()> {
        self.g_a = apply(self.g_a.clone(), &group(tensors, "g_a"), source)?;
        self.g_b = apply(self.g_b.clone(), &group(tensors, "g_b"), source)?;
        self.d_a = apply(self.d_a.clone(), &group(tensors, "d_a"), source)?;
        self.d_b = apply(self.d_b.clone(), &group(tensors, "d_b"), source)?;
        for (name, opt) in NETS.iter().zip(self.opt.iter_mut()) {
            opt.load_state(&group(tensors, &format!("optim_{name}")), state.step);
        }
        Self::restore_pool(&mut self.pool_a, tensors, "pool_a", &self.device, source)?;
        Self::restore_pool(&mut self.pool_b, tensors, "pool_b", &self.device, source)?;
        Ok(())
    }

    fn checkpoint_metadata(&self) -> HashMap<String, String> {
        HashMap::from([
            ("task".into(), "cyclegan".into()),
            ("generator_config".into(), serde_json::to_string(&self.generator).expect("json")),
            ("discriminator_config".into(), serde_json::to_string(&self.discriminator).expect("json")),
        ])
    }

    /// The generators' loss (G + cycle + identity terms), the largest |discriminator score|
    /// on the fakes (what the explosion check watches), the gradient monitors over all four
    /// networks, the LR, the clip scales of the generators and of the discriminators, then
    /// each loss term and each network's max |gradient|.
    fn step_columns(&self) -> Vec<String> {
        ["loss", "max_d_score", "max_grad", "grad_norm", "lr", "clip_scale_g", "clip_scale_d"]
            .iter()
            .chain(STEP_COLUMNS.iter())
            .map(|s| s.to_string())
            .collect()
    }

    fn train_columns(&self) -> Vec<String> {
        std::iter::once("train_loss").chain(STEP_COLUMNS).map(String::from).collect()
    }

    fn validation_columns(&self) -> Vec<String> {
        VALIDATION_COLUMNS.iter().map(|s| s.to_string()).collect()
    }

    fn after_step(&mut self, step: u64, total_steps: u64) -> Result<()> {
        let frac = self.config.cyclegan.sample_every;
        if frac <= 0.0 || !self.world.writes() {
            return Ok(());
        }
        let every = ((total_steps as f64 * frac).round() as u64).max(1);
        if step.is_multiple_of(every) || step == total_steps {
            std::fs::create_dir_all(&self.samples_dir).map_err(|e| Error::io(&self.samples_dir, e))?;
            let path = self.samples_dir.join(format!("step_{step:07}.png"));
            self.write_samples(&path)?;
            if self.config.tensorboard {
                self.new_samples.push(("samples".into(), path));
            }
        }
        Ok(())
    }

    fn take_images(&mut self) -> Vec<(String, PathBuf)> {
        std::mem::take(&mut self.new_samples)
    }
}

/// results.json of a CycleGAN run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// What every run's results.json holds (task, exit cause, score, steps, parameters, ...).
    #[serde(flatten)]
    pub summary: Summary,
    /// FID_A and FID_B after the last epoch (when measured).
    pub fid_a: Option<f64>,
    pub fid_b: Option<f64>,
    /// Why FID was not measured, when it was not.
    pub fid_note: Option<String>,
    /// The best FID_A + FID_B (the `best` checkpoint; its epoch is `best_epoch`).
    pub best_fid_sum: Option<f64>,
    pub fid_feature: usize,
    pub fid_preprocess: String,
    /// Parameters of one generator and of one discriminator.
    pub generator_params: usize,
    pub discriminator_params: usize,
    pub generator: VitUnetConfig,
    pub discriminator: DiscriminatorConfig,
    pub data: String,
}

/// Trains (or resumes) a CycleGAN in `run` with a prepared config (see [`super::train`]).
pub fn train_prepared(
    config: ExperimentConfig,
    checkpoint: Option<Checkpoint>,
    run: &RunDir,
    world: &World,
    progress: &mut dyn Observer,
) -> Result<Results> {
    let device = config.backend.device()?;
    let pairs = PairConfig {
        batch_size: config.batch_size,
        image_size: config.model.image_size,
        load_size: config.cyclegan.load_size,
        flip: config.cyclegan.flip,
        workers: config.data.workers,
        seed: config.seed,
        limit: config.data.limit,
    };
    let data = UnpairedData::load(&config.data.path, &pairs)?;
    progress.message(&format!("data: {}", data.description));
    let mut task = CycleGan::new(&config, data, &device, run)?.in_world(world.clone())?;
    let (gp, dp) = (task.generator.param_count(), task.discriminator.param_count());
    progress.message(&format!(
        "generators: 2 x {} {} ({gp} parameters each), discriminators: 2 x {} ({dp} each), backend {}",
        config.model.block, config.model.size, config.cyclegan.discriminator, config.backend
    ));
    match &task.fid_note {
        Some(note) => progress.message(&format!("FID_A / FID_B not measured: {note}")),
        None => progress.message(&format!(
            "FID_A / FID_B: {} features, {} preprocessing, every {} epoch(s)",
            config.cyclegan.fid_feature, config.cyclegan.fid_preprocess, config.cyclegan.fid_every
        )),
    }
    let outcome = run_loop(&mut task, &config, run, checkpoint.as_ref(), world, progress)?;
    let summary = Summary::new(crate::config::TaskKind::Cyclegan, &outcome, task.selection(), 2 * (gp + dp), &config);
    let results = Results {
        summary,
        fid_a: task.last_fid.map(|f| f.0),
        fid_b: task.last_fid.map(|f| f.1),
        fid_note: task.fid_note.clone(),
        best_fid_sum: outcome.best_score,
        fid_feature: config.cyclegan.fid_feature,
        fid_preprocess: config.cyclegan.fid_preprocess.clone(),
        generator_params: gp,
        discriminator_params: dp,
        generator: task.generator.clone(),
        discriminator: task.discriminator.clone(),
        data: task.data.description.clone(),
    };
    if world.writes() {
        let json = serde_json::to_string_pretty(&results).expect("results serialise");
        crate::util::fs::atomic_write(&run.results(), json.as_bytes())?;
    }
    Ok(results)
}

impl std::ops::Deref for Results {
    type Target = Summary;
    fn deref(&self) -> &Summary {
        &self.summary
    }
}
