//! Reports over runs: the per-cell accuracy table with seeds (mean ± std, Welch
//! t-test against a baseline cell, parameter counts: the paper's Table 1 and
//! Figure 2 as numbers), the stability table (explosions over seeds, percentiles
//! of the per-step monitors: Figure 1 as numbers), and figures (PNG and SVG).
//!
//! [`load_runs`] walks folders for run directories (a `config.toml` beside a
//! `results.json`, an `error.txt` or a checkpoint); [`Report::build`] groups
//! them into cells by the config keys that differ between runs (the seed
//! aside); [`Report::write`] writes `report.md`, `report.html` (the same
//! content), `report.json` (the numbers) and `figures/`.

pub mod cyclegan;
pub mod plot;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{flatten, flatten_config, ExperimentConfig};
use crate::stats::{mean, median, percentile, std_dev, welch_t_test};
use crate::sweep::manifest::Manifest;
use crate::train::classify::Results;
use crate::train::{ExitCause, RunDir};
use crate::util::fs::atomic_write;
use crate::{Error, Result};

/// One row of `steps.csv` (the per-step monitors).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepRow {
    pub step: u64,
    pub loss: f64,
    pub max_logit: f64,
    pub max_grad: f64,
}

/// The per-block monitors of one logged step (`blocks.csv`), reduced over blocks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockStep {
    pub step: u64,
    /// RMS of the last block's output tokens (the residual stream at the top).
    pub top_rms: f64,
    /// The largest attention logit (after scaling) over all blocks.
    pub max_attn_logit: f64,
}

/// One row of `metrics.csv`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochRow {
    pub epoch: usize,
    pub train_loss: f64,
    pub train_acc: f64,
    pub val_loss: f64,
    pub val_acc: f64,
}

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Finished,
    Failed,
    Unfinished,
}

/// Everything the report uses from one run directory.
#[derive(Clone, Debug)]
pub struct RunRecord {
    pub dir: PathBuf,
    /// The directory as shown in the report (relative to the folder given).
    pub name: String,
    pub config: ExperimentConfig,
    /// Leaf keys of the resolved config (`optim.lr` -> `0.001`).
    pub flat: BTreeMap<String, String>,
    pub status: RunStatus,
    pub results: Option<Results>,
    pub error: Option<String>,
    pub steps: Vec<StepRow>,
    /// Per-block monitors every `monitor.block_every` steps (empty if none were logged).
    pub blocks: Vec<BlockStep>,
    pub epochs: Vec<EpochRow>,
    /// The config keys a sweep grid sets, in grid order (for ordering cell keys).
    pub grid_keys: Vec<String>,
    /// The run's cell name in its sweep's manifest, if a sweep made it.
    pub sweep_cell: Option<String>,
}

fn parse_f64(s: &str) -> f64 {
    s.trim().parse().unwrap_or(f64::NAN)
}

/// Reads the named columns of a CSV file with a header as numbers (empty or
/// unparsable fields are NaN; a missing column is all NaN); no file, no rows.
fn read_columns(path: &Path, columns: &[&str]) -> Result<Vec<Vec<f64>>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Ok(Vec::new()) };
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let index: Vec<Option<usize>> = columns.iter().map(|c| names.iter().position(|n| n == c)).collect();
    let mut rows = Vec::new();
    let mut fields = Vec::with_capacity(names.len());
    for line in lines.filter(|l| !l.trim().is_empty()) {
        fields.clear();
        fields.extend(line.split(','));
        rows.push(index.iter().map(|i| i.and_then(|i| fields.get(i)).map_or(f64::NAN, |v| parse_f64(v))).collect());
    }
    Ok(rows)
}

pub fn read_steps(run: &RunDir) -> Result<Vec<StepRow>> {
    Ok(read_columns(&run.steps(), &["step", "loss", "max_logit", "max_grad"])?
        .into_iter()
        .filter(|r| r[0].is_finite())
        .map(|r| StepRow { step: r[0] as u64, loss: r[1], max_logit: r[2], max_grad: r[3] })
        .collect())
}

/// `blocks.csv` reduced per logged step: the last block's output RMS and the
/// largest attention logit over the blocks.
pub fn read_blocks(run: &RunDir) -> Result<Vec<BlockStep>> {
    let rows = read_columns(&run.blocks(), &["step", "block", "act_rms", "max_attn_logit"])?;
    let mut out: Vec<(BlockStep, f64)> = Vec::new(); // (reduced, index of the block giving top_rms)
    for r in rows.into_iter().filter(|r| r[0].is_finite() && r[1].is_finite()) {
        let (step, block) = (r[0] as u64, r[1]);
        match out.last_mut() {
            Some((b, top)) if b.step == step => {
                if block > *top {
                    (b.top_rms, *top) = (r[2], block);
                }
                if r[3] > b.max_attn_logit || b.max_attn_logit.is_nan() {
                    b.max_attn_logit = r[3];
                }
            }
            _ => out.push((BlockStep { step, top_rms: r[2], max_attn_logit: r[3] }, block)),
        }
    }
    Ok(out.into_iter().map(|(b, _)| b).collect())
}

pub fn read_epochs(run: &RunDir) -> Result<Vec<EpochRow>> {
    Ok(read_columns(&run.metrics(), &["epoch", "train_loss", "train_acc", "val_loss", "val_acc"])?
        .into_iter()
        .filter(|r| r[0].is_finite())
        .map(|r| EpochRow { epoch: r[0] as usize, train_loss: r[1], train_acc: r[2], val_loss: r[3], val_acc: r[4] })
        .collect())
}

/// Whether `run` is a run directory: a config and something a run leaves behind
/// (results, an error, a checkpoint, or steps.csv: a run that started but has no
/// checkpoint yet is an unfinished run).
pub(crate) fn is_run(run: &RunDir) -> bool {
    run.config().exists() && (run.results().exists() || run.error().exists() || run.latest().exists() || run.steps().exists())
}

/// Loads one run directory (`None` if it is not one).
pub fn load_run(dir: &Path, name: String) -> Result<Option<RunRecord>> {
    let run = RunDir::new(dir);
    if !is_run(&run) {
        return Ok(None);
    }
    let config = ExperimentConfig::load(Some(&run.config()), &[])?;
    if config.task == crate::config::TaskKind::Cyclegan {
        return Err(Error::data(
            dir,
            "a CycleGAN run: vitlab report reads classification runs only so far \
             (a CycleGAN run's FID_A / FID_B are in its metrics.csv and results.json)",
        ));
    }
    let results: Option<Results> = if run.results().exists() {
        let text = fs::read_to_string(run.results()).map_err(|e| Error::io(run.results(), e))?;
        Some(serde_json::from_str(&text).map_err(|e| Error::data(run.results(), format!("unreadable results: {e}")))?)
    } else {
        None
    };
    let error = if results.is_none() { fs::read_to_string(run.error()).ok().map(|s| s.trim().to_string()) } else { None };
    let status = match (&results, &error) {
        (Some(_), _) => RunStatus::Finished,
        (None, Some(_)) => RunStatus::Failed,
        (None, None) => RunStatus::Unfinished,
    };
    Ok(Some(RunRecord {
        dir: dir.to_path_buf(),
        name,
        flat: flatten_config(&config),
        config,
        status,
        results,
        error,
        steps: read_steps(&run)?,
        blocks: read_blocks(&run)?,
        epochs: read_epochs(&run)?,
        grid_keys: Vec::new(),
        sweep_cell: None,
    }))
}

/// Whether a classification run lies under `roots` (CycleGAN runs have their own report).
pub fn has_classification_runs(roots: &[PathBuf]) -> Result<bool> {
    for root in roots {
        let mut dirs = Vec::new();
        collect_dirs(root, &mut dirs)?;
        if dirs.iter().any(|d| is_run(&RunDir::new(d)) && !cyclegan::is_cyclegan_run(d)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every run under the given folders (each may itself be a run directory).
/// Runs of a sweep come in the order of its `sweep.json`; others by path.
pub fn load_runs(roots: &[PathBuf]) -> Result<Vec<RunRecord>> {
    let mut out = Vec::new();
    for root in roots {
        if !root.is_dir() {
            return Err(Error::data(root, "not a folder"));
        }
        let mut dirs = Vec::new();
        collect_dirs(root, &mut dirs)?;
        dirs.sort();
        // Sweep order first where a manifest lists the run.
        let mut order: HashMap<PathBuf, (usize, Vec<String>, Option<String>)> = HashMap::new();
        for d in &dirs {
            if let Some(m) = Manifest::read(d)? {
                let mut keys: Vec<String> = Vec::new();
                for o in m.grid.iter().flat_map(|a| a.levels.iter().flat_map(|l| &l.overrides)) {
                    let k = o.split('=').next().unwrap_or("").trim().to_string();
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
                for (i, r) in m.runs.iter().enumerate() {
                    order.insert(d.join(&r.dir), (i, keys.clone(), Some(r.cell.clone())));
                }
            }
        }
        let mut found = Vec::new();
        for d in dirs {
            let name = d
                .strip_prefix(root)
                .ok()
                .filter(|p| !p.as_os_str().is_empty())
                .map(|p| format!("{}/{}", root.display(), p.display()))
                .unwrap_or_else(|| root.display().to_string());
            if let Some(mut r) = load_run(&d, name)? {
                let (pos, keys, cell) = order.get(&d).cloned().unwrap_or((usize::MAX, Vec::new(), None));
                r.grid_keys = keys;
                r.sweep_cell = cell;
                found.push((pos, r));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.dir.cmp(&b.1.dir)));
        out.extend(found.into_iter().map(|(_, r)| r));
    }
    Ok(out)
}

/// The runs a sweep under `roots` planned (its `sweep.json`) that have not
/// started yet, as `ROOT/DIR`.
pub fn not_started(roots: &[PathBuf]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for root in roots {
        let mut dirs = Vec::new();
        collect_dirs(root, &mut dirs)?;
        for d in dirs {
            if let Some(m) = Manifest::read(&d)? {
                for r in &m.runs {
                    if !is_run(&RunDir::new(d.join(&r.dir))) {
                        out.push(d.join(&r.dir).display().to_string());
                    }
                }
            }
        }
    }
    Ok(out)
}

pub(crate) fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    out.push(dir.to_path_buf());
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for e in entries {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let p = e.path();
        if p.is_dir() && e.file_name() != "checkpoints" && !e.file_name().to_string_lossy().starts_with('.') {
            collect_dirs(&p, out)?;
        }
    }
    Ok(())
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

/// p50 / p95 / max of a monitor over every step of every run of a cell (finite values).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Spread> {
        (!values.is_empty()).then(|| Spread {
            p50: percentile(values, 50.0),
            p95: percentile(values, 95.0),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// A cell: the runs sharing every config value but the seed.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// e.g. `block=vit22b, lr=0.001`.
    pub label: String,
    /// The differing keys and this cell's values.
    pub values: BTreeMap<String, String>,
    /// Indices into [`Report::runs`].
    #[serde(skip)]
    pub runs: Vec<usize>,
    pub seeds: Vec<u64>,
    pub finished: usize,
    pub failed: usize,
    pub unfinished: usize,
    pub top1: Option<MeanStd>,
    pub top5: Option<MeanStd>,
    pub auroc: Option<MeanStd>,
    /// The label of the baseline cell the p-value compares with.
    pub baseline: Option<String>,
    /// Welch's t-test of top-1 against the baseline cell: (t, df, p).
    pub t_test: Option<(f64, f64, f64)>,
    pub params: Option<usize>,
    pub epochs: Option<f64>,
    pub steps: Option<f64>,
    pub wall_time_s: Option<f64>,
    pub exploded: usize,
    pub explosion_steps: Vec<u64>,
    pub max_logit: Option<Spread>,
    pub max_grad: Option<Spread>,
    pub logit_threshold: f64,
    pub grad_threshold: f64,
}

/// The grouped runs and every number the report shows.
#[derive(Clone, Debug)]
pub struct Report {
    pub title: String,
    pub runs: Vec<RunRecord>,
    pub cells: Vec<Cell>,
    /// The keys that differ between cells, in display order.
    pub keys: Vec<String>,
    /// Short display names of `keys`.
    pub short: Vec<String>,
    /// The baseline as given (`model.block=vit`), if any.
    pub baseline: Vec<(String, String)>,
    /// Extra lines for the header (e.g. the command that made the report).
    pub notes: Vec<String>,
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

pub(crate) fn short_names(keys: &[String]) -> Vec<String> {
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

impl Report {
    /// Groups `runs` into cells and computes every number. `baseline`: the cell
    /// values to compare against (see [`parse_baseline`]); `None` picks
    /// `model.block=vit` when the block differs between cells and a `vit` cell exists.
    /// A baseline whose keys do not differ between the cells, or that no cell
    /// has, is an error (it would compare nothing while looking like it did).
    pub fn build(title: &str, runs: Vec<RunRecord>, baseline: Option<Vec<(String, String)>>) -> Result<Report> {
        // Keys whose values differ between runs (the seed aside).
        let mut keys: Vec<String> = Vec::new();
        if let Some(first) = runs.first() {
            let all: std::collections::BTreeSet<&String> = runs.iter().flat_map(|r| r.flat.keys()).collect();
            for k in all {
                if k == "seed" {
                    continue;
                }
                let v0 = first.flat.get(k);
                if runs.iter().any(|r| r.flat.get(k) != v0) {
                    keys.push(k.clone());
                }
            }
        }
        // Grid keys first, in grid order, then the rest alphabetically.
        let grid: Vec<String> = runs.iter().flat_map(|r| r.grid_keys.clone()).collect();
        keys.sort_by_key(|k| (grid.iter().position(|g| g == k).unwrap_or(usize::MAX), k.clone()));
        let short = short_names(&keys);

        let mut cells: Vec<Cell> = Vec::new();
        for (i, r) in runs.iter().enumerate() {
            let values: BTreeMap<String, String> =
                keys.iter().map(|k| (k.clone(), r.flat.get(k).cloned().unwrap_or_else(|| "-".into()))).collect();
            match cells.iter_mut().find(|c| c.values == values) {
                Some(c) => c.runs.push(i),
                None => {
                    let label = if keys.is_empty() {
                        "all runs".to_string()
                    } else {
                        keys.iter().zip(&short).map(|(k, s)| format!("{s}={}", values[k])).collect::<Vec<_>>().join(", ")
                    };
                    cells.push(Cell {
                        label,
                        values,
                        runs: vec![i],
                        seeds: vec![],
                        finished: 0,
                        failed: 0,
                        unfinished: 0,
                        top1: None,
                        top5: None,
                        auroc: None,
                        baseline: None,
                        t_test: None,
                        params: None,
                        epochs: None,
                        steps: None,
                        wall_time_s: None,
                        exploded: 0,
                        explosion_steps: vec![],
                        max_logit: None,
                        max_grad: None,
                        logit_threshold: r.config.monitor.max_logit,
                        grad_threshold: r.config.monitor.max_grad,
                    })
                }
            }
        }
        // Runs of one sweep keep the sweep's cell names (e.g. `stabilizer=clip`)
        // when those name exactly the cells found from the configs.
        let names: Vec<Option<&String>> = cells
            .iter()
            .map(|c| {
                let first = runs[c.runs[0]].sweep_cell.as_ref()?;
                c.runs.iter().all(|&i| runs[i].sweep_cell.as_ref() == Some(first)).then_some(first)
            })
            .collect();
        let distinct: std::collections::HashSet<&String> = names.iter().flatten().copied().collect();
        if cells.len() > 1 && names.iter().all(Option::is_some) && distinct.len() == cells.len() {
            for (c, n) in cells.iter_mut().zip(names) {
                c.label = n.expect("checked").clone();
            }
        }
        for c in &mut cells {
            let rs: Vec<&RunRecord> = c.runs.iter().map(|&i| &runs[i]).collect();
            c.seeds = rs.iter().map(|r| r.config.seed).collect();
            c.finished = rs.iter().filter(|r| r.status == RunStatus::Finished).count();
            c.failed = rs.iter().filter(|r| r.status == RunStatus::Failed).count();
            c.unfinished = rs.iter().filter(|r| r.status == RunStatus::Unfinished).count();
            let results: Vec<&Results> = rs.iter().filter_map(|r| r.results.as_ref()).collect();
            let tests: Vec<_> = results.iter().filter_map(|r| r.test.as_ref()).collect();
            c.top1 = MeanStd::of(&tests.iter().map(|t| t.top1).collect::<Vec<_>>());
            c.top5 = MeanStd::of(&tests.iter().map(|t| t.top5).collect::<Vec<_>>());
            c.auroc = MeanStd::of(&tests.iter().filter_map(|t| t.auroc).collect::<Vec<_>>());
            c.params = results.first().map(|r| r.params);
            let avg = |f: &dyn Fn(&Results) -> f64| {
                (!results.is_empty()).then(|| mean(&results.iter().map(|r| f(r)).collect::<Vec<_>>()))
            };
            c.epochs = avg(&|r| r.epochs as f64);
            c.steps = avg(&|r| r.steps as f64);
            c.wall_time_s = avg(&|r| r.wall_time_s);
            c.explosion_steps = results.iter().filter_map(|r| r.explosion.as_ref().map(|e| e.step)).collect();
            c.exploded = results.iter().filter(|r| r.exit_cause == ExitCause::Exploded).count();
            let finite = |f: fn(&StepRow) -> f64| -> Vec<f64> {
                rs.iter().flat_map(|r| r.steps.iter().map(f)).filter(|v| v.is_finite()).collect()
            };
            c.max_logit = Spread::of(&finite(|s| s.max_logit));
            c.max_grad = Spread::of(&finite(|s| s.max_grad));
        }
        if let Some(base) = &baseline {
            for (k, _) in base {
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
        }
        let baseline = baseline.or_else(|| {
            let default = vec![("model.block".to_string(), "vit".to_string())];
            (keys.iter().any(|k| k == "model.block")
                && cells.iter().any(|c| c.values.get("model.block").map(String::as_str) == Some("vit")))
            .then_some(default)
        });
        if let Some(base) = &baseline {
            let top1 = |c: &Cell| -> Vec<f64> {
                c.runs.iter().filter_map(|&i| runs[i].results.as_ref()?.test.as_ref().map(|t| t.top1)).collect()
            };
            let snapshot = cells.clone();
            for c in &mut cells {
                // the cell with the baseline's values and this cell's other values
                let is_target = |o: &&Cell| {
                    o.values.iter().all(|(k, ov)| match base.iter().find(|(bk, _)| bk == k) {
                        Some((_, bv)) => same_value(ov, bv),
                        None => c.values.get(k) == Some(ov),
                    })
                };
                let Some(b) = snapshot.iter().find(is_target) else { continue };
                c.baseline = Some(b.label.clone());
                if b.values != c.values {
                    c.t_test = welch_t_test(&top1(c), &top1(b)).map(|t| (t.t, t.df, t.p));
                }
            }
        }
        // The same seed twice in a cell: the same run reached through two folders, or
        // two runs that differ in a setting the report does not see. Either inflates n.
        let mut notes = Vec::new();
        for c in &cells {
            let mut seen = std::collections::BTreeSet::new();
            let twice: std::collections::BTreeSet<u64> = c.seeds.iter().filter(|s| !seen.insert(**s)).copied().collect();
            if !twice.is_empty() {
                notes.push(format!(
                    "**Warning:** cell {} has seed {} more than once (the same run given twice?); its n counts each.",
                    c.label,
                    twice.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Ok(Report { title: title.to_string(), runs, cells, keys, short, baseline: baseline.unwrap_or_default(), notes })
    }

    /// Writes report.md, report.html, report.json and figures/ into `out`.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>> {
        let figures_dir = out.join("figures");
        fs::create_dir_all(&figures_dir).map_err(|e| Error::io(&figures_dir, e))?;
        let mut written = Vec::new();
        let figures = plot::draw_all(self, &figures_dir)?;
        for f in &figures {
            written.push(figures_dir.join(format!("{}.png", f.name)));
            written.push(figures_dir.join(format!("{}.svg", f.name)));
        }
        let doc = self.document(&figures);
        for (name, text) in [("report.md", render_markdown(&doc)), ("report.html", render_html(&self.title, &doc))] {
            let path = out.join(name);
            atomic_write(&path, text.as_bytes())?;
            written.push(path);
        }
        let json = serde_json::to_string_pretty(&serde_json::json!({
            "title": self.title,
            "keys": self.keys,
            "baseline": self.baseline,
            "cells": self.cells,
            "runs": self.runs.iter().map(|r| serde_json::json!({
                "dir": r.name,
                "seed": r.config.seed,
                "status": r.status,
                "exit_cause": r.results.as_ref().map(|x| &x.exit_cause),
                "explosion": r.results.as_ref().and_then(|x| x.explosion.as_ref()),
                "test": r.results.as_ref().and_then(|x| x.test.as_ref()).map(|t| serde_json::json!({"top1": t.top1, "top5": t.top5, "auroc": t.auroc})),
                "error": r.error,
            })).collect::<Vec<_>>(),
        }))
        .expect("report serialises");
        let path = out.join("report.json");
        atomic_write(&path, json.as_bytes())?;
        written.push(path);
        Ok(written)
    }

    fn document(&self, figures: &[plot::Figure]) -> Vec<Block> {
        let mut doc = vec![Block::Heading(1, self.title.clone())];
        let finished = self.runs.iter().filter(|r| r.status == RunStatus::Finished).count();
        let mut intro = format!("{} runs ({} finished) in {} cells.", self.runs.len(), finished, self.cells.len());
        if !self.keys.is_empty() {
            intro.push_str(&format!(
                " Cells differ in {}; runs within a cell differ only in the seed.",
                self.keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        doc.push(Block::Para(intro));
        for n in &self.notes {
            doc.push(Block::Para(n.clone()));
        }
        let figure = |name: &str| figures.iter().find(|f| f.name == name);

        doc.push(Block::Heading(2, "Accuracy".into()));
        let base = if self.baseline.is_empty() {
            "no baseline cell chosen (`--baseline KEY=VALUE`)".to_string()
        } else {
            format!(
                "p: Welch's two-sided t-test of the test top-1 over seeds against the cell with {} (and the other values equal)",
                self.baseline.iter().map(|(k, v)| format!("`{k}={v}`")).collect::<Vec<_>>().join(", ")
            )
        };
        doc.push(Block::Para(format!(
            "Test metrics of each finished run (exploded runs included) on its best-validation checkpoint, or, for a run \
             stopped before its first validation, on its state when it stopped (column *tested* under Runs; an exploded run's \
             last state may already be diverged); mean ± unbiased std over seeds (n: runs with a finite value); {base}. \
             Epochs, steps and wall time are means over the cell's finished runs."
        )));
        let header = ["cell", "n", "top-1", "top-5", "AUROC", "p (top-1)", "params", "epochs", "steps", "wall time"];
        let rows = self
            .cells
            .iter()
            .map(|c| {
                vec![
                    c.label.clone(),
                    {
                        let mut n = c.top1.map_or(0, |m| m.n).to_string();
                        let others: Vec<String> = [(c.unfinished, "unfinished"), (c.failed, "failed")]
                            .iter()
                            .filter(|(k, _)| *k > 0)
                            .map(|(k, what)| format!("{k} {what}"))
                            .collect();
                        if !others.is_empty() {
                            n.push_str(&format!(" (+{})", others.join(", ")));
                        }
                        n
                    },
                    pm(c.top1),
                    pm(c.top5),
                    pm(c.auroc),
                    match (&c.baseline, c.t_test) {
                        (_, Some((_, _, p))) => p_value(p),
                        (Some(b), None) if *b == c.label => "baseline".into(),
                        _ => "n/a".into(),
                    },
                    c.params.map_or("-".into(), |p| format!("{:.2}M", p as f64 / 1e6)),
                    c.epochs.map_or("-".into(), |e| format!("{e:.1}")),
                    c.steps.map_or("-".into(), |s| format!("{s:.0}")),
                    c.wall_time_s.map_or("-".into(), duration),
                ]
            })
            .collect();
        doc.push(Block::Table { header: header.iter().map(|s| s.to_string()).collect(), rows });
        if let Some(f) = figure("accuracy") {
            doc.push(Block::Image { path: f.name.clone(), alt: f.caption.clone() });
        }

        doc.push(Block::Heading(2, "Stability".into()));
        doc.push(Block::Para(format!(
            "A run explodes when its loss or a gradient is not finite, or the max logit (largest classifier logit in the batch) or \
             the max |gradient| (over all parameters, before clipping) passes its threshold (`monitor.max_logit`, \
             `monitor.max_grad`; here {} and {}). The median explosion step is over the runs that exploded. Max logit and \
             max |grad|: percentiles over every step of every run of the cell, finished or not (steps.csv, finite values).",
            thresholds(self.cells.iter().map(|c| c.logit_threshold)),
            thresholds(self.cells.iter().map(|c| c.grad_threshold)),
        )));
        let header = [
            "cell",
            "exploded / finished runs",
            "median explosion step (exploded runs)",
            "explosion steps",
            "max logit p50 / p95 / max",
            "max |grad| p50 / p95 / max",
        ];
        let rows = self
            .cells
            .iter()
            .map(|c| {
                let steps: Vec<f64> = c.explosion_steps.iter().map(|&s| s as f64).collect();
                vec![
                    c.label.clone(),
                    format!("{} / {}", c.exploded, c.finished),
                    if steps.is_empty() { "-".into() } else { format!("{:.0}", median(&steps)) },
                    if steps.is_empty() {
                        "-".into()
                    } else {
                        c.explosion_steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
                    },
                    spread(c.max_logit),
                    spread(c.max_grad),
                ]
            })
            .collect();
        doc.push(Block::Table { header: header.iter().map(|s| s.to_string()).collect(), rows });
        if let Some(f) = figure("stability") {
            doc.push(Block::Image { path: f.name.clone(), alt: f.caption.clone() });
        }

        if let Some(f) = figure("blocks") {
            doc.push(Block::Para(
                "Inside the network (blocks.csv, every `monitor.block_every` steps): the RMS of the last block's output \
                 tokens, i.e. the size of the residual stream at the top, and the largest attention logit over all blocks \
                 (after scaling). They tell an explosion of the residual stream from one of the attention logits."
                    .into(),
            ));
            doc.push(Block::Image { path: f.name.clone(), alt: f.caption.clone() });
        }

        if let Some(f) = figure("curves") {
            doc.push(Block::Heading(2, "Training curves".into()));
            doc.push(Block::Image { path: f.name.clone(), alt: f.caption.clone() });
        }

        doc.push(Block::Heading(2, "Runs".into()));
        let header = ["run", "cell", "seed", "status", "epochs", "steps", "tested", "top-1", "explosion"];
        let rows = self
            .cells
            .iter()
            .flat_map(|c| c.runs.iter().map(move |&i| (c, i)))
            .map(|(c, i)| {
                let r = &self.runs[i];
                let res = r.results.as_ref();
                vec![
                    r.name.clone(),
                    c.label.clone(),
                    r.config.seed.to_string(),
                    match (r.status, res) {
                        (RunStatus::Finished, Some(x)) => serde_json::to_value(x.exit_cause)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        (RunStatus::Failed, _) => "failed".into(),
                        _ => "unfinished".into(),
                    },
                    res.map_or("-".into(), |x| x.epochs.to_string()),
                    res.map_or("-".into(), |x| x.steps.to_string()),
                    res.and_then(|x| x.test_checkpoint.as_deref()).map_or("-".into(), |t| match t {
                        "best" => "best checkpoint".to_string(),
                        "latest" => "last state".to_string(),
                        other => other.to_string(),
                    }),
                    res.and_then(|x| x.test.as_ref()).map_or("-".into(), |t| format!("{:.4}", t.top1)),
                    match (res.and_then(|x| x.explosion.as_ref()), &r.error) {
                        (Some(e), _) => format!("step {}: {}", e.step, e.cause),
                        (None, Some(err)) => format!("error: {}", err.lines().next().unwrap_or("")),
                        _ => "-".into(),
                    },
                ]
            })
            .collect();
        doc.push(Block::Table { header: header.iter().map(|s| s.to_string()).collect(), rows });
        doc
    }
}

fn pm(m: Option<MeanStd>) -> String {
    match m {
        None => "-".into(),
        Some(m) if m.n < 2 => format!("{:.4}", m.mean),
        Some(m) => format!("{:.4} ± {:.4}", m.mean, m.std),
    }
}

fn p_value(p: f64) -> String {
    if p.is_nan() {
        "n/a".into()
    } else if p < 1e-3 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// Three significant digits, scientific beyond 1e4.
pub fn sig(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e4).contains(&a) {
        format!("{v:.2e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A threshold for the text: `off` when 0, one value when every cell has it, else each.
fn thresholds(values: impl Iterator<Item = f64>) -> String {
    let mut distinct: Vec<f64> = Vec::new();
    for v in values {
        if !distinct.contains(&v) {
            distinct.push(v);
        }
    }
    let show = |v: f64| if v > 0.0 { sig(v) } else { "off".to_string() };
    match distinct.as_slice() {
        [] => "-".into(),
        [v] => show(*v),
        many => format!("per cell: {}", many.iter().map(|v| show(*v)).collect::<Vec<_>>().join(", ")),
    }
}

fn spread(s: Option<Spread>) -> String {
    s.map_or("-".into(), |s| format!("{} / {} / {}", sig(s.p50), sig(s.p95), sig(s.max)))
}

fn duration(s: f64) -> String {
    if s >= 3600.0 {
        format!("{}h{:02}m", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64)
    } else if s >= 60.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.1}s")
    }
}

/// The report's content, rendered to markdown and HTML alike.
#[derive(Clone, Debug)]
pub enum Block {
    Heading(u8, String),
    /// Text with `inline code`.
    Para(String),
    Table {
        header: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    /// A figure: `figures/NAME.png` shown, `figures/NAME.svg` linked.
    Image {
        path: String,
        alt: String,
    },
}

fn render_markdown(doc: &[Block]) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = String::new();
    for b in doc {
        match b {
            Block::Heading(level, text) => out.push_str(&format!("{} {text}\n\n", "#".repeat(*level as usize))),
            Block::Para(text) => out.push_str(&format!("{text}\n\n")),
            Block::Table { header, rows } => {
                out.push_str(&format!("| {} |\n", header.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | ")));
                out.push_str(&format!(
                    "|{}|\n",
                    header.iter().enumerate().map(|(i, _)| if i == 0 { "---" } else { "--:" }).collect::<Vec<_>>().join("|")
                ));
                for r in rows {
                    out.push_str(&format!("| {} |\n", r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")));
                }
                out.push('\n');
            }
            Block::Image { path, alt } => {
                out.push_str(&format!("![{alt}](figures/{path}.png)\n\n*{alt}* ([SVG](figures/{path}.svg))\n\n"));
            }
        }
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// HTML-escapes `text` and turns `code` spans into <code>.
fn inline(text: &str) -> String {
    escape(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { format!("<code>{part}</code>") } else { part.to_string() })
        .collect()
}

fn render_html(title: &str, doc: &[Block]) -> String {
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}\n\
         th:first-child, td:first-child {{ text-align: left; }}\n\
         th {{ background: #f3f3f3; }}\n\
         img {{ max-width: 100%; }}\n\
         code {{ background: #f3f3f3; padding: 0 3px; }}\n\
         </style>\n</head>\n<body>\n",
        escape(title)
    );
    for b in doc {
        match b {
            Block::Heading(level, text) => out.push_str(&format!("<h{level}>{}</h{level}>\n", inline(text))),
            Block::Para(text) => out.push_str(&format!("<p>{}</p>\n", inline(text))),
            Block::Table { header, rows } => {
                out.push_str("<table>\n<thead><tr>");
                for h in header {
                    out.push_str(&format!("<th>{}</th>", inline(h)));
                }
                out.push_str("</tr></thead>\n<tbody>\n");
                for r in rows {
                    out.push_str("<tr>");
                    for c in r {
                        out.push_str(&format!("<td>{}</td>", inline(c)));
                    }
                    out.push_str("</tr>\n");
                }
                out.push_str("</tbody>\n</table>\n");
            }
            Block::Image { path, alt } => out.push_str(&format!(
                "<figure><img src=\"figures/{path}.png\" alt=\"{a}\"><figcaption>{c} (<a href=\"figures/{path}.svg\">SVG</a>)</figcaption></figure>\n",
                a = escape(alt),
                c = inline(alt)
            )),
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_monitors_reduce_to_the_top_block_rms_and_the_largest_attention_logit_per_step() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        fs::write(
            run.blocks(),
            "step,block,grad_norm,act_rms,max_attn_logit\n\
             50,0,1.0,1.5,4.0\n50,1,1.0,2.5,6.0\n50,2,1.0,3.5,5.0\n\
             100,0,1.0,1.0,9.0\n100,1,1.0,7.0,NaN\n100,2,1.0,8.0,2.0\n",
        )
        .unwrap();
        let b = read_blocks(&run).unwrap();
        assert_eq!(
            b,
            [
                BlockStep { step: 50, top_rms: 3.5, max_attn_logit: 6.0 },
                BlockStep { step: 100, top_rms: 8.0, max_attn_logit: 9.0 },
            ]
        );
        // no blocks.csv (monitor.block_every = 0): nothing
        assert!(read_blocks(&RunDir::new(dir.path().join("none"))).unwrap().is_empty());
    }
}
