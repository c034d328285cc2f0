//! Reports over runs: the per-cell accuracy table with seeds (mean ± std, Welch
//! t-test against a baseline cell, parameter counts: the paper's Table 1 and
//! Figure 2 as numbers), the stability table (explosions over seeds, percentiles
//! of the per-step monitors: Figure 1 as numbers), and figures (PNG and SVG).
//! CycleGAN runs have their own report ([`cyclegan`]) built from the same parts.
//!
//! The files: `runs.rs` reads run directories ([`load_runs`]: a `config.toml`
//! beside a `results.json`, an `error.txt`, a checkpoint or steps.csv);
//! `cells.rs` groups runs into cells by the config keys that differ between
//! them (the seed aside) and resolves the baseline; `render.rs` holds the
//! document ([`Block`]), its markdown and HTML renderers and the number
//! formatters; `plot/` the figures. This file holds [`Report`]:
//! [`Report::build`] computes every cell's numbers, [`Report::write`] writes
//! `report.md`, `report.html` (the same content), `report.json` (the numbers)
//! and `figures/`, and `document` assembles the sections.

pub(crate) mod cells;
pub mod cyclegan;
pub(crate) mod plot;
pub(crate) mod render;
pub(crate) mod runs;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use cells::{parse_baseline, MeanStd};
pub use render::{sig, Block};
pub use runs::{
    has_classification_runs, load_run, load_runs, not_started, read_blocks, read_epochs, read_steps, BlockStep, EpochRow,
    RunRecord, RunStatus, StepRow,
};

use crate::stats::{mean, median, percentile};
use crate::train::classify::Results;
use crate::train::ExitCause;
use crate::util::fs::atomic_write;
use crate::{Error, Result};
use cells::Group;
use render::{duration, intro, n_cell, p_cell, pm, render_html, render_markdown};

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

impl Cell {
    /// The numbers of `group`'s runs (no baseline yet).
    fn of(group: &Group, runs: &[RunRecord]) -> Cell {
        let rs: Vec<&RunRecord> = group.runs.iter().map(|&i| &runs[i]).collect();
        let results: Vec<&Results> = rs.iter().filter_map(|r| r.results.as_ref()).collect();
        let tests: Vec<_> = results.iter().filter_map(|r| r.test.as_ref()).collect();
        let avg =
            |f: &dyn Fn(&Results) -> f64| (!results.is_empty()).then(|| mean(&results.iter().map(|r| f(r)).collect::<Vec<_>>()));
        let finite = |f: fn(&StepRow) -> f64| -> Vec<f64> {
            rs.iter().flat_map(|r| r.steps.iter().map(f)).filter(|v| v.is_finite()).collect()
        };
        let count = |s: RunStatus| rs.iter().filter(|r| r.status == s).count();
        Cell {
            label: group.label.clone(),
            values: group.values.clone(),
            runs: group.runs.clone(),
            seeds: rs.iter().map(|r| r.config.seed).collect(),
            finished: count(RunStatus::Finished),
            failed: count(RunStatus::Failed),
            unfinished: count(RunStatus::Unfinished),
            top1: MeanStd::of(&tests.iter().map(|t| t.top1).collect::<Vec<_>>()),
            top5: MeanStd::of(&tests.iter().map(|t| t.top5).collect::<Vec<_>>()),
            auroc: MeanStd::of(&tests.iter().filter_map(|t| t.auroc).collect::<Vec<_>>()),
            baseline: None,
            t_test: None,
            params: results.first().map(|r| r.params),
            epochs: avg(&|r| r.epochs as f64),
            steps: avg(&|r| r.steps as f64),
            wall_time_s: avg(&|r| r.wall_time_s),
            exploded: results.iter().filter(|r| r.exit_cause == ExitCause::Exploded).count(),
            explosion_steps: results.iter().filter_map(|r| r.explosion.as_ref().map(|e| e.step)).collect(),
            max_logit: Spread::of(&finite(|s| s.max_logit)),
            max_grad: Spread::of(&finite(|s| s.max_grad)),
            logit_threshold: rs[0].config.monitor.max_logit,
            grad_threshold: rs[0].config.monitor.max_grad,
        }
    }

    /// The test top-1 of each run with one.
    fn top1_values(&self, runs: &[RunRecord]) -> Vec<f64> {
        self.runs.iter().filter_map(|&i| runs[i].results.as_ref()?.test.as_ref().map(|t| t.top1)).collect()
    }
}

impl Report {
    /// Groups `runs` into cells and computes every number. `baseline`: the cell
    /// values to compare against (see [`parse_baseline`]); `None` picks
    /// `model.block=vit` when the block differs between cells and a `vit` cell exists.
    /// A baseline whose keys do not differ between the cells, or that no cell
    /// has, is an error (it would compare nothing while looking like it did).
    pub fn build(title: &str, runs: Vec<RunRecord>, baseline: Option<Vec<(String, String)>>) -> Result<Report> {
        let grouping = cells::group(&runs);
        let baseline = cells::resolve_baseline(baseline, &grouping.keys, &grouping.cells)?;
        let targets = cells::baseline_cells(&grouping.cells, &baseline);
        let mut cells: Vec<Cell> = grouping.cells.iter().map(|g| Cell::of(g, &runs)).collect();
        for (i, target) in targets.into_iter().enumerate() {
            let Some(b) = target else { continue };
            cells[i].baseline = Some(cells[b].label.clone());
            if b != i {
                cells[i].t_test =
                    cells::welch(&cells[i].top1_values(&runs), &cells[b].top1_values(&runs)).map(|t| (t.t, t.df, t.p));
            }
        }
        let notes = cells::repeated_seed_notes(cells.iter().map(|c| (c.label.as_str(), c.seeds.as_slice())));
        Ok(Report { title: title.to_string(), runs, cells, keys: grouping.keys, short: grouping.short, baseline, notes })
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

    /// The report's content: the intro, then Accuracy, Stability, Training curves and Runs.
    fn document(&self, figures: &[plot::Figure]) -> Vec<Block> {
        let mut doc = vec![Block::Heading(1, self.title.clone())];
        let finished = self.runs.iter().filter(|r| r.status == RunStatus::Finished).count();
        doc.push(Block::Para(intro(self.runs.len(), finished, self.cells.len(), &self.keys)));
        doc.extend(self.notes.iter().map(|n| Block::Para(n.clone())));
        let figure = |name: &str| {
            figures.iter().find(|f| f.name == name).map(|f| Block::Image { path: f.name.clone(), alt: f.caption.clone() })
        };
        doc.extend(self.accuracy_section());
        doc.extend(figure("accuracy"));
        doc.extend(self.stability_section());
        doc.extend(figure("stability"));
        if let Some(f) = figure("blocks") {
            doc.push(Block::Para(
                "Inside the network (blocks.csv, every `monitor.block_every` steps): the RMS of the last block's output \
                 tokens, i.e. the size of the residual stream at the top, and the largest attention logit over all blocks \
                 (after scaling). They tell an explosion of the residual stream from one of the attention logits."
                    .into(),
            ));
            doc.push(f);
        }
        if let Some(f) = figure("curves") {
            doc.push(Block::Heading(2, "Training curves".into()));
            doc.push(f);
        }
        doc.push(Block::Heading(2, "Runs".into()));
        doc.push(self.runs_table());
        doc
    }

    /// The accuracy heading, what the numbers are, and the table of cells.
    fn accuracy_section(&self) -> Vec<Block> {
        let base = render::baseline_sentence("test top-1", &self.baseline);
        let text = format!(
            "Test metrics of each finished run (exploded runs included) on its best-validation checkpoint, or, for a run \
             stopped before its first validation, on its state when it stopped (column *tested* under Runs; an exploded run's \
             last state may already be diverged); mean ± unbiased std over seeds (n: runs with a finite value); {base}. \
             Epochs, steps and wall time are means over the cell's finished runs."
        );
        let header = ["cell", "n", "top-1", "top-5", "AUROC", "p (top-1)", "params", "epochs", "steps", "wall time"];
        let rows = self
            .cells
            .iter()
            .map(|c| {
                vec![
                    c.label.clone(),
                    n_cell(c.top1.map_or(0, |m| m.n), c.unfinished, c.failed),
                    pm(c.top1),
                    pm(c.top5),
                    pm(c.auroc),
                    p_cell(c.t_test.map(|t| t.2), &c.label, c.baseline.as_deref()),
                    c.params.map_or("-".into(), |p| format!("{:.2}M", p as f64 / 1e6)),
                    c.epochs.map_or("-".into(), |e| format!("{e:.1}")),
                    c.steps.map_or("-".into(), |s| format!("{s:.0}")),
                    c.wall_time_s.map_or("-".into(), duration),
                ]
            })
            .collect();
        vec![Block::Heading(2, "Accuracy".into()), Block::Para(text), Block::table(&header, rows)]
    }

    /// The stability heading, what an explosion is, and the table of cells.
    fn stability_section(&self) -> Vec<Block> {
        let text = format!(
            "A run explodes when its loss or a gradient is not finite, or the max logit (largest classifier logit in the batch) or \
             the max |gradient| (over all parameters, before clipping) passes its threshold (`monitor.max_logit`, \
             `monitor.max_grad`; here {} and {}). The median explosion step is over the runs that exploded. Max logit and \
             max |grad|: percentiles over every step of every run of the cell, finished or not (steps.csv, finite values).",
            thresholds(self.cells.iter().map(|c| c.logit_threshold)),
            thresholds(self.cells.iter().map(|c| c.grad_threshold)),
        );
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
        vec![Block::Heading(2, "Stability".into()), Block::Para(text), Block::table(&header, rows)]
    }

    /// One row per run: its cell, seed, status, length, what was tested and how it ended.
    fn runs_table(&self) -> Block {
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
        Block::table(&header, rows)
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
