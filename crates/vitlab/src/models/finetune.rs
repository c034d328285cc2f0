//! Pretrained weights on a model of another shape (`init.from`): the position
//! embeddings resampled to the model's patch grid (timm's
//! `resample_abs_pos_embed`), the head left at its fresh initialisation when the
//! classes are others (another count, or other names), and every other mismatch
//! listed in one error.

use std::path::Path;

use crate::tensor_file::{HostTensor, TensorMap};
use crate::{Error, Result};

/// What [`adapt`] changed, for the log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Adapted {
    /// `(old grid side, new grid side)` when the position embeddings were resampled.
    pub pos_embed: Option<(usize, usize)>,
    /// The head's parameters kept at the model's initialisation (other classes).
    pub head_reset: Vec<String>,
}

/// Makes `source` (pretrained weights in vitlab's layout) fit `target` (the
/// fresh model's own weights, same keys): resamples `pos_embed` to the target's
/// grid (`prefix` leading tokens, the class token, kept as they are), takes the
/// target's `head.*` when their shapes differ or `new_labels` says the classes
/// are others, and fails listing every other key that is missing, unexpected or
/// of another shape. Returns the tensors to load.
pub fn adapt(
    source: TensorMap,
    target: &TensorMap,
    prefix: usize,
    new_labels: bool,
    file: &Path,
) -> Result<(TensorMap, Adapted)> {
    let mut out = TensorMap::new();
    let mut adapted = Adapted::default();
    let mut problems = Vec::new();
    for (key, want) in target {
        let Some(have) = source.get(key) else {
            problems.push(format!("{key}: missing (the model has {:?})", want.shape));
            continue;
        };
        if key.starts_with("head.") && (new_labels || have.shape != want.shape) {
            out.insert(key.clone(), want.clone());
            adapted.head_reset.push(key.clone());
        } else if have.shape == want.shape {
            out.insert(key.clone(), have.clone());
        } else if key == "pos_embed" {
            match grid_sides(&have.shape, &want.shape, prefix) {
                Some((old, new)) => {
                    out.insert(key.clone(), resample_pos_embed(have, old, new, prefix));
                    adapted.pos_embed = Some((old, new));
                }
                None => problems.push(format!(
                    "pos_embed: shape {:?} is not a square grid of the model's {:?} (with {prefix} class token(s))",
                    have.shape, want.shape
                )),
            }
        } else if key == "patch_embed.weight" {
            problems.push(format!(
                "patch_embed.weight: shape {:?}, the model's {:?}: another patch size or channel count \
                 (patch embeddings are not resized: set model.patch_size to the checkpoint's)",
                have.shape, want.shape
            ));
        } else {
            problems.push(format!("{key}: shape {:?}, the model's {:?}", have.shape, want.shape));
        }
    }
    for key in source.keys().filter(|k| !target.contains_key(*k)) {
        problems.push(format!("{key}: not a parameter of the model"));
    }
    if !problems.is_empty() {
        return Err(Error::weights(
            file,
            format!(
                "{} key(s) do not fit the model (check model.block, size, pool and head against the checkpoint's):\n  {}",
                problems.len(),
                problems.join("\n  ")
            ),
        ));
    }
    Ok((out, adapted))
}

/// The old and new grid sides of `[1, prefix + side^2, D]` position embeddings of one width.
fn grid_sides(have: &[usize], want: &[usize], prefix: usize) -> Option<(usize, usize)> {
    let side = |shape: &[usize]| {
        let [1, t, _] = shape[..] else { return None };
        let n = t.checked_sub(prefix)?;
        let s = (n as f64).sqrt().round() as usize;
        (s * s == n && s > 0).then_some(s)
    };
    (have.len() == 3 && want.len() == 3 && have[2] == want[2]).then_some(())?;
    Some((side(have)?, side(want)?))
}

/// timm's `resample_abs_pos_embed` (bicubic, `antialias=True`): the `prefix`
/// leading tokens kept, the `old x old` grid of `[1, prefix + old^2, D]`
/// embeddings resized to `new x new` by PyTorch's separable anti-aliased
/// bicubic interpolation.
pub fn resample_pos_embed(pe: &HostTensor, old: usize, new: usize, prefix: usize) -> HostTensor {
    let d = pe.shape[2];
    let weights = bicubic_aa_weights(old, new);
    let grid = &pe.data[prefix * d..];
    // Rows first: [old, old, D] -> [old, new, D], then columns: -> [new, new, D].
    let mut rows = vec![0.0f64; old * new * d];
    for y in 0..old {
        for (x, (start, w)) in weights.iter().enumerate() {
            let dst = &mut rows[(y * new + x) * d..(y * new + x + 1) * d];
            for (j, &wj) in w.iter().enumerate() {
                let src = &grid[(y * old + start + j) * d..(y * old + start + j + 1) * d];
                dst.iter_mut().zip(src).for_each(|(o, &v)| *o += wj * v as f64);
            }
        }
    }
    let mut data = pe.data[..prefix * d].to_vec();
    for (start, w) in &weights {
        for x in 0..new {
            let mut acc = vec![0.0f64; d];
            for (j, &wj) in w.iter().enumerate() {
                let src = &rows[((start + j) * new + x) * d..((start + j) * new + x + 1) * d];
                acc.iter_mut().zip(src).for_each(|(o, &v)| *o += wj * v);
            }
            data.extend(acc.into_iter().map(|v| v as f32));
        }
    }
    HostTensor::new(vec![1, prefix + new * new, d], data)
}

/// Per output index, the first input index and the normalised weights of
/// PyTorch's anti-aliased bicubic resampling (`_upsample_bicubic2d_aa`, as PIL):
/// the cubic kernel with a = -0.5, stretched by the scale when downsampling,
/// centred on half-pixel centres, cut at the borders and renormalised.
fn bicubic_aa_weights(input: usize, output: usize) -> Vec<(usize, Vec<f64>)> {
    let scale = input as f64 / output as f64;
    let (support, invscale) = if scale >= 1.0 { (2.0 * scale, 1.0 / scale) } else { (2.0, 1.0) };
    (0..output)
        .map(|i| {
            let center = scale * (i as f64 + 0.5);
            let xmin = ((center - support + 0.5).floor().max(0.0)) as usize;
            let xmax = ((center + support + 0.5).floor() as usize).min(input);
            let w: Vec<f64> = (xmin..xmax).map(|j| cubic_aa((j as f64 - center + 0.5) * invscale)).collect();
            let total: f64 = w.iter().sum();
            (xmin, w.into_iter().map(|v| if total != 0.0 { v / total } else { 0.0 }).collect())
        })
        .collect()
}

/// PIL's bicubic kernel (a = -0.5).
fn cubic_aa(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, Vec<usize>)]) -> TensorMap {
        entries.iter().map(|(k, s)| (k.to_string(), HostTensor::new(s.clone(), vec![0.5; s.iter().product()]))).collect()
    }

    #[test]
    fn the_same_grid_resamples_to_itself() {
        let pe = HostTensor::new(vec![1, 17, 2], (0..34).map(|v| v as f32).collect());
        assert_eq!(resample_pos_embed(&pe, 4, 4, 1), pe);
    }

    #[test]
    fn every_mismatch_is_listed_in_one_error_and_the_head_is_reset() {
        let target = map(&[
            ("pos_embed", vec![1, 65, 8]),
            ("blocks.0.attn.qkv.weight", vec![24, 8]),
            ("head.weight", vec![4, 8]),
            ("head.bias", vec![4]),
        ]);
        let ok = map(&[
            ("pos_embed", vec![1, 17, 8]),
            ("blocks.0.attn.qkv.weight", vec![24, 8]),
            ("head.weight", vec![10, 8]),
            ("head.bias", vec![10]),
        ]);
        let (out, adapted) = adapt(ok.clone(), &target, 1, false, Path::new("ck.safetensors")).unwrap();
        assert_eq!(adapted.pos_embed, Some((4, 8)));
        assert_eq!(adapted.head_reset, ["head.bias", "head.weight"]);
        assert_eq!(out["head.weight"].shape, [4, 8]);
        assert_eq!(out["pos_embed"].shape, [1, 65, 8]);
        // The same class count with other labels: the head is reset too.
        let mut same = ok.clone();
        same.insert("head.weight".into(), HostTensor::new(vec![4, 8], vec![0.5; 32]));
        same.insert("head.bias".into(), HostTensor::new(vec![4], vec![0.5; 4]));
        let (out, adapted) = adapt(same.clone(), &target, 1, true, Path::new("ck.safetensors")).unwrap();
        assert_eq!((adapted.head_reset.len(), &out["head.bias"]), (2, &target["head.bias"]));
        let (out, adapted) = adapt(same, &target, 1, false, Path::new("ck.safetensors")).unwrap();
        assert!(adapted.head_reset.is_empty() && out["head.bias"].data == [0.5; 4]);

        let bad = map(&[
            ("pos_embed", vec![1, 18, 8]),
            ("blocks.0.attn.qkv.weight", vec![48, 16]),
            ("blocks.0.attn.extra", vec![3]),
            ("head.weight", vec![4, 8]),
        ]);
        let e = adapt(bad, &target, 1, false, Path::new("ck.safetensors")).unwrap_err().to_string();
        for part in ["ck.safetensors", "4 key(s)", "pos_embed", "qkv.weight: shape [48, 16]", "head.bias: missing", "extra"] {
            assert!(e.contains(part), "{part:?} in {e}");
        }
    }
}
