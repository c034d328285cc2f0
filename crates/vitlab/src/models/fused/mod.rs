//! Layer norm, attention, convolution, reflection padding, GELU and linear layers as single operations
//! with hand-written backward passes, through burn's backend-extension mechanism
//! (the LibTorch kernels in `libtorch.rs`).
//!
//! Under autodiff, burn differentiates `layer_norm` and `attention` through
//! their decompositions: some twenty element-wise kernels per layer norm and a
//! materialised softmax graph per attention, each recorded and replayed. Here
//! each is one graph node whose backward is the closed form:
//!
//! - layer norm, `y = x̂·γ + β` with `x̂ = (x − μ)·r`, `r = 1/√(σ² + ε)`:
//!   `dx = r·(g − mean(g) − x̂·mean(g·x̂))` with `g = dy·γ`,
//!   `dγ = Σ dy·x̂`, `dβ = Σ dy` (sums over every row);
//! - attention, `O = softmax(s·QKᵀ)·V`: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`,
//!   `dS = P ⊙ (dP − rowsum(dO ⊙ O))`, `dQ = s·dS·K`, `dK = s·dSᵀ·Q`.
//!
//! [`FusedKernels`] holds the forward (which also returns what the backward
//! needs) and the backward per execution backend: the defaults are written
//! with burn's backend primitives and serve every backend; LibTorch overrides
//! them with the kernels PyTorch itself runs (`native_layer_norm`, and CPU
//! flash attention forward and backward), so a vitlab training step executes
//! the same kernels as PyTorch eager. [`VitOps`] is the extension routed
//! through burn's `Dispatch`: without autodiff it calls the backend's own
//! fused forward (`layer_norm`, `attention`); with autodiff it records one
//! node per call. The parity tests (tests/parity.rs) check both against
//! PyTorch's outputs and gradients.

#![allow(deprecated)] // burn marks its LibTorch backend deprecated; vitlab keeps it behind the `tch` feature.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::ops::{AttentionModuleOptions, ConvOptions, ModuleOps, PadMode};
use burn::backend::tensor::FloatTensor;
use burn::backend::{backend_extension, Autodiff, AutodiffBackend, Backend, Dispatch, TensorMetadata};
use burn::nn::conv::Conv2d;
use burn::nn::PaddingConfig2d;
use burn::tensor::{Shape, Slice, Tensor};

use super::precision::{lower, upper};

mod flex;
mod flex_attn;
mod flex_conv;
mod flex_gemm;
mod flex_linear;
mod flex_norm;
mod gelu;
mod linear;

pub use linear::{linear, LinearGrads};

/// Forward-with-saved-state and backward kernels for the fused operations.
/// The defaults are burn backend primitives; a backend overrides what it has
/// a faster kernel for.
pub trait FusedKernels: Backend {
    /// Layer norm over the last dimension: `(y, mean, rstd)`, the statistics
    /// with the last dimension kept (size 1).
    fn ln_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        ln_forward::<Self>(x, gamma, beta, eps)
    }

    /// Gradients of [`FusedKernels::ln_forward`]: `(dx, dγ, dβ)`, `dγ` and
    /// `dβ` only when asked for.
    #[allow(clippy::too_many_arguments)]
    fn ln_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
        want_param_grads: bool,
    ) -> LnGrads<Self> {
        let _ = eps; // the saved statistics already hold it
        ln_backward::<Self>(dy, x, mean, rstd, gamma, want_param_grads)
    }

    /// `x·W + b` over rows (linear.rs): burn's matmul and add by default.
    fn linear_forward(x: FloatTensor<Self>, w: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        linear::linear_forward::<Self>(x, w, b)
    }

    /// `(dx, dW, db)` of [`FusedKernels::linear_forward`], those `want` asks for.
    fn linear_backward(dy: FloatTensor<Self>, x: FloatTensor<Self>, w: FloatTensor<Self>, want: [bool; 3]) -> LinearGrads<Self> {
        linear::linear_backward::<Self>(dy, x, w, want)
    }

    /// GELU, `x·Φ(x)` (the exact, erf form): burn's kernel by default, vitlab's
    /// vectorised one on flex (gelu.rs).
    fn gelu_kernel(x: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as burn::backend::ops::ActivationOps<Self>>::gelu(x)
    }

    /// `dy·(Φ(x) + x·φ(x))`, the gradient of [`FusedKernels::gelu_kernel`].
    fn gelu_grad_kernel(dy: FloatTensor<Self>, x: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as burn::backend::ops::ActivationOps<Self>>::gelu_backward(x, dy)
    }

    /// Attention over `[B, H, T, hd]`: `(O, saved)`; what is saved is the
    /// backend's business (the softmax here, the log-sum-exp for LibTorch).
    fn attn_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        attn_forward::<Self>(q, k, v, scale)
    }

    /// Attention over `[B, H, T, hd]` without autodiff: the backend's own kernel.
    fn attn_infer(q: FloatTensor<Self>, k: FloatTensor<Self>, v: FloatTensor<Self>, scale: f64) -> FloatTensor<Self> {
        burn_attention::<Self>(q, k, v, scale)
    }

    /// 2-D convolution (dilation 1, one group) with a bias: `(y, saved)`.
    fn conv_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> (FloatTensor<Self>, ConvSaved<Self>) {
        let y = Self::conv2d(x.clone(), weight.clone(), Some(bias.clone()), conv_options(stride, padding));
        (y, (x, weight, bias, None))
    }

    /// Gradients of [`FusedKernels::conv_forward`]: `want` says which of x, weight
    /// and bias need one.
    fn conv_backward(
        dy: FloatTensor<Self>,
        (x, weight, bias, _): ConvSaved<Self>,
        stride: [usize; 2],
        padding: [usize; 2],
        want: [bool; 3],
    ) -> ConvGrads<Self> {
        conv_backward::<Self>(dy, (x, weight, bias), stride, padding, want)
    }

    /// Reflection padding of the last two axes of `[B, C, H, W]` by `[top, bottom, left, right]`.
    fn reflect_pad_forward(x: FloatTensor<Self>, pad: [usize; 4]) -> FloatTensor<Self> {
        let [top, bottom, left, right] = pad;
        Self::float_pad(x, &[(0, 0), (0, 0), (top, bottom), (left, right)], PadMode::Reflect)
    }

    /// Gradient of [`FusedKernels::reflect_pad_forward`] (`x` is its input).
    fn reflect_pad_backward(dy: FloatTensor<Self>, x: FloatTensor<Self>, pad: [usize; 4]) -> FloatTensor<Self> {
        let _ = x;
        reflect_pad_backward::<Self>(dy, pad)
    }

    /// Gradients of [`FusedKernels::attn_forward`]: `(dQ, dK, dV)`.
    fn attn_backward(
        d_out: FloatTensor<Self>,
        qkv: [FloatTensor<Self>; 3],
        out: FloatTensor<Self>,
        saved: FloatTensor<Self>,
        scale: f64,
    ) -> [FloatTensor<Self>; 3] {
        attn_backward::<Self>(d_out, qkv, out, saved, scale)
    }
}

/// What a convolution's backward needs: the input, the weight, the bias, and
/// whatever else the backend saved (LibTorch: its own autograd graph of the
/// forward).
pub type ConvSaved<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>);

/// `(dx, dw, db)` of a convolution, each only when asked for.
pub type ConvGrads<B> = [Option<FloatTensor<B>>; 3];

/// `(dx, dγ, dβ)` of a layer norm.
pub type LnGrads<B> = (FloatTensor<B>, Option<FloatTensor<B>>, Option<FloatTensor<B>>);

/// `[D]` -> `[1, .., 1, D]` of the given rank, for broadcasting.
fn row<B: Backend>(t: FloatTensor<B>, rank: usize) -> FloatTensor<B> {
    let d = t.shape().num_elements();
    let mut dims = vec![1; rank];
    dims[rank - 1] = d;
    B::float_reshape(t, Shape::from(dims))
}

fn ln_forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    eps: f64,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let rank = x.shape().num_dims();
    let last = rank - 1;
    let mean = B::float_mean_dim(x.clone(), last);
    let xc = B::float_sub(x, mean.clone());
    let var = B::float_mean_dim(B::float_mul(xc.clone(), xc.clone()), last);
    let rstd = B::float_recip(B::float_sqrt(B::float_add_scalar(var, eps.into())));
    let y = B::float_mul(B::float_mul(xc, rstd.clone()), row::<B>(gamma, rank));
    (B::float_add(y, row::<B>(beta, rank)), mean, rstd)
}

fn ln_backward<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    gamma: FloatTensor<B>,
    want_param_grads: bool,
) -> LnGrads<B> {
    let shape = x.shape();
    let rank = shape.num_dims();
    let last = rank - 1;
    let d = shape[last];
    let rows = shape.num_elements() / d;
    let xhat = B::float_mul(B::float_sub(x, mean), rstd.clone());
    let sum_rows = |t: FloatTensor<B>| {
        let t = B::float_reshape(t, Shape::new([rows, d]));
        B::float_reshape(B::float_sum_dim(t, 0), Shape::new([d]))
    };
    let (dgamma, dbeta) = if want_param_grads {
        (Some(sum_rows(B::float_mul(dy.clone(), xhat.clone()))), Some(sum_rows(dy.clone())))
    } else {
        (None, None)
    };
    let g = B::float_mul(dy, row::<B>(gamma, rank));
    let c1 = B::float_mean_dim(B::float_mul(g.clone(), xhat.clone()), last);
    let c2 = B::float_mean_dim(g.clone(), last);
    let inner = B::float_sub(B::float_sub(g, c2), B::float_mul(xhat, c1));
    (B::float_mul(inner, rstd), dgamma, dbeta)
}

/// burn's own attention op (no mask, no bias), the inference default.
fn burn_attention<B: Backend>(q: FloatTensor<B>, k: FloatTensor<B>, v: FloatTensor<B>, scale: f64) -> FloatTensor<B> {
    B::attention(q, k, v, None, None, AttentionModuleOptions { scale: Some(scale), ..Default::default() })
}

fn attn_forward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    scale: f64,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let logits = B::float_mul_scalar(B::float_matmul(q, B::float_swap_dims(k, 2, 3)), scale.into());
    let max = B::float_max_dim(logits.clone(), 3);
    let e = B::float_exp(B::float_sub(logits, max));
    let p = B::float_div(e.clone(), B::float_sum_dim(e, 3));
    (B::float_matmul(p.clone(), v), p)
}

fn attn_backward<B: Backend>(
    d_out: FloatTensor<B>,
    [q, k, v]: [FloatTensor<B>; 3],
    out: FloatTensor<B>,
    p: FloatTensor<B>,
    scale: f64,
) -> [FloatTensor<B>; 3] {
    let dv = B::float_matmul(B::float_swap_dims(p.clone(), 2, 3), d_out.clone());
    let dp = B::float_matmul(d_out.clone(), B::float_swap_dims(v, 2, 3));
    // rowsum(dP ⊙ P) = rowsum(dO ⊙ O): the cheaper [T, hd] form.
    let rowsum = B::float_sum_dim(B::float_mul(d_out, out), 3);
    let ds = B::float_mul_scalar(B::float_mul(p, B::float_sub(dp, rowsum)), scale.into());
    let dq = B::float_matmul(ds.clone(), k);
    let dk = B::float_matmul(B::float_swap_dims(ds, 2, 3), q);
    [dq, dk, dv]
}

fn conv_options(stride: [usize; 2], padding: [usize; 2]) -> ConvOptions<2> {
    ConvOptions::new(stride, padding, [1, 1], 1)
}

/// burn's convolution backward (a transposed convolution for `dx`, a convolution
/// with an output-sized kernel for `dW`), for what `want` asks.
fn conv_backward<B: Backend>(
    dy: FloatTensor<B>,
    (x, weight, bias): (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>),
    stride: [usize; 2],
    padding: [usize; 2],
    want: [bool; 3],
) -> ConvGrads<B> {
    let options = conv_options(stride, padding);
    [
        want[0].then(|| B::conv2d_x_backward(x.clone(), weight.clone(), dy.clone(), options.clone())),
        want[1].then(|| B::conv2d_weight_backward(x.clone(), weight, dy.clone(), options)),
        want[2].then(|| B::conv2d_bias_backward(x, bias, dy)),
    ]
}

/// Reflection padding's backward: the gradient of the padded tensor folded back
/// onto the input, one spatial axis at a time (the border strips, mirrored, are
/// added to the rows and columns they copied).
fn reflect_pad_backward<B: Backend>(dy: FloatTensor<B>, [top, bottom, left, right]: [usize; 4]) -> FloatTensor<B> {
    let fold = |g: FloatTensor<B>, axis: usize, before: usize, after: usize| {
        let shape = g.shape();
        let size = shape[axis] - before - after;
        let span = |t: &FloatTensor<B>, start: usize, len: usize| {
            let ranges: Vec<Slice> =
                (0..4).map(|d| if d == axis { Slice::from(start..start + len) } else { Slice::from(0..t.shape()[d]) }).collect();
            ranges
        };
        let mut x = B::float_slice(g.clone(), &span(&g, before, size));
        // Output index j < before copied input index before - j; after the
        // input, index before + size + j copied size - 2 - j.
        for (strip_start, len, target) in [(0, before, 1), (before + size, after, size.saturating_sub(1 + after))] {
            if len == 0 {
                continue;
            }
            let strip = B::float_flip(B::float_slice(g.clone(), &span(&g, strip_start, len)), &[axis]);
            let at = span(&x, target, len);
            let sum = B::float_add(B::float_slice(x.clone(), &at), strip);
            x = B::float_slice_assign(x, &at, sum);
        }
        x
    };
    fold(fold(dy, 3, left, right), 2, top, bottom)
}

// flex's FusedKernels: flex.rs (GELU, attention and convolution kernels; the rest are the defaults).

#[cfg(feature = "cuda")]
impl FusedKernels for burn::backend::Cube {}

#[cfg(feature = "tch")]
mod libtorch;

/// The fused operations, routed by burn's `Dispatch` to the tensor's backend.
#[backend_extension(Flex, LibTorch: cfg(feature = "tch"), Cube: cfg(feature = "cuda"), Autodiff)]
pub trait VitOps: Backend {
    /// Layer norm over the last dimension with scale `gamma` and shift `beta` (`[D]`).
    fn vit_layer_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, beta: FloatTensor<Self>, eps: f64) -> FloatTensor<Self>;

    /// `softmax(scale·QKᵀ)·V` over `[B, H, T, hd]`.
    fn vit_attention(q: FloatTensor<Self>, k: FloatTensor<Self>, v: FloatTensor<Self>, scale: f64) -> FloatTensor<Self>;

    /// 2-D convolution with a bias (dilation 1, one group), zero padding `padding` on both sides.
    fn vit_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> FloatTensor<Self>;

    /// Reflection padding of `[B, C, H, W]` by `[top, bottom, left, right]`.
    fn vit_reflect_pad(x: FloatTensor<Self>, pad: [usize; 4]) -> FloatTensor<Self>;

    /// GELU, `x·Φ(x)`.
    fn vit_gelu(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `x·W + b` over the rows of `x: [N, D]` (`W: [D, E]`, `b: [E]`).
    fn vit_linear(x: FloatTensor<Self>, w: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// Inference (no autodiff): the backend's own fused forward.
macro_rules! plain_vit_ops {
    ($backend:ty) => {
        impl VitOps for $backend {
            fn vit_layer_norm(
                x: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                beta: FloatTensor<Self>,
                eps: f64,
            ) -> FloatTensor<Self> {
                Self::layer_norm(x, gamma, Some(beta), eps)
            }

            fn vit_attention(q: FloatTensor<Self>, k: FloatTensor<Self>, v: FloatTensor<Self>, scale: f64) -> FloatTensor<Self> {
                <Self as FusedKernels>::attn_infer(q, k, v, scale)
            }

            fn vit_conv2d(
                x: FloatTensor<Self>,
                weight: FloatTensor<Self>,
                bias: FloatTensor<Self>,
                stride: [usize; 2],
                padding: [usize; 2],
            ) -> FloatTensor<Self> {
                Self::conv2d(x, weight, Some(bias), conv_options(stride, padding))
            }

            fn vit_reflect_pad(x: FloatTensor<Self>, pad: [usize; 4]) -> FloatTensor<Self> {
                <Self as FusedKernels>::reflect_pad_forward(x, pad)
            }

            fn vit_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
                <Self as FusedKernels>::gelu_kernel(x)
            }

            fn vit_linear(x: FloatTensor<Self>, w: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
                <Self as FusedKernels>::linear_forward(x, w, b)
            }
        }
    };
}

plain_vit_ops!(burn::backend::Flex);
#[cfg(feature = "tch")]
plain_vit_ops!(burn::backend::LibTorch);
#[cfg(feature = "cuda")]
plain_vit_ops!(burn::backend::Cube);

#[derive(Debug)]
struct LayerNormOp;

impl<B: FusedKernels> Backward<B, 3> for LayerNormOp {
    /// x, mean, rstd, gamma, eps.
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, f64);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let (x, mean, rstd, gamma, eps) = ops.state;
        let want = node_gamma.is_some() || node_beta.is_some();
        let (dx, dgamma, dbeta) = B::ln_backward(dy, x, mean, rstd, gamma, eps, want);
        if let Some(node) = node_x {
            grads.register::<B>(node.id, dx);
        }
        if let (Some(node), Some(g)) = (node_gamma, dgamma) {
            grads.register::<B>(node.id, g);
        }
        if let (Some(node), Some(g)) = (node_beta, dbeta) {
            grads.register::<B>(node.id, g);
        }
    }
}

#[derive(Debug)]
struct AttentionOp;

impl<B: FusedKernels> Backward<B, 3> for AttentionOp {
    /// q, k, v, out, saved, scale.
    type State = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, f64);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_q, node_k, node_v] = ops.parents;
        let d_out = grads.consume::<B>(&ops.node);
        let (q, k, v, out, saved, scale) = ops.state;
        let [dq, dk, dv] = B::attn_backward(d_out, [q, k, v], out, saved, scale);
        for (node, g) in [(node_q, dq), (node_k, dk), (node_v, dv)] {
            if let Some(node) = node {
                grads.register::<B>(node.id, g);
            }
        }
    }
}

#[derive(Debug)]
struct ConvOp;

impl<B: FusedKernels> Backward<B, 3> for ConvOp {
    /// What the forward saved, stride, padding.
    type State = (ConvSaved<B>, [usize; 2], [usize; 2]);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let (saved, stride, padding) = ops.state;
        let want = ops.parents.each_ref().map(|p| p.is_some());
        let g = B::conv_backward(dy, saved, stride, padding, want);
        for (node, g) in ops.parents.into_iter().zip(g) {
            if let (Some(node), Some(g)) = (node, g) {
                grads.register::<B>(node.id, g);
            }
        }
    }
}

#[derive(Debug)]
struct ReflectPadOp;

impl<B: FusedKernels> Backward<B, 1> for ReflectPadOp {
    /// The input, the padding.
    type State = (FloatTensor<B>, [usize; 4]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node] = ops.parents;
        let dy = grads.consume::<B>(&ops.node);
        let (x, pad) = ops.state;
        if let Some(node) = node {
            grads.register::<B>(node.id, B::reflect_pad_backward(dy, x, pad));
        }
    }
}

impl<B: FusedKernels + VitOps, C: CheckpointStrategy> VitOps for Autodiff<B, C> {
    fn vit_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> FloatTensor<Self> {
        let prep = ConvOp.prepare::<C>([x.node(), weight.node(), bias.node()]).compute_bound().stateful();
        let (x, weight, bias) = (Self::inner(x), Self::inner(weight), Self::inner(bias));
        match prep {
            OpsKind::Tracked(prep) => {
                let (y, saved) = B::conv_forward(x, weight, bias, stride, padding);
                prep.finish((saved, stride, padding), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::vit_conv2d(x, weight, bias, stride, padding)),
        }
    }

    fn vit_reflect_pad(x: FloatTensor<Self>, pad: [usize; 4]) -> FloatTensor<Self> {
        let prep = ReflectPadOp.prepare::<C>([x.node()]).compute_bound().stateful();
        let x = Self::inner(x);
        match prep {
            OpsKind::Tracked(prep) => {
                let y = B::reflect_pad_forward(x.clone(), pad);
                prep.finish((x, pad), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::vit_reflect_pad(x, pad)),
        }
    }

    fn vit_gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let prep = gelu::GeluOp.prepare::<C>([x.node()]).compute_bound().stateful();
        let x = Self::inner(x);
        match prep {
            OpsKind::Tracked(prep) => {
                let y = B::gelu_kernel(x.clone());
                prep.finish(x, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::vit_gelu(x)),
        }
    }

    fn vit_linear(x: FloatTensor<Self>, w: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        let prep = linear::LinearOp.prepare::<C>([x.node(), w.node(), b.node()]).compute_bound().stateful();
        let (x, w, b) = (Self::inner(x), Self::inner(w), Self::inner(b));
        match prep {
            OpsKind::Tracked(prep) => {
                let y = B::linear_forward(x.clone(), w.clone(), b);
                prep.finish((x, w), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::vit_linear(x, w, b)),
        }
    }

    fn vit_layer_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, beta: FloatTensor<Self>, eps: f64) -> FloatTensor<Self> {
        let prep = LayerNormOp.prepare::<C>([x.node(), gamma.node(), beta.node()]).compute_bound().stateful();
        let (x, gamma, beta) = (Self::inner(x), Self::inner(gamma), Self::inner(beta));
        match prep {
            OpsKind::Tracked(prep) => {
                let (y, mean, rstd) = B::ln_forward(x.clone(), gamma.clone(), beta, eps);
                prep.finish((x, mean, rstd, gamma, eps), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::vit_layer_norm(x, gamma, beta, eps)),
        }
    }

    fn vit_attention(q: FloatTensor<Self>, k: FloatTensor<Self>, v: FloatTensor<Self>, scale: f64) -> FloatTensor<Self> {
        let prep = AttentionOp.prepare::<C>([q.node(), k.node(), v.node()]).compute_bound().stateful();
        let (q, k, v) = (Self::inner(q), Self::inner(k), Self::inner(v));
        match prep {
            OpsKind::Tracked(prep) => {
                let (out, saved) = B::attn_forward(q.clone(), k.clone(), v.clone(), scale);
                prep.finish((q, k, v, out.clone(), saved, scale), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::vit_attention(q, k, v, scale)),
        }
    }
}

/// Layer norm of `x` over its last dimension (`gamma`, `beta`: `[D]`).
pub fn layer_norm<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, beta: Tensor<1>, eps: f64) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as VitOps>::vit_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        eps,
    ))
}

/// `softmax(scale·QKᵀ)·V` over `[B, H, T, hd]` tensors.
/// Under autocast in bf16, the result cast back to fp32 (models/precision.rs).
pub fn attention(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, scale: f64) -> Tensor<4> {
    let [q, k, v] = [q, k, v].map(|t| lower(t).into_dispatch());
    upper(Tensor::from_dispatch(<Dispatch as VitOps>::vit_attention(q, k, v, scale)))
}

/// A convolution layer's forward as one fused operation (PyTorch's kernels and
/// fused backward on LibTorch); layers with other options than a bias, dilation
/// 1, one group and symmetric zero padding take burn's `Conv2d::forward`.
pub fn conv2d(conv: &Conv2d, x: Tensor<4>) -> Tensor<4> {
    let padding = match conv.padding {
        PaddingConfig2d::Valid => Some([0, 0]),
        PaddingConfig2d::Explicit(top, left, bottom, right) if top == bottom && left == right => Some([top, left]),
        _ => None,
    };
    match (&conv.bias, padding) {
        (Some(bias), Some(padding)) if conv.dilation == [1, 1] && conv.groups == 1 => {
            upper(Tensor::from_dispatch(<Dispatch as VitOps>::vit_conv2d(
                lower(x).into_dispatch(),
                lower(conv.weight.val()).into_dispatch(),
                lower(bias.val()).into_dispatch(),
                conv.stride,
                padding,
            )))
        }
        _ if super::precision::compute_dtype().is_none() => conv.forward(x),
        _ => {
            // burn's Conv2d::forward, its operands in the products' dtype.
            let [_, _, h, w] = x.dims();
            let padding = match conv.padding {
                PaddingConfig2d::Valid => [(0, 0), (0, 0)],
                PaddingConfig2d::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
                PaddingConfig2d::Same => {
                    [same_padding(conv.kernel_size[0], conv.stride[0], h), same_padding(conv.kernel_size[1], conv.stride[1], w)]
                }
            };
            let options = ConvOptions { stride: conv.stride, padding, dilation: conv.dilation, groups: conv.groups };
            let bias = conv.bias.as_ref().map(|b| lower(b.val()));
            upper(burn::tensor::module::conv2d(lower(x), lower(conv.weight.val()), bias, options))
        }
    }
}

/// `PaddingConfig2d::Same`'s `(begin, end)` padding of one dimension, as burn's
/// `Conv2d` computes it (that helper is private to burn-nn).
fn same_padding(kernel: usize, stride: usize, size: usize) -> (usize, usize) {
    let out = size.div_ceil(stride);
    let total = if out > 0 { ((out - 1) * stride + kernel).saturating_sub(size) } else { 0 };
    (total / 2, total - total / 2)
}

/// GELU (`F.gelu(x)`, the erf form) as one operation with a closed-form
/// backward; vectorised over every core on flex (gelu.rs).
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as VitOps>::vit_gelu(x.into_dispatch()))
}

/// Reflection padding of `[B, C, H, W]` by `[top, bottom, left, right]`
/// (`F.pad(x, (left, right, top, bottom), mode="reflect")`).
pub fn reflect_pad(x: Tensor<4>, pad: [usize; 4]) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as VitOps>::vit_reflect_pad(x.into_dispatch(), pad))
}
