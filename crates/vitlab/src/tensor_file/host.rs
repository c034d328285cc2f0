//! Tensors on the host: [`HostTensor`] (float32 in PyTorch layout) and
//! [`TensorMap`] (named tensors), what every weights, checkpoint and feature
//! file holds once read, and the bridge from burn's tensors to them.

use std::collections::BTreeMap;

use burn::tensor::Tensor;

/// A float32 tensor on the host, in PyTorch layout.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl HostTensor {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        HostTensor { shape, data }
    }

    /// 2-D transpose.
    pub(crate) fn transposed(&self) -> Self {
        let (r, c) = (self.shape[0], self.shape[1]);
        let mut out = vec![0.0; r * c];
        for i in 0..r {
            for j in 0..c {
                out[j * r + i] = self.data[i * c + j];
            }
        }
        HostTensor::new(vec![c, r], out)
    }
}

/// Named tensors, sorted by key.
pub type TensorMap = BTreeMap<String, HostTensor>;

/// The tensors under `prefix.`, with the prefix removed (checkpoints keep
/// `model.*` and `optim.*` side by side).
pub fn group(map: &TensorMap, prefix: &str) -> TensorMap {
    let p = format!("{prefix}.");
    map.iter().filter_map(|(k, v)| k.strip_prefix(&p).map(|k| (k.to_string(), v.clone()))).collect()
}

/// A float tensor's values as f32, in row-major order.
pub fn tensor_to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().expect("converted to f32 above")
}
