//! Tests of the policy augmentations: every op against torchvision's outputs
//! (`tests/fixtures/augment/augment.safetensors`, made by
//! `tools/make_augment_fixtures.py`), the magnitude bins and sub-policy tables
//! against torchvision's, and the policies' draws.

use super::*;
use safetensors::SafeTensors;
use serde_json::Value;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/augment/augment.safetensors");

struct Fixture {
    bytes: Vec<u8>,
    index: Value,
}

impl Fixture {
    fn load() -> Fixture {
        let bytes = std::fs::read(FIXTURE).unwrap_or_else(|e| panic!("{FIXTURE}: {e}"));
        let (_, meta) = SafeTensors::read_metadata(&bytes).expect("safetensors header");
        let json = meta.metadata().as_ref().and_then(|m| m.get("index")).expect("index metadata").clone();
        Fixture { bytes, index: serde_json::from_str(&json).expect("index JSON") }
    }

    /// A tensor's shape and bytes.
    fn tensor(&self, name: &str) -> (Vec<usize>, Vec<u8>) {
        let st = SafeTensors::deserialize(&self.bytes).expect("safetensors");
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        (t.shape().to_vec(), t.data().to_vec())
    }

    /// Input image `key` as (pixels, channels, h, w).
    fn image(&self, key: &str) -> (Vec<u8>, usize, usize, usize) {
        let (shape, data) = self.tensor(&format!("input/{key}"));
        (data, shape[0], shape[1], shape[2])
    }

    /// Item `i` of a stacked [N, C, H, W] tensor.
    fn item(&self, name: &str, i: usize) -> Vec<u8> {
        let (shape, data) = self.tensor(name);
        let n: usize = shape[1..].iter().product();
        data[i * n..(i + 1) * n].to_vec()
    }
}

/// (pixels that differ, largest difference).
fn diff(a: &[u8], b: &[u8]) -> (usize, u8) {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold((0, 0), |(n, m), (&x, &y)| (n + (x != y) as usize, m.max(x.abs_diff(y))))
}

/// Allowed (largest |difference|, fraction of differing samples) per op against
/// torchvision + PIL. Every op is bit-exact: the geometric ops reproduce PIL's
/// 16.16 fixed-point NEAREST sampler and its transposes, the enhance ops PIL's f32
/// blend/filter arithmetic and truncation, and the matrices are computed with
/// torchvision's and PIL's f64 operations in the same order (same libm).
fn tolerance(_op: Op) -> (u8, f64) {
    (0, 0.0)
}

#[test]
fn every_op_matches_torchvision_on_pil_images() {
    let fx = Fixture::load();
    let cases = fx.index["cases"].as_array().expect("cases");
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let mut failures = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for case in cases {
        let key = case["image"].as_str().unwrap();
        let op: Op = case["op"].as_str().unwrap().parse().unwrap();
        let magnitude = case["magnitude"].as_f64().unwrap() as f32;
        let (img, c, h, w) = fx.image(key);
        let expected = fx.item(&format!("output/{key}"), case["index"].as_u64().unwrap() as usize);
        apply(op, magnitude, &img, c, h, w, &mut out);
        let (n, max) = diff(&out, &expected);
        let (tol_max, tol_frac) = tolerance(op);
        if max > tol_max || n as f64 > tol_frac * out.len() as f64 {
            failures.push(format!("{key} {op} {magnitude} ({}): {n} of {} differ, max {max}", case["source"], out.len()));
        }
        seen.insert(op);
    }
    assert_eq!(seen.len(), Op::ALL.len(), "the fixture covers every op");
    assert!(failures.is_empty(), "{} cases off:\n{}", failures.len(), failures.join("\n"));
}

/// The fixture test would catch a flipped sign convention or swapped axes: the
/// other sign (or the other axis) changes the output of every geometric case.
#[test]
fn fixture_catches_sign_and_axis_mutations() {
    let fx = Fixture::load();
    let mut out = Vec::new();
    let mut checked = 0;
    for case in fx.index["cases"].as_array().unwrap() {
        let op: Op = case["op"].as_str().unwrap().parse().unwrap();
        let magnitude = case["magnitude"].as_f64().unwrap() as f32;
        if !op.signed() || magnitude == 0.0 {
            continue;
        }
        let key = case["image"].as_str().unwrap();
        let (img, c, h, w) = fx.image(key);
        if op == Op::Color && c == 1 {
            continue; // Color leaves grayscale images unchanged
        }
        let expected = fx.item(&format!("output/{key}"), case["index"].as_u64().unwrap() as usize);
        apply(op, -magnitude, &img, c, h, w, &mut out);
        assert_ne!(out, expected, "{key} {op} {magnitude}: the opposite sign gives the same pixels");
        let swapped = match op {
            Op::ShearX => Op::ShearY,
            Op::ShearY => Op::ShearX,
            Op::TranslateX => Op::TranslateY,
            Op::TranslateY => Op::TranslateX,
            _ => continue,
        };
        apply(swapped, magnitude, &img, c, h, w, &mut out);
        assert_ne!(out, expected, "{key} {op} {magnitude}: {swapped} gives the same pixels");
        checked += 1;
    }
    assert!(checked >= 20, "{checked}");
}

#[test]
fn autoaugment_subpolicies_match_torchvision_with_fixed_decisions() {
    let fx = Fixture::load();
    let cases = fx.index["policy_cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    let mut cur = Vec::new();
    for case in cases {
        let key = case["image"].as_str().unwrap();
        let (img, c, h, w) = fx.image(key);
        let policy = match case["policy"].as_str().unwrap() {
            "cifar10" => AutoAugmentPolicy::Cifar10,
            "imagenet" => AutoAugmentPolicy::Imagenet,
            "svhn" => AutoAugmentPolicy::Svhn,
            p => panic!("{p}"),
        };
        let f32s = |v: &Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
        let (probs, signs) = (f32s(&case["probs"]), f32s(&case["signs"]));
        // torchvision negates when its sign draw is 0.
        let d = Decision {
            sub: case["sub"].as_u64().unwrap() as usize,
            probs: [probs[0] as f32, probs[1] as f32],
            negate: [signs[0] == 0.0, signs[1] == 0.0],
        };
        cur.clone_from(&img);
        let mut next = Vec::new();
        policy.for_each_op(&d, h, w, |op, m| {
            apply(op, m, &cur, c, h, w, &mut next);
            std::mem::swap(&mut cur, &mut next);
        });
        let expected = fx.item(&format!("policy/{key}"), case["index"].as_u64().unwrap() as usize);
        assert_eq!(diff(&cur, &expected), (0, 0), "{case}");
    }
}

#[test]
fn magnitude_bins_match_torchvision() {
    let fx = Fixture::load();
    let spaces = fx.index["spaces"].as_object().unwrap();
    assert!(spaces.len() >= 6);
    for (key, table) in spaces {
        let (space, (h, w)) = match key.split_once('/') {
            Some((_, size)) => {
                let (h, w) = size.split_once('x').unwrap();
                (Space::Standard, (h.parse().unwrap(), w.parse().unwrap()))
            }
            None => (Space::Wide, (32, 32)),
        };
        for (name, bins) in table.as_object().unwrap() {
            let op: Op = name.parse().unwrap();
            let bins = bins.as_array().unwrap();
            if bins.is_empty() {
                assert_eq!(space.magnitude(op, 3, 10, h, w), 0.0, "{key} {op}");
                continue;
            }
            for (i, v) in bins.iter().enumerate() {
                let want = v.as_f64().unwrap() as f32;
                let got = space.magnitude(op, i, bins.len(), h, w);
                assert_eq!(got.to_bits(), want.to_bits(), "{key} {op} bin {i}: {got} vs torch {want}");
                assert_eq!(space.magnitude_at(op, i as f64, bins.len(), h, w), got);
            }
        }
    }
}

#[test]
fn policy_tables_and_op_orders_match_torchvision() {
    let fx = Fixture::load();
    for (name, policy) in
        [("cifar10", AutoAugmentPolicy::Cifar10), ("imagenet", AutoAugmentPolicy::Imagenet), ("svhn", AutoAugmentPolicy::Svhn)]
    {
        let want = fx.index["policies"][name].as_array().unwrap();
        let got = policy.subpolicies();
        assert_eq!(want.len(), got.len(), "{name}");
        for (w, g) in want.iter().zip(got) {
            for (ws, &(op, p, bin)) in w.as_array().unwrap().iter().zip(g) {
                assert_eq!(ws[0].as_str().unwrap(), op.name(), "{name}: {w}");
                assert_eq!(ws[1].as_f64().unwrap() as f32, p, "{name}: {w}");
                assert_eq!(ws[2].as_u64().map(|b| b as u8), bin, "{name}: {w}");
            }
        }
    }
    let names: Vec<_> = Space::OPS.iter().map(|op| Value::from(op.name())).collect();
    assert_eq!(fx.index["randaugment_ops"].as_array().unwrap(), &names);
    assert_eq!(fx.index["trivialaugment_ops"].as_array().unwrap(), &names);
}

fn random_image(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.below(256) as u8).collect()
}

fn all_policies() -> Vec<Policy> {
    let mut v: Vec<Policy> = Policy::NAMES.iter().map(|n| n.parse().unwrap()).collect();
    v.push(Policy::RandAugment(RandAugment { num_ops: 3, magnitude: 12.0, magnitude_std: 0.5, num_magnitude_bins: 31 }));
    v.push(Policy::RandAugment(RandAugment { magnitude_std: f64::INFINITY, ..RandAugment::default() }));
    v
}

#[test]
fn draws_are_deterministic_for_a_seed() {
    let img = random_image(1, 3 * 32 * 32);
    for policy in all_policies() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut outputs = std::collections::HashSet::new();
        for seed in 0..40 {
            let (mut r1, mut r2) = (Rng::new(seed), Rng::new(seed));
            apply_policy(&policy, &img, 3, 32, 32, &mut r1, &mut a);
            apply_policy(&policy, &img, 3, 32, 32, &mut r2, &mut b);
            assert_eq!(a, b, "{policy:?} seed {seed}");
            assert_eq!(r1.state(), r2.state());
            // apply_policy is the same as applying the sampled ops in turn.
            let mut chained = img.clone();
            let mut tmp = Vec::new();
            for (op, m) in policy.sample(32, 32, &mut Rng::new(seed)) {
                apply(op, m, &chained, 3, 32, 32, &mut tmp);
                std::mem::swap(&mut chained, &mut tmp);
            }
            assert_eq!(a, chained, "{policy:?} seed {seed}");
            outputs.insert(a.clone());
        }
        let expected = if policy == Policy::None { 1 } else { 10 };
        assert!(outputs.len() >= expected, "{policy:?}: {} distinct outputs of 40 seeds", outputs.len());
    }
}

/// Pearson's chi-square statistic of `counts` against a uniform distribution.
fn chi_square(counts: &[usize]) -> f64 {
    let n: usize = counts.iter().sum();
    let e = n as f64 / counts.len() as f64;
    counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
}

#[test]
fn autoaugment_picks_subpolicies_uniformly_and_steps_with_their_probabilities() {
    let policy = AutoAugmentPolicy::Cifar10;
    let mut rng = Rng::new(42);
    let n = 250_000;
    let mut counts = [0usize; 25];
    let mut applied = [[0usize; 2]; 25];
    let mut negated = 0;
    for _ in 0..n {
        let d = policy.draw(&mut rng);
        counts[d.sub] += 1;
        for (i, &(_, p, _)) in policy.subpolicies()[d.sub].iter().enumerate() {
            applied[d.sub][i] += (d.probs[i] <= p) as usize;
        }
        negated += d.negate[0] as usize;
    }
    // 24 degrees of freedom: P(chi2 > 51.2) = 0.001.
    let chi2 = chi_square(&counts);
    assert!(chi2 < 51.2, "sub-policy counts {counts:?}: chi2 {chi2}");
    for (sub, steps) in policy.subpolicies().iter().enumerate() {
        for (i, &(op, p, _)) in steps.iter().enumerate() {
            let rate = applied[sub][i] as f64 / counts[sub] as f64;
            assert!((rate - p as f64).abs() < 0.02, "sub-policy {sub} step {i} ({op}, p {p}): applied {rate}");
        }
    }
    assert!((negated as f64 / n as f64 - 0.5).abs() < 0.005);
}

#[test]
fn randaugment_applies_num_ops_ops_from_the_whole_space() {
    let mut rng = Rng::new(3);
    for num_ops in [0, 1, 2, 3, 5] {
        let ra = Policy::RandAugment(RandAugment { num_ops, ..RandAugment::default() });
        for _ in 0..200 {
            assert_eq!(ra.sample(32, 32, &mut rng).len(), num_ops);
        }
    }
    let ra = Policy::RandAugment(RandAugment::default());
    let mut counts = [0usize; 14];
    for _ in 0..70_000 {
        for (op, _) in ra.sample(32, 32, &mut rng) {
            counts[Space::OPS.iter().position(|&o| o == op).unwrap()] += 1;
        }
    }
    // 13 degrees of freedom: P(chi2 > 34.5) = 0.001.
    assert!(chi_square(&counts) < 34.5, "{counts:?}");
}

#[test]
fn randaugment_magnitude_is_fixed_without_noise_and_spread_with_it() {
    let (h, w) = (32, 32);
    let mut rng = Rng::new(5);
    let fixed = RandAugment::default();
    let mut signs = std::collections::HashSet::new();
    for _ in 0..2000 {
        fixed.for_each_op(h, w, &mut rng, |op, m| {
            let want = Space::Standard.magnitude(op, 9, 31, h, w);
            assert_eq!(m.abs(), want, "{op}");
            if op.signed() {
                signs.insert(m > 0.0);
            } else {
                assert!(m >= 0.0, "{op} {m}");
            }
        });
    }
    assert_eq!(signs.len(), 2);
    // Noise: rotation levels vary around 9 of 30 (9 degrees), clipped to [0, 30] degrees.
    let noisy = RandAugment { num_ops: 1, magnitude_std: 3.0, ..RandAugment::default() };
    let mut rotations = Vec::new();
    for _ in 0..20_000 {
        noisy.for_each_op(h, w, &mut rng, |op, m| {
            if op == Op::Rotate {
                rotations.push(m.abs() as f64);
            }
        });
    }
    let mean = rotations.iter().sum::<f64>() / rotations.len() as f64;
    let sd = (rotations.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rotations.len() as f64).sqrt();
    assert!(rotations.iter().all(|&r| (0.0..=30.0).contains(&r)));
    assert!((mean - 9.0).abs() < 0.2 && (sd - 3.0).abs() < 0.2, "mean {mean} sd {sd}");
    // mstd = inf: uniform levels in [0, magnitude).
    let uniform = RandAugment { num_ops: 1, magnitude_std: f64::INFINITY, ..RandAugment::default() };
    let mut top: f32 = 0.0;
    for _ in 0..5000 {
        uniform.for_each_op(h, w, &mut rng, |op, m| {
            if op == Op::Rotate {
                assert!(m.abs() <= 9.0, "{m}");
                top = top.max(m.abs());
            }
        });
    }
    assert!(top > 8.5);
}

#[test]
fn trivialaugment_draws_ops_bins_and_signs_uniformly() {
    let ta = TrivialAugmentWide::default();
    let mut rng = Rng::new(9);
    let mut ops = [0usize; 14];
    let mut bins = [0usize; 31];
    let mut negative = 0;
    let n = 100_000;
    for _ in 0..n {
        ta.for_each_op(32, 32, &mut rng, |op, m| {
            ops[Space::OPS.iter().position(|&o| o == op).unwrap()] += 1;
            if op == Op::Rotate {
                // Wide rotations: 0, 4.5, ..., 135 degrees.
                let bin = (m.abs() / 4.5).round() as usize;
                assert_eq!(Space::Wide.magnitude(op, bin, 31, 32, 32), m.abs());
                bins[bin] += 1;
                negative += (m < 0.0) as usize;
            }
        });
    }
    assert!(chi_square(&ops) < 34.5, "{ops:?}");
    // 30 degrees of freedom: P(chi2 > 59.7) = 0.001.
    assert!(chi_square(&bins) < 59.7, "{bins:?}");
    let rotations: usize = bins.iter().sum();
    // Bin 0 (0 degrees) has no sign to flip.
    let signed = rotations - bins[0];
    assert!((negative as f64 / signed as f64 - 0.5).abs() < 0.03, "{negative} of {signed}");
}

#[test]
fn names_parse_and_errors_list_the_accepted_names() {
    for name in Policy::NAMES {
        assert_eq!(name.parse::<Policy>().unwrap().name(), name);
    }
    for op in Op::ALL {
        assert_eq!(op.name().parse::<Op>(), Ok(op));
    }
    let err = "autoaugment-cifar100".parse::<Policy>().unwrap_err();
    assert_eq!(err, AugmentError::UnknownPolicy("autoaugment-cifar100".into()));
    let msg = err.to_string();
    assert!(msg.contains("`autoaugment-cifar100`"), "{msg}");
    for name in Policy::NAMES {
        assert!(msg.contains(name), "{msg} lacks {name}");
    }
    let msg = "ShearX".parse::<Op>().unwrap_err().to_string();
    for op in Op::ALL {
        assert!(msg.contains(op.name()), "{msg} lacks {op}");
    }
    let parse = |ra: RandAugment| Policy::parse("randaugment", ra.num_ops, ra.magnitude, ra.magnitude_std, ra.num_magnitude_bins);
    let bad = |ra: RandAugment| match parse(ra) {
        Err(AugmentError::Invalid(param, _)) => param,
        other => panic!("{other:?}"),
    };
    let ra = RandAugment::default();
    assert_eq!(bad(RandAugment { magnitude: 31.0, ..ra.clone() }), "magnitude");
    assert_eq!(bad(RandAugment { magnitude: f64::NAN, ..ra.clone() }), "magnitude");
    assert_eq!(bad(RandAugment { num_magnitude_bins: 1, magnitude: 0.0, ..ra.clone() }), "num_magnitude_bins");
    assert_eq!(bad(RandAugment { magnitude_std: -1.0, ..ra.clone() }), "magnitude_std");
    assert_eq!(
        parse(RandAugment { magnitude: 30.0, ..ra.clone() }),
        Ok(Policy::RandAugment(RandAugment { magnitude: 30.0, ..ra }))
    );
    // The RandAugment parameters do not matter to the other policies.
    assert_eq!(Policy::parse("trivialaugment", 0, -1.0, -1.0, 0), Ok(Policy::TrivialAugmentWide(TrivialAugmentWide::default())));
    assert!(Policy::parse("none", 2, 9.0, 0.0, 31).unwrap().is_none());
    let message: String = Policy::parse("auto", 2, 9.0, 0.0, 31).unwrap_err().into();
    assert!(message.starts_with("unknown augmentation policy `auto`; accepted: none, autoaugment-cifar10"), "{message}");
}

#[test]
fn degenerate_inputs() {
    let mut out = Vec::new();
    // A constant image: equalize and autocontrast leave it, contrast keeps it.
    let flat = vec![77u8; 3 * 8 * 8];
    for (op, m) in [(Op::Equalize, 0.0), (Op::AutoContrast, 0.0), (Op::Contrast, 0.7), (Op::Sharpness, 0.9)] {
        apply(op, m, &flat, 3, 8, 8, &mut out);
        assert_eq!(out, flat, "{op}");
    }
    let img = random_image(2, 3 * 12 * 10);
    // Neutral magnitudes are the identity.
    for (op, m) in [
        (Op::Rotate, 0.0),
        (Op::Rotate, -360.0),
        (Op::ShearX, 0.0),
        (Op::TranslateY, 0.9),
        (Op::Brightness, 0.0),
        (Op::Color, 0.0),
        (Op::Posterize, 8.0),
        (Op::Solarize, 256.0),
    ] {
        apply(op, m, &img, 3, 12, 10, &mut out);
        assert_eq!(out, img, "{op} {m}");
    }
    // Shifting out of the frame leaves the fill; solarize at 0 inverts.
    apply(Op::TranslateX, -10.0, &img, 3, 12, 10, &mut out);
    assert!(out.iter().all(|&v| v == 0));
    apply(Op::Solarize, 0.0, &img, 3, 12, 10, &mut out);
    let mut inv = Vec::new();
    apply(Op::Invert, 0.0, &img, 3, 12, 10, &mut inv);
    assert_eq!(out, inv);
    // Other channel counts: Color and Contrast are left alone, the rest works per channel.
    let two = random_image(4, 2 * 6 * 6);
    for op in [Op::Color, Op::Contrast] {
        apply(op, 0.5, &two, 2, 6, 6, &mut out);
        assert_eq!(out, two);
    }
    apply(Op::Rotate, 180.0, &two, 2, 6, 6, &mut out);
    assert_eq!(out[0], two[35]);
}

/// Throughput of AutoAugment-cifar10 on 32x32 RGB images in one thread:
/// `cargo test --release -p vitlab --lib autoaugment::tests::throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    let images: Vec<Vec<u8>> = (0..256).map(|s| random_image(s, 3 * 32 * 32)).collect();
    let mut out = Vec::new();
    for name in ["autoaugment-cifar10", "randaugment", "trivialaugment"] {
        let policy: Policy = name.parse().unwrap();
        let mut rng = Rng::new(0);
        let n = 200_000;
        let t = std::time::Instant::now();
        let mut check = 0u64;
        for i in 0..n {
            apply_policy(&policy, &images[i % images.len()], 3, 32, 32, &mut rng, &mut out);
            check += out[i % out.len()] as u64;
        }
        let s = t.elapsed().as_secs_f64();
        println!("{name}: {:.0} images/s in one thread ({check})", n as f64 / s);
    }
}
