//! `vitlab stability`: the training-instability study (SPEC §3, the paper's
//! Figure 1 over seeds) as a preset sweep: block variants x stabilisers x seeds
//! for a fixed number of steps at the paper's optimiser settings, then the report.

use std::path::PathBuf;

use vitlab::sweep::{Axis, SweepSpec};

use super::sweep::{finish, run_spec, write_report};

/// The stabilisers compared, each a bundle of overrides (docs/CONFIG.md defines them).
const STABILIZERS: [(&str, &[&str]); 3] = [
    ("none", &[]),
    ("clip", &["stabilizers.clip_grad_norm=1.0"]),
    ("z-loss", &["stabilizers.z_loss=1e-4"]),
];

#[derive(clap::Args)]
pub struct Args {
    /// Base experiment config (data, model size, image size); the study's
    /// settings below override it.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Dataset (anything `vitlab data info` reads, or `synthetic`); default: the
    /// config's, else `synthetic`.
    #[arg(long)]
    data: Option<String>,
    /// Peak learning rate(s), comma-separated; several make an extra grid axis.
    #[arg(long, default_value = "1e-3")]
    lr: String,
    /// Optimiser steps per run (`max_steps`). The paper's block exploded near step 1,570.
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Seeds per cell.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    seed_base: u64,
    /// Block variants, comma-separated.
    #[arg(long, default_value = "vit,vit22b,vit22b-nonorm,vit22b-ln,vit22b-code")]
    blocks: String,
    /// Stabilisers, comma-separated: none, clip (global grad-norm clipping at
    /// 1.0), z-loss (coefficient 1e-4).
    #[arg(long, default_value = "none,clip,z-loss")]
    stabilizers: String,
    /// Model preset: `paper` (the released code's models, the ones that
    /// exploded) or `default`.
    #[arg(long, default_value = "paper")]
    model_preset: String,
    /// Sweep directory; the report goes to OUT/report.
    #[arg(long, short, default_value = "runs/stability")]
    out: PathBuf,
    /// Runs at a time (child processes; 1 runs in this process).
    #[arg(long, short, default_value_t = 1)]
    jobs: usize,
    /// Further overrides for every run (after the study's settings, before each cell's
    /// block and stabiliser), e.g. `--set model.depth=6`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Print the planned runs; run nothing.
    #[arg(long)]
    dry_run: bool,
    /// No progress bars; one line per run.
    #[arg(long, short)]
    quiet: bool,
}

fn list(s: &str) -> Vec<String> {
    s.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect()
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let lrs = list(&args.lr);
    if lrs.is_empty() {
        return Err(vitlab::Error::config("--lr", "give at least one learning rate"));
    }
    // The paper's optimiser and batch (SPEC §2), a constant LR, no stabiliser
    // unless the axis adds one, and enough epochs that `max_steps` ends every run.
    let mut overrides: Vec<String> = [
        "optim.name=adamw",
        "optim.weight_decay=1e-4",
        "batch_size=32",
        "epochs=100000",
        "patience=0",
        "schedule.name=constant",
        "schedule.warmup_epochs=0",
        "loss.label_smoothing=0",
        "stabilizers.clip_grad_norm=0",
        "stabilizers.z_loss=0",
        "stabilizers.logit_l2=0",
        "augment.crop_padding=0",
        "augment.hflip=0.33",
        "augment.vflip=0.33",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    overrides.push(format!("max_steps={}", args.steps));
    overrides.push(format!("model.preset={}", args.model_preset));
    if lrs.len() == 1 {
        overrides.push(format!("optim.lr={}", lrs[0]));
    }
    let data = args.data.clone().or_else(|| args.config.is_none().then(|| "synthetic".to_string()));
    if let Some(d) = &data {
        overrides.push(format!("data.path={d}"));
        if d == "synthetic" {
            overrides.push("data.val_size=500".into());
        }
    }
    overrides.extend(args.overrides.iter().cloned());

    let mut grid = Vec::new();
    if lrs.len() > 1 {
        grid.push(Axis::values("optim.lr", &lrs));
    }
    grid.push(Axis::values("model.block", &list(&args.blocks)));
    let wanted = list(&args.stabilizers);
    let levels: Vec<(&str, &[&str])> = STABILIZERS.iter().filter(|(n, _)| wanted.iter().any(|w| w == n)).copied().collect();
    if let Some(bad) = wanted.iter().find(|w| !STABILIZERS.iter().any(|(n, _)| n == w)) {
        return Err(vitlab::Error::config("--stabilizers", format!("unknown stabiliser {bad:?}; expected none, clip, z-loss")));
    }
    grid.push(Axis::bundles("stabilizer", &levels));

    let spec = SweepSpec {
        config: args.config.clone(),
        overrides,
        grid,
        seeds: (args.seed_base..args.seed_base + args.seeds).collect(),
    };
    let Some(summary) = run_spec(&spec, &args.out, args.jobs, args.quiet, args.dry_run)? else {
        return Ok(());
    };
    write_report(&args.out, &args.out.join("report"), "Training stability", Some("model.block=vit"))?;
    finish(&summary)
}
