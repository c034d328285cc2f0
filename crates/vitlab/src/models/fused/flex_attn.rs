//! flex's attention for training, `O = softmax(s·QKᵀ)·V`, one (batch, head)
//! at a time and a block of query rows at a time, with the `gemm` crate:
//!
//! - forward, per block of rows `r`: `S = Q_r·Kᵀ`, each row's softmax in place
//!   (its log-sum-exp `L = s·max + ln Σ exp(s·S − s·max)` kept), `O_r = P·V`;
//! - backward, per block: `P = exp(s·Q_r·Kᵀ − L)` recomputed, `dV += Pᵀ·dO_r`,
//!   `dP = dO_r·Vᵀ`, `dS = s·P ⊙ (dP − D)` with `D = rowsum(dO ⊙ O)`,
//!   `dQ_r = dS·K`, `dK += dSᵀ·Q_r`.
//!
//! What the backward keeps is `L`, `[B, H, T]`, instead of the `[B, H, T, T]`
//! softmax that burn's decomposition keeps (100 MB per block of ViT-Tiny at
//! 1,025 tokens), and a block's scratch is `rows × T` per thread, as PyTorch's
//! CPU flash attention. The price is one more `Q·Kᵀ` product in the backward.
//! Batch entries are split into one group per thread. `Q`, `K`, `V` and `dO`
//! are read in whatever non-negative strides they have (the model's are views of
//! `[B, T, H, d]` token rows; a flipped operand is copied first); `O`, `dQ`, `dK`
//! and `dV` are written as such views, so the model's swap back to token rows is
//! free.

use std::borrow::Cow;

use burn::tensor::{DType, Shape};
use burn_flex::{FlexTensor, Layout};

use super::flex_gemm::{dims, matmul, over_groups, zeros_f32, Dst, Mat};
use super::gelu::kernels::{dispatch, exp_nonpositive};

/// A `[B, H, T, d]` f32 tensor's elements and strides.
struct View<'a> {
    data: &'a [f32],
    off: usize,
    st: [usize; 4],
}

impl<'a> View<'a> {
    /// `None` unless `t` is f32 of shape `shape` with non-negative strides
    /// (see [`unflipped`]).
    fn of(t: &'a FlexTensor, shape: [usize; 4]) -> Option<View<'a>> {
        if t.dtype() != DType::F32 || dims(t) != shape {
            return None;
        }
        let s = t.layout().strides();
        let st = [0, 1, 2, 3].map(|i| usize::try_from(s[i]).ok());
        Some(View { data: t.storage::<f32>(), off: t.layout().start_offset(), st: [st[0]?, st[1]?, st[2]?, st[3]?] })
    }

    /// Entry `(b, h)`'s `[T, d]` matrix from row `r` on.
    fn at(&self, b: usize, h: usize, r: usize) -> Mat<'a> {
        let [sb, sh, st, sd] = self.st;
        Mat { data: &self.data[self.off + b * sb + h * sh + r * st..], rs: st, cs: sd }
    }
}

/// A `[B, H, T, d]` tensor stored as `[B, T, H, d]` (token rows): entry `b` is
/// `T·H·d` contiguous values, row `r` of head `h` starts at `(r·H + h)·d`.
fn token_rows([b, h, t, d]: [usize; 4]) -> FlexTensor {
    let strides = vec![(t * h * d) as isize, d as isize, (h * d) as isize, 1];
    zeros_f32([b, t, h, d]).with_layout(Layout::new(Shape::new([b, h, t, d]), strides, 0))
}

/// Query rows per block: a `rows × T` block of scores of at most 128 Ki values
/// (512 KiB), all of them for up to 2,016 keys.
fn block_rows(tq: usize, tk: usize) -> usize {
    (131_072 / tk.max(1)).max(16).min(tq.max(1))
}

/// The shapes of one attention: `[B, H, Tq, d]` queries, `[B, H, Tk, d]` keys,
/// `[B, H, Tk, dv]` values.
#[derive(Clone, Copy)]
struct Dims {
    b: usize,
    h: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
}

impl Dims {
    fn new(q: &FlexTensor, k: &FlexTensor, v: &FlexTensor, scale: f64) -> Option<Dims> {
        let (&[b, h, tq, d], &[_, _, tk, _], &[_, _, _, dv]) = (&dims(q)[..], &dims(k)[..], &dims(v)[..]) else {
            return None;
        };
        (scale > 0.0 && scale.is_finite() && tk > 0).then_some(Dims { b, h, tq, tk, d, dv })
    }
}

/// `t`, or a contiguous copy of it where a stride is negative (burn-flex's `flip`
/// is a view with negative strides), so that [`View::of`] can read it.
fn unflipped(t: &FlexTensor) -> Cow<'_, FlexTensor> {
    match t.layout().strides().iter().any(|&s| s < 0) {
        true => Cow::Owned(t.to_contiguous()),
        false => Cow::Borrowed(t),
    }
}

/// `(O, L)`, or `None` when an operand is not f32 or the shapes do not fit (the
/// caller falls back to burn's decomposition).
pub(super) fn forward(q: &FlexTensor, k: &FlexTensor, v: &FlexTensor, scale: f64) -> Option<(FlexTensor, FlexTensor)> {
    let Dims { b, h, tq, tk, d, dv } = Dims::new(q, k, v, scale)?;
    let (q, k, v) = (unflipped(q), unflipped(k), unflipped(v));
    let (qv, kv, vv) = (View::of(&q, [b, h, tq, d])?, View::of(&k, [b, h, tk, d])?, View::of(&v, [b, h, tk, dv])?);
    let mut out = token_rows([b, h, tq, dv]);
    let mut lse = zeros_f32([b, h, tq]);
    let bq = block_rows(tq, tk);
    let scale = scale as f32;
    over_groups(b, [out.storage_mut::<f32>(), lse.storage_mut::<f32>()], [tq * h * dv, h * tq], |items, [os, ls], par| {
        let mut s = vec![0f32; bq * tk];
        for (n, bi) in items.enumerate() {
            for hi in 0..h {
                for r in (0..tq).step_by(bq) {
                    let rows = bq.min(tq - r);
                    let s = &mut s[..rows * tk];
                    matmul([rows, tk, d], Dst::rows(s, tk), false, qv.at(bi, hi, r), kv.at(bi, hi, 0).t(), par);
                    let l = &mut ls[(n * h + hi) * tq + r..][..rows];
                    for (row, l) in s.chunks_exact_mut(tk).zip(l) {
                        kernels::softmax(row, scale, l);
                    }
                    let o = Dst { data: &mut os[(n * tq + r) * h * dv + hi * dv..], rs: h * dv };
                    matmul([rows, dv, tk], o, false, Mat { data: s, rs: tk, cs: 1 }, vv.at(bi, hi, 0), par);
                }
            }
        }
    });
    Some((out, lse))
}

/// `[dQ, dK, dV]` of [`forward`] (`lse`: its `L`), or `None` as [`forward`].
pub(super) fn backward(
    d_out: &FlexTensor,
    [q, k, v]: [&FlexTensor; 3],
    out: &FlexTensor,
    lse: &FlexTensor,
    scale: f64,
) -> Option<[FlexTensor; 3]> {
    let Dims { b, h, tq, tk, d, dv } = Dims::new(q, k, v, scale)?;
    let [q, k, v, d_out, out] = [q, k, v, d_out, out].map(unflipped);
    let (qv, kv, vv) = (View::of(&q, [b, h, tq, d])?, View::of(&k, [b, h, tk, d])?, View::of(&v, [b, h, tk, dv])?);
    let (dov, ov) = (View::of(&d_out, [b, h, tq, dv])?, View::of(&out, [b, h, tq, dv])?);
    let ls = (dims(lse) == [b, h, tq] && lse.dtype() == DType::F32).then(|| lse.as_slice::<f32>()).flatten()?;
    let [mut dq, mut dk, mut dvt] = [[b, h, tq, d], [b, h, tk, d], [b, h, tk, dv]].map(token_rows);
    let bq = block_rows(tq, tk);
    let scale = scale as f32;
    let outs = [dq.storage_mut::<f32>(), dk.storage_mut::<f32>(), dvt.storage_mut::<f32>()];
    over_groups(b, outs, [tq * h * d, tk * h * d, tk * h * dv], |items, [dqs, dks, dvs], par| {
        let (mut p, mut dp, mut dd) = (vec![0f32; bq * tk], vec![0f32; bq * tk], vec![0f32; tq]);
        for (n, bi) in items.enumerate() {
            for hi in 0..h {
                // D = rowsum(dO ⊙ O)
                let (dom, om) = (dov.at(bi, hi, 0), ov.at(bi, hi, 0));
                for (r, dd) in dd.iter_mut().enumerate() {
                    *dd = (0..dv).map(|j| dom.data[r * dom.rs + j * dom.cs] * om.data[r * om.rs + j * om.cs]).sum();
                }
                for r in (0..tq).step_by(bq) {
                    let rows = bq.min(tq - r);
                    let (p, dp) = (&mut p[..rows * tk], &mut dp[..rows * tk]);
                    matmul([rows, tk, d], Dst::rows(p, tk), false, qv.at(bi, hi, r), kv.at(bi, hi, 0).t(), par);
                    for (row, &l) in p.chunks_exact_mut(tk).zip(&ls[(bi * h + hi) * tq + r..][..rows]) {
                        kernels::probabilities(row, scale, l);
                    }
                    let first = r == 0;
                    let dvo = Dst { data: &mut dvs[n * tk * h * dv + hi * dv..], rs: h * dv };
                    matmul([tk, dv, rows], dvo, !first, Mat { data: p, rs: tk, cs: 1 }.t(), dov.at(bi, hi, r), par);
                    matmul([rows, tk, dv], Dst::rows(dp, tk), false, dov.at(bi, hi, r), vv.at(bi, hi, 0).t(), par);
                    for ((g, pr), &dd) in dp.chunks_exact_mut(tk).zip(p.chunks_exact(tk)).zip(&dd[r..r + rows]) {
                        kernels::score_grad(g, pr, dd, scale);
                    }
                    let dqo = Dst { data: &mut dqs[(n * tq + r) * h * d + hi * d..], rs: h * d };
                    matmul([rows, d, tk], dqo, false, Mat { data: dp, rs: tk, cs: 1 }, kv.at(bi, hi, 0), par);
                    let dko = Dst { data: &mut dks[n * tk * h * d + hi * d..], rs: h * d };
                    matmul([tk, d, rows], dko, !first, Mat { data: dp, rs: tk, cs: 1 }.t(), qv.at(bi, hi, r), par);
                }
            }
        }
    });
    Some([dq, dk, dvt])
}

/// The per-row loops, compiled for the best instruction set this CPU has.
mod kernels {
    use super::{dispatch, exp_nonpositive};

    const LANES: usize = 16;

    /// `row := softmax(s·row)` and `lse := s·max + ln Σ exp(s·row − s·max)`. As
    /// PyTorch's softmax: a −∞ score gets weight 0 (below 1e-37), and a NaN or +∞ score, or a row
    /// of −∞ only, makes the whole row and `lse` NaN (`x·0` is 0 for finite `x`, NaN
    /// for NaN and ±∞).
    #[inline(always)]
    fn softmax_loop(row: &mut [f32], scale: f32, lse: &mut f32) {
        let (mut max, mut poison) = ([f32::NEG_INFINITY; LANES], [0f32; LANES]);
        let mut see = |c: &[f32]| {
            for (i, &x) in c.iter().enumerate() {
                max[i] = max[i].max(x);
                poison[i] += if x == f32::NEG_INFINITY { 0.0 } else { x * 0.0 };
            }
        };
        let mut chunks = row.chunks_exact(LANES);
        chunks.by_ref().for_each(&mut see);
        see(chunks.remainder());
        let shift = scale * max.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let poison: f32 = if shift == f32::NEG_INFINITY { f32::NAN } else { poison.iter().sum() };
        let mut sum = [0f32; LANES];
        let mut exp = |c: &mut [f32]| {
            for (i, x) in c.iter_mut().enumerate() {
                *x = exp_nonpositive(scale * *x - shift);
                sum[i] += *x;
            }
        };
        let mut chunks = row.chunks_exact_mut(LANES);
        chunks.by_ref().for_each(&mut exp);
        exp(chunks.into_remainder());
        let sum: f32 = sum.iter().sum();
        let inv = 1.0 / sum;
        for x in row.iter_mut() {
            *x *= inv;
        }
        *lse = shift + sum.ln() + poison;
        if poison.is_nan() {
            row.fill(f32::NAN);
        }
    }

    /// `row := exp(s·row − lse)`: the softmax again from its log-sum-exp (the
    /// exponent clamped at 0, which only rounding could exceed).
    #[inline(always)]
    fn probabilities_loop(row: &mut [f32], scale: f32, lse: f32) {
        if lse.is_nan() {
            row.fill(f32::NAN);
            return;
        }
        for x in row.iter_mut() {
            *x = exp_nonpositive((scale * *x - lse).min(0.0));
        }
    }

    /// `dp := s·p ⊙ (dp − dd)`: a row of the scores' gradient.
    #[inline(always)]
    fn score_grad_loop(dp: &mut [f32], p: &[f32], dd: f32, scale: f32) {
        for (g, &p) in dp.iter_mut().zip(p) {
            *g = scale * p * (*g - dd);
        }
    }

    dispatch!(softmax, softmax_loop, (row: &mut [f32], scale: f32, lse: &mut f32));
    dispatch!(probabilities, probabilities_loop, (row: &mut [f32], scale: f32, lse: f32));
    dispatch!(score_grad, score_grad_loop, (dp: &mut [f32], p: &[f32], dd: f32, scale: f32));
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::TensorData;

    use super::*;
    use crate::models::fused::flex_gemm::test_util::{assert_close, random, values};
    use crate::models::fused::{attn_backward, attn_forward};

    /// Outputs and gradients equal burn's decomposition (softmax kept) within 2e-6 of
    /// the largest value, on three threads (batch entries split into groups, each
    /// group's products on one thread, or on two: `b = 1`): one block of query rows
    /// and several (600 keys: blocks of 218 rows), fewer queries than keys, values
    /// wider than keys with several heads, and inputs that are strided views of token
    /// rows as the model passes them (queries a slice at a non-zero offset, the
    /// output gradient a transposed view).
    #[test]
    fn matches_the_decomposition_over_blocks_groups_and_strides() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a thread pool");
        let mut rng = crate::util::Rng::new(11);
        let cases =
            [(5, 2, 65, 65, 16, 16), (4, 2, 600, 600, 8, 8), (1, 2, 600, 600, 8, 8), (4, 3, 5, 600, 4, 6), (2, 3, 17, 40, 8, 8)];
        for (b, h, tq, tk, d, dv) in cases {
            assert!(tq < 600 || block_rows(tq, tk) < tq, "the 600-token case spans several blocks");
            // Token rows [B, T, H, ·] viewed as [B, H, T, ·], as the model's q, k, v, dO.
            let q = random(&[b, tq, h, d + 3], &mut rng, 0.0, 4.0).narrow(3, 2, d).transpose(1, 2);
            let k = random(&[b, tk, h, d], &mut rng, 0.0, 4.0).transpose(1, 2);
            let v = random(&[b, tk, h, dv], &mut rng, 0.0, 2.0).transpose(1, 2);
            let d_out = random(&[b, tq, h, dv], &mut rng, 0.0, 2.0).transpose(1, 2);
            assert!(q.layout().start_offset() > 0);
            let scale = 1.0 / (d as f64).sqrt();
            let ((out, lse), grads) = pool.install(|| {
                let (out, lse) = forward(&q, &k, &v, scale).expect("f32 operands");
                let grads = backward(&d_out, [&q, &k, &v], &out, &lse, scale).expect("f32 operands");
                ((out, lse), grads)
            });
            let (want_out, p) = attn_forward::<Flex>(q.clone(), k.clone(), v.clone(), scale);
            assert_close("O", &out, &want_out, 2e-6);
            assert_eq!(dims(&lse), [b, h, tq]);
            let want = attn_backward::<Flex>(d_out, [q, k, v], want_out, p, scale);
            for (name, (g, w)) in ["dQ", "dK", "dV"].iter().zip(grads.iter().zip(&want)) {
                assert_close(name, g, w, 2e-6);
            }
        }
    }

    /// burn-flex's `flip` is a view with negative strides: such operands (a model
    /// that reverses its tokens, say) go through the kernel on copies, with the same
    /// results as the decomposition over the same views.
    #[test]
    fn flipped_operands_match_the_decomposition() {
        use burn_flex::ops::flip::flip;
        let mut rng = crate::util::Rng::new(5);
        let (b, h, t, d) = (2, 2, 9, 8);
        let q = flip(random(&[b, h, t, d], &mut rng, 0.0, 4.0), &[2]);
        let k = flip(random(&[b, h, t, d], &mut rng, 0.0, 4.0), &[2, 3]);
        let v = random(&[b, h, t, d], &mut rng, 0.0, 2.0);
        let d_out = flip(random(&[b, h, t, d], &mut rng, 0.0, 2.0), &[2]);
        assert!(q.layout().strides().iter().any(|&s| s < 0), "flip gives negative strides");
        let scale = 0.3;
        let (out, lse) = forward(&q, &k, &v, scale).expect("flipped f32 operands are taken");
        let grads = backward(&d_out, [&q, &k, &v], &flip(out.clone(), &[2]), &lse, scale);
        let grads_direct = backward(&d_out, [&q, &k, &v], &out, &lse, scale).expect("flipped f32 operands are taken");
        let (want_out, p) = attn_forward::<Flex>(q.clone(), k.clone(), v.clone(), scale);
        assert_close("O", &out, &want_out, 2e-6);
        let want = attn_backward::<Flex>(d_out, [q, k, v], want_out, p, scale);
        for (name, (g, w)) in ["dQ", "dK", "dV"].iter().zip(grads_direct.iter().zip(&want)) {
            assert_close(name, g, w, 2e-6);
        }
        // A flipped output is read as the flipped values it holds: D = rowsum(dO ⊙ O) changes.
        let flipped = grads.expect("a flipped output is taken");
        assert!(values(&flipped[0]) != values(&grads_direct[0]), "the output's flip is not ignored");
    }

    /// A NaN in a query makes its output row NaN and a −∞ score gets weight 0 (below 1e-37), as
    /// PyTorch's softmax does, leaving the other rows alone; the backward of a NaN row
    /// is NaN too.
    #[test]
    fn a_nan_logit_poisons_its_row_only() {
        let mut rng = crate::util::Rng::new(3);
        let mut qv = values(&random(&[1, 1, 4, 8], &mut rng, 0.0, 2.0));
        qv[8] = f32::NAN; // row 1
        let q = FlexTensor::from_data(TensorData::new(qv, vec![1, 1, 4, 8]));
        let (k, v) = (random(&[1, 1, 6, 8], &mut rng, 0.0, 2.0), random(&[1, 1, 6, 8], &mut rng, 0.0, 2.0));
        let (out, lse) = forward(&q, &k, &v, 0.5).unwrap();
        let (o, l) = (values(&out), values(&lse));
        assert!(o[8..16].iter().all(|x| x.is_nan()) && l[1].is_nan());
        assert!(o[..8].iter().chain(&o[16..]).all(|x| x.is_finite()) && l[0].is_finite() && l[2].is_finite());
        let d_out = random(&[1, 1, 4, 8], &mut rng, 0.0, 1.0);
        let [dq, ..] = backward(&d_out, [&q, &k, &v], &out, &lse, 0.5).unwrap();
        assert!(values(&dq)[8..16].iter().all(|x| x.is_nan()));

        let mut row = [1.0, f32::NEG_INFINITY, 2.0];
        let mut l = 0.0;
        kernels::softmax(&mut row, 1.0, &mut l);
        let e = [1f32.exp(), 2f32.exp()];
        assert!(row[1] < 1e-37 && (row[0] - e[0] / (e[0] + e[1])).abs() < 1e-6, "{row:?}");
        assert!((l - (e[0] + e[1]).ln()).abs() < 1e-6);
        let mut all = [f32::NEG_INFINITY; 3];
        kernels::softmax(&mut all, 1.0, &mut l);
        assert!(all.iter().all(|x| x.is_nan()) && l.is_nan());
    }
}
