//! Reading runs for the reports: [`RunRecord`] (everything the classification
//! report uses from one run directory) and its logs ([`StepRow`] of steps.csv,
//! [`BlockStep`] of blocks.csv, [`EpochRow`] of metrics.csv, read by one CSV
//! column reader), [`load_run`] / [`load_runs`], and the walk over folders both
//! reports share ([`candidates`]: run directories in sweep order, with their
//! display names, grid keys and sweep cell names).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{flatten_config, ExperimentConfig, TaskKind};
use crate::sweep::manifest::Manifest;
use crate::train::classify::Results;
use crate::train::RunDir;
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
    /// Validation accuracy of the weights the run validates with: the EMA's when
    /// `ema.decay > 0`, the trained weights' otherwise.
    pub val_acc: f64,
    /// With an EMA, the trained weights' own validation accuracy
    /// (`model_val_acc`); NaN for a run without one.
    pub model_val_acc: f64,
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
/// unparsable fields are NaN; a missing column is all NaN, except that the
/// first `required` columns must be there); no file or an empty one, no rows.
pub(crate) fn read_columns_requiring(path: &Path, columns: &[&str], required: usize) -> Result<Vec<Vec<f64>>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Ok(Vec::new()) };
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let index: Vec<Option<usize>> = columns.iter().map(|c| names.iter().position(|n| n == c)).collect();
    if let Some(missing) = columns.iter().zip(&index).take(required).find(|(_, i)| i.is_none()) {
        return Err(Error::data(path, format!("no `{}` column", missing.0)));
    }
    let mut rows = Vec::new();
    let mut fields = Vec::with_capacity(names.len());
    for line in lines.filter(|l| !l.trim().is_empty()) {
        fields.clear();
        fields.extend(line.split(','));
        rows.push(index.iter().map(|i| i.and_then(|i| fields.get(i)).map_or(f64::NAN, |v| parse_f64(v))).collect());
    }
    Ok(rows)
}

/// [`read_columns_requiring`] with no column required.
fn read_columns(path: &Path, columns: &[&str]) -> Result<Vec<Vec<f64>>> {
    read_columns_requiring(path, columns, 0)
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
    Ok(read_columns(&run.metrics(), &["epoch", "train_loss", "train_acc", "val_loss", "val_acc", "model_val_acc"])?
        .into_iter()
        .filter(|r| r[0].is_finite())
        .map(|r| EpochRow {
            epoch: r[0] as usize,
            train_loss: r[1],
            train_acc: r[2],
            val_loss: r[3],
            val_acc: r[4],
            model_val_acc: r[5],
        })
        .collect())
}

/// Whether `run` is a run directory: a config and something a run leaves behind
/// (results, an error, a checkpoint, or steps.csv: a run that started but has no
/// checkpoint yet is an unfinished run).
pub(crate) fn is_run(run: &RunDir) -> bool {
    run.config().exists() && (run.results().exists() || run.error().exists() || run.latest().exists() || run.steps().exists())
}

/// Whether `dir` is a CycleGAN run directory.
pub fn is_cyclegan_run(dir: &Path) -> bool {
    let run = RunDir::new(dir);
    is_run(&run) && ExperimentConfig::load(Some(&run.config()), &[]).is_ok_and(|c| c.task == TaskKind::Cyclegan)
}

/// Loads one run directory (`None` if it is not one).
pub fn load_run(dir: &Path, name: String) -> Result<Option<RunRecord>> {
    let run = RunDir::new(dir);
    if !is_run(&run) {
        return Ok(None);
    }
    let config = ExperimentConfig::load(Some(&run.config()), &[])?;
    if config.task == TaskKind::Cyclegan {
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
        if dirs.iter().any(|d| is_run(&RunDir::new(d)) && !is_cyclegan_run(d)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A run directory found under a folder given to the report, of either task.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub dir: PathBuf,
    /// `ROOT/RELATIVE` (or `ROOT` when the folder is the run).
    pub name: String,
    /// The config keys its sweep's grid sets, in grid order (empty outside a sweep).
    pub grid_keys: Vec<String>,
    /// Its cell name in its sweep's manifest.
    pub sweep_cell: Option<String>,
}

/// The run directories under `root` (which may itself be one): runs of a sweep
/// in the order of its `sweep.json`, then the others by path.
pub(crate) fn candidates(root: &Path) -> Result<Vec<Candidate>> {
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
    let mut found: Vec<(usize, Candidate)> = dirs
        .into_iter()
        .filter(|d| is_run(&RunDir::new(d)))
        .map(|dir| {
            let name = dir
                .strip_prefix(root)
                .ok()
                .filter(|p| !p.as_os_str().is_empty())
                .map(|p| format!("{}/{}", root.display(), p.display()))
                .unwrap_or_else(|| root.display().to_string());
            let (pos, grid_keys, sweep_cell) = order.get(&dir).cloned().unwrap_or((usize::MAX, Vec::new(), None));
            (pos, Candidate { dir, name, grid_keys, sweep_cell })
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.dir.cmp(&b.1.dir)));
    Ok(found.into_iter().map(|(_, c)| c).collect())
}

/// Every run under the given folders (each may itself be a run directory).
/// Runs of a sweep come in the order of its `sweep.json`; others by path.
pub fn load_runs(roots: &[PathBuf]) -> Result<Vec<RunRecord>> {
    let mut out = Vec::new();
    for root in roots {
        for c in candidates(root)? {
            if let Some(mut r) = load_run(&c.dir, c.name)? {
                r.grid_keys = c.grid_keys;
                r.sweep_cell = c.sweep_cell;
                out.push(r);
            }
        }
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

    #[test]
    fn epochs_keep_the_trained_weights_accuracy_beside_the_emas_and_nan_without_an_ema() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        let ema_header =
            "epoch,step,train_loss,train_acc,val_loss,val_acc,model_val_loss,model_val_acc,lr,seconds,images_per_s\n";
        fs::write(run.metrics(), format!("{ema_header}1,10,2.0,0.2,1.9,0.25,1.8,0.3,1e-3,5,100\n")).unwrap();
        let e = read_epochs(&run).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].epoch, e[0].val_acc, e[0].model_val_acc), (1, 0.25, 0.3));
        // a run without an EMA has no model_val_* columns
        fs::write(
            run.metrics(),
            "epoch,step,train_loss,train_acc,val_loss,val_acc,lr,seconds,images_per_s\n2,20,1.5,0.4,1.4,0.45,1e-3,5,100\n",
        )
        .unwrap();
        let e = read_epochs(&run).unwrap();
        assert_eq!((e[0].epoch, e[0].val_acc), (2, 0.45));
        assert!(e[0].model_val_acc.is_nan());
    }
}
