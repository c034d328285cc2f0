//! vitlab: train, probe and compare Vision Transformers.
//!
//! The crate is organised by concern, listed from the ground up:
//! - [`error`]: the error type every fallible API returns; [`stats`]: summary
//!   statistics and tests for comparing runs;
//! - [`util`]: helpers used everywhere: the seeded generator, crash-safe file
//!   writes, PNG encoding;
//! - [`backend`]: choosing the compute device (flex, LibTorch, CUDA) at run time;
//! - [`tensor_file`]: tensors on the host and their files (safetensors, PyTorch
//!   state dicts, the bounded pickle reader);
//! - [`data`]: dataset readers, the decoded-dataset cache, downloads, the
//!   augmenting batch loader, image grids;
//! - [`models`]: the model zoo (one configurable ViT definition, size presets,
//!   block variants of the ViT-22B family, the CycleGAN networks, the FID
//!   Inception) and what weight files mean to it;
//! - [`metrics`]: classification metrics, FID and KID;
//! - [`config`]: experiment configs, `--set` overrides, a config's flat view;
//! - [`train`]: the training loop, checkpoints, optimisers, the classification
//!   and CycleGAN trainers, the augmentation preview;
//! - [`inspect`]: attention maps and rollout of trained classifiers;
//! - [`bench`]: throughput benchmarks; [`sweep`]: grids of configs x seeds;
//!   [`report`]: reports and figures over runs.
//!
//! Model code never names a backend: tensors carry their device.

// `!(x > 0.0)` is this crate's way to reject NaN along with the out-of-range
// values (a NaN compares false); clippy's suggested `partial_cmp` would hide that.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

pub mod backend;
pub mod bench;
pub mod config;
pub mod data;
pub mod distributed;
pub mod error;
pub mod inspect;
pub mod metrics;
pub mod models;
pub mod report;
pub mod stats;
pub mod sweep;
pub mod tensor_file;
pub mod train;
pub mod util;

pub use error::{Error, Result};
