//! What flex's hand-written operations (flex_conv.rs, flex_attn.rs,
//! flex_linear.rs, flex_norm.rs, gelu.rs) share: a strided matrix product
//! through the `gemm` crate (the kernel burn-flex multiplies with), split by
//! output rows or over groups of independent items (images, batch entries), one
//! per thread of rayon's pool, and the tensors their outputs are written into.

use std::ops::Range;

use burn::tensor::{Shape, TensorData};
use burn_flex::FlexTensor;
use gemm::{gemm, Parallelism};

/// An operand of [`matmul`]: its elements and their row and column strides (a
/// transpose is a swap of the two).
pub(super) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// The transpose (the strides swapped).
    pub fn t(self) -> Mat<'a> {
        Mat { data: self.data, rs: self.cs, cs: self.rs }
    }
}

/// The destination of [`matmul`]: `[m, n]` with row stride `rs` and unit column stride.
pub(super) struct Dst<'a> {
    pub data: &'a mut [f32],
    pub rs: usize,
}

impl<'a> Dst<'a> {
    /// A row-major `[m, n]` matrix (row stride `n`).
    pub fn rows(data: &'a mut [f32], n: usize) -> Self {
        Dst { data, rs: n }
    }
}

/// `dst` `:= [dst +] lhs·rhs` (`lhs` `[m, k]`, `rhs` `[k, n]`, `dst` `[m, n]`).
pub(super) fn matmul([m, n, k]: [usize; 3], dst: Dst, accumulate: bool, lhs: Mat, rhs: Mat, par: Parallelism) {
    let end = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs + 1;
    if m == 0 || n == 0 {
        return;
    }
    assert!(dst.rs >= n && dst.data.len() >= end(m, n, dst.rs, 1), "matmul: destination too short");
    if k == 0 {
        if !accumulate {
            for row in dst.data.chunks_mut(dst.rs).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    assert!(
        lhs.data.len() >= end(m, k, lhs.rs, lhs.cs) && rhs.data.len() >= end(k, n, rhs.rs, rhs.cs),
        "matmul: operand too short"
    );
    // SAFETY: the asserts above keep every index the strides reach inside the slices;
    // `dst` is exclusively borrowed, its rows do not overlap (rs >= n), and it does not
    // overlap the shared operands.
    unsafe {
        gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            1,
            dst.rs as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    }
}

/// `f(items, outs, par)` over contiguous groups of `b` items, one group per thread
/// (`outs[i]`: each group's part of an output of `per_item[i]` values per item), its
/// results in group order. The products inside run on the threads left over per
/// group (`Parallelism::None` when there are at least as many items as threads), or
/// on all threads when there is one group.
pub(super) fn over_groups<S: Send, const N: usize>(
    b: usize,
    outs: [&mut [f32]; N],
    per_item: [usize; N],
    f: impl Fn(Range<usize>, [&mut [f32]; N], Parallelism) -> S + Sync,
) -> Vec<S> {
    for (out, &n) in outs.iter().zip(&per_item) {
        assert_eq!(out.len(), b * n, "over_groups: an output of {n} values per item for {b} items");
    }
    let threads = rayon::current_num_threads();
    if b < 2 || threads < 2 {
        return vec![f(0..b, outs, Parallelism::Rayon(0))];
    }
    let per_group = b.div_ceil(threads.min(b));
    let groups = b.div_ceil(per_group);
    let par = if groups < threads { Parallelism::Rayon(threads / groups) } else { Parallelism::None };
    let mut results: Vec<Option<S>> = (0..groups).map(|_| None).collect();
    let mut rest = outs;
    let mut parts: Vec<[&mut [f32]; N]> = Vec::with_capacity(groups);
    for gi in 0..groups {
        let items = ((gi + 1) * per_group).min(b) - gi * per_group;
        let mut i = 0;
        parts.push(rest.each_mut().map(|r| {
            let (head, tail) = std::mem::take(r).split_at_mut(items * per_item[i]);
            *r = tail;
            i += 1;
            head
        }));
    }
    let f = &f;
    rayon::scope(|s| {
        for (gi, (slot, part)) in results.iter_mut().zip(parts).enumerate() {
            let items = gi * per_group..((gi + 1) * per_group).min(b);
            s.spawn(move |_| *slot = Some(f(items, part, par)));
        }
    });
    results.into_iter().map(|r| r.expect("every group ran")).collect()
}

/// A new contiguous f32 tensor of zeros, for a kernel to write its output into:
/// `FlexTensor::empty` without its copy. burn-flex 0.22.1 builds that from a
/// zeroed `Vec<u8>`, whose declared alignment of 1 makes `Bytes::from_bytes_vec`
/// copy it whole into a new 16-byte-aligned allocation (a `memset` and a `memcpy`
/// of every output: 8-9 % of a flex ViT-Tiny/4 inference batch's samples); a
/// `Vec<f32>` is kept as it is, and `vec![0f32; n]` is calloc, which skips the
/// zeroing for memory fresh from the system.
pub(super) fn zeros_f32(shape: impl Into<Shape>) -> FlexTensor {
    let shape: Shape = shape.into();
    FlexTensor::from_data(TensorData::new(vec![0f32; shape.num_elements()], shape))
}

/// A tensor's shape.
pub(super) fn dims(t: &FlexTensor) -> Vec<usize> {
    t.layout().shape().iter().copied().collect()
}

/// A 2-D f32 tensor as a [`matmul`] operand (its elements from the view's offset,
/// its strides), or `None` for another dtype, rank or a negative stride.
pub(super) fn mat(t: &FlexTensor) -> Option<Mat<'_>> {
    let (_, _, rs, cs) = t.layout().as_2d_strides()?;
    if t.dtype() != burn::tensor::DType::F32 {
        return None;
    }
    let (rs, cs) = (usize::try_from(rs).ok()?, usize::try_from(cs).ok()?);
    Some(Mat { data: &t.storage::<f32>()[t.layout().start_offset()..], rs, cs })
}

/// gemm's threads for an `[m, k]·[k, n]` product: every thread of the pool from
/// burn-flex's threshold (192³ multiply-adds) up, one below it.
pub(super) fn parallelism([m, n, k]: [usize; 3]) -> Parallelism {
    match m.saturating_mul(n).saturating_mul(k) >= 192 * 192 * 192 {
        true => Parallelism::Rayon(0),
        false => Parallelism::None,
    }
}

/// Rows per block of the row-wise kernels (flex_norm.rs, flex_linear.rs): the unit
/// of work of a thread and of the partial sums over rows, fixed so that those sums
/// come out the same whatever the number of threads.
pub(super) const ROW_BLOCK: usize = 64;

/// Adds up per-block partial sums (`partials`: one run of `width` values per block)
/// in block order.
pub(super) fn add_blocks(partials: &[f32], width: usize) -> Vec<f32> {
    let mut total = vec![0f32; width];
    if width > 0 {
        for part in partials.chunks_exact(width) {
            for (t, p) in total.iter_mut().zip(part) {
                *t += p;
            }
        }
    }
    total
}

/// Output rows per band of [`matmul_rows`], at least.
const MIN_BAND_ROWS: usize = 64;

/// [`matmul`] over every thread of rayon's pool, split by the output's rows: one
/// contiguous band of rows per thread, each a product on its own thread (on the
/// threads left over, where the rows make fewer bands than threads), so each
/// output element is the same sum as in one product. Below burn-flex's threshold
/// for threads (192³ multiply-adds), one product on the calling thread. On the
/// products of a ViT-Tiny/4 training step this ran at 1.05-1.4x the GFLOP/s of the
/// gemm crate's own threading over the whole product (docs/PERFORMANCE.md).
pub(super) fn matmul_rows([m, n, k]: [usize; 3], dst: Dst, accumulate: bool, lhs: Mat, rhs: Mat) {
    let threads = rayon::current_num_threads();
    let bands = threads.min(m / MIN_BAND_ROWS);
    let whole = parallelism([m, n, k]);
    if bands < 2 || matches!(whole, Parallelism::None) {
        return matmul([m, n, k], dst, accumulate, lhs, rhs, whole);
    }
    let par = if bands < threads { Parallelism::Rayon(threads / bands) } else { Parallelism::None };
    let per_band = m.div_ceil(bands);
    let (rs, mut rest) = (dst.rs, dst.data);
    rayon::scope(|s| {
        for r0 in (0..m).step_by(per_band) {
            let rows = per_band.min(m - r0);
            let band = if r0 + rows < m {
                let (band, tail) = std::mem::take(&mut rest).split_at_mut(rows * rs);
                rest = tail;
                band
            } else {
                std::mem::take(&mut rest)
            };
            let lhs = Mat { data: &lhs.data[r0 * lhs.rs..], rs: lhs.rs, cs: lhs.cs };
            let rhs = Mat { data: rhs.data, rs: rhs.rs, cs: rhs.cs };
            s.spawn(move |_| matmul([rows, n, k], Dst { data: band, rs }, accumulate, lhs, rhs, par));
        }
    });
}

/// What the flex kernels' unit tests share: random tensors and a comparison.
#[cfg(test)]
pub(super) mod test_util {
    use burn::tensor::TensorData;
    use burn_flex::FlexTensor;

    use super::dims;

    /// A contiguous tensor of `offset + (u − 0.5)·amp` with `u` uniform in [0, 1).
    pub fn random(shape: &[usize], rng: &mut crate::util::Rng, offset: f32, amp: f32) -> FlexTensor {
        let values: Vec<f32> = (0..shape.iter().product::<usize>()).map(|_| offset + (rng.uniform() - 0.5) * amp).collect();
        FlexTensor::from_data(TensorData::new(values, shape.to_vec()))
    }

    /// The elements in row-major order.
    pub fn values(t: &FlexTensor) -> Vec<f32> {
        t.to_contiguous().as_slice::<f32>().expect("contiguous f32").to_vec()
    }

    /// Same shape, and every element within `tol` times the largest magnitude of
    /// `want` (at least 1).
    pub fn assert_close(what: &str, got: &FlexTensor, want: &FlexTensor, tol: f32) {
        assert_eq!(dims(got), dims(want), "{what}: shape");
        let (g, w) = (values(got), values(want));
        let scale = w.iter().fold(0f32, |a, v| a.max(v.abs())).max(1.0);
        let worst = g.iter().zip(&w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= tol * scale, "{what}: largest difference {worst:e} (values up to {scale})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split into bands of rows, on 1, 2, 3 or 5 threads, a product gives the same
    /// bits as one product on one thread (each element is one sum over the shared
    /// dimension), also for a transposed operand and onto an accumulated output.
    #[test]
    fn bands_of_rows_give_the_product_of_one_thread() {
        let mut rng = crate::util::Rng::new(8);
        for [m, n, k] in [[1000, 200, 192], [333, 70, 400], [200, 576, 200]] {
            let a: Vec<f32> = (0..m * k).map(|_| rng.uniform() - 0.5).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.uniform() - 0.5).collect();
            let start: Vec<f32> = (0..m * n).map(|_| rng.uniform()).collect();
            for transposed in [false, true] {
                let lhs = || match transposed {
                    false => Mat { data: &a, rs: k, cs: 1 },
                    true => Mat { data: &a, rs: 1, cs: m },
                };
                let mut one = start.clone();
                matmul([m, n, k], Dst::rows(&mut one, n), true, lhs(), Mat { data: &b, rs: n, cs: 1 }, Parallelism::None);
                for threads in [1, 2, 3, 5] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
                    let mut banded = start.clone();
                    pool.install(|| {
                        matmul_rows([m, n, k], Dst::rows(&mut banded, n), true, lhs(), Mat { data: &b, rs: n, cs: 1 })
                    });
                    assert!(banded == one, "[{m}, {k}]·[{k}, {n}], lhs transposed {transposed}, {threads} threads");
                }
            }
        }
    }
}
