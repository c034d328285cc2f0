//! Numerical parity with the PyTorch reference (tools/make_fixtures.py): outputs
//! within 1e-4 and gradients within 1e-3 of the reference, each relative to the
//! reference tensor's max |value|, on every compiled CPU backend.

mod common;

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use common::{assert_close, assert_close_scaled, backends, host, model_config, tensor, with_weights, Fixture};
use vitlab::inspect::{AttentionMaps, Fusion};
use vitlab::models::weights::{collect_grads, deterministic_values, load_file, write_safetensors, HostTensor, Layout};
use vitlab::models::{Block, BlockConfig, Discriminator, DiscriminatorConfig, Init, Pool, Vit, VitUnet, VitUnetConfig};

const OUT_TOL: f64 = 1e-4;
const GRAD_TOL: f64 = 1e-3;

fn block_config(f: &Fixture) -> BlockConfig {
    BlockConfig {
        variant: f.str("variant").parse().unwrap(),
        dim: f.usize("dim"),
        mlp_dim: f.usize("mlp_dim"),
        heads: f.usize("heads"),
        qkv_bias: f.bool("qkv_bias"),
        attn_scale: f.str("attn_scale").parse().unwrap(),
        norm_eps: f.f64("norm_eps"),
        norm_center: f.bool("norm_center"),
        init: Init::Timm,
    }
}

/// Compares the forward output, then the gradients of sum(output * loss_weight)
/// w.r.t. the input and every parameter.
fn check_forward_backward<M: Module, const D: usize, const O: usize>(
    f: &Fixture,
    backend: &str,
    device: &Device,
    module: M,
    forward: impl Fn(&M, Tensor<D>) -> Tensor<O>,
) {
    let ad = device.clone().autodiff();
    let module = with_weights(f, module.to_device(&ad).train());
    let input = tensor::<D>(f.get("input"), &ad).require_grad();
    let output = forward(&module, input.clone());
    let what = format!("{} [{backend}]", f.name);
    assert_close(&format!("{what} output"), &host(output.clone()), f.get("output"), OUT_TOL);

    let loss = (output * tensor::<O>(f.get("loss_weight"), &ad)).sum();
    let grads = loss.backward();
    let grad_input = input.grad(&grads).expect("input gradient");
    assert_close(&format!("{what} grad.input"), &host(grad_input), f.get("grad.input"), GRAD_TOL);
    let expected = f.group("grad");
    let actual = collect_grads(&module, &grads);
    // A gradient that is exactly zero in exact arithmetic (a bias right before
    // BatchNorm) is float noise in both implementations: such tensors (max |ref|
    // below 1e-6 of the model's largest gradient) are compared on the scale of
    // the model's largest gradient instead of their own.
    let global = expected.values().flat_map(|t| &t.data).fold(0f32, |m, v| m.max(v.abs()));
    let mut checked = 0;
    for (key, exp) in &expected {
        if key == "input" {
            continue;
        }
        let act = actual.get(key).unwrap_or_else(|| panic!("{what}: no gradient for parameter {key}"));
        let own = exp.data.iter().fold(0f32, |m, v| m.max(v.abs()));
        if own < 1e-6 * global {
            assert_close_scaled(&format!("{what} grad.{key}"), act, exp, GRAD_TOL, global as f64);
        } else {
            assert_close(&format!("{what} grad.{key}"), act, exp, GRAD_TOL);
        }
        checked += 1;
    }
    let params = actual.len();
    assert_eq!(checked, params, "{what}: every parameter's gradient is compared");
    assert!(checked > 0);
}

fn vitunet_config(f: &Fixture) -> VitUnetConfig {
    VitUnetConfig {
        block: f.str("variant").parse().unwrap(),
        depth: f.usize("depth"),
        dim: f.usize("dim"),
        mlp_dim: f.usize("mlp_dim"),
        heads: f.usize("heads"),
        image_size: f.usize("image_size"),
        patch_size: f.usize("patch_size"),
        channels: f.usize("channels"),
        refiner_width: f.usize("refiner_width"),
        qkv_bias: f.bool("qkv_bias"),
        attn_scale: f.str("attn_scale").parse().unwrap(),
        norm_eps: f.f64("norm_eps"),
        norm_center: f.bool("norm_center"),
        init: Init::Timm,
    }
}

/// The generator: its transformer U-Net (width halving and doubling, skips along
/// the token axis, the 4-image regrouping) and its CNN refiner (reflection
/// padding, convolutions, InstanceNorm, residual blocks, tanh), in training
/// (autodiff) and in inference.
fn check_vitunet(name: &str) {
    let f = Fixture::load(name);
    let config = vitunet_config(&f);
    check_image_model(&f, |device| VitUnet::new(&config, device).unwrap(), |m, x| m.forward(x));
}

/// An image-to-image or image-to-scores model without BatchNorm: training
/// (autodiff, every gradient) and inference give the fixture's output.
fn check_image_model<M: Module>(f: &Fixture, build: impl Fn(&Device) -> M, forward: impl Fn(&M, Tensor<4>) -> Tensor<4>) {
    for (backend, device) in backends() {
        check_forward_backward(f, backend.name(), &device, build(&device), &forward);
        let model = with_weights(f, build(&device));
        let out = forward(&model, tensor(f.get("input"), &device));
        assert_close(&format!("{} [{backend}] inference output", f.name), &host(out), f.get("output"), OUT_TOL);
    }
}

/// A discriminator: strided 4x4 convolutions with zero padding, InstanceNorm,
/// LeakyReLU and (released) the sigmoid, in training and in inference.
fn check_discriminator(name: &str) {
    let f = Fixture::load(name);
    let config = DiscriminatorConfig {
        kind: f.str("discriminator").parse().unwrap(),
        channels: f.usize("channels"),
        width: f.usize("width"),
    };
    check_image_model(&f, |device| Discriminator::new(&config, device).unwrap(), |m, x| m.forward(x));
}

fn check_block(name: &str) {
    let f = Fixture::load(name);
    for (backend, device) in backends() {
        let block = Block::new(&block_config(&f), &device);
        check_forward_backward(&f, backend.name(), &device, block, |b, x: Tensor<3>| b.forward(x));
    }
}

fn check_model(name: &str) {
    let f = Fixture::load(name);
    let config = model_config(&f);
    for (backend, device) in backends() {
        let model = Vit::new(&config, &device).unwrap();
        check_forward_backward(&f, backend.name(), &device, model, |m, x: Tensor<4>| m.forward(x));
        // Inference (no autodiff) runs the backends' own fused kernels
        // (models/fused.rs); BatchNorm then uses its running statistics.
        let expected = if f.tensors.contains_key("output_eval") { "output_eval" } else { "output" };
        let model = with_weights(&f, Vit::new(&config, &device).unwrap());
        let out = model.forward(tensor(f.get("input"), &device));
        assert_close(&format!("{name} [{backend}] inference {expected}"), &host(out), f.get(expected), OUT_TOL);
    }
}

/// `vitlab attention`'s maps against tools/make_attention_fixtures.py: the softmax
/// attention of every block and head, the pooled query's maps and attention
/// rollout (each fusion and discard ratio), within OUT_TOL of the reference's
/// max |value|; the logits beside the maps are the model's own.
fn check_attention(name: &str) {
    let f = Fixture::load(name);
    let config = model_config(&f);
    let ratios: Vec<f64> = serde_json::from_str(&f.meta["ratios"]).unwrap();
    let fusions: Vec<String> = serde_json::from_str(&f.meta["fusions"]).unwrap();
    for (backend, device) in backends() {
        let what = |s: &str| format!("{name} [{}] {s}", backend.name());
        let model = with_weights(&f, Vit::new(&config, &device).unwrap());
        let x = tensor::<4>(f.get("input"), &device);
        let (logits, maps) = model.forward_attention(x.clone());
        assert_close(&what("logits"), &host(logits), &host(model.forward(x)), 1e-5);
        assert_eq!(maps.len(), config.depth);
        let attention = host(Tensor::stack::<5>(maps, 1));
        assert_close(&what("attention"), &attention, f.get("attention"), OUT_TOL);
        let [b, l, h, t, _] = attention.shape[..] else { unreachable!() };
        let per_image: Vec<AttentionMaps> = attention
            .data
            .chunks(l * h * t * t)
            .map(|a| AttentionMaps { blocks: l, heads: h, tokens: t, has_cls: model.has_class_token(), attention: a.to_vec() })
            .collect();
        assert_eq!(per_image[0].has_cls, config.pool == Pool::Cls);
        let n = per_image[0].patches();
        let query = HostTensor::new(vec![b, l, h, n], per_image.iter().flat_map(AttentionMaps::query).collect());
        assert_close(&what("query"), &query, f.get("query"), OUT_TOL);
        for fusion in &fusions {
            for ratio in &ratios {
                let rollout: Vec<f32> =
                    per_image.iter().flat_map(|m| m.rollout(Fusion::parse(fusion).unwrap(), *ratio)).map(|v| v as f32).collect();
                let key = format!("rollout.{fusion}.{ratio:?}");
                assert_close(&what(&key), &HostTensor::new(vec![b, n], rollout), f.get(&key), OUT_TOL);
            }
        }
    }
}

#[test]
fn attention_maps_vit_class_token() {
    check_attention("attention_vit_cls");
}

#[test]
fn attention_maps_vit22b_class_token() {
    check_attention("attention_vit22b_cls");
}

#[test]
fn attention_maps_vit22b_nonorm_class_token() {
    check_attention("attention_vit22b-nonorm_cls");
}

#[test]
fn attention_maps_vit_gap_mean_over_tokens() {
    check_attention("attention_vit_gap");
}

#[test]
fn attention_maps_vit22b_code_map_mean_over_tokens() {
    check_attention("attention_vit22b-code_map");
}

#[test]
fn block_vit() {
    check_block("block_vit");
}
#[test]
fn block_vit22b() {
    check_block("block_vit22b");
}
#[test]
fn block_vit22b_ln() {
    check_block("block_vit22b-ln");
}
#[test]
fn block_vit22b_code() {
    check_block("block_vit22b-code");
}
#[test]
fn block_vit22b_nonorm() {
    check_block("block_vit22b-nonorm");
}
#[test]
fn block_vit22b_width_scale_without_centering() {
    check_block("block_vit22b_width_nocenter");
}

#[test]
fn model_vit_cls_linear() {
    check_model("model_vit_cls_linear");
}
#[test]
fn model_vit22b_cls_linear() {
    check_model("model_vit22b_cls_linear");
}
#[test]
fn model_vit22b_ln_cls_linear() {
    check_model("model_vit22b-ln_cls_linear");
}
#[test]
fn model_vit22b_code_cls_linear() {
    check_model("model_vit22b-code_cls_linear");
}
#[test]
fn model_vit22b_nonorm_cls_linear() {
    check_model("model_vit22b-nonorm_cls_linear");
}
#[test]
fn model_vit_gap_linear() {
    check_model("model_vit_gap_linear");
}
#[test]
fn model_vit_map_linear() {
    check_model("model_vit_map_linear");
}
#[test]
fn model_vit22b_map_linear() {
    check_model("model_vit22b_map_linear");
}
#[test]
fn model_vit_paper() {
    check_model("model_vit_paper");
}
#[test]
fn model_vit22b_paper() {
    check_model("model_vit22b_paper");
}
#[test]
fn model_vit22b_ln_paper() {
    check_model("model_vit22b-ln_paper");
}
#[test]
fn model_vit22b_code_paper_with_batchnorm_head() {
    check_model("model_vit22b-code_paper");
}
#[test]
fn model_vit22b_nonorm_paper() {
    check_model("model_vit22b-nonorm_paper");
}
#[test]
fn model_tiny_vit_32px_patch4() {
    check_model("model_tiny_vit");
}

#[test]
fn vitunet_with_vit_blocks() {
    check_vitunet("vitunet_vit");
}

#[test]
fn vitunet_with_vit22b_blocks() {
    check_vitunet("vitunet_vit22b");
}

#[test]
fn discriminator_released() {
    check_discriminator("discriminator_released");
}

#[test]
fn discriminator_patchgan() {
    check_discriminator("discriminator_patchgan");
}

#[test]
fn deterministic_weights_match_the_python_generator() {
    let f = Fixture::load("det_check");
    assert_eq!(f.tensors.len(), 3);
    for (key, t) in &f.tensors {
        let ours = deterministic_values(key, &t.shape);
        assert_eq!(ours, t.data, "deterministic values of {key}");
    }
}

/// A checkpoint in a foreign key layout, loaded through `load_file` (layout
/// detection, key mapping, reshapes), gives the foreign model's logits.
fn check_foreign_checkpoint(name: &str, expected: Layout) {
    let f = Fixture::load(name);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.safetensors"));
    write_safetensors(&path, &f.group("param"), Default::default()).unwrap();
    let config = model_config(&f);
    for (backend, device) in backends() {
        let (model, layout) = load_file(Vit::new(&config, &device).unwrap(), &path).unwrap();
        assert_eq!(layout, expected);
        let out = model.forward(tensor(f.get("input"), &device));
        assert_close(&format!("{name} [{backend}] logits"), &host(out), f.get("output"), OUT_TOL);
    }
}

#[test]
fn timm_checkpoint_gives_timm_logits() {
    check_foreign_checkpoint("timm_vit", Layout::Timm);
}

#[test]
fn paper_code_vit_checkpoint_gives_its_logits() {
    check_foreign_checkpoint("paper_code_vit", Layout::PaperVit);
}

#[test]
fn paper_code_vit22b_checkpoint_gives_its_logits() {
    check_foreign_checkpoint("paper_code_vit22b", Layout::PaperVit22b);
}

#[test]
fn paper_code_first_version_vit22b_checkpoint_gives_its_logits() {
    check_foreign_checkpoint("paper_code_vit22b_v1", Layout::PaperVit22bV1);
}

/// vitlab's fused reflection padding (LibTorch: `reflection_pad2d` and its
/// backward; flex: burn's pad and a hand-written fold) equals burn's generic
/// `Tensor::pad`, output and input gradient, for uneven and wide paddings.
#[test]
fn fused_reflect_pad_equals_burns_pad_with_its_gradient() {
    use burn::tensor::ops::PadMode;
    use burn::tensor::Distribution;
    use vitlab::models::fused::reflect_pad;
    for (backend, device) in backends() {
        let ad = device.clone().autodiff();
        for [top, bottom, left, right] in [[1, 1, 1, 1], [2, 1, 3, 0], [0, 4, 1, 2]] {
            let what = format!("reflect pad {top} {bottom} {left} {right} [{backend}]");
            let x = Tensor::<4>::random([2, 3, 5, 6], Distribution::Normal(0.0, 1.0), &ad).require_grad();
            let ours = reflect_pad(x.clone(), [top, bottom, left, right]);
            let reference = x.clone().pad((left, right, top, bottom), PadMode::Reflect);
            assert_close(&format!("{what} output"), &host(ours.clone()), &host(reference.clone()), 0.0);
            let w = Tensor::<4>::random(ours.dims(), Distribution::Normal(0.0, 1.0), &ad);
            let g_ours = x.grad(&(ours * w.clone()).sum().backward()).unwrap();
            let g_ref = x.grad(&(reference * w).sum().backward()).unwrap();
            assert_close(&format!("{what} grad"), &host(g_ours), &host(g_ref), 1e-6);
        }
    }
}

/// vitlab's GELU (flex: its vectorised, multi-threaded kernels; LibTorch: ATen's
/// `gelu` and `gelu_backward`) equals the exact `x·Φ(x)` and its derivative,
/// computed in f64 on the host, under autodiff and without it: on a tensor large
/// enough for flex to split over threads, a small one, and a transposed
/// (non-contiguous) view, which flex hands to burn's own kernel. Tolerance 2e-7 of
/// max|x| (about 16 here) for the output and 3e-7 of it for the gradient; A&S 7.1.26's
/// erf error is 1.5e-7, and PyTorch's CPU kernel uses the same formula.
#[test]
fn fused_gelu_equals_the_exact_formula_with_its_gradient() {
    use burn::tensor::Distribution;
    use vitlab::models::fused::gelu;
    let exact = |x: f32| {
        let x = x as f64;
        let erf = libm::erf(x / std::f64::consts::SQRT_2);
        (0.5 * x * (1.0 + erf), 0.5 * (1.0 + erf) + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt())
    };
    for (backend, device) in backends() {
        for (shape, transposed) in [([4, 130, 192], false), ([3, 5, 7], false), ([4, 130, 192], true)] {
            let what = format!("gelu {shape:?} transposed {transposed} [{backend}]");
            let ad = device.clone().autodiff();
            let leaf = Tensor::<3>::random(shape, Distribution::Normal(0.0, 4.0), &ad).require_grad();
            let x = if transposed { leaf.clone().swap_dims(1, 2) } else { leaf.clone() };
            let w = Tensor::<3>::random(x.dims(), Distribution::Normal(0.0, 1.0), &ad);
            let y = gelu(x.clone());
            let dx = leaf.grad(&(y.clone() * w.clone()).sum().backward()).unwrap();
            let dx = if transposed { dx.swap_dims(1, 2) } else { dx };
            let (xs, ws) = (host(x.clone()), host(w.clone()));
            let expected_y: Vec<f32> = xs.data.iter().map(|&v| exact(v).0 as f32).collect();
            let expected_dx: Vec<f32> = xs.data.iter().zip(&ws.data).map(|(&v, &g)| (exact(v).1 * g as f64) as f32).collect();
            let scale = xs.data.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
            let shaped = |data| HostTensor::new(xs.shape.clone(), data);
            assert_close_scaled(&format!("{what} output"), &host(y), &shaped(expected_y.clone()), 2e-7, scale);
            assert_close_scaled(&format!("{what} grad"), &host(dx), &shaped(expected_dx), 3e-7, scale);
            // Inference (no autodiff) runs the same kernel.
            let plain = gelu(Tensor::<3>::from_data(burn::tensor::TensorData::new(xs.data.clone(), xs.shape.clone()), &device));
            assert_close_scaled(&format!("{what} inference"), &host(plain), &shaped(expected_y), 2e-7, scale);
        }
    }
}

/// vitlab's fused linear layer (LibTorch: `addmm`, as `nn.Linear`) gives `x·W + b`
/// and the gradients of x, W and b as computed in f64 on the host, and exactly
/// the gradients of what is tracked: everything, the parameters alone (a layer fed
/// by the images), or the input alone (frozen parameters). Tolerance 1e-5 of the
/// largest value (fp32 sums of 48 to 130 products).
#[test]
fn fused_linear_matches_the_formula_and_gives_the_tracked_gradients() {
    use burn::tensor::{Distribution, TensorData};
    use vitlab::models::fused::linear;
    let (n, d, e) = (130, 48, 36);
    for (backend, device) in backends() {
        let ad = device.clone().autodiff();
        for (track_x, track_params) in [(true, true), (false, true), (true, false)] {
            let what = format!("linear x tracked {track_x} params tracked {track_params} [{backend}]");
            let normal = Distribution::Normal(0.0, 1.0);
            let (mut x, mut w, mut b) = (
                Tensor::<2>::random([n, d], normal, &ad),
                Tensor::<2>::random([d, e], normal, &ad),
                Tensor::<1>::random([e], normal, &ad),
            );
            if track_x {
                x = x.require_grad();
            }
            if track_params {
                (w, b) = (w.require_grad(), b.require_grad());
            }
            let g = Tensor::<2>::random([n, e], normal, &ad);
            let y = linear(x.clone(), w.clone(), b.clone());
            let grads = (y.clone() * g.clone()).sum().backward();
            let (xs, ws, bs, gs) = (host(x.clone()), host(w.clone()), host(b.clone()), host(g));
            let at = |t: &HostTensor, i: usize, j: usize, cols: usize| t.data[i * cols + j] as f64;
            let table = |rows: usize, cols: usize, f: &dyn Fn(usize, usize) -> f64| {
                HostTensor::new(vec![rows, cols], (0..rows * cols).map(|k| f(k / cols, k % cols) as f32).collect())
            };
            let expected_y =
                table(n, e, &|i, j| bs.data[j] as f64 + (0..d).map(|k| at(&xs, i, k, d) * at(&ws, k, j, e)).sum::<f64>());
            let expected_dx = table(n, d, &|i, k| (0..e).map(|j| at(&gs, i, j, e) * at(&ws, k, j, e)).sum());
            let expected_dw = table(d, e, &|k, j| (0..n).map(|i| at(&xs, i, k, d) * at(&gs, i, j, e)).sum());
            let expected_db =
                HostTensor::new(vec![e], (0..e).map(|j| (0..n).map(|i| at(&gs, i, j, e)).sum::<f64>() as f32).collect());
            assert_close(&format!("{what} output"), &host(y), &expected_y, 1e-5);
            assert_eq!(x.grad(&grads).is_some(), track_x, "{what}: dx present");
            assert_eq!(w.grad(&grads).is_some(), track_params, "{what}: dW present");
            assert_eq!(b.grad(&grads).is_some(), track_params, "{what}: db present");
            if let Some(dx) = x.grad(&grads) {
                assert_close(&format!("{what} dx"), &host(dx), &expected_dx, 1e-5);
            }
            if let (Some(dw), Some(db)) = (w.grad(&grads), b.grad(&grads)) {
                assert_close(&format!("{what} dW"), &host(dw), &expected_dw, 1e-5);
                assert_close(&format!("{what} db"), &host(db), &expected_db, 1e-5);
            }
            // Inference (no autodiff): the backend's forward alone.
            let plain = |h: &HostTensor| TensorData::new(h.data.clone(), h.shape.clone());
            let y = linear(
                Tensor::<2>::from_data(plain(&xs), &device),
                Tensor::<2>::from_data(plain(&ws), &device),
                Tensor::<1>::from_data(plain(&bs), &device),
            );
            assert_close(&format!("{what} inference"), &host(y), &expected_y, 1e-5);
        }
    }
}

/// vitlab's fused convolution (LibTorch: PyTorch's `convolution_backward`)
/// equals burn's `Conv2d::forward`, and gives gradients exactly to what is
/// tracked: the input alone (a discriminator with frozen parameters scoring
/// generated images, the CycleGAN G step), the parameters alone (real images in
/// the D step), or both.
#[test]
fn fused_conv_gradients_follow_what_is_tracked() {
    use burn::nn::conv::Conv2dConfig;
    use burn::nn::PaddingConfig2d;
    use burn::tensor::Distribution;
    use vitlab::models::fused::conv2d;
    for (backend, device) in backends() {
        let ad = device.clone().autodiff();
        for (stride, padding) in [(1, PaddingConfig2d::Valid), (2, PaddingConfig2d::Explicit(1, 1, 1, 1))] {
            for (track_x, frozen) in [(true, false), (false, false), (true, true)] {
                let what = format!("conv stride {stride} x tracked {track_x} frozen {frozen} [{backend}]");
                let mut conv =
                    Conv2dConfig::new([3, 5], [4, 4]).with_stride([stride, stride]).with_padding(padding.clone()).init(&ad);
                if frozen {
                    conv = conv.no_grad();
                }
                let mut x = Tensor::<4>::random([2, 3, 9, 9], Distribution::Normal(0.0, 1.0), &ad);
                if track_x {
                    x = x.require_grad();
                }
                let (ours, reference) = (conv2d(&conv, x.clone()), conv.forward(x.clone()));
                assert_close(&format!("{what} output"), &host(ours.clone()), &host(reference.clone()), 1e-5);
                let w = Tensor::<4>::random(ours.dims(), Distribution::Normal(0.0, 1.0), &ad);
                let (g_ours, g_ref) = ((ours * w.clone()).sum().backward(), (reference * w).sum().backward());
                assert_eq!(x.grad(&g_ours).is_some(), track_x, "{what}: input gradient");
                if let (Some(a), Some(b)) = (x.grad(&g_ours), x.grad(&g_ref)) {
                    assert_close(&format!("{what} grad.input"), &host(a), &host(b), 1e-5);
                }
                let bias = conv.bias.as_ref().unwrap().val();
                for (name, ours, reference) in [
                    ("weight", conv.weight.val().grad(&g_ours).map(host), conv.weight.val().grad(&g_ref).map(host)),
                    ("bias", bias.grad(&g_ours).map(host), bias.grad(&g_ref).map(host)),
                ] {
                    assert_eq!(ours.is_some(), !frozen, "{what}: {name} gradient");
                    if let (Some(a), Some(b)) = (ours, reference) {
                        assert_close(&format!("{what} grad.{name}"), &a, &b, 1e-5);
                    }
                }
            }
        }
    }
}
