//! Helpers used everywhere, below every other module: the seeded generator.

pub mod rng;

pub use rng::Rng;
