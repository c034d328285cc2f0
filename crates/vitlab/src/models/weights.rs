//! What weight files mean to the models: vitlab's layout (PyTorch state-dict
//! names and shapes, see docs/MODELS.md), conversion from timm's and the
//! paper's released code's layouts, and moving tensors into and out of burn
//! modules. The files themselves (safetensors, `torch.save` state dicts) are
//! read and written by [`crate::tensor_file`].
//!
//! Every model parameter is addressed by its native key, e.g.
//! `blocks.3.attn.qkv.weight`; Linear weights are stored `[out, in]` as in
//! PyTorch (burn keeps them `[in, out]`; the transposition happens here).

use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Tensor, TensorData};

use crate::util::ParamPath;
use crate::{Error, Result};

/// The tensor-file names that callers have long reached through this module
/// (it uses most of them itself); they live in [`crate::tensor_file`].
pub use crate::tensor_file::{group, read_any, read_safetensors, tensor_to_vec, write_safetensors, HostTensor, TensorMap};

/// The key layouts vitlab reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// vitlab's own (docs/MODELS.md).
    Vitlab,
    /// timm's VisionTransformer (`patch_embed.proj`, `blocks.i.attn.qkv`, ...).
    Timm,
    /// The paper's released `ViT` (`transformer.layers.i.0.fn.fn.to_qkv`, ...).
    PaperVit,
    /// The paper's released `ViT22B` (`transformer22B.layers.i.fn.to_qkv`, ...).
    PaperVit22b,
    /// The first released version of `ViT22B` (`transformer22B.layers.i.fn.to_qkvl`, ...),
    /// vitlab's `vit22b-nonorm`.
    PaperVit22bV1,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Vitlab => "vitlab",
            Layout::Timm => "timm",
            Layout::PaperVit => "paper-code ViT",
            Layout::PaperVit22b => "paper-code ViT22B",
            Layout::PaperVit22bV1 => "paper-code ViT22B (first version)",
        }
    }

    /// Recognises a layout from its keys.
    pub fn detect(map: &TensorMap) -> Layout {
        if map.contains_key("patch_embed.proj.weight") {
            Layout::Timm
        } else if map.keys().any(|k| k.starts_with("transformer22B.") && k.contains(".fn.to_qkvl.")) {
            Layout::PaperVit22bV1
        } else if map.keys().any(|k| k.starts_with("transformer22B.")) {
            Layout::PaperVit22b
        } else if map.contains_key("patch_to_embedding.weight") {
            Layout::PaperVit
        } else {
            Layout::Vitlab
        }
    }
}

fn shape_str(shape: &[usize]) -> String {
    format!("{shape:?}")
}

/// The native key of a parameter from its module path: burn's BatchNorm calls
/// its scale and shift `gamma`/`beta`, PyTorch `weight`/`bias`.
fn native_key(path: &ParamPath) -> String {
    let mut key = path.key();
    for (burn, torch) in [(".gamma", ".weight"), (".beta", ".bias")] {
        if key.ends_with(burn) {
            key.truncate(key.len() - burn.len());
            key.push_str(torch);
        }
    }
    key
}

/// Tensors of rank 2 are Linear weights: burn `[in, out]`, PyTorch `[out, in]`.
fn to_torch_layout(shape: &[usize], data: Vec<f32>) -> HostTensor {
    let t = HostTensor::new(shape.to_vec(), data);
    if shape.len() == 2 {
        t.transposed()
    } else {
        t
    }
}

struct Collector {
    path: ParamPath,
    out: TensorMap,
}

impl ModuleVisitor for Collector {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let tensor = param.val();
        let shape = tensor.dims().to_vec();
        let data = tensor_to_vec(tensor);
        self.out.insert(native_key(&self.path), to_torch_layout(&shape, data));
    }
}

/// Every parameter and buffer of a module, under its native key, in PyTorch layout.
pub fn collect<M: Module>(module: &M) -> TensorMap {
    let mut c = Collector { path: Default::default(), out: TensorMap::new() };
    module.visit(&mut c);
    c.out
}

struct Applier<'a> {
    path: ParamPath,
    source: &'a TensorMap,
    used: Vec<String>,
    errors: Vec<String>,
}

impl ModuleMapper for Applier<'_> {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let key = native_key(&self.path);
        let (id, tensor, mapper) = param.consume();
        let dims = tensor.dims();
        let expected: Vec<usize> = if D == 2 { vec![dims[1], dims[0]] } else { dims.to_vec() };
        let loaded = match self.source.get(&key) {
            None => {
                self.errors.push(format!("missing tensor {key:?} (model expects shape {})", shape_str(&expected)));
                None
            }
            Some(t) if t.shape != expected => {
                self.errors.push(format!(
                    "tensor {key:?} has shape {} in the file but the model expects {}",
                    shape_str(&t.shape),
                    shape_str(&expected)
                ));
                None
            }
            Some(t) => {
                self.used.push(key);
                let t = if D == 2 { t.transposed() } else { t.clone() };
                let data = TensorData::new(t.data, dims);
                let device = tensor.device();
                let new = Tensor::<D>::from_data(data, &device).set_require_grad(tensor.is_require_grad());
                Some(new)
            }
        };
        Param::from_mapped_value(id, loaded.unwrap_or(tensor), mapper)
    }
}

/// Loads native-layout tensors into a module. Every parameter must be present
/// with the right shape and every tensor must be used; the error lists each
/// problem with the key and both shapes. `source` names the file in errors.
pub fn apply<M: Module>(module: M, tensors: &TensorMap, source: &Path) -> Result<M> {
    let mut a = Applier { path: Default::default(), source: tensors, used: Vec::new(), errors: Vec::new() };
    let module = module.map(&mut a);
    let used: std::collections::HashSet<&String> = a.used.iter().collect();
    for key in tensors.keys().filter(|k| !used.contains(k)) {
        a.errors.push(format!(
            "tensor {key:?} (shape {}) is not a parameter of the configured model",
            shape_str(&tensors[key].shape)
        ));
    }
    if a.errors.is_empty() {
        return Ok(module);
    }
    let n = a.errors.len();
    let mut msg = format!("{n} problem(s) loading weights:\n  ");
    msg.push_str(&a.errors.iter().take(12).cloned().collect::<Vec<_>>().join("\n  "));
    if n > 12 {
        msg.push_str(&format!("\n  ... and {} more", n - 12));
    }
    Err(Error::weights(source, msg))
}

/// Converts a foreign layout to vitlab's keys and shapes.
pub fn to_native(map: TensorMap, layout: Layout, source: &Path) -> Result<TensorMap> {
    let mut out = TensorMap::new();
    for (key, t) in map {
        let key = key.strip_prefix("module.").map(str::to_string).unwrap_or(key);
        match layout {
            Layout::Vitlab => {
                out.insert(key, t);
            }
            Layout::Timm => {
                if key == "patch_embed.proj.weight" {
                    // Conv kernel [D, C, p, p] (c, p1, p2) -> Linear [D, p*p*C] in (p1, p2, c).
                    let [d, c, p1, p2] = t.shape[..] else {
                        return Err(Error::weights(
                            source,
                            format!(
                                "tensor {key:?} has shape {} but a conv kernel [D, C, p, p] was expected",
                                shape_str(&t.shape)
                            ),
                        ));
                    };
                    let mut w = vec![0.0; t.data.len()];
                    for o in 0..d {
                        for ci in 0..c {
                            for i in 0..p1 {
                                for j in 0..p2 {
                                    w[o * c * p1 * p2 + (i * p2 + j) * c + ci] = t.data[((o * c + ci) * p1 + i) * p2 + j];
                                }
                            }
                        }
                    }
                    out.insert("patch_embed.weight".into(), HostTensor::new(vec![d, p1 * p2 * c], w));
                } else if key == "patch_embed.proj.bias" {
                    out.insert("patch_embed.bias".into(), t);
                } else {
                    out.insert(key, t);
                }
            }
            Layout::PaperVit | Layout::PaperVit22b | Layout::PaperVit22bV1 => {
                let native = paper_key(&key, layout).ok_or_else(|| {
                    Error::weights(source, format!("tensor {key:?} is not part of the paper code's {} layout", layout.name()))
                })?;
                out.insert(native, t);
            }
        }
    }
    Ok(out)
}

/// Native key of a key from the paper's released code (models/vit.py, models/vit22b.py;
/// `PaperVit22bV1`: models/vit22b.py of the first commit).
fn paper_key(key: &str, layout: Layout) -> Option<String> {
    let simple = match key {
        "pos_embedding" => Some("pos_embed"),
        "cls_token" => Some("cls_token"),
        "patch_to_embedding.weight" => Some("patch_embed.weight"),
        "patch_to_embedding.bias" => Some("patch_embed.bias"),
        _ => None,
    };
    if let Some(k) = simple {
        return Some(k.to_string());
    }
    if let Some(rest) = key.strip_prefix("mlp_head.") {
        // ViT: 0 Linear, 1 GELU, 2 Linear; ViT22B: 0 Linear, 1 BatchNorm1d, 2 GELU, 3 Linear.
        let (idx, leaf) = rest.split_once('.')?;
        let module = match idx {
            "0" => "head_hidden",
            "1" => "head_bn",
            "2" | "3" => "head",
            _ => return None,
        };
        return Some(format!("{module}.{leaf}"));
    }
    if let Some(rest) = key.strip_prefix("transformer.layers.") {
        let (i, rest) = rest.split_once('.')?;
        let sub = match rest {
            "0.fn.norm.weight" => "norm1.weight",
            "0.fn.norm.bias" => "norm1.bias",
            "0.fn.fn.to_qkv.weight" => "attn.qkv.weight",
            "0.fn.fn.to_qkv.bias" => "attn.qkv.bias",
            "0.fn.fn.to_out.weight" => "attn.proj.weight",
            "0.fn.fn.to_out.bias" => "attn.proj.bias",
            "1.fn.norm.weight" => "norm2.weight",
            "1.fn.norm.bias" => "norm2.bias",
            "1.fn.fn.net.0.weight" => "mlp.fc1.weight",
            "1.fn.fn.net.0.bias" => "mlp.fc1.bias",
            "1.fn.fn.net.2.weight" => "mlp.fc2.weight",
            "1.fn.fn.net.2.bias" => "mlp.fc2.bias",
            _ => return None,
        };
        return Some(format!("blocks.{i}.{sub}"));
    }
    if let (Some(rest), Layout::PaperVit22bV1) = (key.strip_prefix("transformer22B.layers."), layout) {
        // Residual(ParallelAttentionFeed): to_qkvl [4D, D] (rows q, k, v, MLP input),
        // feed = Sequential(Linear(D -> M), GELU), to_out Linear(D + M -> D).
        let (i, rest) = rest.split_once('.')?;
        let sub = match rest {
            "fn.to_qkvl.weight" => "in_proj.weight",
            "fn.to_qkvl.bias" => "in_proj.bias",
            "fn.feed.0.weight" => "mlp_in.weight",
            "fn.feed.0.bias" => "mlp_in.bias",
            "fn.to_out.weight" => "out_proj.weight",
            "fn.to_out.bias" => "out_proj.bias",
            _ => return None,
        };
        return Some(format!("blocks.{i}.{sub}"));
    }
    if let Some(rest) = key.strip_prefix("transformer22B.layers.") {
        let (i, rest) = rest.split_once('.')?;
        let sub = match rest {
            "fn.to_qkv.weight" => "attn.qkv.weight",
            "fn.to_qkv.bias" => "attn.qkv.bias",
            "fn.to_out.weight" => "attn.proj.weight",
            "fn.to_out.bias" => "attn.proj.bias",
            "fn.parallel.0.weight" => "mlp.fc1.weight",
            "fn.parallel.0.bias" => "mlp.fc1.bias",
            "fn.parallel.2.weight" => "mlp.fc2.weight",
            "fn.parallel.2.bias" => "mlp.fc2.bias",
            _ => return None,
        };
        return Some(format!("blocks.{i}.{sub}"));
    }
    None
}

/// Loads weights from a safetensors file in any known layout into `module`.
pub fn load_file<M: Module>(module: M, path: &Path) -> Result<(M, Layout)> {
    let (map, _) = read_safetensors(path)?;
    let layout = Layout::detect(&map);
    let native = to_native(map, layout, path)?;
    Ok((apply(module, &native, path)?, layout))
}

/// Saves a module's parameters (and buffers) in vitlab's layout.
pub fn save_file<M: Module>(module: &M, path: &Path, metadata: HashMap<String, String>) -> Result<()> {
    write_safetensors(path, &collect(module), metadata)
}

/// Reproducible pseudo-random values, identical to `det_values` in
/// tools/make_fixtures.py: large fixtures store no weights, both sides generate
/// them from the key. SplitMix64 over (FNV-1a(key), index), 24-bit uniform in [-1, 1),
/// scaled by the rule in [`deterministic_value_scale`].
pub fn deterministic_values(key: &str, shape: &[usize]) -> Vec<f32> {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    let n: usize = shape.iter().product();
    let (offset, scale) = deterministic_value_scale(key, shape);
    (0..n as u64)
        .map(|i| {
            let mut z = h.wrapping_add((i + 1).wrapping_mul(0x9E3779B97F4A7C15));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            z ^= z >> 31;
            let u = ((z >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32;
            offset + scale * u
        })
        .collect()
}

/// (offset, scale) of [`deterministic_values`] by key and shape.
fn deterministic_value_scale(key: &str, shape: &[usize]) -> (f32, f32) {
    if shape.len() == 2 {
        (0.0, (1.0 / (shape[1] as f64).sqrt()) as f32)
    } else if key.ends_with("running_var") || (shape.len() == 1 && key.ends_with(".weight")) {
        (1.0, 0.25)
    } else if shape.len() == 1 && (key.ends_with(".bias") || key.ends_with("running_mean")) {
        (0.0, 0.1)
    } else {
        (0.0, 0.5)
    }
}

/// Gives every parameter of `module` its [`deterministic_values`].
pub fn apply_deterministic<M: Module>(module: M) -> M {
    let map: TensorMap = collect(&module)
        .into_iter()
        .map(|(k, t)| {
            let data = deterministic_values(&k, &t.shape);
            (k, HostTensor::new(t.shape, data))
        })
        .collect();
    apply(module, &map, Path::new("<deterministic>")).expect("keys come from the module itself")
}

struct GradCollector<'a> {
    path: ParamPath,
    grads: &'a burn::tensor::Gradients,
    out: TensorMap,
}

impl ModuleVisitor for GradCollector<'_> {
    fn enter_module(&mut self, name: &str, container: &str) {
        self.path.enter(name, container);
    }
    fn exit_module(&mut self, _: &str, _: &str) {
        self.path.exit();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = param.val().grad(self.grads) {
            let shape = g.dims().to_vec();
            let data = tensor_to_vec(g);
            self.out.insert(native_key(&self.path), to_torch_layout(&shape, data));
        }
    }
}

/// The gradient of every parameter that has one, under its native key, in PyTorch layout.
pub fn collect_grads<M: Module>(module: &M, grads: &burn::tensor::Gradients) -> TensorMap {
    let mut c = GradCollector { path: Default::default(), grads, out: TensorMap::new() };
    module.visit(&mut c);
    c.out
}
