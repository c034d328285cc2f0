//! flex's [`FusedKernels`]: its GELU kernels (gelu.rs), its layer norm
//! (flex_norm.rs: rows on every core), its linear layer (flex_linear.rs: the bias
//! in the product's output, `db` in blocks of rows), its attention (flex_attn.rs:
//! blocks of query rows, the log-sum-exp kept instead of the softmax) and its
//! convolution (flex_conv.rs: im2col), the products with the `gemm` crate,
//! forward and backward; each falls back to the trait's default (burn-flex's
//! primitives) for operands it does not take.

use burn::backend::ops::ModuleOps;
use burn::backend::Flex;
use burn_flex::FlexTensor;

use super::{
    attn_backward, attn_forward, burn_attention, conv_backward, conv_options, flex_attn, flex_conv, flex_linear, flex_norm, gelu,
    linear, ln_backward, ln_forward, ConvGrads, ConvSaved, FusedKernels, LinearGrads, LnGrads,
};

impl FusedKernels for Flex {
    fn ln_forward(x: FlexTensor, gamma: FlexTensor, beta: FlexTensor, eps: f64) -> (FlexTensor, FlexTensor, FlexTensor) {
        match flex_norm::forward(&x, &gamma, &beta, eps) {
            Some([y, mean, rstd]) => (y, mean, rstd),
            None => ln_forward::<Self>(x, gamma, beta, eps),
        }
    }

    fn ln_backward(
        dy: FlexTensor,
        x: FlexTensor,
        mean: FlexTensor,
        rstd: FlexTensor,
        gamma: FlexTensor,
        _eps: f64,
        want_param_grads: bool,
    ) -> LnGrads<Self> {
        flex_norm::backward(&dy, &x, &mean, &rstd, &gamma, want_param_grads)
            .unwrap_or_else(|| ln_backward::<Self>(dy, x, mean, rstd, gamma, want_param_grads))
    }

    fn linear_forward(x: FlexTensor, w: FlexTensor, b: FlexTensor) -> FlexTensor {
        flex_linear::forward(&x, &w, &b).unwrap_or_else(|| linear::linear_forward::<Self>(x, w, b))
    }

    fn linear_backward(dy: FlexTensor, x: FlexTensor, w: FlexTensor, want: [bool; 3]) -> LinearGrads<Self> {
        flex_linear::backward(&dy, &x, &w, want).unwrap_or_else(|| linear::linear_backward::<Self>(dy, x, w, want))
    }

    fn gelu_kernel(x: FlexTensor) -> FlexTensor {
        gelu::flex_forward(x)
    }

    fn gelu_grad_kernel(dy: FlexTensor, x: FlexTensor) -> FlexTensor {
        gelu::flex_backward(dy, x)
    }

    fn attn_forward(q: FlexTensor, k: FlexTensor, v: FlexTensor, scale: f64) -> (FlexTensor, FlexTensor) {
        flex_attn::forward(&q, &k, &v, scale).unwrap_or_else(|| attn_forward::<Self>(q, k, v, scale))
    }

    fn attn_infer(q: FlexTensor, k: FlexTensor, v: FlexTensor, scale: f64) -> FlexTensor {
        match flex_attn::forward(&q, &k, &v, scale) {
            Some((out, _)) => out,
            None => burn_attention::<Self>(q, k, v, scale),
        }
    }

    /// `saved` is the log-sum-exp (`[B, H, T]`) where flex_attn ran the forward, the
    /// softmax (`[B, H, T, T]`) where the forward fell back to burn's decomposition.
    fn attn_backward(d_out: FlexTensor, qkv: [FlexTensor; 3], out: FlexTensor, saved: FlexTensor, scale: f64) -> [FlexTensor; 3] {
        if saved.layout().num_dims() == 4 {
            return attn_backward::<Self>(d_out, qkv, out, saved, scale);
        }
        flex_attn::backward(&d_out, qkv.each_ref(), &out, &saved, scale).unwrap_or_else(|| {
            // The forward ran flex_attn (f32, shapes that fit), so this is only for an
            // output gradient of another dtype: the decomposition, its softmax recomputed.
            let [q, k, v] = qkv;
            let (out, p) = attn_forward::<Self>(q.clone(), k.clone(), v.clone(), scale);
            attn_backward::<Self>(d_out, [q, k, v], out, p, scale)
        })
    }

    fn conv_forward(
        x: FlexTensor,
        weight: FlexTensor,
        bias: FlexTensor,
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> (FlexTensor, ConvSaved<Self>) {
        let y = flex_conv::forward(&x, &weight, &bias, stride, padding)
            .unwrap_or_else(|| Self::conv2d(x.clone(), weight.clone(), Some(bias.clone()), conv_options(stride, padding)));
        (y, (x, weight, bias, None))
    }

    fn conv_backward(
        dy: FlexTensor,
        (x, weight, bias, _): ConvSaved<Self>,
        stride: [usize; 2],
        padding: [usize; 2],
        want: [bool; 3],
    ) -> ConvGrads<Self> {
        match flex_conv::backward(&dy, &x, &weight, stride, padding, want) {
            Some(grads) => grads,
            None => conv_backward::<Self>(dy, (x, weight, bias), stride, padding, want),
        }
    }
}
