//! `vitlab translate`: image files or folders through one generator of a CycleGAN run.

use std::path::PathBuf;

use vitlab::backend::Backend;
use vitlab::metrics::features::list_images;
use vitlab::train::cyclegan::{load_generator, translate_files, translate_page, Direction, PageInfo};
use vitlab::Error;

use super::{value_name, BackendArg, BACKEND_HELP};

#[derive(clap::Args)]
pub struct Args {
    /// A CycleGAN run directory (its best checkpoint, else latest) or checkpoint file.
    run: PathBuf,
    /// Image files or folders (searched recursively for .png/.jpg/.jpeg).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Which generator.
    #[arg(long, value_enum)]
    direction: DirectionArg,
    /// Folder for the translated PNGs (same names as the inputs).
    #[arg(long)]
    out: PathBuf,
    /// Side of the written images (default: the generator's size).
    #[arg(long)]
    size: Option<usize>,
    /// Also write OUT/index.html, pytorch-CycleGAN's test page: each input, its
    /// translation and the translation's reconstruction by the other generator.
    #[arg(long)]
    html: bool,
    /// Translate only the first N images (in the order given, folders sorted).
    #[arg(long)]
    num: Option<usize>,
    #[arg(long, value_enum, default_value_t = BackendArg::Flex, help = BACKEND_HELP)]
    backend: BackendArg,
}

/// `--direction`: [`Direction`] with help per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DirectionArg {
    /// Domain A to domain B (the generator G_A).
    #[value(name = "a2b")]
    AToB,
    /// Domain B to domain A (the generator G_B).
    #[value(name = "b2a")]
    BToA,
}

impl From<DirectionArg> for Direction {
    fn from(d: DirectionArg) -> Self {
        match d {
            DirectionArg::AToB => Direction::AToB,
            DirectionArg::BToA => Direction::BToA,
        }
    }
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let direction = Direction::from(args.direction);
    if args.size == Some(0) {
        return Err(Error::usage("--size", "must be at least 1"));
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
    if let Some(n) = args.num {
        if n == 0 {
            return Err(Error::usage("--num", "must be at least 1"));
        }
        files.truncate(n);
    }
    let device = Backend::from(args.backend).device()?;
    let (g, config, checkpoint) = load_generator(&args.run, direction, &device)?;
    let started = std::time::Instant::now();
    let count = if args.html {
        let other = match direction {
            Direction::AToB => Direction::BToA,
            Direction::BToA => Direction::AToB,
        };
        let (back, _, _) = load_generator(&args.run, other, &device)?;
        let info = PageInfo { checkpoint: &checkpoint, direction };
        let page = translate_page(&g, &back, &config, &files, &args.out, args.size, info, &device)?;
        eprintln!("test page: {}", page.display());
        files.len()
    } else {
        translate_files(&g, &config, &files, &args.out, args.size, &device)?.len()
    };
    eprintln!(
        "translated {} image(s) {} with {} in {:.1} s -> {}",
        count,
        value_name(&args.direction),
        checkpoint.display(),
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn direction_spells_the_library_names() {
        use vitlab::train::cyclegan::Direction;
        super::super::tests::assert_mirrors::<super::DirectionArg, Direction>(2, |s| Direction::parse(s).ok());
    }
}
