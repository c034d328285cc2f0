//! The seeded random generator every part of vitlab draws from (data order,
//! augmentation, splits, KID subsets, the GAN history pool): small, fast and
//! reproducible across platforms and thread counts.

/// A small, fast, seedable generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator for a tuple of ids, independent of the order they are used in.
    pub fn keyed(parts: &[u64]) -> Self {
        let mut r = Rng(0x243F6A8885A308D3);
        for p in parts {
            r.0 ^= p.wrapping_add(0x9E3779B97F4A7C15);
            r.next_u64();
        }
        r
    }

    /// The generator's state (a checkpoint stores it; [`Rng::new`] restores it).
    pub fn state(&self) -> u64 {
        self.0
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Uniform in [lo, hi) (f64).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform_f64()
    }

    /// Uniform in [0, 1) with 53 bits.
    pub fn uniform_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller; one draw of two uniforms per value).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform_f64(); // (0, 1]
        let u2 = self.uniform_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Gamma(shape, 1) by Marsaglia and Tsang (2000); shapes below 1 by the
    /// boost `Gamma(a) = Gamma(a + 1) * U^(1/a)`.
    pub fn gamma(&mut self, shape: f64) -> f64 {
        assert!(shape > 0.0, "gamma shape must be positive");
        if shape < 1.0 {
            let u = 1.0 - self.uniform_f64();
            return self.gamma(shape + 1.0) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = 1.0 - self.uniform_f64();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }

    /// Beta(a, b) as X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b).
    pub fn beta(&mut self, a: f64, b: f64) -> f64 {
        let x = self.gamma(a);
        let y = self.gamma(b);
        x / (x + y)
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        (m, xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64)
    }

    #[test]
    fn normal_beta_and_gamma_have_their_moments() {
        let mut r = Rng::new(7);
        let n = 200_000;
        let (m, v) = mean_var(&(0..n).map(|_| r.normal()).collect::<Vec<_>>());
        assert!(m.abs() < 0.01 && (v - 1.0).abs() < 0.01, "normal: mean {m}, var {v}");
        for shape in [0.4, 1.0, 3.5] {
            let (m, v) = mean_var(&(0..n).map(|_| r.gamma(shape)).collect::<Vec<_>>());
            assert!(
                (m - shape).abs() < 0.02 * shape.max(1.0) && (v - shape).abs() < 0.05 * shape.max(1.0),
                "gamma({shape}): {m} {v}"
            );
        }
        for (a, b) in [(1.0, 1.0), (0.8, 0.8), (2.0, 5.0)] {
            let (m, v) = mean_var(&(0..n).map(|_| r.beta(a, b)).collect::<Vec<_>>());
            let (em, ev) = (a / (a + b), a * b / ((a + b) * (a + b) * (a + b + 1.0)));
            assert!((m - em).abs() < 0.005 && (v - ev).abs() < 0.005, "beta({a}, {b}): {m} {v} vs {em} {ev}");
        }
    }
}
