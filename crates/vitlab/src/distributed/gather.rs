//! The whole global batch of a tensor every rank computed a slice of: what a step
//! needs when a piece of it runs over the global batch in order on every rank (the
//! CycleGAN's image-history pools, which draw one random number per image).

use burn::tensor::{Tensor, TensorData};

use super::{Reduce, World};
use crate::tensor_file::tensor_to_vec;
use crate::Result;

/// Every rank's `local` rows (its [`World::slice`] of a global batch of `global`),
/// concatenated in rank order on every rank, detached: one all-reduce of a buffer in
/// which each rank fills its own rows and leaves the others zero (exact: x + 0 = x).
pub fn all_gather_rows<const D: usize>(world: &World, local: Tensor<D>, global: usize) -> Result<Tensor<D>> {
    if world.size() == 1 {
        return Ok(local.detach());
    }
    let mut dims = local.dims();
    let rows = world.slice(global);
    assert_eq!(dims[0], rows.len(), "all_gather_rows: this rank's rows");
    let per: usize = dims[1..].iter().product();
    let device = local.device();
    let mut flat = vec![0f32; global * per];
    flat[rows.start * per..rows.end * per].copy_from_slice(&tensor_to_vec(local.detach()));
    world.all_reduce(&mut flat, Reduce::Sum)?;
    dims[0] = global;
    Ok(Tensor::from_data(TensorData::new(flat, dims), &device))
}
