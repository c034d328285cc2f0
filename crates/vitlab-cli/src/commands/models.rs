//! `vitlab models`: the model zoo as a table.

use vitlab::models::{param_count, BlockVariant, ModelConfig, Preset, Size, VitUnetConfig};

use super::{render_table, Format, PresetArg};

#[derive(clap::Args)]
pub struct Args {
    /// Input image size in pixels (square) [default: 32, generators 256].
    #[arg(long)]
    image_size: Option<usize>,
    /// Patch size in pixels [default: 4, generators 16].
    #[arg(long)]
    patch_size: Option<usize>,
    /// Number of classes of the head.
    #[arg(long, default_value_t = 10)]
    num_classes: usize,
    /// Model preset.
    #[arg(long, value_enum, default_value_t = PresetArg::Default)]
    preset: PresetArg,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// List the image-to-image generators (ViTUnet, SPEC §4) instead of the
    /// classifiers; `--image-size` and `--patch-size` then default to 256 and 16.
    #[arg(long, conflicts_with_all = ["preset", "num_classes"])]
    generators: bool,
}

/// "5.67M" style, as the paper's Table 1.
fn human(n: usize) -> String {
    format!("{:.2}M", n as f64 / 1e6)
}

pub fn run(args: Args) -> vitlab::Result<()> {
    if args.generators {
        return generators(&args);
    }
    let (image_size, patch_size) = (args.image_size.unwrap_or(32), args.patch_size.unwrap_or(4));
    let preset = Preset::from(args.preset);
    let mut rows = Vec::new();
    for &block in BlockVariant::ALL {
        for &size in Size::ALL {
            let config = ModelConfig::new(block, size)
                .with_preset(preset)
                .with_image(image_size, patch_size)
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
            println!("preset {}, {} px, patch {}, {} classes", preset, image_size, patch_size, args.num_classes);
            println!("{}", render_table(&header, &table));
        }
        Format::Csv => {
            println!("{}", header.join(","));
            for (c, size) in &rows {
                println!("{},{},{},{},{},{},{}", c.block, size, c.depth, c.dim, c.mlp_dim, c.heads, param_count(c));
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
                        "num_classes": c.num_classes, "preset": preset,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&list).expect("json"));
        }
    }
    Ok(())
}

/// The paper's generators.
fn generators(args: &Args) -> vitlab::Result<()> {
    let (image, patch) = (args.image_size.unwrap_or(256), args.patch_size.unwrap_or(16));
    let mut rows = Vec::new();
    for (name, config) in [("vitunet", VitUnetConfig::vitunet()), ("vit22bunet", VitUnetConfig::vit22bunet())] {
        let config = config.with_image(image, patch);
        config.validate()?;
        let params = config.param_count();
        rows.push((name, config, params));
    }
    let header = ["generator", "block", "depth", "width", "mlp", "heads", "refiner", "params"];
    // Every column; `params` as the caller formats it.
    let fields = |name: &str, c: &VitUnetConfig, params: String| {
        vec![
            name.to_string(),
            c.block.to_string(),
            c.depth.to_string(),
            c.dim.to_string(),
            c.mlp_dim.to_string(),
            c.heads.to_string(),
            format!("{}x{}", c.refiner_blocks(), 2 * c.refiner_width),
            params,
        ]
    };
    match args.format {
        Format::Table => {
            let table: Vec<Vec<String>> = rows.iter().map(|(n, c, p)| fields(n, c, human(*p))).collect();
            println!("generators (ViTUnet), {image} px, patch {patch}, refiner: residual blocks x channels");
            println!("{}", render_table(&header, &table));
        }
        Format::Csv => {
            println!("{}", header.join(","));
            for (n, c, p) in &rows {
                println!("{}", fields(n, c, p.to_string()).join(","));
            }
        }
        Format::Json => {
            let list: Vec<serde_json::Value> = rows
                .iter()
                .map(|(name, c, params)| serde_json::json!({ "generator": name, "config": c, "params": params }))
                .collect();
            println!("{}", serde_json::to_string_pretty(&list).expect("json"));
        }
    }
    Ok(())
}
