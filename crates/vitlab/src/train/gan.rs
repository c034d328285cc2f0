//! The pieces of the CycleGAN objective (SPEC §5), for the generator trainer to
//! come: least-squares GAN losses, the L1 cycle and identity terms, and the
//! history pool of generated images the discriminators train on.
//!
//! Per domain, with discriminator scores `D(.)`:
//! - discriminator: `mean((D(real) - 1)^2) + mean(D(fake)^2)`, fakes detached;
//! - generator: `mean((D(G(x)) - 1)^2) + lambda_cycle * L1(F(G(x)), x)
//!   [+ lambda_identity * lambda_cycle * L1(G(y), y)]` (lambda_cycle 10, lambda_identity 0.5).

use burn::tensor::Tensor;

use crate::data::loader::Rng;

/// The least-squares discriminator loss of one domain: real patches towards 1,
/// generated ones towards 0 (pass `fake` scores of detached images).
pub fn lsgan_discriminator_loss(real_scores: Tensor<4>, fake_scores: Tensor<4>) -> Tensor<1> {
    real_scores.sub_scalar(1.0).powi_scalar(2).mean() + fake_scores.powi_scalar(2).mean()
}

/// The least-squares generator loss: the discriminator's scores of generated images towards 1.
pub fn lsgan_generator_loss(fake_scores: Tensor<4>) -> Tensor<1> {
    fake_scores.sub_scalar(1.0).powi_scalar(2).mean()
}

/// Mean absolute difference (the cycle-consistency and identity terms).
pub fn l1(a: Tensor<4>, b: Tensor<4>) -> Tensor<1> {
    (a - b).abs().mean()
}

/// The history of generated images that the discriminator sees (Shrivastava et
/// al. 2017, as in CycleGAN): until `capacity` images are stored each new image
/// is stored and returned; afterwards, with probability 1/2, a new image is
/// returned as it is, otherwise a random stored image is returned and the new one
/// takes its place. Capacity 0 passes every image through.
pub struct ImagePool {
    capacity: usize,
    images: Vec<Tensor<3>>,
    rng: Rng,
}

impl ImagePool {
    pub fn new(capacity: usize, seed: u64) -> Self {
        ImagePool { capacity, images: Vec::with_capacity(capacity), rng: Rng::keyed(&[seed, 0x504F_4F4C]) }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.images.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// The stored images and the generator's state, for a checkpoint.
    pub fn state(&self) -> (&[Tensor<3>], u64) {
        (&self.images, self.rng.state())
    }

    /// Restores [`ImagePool::state`]; images beyond the capacity are an error.
    pub fn restore(&mut self, images: Vec<Tensor<3>>, rng_state: u64) -> crate::Result<()> {
        if images.len() > self.capacity {
            return Err(crate::Error::config(
                "cyclegan.pool_size",
                format!("the checkpoint's pool holds {} images, more than the capacity {}", images.len(), self.capacity),
            ));
        }
        self.images = images;
        self.rng = Rng::new(rng_state);
        Ok(())
    }

    /// The batch `[B, C, H, W]` the discriminator trains on, given the newly
    /// generated batch (detached: the pool keeps no graph).
    pub fn query(&mut self, generated: Tensor<4>) -> Tensor<4> {
        let generated = generated.detach();
        if self.capacity == 0 {
            return generated;
        }
        let [b, c, h, w] = generated.dims();
        let mut out = Vec::with_capacity(b);
        for i in 0..b {
            let image = generated.clone().narrow(0, i, 1).reshape([c, h, w]);
            if self.images.len() < self.capacity {
                self.images.push(image.clone());
                out.push(image);
            } else if self.rng.uniform() < 0.5 {
                let k = self.rng.below(self.capacity);
                out.push(std::mem::replace(&mut self.images[k], image));
            } else {
                out.push(image);
            }
        }
        Tensor::stack(out, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_file::tensor_to_vec as values;
    use burn::tensor::{Device, TensorData};

    fn device() -> Device {
        Device::flex()
    }

    #[test]
    fn least_squares_and_l1_losses_have_their_textbook_values() {
        let d = device();
        let real = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, 0.0, 0.5, 1.5], [1, 1, 2, 2]), &d);
        let fake = Tensor::<4>::from_data(TensorData::new(vec![0.0f32, 1.0, 0.5, -1.0], [1, 1, 2, 2]), &d);
        // mean((real - 1)^2) = (0 + 1 + 0.25 + 0.25) / 4; mean(fake^2) = (0 + 1 + 0.25 + 1) / 4
        let dl = values(lsgan_discriminator_loss(real.clone(), fake.clone()))[0];
        assert!((dl - (1.5 / 4.0 + 2.25 / 4.0)).abs() < 1e-6, "{dl}");
        // mean((fake - 1)^2) = (1 + 0 + 0.25 + 4) / 4
        let gl = values(lsgan_generator_loss(fake.clone()))[0];
        assert!((gl - 5.25 / 4.0).abs() < 1e-6, "{gl}");
        // |real - fake| = 1, 1, 0, 2.5
        let l = values(l1(real, fake))[0];
        assert!((l - 4.5 / 4.0).abs() < 1e-6, "{l}");
    }

    /// Image i of batch k is filled with the value 10k + i, so every returned
    /// image says where it came from.
    fn batch(k: usize, b: usize, d: &Device) -> Tensor<4> {
        let data: Vec<f32> = (0..b).flat_map(|i| vec![(10 * k + i) as f32; 3 * 2 * 2]).collect();
        Tensor::<4>::from_data(TensorData::new(data, [b, 3, 2, 2]), d)
    }

    fn ids(t: Tensor<4>) -> Vec<u32> {
        let b = t.dims()[0];
        values(t).chunks(12).take(b).map(|c| c[0] as u32).collect()
    }

    #[test]
    fn the_pool_fills_then_swaps_about_half_of_the_images() {
        let d = device();
        let mut pool = ImagePool::new(4, 7);
        assert_eq!(ids(pool.query(batch(0, 4, &d))), vec![0, 1, 2, 3], "filling returns the new images");
        assert_eq!(pool.len(), 4);
        let mut seen_new = 0;
        let mut seen_old = 0;
        let mut stored: Vec<u32> = vec![0, 1, 2, 3];
        for k in 1..=50 {
            for id in ids(pool.query(batch(k, 4, &d))) {
                if id / 10 == k as u32 {
                    seen_new += 1;
                } else {
                    // An older image comes from the pool, and only once.
                    let at = stored.iter().position(|&s| s == id).expect("returned image was in the pool");
                    stored.remove(at);
                    seen_old += 1;
                }
            }
            stored = ids(Tensor::stack(pool.images.clone(), 0));
            assert_eq!(pool.len(), 4);
        }
        assert_eq!(seen_new + seen_old, 200);
        assert!((70..=130).contains(&seen_old), "about half come from the history: {seen_old} of 200");
        // The same seed gives the same history.
        let replay = |seed| {
            let mut p = ImagePool::new(4, seed);
            (0..10).flat_map(|k| ids(p.query(batch(k, 4, &d)))).collect::<Vec<_>>()
        };
        assert_eq!(replay(7), replay(7));
        assert_ne!(replay(7), replay(8));
    }

    #[test]
    fn a_pool_of_capacity_zero_passes_images_through() {
        let d = device();
        let mut pool = ImagePool::new(0, 1);
        assert_eq!(ids(pool.query(batch(3, 2, &d))), vec![30, 31]);
        assert!(pool.is_empty());
    }
}
