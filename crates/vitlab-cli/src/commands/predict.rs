//! `vitlab predict`: the top classes of image files under a trained model.

use std::path::PathBuf;

use vitlab::backend::Backend;
use vitlab::train::classify::predict_files;

use super::{BackendArg, Format, WeightsArg, BACKEND_HELP};

#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint file, or a run directory (its best checkpoint, else latest).
    checkpoint: PathBuf,
    /// JPEG or PNG files.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// How many classes to show per image.
    #[arg(long, default_value_t = 5)]
    top: usize,
    #[arg(long, value_enum, default_value_t = BackendArg::Flex, help = BACKEND_HELP)]
    backend: BackendArg,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Which weights: the EMA average when the checkpoint has one (auto), or one of them.
    #[arg(long, value_enum, default_value_t = WeightsArg::Auto)]
    weights: WeightsArg,
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let device = Backend::from(args.backend).device()?;
    let preds = predict_files(&args.checkpoint, &args.images, args.top, args.weights.into(), &device)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&preds).expect("json")),
        _ => {
            for p in &preds {
                println!("{}", p.path.display());
                for (class, prob) in &p.top {
                    println!("  {prob:7.4}  {class}");
                }
            }
        }
    }
    Ok(())
}
