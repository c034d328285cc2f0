//! Cells and baselines, for every report alike: the config keys that differ
//! between runs (the seed aside; grid keys first in grid order, then
//! alphabetically) and their short display names, runs grouped into cells
//! (runs sharing every value but the seed) with labels (the sweep's own cell
//! names when they name the cells exactly), the baseline (`--baseline`, checked
//! against the cells, or `model.block=vit` by default when such a cell exists),
//! each cell's baseline cell, and the statistics the cells compare with
//! ([`MeanStd`], [`welch`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;

use crate::config::flatten;
use crate::stats::{mean, std_dev, welch_t_test, TTest};
use crate::{Error, Result};

/// What grouping needs of a run, whatever its task.
pub trait Member {
    /// Leaf keys of the run's resolved config (`optim.lr` -> `0.001`).
    fn flat(&self) -> &BTreeMap<String, String>;
    /// The config keys its sweep's grid sets, in grid order.
    fn grid_keys(&self) -> &[String];
    /// Its cell name in its sweep's manifest.
    fn sweep_cell(&self) -> Option<&str>;
}

impl Member for super::RunRecord {
    fn flat(&self) -> &BTreeMap<String, String> {
        &self.flat
    }
    fn grid_keys(&self) -> &[String] {
        &self.grid_keys
    }
    fn sweep_cell(&self) -> Option<&str> {
        self.sweep_cell.as_deref()
    }
}

/// One cell: its label, its values of the differing keys, and its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// e.g. `block=vit22b, lr=0.001`, or the sweep's cell name.
    pub label: String,
    /// The differing keys and this cell's values (`-` where a run lacks the key).
    pub values: BTreeMap<String, String>,
    /// Indices of the cell's runs, in run order.
    pub runs: Vec<usize>,
}

/// Runs grouped into cells.
#[derive(Clone, Debug)]
pub struct Grouping {
    /// The keys that differ between runs, in display order.
    pub keys: Vec<String>,
    /// Short display names of `keys`.
    pub short: Vec<String>,
    /// In order of their first run.
    pub cells: Vec<Group>,
}

/// The config keys whose values differ between runs (the seed aside): grid keys
/// first, in grid order, then the rest alphabetically.
pub fn differing_keys<R: Member>(runs: &[R]) -> Vec<String> {
    let Some(first) = runs.first() else { return Vec::new() };
    let all: BTreeSet<&String> = runs.iter().flat_map(|r| r.flat().keys()).collect();
    let mut keys: Vec<String> = all
        .into_iter()
        .filter(|k| *k != "seed" && runs.iter().any(|r| r.flat().get(*k) != first.flat().get(*k)))
        .cloned()
        .collect();
    let grid: Vec<&String> = runs.iter().flat_map(|r| r.grid_keys()).collect();
    keys.sort_by_key(|k| (grid.iter().position(|g| *g == k).unwrap_or(usize::MAX), k.clone()));
    keys
}

/// Groups runs into cells by their values of the differing keys.
pub fn group<R: Member>(runs: &[R]) -> Grouping {
    let keys = differing_keys(runs);
    let short = crate::config::short_names(&keys);
    let mut cells: Vec<Group> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let values: BTreeMap<String, String> =
            keys.iter().map(|k| (k.clone(), r.flat().get(k).cloned().unwrap_or_else(|| "-".into()))).collect();
        match cells.iter_mut().find(|c| c.values == values) {
            Some(c) => c.runs.push(i),
            None => {
                let label = if keys.is_empty() {
                    "all runs".to_string()
                } else {
                    keys.iter().zip(&short).map(|(k, s)| format!("{s}={}", values[k])).collect::<Vec<_>>().join(", ")
                };
                cells.push(Group { label, values, runs: vec![i] })
            }
        }
    }
    use_sweep_names(runs, &mut cells);
    Grouping { keys, short, cells }
}

/// Runs of one sweep keep the sweep's cell names (e.g. `stabilizer=clip`) when
/// those name exactly the cells found from the configs.
fn use_sweep_names<R: Member>(runs: &[R], cells: &mut [Group]) {
    let names: Vec<Option<&str>> = cells
        .iter()
        .map(|c| {
            let first = runs[c.runs[0]].sweep_cell()?;
            c.runs.iter().all(|&i| runs[i].sweep_cell() == Some(first)).then_some(first)
        })
        .collect();
    let distinct: HashSet<&str> = names.iter().flatten().copied().collect();
    if cells.len() > 1 && names.iter().all(Option::is_some) && distinct.len() == cells.len() {
        for (c, n) in cells.iter_mut().zip(names) {
            c.label = n.expect("checked").to_string();
        }
    }
}

/// Parses `key=value[,key=value]` into normalised (key, text) pairs, the values
/// formatted as [`flatten`] does (so `1e-3` matches a config's `0.001`).
pub fn parse_baseline(spec: &str) -> Result<Vec<(String, String)>> {
    let mut table = toml::Table::new();
    let mut keys = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = crate::config::parse_override(part)?;
        crate::config::set_key(&mut table, &k, &v)?;
        keys.push(k);
    }
    let flat = flatten(&table);
    Ok(keys.into_iter().map(|k| (k.clone(), flat.get(&k).cloned().unwrap_or_default())).collect())
}

/// Config values as text are equal, or equal as numbers (`1` and `1.0`, `1e-3` and `0.001`).
pub(crate) fn same_value(a: &str, b: &str) -> bool {
    a == b || matches!((a.parse::<f64>(), b.parse::<f64>()), (Ok(x), Ok(y)) if x == y)
}

/// The baseline the cells compare with (empty: none). Given: every key must
/// differ between the runs and some cell must have the values, else an error
/// naming the keys or the cells (it would compare nothing while looking like it
/// did). Not given: `model.block=vit` when the block differs and a `vit` cell exists.
pub fn resolve_baseline(given: Option<Vec<(String, String)>>, keys: &[String], cells: &[Group]) -> Result<Vec<(String, String)>> {
    let Some(base) = given else {
        let vit = keys.iter().any(|k| k == "model.block")
            && cells.iter().any(|c| c.values.get("model.block").map(String::as_str) == Some("vit"));
        return Ok(if vit { vec![("model.block".to_string(), "vit".to_string())] } else { Vec::new() });
    };
    for (k, _) in &base {
        if !keys.contains(k) {
            return Err(Error::config(
                "--baseline",
                format!(
                    "`{k}` has the same value in every run, so it picks no baseline cell; the runs differ in {}",
                    if keys.is_empty() { "nothing but the seed".to_string() } else { keys.join(", ") }
                ),
            ));
        }
    }
    if !cells.iter().any(|c| base.iter().all(|(k, v)| same_value(&c.values[k], v))) {
        return Err(Error::config(
            "--baseline",
            format!(
                "no cell has {}; the cells are: {}",
                base.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "),
                cells.iter().map(|c| c.label.as_str()).collect::<Vec<_>>().join("; ")
            ),
        ));
    }
    Ok(base)
}

/// Each cell's baseline cell (an index into `cells`; a baseline cell is its own):
/// the cell with the baseline's values (compared as numbers too) and this cell's
/// other values. `None` for every cell when there is no baseline.
pub fn baseline_cells(cells: &[Group], base: &[(String, String)]) -> Vec<Option<usize>> {
    cells
        .iter()
        .map(|c| {
            if base.is_empty() {
                return None;
            }
            cells.iter().position(|o| {
                o.values.iter().all(|(k, ov)| match base.iter().find(|(bk, _)| bk == k) {
                    Some((_, bv)) => same_value(ov, bv),
                    None => c.values.get(k) == Some(ov),
                })
            })
        })
        .collect()
}

/// Mean, unbiased std and count of a metric over a cell's runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MeanStd {
    pub n: usize,
    pub mean: f64,
    pub std: f64,
}

impl MeanStd {
    /// Over the finite values (a diverged run's NaN AUROC does not make the mean NaN);
    /// `n` counts the values used.
    pub(crate) fn of(values: &[f64]) -> Option<MeanStd> {
        let values: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        (!values.is_empty()).then(|| MeanStd { n: values.len(), mean: mean(&values), std: std_dev(&values) })
    }
}

/// Welch's two-sided t-test of a cell's values against its baseline cell's, over
/// the finite values (those [`MeanStd`] counts); `None` below two on either side.
pub fn welch(values: &[f64], baseline: &[f64]) -> Option<TTest> {
    let finite = |v: &[f64]| v.iter().copied().filter(|v| v.is_finite()).collect::<Vec<_>>();
    welch_t_test(&finite(values), &finite(baseline))
}

/// A warning for each cell that has a seed more than once: the same run reached
/// through two folders, or two runs that differ in a setting the report does not
/// see. Either inflates n.
pub fn repeated_seed_notes<'a>(cells: impl Iterator<Item = (&'a str, &'a [u64])>) -> Vec<String> {
    let mut notes = Vec::new();
    for (label, seeds) in cells {
        let mut seen = BTreeSet::new();
        let twice: BTreeSet<u64> = seeds.iter().filter(|s| !seen.insert(**s)).copied().collect();
        if !twice.is_empty() {
            notes.push(format!(
                "**Warning:** cell {label} has seed {} more than once (the same run given twice?); its n counts each.",
                twice.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R(BTreeMap<String, String>, Vec<String>, Option<String>);

    impl Member for R {
        fn flat(&self) -> &BTreeMap<String, String> {
            &self.0
        }
        fn grid_keys(&self) -> &[String] {
            &self.1
        }
        fn sweep_cell(&self) -> Option<&str> {
            self.2.as_deref()
        }
    }

    fn run(values: &[(&str, &str)], grid: &[&str], cell: Option<&str>) -> R {
        R(
            values.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            grid.iter().map(|s| s.to_string()).collect(),
            cell.map(str::to_string),
        )
    }

    #[test]
    fn keys_put_the_grid_first_and_cells_take_the_sweep_names_only_when_they_name_every_cell() {
        let grid = ["optim.lr"];
        let runs = [
            run(&[("model.block", "vit"), ("optim.lr", "0.001"), ("seed", "0")], &grid, Some("lr=1e-3")),
            run(&[("model.block", "vit"), ("optim.lr", "0.01"), ("seed", "0")], &grid, Some("lr=1e-2")),
            run(&[("model.block", "vit22b"), ("optim.lr", "0.001"), ("seed", "1")], &grid, Some("lr=1e-3")),
        ];
        let g = group(&runs);
        assert_eq!(g.keys, ["optim.lr", "model.block"]);
        assert_eq!(g.short, ["lr", "block"]);
        // two cells would share the sweep name `lr=1e-3`: config-derived labels
        let labels: Vec<&str> = g.cells.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels, ["lr=0.001, block=vit", "lr=0.01, block=vit", "lr=0.001, block=vit22b"]);
        assert_eq!(g.cells[0].runs, [0]);
        // the default baseline: block=vit at the same learning rate (number-equal values match)
        let base = resolve_baseline(None, &g.keys, &g.cells).unwrap();
        assert_eq!(base, [("model.block".to_string(), "vit".to_string())]);
        assert_eq!(baseline_cells(&g.cells, &base), [Some(0), Some(1), Some(0)]);
        let e = resolve_baseline(Some(vec![("optim.lr".into(), "1".into())]), &g.keys, &g.cells).unwrap_err();
        assert!(e.to_string().contains("no cell has optim.lr=1") && e.to_string().contains("lr=0.01, block=vit"), "{e}");
    }
}
