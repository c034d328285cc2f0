//! safetensors files, read as float32 (any float dtype) and written as float32,
//! atomically: the format of vitlab's weights, checkpoints and cached features.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::host::{HostTensor, TensorMap};
use crate::util::fs::atomic_write;
use crate::{Error, Result};

/// Reads every tensor of a safetensors file as float32, with the file's metadata.
/// Integer tensors (PyTorch's `num_batches_tracked`) are dropped.
pub fn read_safetensors(path: &Path) -> Result<(TensorMap, HashMap<String, String>)> {
    let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
    let bad = |m: String| Error::weights(path, m);
    let st = SafeTensors::deserialize(&bytes).map_err(|e| bad(format!("not a valid safetensors file: {e}")))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| bad(format!("not a valid safetensors file: {e}")))?;
    let mut map = TensorMap::new();
    for (name, view) in st.iter() {
        let raw = view.data();
        let data: Vec<f32> = match view.dtype() {
            Dtype::F32 => raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect(),
            Dtype::F64 => raw.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap()) as f32).collect(),
            Dtype::F16 => raw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::I64 | Dtype::I32 if name.ends_with("num_batches_tracked") => continue,
            other => {
                return Err(bad(format!("tensor {name:?} has dtype {other:?}; expected a float type (F32, F64, F16, BF16)")))
            }
        };
        map.insert(name.to_string(), HostTensor::new(view.shape().to_vec(), data));
    }
    Ok((map, meta.metadata().clone().unwrap_or_default()))
}

/// Writes tensors as float32 safetensors, atomically: a temporary file in the same
/// folder is written, synced and renamed over `path`, so a crash never leaves a
/// half-written file under the final name.
pub fn write_safetensors(path: &Path, map: &TensorMap, metadata: HashMap<String, String>) -> Result<()> {
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = map
        .iter()
        .map(|(k, t)| {
            let b = t.data.iter().flat_map(|v| v.to_le_bytes()).collect();
            (k.clone(), b, t.shape.clone())
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(k, b, s)| (k.as_str(), safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b).expect("sizes match")));
    let meta = (!metadata.is_empty()).then_some(metadata);
    let buffer = safetensors::serialize(views, meta).map_err(|e| Error::weights(path, e.to_string()))?;
    atomic_write(path, &buffer)
}
