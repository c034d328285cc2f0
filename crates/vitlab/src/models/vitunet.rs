//! ViTUnet, the paper's ViT-based U-Net generator for unpaired image-to-image
//! translation (SPEC §4; docs/MODELS.md, "ViTUnet").
//!
//! Tokens never change in number inside a stage; the U-Net's "down-" and
//! "up-sampling" act on the embedding axis, as in the released code (nearest
//! interpolation of a `B x N x D` tensor scales `D`):
//!
//! ```text
//! x   = PatchEmbed(img) + pos                                  [B, N, D]
//! s0  = T0(x)            s1 = T1(down(s0))   s2 = T2(down(s1))  widths D, D/2, D/4
//! b   = Tb(down(s2))                                           width D/8
//! u2  = U0([up(b)  ; s2])                                      [B, 2N, D/4]
//! u1  = U1([up(u2) ; s1])                                      [B, 3N, D/2]
//! u0  = U2([up(u1) ; s0])                                      [B, 4N, D]
//! y   = Linear(D -> p*p*C)(u0), the 4N tokens regrouped as 4 images: [B, 4C, H, W]
//! out = Refiner(y)                                             [B, C, H, W] in (-1, 1)
//! ```
//!
//! Every transformer stage has `depth / 6` blocks of one [`BlockVariant`] at its
//! width, with the MLP width scaled alike and the number of heads fixed. The
//! refiner is a ResNet-style CNN: reflection-padded 3x3 convolutions with
//! InstanceNorm (no affine, eps 1e-5) and ReLU, `depth / 3` residual blocks.

use burn::module::{Module, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{Linear, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Distribution, Tensor};
use serde::{Deserialize, Serialize};

use super::config::{AttnScale, BlockVariant, Init};
use super::fused;
use super::layers::{instance_norm, linear, patchify, TokenLinear};
use super::vit::{Block, BlockConfig};
use crate::{Error, Result};

/// A fully resolved ViTUnet configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitUnetConfig {
    /// The transformer block of every stage: `vit` (ViTUnet) or `vit22b` (ViT-22B-Unet), or any other
    /// variant (only the block: `vit22b-nonorm`'s model-level LayerNorm after the patch embedding is not added).
    pub block: BlockVariant,
    /// Total transformer depth; a multiple of 6 (7 stages of `depth / 6` blocks;
    /// the refiner has `depth / 3` residual blocks).
    pub depth: usize,
    /// Width D of the outermost stages; a multiple of 8 (the bottleneck runs at D/8).
    pub dim: usize,
    /// MLP width M at width D (a multiple of 8; scaled with the stage width).
    pub mlp_dim: usize,
    /// Heads of every stage; must divide D/8.
    pub heads: usize,
    pub image_size: usize,
    pub patch_size: usize,
    /// Image channels in and out.
    pub channels: usize,
    /// The refiner's first width (64 in the paper; its residual blocks run at twice that).
    pub refiner_width: usize,
    pub qkv_bias: bool,
    pub attn_scale: AttnScale,
    pub norm_eps: f64,
    pub norm_center: bool,
    pub init: Init,
}

impl VitUnetConfig {
    /// The paper's generator size (SPEC §4): depth 12, D 384, M 1536, 6 heads,
    /// with `block` transformer blocks, 256 px images in patches of 16, 3
    /// channels, refiner width 64; the block options of the classifiers'
    /// `default` preset (head-dim attention scale, QKV bias for `vit` only,
    /// LayerNorm eps 1e-6, timm init).
    pub fn new(block: BlockVariant) -> Self {
        VitUnetConfig {
            block,
            depth: 12,
            dim: 384,
            mlp_dim: 1536,
            heads: 6,
            image_size: 256,
            patch_size: 16,
            channels: 3,
            refiner_width: 64,
            qkv_bias: block == BlockVariant::Vit,
            attn_scale: AttnScale::Head,
            norm_eps: 1e-6,
            norm_center: true,
            init: Init::Timm,
        }
    }

    /// `vitunet`: the generator with standard ViT blocks.
    pub fn vitunet() -> Self {
        Self::new(BlockVariant::Vit)
    }

    /// `vit22bunet`: the generator with ViT-22B blocks.
    pub fn vit22bunet() -> Self {
        Self::new(BlockVariant::Vit22b)
    }

    pub fn with_image(mut self, image_size: usize, patch_size: usize) -> Self {
        self.image_size = image_size;
        self.patch_size = patch_size;
        self
    }

    pub fn num_patches(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// Blocks per transformer stage.
    pub fn stage_depth(&self) -> usize {
        self.depth / 6
    }

    /// Residual blocks of the refiner.
    pub fn refiner_blocks(&self) -> usize {
        self.depth / 3
    }

    /// The block configuration of a stage at width `dim / divisor`.
    fn stage_block(&self, divisor: usize) -> BlockConfig {
        BlockConfig {
            variant: self.block,
            dim: self.dim / divisor,
            mlp_dim: self.mlp_dim / divisor,
            heads: self.heads,
            qkv_bias: self.qkv_bias,
            attn_scale: self.attn_scale,
            norm_eps: self.norm_eps,
            norm_center: self.norm_center,
            init: self.init,
        }
    }

    /// Exact parameter count, without building the model.
    pub fn param_count(&self) -> usize {
        let patch = self.patch_size * self.patch_size * self.channels;
        let stem = patch * self.dim + self.dim + self.num_patches() * self.dim;
        // Encoder D, D/2, D/4; bottleneck D/8; decoder D/4, D/2, D.
        let stages: usize = [1, 2, 4, 8, 4, 2, 1].iter().map(|&div| self.stage_block(div).param_count()).sum();
        let out = self.dim * patch + patch;
        let conv = |c_in: usize, c_out: usize| c_in * c_out * 9 + c_out;
        let (w, w2) = (self.refiner_width, 2 * self.refiner_width);
        let refiner = conv(4 * self.channels, w)
            + conv(w, w2)
            + self.refiner_blocks() * 2 * conv(w2, w2)
            + conv(w2, w)
            + conv(w, self.channels);
        stem + self.stage_depth() * stages + out + refiner
    }

    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("generator.depth", self.depth),
            ("generator.dim", self.dim),
            ("generator.mlp_dim", self.mlp_dim),
            ("generator.heads", self.heads),
            ("generator.image_size", self.image_size),
            ("generator.patch_size", self.patch_size),
            ("generator.channels", self.channels),
            ("generator.refiner_width", self.refiner_width),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        if !self.depth.is_multiple_of(6) {
            return Err(Error::config(
                "generator.depth",
                format!("depth {} is not a multiple of 6 (7 stages of depth/6 blocks)", self.depth),
            ));
        }
        for (field, value) in [("generator.dim", self.dim), ("generator.mlp_dim", self.mlp_dim)] {
            if value % 8 != 0 {
                return Err(Error::config(field, format!("{value} is not a multiple of 8 (the bottleneck runs at 1/8 of it)")));
            }
        }
        if !(self.dim / 8).is_multiple_of(self.heads) {
            return Err(Error::config(
                "generator.heads",
                format!("the bottleneck width {} (dim/8) is not divisible by {} heads", self.dim / 8, self.heads),
            ));
        }
        if !self.image_size.is_multiple_of(self.patch_size) {
            return Err(Error::config(
                "generator.image_size",
                format!("image size {} is not divisible by the patch size {}", self.image_size, self.patch_size),
            ));
        }
        if self.image_size < 2 {
            return Err(Error::config("generator.image_size", "must be at least 2 (reflection padding)"));
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            return Err(Error::config("generator.norm_eps", "must be a positive finite number"));
        }
        Ok(())
    }
}

/// `depth / 6` transformer blocks at one width.
#[derive(Module, Debug)]
pub struct Stage {
    pub blocks: Vec<Block>,
}

impl Stage {
    fn new(c: &BlockConfig, depth: usize, device: &Device) -> Self {
        Stage { blocks: (0..depth).map(|_| Block::new(c, device)).collect() }
    }

    pub fn forward(&self, mut x: Tensor<3>) -> Tensor<3> {
        for block in &self.blocks {
            x = block.forward(x);
        }
        x
    }
}

/// Nearest-neighbour halving of the embedding axis (`F.interpolate(x,
/// scale_factor=0.5, mode="nearest")` on `[B, N, D]`): keeps the even features.
pub fn halve_width(x: Tensor<3>) -> Tensor<3> {
    let [b, n, d] = x.dims();
    x.reshape([b, n, d / 2, 2]).narrow(3, 0, 1).reshape([b, n, d / 2])
}

/// Nearest-neighbour doubling of the embedding axis (`scale_factor=2`): repeats every feature.
pub fn double_width(x: Tensor<3>) -> Tensor<3> {
    let [b, n, d] = x.dims();
    x.reshape([b, n, d, 1]).expand([b, n, d, 2]).reshape([b, n, 2 * d])
}

/// Reflection-pad by 1, then a 3x3 convolution (with bias).
#[derive(Module, Debug)]
pub struct PadConv {
    pub conv: Conv2d,
}

impl PadConv {
    fn new(c_in: usize, c_out: usize, device: &Device) -> Self {
        PadConv { conv: Conv2dConfig::new([c_in, c_out], [3, 3]).with_padding(PaddingConfig2d::Valid).init(device) }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        fused::conv2d(&self.conv, fused::reflect_pad(x, [1, 1, 1, 1]))
    }

    /// pad, conv, InstanceNorm, ReLU
    fn forward_norm_relu(&self, x: Tensor<4>) -> Tensor<4> {
        relu(instance_norm(self.forward(x)))
    }
}

/// `x + IN(conv(ReLU(IN(conv(x)))))`, both convolutions reflection-padded.
#[derive(Module, Debug)]
pub struct ResBlock {
    pub conv1: PadConv,
    pub conv2: PadConv,
}

impl ResBlock {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let h = self.conv1.forward_norm_relu(x.clone());
        x + instance_norm(self.conv2.forward(h))
    }
}

/// The CNN that turns the 4C-channel token image into the output image.
#[derive(Module, Debug)]
pub struct Refiner {
    pub in1: PadConv,
    pub in2: PadConv,
    pub res: Vec<ResBlock>,
    pub out1: PadConv,
    pub out2: PadConv,
}

impl Refiner {
    fn new(c_in: usize, width: usize, blocks: usize, c_out: usize, device: &Device) -> Self {
        let w2 = 2 * width;
        Refiner {
            in1: PadConv::new(c_in, width, device),
            in2: PadConv::new(width, w2, device),
            res: (0..blocks)
                .map(|_| ResBlock { conv1: PadConv::new(w2, w2, device), conv2: PadConv::new(w2, w2, device) })
                .collect(),
            out1: PadConv::new(w2, width, device),
            out2: PadConv::new(width, c_out, device),
        }
    }

    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let mut x = self.in2.forward_norm_relu(self.in1.forward_norm_relu(x));
        for block in &self.res {
            x = block.forward(x);
        }
        self.out2.forward(self.out1.forward_norm_relu(x)).tanh()
    }
}

/// The ViT-based U-Net generator: images in `[-1, 1]` to images in `(-1, 1)`.
#[derive(Module, Debug)]
pub struct VitUnet {
    pub patch_embed: Linear,
    pub pos_embed: Param<Tensor<3>>,
    /// Widths D, D/2, D/4.
    pub encoder: Vec<Stage>,
    /// Width D/8.
    pub bottleneck: Stage,
    /// Widths D/4, D/2, D over 2N, 3N, 4N tokens.
    pub decoder: Vec<Stage>,
    /// Linear(D -> p*p*C) per token.
    pub out_proj: Linear,
    pub refiner: Refiner,
    #[module(skip)]
    patch_size: usize,
    #[module(skip)]
    channels: usize,
}

impl VitUnet {
    /// Builds a randomly initialised generator; fails if the configuration is invalid.
    pub fn new(c: &VitUnetConfig, device: &Device) -> Result<Self> {
        super::init::built(|| Self::build(c, device))
    }

    fn build(c: &VitUnetConfig, device: &Device) -> Result<Self> {
        c.validate()?;
        let pos_std = c.init.pos_embed_std();
        let k = c.stage_depth();
        let patch = c.patch_size * c.patch_size * c.channels;
        Ok(VitUnet {
            patch_embed: linear(c.init, patch, c.dim, true, device),
            pos_embed: Param::from_tensor(Tensor::random(
                [1, c.num_patches(), c.dim],
                Distribution::Normal(0.0, pos_std),
                device,
            )),
            encoder: [1, 2, 4].iter().map(|&div| Stage::new(&c.stage_block(div), k, device)).collect(),
            bottleneck: Stage::new(&c.stage_block(8), k, device),
            decoder: [4, 2, 1].iter().map(|&div| Stage::new(&c.stage_block(div), k, device)).collect(),
            out_proj: linear(c.init, c.dim, patch, true, device),
            refiner: Refiner::new(4 * c.channels, c.refiner_width, c.refiner_blocks(), c.channels, device),
            patch_size: c.patch_size,
            channels: c.channels,
        })
    }

    /// The transformer U-Net: `[B, C, H, W]` images to its `[B, 4N, D]` output tokens.
    pub fn tokens(&self, images: Tensor<4>) -> Tensor<3> {
        let mut x = self.patch_embed.forward_tokens(patchify(images, self.patch_size)) + self.pos_embed.val();
        let mut skips = Vec::with_capacity(self.encoder.len());
        for (i, stage) in self.encoder.iter().enumerate() {
            if i > 0 {
                x = halve_width(x);
            }
            x = stage.forward(x);
            skips.push(x.clone());
        }
        x = self.bottleneck.forward(halve_width(x));
        for stage in &self.decoder {
            let skip = skips.pop().expect("one skip per decoder stage");
            x = stage.forward(Tensor::cat(vec![double_width(x), skip], 1));
        }
        x
    }

    /// `[B, C, H, W]` images in `[-1, 1]` to translated images in `(-1, 1)`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<4> {
        let [b, _, h, w] = images.dims();
        let (p, c) = (self.patch_size, self.channels);
        let (gh, gw) = (h / p, w / p);
        // [B, 4N, p*p*C]: token k*N + n is patch n of image k (k = 0: the bottleneck path,
        // then the skips of the encoder stages 2, 1, 0).
        let y = self.out_proj.forward_tokens(self.tokens(images));
        let y = y.reshape([b * 4, gh, gw, p, p, c]).permute([0, 5, 1, 3, 2, 4]).reshape([b, 4 * c, h, w]);
        self.refiner.forward(y)
    }
}
