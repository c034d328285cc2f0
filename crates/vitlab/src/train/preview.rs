//! Seeing the augmentations: the training images exactly as the loader
//! delivers them under an experiment config (`vitlab data preview`), and one
//! policy operation applied to one image file (`vitlab data augment`). It sits
//! with training, above the config it reads, and uses the data layer's loader,
//! policy operations and decoder.

use std::path::Path;
use std::sync::Arc;

use crate::config::ExperimentConfig;
use crate::data::autoaugment::{self, Op};
use crate::data::loader::{Loader, LoaderConfig};
use crate::data::{decode, ImageSet};
use crate::tensor_file::HostTensor;
use crate::util::fs::atomic_write;
use crate::util::png::encode_png;
use crate::{Error, Result};

/// The first `count` training images of `epoch` as the loader delivers them
/// under `config` (its `[augment]`, `[data] normalize`, image size and seed),
/// mapped back from the normalisation to `[-1, 1]` (for [`crate::data::grid`]),
/// with a label per image: the class name, or for a mixed batch the two classes
/// with the most target weight and their weights.
pub fn preview(set: Arc<ImageSet>, config: &ExperimentConfig, count: usize, epoch: u64) -> Result<(HostTensor, Vec<String>)> {
    let s = config.model.image_size;
    let loader = Loader::new(
        set.clone(),
        (0..set.len()).collect(),
        LoaderConfig {
            batch_size: config.batch_size,
            image_size: s,
            augment: config.augment.clone(),
            normalize: config.data.normalize.clone(),
            shuffle: true,
            drop_last: false,
            workers: 0,
            seed: config.seed,
            label_smoothing: config.loss.label_smoothing,
            load_size: 0,
            epoch_images: 0,
        },
    )?;
    let (mean, std) = config.data.normalize.mean_std();
    let ch = set.channels;
    let pick = |v: &[f32], c: usize, d: f32| if v.is_empty() { d } else { v[c % v.len()] };
    let (mut data, mut labels) = (Vec::new(), Vec::new());
    let k = set.classes.len();
    for batch in loader.epoch(epoch, 0) {
        let n = batch.labels.len();
        for i in 0..n {
            if labels.len() == count {
                break;
            }
            for c in 0..ch {
                let (m, sd) = (pick(&mean, c, 0.0), pick(&std, c, 1.0));
                let plane = &batch.images[(i * ch + c) * s * s..(i * ch + c + 1) * s * s];
                data.extend(plane.iter().map(|&v| (v * sd + m) * 2.0 - 1.0));
            }
            labels.push(match &batch.targets {
                None => set.classes[batch.labels[i] as usize].clone(),
                Some(t) => {
                    let row = &t[i * k..(i + 1) * k];
                    let mut order: Vec<usize> = (0..k).collect();
                    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
                    let (a, b) = (order[0], order[1.min(k - 1)]);
                    format!("{} {:.2} + {} {:.2}", set.classes[a], row[a], set.classes[b], row[b])
                }
            });
        }
        if labels.len() == count {
            break;
        }
    }
    let n = labels.len();
    Ok((HostTensor::new(vec![n, ch, s, s], data), labels))
}

/// Applies `op` at `magnitude` (the operation's own value as torchvision's
/// `_apply_op` takes it: degrees, pixels, a factor minus 1, bits, a threshold)
/// to the image file `input` and writes a PNG to `out`.
pub fn augment_file(input: &Path, op: &str, magnitude: f32, out: &Path) -> Result<()> {
    let op: Op = op.parse().map_err(|e: autoaugment::AugmentError| Error::usage("--op", e.to_string()))?;
    if !magnitude.is_finite() {
        return Err(Error::usage("--magnitude", "must be a finite number"));
    }
    let img = decode::decode_file(input)?;
    let mut result = Vec::new();
    autoaugment::apply(op, magnitude, &img.chw, 3, img.h, img.w, &mut result);
    let png = encode_png(&result, 3, img.h, img.w).map_err(|e| Error::data(out, e))?;
    atomic_write(out, &png)
}
