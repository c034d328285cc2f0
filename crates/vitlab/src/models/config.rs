//! Model configuration: block variants, size presets, the `default` and `paper`
//! presets, and the fully resolved [`ModelConfig`]. See docs/MODELS.md.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Implements `Display`/`FromStr` through a table of names, with an error that
/// lists the accepted values.
macro_rules! named_enum {
    ($ty:ident, $field:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];
            pub fn name(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }
        }
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(self.name()) }
        }
        impl std::str::FromStr for $ty {
            type Err = $crate::Error;
            fn from_str(s: &str) -> $crate::Result<Self> {
                $ty::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
                    let names: Vec<&str> = $ty::ALL.iter().map(|v| v.name()).collect();
                    $crate::Error::config($field, format!("unknown value {s:?}; expected one of {}", names.join(", ")))
                })
            }
        }
    };
}
pub(crate) use named_enum;

/// The transformer block (SPEC §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockVariant {
    /// Serial pre-norm ViT block.
    Vit,
    /// The ViT-22B parallel block: shared pre-norm, QK-norm, no QKV/LayerNorm biases.
    Vit22b,
    /// The paper's fix: `vit22b` plus a LayerNorm on the MLP branch output.
    Vit22bLn,
    /// The released code's block: `x + LN(Attn(x) + MLP(x))`, no input norm.
    Vit22bCode,
    /// The first released version (the block of the paper's Figure 1): no norm in
    /// the block, fused QKV + MLP-input projection, one fused output projection;
    /// one non-affine LayerNorm after the patch embedding.
    #[serde(rename = "vit22b-nonorm")]
    Vit22bNoNorm,
}
named_enum!(BlockVariant, "model.block", {
    Vit => "vit", Vit22b => "vit22b", Vit22bLn => "vit22b-ln", Vit22bCode => "vit22b-code",
    Vit22bNoNorm => "vit22b-nonorm",
});

impl BlockVariant {
    /// The ViT-22B family drops LayerNorm biases and uses QK-norm.
    pub fn is_22b(self) -> bool {
        !matches!(self, BlockVariant::Vit)
    }
}

/// Size presets (SPEC §1 table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    Tiny,
    Small,
    Base,
    Large,
    Huge,
}
named_enum!(Size, "model.size", {
    Tiny => "tiny", Small => "small", Base => "base", Large => "large", Huge => "huge",
});

impl Size {
    /// (depth, width D, MLP width M, heads)
    pub fn dims(self) -> (usize, usize, usize, usize) {
        match self {
            Size::Tiny => (12, 192, 768, 3),
            Size::Small => (12, 384, 1536, 6),
            Size::Base => (12, 768, 3072, 12),
            Size::Large => (24, 1024, 4096, 16),
            Size::Huge => (32, 1280, 5120, 16),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pool {
    /// The cls token's final state.
    Cls,
    /// Global average over tokens (no cls token).
    Gap,
    /// Multi-head attention pooling (no cls token).
    Map,
}
named_enum!(Pool, "model.pool", { Cls => "cls", Gap => "gap", Map => "map" });

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeadKind {
    /// Linear(D -> classes).
    Linear,
    /// The released code's MLP head: Linear(D -> M), [BatchNorm1d], GELU, Linear(M -> classes).
    Paper,
}
named_enum!(HeadKind, "model.head", { Linear => "linear", Paper => "paper" });

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttnScale {
    /// head_dim^-0.5 (standard).
    Head,
    /// D^-0.5, the released code's full-width scale.
    Width,
}
named_enum!(AttnScale, "model.attn_scale", { Head => "head", Width => "width" });

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// timm's ViT init: trunc-normal(0.02) Linear weights, zero biases.
    Timm,
    /// PyTorch default Linear init, N(0, 1) position embedding and cls token.
    Paper,
    /// Xavier-normal Linear weights, zero biases, N(0, 1) position embedding and
    /// cls token: Lee, Lee & Song's vit.py (`self.apply(init_weights)`).
    Xavier,
}
named_enum!(Init, "model.init", { Timm => "timm", Paper => "paper", Xavier => "xavier" });

impl Init {
    /// Standard deviation of the normal the position embedding starts from.
    pub fn pos_embed_std(self) -> f64 {
        match self {
            Init::Paper | Init::Xavier => 1.0,
            Init::Timm => 0.02,
        }
    }

    /// Standard deviation of the normal the cls token starts from.
    pub fn cls_token_std(self) -> f64 {
        match self {
            Init::Paper | Init::Xavier => 1.0,
            Init::Timm => 1e-6,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// vitlab's standard choices.
    Default,
    /// Exactly the released code's model for each variant.
    Paper,
}
named_enum!(Preset, "model.preset", { Default => "default", Paper => "paper" });

/// A fully resolved model configuration: everything the model constructor needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub block: BlockVariant,
    pub depth: usize,
    pub dim: usize,
    pub mlp_dim: usize,
    pub heads: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub channels: usize,
    pub num_classes: usize,
    pub pool: Pool,
    pub head: HeadKind,
    pub attn_scale: AttnScale,
    pub final_norm: bool,
    pub qkv_bias: bool,
    pub norm_eps: f64,
    /// false: LayerNorms do not subtract the mean (the 22B paper's option).
    pub norm_center: bool,
    pub init: Init,
}

impl ModelConfig {
    /// A size preset with vitlab's default choices, 32 px images, patch 4, 10 classes.
    pub fn new(block: BlockVariant, size: Size) -> Self {
        let (depth, dim, mlp_dim, heads) = size.dims();
        ModelConfig {
            block,
            depth,
            dim,
            mlp_dim,
            heads,
            image_size: 32,
            patch_size: 4,
            channels: 3,
            num_classes: 10,
            pool: Pool::Cls,
            head: HeadKind::Linear,
            attn_scale: AttnScale::Head,
            final_norm: true,
            qkv_bias: block == BlockVariant::Vit,
            norm_eps: 1e-6,
            norm_center: true,
            init: Init::Timm,
        }
    }

    /// `ModelConfig::new(BlockVariant::Vit, Size::Tiny)`, the candle-style constructor.
    pub fn tiny(block: BlockVariant) -> Self {
        Self::new(block, Size::Tiny)
    }

    /// Applies a preset's choices (docs/MODELS.md, "Presets").
    pub fn with_preset(mut self, preset: Preset) -> Self {
        match preset {
            Preset::Default => {
                self.head = HeadKind::Linear;
                self.attn_scale = AttnScale::Head;
                self.final_norm = true;
                self.qkv_bias = self.block == BlockVariant::Vit;
                self.norm_eps = 1e-6;
                self.init = Init::Timm;
            }
            Preset::Paper => {
                self.head = HeadKind::Paper;
                self.attn_scale = AttnScale::Width;
                self.final_norm = false;
                self.qkv_bias = false;
                self.norm_eps = 1e-5;
                self.init = Init::Paper;
            }
        }
        self
    }

    pub fn with_image(mut self, image_size: usize, patch_size: usize) -> Self {
        self.image_size = image_size;
        self.patch_size = patch_size;
        self
    }

    pub fn with_classes(mut self, num_classes: usize) -> Self {
        self.num_classes = num_classes;
        self
    }

    pub fn with_pool(mut self, pool: Pool) -> Self {
        self.pool = pool;
        self
    }

    pub fn head_dim(&self) -> usize {
        self.dim / self.heads
    }

    pub fn num_patches(&self) -> usize {
        (self.image_size / self.patch_size).pow(2)
    }

    /// Tokens entering the transformer: patches plus the cls token if any.
    pub fn num_tokens(&self) -> usize {
        self.num_patches() + usize::from(self.pool == Pool::Cls)
    }

    /// Checks every constraint; the error names the offending field.
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("model.depth", self.depth),
            ("model.dim", self.dim),
            ("model.mlp_dim", self.mlp_dim),
            ("model.heads", self.heads),
            ("model.image_size", self.image_size),
            ("model.patch_size", self.patch_size),
            ("model.channels", self.channels),
            ("model.num_classes", self.num_classes),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(Error::config(field, "must be at least 1"));
            }
        }
        if !self.image_size.is_multiple_of(self.patch_size) {
            return Err(Error::config(
                "model.image_size",
                format!(
                    "image size {} is not divisible by the patch size {}; choose an image size that is a multiple of {}",
                    self.image_size, self.patch_size, self.patch_size
                ),
            ));
        }
        if !self.dim.is_multiple_of(self.heads) {
            return Err(Error::config("model.heads", format!("width {} is not divisible by {} heads", self.dim, self.heads)));
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            return Err(Error::config("model.norm_eps", "must be a positive finite number"));
        }
        Ok(())
    }
}
