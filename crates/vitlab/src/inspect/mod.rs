//! Looking inside trained models: attention maps and attention rollout
//! (`vitlab attention`).

pub mod attention;
pub mod maps;

pub use attention::{attention_files, AttentionOptions, AttentionSummary, ImageAttention};
pub use maps::{AttentionMaps, Fusion};
