//! flex's linear layer over rows (linear.rs's `y = x·W + b`), forward and
//! backward, with the `gemm` crate (the kernel burn-flex multiplies with):
//!
//! - forward: the bias copied into each output row (blocks of rows on every
//!   core), the product accumulated onto it, as LibTorch's `addmm`;
//! - backward: `dx = dy·Wᵀ` and `dW = xᵀ·dy` as products over the operands'
//!   strides (no transposed copies), `db = Σ_rows dy` as sums per block of
//!   [`ROW_BLOCK`] rows on every core, added in block order.
//!
//! Each product is split by its output's rows, one band per thread
//! ([`matmul_rows`]). The default is burn-flex's matmul (the gemm crate's own
//! threads over the whole product) followed by a broadcast add of the bias into
//! a second buffer, and `db` from burn-flex's `sum_dim` over the rows: both
//! element-wise passes on one thread (burn-flex 0.22.1's element-wise and
//! reduction kernels have no rayon).

use burn::tensor::TensorData;
use burn_flex::FlexTensor;
use rayon::prelude::*;

use super::flex_gemm::{add_blocks, dims, mat, matmul_rows, zeros_f32, Dst, Mat, ROW_BLOCK};
use super::gelu::contiguous_f32;
use super::LinearGrads;
use burn::backend::Flex;

/// `x·W + b` (`x: [N, D]`, `W: [D, E]`, `b: [E]`), or `None` for operands this
/// kernel does not take (another dtype, negative strides, an empty dimension).
pub(super) fn forward(x: &FlexTensor, w: &FlexTensor, b: &FlexTensor) -> Option<FlexTensor> {
    let (xm, wm, bias) = (mat(x)?, mat(w)?, contiguous_f32(b)?);
    let (&[n, d], &[d2, e]) = (&dims(x)[..], &dims(w)[..]) else { return None };
    if d != d2 || bias.len() != e || n == 0 || e == 0 {
        return None;
    }
    let mut y = zeros_f32([n, e]);
    let ys = y.storage_mut::<f32>();
    ys.par_chunks_mut(ROW_BLOCK * e).for_each(|rows| rows.chunks_exact_mut(e).for_each(|row| row.copy_from_slice(bias)));
    matmul_rows([n, e, d], Dst::rows(ys, e), true, xm, wm);
    Some(y)
}

/// `(dx, dW, db)`, each only where `want` asks for it; `None` as for [`forward`]
/// (and for an output gradient that is not contiguous).
pub(super) fn backward(
    dy: &FlexTensor,
    x: &FlexTensor,
    w: &FlexTensor,
    [want_x, want_w, want_b]: [bool; 3],
) -> Option<LinearGrads<Flex>> {
    let (gs, xm, wm) = (contiguous_f32(dy)?, mat(x)?, mat(w)?);
    let (&[n, e], &[n2, d], &[d2, e2]) = (&dims(dy)[..], &dims(x)[..], &dims(w)[..]) else { return None };
    if n != n2 || d != d2 || e != e2 || n == 0 || d == 0 || e == 0 {
        return None;
    }
    let g = || Mat { data: gs, rs: e, cs: 1 };
    let product = |[m, cols, k]: [usize; 3], lhs: Mat, rhs: Mat| {
        let mut out = zeros_f32([m, cols]);
        matmul_rows([m, cols, k], Dst::rows(out.storage_mut::<f32>(), cols), false, lhs, rhs);
        out
    };
    let dx = want_x.then(|| product([n, d, e], g(), wm.t()));
    let dw = want_w.then(|| product([d, e, n], xm.t(), g()));
    let db = want_b.then(|| FlexTensor::from_data(TensorData::new(column_sums(gs, e), [e])));
    Some([dx, dw, db])
}

/// Σ over the rows of a row-major `[rows, width]` matrix: sums per block of
/// [`ROW_BLOCK`] rows on every core, then the blocks in order (the same bits
/// whatever the number of threads).
fn column_sums(data: &[f32], width: usize) -> Vec<f32> {
    let blocks = data.len().div_ceil(ROW_BLOCK * width);
    let mut partials = vec![0f32; blocks * width];
    partials
        .par_chunks_mut(width)
        .zip(data.par_chunks(ROW_BLOCK * width))
        .for_each(|(sum, rows)| rows.chunks_exact(width).for_each(|row| kernels::add(sum, row)));
    add_blocks(&partials, width)
}

mod kernels {
    use super::super::gelu::kernels::dispatch;

    #[inline(always)]
    fn add_loop(acc: &mut [f32], row: &[f32]) {
        for (a, &v) in acc.iter_mut().zip(row) {
            *a += v;
        }
    }

    dispatch!(add, add_loop, (acc: &mut [f32], row: &[f32]));
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;
    use crate::models::fused::flex_gemm::test_util::{assert_close, random, values};
    use crate::models::fused::linear::{linear_backward, linear_forward};

    /// Output and gradients equal the default's (burn-flex's matmul, add and
    /// sum) within 1e-5 of the largest value, on three threads: row counts in
    /// several blocks with a part block, products below and above the threshold
    /// for gemm's threads, a weight that is a transposed view (as a tied or
    /// transposed parameter would be) and an input that is one, and each
    /// gradient alone.
    #[test]
    fn matches_the_default_for_strided_operands() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a thread pool");
        let mut rng = crate::util::Rng::new(3);
        for (n, d, e, transposed) in [(7, 5, 3, false), (201, 37, 19, false), (640, 192, 576, false), (130, 24, 40, true)] {
            let x = if transposed {
                random(&[d, n], &mut rng, 0.0, 1.0).transpose(0, 1)
            } else {
                random(&[n, d], &mut rng, 0.0, 1.0)
            };
            let w = if transposed {
                random(&[e, d], &mut rng, 0.0, 1.0).transpose(0, 1)
            } else {
                random(&[d, e], &mut rng, 0.0, 1.0)
            };
            let (b, dy) = (FlexTensor::from_data(TensorData::new(vec![0.25f32; e], [e])), random(&[n, e], &mut rng, 0.0, 1.0));
            let (y, grads) = pool.install(|| {
                let y = forward(&x, &w, &b).expect("f32 operands");
                (y, backward(&dy, &x, &w, [true; 3]).expect("f32 operands"))
            });
            assert_close("y", &y, &linear_forward::<Flex>(x.clone(), w.clone(), b), 1e-5);
            let want = linear_backward::<Flex>(dy.clone(), x.clone(), w.clone(), [true; 3]);
            for (i, name) in ["dx", "dW", "db"].iter().enumerate() {
                let (got, expected) = (grads[i].as_ref().expect("asked for"), want[i].as_ref().expect("asked for"));
                assert_close(name, got, expected, 1e-5);
                let mut only = [false; 3];
                only[i] = true;
                let alone = pool.install(|| backward(&dy, &x, &w, only).expect("f32 operands"));
                assert!(alone.iter().enumerate().all(|(j, g)| g.is_some() == (i == j)), "{name} alone");
                assert_eq!(values(alone[i].as_ref().expect("asked for")), values(got), "{name} alone");
            }
        }
    }

    /// The bias gradient's block sums give the same bits on one thread as on three.
    #[test]
    fn the_bias_gradient_does_not_depend_on_the_thread_count() {
        let mut rng = crate::util::Rng::new(4);
        let dy = random(&[1000, 33], &mut rng, 0.0, 1.0);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
            pool.install(|| column_sums(dy.as_slice::<f32>().expect("contiguous"), 33))
        };
        assert_eq!(run(1), run(3));
    }
}
