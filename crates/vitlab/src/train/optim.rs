//! Optimisers (AdamW, Adam, SGD with momentum), learning-rate schedules and
//! gradient statistics, written against burn's module visitors so that their
//! state is keyed by the parameters' native names: checkpoints store it in
//! safetensors beside the weights, and a resumed run continues bit for bit.
//!
//! Update rules follow PyTorch's `torch.optim` (AdamW: decoupled weight decay
//! `p -= lr * wd * p`; Adam and SGD: `g += wd * p`).

use std::collections::BTreeMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor};

use crate::config::{OptimName, OptimSection, ScheduleName, ScheduleSection};
use crate::tensor_file::{tensor_to_vec, HostTensor, TensorMap};

/// Per-parameter gradient statistics of one step.
#[derive(Clone, Debug, Default)]
pub struct GradStats {
    /// sqrt of the sum of squares over every parameter's gradient.
    pub global_norm: f64,
    /// max |g| over every parameter.
    pub max_abs: f64,
    /// Gradient norm per transformer block (`blocks.i.*`), in block order.
    pub block_norms: Vec<f64>,
    /// Whether every gradient value is finite.
    pub finite: bool,
}

struct StatsVisitor<'a> {
    path: crate::util::ParamPath,
    grads: &'a Gradients,
    sq: Vec<Tensor<1>>,
    max: Vec<Tensor<1>>,
    block_of: Vec<Option<usize>>,
}

impl ModuleVisitor for StatsVisitor<'_> {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = param.val().grad(self.grads) {
            let n = g.shape().num_elements();
            let flat = g.reshape([n]);
            self.sq.push(flat.clone().powi_scalar(2).sum());
            self.max.push(flat.abs().max());
            self.block_of.push(self.path.block());
        }
    }
}

/// Gradient norms and max |g| over all parameters, read back in one transfer.
pub fn grad_stats<M: Module>(module: &M, grads: &Gradients) -> GradStats {
    let mut v = StatsVisitor { path: Default::default(), grads, sq: Vec::new(), max: Vec::new(), block_of: Vec::new() };
    module.visit(&mut v);
    if v.sq.is_empty() {
        return GradStats { finite: true, ..Default::default() };
    }
    let n = v.sq.len();
    let all = tensor_to_vec(Tensor::cat([v.sq, v.max].concat(), 0));
    let (sq, max) = all.split_at(n);
    let blocks = v.block_of.iter().flatten().max().map_or(0, |m| m + 1);
    let mut block_sq = vec![0f64; blocks];
    for (s, b) in sq.iter().zip(&v.block_of) {
        if let Some(b) = b {
            block_sq[*b] += *s as f64;
        }
    }
    let total: f64 = sq.iter().map(|&s| s as f64).sum();
    GradStats {
        global_norm: total.sqrt(),
        max_abs: max.iter().fold(0f64, |m, &x| m.max(x as f64)),
        block_norms: block_sq.into_iter().map(f64::sqrt).collect(),
        finite: total.is_finite() && max.iter().all(|x| x.is_finite()),
    }
}

/// One parameter of the flat layout: its key, its number of elements and its
/// per-parameter options.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    key: String,
    len: usize,
    decay: bool,
    lr_scale: f64,
}

/// AdamW / Adam / SGD with momentum as one multi-tensor step: the gradients and
/// parameters of every tensor that has a gradient are concatenated into one flat
/// vector each, the update runs as one sequence of element-wise operations over
/// all of them (the moments are flat vectors too), and each new parameter is a
/// view of its range of the result. That is a fixed ~20 kernels per step instead
/// of ~15 per parameter tensor (PyTorch's `foreach` implementation does the same
/// with lists; LibTorch's `_foreach_*` ops are not bound by tch). Per-parameter
/// options (no decay on 1-D tensors, layer-wise LR decay) are per-element factor
/// vectors. The state is keyed by parameter name in checkpoints (`m.<key>`,
/// `v.<key>`), as before the flat layout, so a resumed run continues bit for bit.
pub struct Optimizer {
    config: OptimSection,
    /// Number of steps taken (Adam's bias correction uses it).
    pub steps: u64,
    /// Transformer blocks of the model, for layer-wise LR decay (0: not a ViT, no decay).
    depth: usize,
    layout: Vec<Entry>,
    /// First moment (SGD: momentum buffer) and second moment over `layout`.
    first: Option<Tensor<1>>,
    second: Option<Tensor<1>>,
    /// Per-element LR scale over `layout` (None: 1 everywhere).
    lr_el: Option<Tensor<1>>,
    /// Per-element factor of the weight decay over `layout` (AdamW: LR scale where
    /// decayed, Adam/SGD: 1 where decayed; 0 elsewhere; None: 1 everywhere).
    decay_el: Option<Tensor<1>>,
    /// State by key not (yet) in the flat layout: loaded from a checkpoint, or left
    /// by a parameter that had no gradient in the latest step.
    pending: BTreeMap<String, [Option<Vec<f32>>; 2]>,
}

/// The parameters that have a gradient, in module order, flattened.
struct Gather<'a> {
    opt: &'a Optimizer,
    grads: &'a Gradients,
    path: crate::util::ParamPath,
    entries: Vec<Entry>,
    params: Vec<Tensor<1>>,
    grad: Vec<Tensor<1>>,
}

impl ModuleVisitor for Gather<'_> {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let tensor = param.val();
        let Some(g) = tensor.grad(self.grads) else { return };
        let len = tensor.shape().num_elements();
        let key = self.path.key();
        let decay =
            !(self.opt.config.skip_decay_1d && (D == 1 || matches!(key.as_str(), "pos_embed" | "cls_token" | "map.probe")));
        let lr_scale = self.opt.lr_scale(&key, self.path.block());
        self.entries.push(Entry { key, len, decay, lr_scale });
        self.params.push(tensor.inner().reshape([len]));
        self.grad.push(g.reshape([len]));
    }
}

/// Replaces each parameter that has a gradient by its range of the flat result.
struct Scatter<'a> {
    grads: &'a Gradients,
    flat: Tensor<1>,
    offset: usize,
}

impl ModuleMapper for Scatter<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, tensor, mapper) = param.consume();
        if tensor.grad(self.grads).is_none() {
            return Param::from_mapped_value(id, tensor, mapper);
        }
        let dims = tensor.dims();
        let len = tensor.shape().num_elements();
        let range = self.offset..self.offset + len;
        self.offset += len;
        let mut new = Tensor::from_inner(self.flat.clone().slice([range]).reshape(dims));
        if tensor.is_require_grad() {
            new = new.require_grad();
        }
        Param::from_mapped_value(id, new, mapper)
    }
}

/// Each entry's range of the flat vectors, in layout order.
fn ranges(layout: &[Entry]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    layout.iter().scan(0, |offset, e| {
        let start = *offset;
        *offset += e.len;
        Some(start..*offset)
    })
}

/// `t * x`, times the per-element factor `v` when there is one.
fn times(t: Tensor<1>, x: f64, v: &Option<Tensor<1>>) -> Tensor<1> {
    let t = t.mul_scalar(x);
    match v {
        Some(v) => t.mul(v.clone()),
        None => t,
    }
}

impl Optimizer {
    pub fn new(config: OptimSection) -> Self {
        Optimizer {
            config,
            steps: 0,
            depth: 0,
            layout: Vec::new(),
            first: None,
            second: None,
            lr_el: None,
            decay_el: None,
            pending: BTreeMap::new(),
        }
    }

    /// For a ViT of `depth` blocks: `optim.layer_decay` applies (see [`Optimizer::lr_scale`]).
    pub fn for_vit(config: OptimSection, depth: usize) -> Self {
        Optimizer { depth, ..Optimizer::new(config) }
    }

    /// The learning-rate factor of parameter `key` (in block `block`, if any) under
    /// layer-wise decay d, as timm's `param_groups_layer_decay` with BEiT's layer
    /// ids: the embeddings (`patch_embed`, `embed_norm`, `cls_token`, `pos_embed`)
    /// are layer 0, block i layer i + 1, the rest (final norm, pooling, head)
    /// layer depth + 1; a parameter of layer l trains at `d^(depth + 1 - l)`.
    pub fn lr_scale(&self, key: &str, block: Option<usize>) -> f64 {
        let d = self.config.layer_decay;
        if d == 1.0 || self.depth == 0 {
            return 1.0;
        }
        let top = self.depth + 1;
        let layer = match block {
            Some(i) => i + 1,
            None if ["patch_embed", "embed_norm", "cls_token", "pos_embed"].iter().any(|p| key.starts_with(p)) => 0,
            None => top,
        };
        d.powi((top - layer) as i32)
    }

    /// One step on every parameter that has a gradient; gradients are multiplied
    /// by `grad_scale` first (gradient clipping passes its factor here).
    pub fn step<M: Module>(&mut self, module: M, grads: &Gradients, lr: f64, grad_scale: f64) -> M {
        let mut gather =
            Gather { opt: self, grads, path: Default::default(), entries: Vec::new(), params: Vec::new(), grad: Vec::new() };
        module.visit(&mut gather);
        let Gather { entries, params, grad, .. } = gather;
        self.steps += 1;
        if entries.is_empty() {
            return module;
        }
        let device = params[0].device();
        if entries != self.layout {
            self.relayout(entries, &device);
        }
        let mut g = Tensor::cat(grad, 0);
        if grad_scale != 1.0 {
            g = g.mul_scalar(grad_scale);
        }
        let p = self.update(Tensor::cat(params, 0), g, lr);
        let n = p.dims()[0];
        let mut scatter = Scatter { grads, flat: p, offset: 0 };
        let module = module.map(&mut scatter);
        assert_eq!(scatter.offset, n, "the optimiser's gather and scatter passes saw different parameters");
        module
    }

    /// The flat update of parameters `p` with gradients `g` (PyTorch's formulas).
    fn update(&mut self, p: Tensor<1>, g: Tensor<1>, lr: f64) -> Tensor<1> {
        let c = &self.config;
        let wd = c.weight_decay;
        let decays = wd != 0.0 && self.layout.iter().any(|e| e.decay);
        match c.name {
            OptimName::Adamw | OptimName::Adam => {
                let [b1, b2] = c.betas;
                let (p, g) = match c.name {
                    // p *= 1 - lr_i * wd
                    OptimName::Adamw if decays => match &self.decay_el {
                        None => (p.mul_scalar(1.0 - lr * wd), g),
                        Some(f) => (p.clone().mul(f.clone().mul_scalar(-lr * wd).add_scalar(1.0)), g),
                    },
                    OptimName::Adam if decays => (p.clone(), g.add(times(p, wd, &self.decay_el))),
                    _ => (p, g),
                };
                let m = self.first.take().expect("first moment laid out").mul_scalar(b1).add(g.clone().mul_scalar(1.0 - b1));
                let v =
                    self.second.take().expect("second moment laid out").mul_scalar(b2).add(g.powi_scalar(2).mul_scalar(1.0 - b2));
                let t = self.steps as i32;
                let bc1 = 1.0 - b1.powi(t);
                let bc2 = 1.0 - b2.powi(t);
                // PyTorch: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
                let denom = v.clone().sqrt().div_scalar(bc2.sqrt()).add_scalar(c.eps);
                let out = p.sub(times(m.clone().div(denom), lr / bc1, &self.lr_el));
                self.first = Some(m);
                self.second = Some(v);
                out
            }
            OptimName::Sgd => {
                let g = if decays { g.add(times(p.clone(), wd, &self.decay_el)) } else { g };
                let step = if c.momentum != 0.0 {
                    let buf = self.first.take().expect("momentum laid out").mul_scalar(c.momentum).add(g.clone());
                    let step = if c.nesterov { g.add(buf.clone().mul_scalar(c.momentum)) } else { buf.clone() };
                    self.first = Some(buf);
                    step
                } else {
                    g
                };
                p.sub(times(step, lr, &self.lr_el))
            }
        }
    }

    /// Moves the state to a new flat layout (the first step, or a step whose set of
    /// parameters with gradients changed): a parameter without state starts from
    /// zero moments, which is PyTorch's first step exactly (0 * b + x = x).
    fn relayout(&mut self, entries: Vec<Entry>, device: &burn::tensor::Device) {
        self.unflatten();
        let n: usize = entries.iter().map(|e| e.len).sum();
        let stateful = !matches!(self.config.name, OptimName::Sgd) || self.config.momentum != 0.0;
        let two = !matches!(self.config.name, OptimName::Sgd);
        let mut moments = [Vec::with_capacity(n), Vec::with_capacity(if two { n } else { 0 })];
        for e in &entries {
            let state = self.pending.remove(&e.key).unwrap_or_default();
            for (i, s) in state.into_iter().enumerate() {
                if i == 0 || two {
                    match s {
                        Some(v) if v.len() == e.len => moments[i].extend(v),
                        _ => moments[i].extend(std::iter::repeat_n(0f32, e.len)),
                    }
                }
            }
        }
        let [m, v] = moments;
        let upload = |v: Vec<f32>| Tensor::<1>::from_data(burn::tensor::TensorData::new(v, [n]), device);
        self.first = stateful.then(|| upload(m));
        self.second = two.then(|| upload(v));
        let per_element = |f: &dyn Fn(&Entry) -> f64| {
            let all_one = entries.iter().all(|e| f(e) == 1.0);
            (!all_one).then(|| upload(entries.iter().flat_map(|e| std::iter::repeat_n(f(e) as f32, e.len)).collect()))
        };
        let adamw = matches!(self.config.name, OptimName::Adamw);
        self.lr_el = per_element(&|e| e.lr_scale);
        self.decay_el = per_element(&|e| {
            if !e.decay {
                0.0
            } else if adamw {
                e.lr_scale
            } else {
                1.0
            }
        });
        self.layout = entries;
    }

    /// The flat state as per-key host vectors in `pending` (the layout emptied).
    fn unflatten(&mut self) {
        let first = self.first.take().map(tensor_to_vec);
        let second = self.second.take().map(tensor_to_vec);
        let layout = std::mem::take(&mut self.layout);
        for (e, range) in layout.iter().zip(ranges(&layout)) {
            let pick = |v: &Option<Vec<f32>>| v.as_ref().map(|v| v[range.clone()].to_vec());
            self.pending.insert(e.key.clone(), [pick(&first), pick(&second)]);
        }
        self.lr_el = None;
        self.decay_el = None;
    }

    /// The state as named host tensors (`m.<key>`, `v.<key>`) for checkpoints.
    pub fn state(&self) -> TensorMap {
        let mut out = TensorMap::new();
        let mut put = |key: &str, state: [Option<&[f32]>; 2]| {
            for (prefix, t) in ["m", "v"].into_iter().zip(state) {
                if let Some(t) = t {
                    out.insert(format!("{prefix}.{key}"), HostTensor::new(vec![t.len()], t.to_vec()));
                }
            }
        };
        for (key, [m, v]) in &self.pending {
            put(key, [m.as_deref(), v.as_deref()]);
        }
        let first = self.first.clone().map(tensor_to_vec);
        let second = self.second.clone().map(tensor_to_vec);
        for (e, range) in self.layout.iter().zip(ranges(&self.layout)) {
            put(&e.key, [first.as_ref().map(|v| &v[range.clone()]), second.as_ref().map(|v| &v[range.clone()])]);
        }
        out
    }

    /// Restores [`Optimizer::state`]; the next step lays it out on the parameters' device.
    pub fn load_state(&mut self, state: &TensorMap, steps: u64) {
        self.steps = steps;
        self.layout.clear();
        (self.first, self.second, self.lr_el, self.decay_el) = (None, None, None, None);
        self.pending.clear();
        for (name, t) in state {
            let Some((prefix, key)) = name.split_once('.') else { continue };
            let slot = self.pending.entry(key.to_string()).or_default();
            match prefix {
                "m" => slot[0] = Some(t.data.clone()),
                "v" => slot[1] = Some(t.data.clone()),
                _ => {}
            }
        }
    }
}

/// Learning rate at a (fractional) epoch position: `epoch_pos = epoch + batch/batches`.
pub fn learning_rate(base: f64, s: &ScheduleSection, epoch_pos: f64, epochs: usize) -> f64 {
    let epochs = epochs.max(1) as f64;
    let warm = if s.warmup_epochs > 0.0 && epoch_pos < s.warmup_epochs { epoch_pos / s.warmup_epochs } else { 1.0 };
    let lr = match s.name {
        ScheduleName::Constant => base,
        // As PyTorch's MultiStepLR stepped once per epoch with milestones
        // int(fraction * epochs): the LR changes at epoch boundaries.
        ScheduleName::Multistep => {
            let epoch = epoch_pos.floor() as usize;
            let passed = s.milestones.iter().filter(|&&m| epoch >= (m * epochs) as usize).count();
            base * s.gamma.powi(passed as i32)
        }
        // pytorch-CycleGAN-and-pix2pix's `linear` rule, stepped per epoch:
        // 1 - max(0, e + 1 - n_const) / (n_decay + 1) for 0-based epoch e.
        ScheduleName::Linear => {
            let e = epoch_pos.floor().clamp(0.0, epochs - 1.0);
            let decay = s.decay_epochs as f64;
            let constant = epochs - decay;
            base * (1.0 - (e + 1.0 - constant).max(0.0) / (decay + 1.0))
        }
        ScheduleName::Cosine => {
            let start = s.warmup_epochs.min(epochs);
            let span = (epochs - start).max(1e-12);
            let progress = ((epoch_pos - start) / span).clamp(0.0, 1.0);
            let min = base * s.min_lr_ratio;
            min + (base - min) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
        }
    };
    lr * warm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_decay_scales_the_head_blocks_and_embeddings_as_beit() {
        let config = OptimSection { layer_decay: 0.5, ..Default::default() };
        let opt = Optimizer::for_vit(config.clone(), 3);
        assert_eq!(opt.lr_scale("head.weight", None), 1.0);
        assert_eq!(opt.lr_scale("norm.weight", None), 1.0);
        assert_eq!(opt.lr_scale("blocks.2.mlp.fc1.weight", Some(2)), 0.5);
        assert_eq!(opt.lr_scale("blocks.0.attn.qkv.weight", Some(0)), 0.125);
        for key in ["pos_embed", "cls_token", "patch_embed.weight", "patch_embed.bias"] {
            assert_eq!(opt.lr_scale(key, None), 0.0625, "{key}");
        }
        // Off at 1, and for models that are not a ViT.
        assert_eq!(Optimizer::for_vit(OptimSection::default(), 3).lr_scale("pos_embed", None), 1.0);
        assert_eq!(Optimizer::new(config).lr_scale("pos_embed", None), 1.0);
    }

    #[test]
    fn linear_is_cyclegans_rule() {
        // n_epochs 3 + n_epochs_decay 2: PyTorch's LambdaLR gives 1, 1, 1, 2/3, 1/3 per epoch.
        let s = ScheduleSection { name: ScheduleName::Linear, decay_epochs: 2, ..Default::default() };
        let got: Vec<f64> = (0..5).map(|e| learning_rate(2e-4, &s, e as f64 + 0.5, 5)).collect();
        let want = [2e-4, 2e-4, 2e-4, 2e-4 * 2.0 / 3.0, 2e-4 / 3.0];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-15, "{got:?}");
        }
        // Constant within an epoch, and the end of the run stays in the last epoch.
        assert_eq!(learning_rate(2e-4, &s, 3.0, 5), learning_rate(2e-4, &s, 3.99, 5));
        assert!((learning_rate(2e-4, &s, 5.0, 5) - want[4]).abs() < 1e-15);
    }

    #[test]
    fn multistep_halves_at_30_60_90_percent_of_epochs() {
        let s = ScheduleSection { name: ScheduleName::Multistep, ..Default::default() };
        let lr = |e: f64| learning_rate(1e-3, &s, e, 150);
        assert_eq!(lr(0.0), 1e-3);
        assert_eq!(lr(44.9), 1e-3);
        assert_eq!(lr(45.0), 5e-4);
        assert_eq!(lr(90.0), 2.5e-4);
        assert_eq!(lr(135.0), 1.25e-4);
    }

    #[test]
    fn cosine_warms_up_linearly_then_decays_to_the_floor() {
        let s = ScheduleSection { name: ScheduleName::Cosine, warmup_epochs: 2.0, min_lr_ratio: 0.1, ..Default::default() };
        let lr = |e: f64| learning_rate(1.0, &s, e, 12);
        assert_eq!(lr(0.0), 0.0);
        assert!((lr(1.0) - 0.5).abs() < 1e-12);
        assert!((lr(2.0) - 1.0).abs() < 1e-12);
        assert!((lr(7.0) - 0.55).abs() < 1e-12);
        assert!((lr(12.0) - 0.1).abs() < 1e-12);
    }
}
