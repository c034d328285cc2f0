//! The sweep as it is recorded on disk: `DIR/sweep.json` ([`Manifest`]), with
//! its grid axes ([`Axis`], [`Level`]) and planned runs ([`PlannedRun`]).
//! [`super::plan`] makes it and [`super::write_manifest`] writes it;
//! [`crate::report`] reads it to order a sweep's runs and name their cells,
//! without depending on the code that runs sweeps.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::parse_override;
use crate::{Error, Result};

/// One grid axis: a name and its levels. `--grid key=v1,v2` gives the axis
/// `key` with levels `v1` (override `key=v1`) and `v2`; a level may also set
/// several keys at once (e.g. the stabiliser axis of `vitlab stability`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    /// A config key, or any name for a bundle axis (`stabilizer`).
    pub name: String,
    pub levels: Vec<Level>,
}

/// One value of an axis: its label in cell names and the overrides it applies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub label: String,
    pub overrides: Vec<String>,
}

impl Axis {
    /// Parses `key=v1,v2,...`. Commas inside brackets or quotes do not split,
    /// so TOML arrays work: `optim.betas=[0.9,0.95],[0.9,0.999]`.
    pub fn parse(s: &str) -> Result<Axis> {
        let (key, values) = parse_override(s)
            .map_err(|_| Error::config(s, "a grid axis must look like key=v1,v2 (e.g. model.block=vit,vit22b)"))?;
        let values = split_values(&values);
        if key.is_empty() || values.is_empty() || values.iter().any(String::is_empty) {
            return Err(Error::config(s, "a grid axis needs a key and at least one non-empty value"));
        }
        Ok(Axis::values(&key, &values))
    }

    /// The axis `key` over `values` (one override `key=value` per level).
    pub fn values(key: &str, values: &[String]) -> Axis {
        Axis {
            name: key.to_string(),
            levels: values.iter().map(|v| Level { label: v.clone(), overrides: vec![format!("{key}={v}")] }).collect(),
        }
    }

    /// An axis whose levels are named bundles of overrides.
    pub fn bundles(name: &str, levels: &[(&str, &[&str])]) -> Axis {
        Axis {
            name: name.to_string(),
            levels: levels
                .iter()
                .map(|(label, o)| Level { label: label.to_string(), overrides: o.iter().map(|s| s.to_string()).collect() })
                .collect(),
        }
    }
}

fn split_values(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    for c in s.chars() {
        match (c, quote) {
            ('"' | '\'', None) => quote = Some(c),
            (q, Some(open)) if q == open => quote = None,
            ('[' | '{', None) => depth += 1,
            (']' | '}', None) => depth -= 1,
            (',', None) if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur.trim().to_string());
    out
}

/// One planned run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedRun {
    /// Run directory relative to the sweep directory, e.g. `block=vit22b/seed=1`.
    pub dir: String,
    /// The cell's name, e.g. `block=vit22b`.
    pub cell: String,
    /// The cell's overrides, e.g. `["model.block=vit22b"]`.
    pub cell_overrides: Vec<String>,
    pub seed: u64,
}

/// `DIR/sweep.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    /// The base config file as given, and its text when the sweep was planned.
    pub config: Option<String>,
    pub config_text: Option<String>,
    pub overrides: Vec<String>,
    pub grid: Vec<Axis>,
    pub seeds: Vec<u64>,
    /// The command line that planned the sweep (informational).
    #[serde(default)]
    pub command: Vec<String>,
    pub runs: Vec<PlannedRun>,
}

impl Manifest {
    pub const FILE: &'static str = "sweep.json";

    /// Reads `dir/sweep.json` if there is one.
    pub fn read(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(Self::FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text = fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        serde_json::from_str(&text).map(Some).map_err(|e| Error::data(&path, format!("not a vitlab sweep manifest: {e}")))
    }
}
