//! The optimisers against `torch.optim` (fixture: tools/make_optim_fixtures.py):
//! AdamW with decoupled decay, no decay on 1-D tensors and layer-wise LR decay;
//! Adam with an L2 term; SGD with momentum, plain and Nesterov. Each case runs
//! six steps with a learning rate and a gradient scale that change every step,
//! on every compiled backend, through vitlab's multi-tensor step.

mod common;

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};
use common::{assert_close, assert_close_scaled, backends, host, tensor, Fixture};
use vitlab::config::{OptimName, OptimSection};
use vitlab::train::optim::Optimizer;

#[derive(Module, Debug)]
struct ToyBlock {
    weight: Param<Tensor<2>>,
    bias: Param<Tensor<1>>,
}

/// Parameters with a ViT's key layout (`pos_embed`, `blocks.<i>.*`, `head.*`).
#[derive(Module, Debug)]
struct Toy {
    pos_embed: Param<Tensor<3>>,
    blocks: Vec<ToyBlock>,
    head: ToyBlock,
}

const KEYS: [&str; 7] =
    ["pos_embed", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias", "head.weight", "head.bias"];

fn param<const D: usize>(f: &Fixture, key: &str, device: &Device) -> Param<Tensor<D>> {
    Param::from_tensor(tensor::<D>(f.get(key), device).require_grad())
}

fn toy(f: &Fixture, prefix: &str, device: &Device) -> Toy {
    let block = |name: &str| ToyBlock {
        weight: param(f, &format!("{prefix}.{name}.weight"), device),
        bias: param(f, &format!("{prefix}.{name}.bias"), device),
    };
    Toy {
        pos_embed: param(f, &format!("{prefix}.pos_embed"), device),
        blocks: vec![block("blocks.0"), block("blocks.1")],
        head: block("head"),
    }
}

fn values(t: &Toy) -> Vec<(String, vitlab::models::weights::HostTensor)> {
    let v = [
        host(t.pos_embed.val()),
        host(t.blocks[0].weight.val()),
        host(t.blocks[0].bias.val()),
        host(t.blocks[1].weight.val()),
        host(t.blocks[1].bias.val()),
        host(t.head.weight.val()),
        host(t.head.bias.val()),
    ];
    KEYS.iter().map(|k| k.to_string()).zip(v).collect()
}

/// One step with the fixture's gradients of step `s`: the loss `sum(p * G)` over the
/// parameters has exactly those gradients.
fn step(f: &Fixture, case: &str, s: usize, opt: &mut Optimizer, model: Toy, device: &Device) -> Toy {
    let g = |key: &str| format!("{case}.grad{s}.{key}");
    let mut loss = (model.pos_embed.val() * tensor::<3>(f.get(&g("pos_embed")), device)).sum();
    for (i, b) in model.blocks.iter().enumerate() {
        loss = loss + (b.weight.val() * tensor::<2>(f.get(&g(&format!("blocks.{i}.weight"))), device)).sum();
        loss = loss + (b.bias.val() * tensor::<1>(f.get(&g(&format!("blocks.{i}.bias"))), device)).sum();
    }
    loss = loss + (model.head.weight.val() * tensor::<2>(f.get(&g("head.weight")), device)).sum();
    loss = loss + (model.head.bias.val() * tensor::<1>(f.get(&g("head.bias")), device)).sum();
    let grads = loss.backward();
    let lr = f.config["lr"][s].as_f64().unwrap();
    let scale = f.config["scale"][s].as_f64().unwrap();
    opt.step(model, &grads, lr, scale)
}

fn optimizer(f: &Fixture, case: &str) -> Optimizer {
    let c = &f.config["cases"][case];
    let name = match c["name"].as_str().unwrap() {
        "adamw" => OptimName::Adamw,
        "adam" => OptimName::Adam,
        _ => OptimName::Sgd,
    };
    let betas = [c["betas"][0].as_f64().unwrap(), c["betas"][1].as_f64().unwrap()];
    let config = OptimSection {
        name,
        lr: 0.0,
        weight_decay: c["weight_decay"].as_f64().unwrap(),
        betas,
        eps: c["eps"].as_f64().unwrap(),
        momentum: c["momentum"].as_f64().unwrap(),
        nesterov: c["nesterov"].as_bool().unwrap(),
        skip_decay_1d: c["skip_decay_1d"].as_bool().unwrap(),
        layer_decay: c["layer_decay"].as_f64().unwrap(),
    };
    Optimizer::for_vit(config, f.usize("depth"))
}

const CASES: [&str; 4] = ["adamw", "adam", "sgd", "sgd_nesterov"];

/// After every step each parameter is within 1e-6 of its largest magnitude of
/// PyTorch's; the whole update (last step's parameters minus the first's) within
/// 1e-4 of its own largest magnitude (the update is ~1e-3 of the weights, so this is
/// the finer check); the moments within 1e-5 after the last step.
#[test]
fn every_optimiser_takes_torch_optims_steps() {
    let f = Fixture::load("optim");
    let steps = f.usize("steps");
    for (backend, device) in backends() {
        let ad = device.autodiff();
        for case in CASES {
            let mut opt = optimizer(&f, case);
            let mut model = toy(&f, &format!("{case}.init"), &ad);
            for s in 0..steps {
                model = step(&f, case, s, &mut opt, model, &ad);
                for (key, got) in values(&model) {
                    assert_close(
                        &format!("{case} step {s} {key} [{}]", backend.name()),
                        &got,
                        f.get(&format!("{case}.param{s}.{key}")),
                        1e-6,
                    );
                }
            }
            for (key, got) in values(&model) {
                let init = &f.get(&format!("{case}.init.{key}")).data;
                let delta = |v: &[f32]| v.iter().zip(init).map(|(a, b)| a - b).collect::<Vec<f32>>();
                let want = f.get(&format!("{case}.param{}.{key}", steps - 1));
                let (got_d, want_d) = (delta(&got.data), delta(&want.data));
                let scale = want_d.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
                let (got_d, want_d) = (host_vec(got_d), host_vec(want_d));
                assert_close_scaled(&format!("{case} update of {key} [{}]", backend.name()), &got_d, &want_d, 1e-4, scale);
            }
            let state = opt.state();
            for prefix in ["m", "v"] {
                for key in KEYS {
                    let name = format!("{case}.{prefix}.{key}");
                    match f.tensors.get(&name) {
                        Some(want) => {
                            let got = state.get(&format!("{prefix}.{key}")).unwrap_or_else(|| panic!("{name}: no state"));
                            assert_close(&format!("{name} [{}]", backend.name()), got, want, 1e-5);
                        }
                        None => assert!(!state.contains_key(&format!("{prefix}.{key}")), "{name}: state PyTorch does not keep"),
                    }
                }
            }
        }
    }
}

fn host_vec(v: Vec<f32>) -> vitlab::models::weights::HostTensor {
    vitlab::models::weights::HostTensor::new(vec![v.len()], v)
}

/// A checkpoint's state (named per parameter) restored into a new optimiser
/// continues exactly as the uninterrupted one: the same bits after the last step.
#[test]
fn state_restored_mid_run_continues_bit_for_bit() {
    let f = Fixture::load("optim");
    let steps = f.usize("steps");
    for (backend, device) in backends() {
        let ad = device.autodiff();
        for case in CASES {
            let mut straight = optimizer(&f, case);
            let mut a = toy(&f, &format!("{case}.init"), &ad);
            for s in 0..steps {
                a = step(&f, case, s, &mut straight, a, &ad);
            }
            let mut first = optimizer(&f, case);
            let mut b = toy(&f, &format!("{case}.init"), &ad);
            for s in 0..3 {
                b = step(&f, case, s, &mut first, b, &ad);
            }
            let saved = first.state();
            let mut resumed = optimizer(&f, case);
            resumed.load_state(&saved, first.steps);
            for s in 3..steps {
                b = step(&f, case, s, &mut resumed, b, &ad);
            }
            for ((key, x), (_, y)) in values(&a).into_iter().zip(values(&b)) {
                assert_eq!(x.data, y.data, "{case} {key} [{}]: resumed differs", backend.name());
            }
        }
    }
}
