//! Sweeps: a grid of config overrides x seeds, every cell x seed its own run
//! directory, restartable (docs/SWEEPS.md).
//!
//! ```text
//! DIR/sweep.json                          the plan: base config, overrides, grid, seeds, runs
//! DIR/summary.json                        the last invocation's outcome per run
//! DIR/block=vit22b/seed=1/                a run directory (train::RunDir), plus
//!                         train.log       the run's log when run as a child process
//!                         error.txt       why the run failed (removed once it succeeds)
//! ```
//!
//! Starting a sweep again skips runs that finished (their `results.json`
//! exists: completed, early-stopped, max-steps or exploded are all results),
//! resumes runs that have a checkpoint (`checkpoints/latest.safetensors`), and
//! starts the rest. A run that fails with an error is recorded and the sweep
//! goes on.
//!
//! [`plan`] lays a sweep out (the grid x seeds, each run's directory and config);
//! this file runs it; what `sweep.json` records (the grid, the planned runs) is
//! [`manifest`], which reports read without the rest.

pub(crate) mod manifest;
mod plan;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::config::ExperimentConfig;
use crate::train::{ExitCause, Outcome, Progress, RunDir, Start};
use crate::util::fs::atomic_write;
use crate::{Error, Result};

pub use manifest::{Axis, Level, Manifest, PlannedRun};
use plan::run_overrides;
pub use plan::{plan, Plan, SweepSpec};

/// Where a run directory stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// `results.json` exists.
    Finished,
    /// A checkpoint exists but no results.
    Resumable,
    /// Nothing to continue from.
    Fresh,
}

/// Settings a sweep may change for runs that already exist: the training budget
/// (a larger one continues them), the backend, data-loading threads and the
/// monitoring and checkpoint cadences.
const CHANGEABLE: &[&str] = &["epochs", "max_steps", "backend", "data.workers", "monitor.block_every"];

/// An existing run directory belongs to the planned run only if it was made with
/// the same settings (the budget and backend aside, [`CHANGEABLE`]); otherwise a
/// sweep started again with other `--set` values or another `--lr` would report
/// the old run as the new one, or resume it with the new settings mixed in.
pub fn check_same_config(run: &RunDir, planned: &ExperimentConfig) -> Result<()> {
    let path = run.config();
    if !path.exists() {
        return Ok(());
    }
    let saved = ExperimentConfig::load(Some(&path), &[])?;
    let flat = |c: &ExperimentConfig| -> std::collections::BTreeMap<String, String> {
        crate::config::flatten_config(c)
            .into_iter()
            .filter(|(k, _)| !CHANGEABLE.contains(&k.as_str()) && !k.starts_with("checkpoint."))
            .collect()
    };
    let (old, new) = (flat(&saved), flat(planned));
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| {
            let show = |v: Option<&String>| v.map_or("(unset)".to_string(), Clone::clone);
            format!("{k} = {} (now {})", show(old.get(k)), show(new.get(k)))
        })
        .collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(Error::data(
            &path,
            format!(
                "this run was made with other settings than the sweep now plans for it: {}; \
                 give the sweep another --out, or delete the run to redo it",
                differ.join(", ")
            ),
        ))
    }
}

pub fn run_state(run: &RunDir) -> RunState {
    if run.results().exists() {
        RunState::Finished
    } else if run.latest().exists() {
        RunState::Resumable
    } else {
        RunState::Fresh
    }
}

/// The exit status of `vitlab train` for a run that stopped because it diverged
/// ([`ExitCause::Exploded`], recorded in its results); 0 is a run that finished otherwise.
pub const EXIT_DIVERGED: u8 = 3;

/// How runs are executed.
#[derive(Clone, Debug)]
pub enum Runner {
    /// In this process, one run at a time (`jobs` is ignored), a line per epoch on stderr.
    InProcess { quiet: bool },
    /// As child processes `PROGRAM train ...` (the vitlab binary), `jobs` at a
    /// time, each logging to `RUN_DIR/train.log`. Unless `RAYON_NUM_THREADS` is
    /// set, each child gets `cores / jobs` compute threads. A child's exit status
    /// 0 or [`EXIT_DIVERGED`] with results written is a run that ended (an exploded
    /// run is a result of the sweep, not a failure); anything else failed.
    Subprocess { program: PathBuf },
}

#[derive(Clone, Debug)]
pub struct SweepOptions {
    pub jobs: usize,
    pub runner: Runner,
    /// One line per run start and end on stderr.
    pub verbose: bool,
}

/// What the sweep did with a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Finished before; left untouched.
    Skipped,
    /// Continued from its checkpoint.
    Resumed,
    /// Started from scratch.
    Started,
}

/// One run's outcome in `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    pub dir: String,
    pub cell: String,
    pub seed: u64,
    pub action: Action,
    /// The exit cause, or `None` when the run failed with an error.
    pub exit_cause: Option<ExitCause>,
    pub error: Option<String>,
    pub explosion_step: Option<u64>,
    /// A classifier's test top-1.
    pub test_top1: Option<f64>,
    /// The run's selection score (`score_name`: a classifier's best `val_acc`, a
    /// CycleGAN's best `FID_A + FID_B`).
    #[serde(default)]
    pub score: Option<f64>,
    #[serde(default)]
    pub score_name: Option<String>,
    pub steps: Option<u64>,
    pub wall_time_s: Option<f64>,
}

/// `DIR/summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub runs: Vec<RunOutcome>,
}

impl Summary {
    pub const FILE: &'static str = "summary.json";

    pub fn failed(&self) -> usize {
        self.runs.iter().filter(|r| r.error.is_some()).count()
    }
}

/// Writes the plan's manifest (merged with the runs of an existing one, so a
/// sweep extended with more seeds or values still lists its earlier runs).
pub fn write_manifest(plan: &Plan) -> Result<()> {
    fs::create_dir_all(&plan.root).map_err(|e| Error::io(&plan.root, e))?;
    let mut manifest = plan.manifest.clone();
    if let Some(old) = Manifest::read(&plan.root)? {
        let known: std::collections::HashSet<String> = manifest.runs.iter().map(|r| r.dir.clone()).collect();
        let extra: Vec<PlannedRun> = old.runs.into_iter().filter(|r| !known.contains(&r.dir)).collect();
        manifest.runs.extend(extra);
    }
    let json = serde_json::to_string_pretty(&manifest).expect("manifest serialises");
    atomic_write(&plan.root.join(Manifest::FILE), json.as_bytes())
}

/// Runs (or continues) a planned sweep; writes `sweep.json` first and
/// `summary.json` at the end. Errors of individual runs are recorded, not
/// returned; an `Err` means the sweep itself could not proceed.
pub fn run(plan: &Plan, options: &SweepOptions) -> Result<Summary> {
    write_manifest(plan)?;
    let n = plan.manifest.runs.len();
    let jobs = match options.runner {
        Runner::InProcess { .. } => 1,
        Runner::Subprocess { .. } => options.jobs.max(1).min(n.max(1)),
    };
    // cores / jobs, rounded down: never more compute threads than cores
    let threads_per_job = (std::thread::available_parallelism().map_or(1, |p| p.get()) / jobs).max(1);
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<Option<RunOutcome>>> = Mutex::new(vec![None; n]);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::SeqCst);
        if i >= n {
            break;
        }
        let outcome = run_one(plan, i, options, threads_per_job);
        outcomes.lock().expect("no worker panics holding the lock")[i] = Some(outcome);
    };
    if jobs == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(work);
            }
        });
    }
    let summary =
        Summary { runs: outcomes.into_inner().expect("lock").into_iter().map(|o| o.expect("every run visited")).collect() };
    let json = serde_json::to_string_pretty(&summary).expect("summary serialises");
    atomic_write(&plan.root.join(Summary::FILE), json.as_bytes())?;
    Ok(summary)
}

/// What the sweep records of a finished run of any task: the summary every
/// results.json holds, and a classifier's test top-1.
struct Finished {
    summary: crate::train::Summary,
    test_top1: Option<f64>,
}

fn read_results(run: &RunDir) -> Result<Finished> {
    let summary = crate::train::Summary::read(run)?;
    let path = run.results();
    let json: serde_json::Value = serde_json::from_str(&fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?)
        .map_err(|e| Error::data(&path, format!("unreadable results: {e}")))?;
    Ok(Finished { summary, test_top1: json["test"]["top1"].as_f64() })
}

impl From<Outcome> for Finished {
    fn from(o: Outcome) -> Self {
        let test_top1 = match &o {
            Outcome::Classify(r) => r.test.as_ref().map(|t| t.top1),
            Outcome::Cyclegan(_) => None,
        };
        Finished { summary: o.summary().clone(), test_top1 }
    }
}

fn run_one(plan: &Plan, i: usize, options: &SweepOptions, threads: usize) -> RunOutcome {
    let planned = &plan.manifest.runs[i];
    let run = RunDir::new(plan.root.join(&planned.dir));
    let state = run_state(&run);
    let action = match state {
        RunState::Finished => Action::Skipped,
        RunState::Resumable => Action::Resumed,
        RunState::Fresh => Action::Started,
    };
    let n = plan.manifest.runs.len();
    let tag = format!("[{}/{n}] {}", i + 1, planned.dir);
    if options.verbose {
        let what = match action {
            Action::Skipped => "finished before, skipped",
            Action::Resumed => "resuming from its checkpoint",
            Action::Started => "starting",
        };
        eprintln!("{tag}: {what}");
    }
    let overrides = run_overrides(&plan.manifest.overrides, &planned.cell_overrides, planned.seed);
    let result = match action {
        Action::Started => execute(plan, i, &run, action, &overrides, options, threads),
        _ => check_same_config(&run, &plan.configs[i]).and_then(|()| match action {
            Action::Skipped => read_results(&run),
            _ => execute(plan, i, &run, action, &overrides, options, threads),
        }),
    };
    let outcome = match result {
        Ok(Finished { summary: r, test_top1 }) => {
            let _ = fs::remove_file(run.error());
            RunOutcome {
                dir: planned.dir.clone(),
                cell: planned.cell.clone(),
                seed: planned.seed,
                action,
                exit_cause: Some(r.exit_cause),
                error: None,
                explosion_step: r.explosion.as_ref().map(|e| e.step),
                test_top1,
                score: r.score,
                score_name: r.score_name.clone(),
                steps: Some(r.steps),
                wall_time_s: Some(r.wall_time_s),
            }
        }
        Err(e) => {
            let message = e.to_string();
            let _ = fs::create_dir_all(&run.root);
            let _ = fs::write(run.error(), format!("{message}\n"));
            RunOutcome {
                dir: planned.dir.clone(),
                cell: planned.cell.clone(),
                seed: planned.seed,
                action,
                exit_cause: None,
                error: Some(message),
                explosion_step: None,
                test_top1: None,
                score: None,
                score_name: None,
                steps: None,
                wall_time_s: None,
            }
        }
    };
    if options.verbose && action != Action::Skipped {
        match (&outcome.error, &outcome.exit_cause) {
            (Some(e), _) => eprintln!("{tag}: FAILED: {e}"),
            (None, Some(ExitCause::Exploded)) => {
                eprintln!("{tag}: exploded at step {}", outcome.explosion_step.unwrap_or(0))
            }
            (None, cause) => eprintln!(
                "{tag}: {} after {} steps, {}",
                cause.as_ref().map_or("done".into(), |c| format!("{c:?}").to_lowercase()),
                outcome.steps.unwrap_or(0),
                match (outcome.test_top1, outcome.score, &outcome.score_name) {
                    (Some(t), _, _) => format!("test top-1 {t:.4}"),
                    (None, Some(s), Some(name)) => format!("best {name} {s:.4}"),
                    _ => "no score".into(),
                }
            ),
        }
    }
    outcome
}

fn execute(
    plan: &Plan,
    i: usize,
    run: &RunDir,
    action: Action,
    overrides: &[String],
    options: &SweepOptions,
    threads: usize,
) -> Result<Finished> {
    match &options.runner {
        Runner::InProcess { quiet } => {
            let mut progress = Progress::new(*quiet);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match action {
                Action::Resumed => crate::train::train(Start::Resume(overrides), run, &mut progress).map(Finished::from),
                _ => crate::train::train(Start::New(&plan.configs[i]), run, &mut progress).map(Finished::from),
            }));
            result.unwrap_or_else(|panic| {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "unknown panic".into());
                Err(Error::data(&run.root, format!("training panicked: {msg}")))
            })
        }
        Runner::Subprocess { program } => {
            run.create()?;
            let log_path = run.root.join("train.log");
            let log = fs::OpenOptions::new().create(true).append(true).open(&log_path).map_err(|e| Error::io(&log_path, e))?;
            let log_err = log.try_clone().map_err(|e| Error::io(&log_path, e))?;
            let mut cmd = Command::new(program);
            cmd.arg("train").arg("--quiet");
            match action {
                Action::Resumed => {
                    cmd.arg("--resume").arg(&run.root);
                }
                _ => {
                    // The resolved config, so the child needs nothing but the run directory.
                    atomic_write(&run.config(), plan.configs[i].to_toml().as_bytes())?;
                    cmd.arg("--config").arg(run.config()).arg("--out").arg(&run.root);
                }
            }
            if action == Action::Resumed {
                for o in overrides {
                    cmd.arg("--set").arg(o);
                }
            }
            if std::env::var_os("RAYON_NUM_THREADS").is_none() {
                cmd.env("RAYON_NUM_THREADS", threads.to_string());
            }
            let status = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log_err))
                .status()
                .map_err(|e| Error::io(program, e))?;
            // `vitlab train` exits EXIT_DIVERGED for a run that diverged: finished, with its results.
            let ended = status.success() || status.code() == Some(EXIT_DIVERGED.into());
            if ended && run.results().exists() {
                return read_results(run);
            }
            let text = fs::read_to_string(&log_path).unwrap_or_default();
            let last_error = text
                .lines()
                .rev()
                .find(|l| l.starts_with("error:") || l.contains("panicked"))
                .map(str::to_string)
                .unwrap_or_else(|| format!("training exited with {status}"));
            Err(Error::data(&run.root, format!("{last_error} (log: {})", log_path.display())))
        }
    }
}
