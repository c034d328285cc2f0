//! The CycleGAN discriminators (SPEC §5; docs/MODELS.md, "Discriminators"):
//! the paper's released one and the 70x70 PatchGAN of pix2pix/CycleGAN.
//! Both map images `[B, C, H, W]` to a map of patch scores `[B, 1, h, w]`.
//!
//! - `released`: four `conv4x4 stride 2 pad 2 -> InstanceNorm -> LeakyReLU(0.2)`
//!   layers, channels C -> w -> 2w -> w -> C (w = 16: 3 -> 16 -> 32 -> 16 -> 3),
//!   then `conv4x4 stride 1 pad 1` to one channel and a sigmoid.
//! - `patchgan`: `conv4x4 s2 p1` C -> w, LeakyReLU; two `conv4x4 s2 p1`
//!   (w -> 2w -> 4w) and one `conv4x4 s1 p1` (4w -> 8w), each with InstanceNorm and
//!   LeakyReLU; `conv4x4 s1 p1` 8w -> 1, no activation (w = 64: the 70x70 receptive field).
//!
//! Every convolution has a bias; InstanceNorm has no affine (eps 1e-5).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::PaddingConfig2d;
use burn::tensor::activation::{leaky_relu, sigmoid};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::config::named_enum;
use super::fused;
use super::layers::instance_norm;
use crate::{Error, Result};

/// Which discriminator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscriminatorKind {
    /// The paper's released discriminator (sigmoid output).
    Released,
    /// The 70x70 PatchGAN of pix2pix/CycleGAN (raw scores).
    Patchgan,
}

named_enum!(DiscriminatorKind, "discriminator.kind", { Released => "released", Patchgan => "patchgan" });

impl DiscriminatorKind {
    /// The first width of the published network (16 and 64).
    pub fn default_width(self) -> usize {
        match self {
            DiscriminatorKind::Released => 16,
            DiscriminatorKind::Patchgan => 64,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscriminatorConfig {
    pub kind: DiscriminatorKind,
    /// Image channels.
    pub channels: usize,
    /// The first convolution's output channels (the others scale with it).
    pub width: usize,
}

impl DiscriminatorConfig {
    /// The published network of a kind, for 3-channel images.
    pub fn new(kind: DiscriminatorKind) -> Self {
        DiscriminatorConfig { kind, channels: 3, width: kind.default_width() }
    }

    /// (in, out, stride, padding) of every convolution, in order.
    fn layers(&self) -> Vec<(usize, usize, usize, usize)> {
        let (c, w) = (self.channels, self.width);
        match self.kind {
            DiscriminatorKind::Released => {
                vec![(c, w, 2, 2), (w, 2 * w, 2, 2), (2 * w, w, 2, 2), (w, c, 2, 2), (c, 1, 1, 1)]
            }
            DiscriminatorKind::Patchgan => {
                vec![(c, w, 2, 1), (w, 2 * w, 2, 1), (2 * w, 4 * w, 2, 1), (4 * w, 8 * w, 1, 1), (8 * w, 1, 1, 1)]
            }
        }
    }

    /// Exact parameter count (4x4 kernels with biases).
    pub fn param_count(&self) -> usize {
        self.layers().iter().map(|&(i, o, _, _)| i * o * 16 + o).sum()
    }

    /// The side of the score map for a square `size` x `size` input (0: too small).
    pub fn output_size(&self, size: usize) -> usize {
        self.sides(size).and_then(|s| s.last().copied()).unwrap_or(0)
    }

    /// The side after each convolution; `None` if one of them cannot run.
    fn sides(&self, size: usize) -> Option<Vec<usize>> {
        let mut s = size;
        self.layers()
            .into_iter()
            .map(|(_, _, stride, pad)| {
                s = (s + 2 * pad).checked_sub(4)? / stride + 1;
                Some(s)
            })
            .collect()
    }

    /// The smallest square input every layer can process: InstanceNorm needs
    /// more than one pixel per channel (PyTorch refuses one), the convolutions a
    /// kernel's worth of padded input.
    pub fn min_image_size(&self) -> usize {
        // Every layer but the last is instance-normalised.
        (1..)
            .find(|&s| self.sides(s).is_some_and(|sides| sides[..sides.len() - 1].iter().all(|&side| side > 1)))
            .expect("a large enough input exists")
    }

    pub fn validate(&self) -> Result<()> {
        for (field, value) in [("discriminator.channels", self.channels), ("discriminator.width", self.width)] {
            if value == 0 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// Checks that `image_size` (the field named in the error) is large enough for this discriminator.
    pub fn check_image_size(&self, field: &str, image_size: usize) -> Result<()> {
        let min = self.min_image_size();
        if image_size < min {
            return Err(Error::config(
                field,
                format!("{image_size} px is too small for the {} discriminator (at least {min} px)", self.kind),
            ));
        }
        Ok(())
    }
}

#[derive(Module, Debug)]
pub struct Discriminator {
    /// The five 4x4 convolutions, in order.
    pub convs: Vec<Conv2d>,
    #[module(skip)]
    kind: DiscriminatorKind,
}

impl Discriminator {
    /// Builds randomly initialised critics; fails if the configuration is invalid.
    pub fn new(c: &DiscriminatorConfig, device: &Device) -> Result<Self> {
        super::init::built(|| Self::build(c, device))
    }

    fn build(c: &DiscriminatorConfig, device: &Device) -> Result<Self> {
        c.validate()?;
        let convs = c
            .layers()
            .into_iter()
            .map(|(i, o, stride, pad)| {
                Conv2dConfig::new([i, o], [4, 4])
                    .with_stride([stride, stride])
                    .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
                    .init(device)
            })
            .collect();
        Ok(Discriminator { convs, kind: c.kind })
    }

    /// Patch scores `[B, 1, h, w]`: probabilities for `released`, raw scores for `patchgan`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<4> {
        let last = self.convs.len() - 1;
        let mut x = images;
        for (i, conv) in self.convs[..last].iter().enumerate() {
            x = fused::conv2d(conv, x);
            // The PatchGAN's first layer has no norm.
            if !(self.kind == DiscriminatorKind::Patchgan && i == 0) {
                x = instance_norm(x);
            }
            x = leaky_relu(x, 0.2);
        }
        let scores = fused::conv2d(&self.convs[last], x);
        match self.kind {
            DiscriminatorKind::Released => sigmoid(scores),
            DiscriminatorKind::Patchgan => scores,
        }
    }
}
