//! A linear layer over rows, `y = x·W + b` with `x: [N, D]`, `W: [D, E]`, `b: [E]`,
//! as one operation, and its backward `dx = dy·Wᵀ`, `dW = xᵀ·dy`, `db = Σ_rows dy`.
//!
//! burn's `linear` is a matrix product into a fresh output followed by a
//! separate broadcast add of the bias, recorded as two autodiff nodes. Here
//! LibTorch runs `addmm`, as PyTorch's `nn.Linear`: the bias is copied into the
//! output and the product accumulated onto it, so one output buffer instead of
//! two (the copy is still a pass of its own: measured, this saves memory, not
//! time; docs/PERFORMANCE.md). The backward computes only the gradients asked
//! for (no `dx` for a layer fed by the images). The defaults (flex, CubeCL)
//! are burn's own primitives, the same work as before.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Dispatch, TensorMetadata};
use burn::tensor::{Shape, Tensor};

use super::{FusedKernels, VitOps};

/// `(dx, dW, db)` of a linear layer, each only when asked for.
pub type LinearGrads<B> = [Option<FloatTensor<B>>; 3];

/// The autodiff node of [`VitOps::vit_linear`]; it keeps the input and the weight.
#[derive(Debug)]
pub(super) struct LinearOp;

impl<B: FusedKernels> Backward<B, 3> for LinearOp {
    /// x, W.
    type State = (FloatTensor<B>, FloatTensor<B>);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let (x, w) = ops.state;
        let want = ops.parents.each_ref().map(|p| p.is_some());
        let g = B::linear_backward(dy, x, w, want);
        for (node, g) in ops.parents.into_iter().zip(g) {
            if let (Some(node), Some(g)) = (node, g) {
                grads.register::<B>(node.id, g);
            }
        }
    }
}

/// `x·W + b` in burn's primitives (the default forward).
pub(super) fn linear_forward<B: Backend>(x: FloatTensor<B>, w: FloatTensor<B>, b: FloatTensor<B>) -> FloatTensor<B> {
    let e = b.shape().num_elements();
    B::float_add(B::float_matmul(x, w), B::float_reshape(b, Shape::new([1, e])))
}

/// The gradients of [`linear_forward`] in burn's primitives (the default backward).
pub(super) fn linear_backward<B: Backend>(
    dy: FloatTensor<B>,
    x: FloatTensor<B>,
    w: FloatTensor<B>,
    [want_x, want_w, want_b]: [bool; 3],
) -> LinearGrads<B> {
    let e = dy.shape()[1];
    [
        want_x.then(|| B::float_matmul(dy.clone(), B::float_swap_dims(w, 0, 1))),
        want_w.then(|| B::float_matmul(B::float_swap_dims(x, 0, 1), dy.clone())),
        want_b.then(|| B::float_reshape(B::float_sum_dim(dy, 0), Shape::new([e]))),
    ]
}

/// `x·W + b` over the rows of `x` (`[N, D]`, `W: [D, E]`, `b: [E]`) as one
/// operation: `addmm` on LibTorch, as PyTorch's `nn.Linear`.
pub fn linear(x: Tensor<2>, w: Tensor<2>, b: Tensor<1>) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as VitOps>::vit_linear(x.into_dispatch(), w.into_dispatch(), b.into_dispatch()))
}
