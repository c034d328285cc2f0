//! `vitlab fid`: FID and KID of two image folders (or saved features) with the
//! real FID Inception network, as pytorch-fid, torch-fidelity and torchmetrics
//! compute them (docs/FID.md).

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vitlab::backend::Backend;
use vitlab::metrics::features::{list_images, Extractor, Resize, SavedFeatures};
use vitlab::metrics::fid::frechet_distance;
use vitlab::metrics::kid::{self, Kid};
use vitlab::models::inception::Tap;
use vitlab::Error;

use super::{BackendArg, BACKEND_HELP};

#[derive(clap::Args)]
#[command(after_help = "Weights: --weights PATH, else $VITLAB_FID_WEIGHTS, else \
~/.cache/vitlab/fid/pt_inception-2015-12-05-vitlab.safetensors (tools/convert_fid_inception.py writes it), \
else pytorch-fid's ~/.cache/torch/hub/checkpoints/pt_inception-2015-12-05-6726825d.pth. See docs/FID.md.")]
pub struct Args {
    /// Real images: a folder (searched recursively for .png/.jpg/.jpeg) or a file --save-stats wrote.
    real: PathBuf,
    /// Generated images: a folder or a saved features file. Omit it with --save-stats.
    fake: Option<PathBuf>,
    /// Feature layer, by its channels. Default: the saved file's, else 2048.
    #[arg(long, value_enum)]
    feature: Option<FeatureArg>,
    /// Preprocessing: how images are resized to 299 x 299 (docs/FID.md). Default: the saved
    /// file's, else pytorch-fid.
    #[arg(long, value_enum)]
    preprocess: Option<PreprocessArg>,
    /// The Inception weights file (safetensors from tools/convert_fid_inception.py, or pytorch-fid's .pth).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Images per forward pass.
    #[arg(long, default_value_t = 50)]
    batch: usize,
    #[arg(long, value_enum, default_value_t = BackendArg::Flex, help = BACKEND_HELP)]
    backend: BackendArg,
    /// Write the features of REAL to this file (safetensors) and stop; pass the file later instead of the folder.
    #[arg(long)]
    save_stats: Option<PathBuf>,
    /// KID: number of random subsets (torch-fidelity's default 100).
    #[arg(long, default_value_t = kid::DEFAULT_SUBSETS)]
    kid_subsets: usize,
    /// KID: images per subset (default 1000, shrunk to the smaller set).
    #[arg(long, default_value_t = kid::DEFAULT_SUBSET_SIZE)]
    kid_subset_size: usize,
    /// Seed of KID's subsets.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = TextOrJson::Text)]
    format: TextOrJson,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TextOrJson {
    /// Lines of text.
    Text,
    /// Pretty-printed JSON.
    Json,
}

/// `--feature`: a feature layer of the Inception network ([`Tap`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FeatureArg {
    /// After the first max-pool (torchmetrics' `feature=64`, the paper's FID).
    #[value(name = "64")]
    F64,
    /// After the second max-pool.
    #[value(name = "192")]
    F192,
    /// After Mixed_6e (before the auxiliary classifier).
    #[value(name = "768")]
    F768,
    /// The final average pool: standard FID.
    #[value(name = "2048")]
    F2048,
}

impl From<FeatureArg> for Tap {
    fn from(f: FeatureArg) -> Self {
        match f {
            FeatureArg::F64 => Tap::F64,
            FeatureArg::F192 => Tap::F192,
            FeatureArg::F768 => Tap::F768,
            FeatureArg::F2048 => Tap::F2048,
        }
    }
}

/// `--preprocess`: [`Resize`] with help per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PreprocessArg {
    /// pytorch-fid's: bilinear, half-pixel centres, no antialiasing.
    PytorchFid,
    /// torch-fidelity's (= torchmetrics with antialias=False): TensorFlow 1's bilinear resize.
    TorchFidelity,
    /// torchmetrics' default (antialias=True; the paper's FID): bilinear with antialiasing.
    Torchmetrics,
}

impl From<PreprocessArg> for Resize {
    fn from(p: PreprocessArg) -> Self {
        match p {
            PreprocessArg::PytorchFid => Resize::PytorchFid,
            PreprocessArg::TorchFidelity => Resize::TorchFidelity,
            PreprocessArg::Torchmetrics => Resize::Torchmetrics,
        }
    }
}

/// One side's features, from a folder or a saved file.
struct Side {
    path: PathBuf,
    saved: SavedFeatures,
}

pub fn run(args: Args) -> vitlab::Result<()> {
    let explicit_resize = args.preprocess.map(Resize::from);
    let explicit_tap = args.feature.map(Tap::from);
    if args.save_stats.is_some() && args.fake.is_some() {
        return Err(Error::usage("--save-stats", "takes one input (REAL) whose features it saves; drop FAKE"));
    }
    if args.save_stats.is_none() && args.fake.is_none() {
        return Err(Error::usage("FAKE", "missing: give two inputs to compare, or one with --save-stats FILE"));
    }
    let inputs: Vec<&Path> = std::iter::once(args.real.as_path()).chain(args.fake.as_deref()).collect();
    for p in &inputs {
        if !p.exists() {
            return Err(Error::data(*p, "no such file or folder"));
        }
    }
    // Saved files first: they fix the feature layer and preprocessing unless given.
    let mut saved: Vec<Option<SavedFeatures>> = Vec::new();
    for p in &inputs {
        saved.push(if p.is_file() { Some(SavedFeatures::load(p)?) } else { None });
    }
    let tap = explicit_tap.or_else(|| saved.iter().flatten().map(|s| s.tap).next()).unwrap_or(Tap::F2048);
    let resize = explicit_resize.or_else(|| saved.iter().flatten().map(|s| s.resize).next()).unwrap_or(Resize::PytorchFid);
    for (p, s) in inputs.iter().zip(&saved) {
        if let Some(s) = s {
            if s.tap != tap {
                return Err(Error::data(
                    *p,
                    format!(
                        "holds {}-feature statistics, but {tap} features were asked for (--feature or the other input)",
                        s.tap
                    ),
                ));
            }
            if s.resize != resize {
                return Err(Error::data(
                    *p,
                    format!("was made with {} preprocessing, not {resize} (--preprocess or the other input)", s.resize),
                ));
            }
        }
    }

    // Folders: list them all first (an empty one is an error before any work), then run the network.
    let mut listed = Vec::new();
    for (p, s) in inputs.iter().zip(&saved) {
        listed.push(if s.is_none() { Some(list_images(p)?) } else { None });
    }
    let mut extractor: Option<Extractor> = None;
    let mut sides = Vec::new();
    for ((p, s), files) in inputs.iter().zip(saved).zip(listed) {
        let saved = match (s, files) {
            (Some(s), _) => s,
            (None, files) => {
                if extractor.is_none() {
                    let device = Backend::from(args.backend).device()?;
                    extractor = Some(Extractor::load(args.weights.as_deref(), device, resize, args.batch)?);
                }
                let ex = extractor.as_ref().expect("loaded above");
                let features = features_of(ex, p, &files.expect("listed above"), tap, args.quiet)?;
                SavedFeatures { tap, resize, count: features.len() / tap.dim(), features }
            }
        };
        sides.push(Side { path: p.to_path_buf(), saved });
    }

    if let Some(out) = &args.save_stats {
        sides[0].saved.save(out)?;
        eprintln!(
            "saved {} {}-d features ({} preprocessing) of {} to {}",
            sides[0].saved.count,
            tap,
            resize,
            sides[0].path.display(),
            out.display()
        );
        return Ok(());
    }

    let (real, fake) = (&sides[0], &sides[1]);
    let fid = real
        .saved
        .stats("the real images")
        .and_then(|a| fake.saved.stats("the generated images").map(|b| (a, b)))
        .and_then(|(a, b)| frechet_distance(&a, "the real images", &b, "the generated images"));
    let device = Backend::from(args.backend).device()?;
    let kid = kid::kid(
        &real.saved.features,
        &fake.saved.features,
        tap.dim(),
        args.kid_subsets,
        args.kid_subset_size,
        args.seed,
        ("the real images", "the generated images"),
        &device,
    );
    // Neither metric: the first error is the command's.
    let (fid, kid) = match (fid, kid) {
        (Err(e), Err(_)) => return Err(e),
        (f, k) => (f, k),
    };
    print_result(&args, tap, resize, real, fake, &fid, &kid);
    Ok(())
}

fn features_of(ex: &Extractor, path: &Path, files: &[PathBuf], tap: Tap, quiet: bool) -> vitlab::Result<Vec<f32>> {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if quiet {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} images, {per_sec}, ETA {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_message(format!("Inception features of {}", path.display()));
    let started = std::time::Instant::now();
    let features = ex.files(files, tap, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    if !quiet {
        let n = features.len() / tap.dim();
        let s = started.elapsed().as_secs_f64();
        eprintln!("{}: {n} images in {s:.1} s ({:.1} images/s)", path.display(), n as f64 / s.max(1e-9));
    }
    Ok(features)
}

fn print_result(
    args: &Args,
    tap: Tap,
    resize: Resize,
    real: &Side,
    fake: &Side,
    fid: &vitlab::Result<f64>,
    kid: &vitlab::Result<Kid>,
) {
    match args.format {
        TextOrJson::Json => {
            let j = serde_json::json!({
                "fid": fid.as_ref().ok(),
                "fid_error": fid.as_ref().err().map(|e| e.to_string()),
                "kid": kid.as_ref().ok(),
                "kid_error": kid.as_ref().err().map(|e| e.to_string()),
                "feature": tap.dim(),
                "preprocess": resize.name(),
                "real": {"path": real.path, "count": real.saved.count},
                "fake": {"path": fake.path, "count": fake.saved.count},
            });
            println!("{}", serde_json::to_string_pretty(&j).expect("json"));
        }
        TextOrJson::Text => {
            match fid {
                Ok(v) => println!("FID: {v:.6}"),
                Err(e) => println!("FID: not computed: {e}"),
            }
            match kid {
                Ok(k) if k.subset_size == real.saved.count && k.subset_size == fake.saved.count => {
                    println!("KID: {:.6} (the whole sets of {}: every subset is the same)", k.mean, k.subset_size)
                }
                Ok(k) => println!("KID: {:.6} ± {:.6} ({} subsets of {})", k.mean, k.std, k.subsets, k.subset_size),
                Err(e) => println!("KID: not computed: {e}"),
            }
            println!("features: {tap} ({resize} preprocessing)");
            println!("real: {} images ({})", real.saved.count, real.path.display());
            println!("fake: {} images ({})", fake.saved.count, fake.path.display());
        }
    }
    if args.format == TextOrJson::Json {
        for (name, e) in [("FID", fid.as_ref().err()), ("KID", kid.as_ref().err())] {
            if let Some(e) = e {
                eprintln!("warning: {name} not computed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_mirrors;
    use vitlab::metrics::features::Resize;
    use vitlab::models::inception::Tap;

    #[test]
    fn feature_and_preprocess_spell_the_library_names() {
        assert_mirrors::<super::FeatureArg, Tap>(Tap::ALL.len(), |s| Tap::parse("--feature", s).ok());
        assert_mirrors::<super::PreprocessArg, Resize>(Resize::ALL.len(), |s| Resize::parse("--preprocess", s).ok());
    }
}
