//! LibTorch's [`FusedKernels`]: the kernels PyTorch eager itself runs for
//! `nn.LayerNorm`, `F.scaled_dot_product_attention` (CPU flash attention forward
//! and backward), convolutions and reflection padding, so a vitlab training step
//! executes what a PyTorch step does.

use burn::backend::tensor::FloatTensor;

use super::{attn_backward, attn_forward, ConvGrads, ConvSaved, FusedKernels, LinearGrads, LnGrads};

/// LibTorch: the kernels PyTorch eager runs for `nn.LayerNorm` and, on CPU,
/// `scaled_dot_product_attention` (flash attention forward and backward).
impl FusedKernels for burn::backend::LibTorch {
    /// `addmm`, as `nn.Linear`: the bias broadcast into the output and the product
    /// accumulated onto it, one output buffer where a product plus a bias add
    /// needs two (no faster, measured: the bias copy is still a pass of its own).
    fn linear_forward(x: FloatTensor<Self>, w: FloatTensor<Self>, b: FloatTensor<Self>) -> FloatTensor<Self> {
        use burn::backend::libtorch::TchTensor;
        TchTensor::new(b.tensor.addmm(&x.tensor, &w.tensor))
    }

    /// The products on transposed views (MKL reads them as such, no copies) and
    /// the bias gradient as PyTorch's `Linear` backward takes it, `dy.sum(0)`.
    fn linear_backward(dy: FloatTensor<Self>, x: FloatTensor<Self>, w: FloatTensor<Self>, want: [bool; 3]) -> LinearGrads<Self> {
        use burn::backend::libtorch::TchTensor;
        let dy = &dy.tensor;
        [
            want[0].then(|| TchTensor::new(dy.mm(&w.tensor.tr()))),
            want[1].then(|| TchTensor::new(x.tensor.tr().mm(dy))),
            want[2].then(|| TchTensor::new(dy.sum_dim_intlist([0i64].as_slice(), false, dy.kind()))),
        ]
    }

    fn ln_forward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use burn::backend::libtorch::TchTensor;
        let d = *x.tensor.size().last().expect("layer norm of a scalar");
        let (y, mean, rstd) = x.tensor.native_layer_norm([d].as_slice(), Some(&gamma.tensor), Some(&beta.tensor), eps);
        (TchTensor::new(y), TchTensor::new(mean), TchTensor::new(rstd))
    }

    /// tch does not bind `native_layer_norm_backward`, so PyTorch's autograd
    /// runs it: the forward is recomputed on detached leaves and `dot(y, dy)`
    /// differentiated, which hands `dy` to LayerNorm's fused backward kernel
    /// (dx, dγ and dβ in one pass) instead of a dozen separate element-wise
    /// and reduction kernels.
    fn ln_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        _mean: FloatTensor<Self>,
        _rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
        want_param_grads: bool,
    ) -> LnGrads<Self> {
        use burn::backend::libtorch::TchTensor;
        let d = *x.tensor.size().last().expect("layer norm of a scalar");
        tch::with_grad(|| {
            let x = x.tensor.detach().set_requires_grad(true);
            let gamma = gamma.tensor.detach().set_requires_grad(want_param_grads);
            let beta = gamma.zeros_like().set_requires_grad(want_param_grads);
            let (y, _, _) = x.native_layer_norm([d].as_slice(), Some(&gamma), Some(&beta), eps);
            let l = y.reshape([-1]).dot(&dy.tensor.reshape([-1]));
            if want_param_grads {
                let mut g = tch::Tensor::run_backward(&[&l], &[&x, &gamma, &beta], false, false).into_iter();
                let (dx, dg, db) = (g.next().expect("dx"), g.next().expect("dγ"), g.next().expect("dβ"));
                (TchTensor::new(dx), Some(TchTensor::new(dg)), Some(TchTensor::new(db)))
            } else {
                let dx = tch::Tensor::run_backward(&[&l], &[&x], false, false).pop().expect("dx");
                (TchTensor::new(dx), None, None)
            }
        })
    }

    /// PyTorch's convolution, recorded by PyTorch's autograd on detached leaves
    /// so that the backward is its fused `convolution_backward` (dx, dw and db
    /// in one call, only those asked for), which tch does not bind directly;
    /// burn's generic backward runs a transposed convolution and a convolution
    /// of the input with the output gradient instead.
    fn conv_forward(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        stride: [usize; 2],
        padding: [usize; 2],
    ) -> (FloatTensor<Self>, ConvSaved<Self>) {
        use burn::backend::libtorch::TchTensor;
        let (stride, padding) = (stride.map(|v| v as i64), padding.map(|v| v as i64));
        tch::with_grad(|| {
            let leaf = |t: &TchTensor| t.tensor.detach().set_requires_grad(true);
            let (xl, wl, bl) = (leaf(&x), leaf(&weight), leaf(&bias));
            let y = xl.conv2d(&wl, Some(&bl), stride.as_slice(), padding.as_slice(), [1, 1].as_slice(), 1);
            let out = TchTensor::new(y.detach());
            (out, (TchTensor::new(xl), TchTensor::new(wl), TchTensor::new(bl), Some(TchTensor::new(y))))
        })
    }

    fn conv_backward(
        dy: FloatTensor<Self>,
        (x, weight, bias, graph): ConvSaved<Self>,
        stride: [usize; 2],
        padding: [usize; 2],
        want: [bool; 3],
    ) -> ConvGrads<Self> {
        use burn::backend::libtorch::TchTensor;
        let Some(y) = graph else { unreachable!("LibTorch's conv_forward always saves its graph") };
        let _ = (stride, padding);
        tch::with_grad(|| {
            let leaves: Vec<&tch::Tensor> =
                [&x.tensor, &weight.tensor, &bias.tensor].into_iter().zip(want).filter(|(_, w)| *w).map(|(t, _)| t).collect();
            if leaves.is_empty() {
                return [None, None, None];
            }
            // d/dy of sum(y * dy) is dy: PyTorch's backward of the convolution runs on it.
            let l = y.tensor.reshape([-1]).dot(&dy.tensor.contiguous().reshape([-1]));
            let mut g = tch::Tensor::run_backward(&[&l], &leaves, false, false).into_iter();
            want.map(|w| w.then(|| TchTensor::new(g.next().expect("one gradient per wanted leaf"))))
        })
    }

    fn reflect_pad_forward(x: FloatTensor<Self>, [top, bottom, left, right]: [usize; 4]) -> FloatTensor<Self> {
        use burn::backend::libtorch::TchTensor;
        let pad = [left, right, top, bottom].map(|v| v as i64);
        TchTensor::new(x.tensor.reflection_pad2d(pad.as_slice()))
    }

    fn reflect_pad_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        [top, bottom, left, right]: [usize; 4],
    ) -> FloatTensor<Self> {
        use burn::backend::libtorch::TchTensor;
        let pad = [left, right, top, bottom].map(|v| v as i64);
        TchTensor::new(x.tensor.reflection_pad2d_backward(&dy.tensor, pad.as_slice()))
    }

    fn attn_forward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        use burn::backend::libtorch::TchTensor;
        if q.tensor.device().is_cuda() {
            return attn_forward::<Self>(q, k, v, scale);
        }
        let (out, lse) = tch::Tensor::internal_scaled_dot_product_flash_attention_for_cpu(
            &q.tensor,
            &k.tensor,
            &v.tensor,
            0.0,
            false,
            None::<tch::Tensor>,
            scale,
        );
        (TchTensor::new(out), TchTensor::new(lse))
    }

    fn attn_backward(
        d_out: FloatTensor<Self>,
        [q, k, v]: [FloatTensor<Self>; 3],
        out: FloatTensor<Self>,
        saved: FloatTensor<Self>,
        scale: f64,
    ) -> [FloatTensor<Self>; 3] {
        use burn::backend::libtorch::TchTensor;
        if q.tensor.device().is_cuda() {
            return attn_backward::<Self>(d_out, [q, k, v], out, saved, scale);
        }
        let (dq, dk, dv) = tch::Tensor::internal_scaled_dot_product_flash_attention_for_cpu_backward(
            &d_out.tensor,
            &q.tensor,
            &k.tensor,
            &v.tensor,
            &out.tensor,
            &saved.tensor,
            0.0,
            false,
            None::<tch::Tensor>,
            scale,
        );
        [TchTensor::new(dq), TchTensor::new(dk), TchTensor::new(dv)]
    }
}
