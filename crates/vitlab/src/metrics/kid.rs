//! Kernel Inception Distance (Bińkowski et al. 2018), as torch-fidelity computes
//! it: the unbiased estimate of the squared MMD between two feature sets under
//! the polynomial kernel `k(x, y) = (x·y / d + 1)^3`, averaged over random
//! subsets of `m` vectors from each set (100 subsets of 1,000 by default, `m`
//! shrunk to the smaller set when a set has fewer), with the standard deviation
//! over subsets (population std, numpy's default).
//!
//! Per subset, with `K_xx`, `K_yy`, `K_xy` the `m x m` kernel matrices:
//! `MMD² = (sum_{i≠j} K_xx + sum_{i≠j} K_yy) / (m (m-1)) - 2 sum K_xy / m²`.
//! Unlike FID it has no bias at small sample sizes and needs no more samples than
//! dimensions, which is what users of small unpaired sets need.
//!
//! The dot products run on a burn device (float32 matrix products, as
//! torch-fidelity's float32 numpy ones); the kernel and the sums are in float64.
//! Subsets are drawn by vitlab's seeded generator, not numpy's, so with subsets
//! smaller than the sets the value equals torch-fidelity's in distribution only;
//! when `m` equals both set sizes every subset is the whole set and the values
//! are equal (and the std is 0).

use burn::tensor::{Device, Tensor, TensorData};
use serde::Serialize;

use crate::data::loader::Rng;
use crate::{Error, Result};

/// torch-fidelity's defaults.
pub const DEFAULT_SUBSETS: usize = 100;
pub const DEFAULT_SUBSET_SIZE: usize = 1000;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Kid {
    pub mean: f64,
    pub std: f64,
    pub subsets: usize,
    pub subset_size: usize,
}

/// KID of features `a` (`na x dim`) and `b` (`nb x dim`), row-major float32.
/// `names` name the two sets in errors.
#[allow(clippy::too_many_arguments)] // torch-fidelity's KID parameters, one argument each
pub fn kid(
    a: &[f32],
    b: &[f32],
    dim: usize,
    subsets: usize,
    subset_size: usize,
    seed: u64,
    names: (&str, &str),
    device: &Device,
) -> Result<Kid> {
    let err = |m: String| Error::Metric { what: format!("KID of {} and {}", names.0, names.1), message: m };
    if dim == 0 || !a.len().is_multiple_of(dim) || !b.len().is_multiple_of(dim) {
        return Err(err(format!("features are not whole {dim}-dimensional vectors")));
    }
    if subsets == 0 || subset_size < 2 {
        return Err(err(format!("{subsets} subsets of {subset_size}: need at least 1 subset of at least 2")));
    }
    let (na, nb) = (a.len() / dim, b.len() / dim);
    let m = subset_size.min(na).min(nb);
    if m < 2 {
        return Err(err(format!("{} has {na} and {} {nb} images; KID needs at least 2 per set", names.0, names.1)));
    }
    if let Some(v) = a.iter().chain(b).find(|v| !v.is_finite()) {
        return Err(err(format!("a feature value is {v}; every value must be finite")));
    }
    // Every subset is the whole set when m equals both sizes: one value, std 0.
    let whole = m == na && m == nb;
    let rounds = if whole { 1 } else { subsets };
    let mut rng = Rng::keyed(&[seed, 0x4b4944]);
    let mut values = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let x = if whole { a.to_vec() } else { sample_rows(a, dim, m, &mut rng) };
        let y = if whole { b.to_vec() } else { sample_rows(b, dim, m, &mut rng) };
        values.push(mmd2_unbiased(&x, &y, m, dim, device));
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    Ok(Kid { mean, std, subsets, subset_size: m })
}

/// `m` distinct rows of `rows`, chosen uniformly (partial Fisher-Yates).
fn sample_rows(rows: &[f32], dim: usize, m: usize, rng: &mut Rng) -> Vec<f32> {
    let n = rows.len() / dim;
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..m {
        let j = i + rng.below(n - i);
        idx.swap(i, j);
    }
    idx[..m].iter().flat_map(|&i| rows[i * dim..(i + 1) * dim].iter().copied()).collect()
}

/// `x y^T` on the device, back as f64.
fn gram(x: &Tensor<2>, y: &Tensor<2>) -> Vec<f64> {
    let g = x.clone().matmul(y.clone().transpose());
    crate::tensor_file::tensor_to_vec(g).into_iter().map(f64::from).collect()
}

fn mmd2_unbiased(x: &[f32], y: &[f32], m: usize, dim: usize, device: &Device) -> f64 {
    let tx = Tensor::<2>::from_data(TensorData::new(x.to_vec(), [m, dim]), device);
    let ty = Tensor::<2>::from_data(TensorData::new(y.to_vec(), [m, dim]), device);
    let k = |g: f64| (g / dim as f64 + 1.0).powi(3);
    let off_diagonal = |g: Vec<f64>| -> f64 {
        let mut s = 0.0;
        for i in 0..m {
            for j in 0..m {
                if i != j {
                    s += k(g[i * m + j]);
                }
            }
        }
        s
    };
    let kxx = off_diagonal(gram(&tx, &tx));
    let kyy = off_diagonal(gram(&ty, &ty));
    let kxy: f64 = gram(&tx, &ty).into_iter().map(k).sum();
    let mf = m as f64;
    (kxx + kyy) / (mf * (mf - 1.0)) - 2.0 * kxy / (mf * mf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The estimator written out term by term in f64 on the host.
    fn reference(x: &[f32], y: &[f32], m: usize, d: usize) -> f64 {
        let dot = |p: &[f32], q: &[f32]| p.iter().zip(q).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>();
        let k = |p: &[f32], q: &[f32]| (dot(p, q) / d as f64 + 1.0).powi(3);
        let row = |s: &[f32], i: usize| s[i * d..(i + 1) * d].to_vec();
        let (mut xx, mut yy, mut xy) = (0.0, 0.0, 0.0);
        for i in 0..m {
            for j in 0..m {
                if i != j {
                    xx += k(&row(x, i), &row(x, j));
                    yy += k(&row(y, i), &row(y, j));
                }
                xy += k(&row(x, i), &row(y, j));
            }
        }
        let mf = m as f64;
        (xx + yy) / (mf * (mf - 1.0)) - 2.0 * xy / (mf * mf)
    }

    fn features(n: usize, d: usize, shift: f32, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..n * d).map(|_| r.uniform() + shift).collect()
    }

    #[test]
    fn whole_sets_equal_the_estimator_and_have_no_spread() {
        let device = Device::flex();
        let (a, b) = (features(12, 5, 0.0, 1), features(12, 5, 0.3, 2));
        let r = kid(&a, &b, 5, 100, 1000, 0, ("a", "b"), &device).unwrap();
        assert_eq!((r.subset_size, r.std), (12, 0.0));
        let want = reference(&a, &b, 12, 5);
        assert!((r.mean - want).abs() <= 1e-6 * want.abs(), "{} vs {want}", r.mean);
        assert!(r.mean > 0.0);
    }

    #[test]
    fn same_distribution_is_near_zero_and_subsets_vary() {
        let device = Device::flex();
        let (a, b) = (features(60, 4, 0.0, 3), features(60, 4, 0.0, 4));
        let r = kid(&a, &b, 4, 20, 30, 7, ("a", "b"), &device).unwrap();
        let shifted = kid(&a, &features(60, 4, 0.5, 5), 4, 20, 30, 7, ("a", "c"), &device).unwrap();
        assert!(r.std > 0.0 && r.mean.abs() < 3.0 * r.std + 1e-3, "{r:?}");
        assert!(shifted.mean > 10.0 * r.mean.abs(), "{shifted:?} vs {r:?}");
        // Seeded: the same call gives the same value.
        assert_eq!(kid(&a, &b, 4, 20, 30, 7, ("a", "b"), &device).unwrap(), r);
    }

    #[test]
    fn too_few_images_or_non_finite_values_are_errors_naming_the_sets() {
        let device = Device::flex();
        let e = kid(&[0.5; 4], &[0.1; 8], 4, 10, 10, 0, ("real", "fake"), &device).unwrap_err().to_string();
        assert!(e.contains("real") && e.contains("at least 2"), "{e}");
        let mut b = features(3, 2, 0.0, 1);
        b[2] = f32::NAN;
        let e = kid(&features(3, 2, 0.0, 2), &b, 2, 10, 10, 0, ("real", "fake"), &device).unwrap_err().to_string();
        assert!(e.contains("finite"), "{e}");
    }
}
