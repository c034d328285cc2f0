//! The flat `key = value` view of a config: `--set` overrides applied to the
//! TOML table, and the dotted leaf keys by which reports group runs into cells
//! and sweeps compare a run's saved config.

use std::collections::BTreeMap;

use super::ExperimentConfig;
use crate::{Error, Result};

/// Parses `value` as a TOML value (number, bool, array, quoted string), or a bare string.
fn parse_value(value: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        Err(_) => toml::Value::String(value.to_string()),
    }
}

/// Sets `a.b.c = value` in a TOML table, creating tables on the way.
pub fn set_key(table: &mut toml::Table, key: &str, value: &str) -> Result<()> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(Error::config(key, "not a valid key (expected e.g. optim.lr)"));
    }
    let mut t = table;
    for p in &parts[..parts.len() - 1] {
        let entry = t.entry(p.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = entry.as_table_mut().ok_or_else(|| Error::config(key, format!("{p} is a value, not a section")))?;
    }
    t.insert(parts[parts.len() - 1].to_string(), parse_value(value));
    Ok(())
}

/// Splits a `key=value` override.
pub fn parse_override(s: &str) -> Result<(String, String)> {
    let (k, v) = s.split_once('=').ok_or_else(|| Error::config(s, "an override must look like key=value, e.g. optim.lr=3e-4"))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

/// Leaf keys of a TOML table, dotted, with values as text (strings unquoted).
pub fn flatten(table: &toml::Table) -> BTreeMap<String, String> {
    fn walk(prefix: &str, t: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (k, v) in t {
            let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            match v {
                toml::Value::Table(inner) => walk(&key, inner, out),
                toml::Value::String(s) => {
                    out.insert(key, s.clone());
                }
                other => {
                    out.insert(key, other.to_string());
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", table, &mut out);
    out
}

/// Leaf keys of a resolved config, as [`flatten`] gives them: the flat view by
/// which reports group runs into cells and sweeps compare a run's saved config.
pub fn flatten_config(config: &ExperimentConfig) -> BTreeMap<String, String> {
    let table: toml::Table = toml::from_str(&config.to_toml()).expect("config round-trips");
    flatten(&table)
}

/// Short display names of config keys: the last segment (`model.block` -> `block`),
/// or the full key where two keys share a last segment.
pub fn short_names(keys: &[String]) -> Vec<String> {
    let last = |k: &str| k.rsplit('.').next().unwrap_or(k).to_string();
    keys.iter()
        .map(|k| {
            let l = last(k);
            if keys.iter().filter(|o| last(o) == l).count() > 1 {
                k.clone()
            } else {
                l
            }
        })
        .collect()
}
