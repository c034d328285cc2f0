//! `vitlab data`: inspect (`info`), fetch (`download`) and time (`bench`)
//! datasets; make an unpaired folder from two classes of one (`unpaired`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use vitlab::data::autoaugment::Op;
use vitlab::data::download;
use vitlab::data::loader::{Loader, LoaderConfig};
use vitlab::data::{make_unpaired, open_with, Augment, CacheStatus, Dataset, Normalize, OpenOptions, UnpairedOptions};

use super::render_table;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: DataCommand,
}

#[derive(clap::Subcommand)]
enum DataCommand {
    /// What a dataset path holds: format, splits, counts per class, image size, checksum.
    Info {
        /// A CIFAR archive or folder, an image folder, an unpaired (CycleGAN) folder or Tiny-ImageNet.
        path: PathBuf,
        #[arg(long, value_enum, default_value_t = InfoFormat::Table)]
        format: InfoFormat,
        #[command(flatten)]
        open: OpenArgs,
    },
    /// Download a dataset from its official URL (resumable, checksum-verified).
    Download {
        /// Dataset name; `--list` shows them all.
        #[arg(required_unless_present = "list")]
        name: Option<String>,
        /// Folder to download into.
        #[arg(long, default_value = "data")]
        dir: PathBuf,
        /// List the known datasets with their URLs and checksums.
        #[arg(long)]
        list: bool,
    },
    /// Time the batch loader alone on a dataset (augmented train batches).
    Bench {
        path: PathBuf,
        #[arg(long, default_value_t = 128)]
        batch: usize,
        /// Loader worker threads (0 = build batches on the calling thread).
        #[arg(long, default_value_t = 2)]
        workers: usize,
        /// How long to run.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Augmentation preset.
        #[arg(long, value_enum, default_value_t = AugmentPreset::Standard)]
        augment: AugmentPreset,
        /// Normalisation preset.
        #[arg(long, value_enum, default_value_t = NormalizeArg::Cifar)]
        normalize: NormalizeArg,
        /// Take the augmentation, normalisation and label smoothing of this experiment config
        /// instead of --augment / --normalize (e.g. configs/strong-cifar10.toml).
        #[arg(long, conflicts_with_all = ["augment", "normalize"])]
        config: Option<PathBuf>,
        #[command(flatten)]
        open: OpenArgs,
    },
    /// Write a grid of training images as the loader delivers them under a config
    /// (augmentations, Mixup/CutMix, erasing; shown without the normalisation), labels printed.
    Preview {
        /// The dataset (default: the config's data.path).
        path: Option<PathBuf>,
        /// The experiment config whose [augment] section is shown.
        #[arg(long)]
        config: PathBuf,
        /// `key=value` overrides of the config (repeatable).
        #[arg(long = "set")]
        set: Vec<String>,
        /// The PNG to write.
        #[arg(long)]
        out: PathBuf,
        /// How many images (in columns of 8).
        #[arg(long, default_value_t = 32)]
        count: usize,
        /// Which epoch's images (the draws depend on it).
        #[arg(long, default_value_t = 0)]
        epoch: u64,
        #[command(flatten)]
        open: OpenArgs,
    },
    /// Apply one policy operation at a given magnitude to one image file (torchvision's semantics).
    Augment {
        /// A JPEG or PNG file.
        image: PathBuf,
        /// The operation (torchvision's, in snake case).
        #[arg(long, value_enum)]
        op: OpArg,
        /// The operation's own value: shear factor, pixels, degrees, enhancement factor minus 1,
        /// bits kept, solarize threshold (ignored by identity, autocontrast, equalize, invert).
        #[arg(long, allow_hyphen_values = true, default_value_t = 0.0)]
        magnitude: f32,
        /// The PNG to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Make a CycleGAN-style unpaired folder (trainA/ trainB/ testA/ testB/ of PNGs) from two classes of a labelled dataset.
    Unpaired {
        /// A CIFAR archive or folder, an image folder or Tiny-ImageNet.
        source: PathBuf,
        /// The class of domain A, exactly as `vitlab data info` lists it.
        #[arg(long)]
        a: String,
        /// The class of domain B.
        #[arg(long)]
        b: String,
        /// The folder to make; must not exist, or be empty.
        #[arg(long)]
        out: PathBuf,
        /// Resize every image to N x N (bilinear); default: keep the source size.
        #[arg(long, value_name = "N")]
        size: Option<usize>,
        /// At most N training images per domain, a seeded random subset (0 = all).
        #[arg(long, value_name = "N", default_value_t = 0)]
        limit_train: usize,
        /// At most N test images per domain, a seeded random subset (0 = all).
        #[arg(long, value_name = "N", default_value_t = 0)]
        limit_test: usize,
        /// Seed of the --limit-train / --limit-test subsets.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Keep the source's decoded-dataset cache here (default: beside the data).
        #[arg(long)]
        cache_dir: Option<PathBuf>,
        /// Neither read nor write the source's cache.
        #[arg(long)]
        no_cache: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum InfoFormat {
    /// Lines of text and a table of classes.
    Table,
    /// Pretty-printed JSON.
    Json,
}

/// `data bench --augment`: a fixed augmentation ([`Augment`]'s constructors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AugmentPreset {
    /// Random crop with 4 px padding and a horizontal flip with probability 0.5.
    Standard,
    /// The paper's: horizontal and vertical flips, each with probability 0.33.
    Paper,
    /// No augmentation.
    None,
}

impl From<AugmentPreset> for Augment {
    fn from(a: AugmentPreset) -> Self {
        match a {
            AugmentPreset::Standard => Augment::standard(),
            AugmentPreset::Paper => Augment::paper(),
            AugmentPreset::None => Augment::none(),
        }
    }
}

/// `data bench --normalize`: the named [`Normalize`] presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum NormalizeArg {
    /// CIFAR's mean and std (the paper's).
    Cifar,
    /// ImageNet's mean and std.
    Imagenet,
    /// To [-1, 1]: mean 0.5, std 0.5.
    MinusOneOne,
}

impl From<NormalizeArg> for Normalize {
    fn from(n: NormalizeArg) -> Self {
        match n {
            NormalizeArg::Cifar => Normalize::Cifar,
            NormalizeArg::Imagenet => Normalize::Imagenet,
            NormalizeArg::MinusOneOne => Normalize::MinusOneOne,
        }
    }
}

/// `data augment --op`: a policy operation ([`Op`]) with the meaning of its `--magnitude`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OpArg {
    /// The image unchanged.
    Identity,
    /// Horizontal shear; magnitude: the shear factor.
    #[value(name = "shear_x")]
    ShearX,
    /// Vertical shear; magnitude: the shear factor.
    #[value(name = "shear_y")]
    ShearY,
    /// Horizontal shift; magnitude: pixels.
    #[value(name = "translate_x")]
    TranslateX,
    /// Vertical shift; magnitude: pixels.
    #[value(name = "translate_y")]
    TranslateY,
    /// Rotation; magnitude: degrees.
    Rotate,
    /// Brightness; magnitude: the enhancement factor minus 1.
    Brightness,
    /// Saturation; magnitude: the enhancement factor minus 1.
    Color,
    /// Contrast; magnitude: the enhancement factor minus 1.
    Contrast,
    /// Sharpness; magnitude: the enhancement factor minus 1.
    Sharpness,
    /// Fewer bits per channel; magnitude: the bits kept.
    Posterize,
    /// Inverts pixels above a threshold; magnitude: the threshold.
    Solarize,
    /// Stretches each channel to the full range.
    #[value(name = "autocontrast")]
    AutoContrast,
    /// Equalises each channel's histogram.
    Equalize,
    /// Inverts every pixel.
    Invert,
}

impl From<OpArg> for Op {
    fn from(o: OpArg) -> Self {
        match o {
            OpArg::Identity => Op::Identity,
            OpArg::ShearX => Op::ShearX,
            OpArg::ShearY => Op::ShearY,
            OpArg::TranslateX => Op::TranslateX,
            OpArg::TranslateY => Op::TranslateY,
            OpArg::Rotate => Op::Rotate,
            OpArg::Brightness => Op::Brightness,
            OpArg::Color => Op::Color,
            OpArg::Contrast => Op::Contrast,
            OpArg::Sharpness => Op::Sharpness,
            OpArg::Posterize => Op::Posterize,
            OpArg::Solarize => Op::Solarize,
            OpArg::AutoContrast => Op::AutoContrast,
            OpArg::Equalize => Op::Equalize,
            OpArg::Invert => Op::Invert,
        }
    }
}

#[derive(clap::Args)]
struct OpenArgs {
    /// Keep the decoded-dataset cache here (default: beside the data).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Neither read nor write the cache.
    #[arg(long)]
    no_cache: bool,
    /// Resize every image to this square size at decode.
    #[arg(long)]
    image_size: Option<usize>,
}

impl OpenArgs {
    fn options(&self) -> OpenOptions {
        OpenOptions { cache: !self.no_cache, cache_dir: self.cache_dir.clone(), image_size: self.image_size, threads: 0 }
    }
}

pub fn run(args: Args) -> vitlab::Result<()> {
    match args.command {
        DataCommand::Info { path, format, open } => info(path, format, &open),
        DataCommand::Download { name, dir, list } => {
            if list {
                list_remotes();
                Ok(())
            } else {
                fetch(name.unwrap_or_default(), dir)
            }
        }
        DataCommand::Bench { path, batch, workers, seconds, augment, normalize, config, open } => match config {
            Some(c) => bench_config(path, batch, workers, seconds, &c, &open),
            None => bench(path, batch, workers, seconds, augment.into(), normalize.into(), &open),
        },
        DataCommand::Preview { path, config, set, out, count, epoch, open } => {
            super::data_preview::preview(path, &config, &set, &out, count, epoch, &open.options())
        }
        DataCommand::Augment { image, op, magnitude, out } => {
            let op = Op::from(op);
            vitlab::train::preview::augment_file(&image, op.name(), magnitude, &out)?;
            println!("{} ({op} at {magnitude}) -> {}", image.display(), out.display());
            Ok(())
        }
        DataCommand::Unpaired { source, a, b, out, size, limit_train, limit_test, seed, cache_dir, no_cache } => {
            let options = UnpairedOptions { a, b, size, limit_train, limit_test, seed, threads: 0 };
            let open = OpenOptions { cache: !no_cache, cache_dir, image_size: None, threads: 0 };
            unpaired(&source, &out, &options, &open)
        }
    }
}

fn unpaired(source: &Path, out: &Path, options: &UnpairedOptions, open: &OpenOptions) -> vitlab::Result<()> {
    let t = Instant::now();
    let s = make_unpaired(source, out, options, open)?;
    let secs = t.elapsed().as_secs_f64();
    println!("source   {}", s.source);
    let rows: Vec<Vec<String>> =
        s.folders.iter().map(|f| vec![f.name.clone(), f.class.clone(), f.count.to_string(), f.available.to_string()]).collect();
    println!("{}", render_table(&["folder", "class", "images", "in source"], &rows));
    let how = if (s.height, s.width) == (s.source_height, s.source_width) {
        "the source's size".to_string()
    } else {
        format!("resized from {}x{}, bilinear", s.source_height, s.source_width)
    };
    println!("size     {}x{} ({how})", s.height, s.width);
    for n in &s.notes {
        println!("note     {n}");
    }
    println!("wrote    {} in {secs:.2} s", s.out.display());
    Ok(())
}

fn info(path: PathBuf, format: InfoFormat, open: &OpenArgs) -> vitlab::Result<()> {
    let t = Instant::now();
    let ds = open_with(&path, &open.options())?;
    let secs = t.elapsed().as_secs_f64();
    if format == InfoFormat::Json {
        let mut v = ds.info_json();
        v["open_seconds"] = serde_json::json!(secs);
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    let t0 = &ds.train;
    println!("path         {}", ds.source.display());
    println!("format       {}", ds.format);
    println!("image size   {}x{}x{} (channels x height x width)", t0.channels, t0.height, t0.width);
    for (name, set) in ds.splits() {
        println!("{:<12} {} images", format!("{name}"), set.len());
    }
    println!("classes      {}", t0.classes.len());
    if let Some(c) = &ds.coarse {
        println!("coarse       {} superclasses", c.classes.len());
    }
    println!("checksum     sha256:{}", ds.checksum);
    println!("fingerprint  {}", ds.fingerprint);
    let cache = match &ds.cache {
        CacheStatus::Disabled => "disabled".to_string(),
        CacheStatus::Hit(p) => format!("read from {}", p.display()),
        CacheStatus::Built { path, replaced: None } => format!("decoded and written to {}", path.display()),
        CacheStatus::Built { path, replaced: Some(why) } => {
            format!("decoded and written to {} (previous cache not used: {why})", path.display())
        }
        CacheStatus::Unwritten(why) => format!("decoded; no cache written: {why}"),
    };
    println!("cache        {cache}");
    println!("opened in    {secs:.3} s");
    for n in &ds.notes {
        println!("note         {n}");
    }
    let splits = ds.splits();
    let counts: Vec<Vec<usize>> = splits.iter().map(|(_, s)| Dataset::class_counts(s)).collect();
    let mut header = vec!["class"];
    header.extend(splits.iter().map(|(n, _)| *n));
    let rows: Vec<Vec<String>> = t0
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut row = vec![c.clone()];
            row.extend(counts.iter().map(|cs| cs[i].to_string()));
            row
        })
        .collect();
    println!();
    println!("{}", render_table(&header, &rows));
    Ok(())
}

fn list_remotes() {
    let rows: Vec<Vec<String>> = download::catalog()
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.size.map(|s| format!("{:.0} MB", s as f64 / 1e6)).unwrap_or_else(|| "?".into()),
                r.url.clone(),
                r.checksum.to_string(),
            ]
        })
        .collect();
    println!("{}", render_table(&["name", "size", "url", "checksum"], &rows));
}

fn fetch(name: String, dir: PathBuf) -> vitlab::Result<()> {
    let remote = download::find(&name)?;
    eprintln!("{}: {} -> {}", remote.name, remote.url, dir.join(&remote.file).display());
    eprintln!("checksum: {} ({})", remote.checksum, remote.checksum_source);
    let mut last = Instant::now();
    let mut progress = |done: u64, total: Option<u64>| {
        if last.elapsed().as_secs_f64() >= 1.0 {
            last = Instant::now();
            match total {
                Some(t) if t > 0 => {
                    eprintln!("  {:.1} / {:.1} MB ({:.0}%)", done as f64 / 1e6, t as f64 / 1e6, 100.0 * done as f64 / t as f64)
                }
                _ => eprintln!("  {:.1} MB", done as f64 / 1e6),
            }
        }
    };
    let path = download::download(&remote, &dir, &mut progress)?;
    println!("{}", path.display());
    eprintln!("verified; open it with `vitlab data info {}`", path.display());
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn bench(
    path: PathBuf,
    batch: usize,
    workers: usize,
    seconds: f64,
    augment: Augment,
    normalize: Normalize,
    open: &OpenArgs,
) -> vitlab::Result<()> {
    if batch == 0 {
        return Err(vitlab::Error::usage("--batch", "must be positive"));
    }
    let t = Instant::now();
    let ds = open_with(&path, &open.options())?;
    eprintln!("{} (opened in {:.3} s)", ds.summary(), t.elapsed().as_secs_f64());
    let size = ds.train.height.max(ds.train.width);
    let config = LoaderConfig {
        batch_size: batch,
        image_size: size,
        augment,
        normalize,
        shuffle: true,
        drop_last: false,
        workers,
        seed: 0,
        label_smoothing: 0.0,
        load_size: 0,
        epoch_images: 0,
    };
    run_bench(ds, config, seconds)
}

/// `data bench --config`: the loader with an experiment's augmentation.
fn bench_config(path: PathBuf, batch: usize, workers: usize, seconds: f64, config: &Path, open: &OpenArgs) -> vitlab::Result<()> {
    let c = vitlab::config::ExperimentConfig::load(Some(config), &[])?;
    if batch == 0 {
        return Err(vitlab::Error::usage("--batch", "must be positive"));
    }
    let ds = open_with(&path, &open.options())?;
    eprintln!("{}; [augment] of {}", ds.summary(), config.display());
    let loader = LoaderConfig {
        batch_size: batch,
        image_size: c.model.image_size,
        augment: c.augment.clone(),
        normalize: c.data.normalize.clone(),
        shuffle: true,
        drop_last: true,
        workers,
        seed: c.seed,
        label_smoothing: c.loss.label_smoothing,
        load_size: 0,
        epoch_images: 0,
    };
    run_bench(ds, loader, seconds)
}

fn run_bench(ds: Dataset, config: LoaderConfig, seconds: f64) -> vitlab::Result<()> {
    let (batch, workers, size) = (config.batch_size, config.workers, config.image_size);
    let n = ds.train.len();
    let loader = Loader::new(Arc::new(ds.train), (0..n).collect(), config)?;
    let m = vitlab::bench::loader_throughput(&loader, seconds);
    println!(
        "{:.0} images/s ({} images in {} batches of {batch}, {size}x{size}, {workers} workers, {:.2} s)",
        m.images_per_second(),
        m.images,
        m.batches,
        m.seconds
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_mirrors;
    use vitlab::data::autoaugment::Op;
    use vitlab::data::Normalize;

    #[test]
    fn op_and_normalize_spell_the_library_names() {
        assert_mirrors::<super::OpArg, Op>(Op::ALL.len(), |s| s.parse().ok());
        // Normalize's presets (not `custom`), by their config spelling.
        assert_mirrors::<super::NormalizeArg, Normalize>(3, |s| serde_json::from_value(serde_json::json!(s)).ok());
    }
}
