//! Mixed precision as PyTorch's `torch.autocast(dtype=torch.bfloat16)` runs it:
//! the matrix products (every linear layer, attention, convolution) take bf16
//! copies of their inputs and weights and compute in bf16 (the kernels
//! accumulate in fp32); everything else, layer norms, the softmax of the loss,
//! residual sums, GELU, the optimiser, stays in fp32, and the weights and the
//! optimiser state are fp32 throughout ("master weights").
//!
//! A product's result is cast back to fp32 at once, where autocast hands the
//! bf16 result to the next operation: the value is the same (a bf16 number is
//! an fp32 number), and the next op would have computed in fp32 anyway
//! (GELU and the residual add of a bf16 tensor promote or upcast internally), so
//! the only difference is the bias, added in fp32 here and rounded to bf16 first
//! by PyTorch's `addmm`. Under autodiff the casts are graph nodes: the gradient of
//! a product is computed in bf16 and cast to fp32 for the master weight, as
//! PyTorch's `ToCopyBackward` does.
//!
//! The mode is per thread and scoped, as `torch.autocast` is a context: the
//! trainer enters it around a run ([`autocast`]), the layers ask [`lower`] and
//! [`upper`] at each product.

use std::cell::Cell;

use burn::tensor::{FloatDType, Tensor};

thread_local! {
    static COMPUTE: Cell<Option<FloatDType>> = const { Cell::new(None) };
}

/// The matrix products' dtype while this guard lives (`None`: fp32, as without it).
#[must_use = "autocast lasts as long as the guard"]
pub struct Autocast {
    previous: Option<FloatDType>,
}

impl Drop for Autocast {
    fn drop(&mut self) {
        COMPUTE.with(|c| c.set(self.previous));
    }
}

/// Run the matrix products of this thread in `dtype` (bf16) until the guard drops.
pub fn autocast(dtype: Option<FloatDType>) -> Autocast {
    Autocast { previous: COMPUTE.with(|c| c.replace(dtype)) }
}

/// The products' dtype now, if autocast is on.
pub fn compute_dtype() -> Option<FloatDType> {
    COMPUTE.with(|c| c.get())
}

/// An operand of a product, in the products' dtype.
pub(crate) fn lower<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    match compute_dtype() {
        Some(dtype) => t.cast(dtype),
        None => t,
    }
}

/// A product's result, back in fp32.
pub(crate) fn upper<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    match compute_dtype() {
        Some(_) => t.cast(FloatDType::F32),
        None => t,
    }
}
