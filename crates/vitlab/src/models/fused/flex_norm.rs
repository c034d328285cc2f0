//! flex's layer norm over the last dimension, forward and backward, one pass
//! over each row on every core (blocks of [`ROW_BLOCK`] rows per task):
//!
//! - forward: `μ = mean(x)`, `r = 1/√(mean((x − μ)²) + ε)`, `y = (x − μ)·r·γ + β`;
//! - backward: `x̂ = (x − μ)·r`, `g = dy·γ`, `dx = r·(g − mean(g) − x̂·mean(g·x̂))`,
//!   `dγ = Σ_rows dy·x̂`, `dβ = Σ_rows dy` (per block, then the blocks in order).
//!
//! The trait's default runs the same formulas as some twenty burn-flex kernels,
//! each a pass over the activations on one thread (burn-flex 0.22.1's element-wise
//! operations have no rayon). The statistics are two passes in f32 (the mean,
//! then the centred squares), sums over 16 lanes.

use burn_flex::FlexTensor;
use rayon::prelude::*;

use super::flex_gemm::{add_blocks, dims, zeros_f32, ROW_BLOCK};
use super::gelu::contiguous_f32;
use super::LnGrads;
use burn::backend::Flex;

/// `(y, mean, rstd)` (the statistics with the last dimension kept, size 1), or
/// `None` where the operands are not contiguous f32 of matching sizes (the caller
/// falls back to the default).
pub(super) fn forward(x: &FlexTensor, gamma: &FlexTensor, beta: &FlexTensor, eps: f64) -> Option<[FlexTensor; 3]> {
    let (xs, g, b) = (contiguous_f32(x)?, contiguous_f32(gamma)?, contiguous_f32(beta)?);
    let shape = dims(x);
    let d = *shape.last()?;
    if d == 0 || g.len() != d || b.len() != d {
        return None;
    }
    let mut stat = shape.clone();
    *stat.last_mut()? = 1;
    let mut y = zeros_f32(shape);
    let mut mean = zeros_f32(stat.clone());
    let mut rstd = zeros_f32(stat);
    let (ys, ms, rs) = (y.storage_mut::<f32>(), mean.storage_mut::<f32>(), rstd.storage_mut::<f32>());
    ys.par_chunks_mut(ROW_BLOCK * d)
        .zip(ms.par_chunks_mut(ROW_BLOCK))
        .zip(rs.par_chunks_mut(ROW_BLOCK))
        .enumerate()
        .for_each(|(i, ((y, m), r))| kernels::forward(&xs[i * ROW_BLOCK * d..][..y.len()], g, b, eps as f32, y, m, r));
    Some([y, mean, rstd])
}

/// `(dx, dγ, dβ)` (the last two only when asked for), or `None` as for [`forward`].
pub(super) fn backward(
    dy: &FlexTensor,
    x: &FlexTensor,
    mean: &FlexTensor,
    rstd: &FlexTensor,
    gamma: &FlexTensor,
    want_param_grads: bool,
) -> Option<LnGrads<Flex>> {
    let (xs, gs, ms, rs, g) =
        (contiguous_f32(x)?, contiguous_f32(dy)?, contiguous_f32(mean)?, contiguous_f32(rstd)?, contiguous_f32(gamma)?);
    let d = g.len();
    if d == 0 || xs.len() != gs.len() || xs.len() != ms.len() * d || ms.len() != rs.len() || dims(x).last() != Some(&d) {
        return None;
    }
    let width = if want_param_grads { 2 * d } else { 0 };
    let blocks = ms.len().div_ceil(ROW_BLOCK);
    let mut partials = vec![0f32; blocks * width.max(1)];
    let mut dx = zeros_f32(x.layout().shape().clone());
    dx.storage_mut::<f32>().par_chunks_mut(ROW_BLOCK * d).zip(partials.par_chunks_mut(width.max(1))).enumerate().for_each(
        |(i, (dx, part))| {
            let (rows, at) = (i * ROW_BLOCK..i * ROW_BLOCK + dx.len() / d, i * ROW_BLOCK * d..i * ROW_BLOCK * d + dx.len());
            let stats = (&ms[rows.clone()], &rs[rows]);
            kernels::backward(&xs[at.clone()], &gs[at], stats.0, stats.1, g, dx, &mut part[..width]);
        },
    );
    if !want_param_grads {
        return Some((dx, None, None));
    }
    let sums = add_blocks(&partials, width);
    let param = |v: &[f32]| FlexTensor::from_data(burn::tensor::TensorData::new(v.to_vec(), [d]));
    Some((dx, Some(param(&sums[..d])), Some(param(&sums[d..]))))
}

/// The row loops, compiled for the best instruction set this CPU has.
mod kernels {
    use super::super::gelu::kernels::dispatch;

    const LANES: usize = 16;

    /// `Σ f(a_i, b_i, c_i)` over three slices of one length, in 16 lanes.
    #[inline(always)]
    fn sum3(a: &[f32], b: &[f32], c: &[f32], f: impl Fn(f32, f32, f32) -> f32) -> f32 {
        let mut acc = [0f32; LANES];
        let (ca, cb, cc) = (a.chunks_exact(LANES), b.chunks_exact(LANES), c.chunks_exact(LANES));
        let tail: f32 = ca.remainder().iter().zip(cb.remainder()).zip(cc.remainder()).map(|((&a, &b), &c)| f(a, b, c)).sum();
        for ((a, b), c) in ca.zip(cb).zip(cc) {
            for l in 0..LANES {
                acc[l] += f(a[l], b[l], c[l]);
            }
        }
        acc.iter().sum::<f32>() + tail
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn forward_rows(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, y: &mut [f32], mean: &mut [f32], rstd: &mut [f32]) {
        let d = gamma.len();
        for (((x, y), m), r) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(mean).zip(rstd) {
            let mu = sum3(x, x, x, |v, _, _| v) / d as f32;
            let var = sum3(x, x, x, |v, _, _| (v - mu) * (v - mu)) / d as f32;
            let rs = 1.0 / (var + eps).sqrt();
            for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
                *y = (x - mu) * rs * g + b;
            }
            (*m, *r) = (mu, rs);
        }
    }

    /// `partial`: `dγ` then `dβ` of these rows, added to; empty when not wanted.
    #[inline(always)]
    fn backward_rows(x: &[f32], dy: &[f32], mean: &[f32], rstd: &[f32], gamma: &[f32], dx: &mut [f32], partial: &mut [f32]) {
        let d = gamma.len();
        let rows = x.chunks_exact(d).zip(dy.chunks_exact(d)).zip(dx.chunks_exact_mut(d)).zip(mean.iter().zip(rstd));
        for (((x, dy), dx), (&mu, &r)) in rows {
            let inv_d = 1.0 / d as f32;
            let c1 = sum3(x, dy, gamma, |x, dy, g| dy * g * ((x - mu) * r)) * inv_d;
            let c2 = sum3(x, dy, gamma, |_, dy, g| dy * g) * inv_d;
            for (((dx, &x), &dy), &g) in dx.iter_mut().zip(x).zip(dy).zip(gamma) {
                let xhat = (x - mu) * r;
                *dx = r * (dy * g - c2 - xhat * c1);
            }
            if !partial.is_empty() {
                let (dgamma, dbeta) = partial.split_at_mut(d);
                for (((dg, db), &x), &dy) in dgamma.iter_mut().zip(dbeta.iter_mut()).zip(x).zip(dy) {
                    *dg += dy * ((x - mu) * r);
                    *db += dy;
                }
            }
        }
    }

    dispatch!(forward, forward_rows, (x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, y: &mut [f32], mean: &mut [f32], rstd: &mut [f32]));
    dispatch!(backward, backward_rows, (x: &[f32], dy: &[f32], mean: &[f32], rstd: &[f32], gamma: &[f32], dx: &mut [f32], partial: &mut [f32]));
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::models::fused::flex_gemm::test_util::{assert_close, random, values};
    use crate::models::fused::{ln_backward, ln_forward};

    /// Outputs, statistics and gradients equal the default's (burn-flex's
    /// primitives, the same formulas) within 1e-5 of the largest value, on three
    /// threads: rows in several blocks and a part block (3·67 rows), a width that is
    /// not a multiple of the 16 lanes (37) and one that is (192, ViT-Tiny's), inputs
    /// off zero (mean 3) so that the centring matters, and a single row.
    #[test]
    fn matches_the_default_over_blocks_and_widths() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a thread pool");
        let mut rng = crate::util::Rng::new(5);
        for shape in [vec![3, 67, 37], vec![2, 65, 192], vec![1, 5]] {
            let d = *shape.last().unwrap();
            let x = random(&shape, &mut rng, 3.0, 4.0);
            let dy = random(&shape, &mut rng, 0.0, 2.0);
            let (gamma, beta) = (random(&[d], &mut rng, 1.0, 1.0), random(&[d], &mut rng, 0.0, 1.0));
            let ([y, mean, rstd], (dx, dg, db), (dx_only, none_g, none_b)) = pool.install(|| {
                let out = forward(&x, &gamma, &beta, 1e-6).expect("f32 operands");
                let grads = backward(&dy, &x, &out[1], &out[2], &gamma, true).expect("f32 operands");
                let dx_only = backward(&dy, &x, &out[1], &out[2], &gamma, false).expect("f32 operands");
                (out, grads, dx_only)
            });
            let (want_y, want_mean, want_rstd) = ln_forward::<Flex>(x.clone(), gamma.clone(), beta, 1e-6);
            assert_close("y", &y, &want_y, 1e-5);
            assert_close("mean", &mean, &want_mean, 1e-6);
            assert_close("rstd", &rstd, &want_rstd, 1e-5);
            let (want_dx, want_dg, want_db) = ln_backward::<Flex>(dy, x, want_mean, want_rstd, gamma, true);
            assert_close("dx", &dx, &want_dx, 1e-5);
            assert_close("dgamma", &dg.expect("asked for"), &want_dg.expect("asked for"), 1e-5);
            assert_close("dbeta", &db.expect("asked for"), &want_db.expect("asked for"), 1e-5);
            assert_eq!(values(&dx_only), values(&dx), "dx without the parameter gradients");
            assert!(none_g.is_none() && none_b.is_none());
        }
    }

    /// The parameter gradients are sums over blocks of a fixed size, added in
    /// order, so they are the same bits on one thread as on three: a run is
    /// reproducible on a machine with another core count.
    #[test]
    fn parameter_gradients_do_not_depend_on_the_thread_count() {
        let mut rng = crate::util::Rng::new(9);
        let x = random(&[700, 48], &mut rng, 0.5, 4.0);
        let dy = random(&[700, 48], &mut rng, 0.0, 2.0);
        let (gamma, beta) = (random(&[48], &mut rng, 1.0, 1.0), random(&[48], &mut rng, 0.0, 1.0));
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
            pool.install(|| {
                let [_, mean, rstd] = forward(&x, &gamma, &beta, 1e-5).expect("f32 operands");
                let (_, dg, db) = backward(&dy, &x, &mean, &rstd, &gamma, true).expect("f32 operands");
                (values(&dg.expect("asked for")), values(&db.expect("asked for")))
            })
        };
        assert_eq!(run(1), run(3));
    }

    /// A transposed (non-contiguous) input is left to the default.
    #[test]
    fn a_strided_input_falls_back() {
        let mut rng = crate::util::Rng::new(2);
        let x = random(&[8, 6], &mut rng, 0.0, 1.0).transpose(0, 1);
        let (gamma, beta) = (random(&[8], &mut rng, 1.0, 1.0), random(&[8], &mut rng, 0.0, 1.0));
        assert!(forward(&x, &gamma, &beta, 1e-5).is_none());
    }
}
