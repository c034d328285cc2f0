//! The Vision Transformer and the ViT-22B block family, from one configurable
//! definition (docs/MODELS.md states it in full).

use burn::module::{Module, Param};
use burn::nn::{BatchNorm, BatchNormConfig, Linear};
use burn::tensor::{Device, Distribution, Tensor};

use super::config::{AttnScale, BlockVariant, HeadKind, Init, ModelConfig, Pool};
use super::fused::gelu;
use super::init;
use super::layers::{linear, patchify, Affine, Attention, AttentionOptions, MapPool, Mlp, Norm, Probe, Probed, TokenLinear};
use crate::Result;

/// Everything a block needs to know; derived from a [`ModelConfig`].
#[derive(Clone, Copy, Debug)]
pub struct BlockConfig {
    pub variant: BlockVariant,
    pub dim: usize,
    pub mlp_dim: usize,
    pub heads: usize,
    pub qkv_bias: bool,
    pub attn_scale: AttnScale,
    pub norm_eps: f64,
    pub norm_center: bool,
    pub init: Init,
}

impl BlockConfig {
    pub fn from_model(c: &ModelConfig) -> Self {
        BlockConfig {
            variant: c.block,
            dim: c.dim,
            mlp_dim: c.mlp_dim,
            heads: c.heads,
            qkv_bias: c.qkv_bias,
            attn_scale: c.attn_scale,
            norm_eps: c.norm_eps,
            norm_center: c.norm_center,
            init: c.init,
        }
    }

    /// Exact parameter count of one block.
    pub fn param_count(&self) -> usize {
        let (d, m) = (self.dim, self.mlp_dim);
        let affine = self.affine();
        let hd = d / self.heads;
        let attn = lin(d, 3 * d, self.qkv_bias) + lin(d, d, true);
        let mlp = mlp_params(d, m);
        match self.variant {
            BlockVariant::Vit => attn + mlp + 2 * norm(d, affine),
            BlockVariant::Vit22b => attn + mlp + norm(d, affine) + 2 * norm(hd, affine),
            BlockVariant::Vit22bLn => attn + mlp + 2 * norm(d, affine) + 2 * norm(hd, affine),
            BlockVariant::Vit22bCode => attn + mlp,
            // Fused in-projection, MLP hidden layer, fused out-projection; no norm parameters.
            BlockVariant::Vit22bNoNorm => lin(d, 4 * d, self.qkv_bias) + lin(d, m, true) + lin(d + m, d, true),
        }
    }

    fn scale(&self) -> f64 {
        match self.attn_scale {
            AttnScale::Head => ((self.dim / self.heads) as f64).powf(-0.5),
            AttnScale::Width => (self.dim as f64).powf(-0.5),
        }
    }

    /// The affine form of this family's LayerNorms: ViT-22B drops biases.
    fn affine(&self) -> Affine {
        if self.variant.is_22b() {
            Affine::Scale
        } else {
            Affine::Full
        }
    }
}

/// `x + mask * f`: a sample whose stochastic-depth mask is 0 skips the branch,
/// the others are scaled by 1 / keep probability (timm's DropPath, scale_by_keep).
fn branch(drop: Option<&[Tensor<3>]>, i: usize, f: Tensor<3>) -> Tensor<3> {
    match drop.and_then(|m| m.get(i)) {
        Some(mask) => f * mask.clone(),
        None => f,
    }
}

/// The standard pre-norm block (`vit`):
/// `x = x + Attn(norm1(x)); x = x + MLP(norm2(x))`.
#[derive(Module, Debug)]
pub struct SerialBlock {
    pub norm1: Norm,
    pub attn: Attention,
    pub norm2: Norm,
    pub mlp: Mlp,
}

impl SerialBlock {
    fn forward(&self, x: Tensor<3>, probe: Probe, drop: Option<&[Tensor<3>]>) -> (Tensor<3>, Probed) {
        let (a, probed) = self.attn.forward_probed(self.norm1.forward(x.clone()), probe);
        let x = x + branch(drop, 0, a);
        (x.clone() + branch(drop, 1, self.mlp.forward(self.norm2.forward(x))), probed)
    }
}

/// ViT-22B's parallel block (`vit22b`; `vit22b-ln` adds `mlp_norm`):
/// `h = norm1(x); x = x + Attn(h) + mlp_norm(MLP(h))`.
#[derive(Module, Debug)]
pub struct ParallelBlock {
    pub norm1: Norm,
    pub attn: Attention,
    pub mlp: Mlp,
    /// A LayerNorm on the MLP's output (`vit22b-ln` only).
    pub mlp_norm: Option<Norm>,
}

impl ParallelBlock {
    fn forward(&self, x: Tensor<3>, probe: Probe, drop: Option<&[Tensor<3>]>) -> (Tensor<3>, Probed) {
        let h = self.norm1.forward(x.clone());
        let mut m = self.mlp.forward(h.clone());
        if let Some(norm) = &self.mlp_norm {
            m = norm.forward(m);
        }
        let (a, probed) = self.attn.forward_probed(h, probe);
        (x + branch(drop, 0, a + m), probed)
    }
}

/// The parallel block of the ViT-22B code (`vit22b-code`):
/// `x = x + out_norm(Attn(x) + MLP(x))`.
#[derive(Module, Debug)]
pub struct CodeBlock {
    pub attn: Attention,
    pub mlp: Mlp,
    pub out_norm: Norm,
}

impl CodeBlock {
    fn forward(&self, x: Tensor<3>, probe: Probe, drop: Option<&[Tensor<3>]>) -> (Tensor<3>, Probed) {
        let (a, probed) = self.attn.forward_probed(x.clone(), probe);
        let branches = a + self.mlp.forward(x.clone());
        (x + branch(drop, 0, self.out_norm.forward(branches)), probed)
    }
}

/// The parallel block without LayerNorms (`vit22b-nonorm`), with ViT-22B's fused
/// projections: `[qkv ; l] = in_proj(x); x = x + out_proj([Attn_heads(qkv) ; GELU(mlp_in(l))])`.
#[derive(Module, Debug)]
pub struct NoNormBlock {
    /// Fused QKV + MLP-input projection `D -> 4D`.
    pub in_proj: Linear,
    pub attn: Attention,
    /// The MLP's hidden layer `D -> M` on the 4th slice of `in_proj`.
    pub mlp_in: Linear,
    /// Fused output projection `D + M -> D` over [attention heads ; MLP hidden].
    pub out_proj: Linear,
}

impl NoNormBlock {
    fn forward(&self, x: Tensor<3>, probe: Probe, drop: Option<&[Tensor<3>]>) -> (Tensor<3>, Probed) {
        let [_, _, d] = x.dims();
        // Each column block of in_proj as its own product (layers.rs, TokenLinear).
        let [q, k, v, l] = [0, 1, 2, 3].map(|i| self.in_proj.forward_tokens_cols(x.clone(), i * d..(i + 1) * d));
        let (a, probed) = self.attn.attend_projected(q, k, v, probe);
        let hidden = gelu(self.mlp_in.forward_tokens(l));
        let out = self.out_proj.forward_tokens(Tensor::cat(vec![a, hidden], 2));
        (x + branch(drop, 0, out), probed)
    }
}

/// One transformer block, of the kind its [`BlockVariant`] names (timm's one
/// class per block kind). The enum level is not part of the parameter keys
/// (`blocks.0.norm1.weight` whatever the kind; see [`crate::util::ParamPath`]).
#[derive(Module, Debug)]
pub enum Block {
    Serial(SerialBlock),
    Parallel(ParallelBlock),
    Code(CodeBlock),
    NoNorm(NoNormBlock),
}

impl Block {
    /// Builds the block. Parameters are initialised lazily in field order: each
    /// kind's fields keep the order the random parameters had when the kinds
    /// were one struct (norms draw nothing), so a seeded model is unchanged.
    pub fn new(c: &BlockConfig, device: &Device) -> Self {
        use BlockVariant::*;
        let norm = |affine| Norm::new(c.dim, affine, c.norm_center, c.norm_eps, device);
        let qk_norm = match c.variant {
            Vit => None,
            Vit22b | Vit22bLn => Some((Affine::Scale, c.norm_center)),
            Vit22bCode | Vit22bNoNorm => Some((Affine::None, true)),
        };
        let attn = Attention::new(
            AttentionOptions {
                dim: c.dim,
                heads: c.heads,
                qkv_bias: c.qkv_bias,
                qk_norm,
                scale: c.scale(),
                norm_eps: c.norm_eps,
                init: c.init,
                projections: c.variant != Vit22bNoNorm,
            },
            device,
        );
        let mlp = || Mlp::new(c.init, c.dim, c.mlp_dim, device);
        match c.variant {
            Vit => Block::Serial(SerialBlock { norm1: norm(c.affine()), norm2: norm(c.affine()), attn, mlp: mlp() }),
            Vit22b | Vit22bLn => Block::Parallel(ParallelBlock {
                norm1: norm(c.affine()),
                attn,
                mlp: mlp(),
                mlp_norm: (c.variant == Vit22bLn).then(|| norm(c.affine())),
            }),
            Vit22bCode => Block::Code(CodeBlock { attn, mlp: mlp(), out_norm: norm(Affine::None) }),
            Vit22bNoNorm => {
                let in_proj = linear(c.init, c.dim, 4 * c.dim, c.qkv_bias, device);
                let mlp_in = linear(c.init, c.dim, c.mlp_dim, true, device);
                let out_proj = linear(c.init, c.dim + c.mlp_dim, c.dim, true, device);
                Block::NoNorm(NoNormBlock { in_proj, attn, mlp_in, out_proj })
            }
        }
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward_probed(x, Probe::Off, None).0
    }

    /// The forward pass, and what `probe` asks for of the block's attention.
    /// `drop` holds this block's stochastic-depth masks (see [`DropPath`]): one per
    /// residual branch of the standard block, one for the summed branches of the
    /// parallel ViT-22B blocks.
    pub fn forward_probed(&self, x: Tensor<3>, probe: Probe, drop: Option<&[Tensor<3>]>) -> (Tensor<3>, Probed) {
        match self {
            Block::Serial(b) => b.forward(x, probe, drop),
            Block::Parallel(b) => b.forward(x, probe, drop),
            Block::Code(b) => b.forward(x, probe, drop),
            Block::NoNorm(b) => b.forward(x, probe, drop),
        }
    }

    /// The block's attention.
    pub fn attn(&self) -> &Attention {
        match self {
            Block::Serial(b) => &b.attn,
            Block::Parallel(b) => &b.attn,
            Block::Code(b) => &b.attn,
            Block::NoNorm(b) => &b.attn,
        }
    }

    /// Residual branches a stochastic-depth mask applies to: two in the standard
    /// block (attention, MLP), one (their sum) in the parallel ViT-22B blocks.
    pub fn branches(variant: BlockVariant) -> usize {
        if variant == BlockVariant::Vit {
            2
        } else {
            1
        }
    }
}

/// How stochastic-depth rates grow over the blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DropPathSchedule {
    /// Block i of d drops with `rate * i / (d - 1)` (timm, DeiT: `linspace(0, rate, depth)`).
    #[default]
    Linear,
    /// Every block drops with `rate` (Lee et al. 2021's released code).
    Uniform,
}

/// Stochastic depth (Huang et al. 2016) for one training step: per block and
/// residual branch, a `[B, 1, 1]` mask that is 0 for the samples that skip the
/// branch and `1 / (1 - rate)` for the others. The masks are drawn on the host
/// from vitlab's seeded generator, so a resumed run draws the same ones.
pub struct DropPath {
    pub masks: Vec<Vec<Tensor<3>>>,
}

impl DropPath {
    /// The rate of each of `depth` blocks for the last block's `rate`.
    pub fn rates(rate: f64, depth: usize, schedule: DropPathSchedule) -> Vec<f64> {
        (0..depth)
            .map(|i| match schedule {
                DropPathSchedule::Uniform => rate,
                DropPathSchedule::Linear if depth > 1 => rate * i as f64 / (depth - 1) as f64,
                DropPathSchedule::Linear => 0.0,
            })
            .collect()
    }

    /// Draws the masks of a batch of `batch` samples; `None` when every rate is 0.
    pub fn draw(
        rates: &[f64],
        variant: BlockVariant,
        batch: usize,
        rng: &mut crate::util::Rng,
        device: &Device,
    ) -> Option<DropPath> {
        if rates.iter().all(|&r| r <= 0.0) {
            return None;
        }
        let masks = rates
            .iter()
            .map(|&rate| {
                (0..Block::branches(variant))
                    .map(|_| {
                        let keep = 1.0 - rate;
                        let values: Vec<f32> =
                            (0..batch).map(|_| if rng.uniform_f64() < keep { (1.0 / keep) as f32 } else { 0.0 }).collect();
                        Tensor::<3>::from_data(burn::tensor::TensorData::new(values, [batch, 1, 1]), device)
                    })
                    .collect()
            })
            .collect();
        Some(DropPath { masks })
    }
}

/// What [`Vit::forward_probed`] measures in each block (detached).
pub struct BlockProbe {
    /// Root mean square of the block's output tokens.
    pub act_rms: Tensor<1>,
    /// The largest attention logit (after scaling) in the block.
    pub max_attn_logit: Tensor<1>,
    /// `[B, H, T, T]` softmax attention of every head ([`Probe::Maps`] only).
    pub attention: Option<Tensor<4>>,
}

/// A ViT classifier: patch embedding, blocks, final norm, pooling, head.
#[derive(Module, Debug)]
pub struct Vit {
    pub patch_embed: Linear,
    /// Non-affine LayerNorm on the patch embeddings, before the cls token and
    /// position embedding (`vit22b-nonorm`, the first released code).
    pub embed_norm: Option<Norm>,
    pub cls_token: Option<Param<Tensor<3>>>,
    pub pos_embed: Param<Tensor<3>>,
    pub blocks: Vec<Block>,
    pub norm: Option<Norm>,
    pub map: Option<MapPool>,
    pub head_hidden: Option<Linear>,
    pub head_bn: Option<BatchNorm>,
    pub head: Linear,
    #[module(skip)]
    patch_size: usize,
}

impl Vit {
    /// Builds a model whose initial weights depend only on `seed` (reproducible
    /// even when several threads build models at once).
    pub fn seeded(c: &ModelConfig, device: &Device, seed: u64) -> Result<Self> {
        init::seeded(device, seed, || Self::build(c, device))
    }

    /// Builds a randomly initialised model; fails if the configuration is invalid.
    pub fn new(c: &ModelConfig, device: &Device) -> Result<Self> {
        init::built(|| Self::build(c, device))
    }

    fn build(c: &ModelConfig, device: &Device) -> Result<Self> {
        c.validate()?;
        let d = c.dim;
        let (embed_std, cls_std) = (c.init.pos_embed_std(), c.init.cls_token_std());
        let normal =
            |shape: [usize; 3], std: f64| Param::from_tensor(Tensor::random(shape, Distribution::Normal(0.0, std), device));
        let block_config = BlockConfig::from_model(c);
        let affine = block_config.affine();
        let paper_head = c.head == HeadKind::Paper;
        Ok(Vit {
            patch_embed: linear(c.init, c.patch_size * c.patch_size * c.channels, d, true, device),
            embed_norm: (c.block == BlockVariant::Vit22bNoNorm).then(|| Norm::new(d, Affine::None, true, c.norm_eps, device)),
            cls_token: (c.pool == Pool::Cls).then(|| normal([1, 1, d], cls_std)),
            pos_embed: normal([1, c.num_tokens(), d], embed_std),
            blocks: (0..c.depth).map(|_| Block::new(&block_config, device)).collect(),
            norm: c.final_norm.then(|| Norm::new(d, affine, c.norm_center, c.norm_eps, device)),
            map: (c.pool == Pool::Map).then(|| MapPool::new(c.init, d, c.mlp_dim, c.heads, c.norm_eps, device)),
            head_hidden: paper_head.then(|| linear(c.init, d, c.mlp_dim, true, device)),
            head_bn: (paper_head && c.block == BlockVariant::Vit22bCode).then(|| BatchNormConfig::new(c.mlp_dim).init(device)),
            head: linear(c.init, if paper_head { c.mlp_dim } else { d }, c.num_classes, true, device),
            patch_size: c.patch_size,
        })
    }

    /// `[B, C, H, W]` images to `[B, N, p*p*C]` patches in (p1, p2, c) order.
    pub fn patchify(&self, images: Tensor<4>) -> Tensor<3> {
        patchify(images, self.patch_size)
    }

    /// Token states after the last block (before the final norm).
    pub fn trunk(&self, images: Tensor<4>) -> Tensor<3> {
        self.trunk_probed(images, Probe::Off, None).0
    }

    fn trunk_probed(&self, images: Tensor<4>, probe: Probe, drop: Option<&DropPath>) -> (Tensor<3>, Vec<BlockProbe>) {
        let mut x = self.patch_embed.forward_tokens(self.patchify(images));
        if let Some(n) = &self.embed_norm {
            x = n.forward(x);
        }
        if let Some(cls) = &self.cls_token {
            let [b, _, d] = x.dims();
            x = Tensor::cat(vec![cls.val().expand([b, 1, d]), x], 1);
        }
        x = x + self.pos_embed.val();
        let mut probes = Vec::new();
        for (i, block) in self.blocks.iter().enumerate() {
            let masks = drop.and_then(|d| d.masks.get(i)).map(Vec::as_slice);
            let (y, probed) = block.forward_probed(x, probe, masks);
            x = y;
            if let Some(max_attn_logit) = probed.max_logit {
                let act_rms = x.clone().detach().powi_scalar(2).mean().sqrt();
                probes.push(BlockProbe { act_rms, max_attn_logit, attention: probed.weights });
            }
        }
        (x, probes)
    }

    /// Pooled features `[B, D]` from the trunk's tokens.
    pub fn pool(&self, tokens: Tensor<3>) -> Tensor<2> {
        let x = match &self.norm {
            Some(n) => n.forward(tokens),
            None => tokens,
        };
        let [b, _, d] = x.dims();
        if let Some(map) = &self.map {
            map.forward(x)
        } else if self.cls_token.is_some() {
            x.narrow(1, 0, 1).reshape([b, d])
        } else {
            x.mean_dim(1).reshape([b, d])
        }
    }

    /// Class logits `[B, classes]` from pooled features.
    pub fn classify(&self, features: Tensor<2>) -> Tensor<2> {
        let Some(hidden) = &self.head_hidden else {
            return self.head.forward_tokens(features);
        };
        let mut x = hidden.forward_tokens(features);
        if let Some(bn) = &self.head_bn {
            x = bn.forward(x);
        }
        self.head.forward_tokens(gelu(x))
    }

    /// `[B, C, H, W]` images to `[B, classes]` logits.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        self.classify(self.pool(self.trunk(images)))
    }

    /// Logits plus per-block activation RMS and max attention logit (the
    /// training monitors); the same computation as [`Vit::forward`].
    pub fn forward_probed(&self, images: Tensor<4>) -> (Tensor<2>, Vec<BlockProbe>) {
        self.forward_train(images, true, None)
    }

    /// Logits and, per block, the `[B, H, T, T]` softmax attention of every head
    /// (tokens in the order the blocks see them: the class token first when
    /// there is one, then the patches row by row). The same computation as
    /// [`Vit::forward`], through the unfused attention.
    pub fn forward_attention(&self, images: Tensor<4>) -> (Tensor<2>, Vec<Tensor<4>>) {
        let (tokens, probes) = self.trunk_probed(images, Probe::Maps, None);
        let maps = probes.into_iter().map(|p| p.attention.expect("Probe::Maps records every block's weights")).collect();
        (self.classify(self.pool(tokens)), maps)
    }

    /// Whether the tokens start with a class token, the pooled output (else the
    /// patch tokens are pooled by their mean or by attention pooling).
    pub fn has_class_token(&self) -> bool {
        self.cls_token.is_some()
    }

    /// Image channels the patch embedding takes.
    pub fn channels(&self) -> usize {
        self.patch_embed.weight.dims()[0] / (self.patch_size * self.patch_size)
    }

    /// The training forward pass: with `probe` the monitors of
    /// [`Vit::forward_probed`], with `drop` stochastic depth.
    pub fn forward_train(&self, images: Tensor<4>, probe: bool, drop: Option<&DropPath>) -> (Tensor<2>, Vec<BlockProbe>) {
        let probe = if probe { Probe::MaxLogit } else { Probe::Off };
        let (tokens, probes) = self.trunk_probed(images, probe, drop);
        (self.classify(self.pool(tokens)), probes)
    }
}

fn lin(i: usize, o: usize, bias: bool) -> usize {
    i * o + if bias { o } else { 0 }
}

/// `fc2(GELU(fc1(x)))`, `D -> M -> D` with biases.
fn mlp_params(d: usize, m: usize) -> usize {
    lin(d, m, true) + lin(m, d, true)
}

fn norm(n: usize, affine: Affine) -> usize {
    match affine {
        Affine::Full => 2 * n,
        Affine::Scale => n,
        Affine::None => 0,
    }
}

/// Exact parameter count of a configuration (trainable parameters, as PyTorch's
/// `sum(p.numel() for p in model.parameters())`), without building the model.
pub fn param_count(c: &ModelConfig) -> usize {
    let (d, m, k) = (c.dim, c.mlp_dim, c.num_classes);
    let block_config = BlockConfig::from_model(c);
    let affine = block_config.affine();
    let block = block_config.param_count();
    let stem =
        lin(c.patch_size * c.patch_size * c.channels, d, true) + c.num_tokens() * d + if c.pool == Pool::Cls { d } else { 0 };
    let final_norm = if c.final_norm { norm(d, affine) } else { 0 };
    let map = if c.pool == Pool::Map {
        d + lin(d, d, true) + lin(d, 2 * d, true) + lin(d, d, true) + 2 * d + mlp_params(d, m)
    } else {
        0
    };
    let head = match c.head {
        HeadKind::Linear => lin(d, k, true),
        HeadKind::Paper => {
            let bn = if c.block == BlockVariant::Vit22bCode { 2 * m } else { 0 };
            lin(d, m, true) + bn + lin(m, k, true)
        }
    };
    stem + c.depth * block + final_norm + map + head
}
