//! `precision = "bf16"` (models/precision.rs) against PyTorch's
//! `torch.autocast("cpu", dtype=torch.bfloat16)` on the same weights and inputs
//! (tools/make_bf16_fixtures.py), on LibTorch: the forward output and every
//! gradient of `sum(output * R)`.
//!
//! Two bf16 implementations agree only to bf16's precision (they round at
//! different places: the bias, PyTorch's bf16 layer norms of bf16 inputs), and
//! some gradients are far from exact in bf16 whoever computes them (a weight
//! gradient summed over many positions with cancellation: CPU autocast's own
//! PatchGAN gradients are up to 24 % of their scale away from float64). So each
//! gradient is held to the larger of a fixed tolerance and twice autocast's own
//! distance from float64, both against autocast and against float64: vitlab's
//! bf16 is never more than twice as far from the exact answer as PyTorch's.
//! So that a run silently in fp32 cannot pass, each case also asserts that
//! vitlab's output differs from float64 by more than fp32 arithmetic could (the
//! fp32 parity tests hold it within 1e-4; bf16's unit roundoff is 2^-9 ≈ 2e-3).
//!
//! LibTorch only, so the file is empty without the `tch` feature (a flex
//! build refuses `precision = "bf16"`: config/tests.rs); CI's tch step runs it.
#![cfg(feature = "tch")]

mod common;

/// bf16 against CPU autocast, relative to the reference tensor's max |value|.
/// Measured with tools/make_bf16_fixtures.py's cases (2026-12-04, torch 2.9.0):
/// outputs 2.7e-3 to 9.5e-3 from autocast; ViT gradients up to 2.2e-2.
const OUT_TOL: f64 = 2.5e-2;
const GRAD_TOL: f64 = 5e-2;
/// The per-gradient tolerance: at least GRAD_TOL, and at least this many times
/// autocast's own relative distance from float64.
const AUTOCAST_FACTOR: f64 = 2.0;
/// vitlab's bf16 output must be at least this far from float64: fp32 is within 1e-5 here.
const BF16_AT_LEAST: f64 = 2e-4;

mod libtorch {
    use burn::module::Module;
    use burn::tensor::{FloatDType, Tensor};
    use vitlab::backend::Backend;
    use vitlab::models::precision::autocast;
    use vitlab::models::weights::collect_grads;
    use vitlab::models::{Discriminator, DiscriminatorConfig, Vit};

    use super::common::{assert_close, assert_close_scaled, backends, host, model_config, tensor, with_weights, Fixture};
    use super::{AUTOCAST_FACTOR, BF16_AT_LEAST, GRAD_TOL, OUT_TOL};
    use vitlab::models::weights::HostTensor;

    fn check<M: Module, const D: usize, const O: usize>(
        name: &str,
        build: impl Fn(&Fixture, &burn::tensor::Device) -> M,
        forward: impl Fn(&M, Tensor<D>) -> Tensor<O>,
    ) {
        let f64_ref = Fixture::load(name);
        let autocast_ref = Fixture::load(&format!("bf16_{name}"));
        // The LibTorch backends of the parity tests' list (tch-cuda where a GPU is seen).
        for (backend, device) in backends().into_iter().filter(|(b, _)| matches!(b, Backend::Tch | Backend::TchCuda)) {
            check_on(name, backend, device, &f64_ref, &autocast_ref, &build, &forward);
        }
    }

    fn check_on<M: Module, const D: usize, const O: usize>(
        name: &str,
        backend: Backend,
        device: burn::tensor::Device,
        f64_ref: &Fixture,
        autocast_ref: &Fixture,
        build: &impl Fn(&Fixture, &burn::tensor::Device) -> M,
        forward: &impl Fn(&M, Tensor<D>) -> Tensor<O>,
    ) {
        let device = device.autodiff();
        let module = with_weights(f64_ref, build(f64_ref, &device).train());
        let input = tensor::<D>(f64_ref.get("input"), &device).require_grad();
        let _bf16 = autocast(Some(FloatDType::BF16));
        let output = forward(&module, input.clone());
        let out = host(output.clone());
        let what = format!("{name} [{backend}, bf16]");
        let err = assert_close(&format!("{what} output"), &out, autocast_ref.get("output"), OUT_TOL);
        let from_f64 = out.data.iter().zip(&f64_ref.get("output").data).fold(0f64, |m, (a, b)| m.max((a - b).abs() as f64));
        let scale = f64_ref.get("output").data.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
        assert!(
            from_f64 / scale > BF16_AT_LEAST,
            "{what}: output within {:.1e} of float64, so the products did not run in bf16",
            from_f64 / scale
        );
        assert_eq!(output.dtype(), burn::tensor::DType::F32, "{what}: the model's output is fp32 (the loss is computed in fp32)");

        let loss = (output * tensor::<O>(f64_ref.get("loss_weight"), &device)).sum();
        let grads = loss.backward();
        let expected = autocast_ref.group("grad");
        let exact = f64_ref.group("grad");
        // Gradients that are zero in exact arithmetic (a convolution's bias right
        // before InstanceNorm) are rounding noise in both: compared on the model's scale.
        let global = expected.values().flat_map(|t| &t.data).fold(0f32, |m, v| m.max(v.abs())) as f64;
        let mut worst = 0f64;
        let mut compare = |key: &str, act: &HostTensor| {
            let (exp, f64_exp) = (&expected[key], &exact[key]);
            let own = max_abs(&f64_exp.data);
            let scale = if own < 1e-3 * global { global } else { own };
            let autocast_error = max_diff(&exp.data, &f64_exp.data) / scale;
            let tol = GRAD_TOL.max(AUTOCAST_FACTOR * autocast_error);
            let e = assert_close_scaled(&format!("{what} grad.{key} (vs autocast)"), act, exp, tol, scale);
            assert_close_scaled(&format!("{what} grad.{key} (vs float64)"), act, f64_exp, tol, scale);
            worst = worst.max(e);
        };
        compare("input", &host(input.grad(&grads).expect("input gradient")));
        let actual = collect_grads(&module, &grads);
        for key in expected.keys().filter(|k| *k != "input") {
            compare(key, actual.get(key).unwrap_or_else(|| panic!("{what}: no gradient for {key}")));
        }
        assert_eq!(expected.len() - 1, actual.len(), "{what}: every parameter's gradient is compared");
        eprintln!(
            "{what}: output {err:.2e}, worst gradient {worst:.2e} of max |autocast|; output {:.2e} from float64",
            from_f64 / scale
        );
    }

    fn max_abs(v: &[f32]) -> f64 {
        v.iter().fold(0f64, |m, x| m.max(x.abs() as f64))
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((*x as f64 - *y as f64).abs()))
    }

    fn vit(name: &str) {
        check(name, |f, device| Vit::new(&model_config(f), device).unwrap(), |m, x: Tensor<4>| m.forward(x));
    }

    #[test]
    fn vit_cls_linear_matches_cpu_autocast() {
        vit("model_vit_cls_linear");
    }

    #[test]
    fn vit22b_cls_linear_matches_cpu_autocast() {
        vit("model_vit22b_cls_linear");
    }

    #[test]
    fn vit22b_nonorm_fused_projections_match_cpu_autocast() {
        vit("model_vit22b-nonorm_cls_linear");
    }

    #[test]
    fn vit_map_head_matches_cpu_autocast() {
        vit("model_vit_map_linear");
    }

    #[test]
    fn patchgan_discriminator_convolutions_match_cpu_autocast() {
        let name = "discriminator_patchgan";
        check(
            name,
            |f, device| {
                let config = DiscriminatorConfig {
                    kind: f.str("discriminator").parse().unwrap(),
                    channels: f.usize("channels"),
                    width: f.usize("width"),
                };
                Discriminator::new(&config, device).unwrap()
            },
            |m, x: Tensor<4>| m.forward(x),
        );
    }
}
