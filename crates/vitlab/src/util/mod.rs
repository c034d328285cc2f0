//! Helpers used everywhere, below every other module: the seeded generator
//! ([`Rng`]), crash-safe file writes ([`fs::atomic_write`]), PNG encoding
//! ([`png`]), HTML escaping ([`html`]) and the parameter path of module visitors
//! ([`ParamPath`]).

pub mod fs;
pub mod html;
pub(crate) mod param_path;
pub(crate) mod png;
pub(crate) mod rng;

pub use param_path::ParamPath;
pub use rng::Rng;
