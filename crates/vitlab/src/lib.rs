//! vitlab: train, probe and compare Vision Transformers.
//!
//! The crate is organised by concern:
//! - [`models`]: the model zoo (one configurable ViT definition, size presets,
//!   block variants of the ViT-22B family) and weight files;
//! - [`backend`]: choosing the compute device (flex, LibTorch, CUDA) at run time;
//! - [`error`]: the error type every fallible API returns.
//!
//! Model code never names a backend: tensors carry their device.

pub mod backend;
pub mod bench;
pub mod config;
pub mod data;
pub mod error;
pub mod metrics;
pub mod models;
pub mod report;
pub mod stats;
pub mod sweep;
pub mod tensor_file;
pub mod train;
pub mod util;

pub use error::{Error, Result};
