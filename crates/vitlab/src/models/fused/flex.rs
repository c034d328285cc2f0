//! flex's [`FusedKernels`]: its GELU kernels (gelu.rs) and its convolution
//! (flex_conv.rs: im2col and the `gemm` crate, forward and backward); the rest
//! are the trait's defaults (burn-flex's primitives).

use burn::backend::ops::ModuleOps;
use burn::backend::Flex;
use burn_flex::FlexTensor;

use super::{conv_backward, conv_options, flex_conv, gelu, ConvGrads, ConvSaved, FusedKernels};

impl FusedKernels for Flex {
    fn gelu_kernel(x: FlexTensor) -> FlexTensor {
        gelu::flex_forward(x)
    }

    fn gelu_grad_kernel(dy: FlexTensor, x: FlexTensor) -> FlexTensor {
        gelu::flex_backward(dy, x)
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
