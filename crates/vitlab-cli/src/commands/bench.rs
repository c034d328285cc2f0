//! `vitlab bench`: training and inference throughput per backend, against PyTorch.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use vitlab::backend::Backend;
use vitlab::bench::{self, Measurement, Mode};
use vitlab::config::Precision;
use vitlab::data::loader::{Loader, LoaderConfig};
use vitlab::data::{Augment, Normalize};
use vitlab::models::{BlockVariant, ModelConfig, Size};
use vitlab::Error;

use clap::builder::PossibleValue;
use clap::ValueEnum;
use vitlab::models::DiscriminatorKind;

use super::{render_table, value_name, BackendArg, Format};

#[derive(clap::Args)]
pub struct Args {
    /// Model as BLOCK-SIZE, e.g. vit-tiny, vit22b-small, vit22b-ln-tiny; or `inception-fid`:
    /// FID feature extraction (uint8 images of --image-size, resized to 299, 2048-d features;
    /// inference only, batch --infer-batch, 50 as pytorch-fid) against pytorch-fid's;
    /// or `vitunet-SIZE` / `vit22bunet-SIZE`: one CycleGAN iteration (two generators, two
    /// discriminators, forward, backward, four Adam steps) on --batch images per domain.
    #[arg(long, default_value = "vit-tiny")]
    model: String,
    #[arg(long, default_value_t = 32)]
    image_size: usize,
    #[arg(long, default_value_t = 4)]
    patch_size: usize,
    #[arg(long, default_value_t = 10)]
    num_classes: usize,
    /// Training batch size.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Inference batch size.
    #[arg(long, default_value_t = 256)]
    infer_batch: usize,
    /// The backends to measure, each in its own process.
    #[arg(long, value_enum, default_value_t = BenchBackend::All)]
    backend: BenchBackend,
    /// Timed steps per measurement (after the warm-up).
    #[arg(long, default_value_t = 10)]
    steps: usize,
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Rounds; each round runs every stack once, alternating, and steps are pooled.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Only this measurement (default: both, or the only one the model has).
    #[arg(long, value_enum)]
    only: Option<ModeArg>,
    /// Also run the same model in PyTorch (tools/bench_pytorch.py) and print ratios.
    #[arg(long)]
    against_pytorch: bool,
    /// With --against-pytorch: also time `torch.compile(model)` (inductor) as a second
    /// reference row, `pytorch-compile`, and print the ratios to it.
    #[arg(long, requires = "against_pytorch")]
    compile: bool,
    /// fp32, or bf16 mixed precision (vitlab's `precision = "bf16"`, LibTorch backends only;
    /// PyTorch under `torch.autocast(dtype=torch.bfloat16)`).
    #[arg(long, value_enum, default_value_t = PrecisionArg::Fp32)]
    precision: PrecisionArg,
    /// Python with torch (and timm) for --against-pytorch.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Benchmark the data loader alone on this dataset instead of a model.
    #[arg(long)]
    data: Option<PathBuf>,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// CycleGAN bench: the generators' depth (default: the size preset's; a multiple of 6).
    #[arg(long)]
    depth: Option<usize>,
    /// CycleGAN bench: the generators' refiner width.
    #[arg(long, default_value_t = 64)]
    refiner_width: usize,
    /// CycleGAN bench: the discriminators.
    #[arg(long, value_enum, default_value_t = DiscriminatorArg::Patchgan)]
    discriminator: DiscriminatorArg,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Internal: run one measurement in this process and print it as JSON.
    #[arg(long, hide = true)]
    child: Option<String>,
}

/// `--backend`: one backend, or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BenchBackend {
    All,
    One(BackendArg),
}

impl ValueEnum for BenchBackend {
    fn value_variants<'a>() -> &'a [Self] {
        use BackendArg::*;
        &[BenchBackend::All, BenchBackend::One(Flex), BenchBackend::One(Tch), BenchBackend::One(TchCuda), BenchBackend::One(Cuda)]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        match self {
            BenchBackend::All => Some(
                PossibleValue::new("all").help("Every CPU backend compiled into this binary (flex; tch with `--features tch`)"),
            ),
            BenchBackend::One(b) => b.to_possible_value(),
        }
    }
}

/// `--only`: [`Mode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    /// Training steps: forward, backward and the optimiser (--batch images).
    Train,
    /// Inference: forward passes without gradients (--infer-batch images).
    Infer,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Train => Mode::Train,
            ModeArg::Infer => Mode::Infer,
        }
    }
}

/// `--precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PrecisionArg {
    Fp32,
    Bf16,
}

impl From<PrecisionArg> for Precision {
    fn from(p: PrecisionArg) -> Self {
        match p {
            PrecisionArg::Fp32 => Precision::Fp32,
            PrecisionArg::Bf16 => Precision::Bf16,
        }
    }
}

/// bf16 where it runs: the LibTorch backends, and not for the FID network (FID is
/// always computed in fp32).
fn check_precision(args: &Args, backends: &[Backend]) -> vitlab::Result<()> {
    if args.precision == PrecisionArg::Fp32 {
        return Ok(());
    }
    if is_inception(args) {
        return Err(Error::usage("--precision", "FID features are computed in fp32; bench inception-fid with --precision fp32"));
    }
    match backends.iter().find(|b| !matches!(b, Backend::Tch | Backend::TchCuda)) {
        Some(b) => Err(Error::usage(
            "--precision",
            format!("bf16 runs on the LibTorch backends (tch, tch-cuda), not on {b}; pick one with --backend"),
        )),
        None => Ok(()),
    }
}

/// `--discriminator`: [`DiscriminatorKind`] with help per value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DiscriminatorArg {
    /// The 70x70 PatchGAN of pix2pix/CycleGAN.
    Patchgan,
    /// The paper's released discriminator.
    Released,
}

impl From<DiscriminatorArg> for DiscriminatorKind {
    fn from(d: DiscriminatorArg) -> Self {
        match d {
            DiscriminatorArg::Patchgan => DiscriminatorKind::Patchgan,
            DiscriminatorArg::Released => DiscriminatorKind::Released,
        }
    }
}

fn model_config(args: &Args) -> vitlab::Result<ModelConfig> {
    let (block, size) = args
        .model
        .rsplit_once('-')
        .ok_or_else(|| Error::usage("--model", format!("{:?} is not BLOCK-SIZE, e.g. vit-tiny", args.model)))?;
    let block: BlockVariant = block.parse()?;
    let size: Size = size.parse()?;
    let c = ModelConfig::new(block, size).with_image(args.image_size, args.patch_size).with_classes(args.num_classes);
    c.validate()?;
    Ok(c)
}

/// The model benchmarked: a ViT of the zoo, the FID Inception network, or a CycleGAN.
fn is_inception(args: &Args) -> bool {
    args.model == "inception-fid"
}

/// `vitunet-SIZE` / `vit22bunet-SIZE`: the CycleGAN config benchmarked.
fn cyclegan_config(args: &Args) -> vitlab::Result<Option<vitlab::config::ExperimentConfig>> {
    let Some((generator, size)) = args.model.rsplit_once('-') else { return Ok(None) };
    let block = match generator {
        "vitunet" => "vit",
        "vit22bunet" => "vit22b",
        _ => return Ok(None),
    };
    let mut sets = vec![
        "task=cyclegan".to_string(),
        "data.path=bench".into(),
        format!("model.block={block}"),
        format!("model.size={size}"),
        format!("model.image_size={}", args.image_size),
        format!("model.patch_size={}", args.patch_size),
        format!("batch_size={}", args.batch),
        "optim.name=adam".into(),
        "optim.lr=2e-4".into(),
        "optim.betas=[0.5, 0.999]".into(),
        "optim.weight_decay=0.0".into(),
        format!("cyclegan.refiner_width={}", args.refiner_width),
        format!("cyclegan.discriminator={}", DiscriminatorKind::from(args.discriminator)),
    ];
    if let Some(d) = args.depth {
        sets.push(format!("model.depth={d}"));
    }
    vitlab::config::ExperimentConfig::load(None, &sets).map(Some)
}

fn run_child(args: &Args, spec: &str) -> vitlab::Result<()> {
    let (backend, mode) = spec.split_once(':').ok_or_else(|| Error::usage("--child", "expected BACKEND:MODE"))?;
    let backend: Backend = backend.parse()?;
    check_precision(args, &[backend])?;
    let device = backend.device()?;
    let _precision = vitlab::models::precision::autocast(Precision::from(args.precision).compute_dtype());
    let base = bench::peak_rss_kib();
    let (mode, batch, times) = if let Some(c) = cyclegan_config(args)? {
        (Mode::Train, args.batch, bench::time_cyclegan(&c, &device, args.warmup, args.steps)?)
    } else if is_inception(args) {
        let times = bench::time_fid_features(&device, args.infer_batch, args.image_size, args.warmup, args.steps);
        (Mode::Infer, args.infer_batch, times)
    } else {
        let c = model_config(args)?;
        match mode {
            "train" => (Mode::Train, args.batch, bench::time_training(&c, &device, args.batch, args.warmup, args.steps)?),
            _ => (Mode::Infer, args.infer_batch, bench::time_inference(&c, &device, args.infer_batch, args.warmup, args.steps)?),
        }
    };
    let m = Measurement {
        stack: backend.to_string(),
        mode,
        batch,
        step_ms: times,
        peak_rss_kib: bench::peak_rss_kib(),
        base_rss_kib: base,
    };
    println!("{}", serde_json::to_string(&m).expect("json"));
    Ok(())
}

fn spawn(mut cmd: Command, what: &str) -> vitlab::Result<Measurement> {
    let out = cmd.output().map_err(|e| Error::Backend { name: what.into(), message: format!("cannot start: {e}") })?;
    if !out.status.success() {
        return Err(Error::Backend {
            name: what.into(),
            message: format!("benchmark process failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line)
        .map_err(|e| Error::Backend { name: what.into(), message: format!("unreadable benchmark output ({e}): {line}") })
}

fn data_bench(args: &Args, path: &PathBuf) -> vitlab::Result<()> {
    let ds = vitlab::data::open(path)?;
    let size = ds.train.height;
    let n = ds.train.len();
    let loader = Loader::new(
        Arc::new(ds.train),
        (0..n).collect(),
        LoaderConfig {
            batch_size: args.batch,
            image_size: size,
            augment: Augment::standard(),
            normalize: Normalize::Cifar,
            shuffle: true,
            drop_last: false,
            workers: args.workers,
            seed: 0,
            label_smoothing: 0.0,
            load_size: 0,
            epoch_images: 0,
        },
    )?;
    let m = bench::loader_throughput(&loader, 5.0);
    println!(
        "loader: {:.0} images/s ({} augmented {size}x{size} images, batch {}, {} workers, {:.2} s)",
        m.images_per_second(),
        m.images,
        args.batch,
        args.workers,
        m.seconds
    );
    Ok(())
}

pub fn run(args: Args) -> vitlab::Result<()> {
    if let Some(spec) = &args.child {
        return run_child(&args, spec);
    }
    if let Some(path) = &args.data {
        return data_bench(&args, path);
    }
    let gan = cyclegan_config(&args)?.is_some();
    let c = if is_inception(&args) || gan { None } else { Some(model_config(&args)?) };
    let backends: Vec<Backend> = match args.backend {
        BenchBackend::All => Backend::compiled_cpu(),
        BenchBackend::One(b) => vec![b.into()],
    };
    check_precision(&args, &backends)?;
    // PyTorch runs where the backends run: on the GPU when one of them does.
    let torch_device = if backends.iter().any(|b| matches!(b, Backend::TchCuda | Backend::Cuda)) { "cuda" } else { "cpu" };
    let modes: Vec<&str> = match args.only.map(Mode::from) {
        None if gan => vec!["train"],
        None if c.is_none() => vec!["infer"],
        None => vec!["train", "infer"],
        Some(Mode::Train) if is_inception(&args) => return Err(Error::usage("--only", "inception-fid is inference only")),
        Some(Mode::Infer) if gan => return Err(Error::usage("--only", "a CycleGAN bench times training iterations only")),
        Some(Mode::Train) => vec!["train"],
        Some(Mode::Infer) => vec!["infer"],
    };
    let exe = std::env::current_exe().map_err(|e| Error::io("vitlab", e))?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/bench_pytorch.py");
    let mut results: Vec<Measurement> = Vec::new();
    for round in 0..args.rounds {
        for mode in &modes {
            let mut stacks: Vec<String> = backends.iter().map(|b| b.to_string()).collect();
            if args.against_pytorch {
                stacks.push("pytorch".into());
            }
            if args.compile {
                stacks.push("pytorch-compile".into());
            }
            if round % 2 == 1 {
                stacks.reverse();
            }
            for stack in stacks {
                eprintln!("round {}/{}: {stack} {mode} ...", round + 1, args.rounds);
                let common = [
                    "--model".to_string(),
                    args.model.clone(),
                    "--image-size".into(),
                    args.image_size.to_string(),
                    "--patch-size".into(),
                    args.patch_size.to_string(),
                    "--num-classes".into(),
                    args.num_classes.to_string(),
                    "--batch".into(),
                    args.batch.to_string(),
                    "--infer-batch".into(),
                    args.infer_batch.to_string(),
                    "--steps".into(),
                    args.steps.to_string(),
                    "--warmup".into(),
                    args.warmup.to_string(),
                    "--refiner-width".into(),
                    args.refiner_width.to_string(),
                    "--discriminator".into(),
                    value_name(&args.discriminator),
                    "--precision".into(),
                    value_name(&args.precision),
                ];
                let mut common = common.to_vec();
                if let Some(d) = args.depth {
                    common.extend(["--depth".to_string(), d.to_string()]);
                }
                let m = if stack.starts_with("pytorch") {
                    let mut cmd = Command::new(&args.python);
                    cmd.arg(&script).args(common).arg("--mode").arg(mode).arg("--device").arg(torch_device);
                    if stack == "pytorch-compile" {
                        cmd.arg("--compile");
                    }
                    spawn(cmd, &stack)?
                } else {
                    let mut cmd = Command::new(&exe);
                    cmd.arg("bench").args(common).arg("--child").arg(format!("{stack}:{mode}"));
                    spawn(cmd, &stack)?
                };
                // Pool rounds.
                match results.iter_mut().find(|r| r.stack == m.stack && r.mode == m.mode) {
                    Some(r) => {
                        r.step_ms.extend(m.step_ms);
                        r.peak_rss_kib = r.peak_rss_kib.max(m.peak_rss_kib);
                    }
                    None => results.push(m),
                }
            }
        }
    }
    report(&args, c.as_ref(), gan, &results);
    Ok(())
}

/// `c`: the ViT benchmarked (none for the FID network and CycleGAN); `gan`: a CycleGAN.
fn report(args: &Args, c: Option<&ModelConfig>, gan: bool, results: &[Measurement]) {
    let torch = |mode: Mode| results.iter().find(|r| r.stack == "pytorch" && r.mode == mode);
    let compiled = |mode: Mode| results.iter().find(|r| r.stack == "pytorch-compile" && r.mode == mode);
    let rows: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            let flops = c.map(|c| match r.mode {
                Mode::Train => bench::train_flops(c),
                Mode::Infer => bench::forward_flops(c),
            });
            let ips = r.images_per_s();
            let reference = torch(r.mode);
            serde_json::json!({
                "stack": r.stack, "mode": r.mode, "batch": r.batch,
                "median_ms": r.median_ms(), "min_ms": r.min_ms(), "steps": r.step_ms.len(),
                "images_per_s": ips, "gflops": flops.map(|f| f * ips / 1e9),
                "peak_rss_mib": r.peak_rss_kib as f64 / 1024.0,
                "model_rss_mib": (r.peak_rss_kib.saturating_sub(r.base_rss_kib)) as f64 / 1024.0,
                "vs_pytorch": reference.map(|p| ips / p.images_per_s()),
                "memory_vs_pytorch": reference.map(|p| r.peak_rss_kib as f64 / p.peak_rss_kib as f64),
                "vs_pytorch_compile": compiled(r.mode).map(|p| ips / p.images_per_s()),
                "precision": value_name(&args.precision),
            })
        })
        .collect();
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&rows).expect("json")),
        _ => {
            if gan {
                println!(
                    "CycleGAN iteration ({} generators at {} px, patch {}, refiner {}, {} discriminators), batch {} per domain; median of {} steps per stack",
                    args.model, args.image_size, args.patch_size, args.refiner_width, value_name(&args.discriminator), args.batch, args.steps * args.rounds
                );
            } else if c.is_some() {
                println!(
                    "{} at {} px, patch {}, {} classes; train batch {}, inference batch {}; median of {} steps per stack",
                    args.model,
                    args.image_size,
                    args.patch_size,
                    args.num_classes,
                    args.batch,
                    args.infer_batch,
                    args.steps * args.rounds
                );
            } else {
                println!(
                    "FID features: {}x{} uint8 images -> resize to 299 -> InceptionV3 2048-d pool, batch {}; median of {} batches per stack",
                    args.image_size, args.image_size, args.infer_batch, args.steps * args.rounds
                );
            }
            println!(
                "precision {}{}",
                value_name(&args.precision),
                if args.precision == PrecisionArg::Bf16 { " (PyTorch: torch.autocast bf16)" } else { "" }
            );
            let mut header =
                vec!["stack", "mode", "img/s", "median ms", "min ms", "GFLOP/s", "peak MiB", "x PyTorch", "mem x PyTorch"];
            if args.compile {
                header.push("x compile");
            }
            let f = |v: &serde_json::Value, d: usize| v.as_f64().map_or("-".to_string(), |x| format!("{x:.d$}"));
            let table: Vec<Vec<String>> = rows
                .iter()
                .map(|r| {
                    vec![
                        r["stack"].as_str().unwrap_or("").to_string(),
                        r["mode"].as_str().unwrap_or("").to_string(),
                        f(&r["images_per_s"], 1),
                        f(&r["median_ms"], 1),
                        f(&r["min_ms"], 1),
                        f(&r["gflops"], 1),
                        f(&r["peak_rss_mib"], 0),
                        f(&r["vs_pytorch"], 2),
                        f(&r["memory_vs_pytorch"], 2),
                    ]
                    .into_iter()
                    .chain(args.compile.then(|| f(&r["vs_pytorch_compile"], 2)))
                    .collect()
                })
                .collect();
            println!("{}", render_table(&header, &table));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::assert_mirrors;
    use vitlab::models::DiscriminatorKind;

    #[test]
    fn discriminator_spells_the_library_names() {
        assert_mirrors::<super::DiscriminatorArg, DiscriminatorKind>(DiscriminatorKind::ALL.len(), |s| s.parse().ok());
    }
}
