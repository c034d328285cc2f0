//! The building blocks shared by every model: LayerNorm variants, the MLP,
//! multi-head self-attention with optional QK-norm, and attention pooling.

use super::{fused, precision};
use burn::module::{Module, Param};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor};
use std::ops::Range;

use super::config::Init;

/// A Linear layer applied to tokens the way PyTorch's `nn.Linear` does: every
/// leading dimension folded into the rows of one 2-D matmul. burn keeps
/// `[B, T, D] x [D, E]` as a batched matmul of B small products when T is not a
/// multiple of its row tile (T = 65 for a 32 px image with patch 4 and a class
/// token), which costs every product its own kernel call and zeroing pass.
pub(crate) trait TokenLinear {
    fn forward_tokens<const D: usize>(&self, x: Tensor<D>) -> Tensor<D>;

    /// Output columns `cols` alone, `x·W[:, cols] + b[cols]`, as a product of its
    /// own. Slicing the whole output instead costs every slice's backward a zero
    /// tensor the size of the whole output (burn differentiates a slice by
    /// writing its gradient into zeros) and the sum of those: for the QKV
    /// projection three output-sized fills and two additions per block and step,
    /// where this slices the weight (its gradient blocks are weight-sized).
    fn forward_tokens_cols<const D: usize>(&self, x: Tensor<D>, cols: Range<usize>) -> Tensor<D>;
}

impl TokenLinear for Linear {
    fn forward_tokens<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        on_rows(x, |x| linear_rows(x, self.weight.val(), self.bias.as_ref().map(|b| b.val())))
    }

    fn forward_tokens_cols<const D: usize>(&self, x: Tensor<D>, cols: Range<usize>) -> Tensor<D> {
        let d_in = self.weight.dims()[0];
        let w = self.weight.val().slice([0..d_in, cols.clone()]);
        on_rows(x, |x| linear_rows(x, w, self.bias.as_ref().map(|b| b.val().slice([cols]))))
    }
}

/// `f` on the rows of `x`, every leading dimension folded into them.
fn on_rows<const D: usize>(x: Tensor<D>, f: impl FnOnce(Tensor<2>) -> Tensor<2>) -> Tensor<D> {
    if D == 1 {
        return f(x.unsqueeze()).squeeze_dim(0);
    }
    let mut dims = x.dims();
    let rows = dims[..D - 1].iter().product::<usize>();
    let y = f(x.reshape([rows, dims[D - 1]]));
    dims[D - 1] = y.dims()[1];
    y.reshape(dims)
}

/// `x·W + b` over `[N, D]` rows: in fp32 with a bias one fused operation
/// (`addmm` on LibTorch, models/fused/linear.rs); under autocast the product in
/// bf16 and the bias added in fp32 (models/precision.rs).
fn linear_rows(x: Tensor<2>, w: Tensor<2>, b: Option<Tensor<1>>) -> Tensor<2> {
    if precision::compute_dtype().is_none() {
        return match b {
            Some(b) => fused::linear(x, w, b),
            None => x.matmul(w),
        };
    }
    let y = precision::upper(precision::lower(x).matmul(precision::lower(w)));
    match b {
        Some(b) => y + b.unsqueeze(),
        None => y,
    }
}

/// How a Linear layer's weights start.
pub(crate) fn linear(init: Init, d_in: usize, d_out: usize, bias: bool, device: &Device) -> Linear {
    let config = LinearConfig::new(d_in, d_out).with_bias(bias);
    let mut layer = match init {
        // PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias,
        // which is burn's default Linear initializer too.
        Init::Paper => config.init(device),
        Init::Timm => config.with_initializer(Initializer::Normal { mean: 0.0, std: 0.02 }).init(device),
        // N(0, 2 / (fan_in + fan_out)), as torch.nn.init.xavier_normal_.
        Init::Xavier => config.with_initializer(Initializer::XavierNormal { gain: 1.0 }).init(device),
    };
    if init != Init::Paper {
        layer.bias = layer.bias.map(|b| Param::from_tensor(Tensor::zeros(b.dims(), device)));
    }
    layer
}

/// `[B, C, H, W]` images to `[B, N, p*p*C]` patches in (p1, p2, c) order (SPEC §1).
pub(crate) fn patchify(images: Tensor<4>, p: usize) -> Tensor<3> {
    let [b, c, h, w] = images.dims();
    let (gh, gw) = (h / p, w / p);
    images.reshape([b, c, gh, p, gw, p]).permute([0, 2, 4, 3, 5, 1]).reshape([b, gh * gw, p * p * c])
}

/// InstanceNorm without affine over `[B, C, H, W]`: each sample's channel
/// normalised over its pixels (biased variance, eps 1e-5: PyTorch's
/// `nn.InstanceNorm2d` default, as CycleGAN uses it).
pub(crate) fn instance_norm(x: Tensor<4>) -> Tensor<4> {
    // A layer norm of every (sample, channel) row of pixels with unit scale and
    // zero shift: one fused operation with a closed-form backward (LibTorch:
    // PyTorch's `native_layer_norm`) instead of a chain of reductions.
    let [b, c, h, w] = x.dims();
    let device = x.device();
    let (ones, zeros) = (Tensor::ones([h * w], &device), Tensor::zeros([h * w], &device));
    fused::layer_norm(x.reshape([b, c, h * w]), ones, zeros, 1e-5).reshape([b, c, h, w])
}

/// Which parameters a LayerNorm carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Affine {
    /// Scale and shift (standard LayerNorm).
    Full,
    /// Scale only (ViT-22B's LayerNorms have no bias).
    Scale,
    /// No parameters.
    None,
}

/// LayerNorm over the last axis, with optional scale, optional bias and optional
/// centring (`center = false` normalises by the root mean square instead).
#[derive(Module, Debug)]
pub struct Norm {
    pub weight: Option<Param<Tensor<1>>>,
    pub bias: Option<Param<Tensor<1>>>,
    #[module(skip)]
    dim: usize,
    #[module(skip)]
    eps: f64,
    #[module(skip)]
    center: bool,
}

impl Norm {
    pub fn new(dim: usize, affine: Affine, center: bool, eps: f64, device: &Device) -> Self {
        let weight = (affine != Affine::None).then(|| Param::from_tensor(Tensor::ones([dim], device)));
        let bias = (affine == Affine::Full).then(|| Param::from_tensor(Tensor::zeros([dim], device)));
        Norm {
            weight,
            bias,
            dim,
            eps,
            // Without a scale there is nothing to drop centring from: the 22B option
            // applies to the affine norms only.
            center: center || affine == Affine::None,
        }
    }

    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let weight = self.weight.as_ref().map(|w| w.val());
        if self.center {
            let gamma = weight.unwrap_or_else(|| Tensor::ones([self.dim], &x.device()));
            let beta = self.bias.as_ref().map(|b| b.val()).unwrap_or_else(|| Tensor::zeros([self.dim], &x.device()));
            fused::layer_norm(x, gamma, beta, self.eps)
        } else {
            let rms = x.clone().powi_scalar(2).mean_dim(D - 1).add_scalar(self.eps).sqrt();
            let y = x / rms;
            let y = match weight {
                Some(w) => y * w.unsqueeze(),
                None => y,
            };
            match &self.bias {
                Some(b) => y + b.val().unsqueeze(),
                None => y,
            }
        }
    }
}

/// `fc2(GELU(fc1(x)))`.
#[derive(Module, Debug)]
pub struct Mlp {
    pub fc1: Linear,
    pub fc2: Linear,
}

impl Mlp {
    pub fn new(init: Init, dim: usize, hidden: usize, device: &Device) -> Self {
        Mlp { fc1: linear(init, dim, hidden, true, device), fc2: linear(init, hidden, dim, true, device) }
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.fc2.forward_tokens(fused::gelu(self.fc1.forward_tokens(x)))
    }
}

/// What a forward pass records of each attention besides its output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Probe {
    /// Nothing: the fused attention kernel runs.
    #[default]
    Off,
    /// The largest attention logit (the training monitors of blocks.csv).
    MaxLogit,
    /// The largest logit and the softmax weights of every head (`vitlab attention`).
    Maps,
}

/// What one attention recorded under a [`Probe`] (detached tensors).
#[derive(Debug, Default)]
pub struct Probed {
    /// The largest attention logit (after scaling).
    pub max_logit: Option<Tensor<1>>,
    /// `[B, H, T, T]` softmax weights: row t is what token t attends to.
    pub weights: Option<Tensor<4>>,
}

/// Scaled dot-product attention over `[B, H, T, hd]` tensors; returns `[B, T, H*hd]`
/// and what `probe` asks for.
fn attend(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, scale: f64, probe: Probe) -> (Tensor<3>, Probed) {
    let [b, h, t, hd] = q.dims();
    if probe == Probe::Off {
        // One node with a hand-written backward (models/fused.rs).
        return (fused::attention(q, k, v, scale).swap_dims(1, 2).reshape([b, t, h * hd]), Probed::default());
    }
    use precision::{lower, upper};
    let logits = upper(lower(q).matmul(lower(k).swap_dims(2, 3))).mul_scalar(scale);
    let max_logit = Some(logits.clone().detach().max());
    let weights = softmax(logits, 3);
    let maps = (probe == Probe::Maps).then(|| weights.clone().detach());
    (upper(lower(weights).matmul(lower(v))).swap_dims(1, 2).reshape([b, t, h * hd]), Probed { max_logit, weights: maps })
}

/// Multi-head self-attention: one fused QKV projection, optional QK-norm.
///
/// `qkv` and `proj` are absent when the block fuses them with its MLP
/// (`vit22b-nonorm`): the block then projects itself and calls
/// [`Attention::attend_projected`].
#[derive(Module, Debug)]
pub struct Attention {
    pub qkv: Option<Linear>,
    pub q_norm: Option<Norm>,
    pub k_norm: Option<Norm>,
    pub proj: Option<Linear>,
    #[module(skip)]
    heads: usize,
    #[module(skip)]
    scale: f64,
}

/// Options of [`Attention::new`].
#[derive(Clone, Copy, Debug)]
pub struct AttentionOptions {
    pub dim: usize,
    pub heads: usize,
    pub qkv_bias: bool,
    /// The LayerNorm applied to each head's queries and keys, if any.
    pub qk_norm: Option<(Affine, bool)>,
    pub scale: f64,
    pub norm_eps: f64,
    pub init: Init,
    /// false: no `qkv`/`proj` of its own (the block's fused projections feed it).
    pub projections: bool,
}

impl Attention {
    pub fn new(o: AttentionOptions, device: &Device) -> Self {
        let head_dim = o.dim / o.heads;
        let qk = |_| o.qk_norm.map(|(affine, center)| Norm::new(head_dim, affine, center, o.norm_eps, device));
        Attention {
            qkv: o.projections.then(|| linear(o.init, o.dim, 3 * o.dim, o.qkv_bias, device)),
            q_norm: qk(0),
            k_norm: qk(1),
            proj: o.projections.then(|| linear(o.init, o.dim, o.dim, true, device)),
            heads: o.heads,
            scale: o.scale,
        }
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward_probed(x, Probe::Off).0
    }

    /// The forward pass, and what `probe` asks for.
    pub fn forward_probed(&self, x: Tensor<3>, probe: Probe) -> (Tensor<3>, Probed) {
        let (qkv, proj) = match (&self.qkv, &self.proj) {
            (Some(qkv), Some(proj)) => (qkv, proj),
            _ => panic!("this attention has no projections of its own; use attend_projected"),
        };
        let d = x.dims()[2];
        let [q, k, v] = [0, 1, 2].map(|i| qkv.forward_tokens_cols(x.clone(), i * d..(i + 1) * d));
        let (out, probed) = self.attend_projected(q, k, v, probe);
        (proj.forward_tokens(out), probed)
    }

    /// Attention from already projected `[B, T, D]` queries, keys and values
    /// (the column blocks of a QKV projection): split into heads, QK-norm,
    /// scaled dot-product attention, heads concatenated to `[B, T, D]` (no
    /// output projection).
    pub fn attend_projected(&self, q: Tensor<3>, k: Tensor<3>, v: Tensor<3>, probe: Probe) -> (Tensor<3>, Probed) {
        let [b, t, d] = q.dims();
        let (h, hd) = (self.heads, d / self.heads);
        // [B, T, D] -> [B, H, T, hd]
        let [q, k, v] = [q, k, v].map(|p| p.reshape([b, t, h, hd]).swap_dims(1, 2));
        let q = match &self.q_norm {
            Some(n) => n.forward(q),
            None => q,
        };
        let k = match &self.k_norm {
            Some(n) => n.forward(k),
            None => k,
        };
        attend(q, k, v, self.scale, probe)
    }
}

/// Multi-head attention pooling (big_vision's MAPHead): a learned probe attends
/// over the tokens, followed by a residual MLP.
#[derive(Module, Debug)]
pub struct MapPool {
    pub probe: Param<Tensor<3>>,
    pub q: Linear,
    pub kv: Linear,
    pub proj: Linear,
    pub norm: Norm,
    pub mlp: Mlp,
    #[module(skip)]
    heads: usize,
}

impl MapPool {
    pub fn new(init: Init, dim: usize, mlp_dim: usize, heads: usize, eps: f64, device: &Device) -> Self {
        let probe = Tensor::random([1, 1, dim], burn::tensor::Distribution::Normal(0.0, 0.02), device);
        MapPool {
            probe: Param::from_tensor(probe),
            q: linear(init, dim, dim, true, device),
            kv: linear(init, dim, 2 * dim, true, device),
            proj: linear(init, dim, dim, true, device),
            norm: Norm::new(dim, Affine::Full, true, eps, device),
            mlp: Mlp::new(init, dim, mlp_dim, device),
            heads,
        }
    }

    /// `[B, T, D]` tokens to `[B, D]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        let [b, t, d] = x.dims();
        let (h, hd) = (self.heads, d / self.heads);
        let q = self.q.forward_tokens(self.probe.val()).reshape([1, 1, h, hd]).swap_dims(1, 2).repeat_dim(0, b);
        // Keys and values as the two column blocks of the kv weight, each its own
        // product (see TokenLinear::forward_tokens_cols: no slice of the output).
        let heads = |y: Tensor<3>| y.reshape([b, t, h, hd]).swap_dims(1, 2);
        let (k, v) = (heads(self.kv.forward_tokens_cols(x.clone(), 0..d)), heads(self.kv.forward_tokens_cols(x, d..2 * d)));
        let y = self.proj.forward_tokens(attend(q, k, v, (hd as f64).powf(-0.5), Probe::Off).0);
        let y = y.clone() + self.mlp.forward(self.norm.forward(y));
        y.reshape([b, d])
    }
}
