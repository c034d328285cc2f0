//! An exponential moving average of a model's weights (Polyak averaging as
//! timm's `ModelEmaV3`): after every optimiser step `e <- decay * e + (1 - decay) * p`
//! for every parameter, the average kept on the plain (non-autodiff) device and
//! saved in checkpoints as `ema.<parameter name>`.
//!
//! The decay at update `t` (1-based, counting optimiser steps) is timm's:
//! `t' = max(0, t - 1)`; 0 when `t' = 0` (the first update copies the weights);
//! with warmup `1 - (1 + t' / gamma)^-power` clamped to `[min_decay, decay]`;
//! without, `decay`.

use std::collections::HashMap;

pub use crate::config::EmaSection;
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Tensor;

/// Collects every float parameter by its dotted path.
struct Collect {
    path: crate::util::ParamPath,
    out: HashMap<String, Tensor<1>>,
}

impl ModuleVisitor for Collect {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.val();
        let n = t.shape().num_elements();
        self.out.insert(self.path.key(), t.reshape([n]));
    }
}

/// Moves each parameter of the average towards the live model's.
struct Lerp<'a> {
    path: crate::util::ParamPath,
    live: &'a HashMap<String, Tensor<1>>,
    decay: f64,
}

impl ModuleMapper for Lerp<'_> {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, tensor, mapper) = param.consume();
        let Some(p) = self.live.get(&self.path.key()) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let p = p.clone().reshape(tensor.dims());
        let new = if self.decay == 0.0 { p } else { tensor.mul_scalar(self.decay).add(p.mul_scalar(1.0 - self.decay)) };
        Param::from_mapped_value(id, new, mapper)
    }
}

/// The averaged weights of a model of type `M` (held without autodiff).
pub struct Ema<M: Module> {
    pub model: M,
    pub config: EmaSection,
    /// Updates taken (optimiser steps since the average started).
    pub updates: u64,
}

impl<M: Module> Ema<M> {
    /// An average that starts at `model` (on the plain device).
    pub fn new(model: M, config: EmaSection) -> Self {
        Ema { model, config, updates: 0 }
    }

    /// One update towards `live` (the same architecture, on the plain device:
    /// pass `model.valid()` for an autodiff model).
    pub fn update(&mut self, live: &M) {
        self.updates += 1;
        let mut c = Collect { path: Default::default(), out: HashMap::new() };
        live.visit(&mut c);
        let decay = self.config.decay_at(self.updates);
        let mut lerp = Lerp { path: Default::default(), live: &c.out, decay };
        self.model = self.model.clone().map(&mut lerp);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::EmaSection;

    #[test]
    fn decay_follows_timms_model_ema_v3() {
        let plain = EmaSection { decay: 0.999, ..Default::default() };
        assert_eq!(plain.decay_at(1), 0.0, "the first update copies the weights");
        assert_eq!(plain.decay_at(2), 0.999);
        let warm = EmaSection { decay: 0.999, warmup: true, ..Default::default() };
        // 1 - (1 + 1)^(-2/3) at the second update, the cap later.
        assert!((warm.decay_at(2) - (1.0 - 2f64.powf(-2.0 / 3.0))).abs() < 1e-15);
        assert!(warm.decay_at(10) < warm.decay_at(100));
        assert_eq!(warm.decay_at(10_000_000), 0.999);
        let floor = EmaSection { decay: 0.999, warmup: true, min_decay: 0.9, ..Default::default() };
        assert_eq!(floor.decay_at(2), 0.9);
    }

    #[test]
    fn bad_decay_names_the_key() {
        let e = EmaSection { decay: 1.0, ..Default::default() }.validate().unwrap_err().to_string();
        assert!(e.contains("ema.decay"), "{e}");
    }
}
