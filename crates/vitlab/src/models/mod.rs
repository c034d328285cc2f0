//! The model zoo. One configurable ViT ([`Vit`]) covers every block variant,
//! size, pooling and head; [`ModelConfig`] and its presets describe a model;
//! [`weights`] maps tensor files in vitlab's, timm's and the paper code's
//! layouts onto the models (the files themselves: [`crate::tensor_file`]). [`VitUnet`] is the paper's ViT-based U-Net generator, [`Discriminator`]
//! its CycleGAN critics.

pub(crate) mod config;
pub(crate) mod discriminator;
pub mod finetune;
pub mod fused;
pub mod inception;
pub(crate) mod init;
pub(crate) mod layers;
pub mod precision;
pub(crate) mod vit;
pub(crate) mod vitunet;
pub mod weights;

pub use config::{AttnScale, BlockVariant, HeadKind, Init, ModelConfig, Pool, Preset, Size};
pub use discriminator::{Discriminator, DiscriminatorConfig, DiscriminatorKind};
pub use init::seeded;
pub use layers::{Probe, Probed};
pub use vit::{param_count, Block, BlockConfig, BlockProbe, DropPath, DropPathSchedule, Vit};
pub use vitunet::{VitUnet, VitUnetConfig};
