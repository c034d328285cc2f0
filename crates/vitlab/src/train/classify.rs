//! Image classification: the trainer behind `vitlab train` (its data splits,
//! the step, validation, checkpoints and results.json). Evaluation and
//! prediction from checkpoints are in [`super::predict`] (re-exported here).

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use burn::module::Module;
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::ema::Ema;
use super::optim::{grad_stats, Optimizer};
use super::{
    run_loop, BlockMonitor, Checkpoint, Explosion, LoopState, Observer, RunDir, Selection, StepContext, StepOutput, Summary,
    Task, Validation,
};
use crate::config::ExperimentConfig;
use crate::data::loader::{Loader, LoaderConfig};
use crate::data::{stratified_split, Batch, ImageSet};
use crate::distributed::{all_reduce_gradients, Reduce, World};
use crate::metrics::ClassificationMetrics;
use crate::models::weights::{apply, collect};
use crate::models::{param_count, DropPath, ModelConfig, Vit};
use crate::tensor_file::{group, tensor_to_vec, HostTensor, TensorMap};
use crate::util::Rng;
use crate::{Error, Result};

/// The splits a classification run uses.
pub struct Splits {
    pub train: Arc<ImageSet>,
    pub train_indices: Vec<usize>,
    /// Validation images: a held-out part of train, or the test split with `val_on_test`.
    pub val: Option<(Arc<ImageSet>, Vec<usize>)>,
    pub test: Option<Arc<ImageSet>>,
    pub classes: Vec<String>,
    /// What was loaded, for the log.
    pub description: String,
    pub warnings: Vec<String>,
}

/// Loads the configured dataset and carves the validation split.
pub fn load_splits(config: &ExperimentConfig) -> Result<Splits> {
    let d = &config.data;
    let (train, test, description) = if d.path == "synthetic" {
        let train = ImageSet::synthetic(d.synthetic_train, d.synthetic_classes, d.synthetic_size, config.seed);
        let test = ImageSet::synthetic(d.synthetic_test, d.synthetic_classes, d.synthetic_size, config.seed ^ 0xABCD);
        let desc = format!(
            "synthetic: {} train / {} test images, {} classes, {}x{}",
            train.len(),
            test.len(),
            d.synthetic_classes,
            d.synthetic_size,
            d.synthetic_size
        );
        (train, Some(test), desc)
    } else {
        let ds = crate::data::open(&d.path)?;
        let desc = ds.summary();
        (ds.train, ds.test, desc)
    };
    let classes = train.classes.clone();
    let train = Arc::new(train);
    let test = test.map(Arc::new);
    let mut warnings = Vec::new();
    let all: Vec<usize> = (0..train.len()).collect();
    let (mut train_indices, val) = if d.val_on_test {
        let test = test
            .clone()
            .ok_or_else(|| Error::config("data.val_on_test", format!("{} has no test split to validate on", d.path)))?;
        warnings.push(
            "validating on the test split (data.val_on_test = true), as the paper's code does: \
             early stopping and the best checkpoint then peek at the test set"
                .to_string(),
        );
        let idx = (0..test.len()).collect();
        (all, Some((test, idx)))
    } else if d.val_size > 0 {
        if d.val_size >= train.len() {
            return Err(Error::config(
                "data.val_size",
                format!("{} validation images leave none of the {} training images", d.val_size, train.len()),
            ));
        }
        let (tr, va) = stratified_split(&train.labels, d.val_size, config.seed);
        (tr, Some((train.clone(), va)))
    } else {
        (all, None)
    };
    if d.limit > 0 {
        train_indices = limit_stratified(&train_indices, &train.labels, d.limit, config.seed);
    }
    Ok(Splits { train, train_indices, val, test, classes, description, warnings })
}

/// A seeded subset of `limit` training images with every class in proportion
/// (image folders list files class by class, so the first `limit` would be a
/// few classes only). Returned in ascending order.
fn limit_stratified(indices: &[usize], labels: &[u32], limit: usize, seed: u64) -> Vec<usize> {
    if limit >= indices.len() {
        return indices.to_vec();
    }
    let sub: Vec<u32> = indices.iter().map(|&i| labels[i]).collect();
    let (_, keep) = stratified_split(&sub, limit, seed ^ 0x004C_494D_4954);
    let mut kept: Vec<usize> = keep.into_iter().map(|j| indices[j]).collect();
    kept.sort_unstable();
    kept
}

/// The classification trainer.
pub struct Classifier {
    pub model: Vit,
    pub model_config: ModelConfig,
    optim: Optimizer,
    config: ExperimentConfig,
    device: Device,
    loader: Loader,
    val: Option<(Arc<ImageSet>, Vec<usize>)>,
    classes: Vec<String>,
    /// The weight average (`[ema]`), used for validation, `best` and test when on.
    ema: Option<Ema<Vit>>,
    /// Stochastic-depth rate of each block (empty or all 0: off).
    drop_rates: Vec<f64>,
    /// The ranks of a data-parallel run (each trains on its slice of every batch).
    world: World,
}

impl Classifier {
    /// Builds the model (seeded) on `device` (without autodiff; it is added here).
    pub fn new(config: &ExperimentConfig, splits: &Splits, device: &Device) -> Result<Self> {
        let model_config = config.model.resolve(splits.classes.len(), splits.train.channels)?;
        if splits.train.height != splits.train.width {
            return Err(Error::config(
                "data.path",
                format!("images are {}x{}; vitlab's models take square images", splits.train.height, splits.train.width),
            ));
        }
        let ad = device.clone().autodiff();
        let model = Vit::seeded(&model_config, &ad, config.seed)?;
        if config.ema.enabled() && model.head_bn.is_some() {
            return Err(Error::config(
                "ema.decay",
                "the paper head of vit22b-code has BatchNorm statistics, which the weight average does not track; \
                 use model.head = \"linear\" or ema.decay = 0",
            ));
        }
        let model = if config.init.freeze { super::pretrained::freeze_trunk(model) } else { model };
        let depth = model_config.depth;
        let ema = config.ema.enabled().then(|| Ema::new(model.valid(), config.ema.clone()));
        let drop_rates = DropPath::rates(config.model.drop_path, model_config.depth, config.model.drop_path_schedule);
        let loader = Loader::new(
            splits.train.clone(),
            splits.train_indices.clone(),
            LoaderConfig {
                batch_size: config.batch_size,
                image_size: config.model.image_size,
                augment: config.augment.clone(),
                normalize: config.data.normalize.clone(),
                shuffle: true,
                drop_last: true,
                workers: config.data.workers,
                seed: config.seed,
                label_smoothing: config.loss.label_smoothing,
                load_size: 0,
                epoch_images: 0,
            },
        )?;
        Ok(Classifier {
            model,
            model_config,
            optim: Optimizer::for_vit(config.optim.clone(), depth),
            config: config.clone(),
            device: ad,
            loader,
            val: splits.val.clone(),
            classes: splits.classes.clone(),
            ema,
            drop_rates,
            world: World::single(),
        })
    }

    /// Trains as one rank of `world`: on its slice of every global batch, with the
    /// gradients summed over the ranks (see [`crate::distributed`]).
    pub fn in_world(mut self, world: World) -> Result<Self> {
        super::check_world(&self.config, &world)?;
        let k = world.size();
        if k > 1 && self.model.head_bn.is_some() {
            return Err(Error::config(
                "model.head",
                format!(
                    "the paper head of vit22b-code has BatchNorm, whose batch statistics would differ between the {k} \
                     ranks (not synchronised); use model.head = \"linear\" or one process"
                ),
            ));
        }
        self.world = world;
        Ok(self)
    }

    /// Starts from the pretrained weights of `init.from` (see
    /// [`super::pretrained::init_from`]), the weight average with them; returns
    /// what was loaded, for the log.
    pub fn init_from(&mut self, from: &Path) -> Result<String> {
        let (model, note) = super::pretrained::init_from(self.model.clone(), from, &self.classes)?;
        self.model = model;
        if let Some(ema) = &mut self.ema {
            *ema = Ema::new(self.model.valid(), self.config.ema.clone());
        }
        Ok(note)
    }

    /// Cross-entropy against soft targets (a mixed batch's, which carry the label
    /// smoothing, or the labels smoothed by `loss.label_smoothing`) plus the
    /// logit stabilisers.
    fn loss(&self, logits: Tensor<2>, labels: &[u32], soft: Option<Vec<f32>>) -> Tensor<1> {
        let [b, k] = logits.dims();
        let eps = self.config.loss.label_smoothing;
        let target = soft.unwrap_or_else(|| {
            let mut target = vec![(eps / k as f64) as f32; b * k];
            for (i, &y) in labels.iter().enumerate() {
                target[i * k + y as usize] += (1.0 - eps) as f32;
            }
            target
        });
        let target = Tensor::<2>::from_data(TensorData::new(target, [b, k]), &self.device);
        let mut loss = (log_softmax(logits.clone(), 1) * target).sum_dim(1).mean().neg();
        let s = &self.config.stabilizers;
        if s.z_loss > 0.0 {
            // PaLM's z-loss: coef * log(Z)^2, Z = sum(exp(logits)).
            let max = logits.clone().detach().max_dim(1);
            let lse = (logits.clone() - max.clone()).exp().sum_dim(1).log() + max;
            loss = loss + lse.powi_scalar(2).mean().mul_scalar(s.z_loss);
        }
        if s.logit_l2 > 0.0 {
            loss = loss + logits.powi_scalar(2).mean().mul_scalar(s.logit_l2);
        }
        loss
    }

    /// The model in inference mode on the plain device: the weight average when
    /// `[ema]` is on, else the trained weights.
    pub fn inference_model(&self) -> Vit {
        match &self.ema {
            Some(e) => e.model.clone(),
            None => self.model.valid(),
        }
    }
}

impl Task for Classifier {
    type Batch = Batch;

    fn batches_per_epoch(&self) -> usize {
        self.loader.batches_per_epoch()
    }

    fn train_batches(&self, epoch: usize, start: usize) -> Box<dyn Iterator<Item = Batch>> {
        Box::new(self.loader.epoch(epoch as u64, start))
    }

    fn batch_len(batch: &Batch) -> usize {
        batch.labels.len()
    }

    fn step(&mut self, batch: Batch, ctx: &StepContext) -> Result<StepOutput> {
        // The whole batch's stochastic depth is drawn on every rank, then sliced.
        let mut rng = Rng::keyed(&[self.config.seed, ctx.step, 0x4452_4F50]);
        let drop = DropPath::draw(&self.drop_rates, self.model_config.block, batch.shape[0], &mut rng, &self.device);
        let global = batch.labels.len();
        let (batch, drop) = rows_of(batch, drop, self.world.slice(global));
        let share = batch.labels.len() as f64 / global.max(1) as f64;
        let x = Tensor::<4>::from_data(TensorData::new(batch.images, batch.shape), &self.device);
        let (logits, probes) = self.model.forward_train(x, ctx.probe_blocks, drop.as_ref());
        // Under Mixup / CutMix the training accuracy counts a prediction correct when
        // it is the class with the largest target weight (the dominant image's label).
        let k = logits.dims()[1];
        let truth: Vec<u32> = match &batch.targets {
            Some(t) => t
                .chunks(k)
                .map(|row| row.iter().enumerate().fold((0, f32::MIN), |m, (c, &v)| if v > m.1 { (c, v) } else { m }).0 as u32)
                .collect(),
            None => batch.labels.clone(),
        };
        let loss = self.loss(logits.clone(), &batch.labels, batch.targets);
        // One transfer for the scalars the monitors need.
        let [b, _] = logits.dims();
        let detached = logits.detach();
        let head = Tensor::cat(vec![loss.clone().detach(), detached.clone().max()], 0);
        let mut scalars = tensor_to_vec(head);
        let preds = tensor_to_vec(detached.argmax(1).float().reshape([b]));
        let (mut loss_value, mut max_logit) = (scalars.remove(0) as f64, scalars.remove(0) as f64);
        let mut correct = preds.iter().zip(&truth).filter(|(p, &y)| **p as u32 == y).count() as f64;

        let mut grads = loss.backward();
        if self.world.size() > 1 {
            all_reduce_gradients(&[&self.model], &mut grads, share, &self.world)?;
            let mut sums = [loss_value * share, correct];
            self.world.all_reduce_f64(&mut sums, Reduce::Sum)?;
            let mut max = [max_logit];
            self.world.all_reduce_f64(&mut max, Reduce::Max)?;
            (loss_value, correct, max_logit) = (sums[0], sums[1], max[0]);
        }
        let stats = grad_stats(&self.model, &grads);
        let blocks = if probes.is_empty() {
            Vec::new()
        } else {
            let n = probes.len();
            let flat: Vec<Tensor<1>> = probes.into_iter().flat_map(|p| [p.act_rms, p.max_attn_logit]).collect();
            let v = tensor_to_vec(Tensor::cat(flat, 0));
            (0..n)
                .map(|i| BlockMonitor {
                    grad_norm: stats.block_norms.get(i).copied().unwrap_or(f64::NAN),
                    act_rms: v[2 * i] as f64,
                    max_attn_logit: v[2 * i + 1] as f64,
                })
                .collect()
        };
        let explosion: Option<Explosion> = ctx.check(loss_value, max_logit, &stats);
        let scale = ctx.clip_scale(&stats);
        if explosion.is_none() {
            self.model = self.optim.step(self.model.clone(), &grads, ctx.lr, scale);
            if let Some(ema) = &mut self.ema {
                ema.update(&self.model.valid());
            }
        }
        Ok(StepOutput {
            loss: loss_value,
            values: vec![loss_value, max_logit, stats.max_abs, stats.global_norm, ctx.lr, scale],
            epoch_values: vec![loss_value, correct / global.max(1) as f64],
            blocks,
            explosion,
        })
    }

    fn step_columns(&self) -> Vec<String> {
        ["loss", "max_logit", "max_grad", "grad_norm", "lr", "clip_scale"].map(String::from).to_vec()
    }

    fn train_columns(&self) -> Vec<String> {
        vec!["train_loss".into(), "train_acc".into()]
    }

    fn selection(&self) -> Option<Selection> {
        self.val.as_ref().map(|_| Selection { name: "val_acc".into(), higher_is_better: true })
    }

    fn validate(&mut self, _epochs_done: usize) -> Result<Option<Validation>> {
        let Some((set, idx)) = &self.val else { return Ok(None) };
        let model = self.inference_model();
        let inner = self.device.clone().inner();
        let m = evaluate(&model, set, idx, &self.config, &inner);
        let mut values = vec![m.loss, m.top1];
        // With the average selecting `best`, the trained weights are measured too.
        if self.ema.is_some() {
            let raw = evaluate(&self.model.valid(), set, idx, &self.config, &inner);
            values.extend([raw.loss, raw.top1]);
        }
        Ok(Some(Validation { values, score: m.top1 }))
    }

    fn validation_columns(&self) -> Vec<String> {
        let mut c = vec!["val_loss".to_string(), "val_acc".to_string()];
        if self.ema.is_some() {
            c.extend(["model_val_loss".to_string(), "model_val_acc".to_string()]);
        }
        c
    }

    fn checkpoint_tensors(&self) -> TensorMap {
        let mut t: TensorMap = collect(&self.model).into_iter().map(|(k, v)| (format!("model.{k}"), v)).collect();
        t.extend(self.optim.state().into_iter().map(|(k, v)| (format!("optim.{k}"), v)));
        if let Some(e) = &self.ema {
            t.extend(collect(&e.model).into_iter().map(|(k, v)| (format!("ema.{k}"), v)));
            // The update count (exact in f32 up to 2^24 steps) sets the warmup's decay.
            t.insert("ema_state.updates".into(), HostTensor::new(vec![1], vec![e.updates as f32]));
        }
        t
    }

    fn restore(&mut self, tensors: &TensorMap, state: &LoopState, source: &Path) -> Result<()> {
        self.model = apply(self.model.clone(), &group(tensors, "model"), source)?;
        self.optim.load_state(&group(tensors, "optim"), state.step);
        if let Some(e) = &mut self.ema {
            let saved = group(tensors, "ema");
            if saved.is_empty() {
                // A run that turns the average on when resumed: it starts here.
                e.model = self.model.valid();
                e.updates = 0;
            } else {
                e.model = apply(e.model.clone(), &saved, source)?;
                e.updates = tensors.get("ema_state.updates").and_then(|t| t.data.first()).map_or(state.step, |&u| u as u64);
            }
        }
        Ok(())
    }

    fn checkpoint_metadata(&self) -> HashMap<String, String> {
        HashMap::from([
            ("model_config".into(), serde_json::to_string(&self.model_config).expect("json")),
            ("classes".into(), serde_json::to_string(&self.classes).expect("json")),
        ])
    }
}

/// results.json of a classification run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    /// What every run's results.json holds (exit cause, score, steps, parameters, ...).
    #[serde(flatten)]
    pub summary: Summary,
    pub test: Option<ClassificationMetrics>,
    /// Which checkpoint the test metrics come from (`best` or `latest`).
    pub test_checkpoint: Option<String>,
    /// Which weights of it: `ema` (the weight average, `[ema]` on) or `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_weights: Option<String>,
    /// With `[ema]` on: the same checkpoint's trained (not averaged) weights on test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_model: Option<ClassificationMetrics>,
    pub best_val_acc: Option<f64>,
    pub model: ModelConfig,
    pub classes: Vec<String>,
    pub data: String,
}

impl std::ops::Deref for Results {
    type Target = Summary;
    fn deref(&self) -> &Summary {
        &self.summary
    }
}

pub use super::predict::{
    checkpoint_classes, evaluate, image_loader, load_model, load_model_with, predict_files, predict_logits, Prediction, Weights,
};
pub use super::Start;

/// Trains (or resumes) a classifier in `run`; writes every run file and returns the results.
pub fn train(start: Start, run: &RunDir, progress: &mut dyn Observer) -> Result<Results> {
    let world = World::single();
    let (config, checkpoint) = super::prepare(&start, run, &world)?;
    if config.task != crate::config::TaskKind::Classify {
        return Err(Error::config("task", "this run is not a classifier; use vitlab::train::train"));
    }
    train_prepared(config, checkpoint, run, &world, progress)
}

/// Trains (or resumes) a classifier with a prepared config (see [`super::train`]).
pub fn train_prepared(
    config: ExperimentConfig,
    checkpoint: Option<Checkpoint>,
    run: &RunDir,
    world: &World,
    progress: &mut dyn Observer,
) -> Result<Results> {
    let device = config.backend.device()?;
    let splits = load_splits(&config)?;
    progress.message(&format!("data: {}", splits.description));
    for w in &splits.warnings {
        progress.message(&format!("warning: {w}"));
    }
    let mut task = Classifier::new(&config, &splits, &device)?.in_world(world.clone())?;
    // A resumed run's weights come from its checkpoint.
    if checkpoint.is_none() && !config.init.from.is_empty() {
        progress.message(&task.init_from(Path::new(&config.init.from))?);
    }
    progress.message(&format!(
        "model: {} {} ({} parameters), {} train images, backend {}",
        config.model.block,
        config.model.size,
        param_count(&task.model_config),
        splits.train_indices.len(),
        config.backend
    ));
    let outcome = run_loop(&mut task, &config, run, checkpoint.as_ref(), world, progress)?;

    // Test metrics from the best checkpoint (or the last good state), by rank 0 alone.
    let mut test_model = None;
    let (test, test_checkpoint) = match &splits.test {
        Some(test) if world.writes() => {
            let idx: Vec<usize> = (0..test.len()).collect();
            if config.ema.enabled() {
                let file = if run.best().exists() { run.best() } else { run.latest() };
                let (model, _, _) = load_model_with(&file, &device, Weights::Model)?;
                test_model = Some(evaluate(&model, test, &idx, &config, &device));
            }
            let (model, which) = if run.best().exists() {
                // A fresh model with the checkpoint's weights, exactly as `vitlab eval` loads
                // it. Loading into a clone of the training model instead shares burn's
                // `RunningState` with it, and `valid()` then folds the training's pending
                // BatchNorm statistics over the loaded ones: a `vit22b-code` paper model
                // (BatchNorm head) scored 0.24 that way where its best checkpoint scores 0.48.
                (load_model(&run.best(), &device)?.0, "best")
            } else {
                (task.inference_model(), "latest")
            };
            let m = evaluate(&model, test, &idx, &config, &device);
            (Some(m), Some(which.to_string()))
        }
        _ => (None, None),
    };
    let params = param_count(&task.model_config);
    let results = Results {
        summary: Summary::new(crate::config::TaskKind::Classify, &outcome, task.selection(), params, &config),
        test,
        test_checkpoint,
        test_weights: Some(if config.ema.enabled() { "ema" } else { "model" }.to_string()),
        test_model,
        best_val_acc: outcome.best_score,
        model: task.model_config.clone(),
        classes: splits.classes.clone(),
        data: splits.description.clone(),
    };
    if world.writes() {
        let json = serde_json::to_string_pretty(&results).expect("results serialise");
        crate::util::fs::atomic_write(&run.results(), json.as_bytes())?;
    }
    Ok(results)
}

/// Rows `rows` of a batch and of its stochastic-depth masks: a rank's slice.
fn rows_of(batch: Batch, drop: Option<DropPath>, rows: Range<usize>) -> (Batch, Option<DropPath>) {
    if rows == (0..batch.labels.len()) {
        return (batch, drop);
    }
    let drop = drop.map(|d| DropPath {
        masks: d.masks.into_iter().map(|block| block.into_iter().map(|m| m.slice([rows.clone()])).collect()).collect(),
    });
    (batch.rows(rows), drop)
}

#[cfg(test)]
mod tests {
    use super::limit_stratified;

    #[test]
    fn limit_keeps_every_class_in_proportion() {
        // 10 classes x 100 images, listed class by class as an image folder is.
        let labels: Vec<u32> = (0..1000).map(|i| (i / 100) as u32).collect();
        let indices: Vec<usize> = (0..1000).collect();
        let kept = limit_stratified(&indices, &labels, 300, 7);
        assert_eq!(kept.len(), 300);
        for c in 0..10u32 {
            let n = kept.iter().filter(|&&i| labels[i] == c).count();
            assert_eq!(n, 30, "class {c}");
        }
        assert!(kept.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(kept, limit_stratified(&indices, &labels, 300, 7), "seeded");
        assert_eq!(limit_stratified(&indices, &labels, 5000, 7), indices);
    }
}
