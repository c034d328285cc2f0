//! `vitlab translate`: image files or folders through one generator of a CycleGAN run.

use std::path::PathBuf;

use vitlab::backend::Backend;
use vitlab::metrics::features::list_images;
use vitlab::train::cyclegan::{load_generator, translate_files, Direction};
use vitlab::Error;

use super::parse_named_backend;

#[derive(clap::Args)]
pub struct Args {
    /// A CycleGAN run directory (its best checkpoint, else latest) or checkpoint file.
    run: PathBuf,
    /// Image files or folders (searched recursively for .png/.jpg/.jpeg).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// a2b (the A -> B generator, G_A) or b2a (G_B).
    #[arg(long)]
    direction: String,
    /// Folder for the translated PNGs (same names as the inputs).
    #[arg(long)]
    out: PathBuf,
    /// Side of the written images (default: the generator's size).
    #[arg(long)]
    size: Option<usize>,
    #[arg(long, default_value = "flex", value_parser = parse_named_backend)]
    backend: Backend,
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let direction = Direction::parse(&args.direction)?;
    if args.size == Some(0) {
        return Err(Error::config("--size", "must be at least 1"));
    }
    let mut files = Vec::new();
    for input in &args.inputs {
        if input.is_dir() {
            files.extend(list_images(input)?);
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            return Err(Error::data(input, "no such file or folder"));
        }
    }
    let device = args.backend.device()?;
    let (g, config, checkpoint) = load_generator(&args.run, direction, &device)?;
    let started = std::time::Instant::now();
    let written = translate_files(&g, &config, &files, &args.out, args.size, &device)?;
    eprintln!(
        "translated {} image(s) {} with {} in {:.1} s -> {}",
        written.len(),
        args.direction,
        checkpoint.display(),
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}
