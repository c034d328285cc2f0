//! Checkpoints: one safetensors file holding the model (`model.<key>`), the
//! optimiser state (`optim.<...>`), and in its metadata the loop state, the
//! experiment config and the task's own metadata. Written atomically (temp
//! file + rename), so a run killed mid-write leaves the previous checkpoint.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::LoopState;
use crate::config::ExperimentConfig;
use crate::tensor_file::{read_safetensors, write_safetensors, TensorMap};
use crate::{Error, Result};

pub const FORMAT: &str = "vitlab-checkpoint";
pub const VERSION: &str = "1";

#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub tensors: TensorMap,
    pub state: LoopState,
    pub config: ExperimentConfig,
    /// Task metadata (e.g. `model_config`, `classes`), JSON strings.
    pub metadata: HashMap<String, String>,
}

impl Checkpoint {
    pub fn save(&self) -> Result<()> {
        let mut meta = self.metadata.clone();
        meta.insert("format".into(), FORMAT.into());
        meta.insert("version".into(), VERSION.into());
        meta.insert("state".into(), serde_json::to_string(&self.state).expect("state serialises"));
        meta.insert("config".into(), self.config.to_toml());
        write_safetensors(&self.path, &self.tensors, meta)
    }

    pub fn load(path: &Path) -> Result<Checkpoint> {
        let (tensors, mut meta) = read_safetensors(path)?;
        let bad = |m: String| Error::weights(path, m);
        match meta.remove("format").as_deref() {
            Some(FORMAT) => {}
            _ => {
                return Err(bad(
                    "not a vitlab checkpoint (no format=vitlab-checkpoint metadata); to use plain weights, load them as a model"
                        .into(),
                ))
            }
        }
        let version = meta.remove("version").unwrap_or_default();
        if version != VERSION {
            return Err(bad(format!("checkpoint version {version:?}; this vitlab reads version {VERSION}")));
        }
        let state = meta.remove("state").ok_or_else(|| bad("missing state metadata".into()))?;
        let state: LoopState = serde_json::from_str(&state).map_err(|e| bad(format!("state metadata: {e}")))?;
        let config = meta.remove("config").ok_or_else(|| bad("missing config metadata".into()))?;
        let table: toml::Table = toml::from_str(&config).map_err(|e| bad(format!("config metadata: {e}")))?;
        let config = ExperimentConfig::from_table(table, &path.display().to_string())?;
        Ok(Checkpoint { path: path.to_path_buf(), tensors, state, config, metadata: meta })
    }

    /// Tensors under `prefix.` with the prefix removed.
    pub fn group(&self, prefix: &str) -> TensorMap {
        crate::tensor_file::group(&self.tensors, prefix)
    }
}
