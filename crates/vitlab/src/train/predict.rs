//! Classifiers from checkpoints: evaluation (`vitlab eval`), prediction on
//! image files (`vitlab predict`), and the loading of a run's `best` or
//! `latest` checkpoint with its trained or averaged (EMA) weights.

use std::path::Path;
use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::{Checkpoint, RunDir};
use crate::config::ExperimentConfig;
use crate::data::loader::{Loader, LoaderConfig};
use crate::data::{Augment, ImageSet};
use crate::metrics::{softmax, ClassificationMetrics, Predictions};
use crate::models::weights::apply;
use crate::models::{ModelConfig, Vit};
use crate::tensor_file::tensor_to_vec;
use crate::{Error, Result};

/// Images `indices` of `set` in order, unaugmented and normalised as `config`'s
/// run trained on them, in batches of at least 256.
pub fn image_loader(set: &Arc<ImageSet>, indices: &[usize], config: &ExperimentConfig) -> Result<Loader> {
    Loader::new(
        set.clone(),
        indices.to_vec(),
        LoaderConfig {
            batch_size: config.batch_size.max(256),
            image_size: config.model.image_size,
            augment: Augment::none(),
            normalize: config.data.normalize.clone(),
            shuffle: false,
            drop_last: false,
            workers: config.data.workers,
            seed: config.seed,
            label_smoothing: 0.0,
            load_size: 0,
            epoch_images: 0,
        },
    )
}

/// Logits of `model` on images `indices` of `set` (inference, no autodiff), row-major.
pub fn predict_logits(
    model: &Vit,
    set: &Arc<ImageSet>,
    indices: &[usize],
    config: &ExperimentConfig,
    device: &Device,
) -> Vec<f32> {
    let loader = image_loader(set, indices, config).expect("an unaugmented loader with a positive batch size always builds");
    let mut out = Vec::with_capacity(indices.len() * set.classes.len());
    for batch in loader.epoch(0, 0) {
        let x = Tensor::<4>::from_data(TensorData::new(batch.images, batch.shape), device);
        out.extend(tensor_to_vec(model.forward(x)));
    }
    out
}

/// Metrics of `model` on images `indices` of `set`.
pub fn evaluate(
    model: &Vit,
    set: &Arc<ImageSet>,
    indices: &[usize],
    config: &ExperimentConfig,
    device: &Device,
) -> ClassificationMetrics {
    let logits = predict_logits(model, set, indices, config, device);
    let labels: Vec<u32> = indices.iter().map(|&i| set.labels[i]).collect();
    Predictions { logits: &logits, labels: &labels, classes: set.classes.len() }.summary()
}

/// Which weights of a checkpoint a model is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// The weight average when the checkpoint has one, else the trained weights.
    Auto,
    /// The weight average (an error when the checkpoint has none).
    Ema,
    /// The trained weights.
    Model,
}

/// A model with its weights from a checkpoint file or a run directory (its `best`,
/// else `latest`): the weight average when the run kept one (`[ema]`), else the
/// trained weights.
pub fn load_model(path: &Path, device: &Device) -> Result<(Vit, Checkpoint)> {
    load_model_with(path, device, Weights::Auto).map(|(m, c, _)| (m, c))
}

/// [`load_model`] with the choice of weights; also says which were used (`ema` or `model`).
pub fn load_model_with(path: &Path, device: &Device, weights: Weights) -> Result<(Vit, Checkpoint, &'static str)> {
    let file = checkpoint_file(path)?;
    let ck = Checkpoint::load(&file)?;
    let model_config: ModelConfig = ck
        .metadata
        .get("model_config")
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| Error::weights(&file, "checkpoint has no model_config metadata"))?;
    let has_ema = ck.tensors.keys().any(|k| k.starts_with("ema."));
    let which = match weights {
        Weights::Auto if has_ema => "ema",
        Weights::Ema if !has_ema => {
            return Err(Error::weights(&file, "the checkpoint has no weight average (its run had no [ema] section)"))
        }
        Weights::Ema => "ema",
        Weights::Auto | Weights::Model => "model",
    };
    let model = apply(Vit::new(&model_config, device)?, &ck.group(which), &file)?;
    Ok((model, ck, which))
}

/// A checkpoint file itself, or a run directory's `best` checkpoint, else its `latest`.
pub fn checkpoint_file(path: &Path) -> Result<std::path::PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let run = RunDir::new(path);
    if run.best().exists() {
        Ok(run.best())
    } else if run.latest().exists() {
        Ok(run.latest())
    } else {
        Err(Error::config(
            "checkpoint",
            format!("{} is a folder without checkpoints/best.safetensors or latest.safetensors", path.display()),
        ))
    }
}

/// The class names a classifier's checkpoint was trained on, in label order.
pub fn checkpoint_classes(ck: &Checkpoint) -> Result<Vec<String>> {
    ck.metadata
        .get("classes")
        .and_then(|c| serde_json::from_str(c).ok())
        .ok_or_else(|| Error::weights(&ck.path, "checkpoint has no class names (classes metadata)"))
}

/// One image's top classes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Prediction {
    pub path: std::path::PathBuf,
    /// (class name, probability), most probable first.
    pub top: Vec<(String, f64)>,
}

/// The `k` most probable classes of each image file under a checkpoint's model.
pub fn predict_files(
    checkpoint: &Path,
    images: &[std::path::PathBuf],
    k: usize,
    weights: Weights,
    device: &Device,
) -> Result<Vec<Prediction>> {
    let (model, ck, _) = load_model_with(checkpoint, device, weights)?;
    let classes = checkpoint_classes(&ck)?;
    let set = Arc::new(crate::data::read_images(images, ck.config.model.image_size, classes.clone())?);
    let idx: Vec<usize> = (0..set.len()).collect();
    let logits = predict_logits(&model, &set, &idx, &ck.config, device);
    let kc = classes.len();
    Ok(images
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let p = softmax(&logits[i * kc..(i + 1) * kc]);
            let mut order: Vec<usize> = (0..kc).collect();
            order.sort_by(|&a, &b| p[b].total_cmp(&p[a]));
            Prediction { path: path.clone(), top: order.into_iter().take(k).map(|c| (classes[c].clone(), p[c])).collect() }
        })
        .collect())
}
