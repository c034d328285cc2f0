//! `vitlab attention`: attention maps and rollout of image files under a trained classifier.

use std::path::PathBuf;

use vitlab::backend::Backend;
use vitlab::inspect::{attention_files, AttentionOptions, Fusion};

use super::{BackendArg, Format, WeightsArg, BACKEND_HELP};

#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint file, or a run directory (its best checkpoint, else latest).
    checkpoint: PathBuf,
    /// JPEG or PNG files.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// Where to write, per image, OUT/STEM/{grid.png, rollout.png, maps.safetensors}, and OUT/attention.json.
    #[arg(long)]
    out: PathBuf,
    /// Rollout: the share of each block's fused attention entries, the lowest, set to 0 (vit-explain's discard_ratio).
    #[arg(long, default_value_t = 0.9)]
    discard_ratio: f64,
    /// Rollout: how the heads of a block are fused.
    #[arg(long, value_enum, default_value_t = FusionArg::Mean)]
    head_fusion: FusionArg,
    /// Which weights: the EMA average when the checkpoint has one (auto), or one of them.
    #[arg(long, value_enum, default_value_t = WeightsArg::Auto)]
    weights: WeightsArg,
    #[arg(long, value_enum, default_value_t = BackendArg::Flex, help = BACKEND_HELP)]
    backend: BackendArg,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FusionArg {
    Mean,
    Max,
    Min,
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let device = Backend::from(args.backend).device()?;
    let fusion = match args.head_fusion {
        FusionArg::Mean => Fusion::Mean,
        FusionArg::Max => Fusion::Max,
        FusionArg::Min => Fusion::Min,
    };
    let opts = AttentionOptions { fusion, discard_ratio: args.discard_ratio, weights: args.weights.into() };
    let summary = attention_files(&args.checkpoint, &args.images, &args.out, &opts, &device)?;
    if args.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
        return Ok(());
    }
    println!(
        "{} weights of {}: {} blocks x {} heads, maps of the {}; rollout with {} head fusion, discard ratio {}",
        summary.weights,
        summary.checkpoint.display(),
        summary.blocks,
        summary.heads,
        summary.query,
        summary.fusion.name(),
        summary.discard_ratio
    );
    for im in &summary.images {
        println!("{}  {} ({:.4})  -> {}", im.image.display(), im.predicted, im.probability, im.dir.display());
    }
    println!("grid.png: one row per block; the image, each head, the heads' mean. {}", args.out.join("attention.json").display());
    Ok(())
}
