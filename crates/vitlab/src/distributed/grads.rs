//! The gradient all-reduce: every parameter's gradient, flattened into one buffer in
//! the module's visiting order (the same on every replica), weighted by this rank's
//! share of the batch, summed over the ranks, and written back.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor, TensorData};

use super::{Reduce, World};
use crate::tensor_file::tensor_to_vec;
use crate::Result;

/// Replaces the gradients of `modules`' parameters in `grads` by the sum over the ranks
/// of `share * gradient`: with each rank's share of the global batch (its rows over the
/// batch's), the gradient of the mean loss over the whole batch. The new container
/// holds those parameters' gradients only (every caller steps these modules alone).
///
/// burn 0.22.1's `grad_replace` has no LibTorch arm in its dispatch backend (it panics
/// on `tch`), and its gradient container is opaque, so the summed gradients go in
/// through autodiff itself: the backward of `Σ_p sum(p ⊙ G_p)`, with each `G_p` a
/// constant, is exactly `G_p` for every parameter `p` (the product's backward
/// multiplies the sum's ones by `G_p`), on every backend.
pub fn all_reduce_gradients<M: Module>(modules: &[&M], grads: &mut Gradients, share: f64, world: &World) -> Result<()> {
    if world.size() == 1 {
        return Ok(());
    }
    let started = std::time::Instant::now();
    struct Gather<'a> {
        grads: &'a Gradients,
        parts: Vec<Tensor<1>>,
    }
    impl ModuleVisitor for Gather<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = param.val().grad(self.grads) {
                let n = g.shape().num_elements();
                self.parts.push(g.reshape([n]));
            }
        }
    }
    let mut gather = Gather { grads, parts: Vec::new() };
    for module in modules {
        module.visit(&mut gather);
    }
    if gather.parts.is_empty() {
        return Ok(());
    }
    let mut flat = tensor_to_vec(Tensor::cat(gather.parts, 0).mul_scalar(share));
    let reducing = std::time::Instant::now();
    world.all_reduce(&mut flat, Reduce::Sum)?;
    let collective = reducing.elapsed();

    struct Surrogate<'a> {
        grads: &'a Gradients,
        flat: &'a [f32],
        at: usize,
        terms: Vec<Tensor<1>>,
    }
    impl ModuleVisitor for Surrogate<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let value = param.val();
            if let Some(g) = value.grad(self.grads) {
                let shape = g.shape();
                let n = shape.num_elements();
                let summed = TensorData::new(self.flat[self.at..self.at + n].to_vec(), shape);
                let constant = Tensor::<D>::from_data(summed, &value.device());
                self.terms.push((value * constant).sum());
                self.at += n;
            }
        }
    }
    let mut surrogate = Surrogate { grads, flat: &flat, at: 0, terms: Vec::new() };
    for module in modules {
        module.visit(&mut surrogate);
    }
    let terms = surrogate.terms;
    *grads = Tensor::cat(terms, 0).sum().backward();
    world.exchanged(started, collective);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::{Device, Tensor};

    use super::*;
    use crate::distributed::{CommTimes, LocalGroup};

    /// The gradient exchange is timed on every rank, one count per exchange, the
    /// collective inside it; taking the times resets them; one process records nothing.
    #[test]
    fn each_gradient_exchange_is_timed_and_counted() {
        let device = Device::flex().autodiff();
        let exchange = |world: &World| {
            let layer: Linear = LinearConfig::new(4, 3).init(&device);
            let x = Tensor::<2>::ones([2, 4], &device);
            let mut grads = layer.forward(x).sum().backward();
            all_reduce_gradients(&[&layer], &mut grads, 0.5, world).unwrap();
        };
        let worlds = LocalGroup::worlds(2, Duration::from_secs(10));
        let times: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = worlds
                .iter()
                .map(|w| {
                    s.spawn(|| {
                        exchange(w);
                        exchange(w);
                        (w.take_comm_times(), w.take_comm_times())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (first, second) in times {
            assert_eq!(first.steps, 2);
            assert!(first.exchange >= first.collective && first.collective > Duration::ZERO, "{first:?}");
            assert_eq!(second, CommTimes::default(), "taken, so reset");
        }
        let single = World::single();
        exchange(&single);
        assert_eq!(single.take_comm_times(), CommTimes::default());
    }
}
