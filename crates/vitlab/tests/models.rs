//! Model zoo behaviour: shapes, configuration errors, parameter counts, and
//! weight files (round trips and the errors users see on a wrong checkpoint).

mod common;

use std::path::Path;

use burn::tensor::{Device, Tensor};
use common::{fixture_path, host};
use vitlab::models::weights::{collect, load_file, read_safetensors, save_file, Layout};
use vitlab::models::{
    param_count, BlockVariant, Discriminator, DiscriminatorConfig, DiscriminatorKind, HeadKind, Init, ModelConfig, Pool, Preset,
    Size, Vit, VitUnet, VitUnetConfig,
};
use vitlab::stats;
use vitlab::util::Rng;
use vitlab::Error;

fn device() -> Device {
    Device::flex()
}

/// A small model of every kind: 16 px, patch 4, width 32, 2 blocks.
fn small(block: BlockVariant, pool: Pool, preset: Preset) -> ModelConfig {
    let mut c = ModelConfig::new(block, Size::Tiny).with_preset(preset).with_image(16, 4).with_pool(pool);
    c.depth = 2;
    c.dim = 32;
    c.mlp_dim = 48;
    c.heads = 4;
    c.num_classes = 7;
    c
}

fn all_small_configs() -> Vec<ModelConfig> {
    let mut out = Vec::new();
    for &block in BlockVariant::ALL {
        for &pool in Pool::ALL {
            for preset in [Preset::Default, Preset::Paper] {
                out.push(small(block, pool, preset));
            }
        }
    }
    out
}

/// Standard-normal images from vitlab's own generator: burn's is process-global, and
/// a draw from it here would interleave with the seeded builds of tests running beside.
fn images(batch: usize, size: usize, device: &Device) -> Tensor<4> {
    let mut rng = Rng::keyed(&[batch as u64, size as u64]);
    let data: Vec<f32> = (0..batch * 3 * size * size).map(|_| rng.normal() as f32).collect();
    Tensor::from_data(burn::tensor::TensorData::new(data, [batch, 3, size, size]), device)
}

#[test]
fn every_variant_pool_and_head_gives_batch_by_classes_logits() {
    let device = device();
    for c in all_small_configs() {
        let model = Vit::new(&c, &device).unwrap();
        let out = model.forward(images(3, 16, &device));
        assert_eq!(out.dims(), [3, 7], "{c:?}");
        assert!(host(out).data.iter().all(|v| v.is_finite()), "{c:?}");
    }
}

#[test]
fn the_presets_choose_the_released_codes_model() {
    let c = ModelConfig::new(BlockVariant::Vit22bCode, Size::Tiny).with_preset(Preset::Paper);
    assert_eq!(c.head, HeadKind::Paper);
    assert!(!c.final_norm && !c.qkv_bias);
    let model = Vit::new(&c, &device()).unwrap();
    assert!(model.norm.is_none() && model.head_hidden.is_some() && model.head_bn.is_some());
    let c = ModelConfig::new(BlockVariant::Vit, Size::Tiny);
    let model = Vit::new(&c, &device()).unwrap();
    assert!(model.norm.is_some() && model.head_hidden.is_none() && model.blocks[0].attn().qkv.as_ref().unwrap().bias.is_some());
}

#[test]
fn image_size_not_divisible_by_patch_is_a_clear_error() {
    let c = ModelConfig::new(BlockVariant::Vit, Size::Tiny).with_image(30, 4);
    let err = Vit::new(&c, &device()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Config { ref field, .. } if field == "model.image_size"), "{msg}");
    assert!(msg.contains("30") && msg.contains("patch size 4"), "{msg}");
}

#[test]
fn width_not_divisible_by_heads_and_zero_sizes_are_errors() {
    let mut c = ModelConfig::new(BlockVariant::Vit, Size::Tiny);
    c.heads = 5;
    assert!(matches!(c.validate(), Err(Error::Config { field, .. }) if field == "model.heads"));
    let mut c = ModelConfig::new(BlockVariant::Vit, Size::Tiny);
    c.patch_size = 0;
    assert!(matches!(c.validate(), Err(Error::Config { field, .. }) if field == "model.patch_size"));
}

#[test]
fn names_parse_and_unknown_names_list_the_choices() {
    for &b in BlockVariant::ALL {
        assert_eq!(b.name().parse::<BlockVariant>().unwrap(), b);
    }
    let msg = "vit23b".parse::<BlockVariant>().unwrap_err().to_string();
    assert!(msg.contains("model.block") && msg.contains("vit22b-code"), "{msg}");
}

/// Exact counts from the PyTorch reference (tools/make_fixtures.py), every
/// variant x size, both presets.
#[test]
fn parameter_counts_equal_pytorchs() {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path("param_counts.json")).unwrap()).unwrap();
    let mut checked = 0;
    for section in ["paper", "default"] {
        let s = &json[section];
        let preset: Preset = s["preset"].as_str().unwrap().parse().unwrap();
        for &block in BlockVariant::ALL {
            for &size in Size::ALL {
                let expected = s["counts"][block.name()][size.name()].as_u64().unwrap() as usize;
                let c = ModelConfig::new(block, size)
                    .with_preset(preset)
                    .with_image(s["image_size"].as_u64().unwrap() as usize, s["patch_size"].as_u64().unwrap() as usize)
                    .with_classes(s["num_classes"].as_u64().unwrap() as usize);
                assert_eq!(param_count(&c), expected, "{section} {block} {size}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 5 * BlockVariant::ALL.len());
    // The paper's Table 1 figures.
    let paper = |size| param_count(&ModelConfig::new(BlockVariant::Vit, size).with_preset(Preset::Paper).with_image(224, 16));
    assert_eq!(paper(Size::Tiny), 5_673_034);
    assert_eq!(paper(Size::Small), 22_257_802);
}

/// The analytic count equals the parameters the module really holds.
#[test]
fn parameter_count_equals_the_built_modules() {
    for c in all_small_configs() {
        let model = Vit::new(&c, &device()).unwrap();
        let held: usize = collect(&model)
            .iter()
            .filter(|(k, _)| !k.ends_with("running_mean") && !k.ends_with("running_var"))
            .map(|(_, t)| t.data.len())
            .sum();
        assert_eq!(param_count(&c), held, "{c:?}");
    }
}

#[test]
fn save_then_load_reproduces_the_model_exactly() {
    let device = device();
    let dir = tempfile::tempdir().unwrap();
    for c in [
        small(BlockVariant::Vit, Pool::Map, Preset::Default),
        small(BlockVariant::Vit22bCode, Pool::Cls, Preset::Paper),
        small(BlockVariant::Vit22bLn, Pool::Gap, Preset::Default),
    ] {
        let path = dir.path().join(format!("{}.safetensors", c.block));
        let a = Vit::new(&c, &device).unwrap();
        save_file(&a, &path, Default::default()).unwrap();
        let (b, layout) = load_file(Vit::new(&c, &device).unwrap(), &path).unwrap();
        assert_eq!(layout, Layout::Vitlab);
        let x = images(2, 16, &device);
        assert_eq!(host(a.forward(x.clone())), host(b.forward(x)), "{c:?}");
        assert_eq!(collect(&a), collect(&b));
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().all(|n| !n.to_string_lossy().contains(".tmp")), "{names:?}");
    }
}

/// Mean and standard deviation of a tensor's values (vitlab::stats).
fn mean_std(v: &[f32]) -> (f64, f64) {
    let v: Vec<f64> = v.iter().map(|&x| x as f64).collect();
    (stats::mean(&v), stats::std_dev(&v))
}

/// Each `model.init` starts the weights at the scale docs/MODELS.md states, the
/// scale a user reproducing timm, the paper's code or Lee et al.'s code expects:
/// every Linear weight's spread from its fan-in and fan-out, zero biases where
/// stated, unit norms, and the position embedding's and class token's spread.
/// Tolerances are about 5 standard errors of a sample std (the smallest tensor,
/// the 10 x 192 head, has 1,920 values; the class token 192).
#[test]
fn each_init_starts_the_weights_at_its_documented_scale() {
    let device = device();
    for init in [Init::Timm, Init::Paper, Init::Xavier] {
        let mut c = ModelConfig::new(BlockVariant::Vit, Size::Tiny).with_image(32, 4);
        c.depth = 2;
        c.init = init;
        let m = collect(&Vit::seeded(&c, &device, 7).unwrap());
        let mut linears = 0;
        for (name, t) in &m {
            let (mean, std) = mean_std(&t.data);
            if name.ends_with(".weight") && t.shape.len() == 2 {
                linears += 1;
                let (fan_out, fan_in) = (t.shape[0] as f64, t.shape[1] as f64);
                let want = match init {
                    Init::Timm => 0.02,
                    Init::Paper => (1.0 / (3.0 * fan_in)).sqrt(),
                    Init::Xavier => (2.0 / (fan_in + fan_out)).sqrt(),
                };
                assert!((std / want - 1.0).abs() < 0.08, "{init:?} {name}: std {std}, expected {want}");
                assert!(mean.abs() < 0.15 * want, "{init:?} {name}: mean {mean}");
                let bias = &m[&name.replace(".weight", ".bias")].data;
                let bound = 1.0 / fan_in.sqrt();
                match init {
                    Init::Paper => {
                        assert!(bias.iter().all(|b| (*b as f64).abs() <= bound) && bias.iter().any(|b| *b != 0.0), "{name}")
                    }
                    _ => assert!(bias.iter().all(|b| *b == 0.0), "{init:?} {name}: biases not zero"),
                }
            } else if name.ends_with(".weight") {
                assert!(t.data.iter().all(|v| *v == 1.0), "{init:?} {name}: a norm's scale starts at 1");
            }
        }
        assert_eq!(linears, 2 + 4 * 2, "{init:?}: patch embedding, head, and qkv/proj/fc1/fc2 per block");
        let (pos, cls) = (mean_std(&m["pos_embed"].data).1, mean_std(&m["cls_token"].data).1);
        match init {
            Init::Timm => assert!((pos / 0.02 - 1.0).abs() < 0.05 && cls < 1e-5, "{pos} {cls}"),
            _ => assert!((pos - 1.0).abs() < 0.05 && (cls - 1.0).abs() < 0.3, "{init:?}: {pos} {cls}"),
        }
    }
}

#[test]
fn saved_files_use_pytorch_names_and_shapes() {
    let c = small(BlockVariant::Vit, Pool::Cls, Preset::Default);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    save_file(&Vit::new(&c, &device()).unwrap(), &path, Default::default()).unwrap();
    let (map, _) = read_safetensors(&path).unwrap();
    // Linear weights are [out, in]; the patch embedding takes p*p*C = 48 inputs.
    assert_eq!(map["patch_embed.weight"].shape, vec![32, 48]);
    assert_eq!(map["blocks.1.attn.qkv.weight"].shape, vec![96, 32]);
    assert_eq!(map["blocks.0.mlp.fc1.weight"].shape, vec![48, 32]);
    assert_eq!(map["head.weight"].shape, vec![7, 32]);
    assert_eq!(map["pos_embed"].shape, vec![1, 17, 32]);
    assert_eq!(map["cls_token"].shape, vec![1, 1, 32]);
}

fn load_error(saved: &ModelConfig, target: &ModelConfig) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ckpt.safetensors");
    save_file(&Vit::new(saved, &device()).unwrap(), &path, Default::default()).unwrap();
    let err = load_file(Vit::new(target, &device()).unwrap(), &path).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("ckpt.safetensors"), "the error names the file: {msg}");
    msg
}

#[test]
fn a_mis_shaped_tensor_names_the_key_and_both_shapes() {
    let saved = small(BlockVariant::Vit, Pool::Cls, Preset::Default);
    let mut target = saved.clone();
    target.num_classes = 10;
    let msg = load_error(&saved, &target);
    assert!(msg.contains(r#"tensor "head.weight" has shape [7, 32] in the file but the model expects [10, 32]"#), "{msg}");
    assert!(msg.contains(r#""head.bias" has shape [7]"#), "{msg}");
}

#[test]
fn missing_and_unexpected_tensors_are_named() {
    let msg = load_error(
        &small(BlockVariant::Vit22b, Pool::Cls, Preset::Default),
        &small(BlockVariant::Vit, Pool::Cls, Preset::Default),
    );
    assert!(msg.contains(r#"missing tensor "blocks.0.norm2.weight" (model expects shape [32])"#), "{msg}");
    assert!(
        msg.contains(r#"tensor "blocks.0.attn.q_norm.weight" (shape [8]) is not a parameter of the configured model"#),
        "{msg}"
    );
}

#[test]
fn a_file_that_is_not_safetensors_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.safetensors");
    std::fs::write(&path, b"definitely not safetensors").unwrap();
    let c = small(BlockVariant::Vit, Pool::Cls, Preset::Default);
    let msg = load_file(Vit::new(&c, &device()).unwrap(), &path).unwrap_err().to_string();
    assert!(msg.contains("broken.safetensors") && msg.contains("not a valid safetensors file"), "{msg}");
    let missing = load_file(Vit::new(&c, &device()).unwrap(), Path::new("/nonexistent/x.safetensors")).unwrap_err().to_string();
    assert!(missing.contains("/nonexistent/x.safetensors"), "{missing}");
}

/// A small generator: 16 px in patches of 4, width 32, 2 heads, one block per stage.
fn small_unet(block: BlockVariant) -> VitUnetConfig {
    VitUnetConfig { depth: 6, dim: 32, mlp_dim: 64, heads: 2, refiner_width: 8, ..VitUnetConfig::new(block) }.with_image(16, 4)
}

fn held_params<M: burn::module::Module>(m: &M) -> usize {
    collect(m).values().map(|t| t.data.len()).sum()
}

/// The paper's generators hold exactly as many parameters as the PyTorch reference.
#[test]
fn generator_parameter_counts_equal_pytorchs() {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path("param_counts.json")).unwrap()).unwrap();
    for (name, config) in [("vitunet", VitUnetConfig::vitunet()), ("vit22bunet", VitUnetConfig::vit22bunet())] {
        let expected = json["generators"][name].as_u64().unwrap() as usize;
        let model = VitUnet::new(&config, &device()).unwrap();
        assert_eq!(held_params(&model), expected, "{name}");
        assert_eq!(config.param_count(), expected, "{name}");
    }
    // The analytic count equals the built module for every block variant and other sizes.
    for &block in BlockVariant::ALL {
        let c = small_unet(block);
        assert_eq!(c.param_count(), held_params(&VitUnet::new(&c, &device()).unwrap()), "{block}");
    }
}

/// Every block variant: images in, images of the same shape out, inside (-1, 1);
/// the U-Net's last stage holds 4N tokens at width D.
#[test]
fn the_generator_maps_images_to_images_of_the_same_shape() {
    let device = device();
    for &block in BlockVariant::ALL {
        let c = small_unet(block);
        let model = VitUnet::new(&c, &device).unwrap();
        let x = images(2, 16, &device).clamp(-1.0, 1.0);
        assert_eq!(model.tokens(x.clone()).dims(), [2, 4 * 16, 32], "{block}");
        let y = host(model.forward(x));
        assert_eq!(y.shape, vec![2, 3, 16, 16], "{block}");
        assert!(y.data.iter().all(|v| v.is_finite() && v.abs() < 1.0), "{block}");
    }
}

#[test]
fn generator_weights_round_trip_under_pytorch_names() {
    let device = device();
    let c = small_unet(BlockVariant::Vit22b);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.safetensors");
    let a = VitUnet::new(&c, &device).unwrap();
    save_file(&a, &path, Default::default()).unwrap();
    let (map, _) = read_safetensors(&path).unwrap();
    assert_eq!(map["patch_embed.weight"].shape, vec![32, 48]);
    assert_eq!(map["bottleneck.blocks.0.attn.qkv.weight"].shape, vec![12, 4]);
    assert_eq!(map["decoder.2.blocks.0.mlp.fc1.weight"].shape, vec![64, 32]);
    assert_eq!(map["out_proj.weight"].shape, vec![48, 32]);
    assert_eq!(map["refiner.in1.conv.weight"].shape, vec![8, 12, 3, 3]);
    assert_eq!(map["refiner.res.1.conv2.conv.weight"].shape, vec![16, 16, 3, 3]);
    let (b, layout) = load_file(VitUnet::new(&c, &device).unwrap(), &path).unwrap();
    assert_eq!(layout, Layout::Vitlab);
    let x = images(1, 16, &device);
    assert_eq!(host(a.forward(x.clone())), host(b.forward(x)));
}

#[test]
fn invalid_generator_configurations_name_the_field() {
    let device = device();
    type Case = (&'static str, fn(&mut VitUnetConfig));
    let cases: [Case; 5] = [
        ("generator.depth", |c| c.depth = 8),
        ("generator.dim", |c| c.dim = 36),
        ("generator.heads", |c| c.heads = 3),
        ("generator.image_size", |c| c.image_size = 18),
        ("generator.refiner_width", |c| c.refiner_width = 0),
    ];
    for (field, break_it) in cases {
        let mut c = small_unet(BlockVariant::Vit);
        break_it(&mut c);
        let msg = VitUnet::new(&c, &device).unwrap_err().to_string();
        assert!(msg.contains(field), "{field}: {msg}");
    }
}

/// The published discriminators: PyTorch's parameter counts (the PatchGAN's is
/// CycleGAN's "2.765 M"), and a 256 px image scored on a 16x16 (released) or
/// 30x30 (PatchGAN, 70x70 receptive field) map; released scores are probabilities.
#[test]
fn discriminators_score_patches_with_pytorchs_parameter_counts() {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path("param_counts.json")).unwrap()).unwrap();
    let device = device();
    for (&kind, side) in DiscriminatorKind::ALL.iter().zip([16, 30]) {
        let c = DiscriminatorConfig::new(kind);
        let model = Discriminator::new(&c, &device).unwrap();
        let expected = json["generators"][format!("discriminator-{kind}")].as_u64().unwrap() as usize;
        assert_eq!(held_params(&model), expected, "{kind}");
        assert_eq!(c.param_count(), expected, "{kind}");
        assert_eq!(c.output_size(256), side, "{kind}");
        let y = host(model.forward(images(1, 256, &device)));
        assert_eq!(y.shape, vec![1, 1, side, side], "{kind}");
        if kind == DiscriminatorKind::Released {
            assert!(y.data.iter().all(|v| *v > 0.0 && *v < 1.0));
        }
    }
    // InstanceNorm needs more than one pixel per channel after every normed layer.
    let released = DiscriminatorConfig::new(DiscriminatorKind::Released);
    let patchgan = DiscriminatorConfig::new(DiscriminatorKind::Patchgan);
    assert_eq!((released.min_image_size(), patchgan.min_image_size()), (2, 24));
    assert_eq!((patchgan.output_size(24), patchgan.output_size(2)), (1, 0));
    let msg = patchgan.check_image_size("data.image_size", 23).unwrap_err().to_string();
    assert!(msg.contains("data.image_size") && msg.contains("at least 24 px"), "{msg}");
    assert!(patchgan.check_image_size("data.image_size", 24).is_ok());
    let msg = "wgan".parse::<DiscriminatorKind>().unwrap_err().to_string();
    assert!(msg.contains("discriminator.kind") && msg.contains("patchgan"), "{msg}");
}

// ------------------------------------------------------------ stochastic depth

#[test]
fn drop_path_masks_have_the_rate_and_keep_the_expectation() {
    use vitlab::models::{DropPath, DropPathSchedule};
    // Rates over depth: timm's linspace(0, r, d), or one rate for all.
    let lin = DropPath::rates(0.3, 4, DropPathSchedule::Linear);
    assert!(lin.iter().zip([0.0, 0.1, 0.2, 0.3]).all(|(a, b)| (a - b).abs() < 1e-12), "{lin:?}");
    assert_eq!(DropPath::rates(0.1, 3, DropPathSchedule::Uniform), vec![0.1; 3]);
    assert!(DropPath::draw(&[0.0, 0.0], BlockVariant::Vit, 4, &mut Rng::new(1), &device()).is_none());

    // 4,000 samples at rate 0.25: a quarter dropped, the survivors scaled by 1/0.75, mean 1.
    let d = DropPath::draw(&[0.25], BlockVariant::Vit, 4000, &mut Rng::new(3), &device()).unwrap();
    assert_eq!(d.masks[0].len(), 2, "the standard block has two branches");
    let m = host(d.masks[0][0].clone()).data;
    let dropped = m.iter().filter(|&&v| v == 0.0).count() as f64 / m.len() as f64;
    assert!((dropped - 0.25).abs() < 0.03, "dropped fraction {dropped}");
    assert!(m.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
    let mean = m.iter().map(|&v| v as f64).sum::<f64>() / m.len() as f64;
    assert!((mean - 1.0).abs() < 0.04, "mean {mean}");
    let parallel = DropPath::draw(&[0.25], BlockVariant::Vit22b, 8, &mut Rng::new(3), &device()).unwrap();
    assert_eq!(parallel.masks[0].len(), 1, "one mask on the summed branches of a parallel block");
}

#[test]
fn a_dropped_block_passes_its_input_through_and_a_kept_one_is_unchanged() {
    use vitlab::models::DropPath;
    for &block in BlockVariant::ALL {
        let c = small(block, Pool::Cls, Preset::Default);
        let model = Vit::seeded(&c, &device(), 5).unwrap();
        let x = images(2, 16, &device());
        let plain = host(model.forward(x.clone()));
        // Masks of 1 (rate 0 drawn as kept) give the evaluation forward exactly.
        let ones = || Tensor::<3>::ones([2, 1, 1], &device());
        let branches = vitlab::models::Block::branches(block);
        let keep = DropPath { masks: (0..c.depth).map(|_| (0..branches).map(|_| ones()).collect()).collect() };
        assert_eq!(host(model.forward_train(x.clone(), false, Some(&keep)).0).data, plain.data, "{block}");
        // Every branch of every block dropped: the tokens skip the trunk, so the
        // logits equal the head applied to the embedded input.
        let zeros = DropPath { masks: (0..c.depth).map(|_| (0..branches).map(|_| ones().mul_scalar(0.0)).collect()).collect() };
        let skipped = host(model.forward_train(x.clone(), false, Some(&zeros)).0);
        let no_blocks = {
            let mut m = model.clone();
            m.blocks.clear();
            host(m.forward(x.clone()))
        };
        let diff = skipped.data.iter().zip(&no_blocks.data).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(diff < 1e-5, "{block}: dropped trunk differs from no trunk by {diff}");
        assert_ne!(skipped.data, plain.data);
    }
}

/// burn's random generator is process-global and draws a parameter lazily, on its
/// first use: a model built on one thread (say, to load a checkpoint into) stole draws
/// from a seeded build on another, and a resumed run then started from other weights
/// than the uninterrupted one. A seeded build must not depend on what else is built.
#[test]
fn a_seeded_model_does_not_depend_on_models_built_on_other_threads() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let c = small(BlockVariant::Vit, Pool::Cls, Preset::Default);
    let unet = small_unet(BlockVariant::Vit);
    let critic = DiscriminatorConfig::new(DiscriminatorKind::Patchgan);
    let reference = collect(&Vit::seeded(&c, &device(), 11).unwrap());
    let stop = AtomicBool::new(false);
    let differing = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    Vit::new(&c, &device()).unwrap();
                    VitUnet::new(&unet, &device()).unwrap();
                    Discriminator::new(&critic, &device()).unwrap();
                }
            });
        }
        let differing = (0..200).filter(|_| collect(&Vit::seeded(&c, &device(), 11).unwrap()) != reference).count();
        stop.store(true, Ordering::Relaxed);
        differing
    });
    assert_eq!(differing, 0, "{differing} of 200 seeded builds differed from the same seed built alone");
}
