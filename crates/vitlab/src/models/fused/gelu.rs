//! GELU as one operation: `y = x·Φ(x) = ½·x·(1 + erf(x/√2))`, and its backward
//! `dx = dy·(Φ(x) + x·φ(x))` with `φ(x) = exp(−x²/2)/√(2π)`.
//!
//! burn's autodiff already records GELU as one node, but flex runs both passes
//! element by element on one thread with a scalar `erff` (libm). Here flex gets
//! a kernel over every core of rayon's pool (the one flex's matrix products use)
//! whose inner loop the compiler vectorises, built for AVX-512 and AVX2+FMA and
//! chosen at run time. erf is Abramowitz & Stegun 7.1.26,
//! `erf(z) = 1 − t·(a₁ + t·(a₂ + t·(a₃ + t·(a₄ + t·a₅))))·exp(−z²)` with
//! `t = 1/(1 + p·|z|)`, odd in `z` (absolute error ≤ 1.5e-7), the formula of
//! PyTorch's own vectorised CPU `erf` (ATen's `Vectorized<float>::erf`); the
//! backward reuses its `exp(−z²) = exp(−x²/2)` for `φ`. LibTorch and CubeCL keep
//! their own kernels (ATen's `gelu` and `gelu_backward` on LibTorch).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::ops::ActivationOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::Flex;
use burn::tensor::DType;
use burn_flex::FlexTensor;

use super::flex_gemm::zeros_f32;
use super::FusedKernels;

/// The autodiff node of [`super::VitOps::vit_gelu`]; it keeps the input.
#[derive(Debug)]
pub(super) struct GeluOp;

impl<B: FusedKernels> Backward<B, 1> for GeluOp {
    type State = FloatTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        if let Some(node) = node {
            grads.register::<B>(node.id, B::gelu_grad_kernel(dy, ops.state));
        }
    }
}

/// flex's GELU forward (the fallback: burn-flex's, for other dtypes or layouts).
pub(super) fn flex_forward(x: FlexTensor) -> FlexTensor {
    match contiguous_f32(&x) {
        Some(src) => {
            let mut y = zeros_f32(x.layout().shape().clone());
            let out: &mut [f32] = y.storage_mut();
            in_parallel(&mut [out], &[src], |[y], [x]| kernels::forward(x, y));
            y
        }
        None => <Flex as ActivationOps<Flex>>::gelu(x),
    }
}

/// flex's GELU backward.
pub(super) fn flex_backward(dy: FlexTensor, x: FlexTensor) -> FlexTensor {
    match (contiguous_f32(&x), contiguous_f32(&dy)) {
        (Some(xs), Some(gs)) if xs.len() == gs.len() => {
            let mut dx = zeros_f32(x.layout().shape().clone());
            let out: &mut [f32] = dx.storage_mut();
            in_parallel(&mut [out], &[xs, gs], |[dx], [x, dy]| kernels::backward(x, dy, dx));
            dx
        }
        _ => <Flex as ActivationOps<Flex>>::gelu_backward(x, dy),
    }
}

/// The elements of an `f32` tensor laid out contiguously, in order.
pub(super) fn contiguous_f32(t: &FlexTensor) -> Option<&[f32]> {
    (t.dtype() == DType::F32).then(|| t.as_slice::<f32>()).flatten()
}

/// Below this many elements a tensor is done on the calling thread.
const MIN_PER_THREAD: usize = 1 << 15;

/// `f` over matching chunks of `outs` and `ins` (all of one length), one chunk per
/// thread of rayon's pool.
pub(super) fn in_parallel<const O: usize, const I: usize>(
    outs: &mut [&mut [f32]; O],
    ins: &[&[f32]; I],
    f: impl Fn([&mut [f32]; O], [&[f32]; I]) + Sync,
) {
    let n = ins[0].len();
    let chunk = n.div_ceil(rayon::current_num_threads()).max(MIN_PER_THREAD).next_multiple_of(64);
    if chunk >= n {
        f(outs.each_mut().map(|o| &mut o[..]), *ins);
        return;
    }
    rayon::scope(|s| {
        let mut rest = outs.each_mut().map(|o| &mut o[..]);
        let mut start = 0;
        while start < n {
            let len = chunk.min(n - start);
            let mine = rest.each_mut().map(|r| {
                let (head, tail) = std::mem::take(r).split_at_mut(len);
                *r = tail;
                head
            });
            let inputs = ins.map(|i| &i[start..start + len]);
            let f = &f;
            s.spawn(move |_| f(mine, inputs));
            start += len;
        }
    });
}

/// The element-wise loops, compiled for the best instruction set this CPU has.
pub(crate) mod kernels {
    const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
    /// `1/√(2π)`.
    const INV_SQRT_2PI: f32 = 0.398_942_3;

    /// `(erf(x/√2), exp(−x²/2))`: A&S 7.1.26 and the exponential it needs.
    #[inline(always)]
    fn erf_and_gauss(x: f32) -> (f32, f32) {
        const P: f32 = 0.327_591_1;
        const A: [f32; 5] = [0.254_829_6, -0.284_496_74, 1.421_413_7, -1.453_152_1, 1.061_405_4];
        let z = x * FRAC_1_SQRT_2;
        let t = 1.0 / (1.0 + P * z.abs());
        let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
        let gauss = exp_nonpositive(-(z * z));
        ((1.0 - poly * gauss).copysign(z), gauss)
    }

    /// `exp(v)` for `v <= 0` (below −87.3, and for a NaN `v`, the result is about
    /// 1.2e-38: callers that must propagate NaN check for it themselves): `2ⁿ·e^r` with `n = round(v/ln 2)`,
    /// `|r| <= ln2/2` in two parts, and Cephes' degree-6 polynomial for `e^r`
    /// (relative error about 1 ulp). Branch-free, so loops over it vectorise: `2ⁿ`
    /// comes from the bits of `ROUND + n` with integer arithmetic, where `n as i32`
    /// (Rust's saturating cast) compiled to a scalar compare and insert per lane and
    /// made the whole GELU loop several times slower.
    #[inline(always)]
    pub(crate) fn exp_nonpositive(v: f32) -> f32 {
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        const ROUND: f32 = 12_582_912.0; // 1.5·2²³: adding it rounds to an integer
        let v = v.max(-87.3);
        // `ROUND + n` for the integer n in [−126, 0]: its bits are ROUND's plus n.
        let rounded = v * std::f32::consts::LOG2_E + ROUND;
        let n = rounded - ROUND;
        let r = v - n * LN2_HI - n * LN2_LO;
        let p = 1.987_569_2e-4;
        let p = p * r + 1.398_199_9e-3;
        let p = p * r + 8.333_452e-3;
        let p = p * r + 4.166_579_6e-2;
        let p = p * r + 1.666_666_5e-1;
        let p = p * r + 0.5;
        let e = p * r * r + r + 1.0;
        // Biased exponent n + 127 (1..=127) into the exponent field: 2ⁿ.
        let two_n = f32::from_bits(rounded.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
        e * two_n
    }

    #[inline(always)]
    fn gelu(x: f32) -> f32 {
        0.5 * x * (1.0 + erf_and_gauss(x).0)
    }

    #[inline(always)]
    fn gelu_grad(x: f32, dy: f32) -> f32 {
        let (erf, gauss) = erf_and_gauss(x);
        dy * (0.5 * (1.0 + erf) + x * INV_SQRT_2PI * gauss)
    }

    macro_rules! dispatch {
        ($name:ident, $generic:ident, ($($arg:ident: $ty:ty),*)) => {
            pub fn $name($($arg: $ty),*) {
                #[cfg(target_arch = "x86_64")]
                {
                    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                    unsafe fn avx512($($arg: $ty),*) {
                        $generic($($arg),*)
                    }
                    #[target_feature(enable = "avx2,fma")]
                    unsafe fn avx2($($arg: $ty),*) {
                        $generic($($arg),*)
                    }
                    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512vl") {
                        // SAFETY: the CPU has the features the function is compiled for.
                        return unsafe { avx512($($arg),*) };
                    }
                    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                        // SAFETY: as above.
                        return unsafe { avx2($($arg),*) };
                    }
                }
                $generic($($arg),*)
            }
        };
    }

    #[inline(always)]
    fn forward_loop(x: &[f32], y: &mut [f32]) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y = gelu(x);
        }
    }

    #[inline(always)]
    fn backward_loop(x: &[f32], dy: &[f32], dx: &mut [f32]) {
        for ((dx, &x), &dy) in dx.iter_mut().zip(x).zip(dy) {
            *dx = gelu_grad(x, dy);
        }
    }

    pub(crate) use dispatch;

    dispatch!(forward, forward_loop, (x: &[f32], y: &mut [f32]));
    dispatch!(backward, backward_loop, (x: &[f32], dy: &[f32], dx: &mut [f32]));
}

#[cfg(test)]
mod tests {
    use super::kernels;

    fn exact(x: f64) -> (f64, f64) {
        let erf = libm::erf(x / std::f64::consts::SQRT_2);
        let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        (0.5 * x * (1.0 + erf), 0.5 * (1.0 + erf) + x * pdf)
    }

    /// The kernels against the exact formula in f64 over [−12, 12] in steps of
    /// 1e-4 (and the extremes): forward within 2.5e-7·max(1, |x|), the derivative
    /// within 5e-7 (measured: 1.85e-7 and 3.55e-7; A&S 7.1.26's 1.5e-7 in erf plus
    /// the f32 rounding of its polynomial); NaN stays NaN.
    #[test]
    fn gelu_and_its_derivative_match_the_exact_formula() {
        let mut xs: Vec<f32> = (-120_000..=120_000).map(|i| i as f32 * 1e-4).collect();
        xs.extend([-1e4, -100.0, -30.0, -9.5, 1e-30, -1e-30, 0.0, -0.0, 30.0, 100.0, 1e4]);
        let mut y = vec![0f32; xs.len()];
        let mut dx = vec![0f32; xs.len()];
        kernels::forward(&xs, &mut y);
        kernels::backward(&xs, &vec![1.0; xs.len()], &mut dx);
        let (mut worst_y, mut worst_d) = (0f64, 0f64);
        for ((&x, &y), &d) in xs.iter().zip(&y).zip(&dx) {
            let (ey, ed) = exact(x as f64);
            let (ry, rd) = ((y as f64 - ey).abs(), (d as f64 - ed).abs());
            assert!(ry <= 2.5e-7 * (x.abs() as f64).max(1.0), "gelu({x}) = {y}, exact {ey}");
            assert!(rd <= 5e-7, "gelu'({x}) = {d}, exact {ed}");
            worst_y = worst_y.max(ry / (x.abs() as f64).max(1.0));
            worst_d = worst_d.max(rd);
        }
        eprintln!("largest error: gelu {worst_y:e} (relative to max(1, |x|)), derivative {worst_d:e}");
        let mut nan = [0f32];
        kernels::forward(&[f32::NAN], &mut nan);
        assert!(nan[0].is_nan());
        kernels::backward(&[f32::NAN], &[1.0], &mut nan);
        assert!(nan[0].is_nan());
    }

    /// `exp_nonpositive` (GELU's and flex attention's softmax exponential) against
    /// f64 over its whole range, [−87.3, 0] in steps of 1e-4 plus the ends and the
    /// powers of two where `n` changes: within 2 ulp-sized relative errors (3e-7);
    /// below −87.3, and for −∞, the clamp's value; a little above 0 (a softmax
    /// shift's rounding), still `exp`.
    #[test]
    fn the_exponential_matches_f64_over_its_range() {
        let mut vs: Vec<f32> = (0..=873_000).map(|i| i as f32 * -1e-4).collect();
        vs.extend((0..=126).flat_map(|n| {
            let v = -(n as f32) * std::f32::consts::LN_2;
            [v, v - 0.5 * std::f32::consts::LN_2, f32::from_bits(v.to_bits() + 1)]
        }));
        vs.extend([-0.0, 1e-7, 1e-3, 0.3]);
        let mut worst = 0f64;
        for &v in vs.iter().filter(|v| **v >= -87.3) {
            let (got, want) = (kernels::exp_nonpositive(v) as f64, (v as f64).exp());
            let rel = (got - want).abs() / want;
            assert!(rel <= 3e-7, "exp({v}) = {got}, f64 {want}");
            worst = worst.max(rel);
        }
        eprintln!("largest relative error of exp_nonpositive: {worst:e}");
        let floor = kernels::exp_nonpositive(-87.3);
        for v in [-87.31, -100.0, -1e30, f32::NEG_INFINITY] {
            assert_eq!(kernels::exp_nonpositive(v), floor, "exp({v})");
        }
    }

    /// The chunks that threads take cover every element once, whatever the length.
    #[test]
    fn chunks_cover_every_element() {
        for n in [0, 1, 63, super::MIN_PER_THREAD + 1, 3 * super::MIN_PER_THREAD + 17] {
            let xs: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.1 - 4.0).collect();
            let mut par = vec![f32::NAN; n];
            super::in_parallel(&mut [&mut par[..]], &[&xs[..]], |[y], [x]| kernels::forward(x, y));
            let mut seq = vec![0f32; n];
            kernels::forward(&xs, &mut seq);
            assert_eq!(par, seq, "length {n}");
        }
    }
}
