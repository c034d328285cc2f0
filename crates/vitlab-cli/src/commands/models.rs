//! `vitlab models`: the model zoo as a table.

use vitlab::models::{param_count, BlockVariant, ModelConfig, Preset, Size};

use super::{parse_named, render_table, Format};

#[derive(clap::Args)]
pub struct Args {
    /// Input image size in pixels (square).
    #[arg(long, default_value_t = 32)]
    image_size: usize,
    /// Patch size in pixels.
    #[arg(long, default_value_t = 4)]
    patch_size: usize,
    /// Number of classes of the head.
    #[arg(long, default_value_t = 10)]
    num_classes: usize,
    /// Model preset: `default` (vitlab) or `paper` (the released code's model).
    #[arg(long, default_value = "default", value_parser = parse_named::<Preset>)]
    preset: Preset,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// "5.67M" style, as the paper's Table 1.
fn human(n: usize) -> String {
    format!("{:.2}M", n as f64 / 1e6)
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let mut rows = Vec::new();
    for &block in BlockVariant::ALL {
        for &size in Size::ALL {
            let config = ModelConfig::new(block, size)
                .with_preset(args.preset)
                .with_image(args.image_size, args.patch_size)
                .with_classes(args.num_classes);
            config.validate()?;
            rows.push((config, size));
        }
    }
    let header = ["block", "size", "depth", "width", "mlp", "heads", "params"];
    match args.format {
        Format::Table => {
            let table: Vec<Vec<String>> = rows
                .iter()
                .map(|(c, size)| {
                    vec![
                        c.block.to_string(),
                        size.to_string(),
                        c.depth.to_string(),
                        c.dim.to_string(),
                        c.mlp_dim.to_string(),
                        c.heads.to_string(),
                        human(param_count(c)),
                    ]
                })
                .collect();
            println!(
                "preset {}, {} px, patch {}, {} classes",
                args.preset, args.image_size, args.patch_size, args.num_classes
            );
            println!("{}", render_table(&header, &table));
        }
        Format::Csv => {
            println!("{}", header.join(","));
            for (c, size) in &rows {
                println!(
                    "{},{},{},{},{},{},{}",
                    c.block, size, c.depth, c.dim, c.mlp_dim, c.heads, param_count(c)
                );
            }
        }
        Format::Json => {
            let list: Vec<serde_json::Value> = rows
                .iter()
                .map(|(c, size)| {
                    serde_json::json!({
                        "block": c.block, "size": size, "depth": c.depth, "width": c.dim,
                        "mlp": c.mlp_dim, "heads": c.heads, "params": param_count(c),
                        "image_size": c.image_size, "patch_size": c.patch_size,
                        "num_classes": c.num_classes, "preset": args.preset,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&list).expect("json"));
        }
    }
    Ok(())
}
