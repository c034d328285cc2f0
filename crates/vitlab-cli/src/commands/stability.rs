//! `vitlab stability`: the training-instability study (SPEC §3, the paper's
//! Figure 1 over seeds) as a preset sweep: block variants x stabilisers x seeds
//! for a fixed number of steps at the paper's optimiser settings, then the report.

use std::path::PathBuf;

use clap::ValueEnum;
use vitlab::models::{BlockVariant, Preset};
use vitlab::sweep::{Axis, SweepSpec};

use super::sweep::{finish, run_spec, write_report};
use super::{value_name, PresetArg, Trimmed};

/// The stabilisers compared, each a bundle of overrides (docs/CONFIG.md defines them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Stabilizer {
    /// No stabiliser: the study's settings alone.
    None,
    /// Global gradient-norm clipping at 1.0.
    Clip,
    /// The z-loss on the logits, coefficient 1e-4.
    ZLoss,
}

impl Stabilizer {
    fn overrides(self) -> &'static [&'static str] {
        match self {
            Stabilizer::None => &[],
            Stabilizer::Clip => &["stabilizers.clip_grad_norm=1.0"],
            Stabilizer::ZLoss => &["stabilizers.z_loss=1e-4"],
        }
    }
}

/// `--blocks`: [`BlockVariant`] with help per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum BlockArg {
    /// Serial pre-norm ViT block.
    #[value(name = "vit")]
    Vit,
    /// The ViT-22B parallel block: shared pre-norm, QK-norm.
    #[value(name = "vit22b")]
    Vit22b,
    /// The released code's first block (the paper's Figure 1): no norm in the block.
    #[value(name = "vit22b-nonorm")]
    Vit22bNoNorm,
    /// The paper's fix: vit22b with a LayerNorm on the MLP branch output.
    #[value(name = "vit22b-ln")]
    Vit22bLn,
    /// The released code's block: x + LN(Attn(x) + MLP(x)).
    #[value(name = "vit22b-code")]
    Vit22bCode,
}

impl From<BlockArg> for BlockVariant {
    fn from(b: BlockArg) -> Self {
        match b {
            BlockArg::Vit => BlockVariant::Vit,
            BlockArg::Vit22b => BlockVariant::Vit22b,
            BlockArg::Vit22bNoNorm => BlockVariant::Vit22bNoNorm,
            BlockArg::Vit22bLn => BlockVariant::Vit22bLn,
            BlockArg::Vit22bCode => BlockVariant::Vit22bCode,
        }
    }
}

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
    /// Block variants, comma-separated (in this order).
    #[arg(long, value_delimiter = ',', value_parser = Trimmed::<BlockArg>::new(),
          default_value = "vit,vit22b,vit22b-nonorm,vit22b-ln,vit22b-code")]
    blocks: Vec<BlockArg>,
    /// Stabilisers, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = Trimmed::<Stabilizer>::new(), default_value = "none,clip,z-loss")]
    stabilizers: Vec<Stabilizer>,
    /// Model preset (`paper`: the released code's models, the ones that exploded).
    #[arg(long, value_enum, default_value_t = PresetArg::Paper)]
    model_preset: PresetArg,
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
        return Err(vitlab::Error::usage("--lr", "give at least one learning rate"));
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
    overrides.push(format!("model.preset={}", Preset::from(args.model_preset)));
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
    let blocks: Vec<String> = args.blocks.iter().map(|&b| BlockVariant::from(b).name().to_string()).collect();
    grid.push(Axis::values("model.block", &blocks));
    // In their fixed order, each once.
    let stabilizers: Vec<(String, Stabilizer)> =
        Stabilizer::value_variants().iter().filter(|s| args.stabilizers.contains(s)).map(|s| (value_name(s), *s)).collect();
    let levels: Vec<(&str, &[&str])> = stabilizers.iter().map(|(name, s)| (name.as_str(), s.overrides())).collect();
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

#[cfg(test)]
mod tests {
    use vitlab::models::BlockVariant;

    #[test]
    fn blocks_spell_the_library_names() {
        super::super::tests::assert_mirrors::<super::BlockArg, BlockVariant>(BlockVariant::ALL.len(), |s| s.parse().ok());
    }
}
