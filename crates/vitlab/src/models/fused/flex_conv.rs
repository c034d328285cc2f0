//! flex's convolution (dilation 1, one group, symmetric zero padding) as
//! im2col and one matrix product per image with the `gemm` crate (the kernel
//! burn-flex multiplies with), forward and backward:
//!
//! - `cols` = im2col(x_b), `[C·kh·kw, Ho·Wo]` (x_b itself for a 1x1 convolution
//!   with stride 1 and no padding);
//! - `y_b = W·cols + b` (`W` as `[O, C·kh·kw]`, the bias written first and the
//!   product accumulated onto it);
//! - `dW = Σ_b dy_b·colsᵀ`, `db = Σ_b rowsum(dy_b)`, `dx_b = col2im(Wᵀ·dy_b)`.
//!
//! burn-flex's own backward runs a transposed convolution for `dx` and a
//! convolution with an output-sized kernel for `dW`, about three quarters of a
//! convolution layer's training time (docs/PERFORMANCE.md). Images are split
//! into one contiguous group per thread, each multiplying on its own thread;
//! a single image uses every thread inside the product.

use std::ops::Range;

use burn::tensor::Shape;
use burn_flex::FlexTensor;

use super::flex_gemm::{dims, matmul, over_groups, zeros_f32, Dst, Mat};
use super::gelu::contiguous_f32;

/// The shapes of one convolution.
#[derive(Clone, Copy, Debug)]
struct Geom {
    b: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    kh: usize,
    kw: usize,
    stride: [usize; 2],
    pad: [usize; 2],
    ho: usize,
    wo: usize,
}

impl Geom {
    fn new(x: &[usize], wt: &[usize], stride: [usize; 2], pad: [usize; 2]) -> Option<Geom> {
        let (&[b, c, h, w], &[o, ci, kh, kw]) = (x, wt) else { return None };
        if ci != c || stride.contains(&0) || h == 0 || w == 0 {
            return None;
        }
        let ho = (h + 2 * pad[0]).checked_sub(kh)? / stride[0] + 1;
        let wo = (w + 2 * pad[1]).checked_sub(kw)? / stride[1] + 1;
        Some(Geom { b, c, h, w, o, kh, kw, stride, pad, ho, wo })
    }
    /// Rows of `cols` (`C·kh·kw`).
    fn k(&self) -> usize {
        self.c * self.kh * self.kw
    }
    /// Output pixels per channel.
    fn p(&self) -> usize {
        self.ho * self.wo
    }
    fn pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride == [1, 1] && self.pad == [0, 0]
    }
    /// The output columns `ox` whose input column `ox·s + j − pad` is inside the image
    /// (empty where kernel column `j` only ever sees padding).
    fn valid_cols(&self, j: usize) -> Range<usize> {
        let (s, pad) = (self.stride[1], self.pad[1]);
        let lo = pad.saturating_sub(j).div_ceil(s).min(self.wo);
        let hi = (self.w + pad).saturating_sub(j).div_ceil(s).min(self.wo);
        lo..hi.max(lo)
    }
    /// The input row of output row `oy` and kernel row `i`, if inside the image.
    fn in_row(&self, oy: usize, i: usize) -> Option<usize> {
        (oy * self.stride[0] + i).checked_sub(self.pad[0]).filter(|&y| y < self.h)
    }
    /// Each run of `Wo` entries of the columns (row `(c·kh + i)·kw + j`, output row
    /// `oy`), in order: the image index its first valid entry reads and its valid
    /// output columns, or `None` where the whole run reads padding.
    fn runs(&self) -> impl Iterator<Item = Option<(usize, Range<usize>)>> + '_ {
        (0..self.c).flat_map(move |c| {
            (0..self.kh).flat_map(move |i| {
                (0..self.kw).flat_map(move |j| {
                    let valid = self.valid_cols(j);
                    (0..self.ho).map(move |oy| {
                        let y = self.in_row(oy, i).filter(|_| !valid.is_empty())?;
                        let x = valid.start * self.stride[1] + j - self.pad[1];
                        Some(((c * self.h + y) * self.w + x, valid.clone()))
                    })
                })
            })
        })
    }
}

/// `cols[(c·kh + i)·kw + j, oy·Wo + ox] = x[c, oy·s + i − pad, ox·s + j − pad]` (0 outside).
fn im2col(g: &Geom, x: &[f32], cols: &mut [f32]) {
    for (dst, run) in cols.chunks_exact_mut(g.wo).zip(g.runs()) {
        let Some((at, valid)) = run else {
            dst.fill(0.0);
            continue;
        };
        dst[..valid.start].fill(0.0);
        dst[valid.end..].fill(0.0);
        if g.stride[1] == 1 {
            dst[valid.clone()].copy_from_slice(&x[at..at + valid.len()]);
        } else {
            for (d, v) in dst[valid].iter_mut().zip(x[at..].iter().step_by(g.stride[1])) {
                *d = *v;
            }
        }
    }
}

/// The columns of image `x`: `x` itself for a 1x1 stride-1 convolution without
/// padding, else [`im2col`] into `cols`.
fn columns<'a>(g: &Geom, x: &'a [f32], cols: &'a mut [f32]) -> &'a [f32] {
    if g.pointwise() {
        return x;
    }
    im2col(g, x, cols);
    cols
}

/// The adjoint of [`im2col`]: adds each column entry onto the input pixel it copied.
fn col2im(g: &Geom, cols: &[f32], dx: &mut [f32]) {
    for (src, run) in cols.chunks_exact(g.wo).zip(g.runs()) {
        if let Some((at, valid)) = run {
            for (d, v) in dx[at..].iter_mut().step_by(g.stride[1]).zip(&src[valid]) {
                *d += *v;
            }
        }
    }
}

/// `conv2d(x, w) + b`, or `None` when an operand is not a contiguous f32 tensor or
/// the shapes do not fit (the caller falls back to burn-flex's convolution).
pub(super) fn forward(
    x: &FlexTensor,
    w: &FlexTensor,
    bias: &FlexTensor,
    stride: [usize; 2],
    pad: [usize; 2],
) -> Option<FlexTensor> {
    let (xs, ws, bs) = (contiguous_f32(x)?, contiguous_f32(w)?, contiguous_f32(bias)?);
    let g = Geom::new(&dims(x), &dims(w), stride, pad)?;
    if bs.len() != g.o {
        return None;
    }
    let (k, p, image) = (g.k(), g.p(), g.c * g.h * g.w);
    let mut y = zeros_f32([g.b, g.o, g.ho, g.wo]);
    over_groups(g.b, [y.storage_mut::<f32>()], [g.o * p], |images, [ys], par| {
        let mut cols = if g.pointwise() { Vec::new() } else { vec![0f32; k * p] };
        for (n, bi) in images.enumerate() {
            let yb = &mut ys[n * g.o * p..(n + 1) * g.o * p];
            for (row, &b) in yb.chunks_exact_mut(p).zip(bs) {
                row.fill(b);
            }
            let rhs = columns(&g, &xs[bi * image..(bi + 1) * image], &mut cols);
            matmul([g.o, p, k], Dst::rows(yb, p), true, Mat { data: ws, rs: k, cs: 1 }, Mat { data: rhs, rs: p, cs: 1 }, par);
        }
    });
    Some(y)
}

/// `[dx, dW, db]` of [`forward`], each only where `want` asks; `None` as [`forward`].
pub(super) fn backward(
    dy: &FlexTensor,
    x: &FlexTensor,
    w: &FlexTensor,
    stride: [usize; 2],
    pad: [usize; 2],
    want: [bool; 3],
) -> Option<[Option<FlexTensor>; 3]> {
    let (dys, xs, ws) = (contiguous_f32(dy)?, contiguous_f32(x)?, contiguous_f32(w)?);
    let g = Geom::new(&dims(x), &dims(w), stride, pad)?;
    if dims(dy) != [g.b, g.o, g.ho, g.wo] {
        return None;
    }
    let (k, p, image) = (g.k(), g.p(), g.c * g.h * g.w);
    let mut dx = want[0].then(|| zeros_f32([g.b, g.c, g.h, g.w]));
    let (dx_out, per_image): (&mut [f32], usize) = match &mut dx {
        Some(t) => (t.storage_mut::<f32>(), image),
        None => (&mut [], 0),
    };
    // Per group: its partial dW and db.
    let partials = over_groups(g.b, [dx_out], [per_image], |images, [dxs], par| {
        let mut dw = vec![0f32; if want[1] { g.o * k } else { 0 }];
        let mut db = vec![0f32; if want[2] { g.o } else { 0 }];
        let mut cols = vec![0f32; if g.pointwise() { 0 } else { k * p }];
        for (n, bi) in images.enumerate() {
            let dyb = &dys[bi * g.o * p..(bi + 1) * g.o * p];
            if want[1] {
                let cols_b = columns(&g, &xs[bi * image..(bi + 1) * image], &mut cols);
                // dW[o, r] += Σ_q dy[o, q]·cols[r, q]
                matmul(
                    [g.o, k, p],
                    Dst::rows(&mut dw, k),
                    true,
                    Mat { data: dyb, rs: p, cs: 1 },
                    Mat { data: cols_b, rs: 1, cs: p },
                    par,
                );
            }
            if want[2] {
                for (acc, row) in db.iter_mut().zip(dyb.chunks_exact(p)) {
                    *acc += row.iter().sum::<f32>();
                }
            }
            if want[0] {
                let dxb = &mut dxs[n * image..(n + 1) * image];
                let wt = Mat { data: ws, rs: 1, cs: k };
                if g.pointwise() {
                    matmul([k, p, g.o], Dst::rows(dxb, p), false, wt, Mat { data: dyb, rs: p, cs: 1 }, par);
                } else {
                    matmul([k, p, g.o], Dst::rows(&mut cols, p), false, wt, Mat { data: dyb, rs: p, cs: 1 }, par);
                    col2im(&g, &cols, dxb);
                }
            }
        }
        (dw, db)
    });
    let sum = |parts: Vec<&Vec<f32>>, shape: Shape| {
        let mut t = zeros_f32(shape);
        let out = t.storage_mut::<f32>();
        for part in parts {
            for (o, v) in out.iter_mut().zip(part) {
                *o += v;
            }
        }
        t
    };
    let dw = want[1].then(|| sum(partials.iter().map(|(w, _)| w).collect(), Shape::new([g.o, g.c, g.kh, g.kw])));
    let db = want[2].then(|| sum(partials.iter().map(|(_, b)| b).collect(), Shape::new([g.o])));
    Some([dx, dw, db])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct sum, in f64.
    fn reference(x: &[f32], w: &[f32], g: &Geom) -> Vec<f64> {
        let mut y = vec![0f64; g.b * g.o * g.p()];
        for b in 0..g.b {
            for o in 0..g.o {
                for oy in 0..g.ho {
                    for ox in 0..g.wo {
                        let mut acc = 0f64;
                        for c in 0..g.c {
                            for i in 0..g.kh {
                                for j in 0..g.kw {
                                    let (y_in, x_in) = (
                                        (oy * g.stride[0] + i) as isize - g.pad[0] as isize,
                                        (ox * g.stride[1] + j) as isize - g.pad[1] as isize,
                                    );
                                    if y_in < 0 || x_in < 0 || y_in >= g.h as isize || x_in >= g.w as isize {
                                        continue;
                                    }
                                    let xv = x[((b * g.c + c) * g.h + y_in as usize) * g.w + x_in as usize] as f64;
                                    acc += xv * w[((o * g.c + c) * g.kh + i) * g.kw + j] as f64;
                                }
                            }
                        }
                        y[((b * g.o + o) * g.ho + oy) * g.wo + ox] = acc;
                    }
                }
            }
        }
        y
    }

    /// im2col and col2im are adjoint: <im2col(x), c> = <x, col2im(c)> for every x, c,
    /// and a product with im2col's columns is the direct convolution sum.
    #[test]
    fn im2col_is_the_convolution_and_col2im_its_adjoint() {
        let cases = [
            ([2, 3, 7, 6], [4, 3, 3, 3], [1, 1], [1, 1]),
            ([1, 2, 9, 8], [3, 2, 4, 4], [2, 2], [1, 1]),
            ([2, 2, 5, 7], [2, 2, 1, 3], [1, 2], [0, 2]),
            // Kernel columns that only ever see padding (found in review: these panicked).
            ([1, 1, 1, 1], [1, 1, 5, 5], [1, 1], [2, 2]),
            ([1, 1, 1, 1], [1, 1, 3, 3], [3, 3], [1, 1]),
            ([1, 2, 2, 2], [2, 2, 7, 7], [2, 2], [3, 3]),
            ([1, 2, 6, 5], [1, 2, 1, 1], [2, 2], [0, 0]),
        ];
        for (xs, wsz, stride, pad) in cases {
            let g = Geom::new(&xs, &wsz, stride, pad).unwrap();
            let mut r = crate::util::Rng::new(7);
            let x: Vec<f32> = (0..xs.iter().product::<usize>()).map(|_| r.uniform() - 0.5).collect();
            let w: Vec<f32> = (0..wsz.iter().product::<usize>()).map(|_| r.uniform() - 0.5).collect();
            let want = reference(&x, &w, &g);
            let image = g.c * g.h * g.w;
            let mut cols = vec![0f32; g.k() * g.p()];
            for b in 0..g.b {
                im2col(&g, &x[b * image..(b + 1) * image], &mut cols);
                for o in 0..g.o {
                    for q in 0..g.p() {
                        let got: f64 = (0..g.k()).map(|r| w[o * g.k() + r] as f64 * cols[r * g.p() + q] as f64).sum();
                        let expected = want[(b * g.o + o) * g.p() + q];
                        assert!((got - expected).abs() < 1e-5, "{xs:?} {wsz:?}: {got} vs {expected}");
                    }
                }
                let c: Vec<f32> = (0..cols.len()).map(|_| r.uniform() - 0.5).collect();
                let mut back = vec![0f32; image];
                col2im(&g, &c, &mut back);
                let lhs: f64 = cols.iter().zip(&c).map(|(a, b)| *a as f64 * *b as f64).sum();
                let rhs: f64 = x[b * image..(b + 1) * image].iter().zip(&back).map(|(a, b)| *a as f64 * *b as f64).sum();
                assert!((lhs - rhs).abs() < 1e-4, "{xs:?}: {lhs} vs {rhs}");
            }
        }
    }
}
