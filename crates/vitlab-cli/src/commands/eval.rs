//! `vitlab eval`: test metrics of a checkpoint or run directory on a dataset.

use std::path::PathBuf;
use std::sync::Arc;

use vitlab::backend::Backend;
use vitlab::train::classify::{evaluate, load_model_with};
use vitlab::Error;

use super::{value_name, BackendArg, Format, WeightsArg, BACKEND_HELP};

#[derive(clap::Args)]
pub struct Args {
    /// A checkpoint file, or a run directory (its best checkpoint, else latest).
    checkpoint: PathBuf,
    /// Dataset path (defaults to the run's data.path).
    #[arg(long)]
    data: Option<String>,
    /// Which split.
    #[arg(long, value_enum, default_value_t = Split::Test)]
    split: Split,
    #[arg(long, value_enum, default_value_t = BackendArg::Flex, help = BACKEND_HELP)]
    backend: BackendArg,
    /// Also write the metrics to this JSON file.
    #[arg(long)]
    out: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Which weights: the EMA average when the checkpoint has one (auto), or one of them.
    #[arg(long, value_enum, default_value_t = WeightsArg::Auto)]
    weights: WeightsArg,
}

/// `--split`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Split {
    /// The dataset's test split.
    Test,
    /// The whole training split (the images a run held out for validation included).
    Train,
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let device = Backend::from(args.backend).device()?;
    let (model, ck, weights) = load_model_with(&args.checkpoint, &device, args.weights.into())?;
    let mut config = ck.config.clone();
    if let Some(d) = args.data {
        config.data.path = d;
    }
    let set = if config.data.path == "synthetic" {
        let d = &config.data;
        match args.split {
            Split::Train => {
                vitlab::data::ImageSet::synthetic(d.synthetic_train, d.synthetic_classes, d.synthetic_size, config.seed)
            }
            Split::Test => {
                vitlab::data::ImageSet::synthetic(d.synthetic_test, d.synthetic_classes, d.synthetic_size, config.seed ^ 0xABCD)
            }
        }
    } else {
        let ds = vitlab::data::open(&config.data.path)?;
        match args.split {
            Split::Train => ds.train,
            Split::Test => ds.test.ok_or_else(|| Error::usage("--split", format!("{} has no test split", config.data.path)))?,
        }
    };
    let classes: Vec<String> = ck.metadata.get("classes").and_then(|c| serde_json::from_str(c).ok()).unwrap_or_default();
    if !classes.is_empty() && classes != set.classes {
        return Err(Error::usage(
            "--data",
            format!("the dataset's classes {:?} differ from the checkpoint's {:?}", set.classes, classes),
        ));
    }
    let set = Arc::new(set);
    let idx: Vec<usize> = (0..set.len()).collect();
    let m = evaluate(&model, &set, &idx, &config, &device);
    let split = value_name(&args.split);
    let json = serde_json::json!({
        "checkpoint": ck.path, "weights": weights, "data": config.data.path, "split": split,
        "count": m.count, "loss": m.loss, "top1": m.top1, "top5": m.top5, "auroc": m.auroc,
        "per_class_accuracy": set.classes.iter().zip(&m.per_class_accuracy)
            .map(|(c, a)| (c.clone(), serde_json::json!(a))).collect::<serde_json::Map<_, _>>(),
    });
    if let Some(out) = &args.out {
        let text = serde_json::to_string_pretty(&json).expect("json");
        vitlab::util::fs::atomic_write(out, text.as_bytes())?;
    }
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&json).expect("json")),
        _ => {
            println!("{} ({weights} weights) on {} ({split} split, {} images)", ck.path.display(), config.data.path, m.count);
            println!(
                "top-1 {:.4}  top-5 {:.4}  AUROC {}  loss {:.4}",
                m.top1,
                m.top5,
                m.auroc.map_or("-".into(), |a| format!("{a:.4}")),
                m.loss
            );
            for (c, a) in set.classes.iter().zip(&m.per_class_accuracy) {
                println!("  {c:<16} {a:.4}");
            }
        }
    }
    Ok(())
}
