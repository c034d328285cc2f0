//! What flex's hand-written operations (flex_conv.rs, flex_attn.rs) share: a
//! strided matrix product through the `gemm` crate (the kernel burn-flex
//! multiplies with), and a split of independent items (images, batch entries)
//! into one contiguous group per thread of rayon's pool.

use std::ops::Range;

use burn_flex::FlexTensor;
use gemm::{gemm, Parallelism};

/// An operand of [`matmul`]: its elements and their row and column strides (a
/// transpose is a swap of the two).
pub(super) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
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

/// A tensor's shape.
pub(super) fn dims(t: &FlexTensor) -> Vec<usize> {
    t.layout().shape().iter().copied().collect()
}
