//! flex's [`FusedKernels`]: its GELU kernels (gelu.rs), its attention
//! (flex_attn.rs: blocks of query rows, the log-sum-exp kept instead of the
//! softmax) and its convolution (flex_conv.rs: im2col), both with the `gemm`
//! crate, forward and backward; the rest are the trait's defaults (burn-flex's
//! primitives).

use burn::backend::ops::ModuleOps;
use burn::backend::Flex;
use burn_flex::FlexTensor;

use super::{
    attn_backward, attn_forward, burn_attention, conv_backward, conv_options, flex_attn, flex_conv, gelu, ConvGrads, ConvSaved,
    FusedKernels,
};

impl FusedKernels for Flex {
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
