//! One error type for the library: every message names what was wrong and where.

use std::path::PathBuf;

/// Errors returned by vitlab's library APIs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is invalid; `field` names the config key.
    #[error("invalid config: {field}: {message}")]
    Config { field: String, message: String },

    /// A weight file does not fit the model.
    #[error("{path}: {message}")]
    Weights { path: PathBuf, message: String },

    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A dataset, archive, cache or download is unreadable or inconsistent;
    /// `path` names the file (or folder) and `message` the problem.
    #[error("{path}: {message}")]
    Data { path: PathBuf, message: String },

    /// A metric cannot be computed from what it was given (`what` names the metric
    /// and the data set, e.g. "FID of real test A").
    #[error("{what}: {message}")]
    Metric { what: String, message: String },

    /// A backend was asked for that this binary was not built with, or failed to start.
    #[error("backend {name}: {message}")]
    Backend { name: String, message: String },

    /// A command-line option's value cannot be used (`option` names the flag,
    /// e.g. `--split`); the CLI exits with 2, as for clap's own usage errors.
    #[error("{option}: {message}")]
    Usage { option: String, message: String },

    /// A command ran but did not do everything it was asked (e.g. some runs of a
    /// sweep failed); `what` names the command or stage.
    #[error("{what}: {message}")]
    Run { what: String, message: String },

    /// A data-parallel collective failed: a peer did not answer in time, the
    /// replicas diverged, or the transport (MPI) reported an error.
    #[error("data-parallel training: {0}")]
    Distributed(String),
}

impl Error {
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Config { field: field.into(), message: message.into() }
    }

    pub fn weights(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Weights { path: path.into(), message: message.into() }
    }

    pub fn data(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Data { path: path.into(), message: message.into() }
    }

    pub fn usage(option: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Usage { option: option.into(), message: message.into() }
    }

    pub fn run(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Run { what: what.into(), message: message.into() }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
