//! Tensor files: what vitlab reads and writes tensors from, below the models
//! that give the tensors their meaning.
//!
//! - [`host`]: [`HostTensor`] and [`TensorMap`], the tensors as read;
//! - [`safetensors`]: safetensors files (weights, checkpoints, feature caches);
//! - [`torch`]: state dicts that PyTorch's `torch.save` wrote (`.pth`, `.pt`);
//! - [`pickle`]: the bounded Python pickle reader behind [`torch`] and the
//!   CIFAR python-version batches, [`numpy`] the arrays in them.
//!
//! [`read_any`] reads a file in either format by its content. What the tensors
//! mean (key layouts, loading into and collecting from modules) is
//! [`crate::models::weights`]'s business.

pub(crate) mod host;
pub mod numpy;
pub mod pickle;
pub(crate) mod safetensors;
pub(crate) mod torch;

use std::fs;
use std::path::Path;

pub use self::safetensors::{read_safetensors, write_safetensors};
pub use host::{group, tensor_to_vec, HostTensor, TensorMap};

use crate::{Error, Result};

/// Reads the float tensors of a weights file in any format vitlab knows, by
/// content: a state dict `torch.save` wrote (zip or legacy, see
/// [`torch`]) or safetensors.
pub fn read_any(path: &Path) -> Result<TensorMap> {
    let mut head = [0u8; 4];
    let n = {
        use std::io::Read;
        let mut f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
        f.read(&mut head).map_err(|e| Error::io(path, e))?
    };
    if torch::looks_like_torch(&head[..n]) {
        torch::read_state_dict(path)
    } else {
        Ok(read_safetensors(path)?.0)
    }
}
