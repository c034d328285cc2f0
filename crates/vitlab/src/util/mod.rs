//! Helpers used everywhere, below every other module: the seeded generator
//! ([`Rng`]), crash-safe file writes ([`fs::atomic_write`]) and PNG encoding
//! ([`png`]).

pub mod fs;
pub mod png;
pub mod rng;

pub use rng::Rng;
