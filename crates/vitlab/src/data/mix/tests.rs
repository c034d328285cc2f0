//! Mixup / CutMix against timm's recorded draws (tools/make_mix_fixtures.py), bit for bit.
//! The fixture helpers and the draw replay [`Script`] are shared with the
//! tests of [`super::super::erase`] and [`super::super::sampler`].

use serde_json::Value;

use super::*;

pub(crate) fn fixture(name: &str) -> Vec<Value> {
    let path = format!("{}/tests/fixtures/mix/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str::<Value>(&text).unwrap()["cases"].as_array().unwrap().clone()
}
pub(crate) fn num(v: &Value) -> f64 {
    v.as_f64().unwrap()
}
pub(crate) fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| num(x) as f32).collect()
}
pub(crate) fn usizes(v: &Value) -> Vec<usize> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
}
fn bbox(v: &Value) -> Option<Bbox> {
    v.as_array().map(|_| usizes(v)).map(|b| Bbox { y0: b[0], y1: b[1], x0: b[2], x1: b[3] })
}
fn shape4(v: &Value) -> [usize; 4] {
    usizes(v).try_into().unwrap()
}
fn kind(v: &Value) -> MixKind {
    match v.as_str().unwrap() {
        "none" => MixKind::None,
        "mixup" => MixKind::Mixup,
        _ => MixKind::Cutmix,
    }
}
fn labels(v: &Value) -> Vec<u32> {
    usizes(v).into_iter().map(|l| l as u32).collect()
}
pub(crate) fn batch(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.normal() as f32).collect()
}

/// Replays a draw log of tools/make_mix_fixtures.py.
pub(crate) struct Script(Vec<Value>, usize);
impl Script {
    pub(crate) fn new(v: &Value) -> Self {
        Script(v.as_array().unwrap().clone(), 0)
    }
    fn next(&mut self, tag: &str) -> Value {
        let d = self.0.get(self.1).unwrap_or_else(|| panic!("ran out of draws wanting {tag}")).clone();
        assert_eq!(d[0], tag, "draw {}", self.1);
        self.1 += 1;
        d
    }
    pub(crate) fn done(&self) {
        assert_eq!(self.1, self.0.len(), "draws left over");
    }
}
impl Draws for Script {
    fn unit(&mut self) -> f64 {
        num(&self.next("unit")[1])
    }
    fn below(&mut self, n: usize) -> usize {
        let d = self.next("below");
        assert_eq!(d[2].as_u64(), Some(n as u64), "range of a below() draw");
        d[1].as_u64().unwrap() as usize
    }
    fn beta(&mut self, _: f64, _: f64) -> f64 {
        num(&self.next("beta")[1])
    }
    fn normal(&mut self) -> f64 {
        num(&self.next("normal")[1])
    }
    fn permutation(&mut self, n: usize) -> Vec<usize> {
        let p = usizes(&self.next("perm")[1]);
        assert_eq!(p.len(), n);
        p
    }
}

#[test]
fn fixture_cutmix_boxes() {
    for c in fixture("bbox.json") {
        let rule = if c["rule"] == "timm" { BoxRule::Timm } else { BoxRule::Symmetric };
        let minmax = c["minmax"].as_array().map(|m| (num(&m[0]), num(&m[1])));
        let mut s = Script::new(&c["draws"]);
        let (h, w) = (c["h"].as_u64().unwrap() as usize, c["w"].as_u64().unwrap() as usize);
        let (b, lam) = cutmix_box_with(&mut s, h, w, num(&c["lam"]), minmax, c["correct_lam"].as_bool().unwrap(), rule);
        s.done();
        assert_eq!(Some(b), bbox(&c["bbox"]), "{c}");
        assert!((lam - num(&c["lam_out"])).abs() < 1e-12, "{c}");
    }
}

#[test]
fn fixture_mixup_target() {
    for c in fixture("mixup_target.json") {
        let (y, k) = (labels(&c["labels"]), c["num_classes"].as_u64().unwrap() as usize);
        let mut out = vec![0.0; y.len() * k];
        let flip: Vec<usize> = (0..y.len()).rev().collect();
        mixup_target(&y, &flip, k, num(&c["lam"]), num(&c["smoothing"]), &mut out);
        assert_eq!(out, f32s(&c["target"]), "{c}");
    }
}

fn check_mix(m: &Mixup, c: &Value) -> (Vec<f32>, MixInfo) {
    let [n, ..] = shape4(&c["shape"]);
    let mut x = f32s(&c["input"]);
    let mut t = vec![f32::NAN; n * m.num_classes];
    let mut s = Script::new(&c["draws"]);
    let info = m.apply_with(&mut x, shape4(&c["shape"]), &labels(&c["labels"]), &mut t, &mut s);
    s.done();
    let name = &c["name"];
    assert_eq!(x, f32s(&c["output"]), "{name}: mixed batch");
    assert_eq!((info.kind, info.bbox), (kind(&c["kind"]), bbox(&c["bbox"])), "{name}");
    assert!((info.lam - num(&c["lam"])).abs() < 1e-12, "{name}: lam {} vs {}", info.lam, c["lam"]);
    (t, info)
}

#[test]
fn fixture_timm_mix_batch() {
    for c in fixture("mix_batch.json") {
        let g = &c["config"];
        let m = Mixup {
            mixup_alpha: num(&g["mixup_alpha"]),
            cutmix_alpha: num(&g["cutmix_alpha"]),
            cutmix_minmax: g["cutmix_minmax"].as_array().map(|v| (num(&v[0]), num(&v[1]))),
            prob: num(&g["prob"]),
            switch_prob: num(&g["switch_prob"]),
            correct_lam: g["correct_lam"].as_bool().unwrap(),
            label_smoothing: num(&g["label_smoothing"]),
            ..Mixup::timm(g["num_classes"].as_u64().unwrap() as usize)
        };
        let (t, _) = check_mix(&m, &c);
        assert_eq!(t, f32s(&c["target"]), "{}: targets", c["name"]);
    }
}

#[test]
fn fixture_lee_mix_and_loss_equality() {
    for c in fixture("lee_mix.json") {
        let k = c["num_classes"].as_u64().unwrap() as usize;
        let on = |b: &Value| if b.as_bool().unwrap() { 1.0 } else { 0.0 };
        let m = Mixup {
            mixup_alpha: on(&c["mixup"]),
            cutmix_alpha: on(&c["cutmix"]),
            label_smoothing: num(&c["smoothing"]),
            ..Mixup::lee(k)
        };
        let (t, info) = check_mix(&m, &c);
        if let Some(p) = c["partners"].as_array() {
            assert_eq!(info.partners, p.iter().map(|v| v.as_u64().unwrap() as usize).collect::<Vec<_>>());
        }
        // soft-target CE against our targets == their lam-weighted LabelSmoothingCrossEntropy
        let loss = soft_target_ce(&f32s(&c["logits"]), &t, t.len() / k, k);
        assert!((loss - num(&c["loss"])).abs() < 1e-5 * num(&c["loss"]), "{}: {loss} vs {}", c["name"], c["loss"]);
    }
}

#[test]
fn fixture_soft_target_ce() {
    for c in fixture("soft_ce.json") {
        let (n, k) = (c["n"].as_u64().unwrap() as usize, c["k"].as_u64().unwrap() as usize);
        let loss = soft_target_ce(&f32s(&c["logits"]), &f32s(&c["targets"]), n, k);
        assert!((loss - num(&c["loss"])).abs() < 1e-5 * num(&c["loss"]).abs().max(1.0), "{loss} vs {}", c["loss"]);
    }
    assert!((soft_target_ce(&[0.5; 8], &[0.25; 8], 2, 4) - 4f64.ln()).abs() < 1e-12);
}

const SHAPE: [usize; 4] = [6, 3, 8, 10];

#[test]
fn no_mix_keeps_batch_and_gives_smoothed_one_hots() {
    let m = Mixup { prob: 0.0, ..Mixup::deit(5) };
    let x0 = batch(SHAPE.iter().product(), 1);
    let y = [0, 4, 2, 2, 1, 3];
    for seed in 0..20 {
        let (mut x, mut t) = (x0.clone(), vec![0.0; 30]);
        let info = m.apply(&mut x, SHAPE, &y, &mut t, &mut Rng::new(seed));
        assert_eq!((info.kind, info.lam, x == x0), (MixKind::None, 1.0, true));
        for (row, &l) in t.chunks(5).zip(&y) {
            for (k, &v) in row.iter().enumerate() {
                assert_eq!(v, if k == l as usize { 0.92 } else { 0.02 });
            }
        }
    }
}

#[test]
fn cutmix_swaps_the_box_and_lam_is_the_pixel_ratio() {
    let [n, c, h, w] = SHAPE;
    let x0 = batch(n * c * h * w, 2); // distinct values: every copied pixel changes
    for (partner, box_rule) in [(Partner::Flip, BoxRule::Timm), (Partner::Permutation, BoxRule::Symmetric)] {
        let m = Mixup { switch_prob: 1.0, partner, box_rule, ..Mixup::deit(4) };
        for seed in 0..50 {
            let (mut x, mut t) = (x0.clone(), vec![0.0; n * 4]);
            let y = [0, 1, 2, 3, 0, 1];
            let info = m.apply(&mut x, SHAPE, &y, &mut t, &mut Rng::new(seed));
            assert_eq!(info.kind, MixKind::Cutmix);
            let b = info.bbox.unwrap();
            for i in 0..n {
                let p = info.partners[i];
                let changed = (0..h * w).filter(|q| x[i * c * h * w + q] != x0[i * c * h * w + q]).count();
                if p != i {
                    assert!((info.lam - (1.0 - changed as f64 / (h * w) as f64)).abs() < 1e-12);
                }
                for (ch, yy, xx) in (0..c).flat_map(|ch| (0..h).flat_map(move |yy| (0..w).map(move |xx| (ch, yy, xx)))) {
                    let inside = (b.y0..b.y1).contains(&yy) && (b.x0..b.x1).contains(&xx);
                    let q = ch * h * w + yy * w + xx;
                    assert_eq!(x[i * c * h * w + q], x0[(if inside { p } else { i }) * c * h * w + q]);
                }
            }
            for (row, l) in t.chunks(4).enumerate().map(|(i, r)| (r, y[info.partners[i]])) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
                assert!(row[l as usize] >= (1.0 - info.lam as f32) * 0.925 - 1e-6);
            }
        }
    }
}

#[test]
fn flip_mixes_the_middle_image_of_an_odd_batch_with_itself() {
    let shape = [5, 2, 4, 4];
    let x0 = batch(160, 3);
    for (alpha, cut) in [(1.0, 0.0), (0.0, 1.0)] {
        let m = Mixup { mixup_alpha: alpha, cutmix_alpha: cut, ..Mixup::timm(3) };
        let (mut x, mut t) = (x0.clone(), vec![0.0; 15]);
        let info = m.apply(&mut x, shape, &[0, 1, 2, 0, 1], &mut t, &mut Rng::new(4));
        assert_eq!(info.partners, vec![4, 3, 2, 1, 0]);
        for q in 64..96 {
            assert!((x[q] - x0[q]).abs() <= 1e-6 * x0[q].abs().max(1.0));
        }
        assert!(t.chunks(3).all(|r| (r.iter().sum::<f32>() - 1.0).abs() < 1e-6));
        // the middle row mixes its smoothed one-hot with itself: itself, up to rounding
        let want = [0.1 / 3.0, 0.1 / 3.0, 0.9 + 0.1 / 3.0];
        assert!(t[6..9].iter().zip(want).all(|(&a, b)| (a as f64 - b).abs() < 1e-6), "{:?}", &t[6..9]);
    }
}

#[test]
fn mixup_is_deterministic_and_targets_sum_to_one() {
    let m = Mixup::lee(7);
    let x0 = batch(SHAPE.iter().product(), 5);
    let y = [6, 0, 3, 3, 5, 1];
    let run = |seed| {
        let (mut x, mut t) = (x0.clone(), vec![0.0; 42]);
        let info = m.apply(&mut x, SHAPE, &y, &mut t, &mut Rng::new(seed));
        (x, t, info)
    };
    let mut kinds = [0; 3];
    for seed in 0..60 {
        let (x, t, info) = run(seed);
        assert_eq!((&x, &t, &info), (&run(seed).0, &run(seed).1, &run(seed).2));
        assert!(t.chunks(7).all(|r| (r.iter().sum::<f32>() - 1.0).abs() < 1e-6));
        kinds[info.kind as usize] += 1;
    }
    assert!(kinds.iter().all(|&k| k > 5), "{kinds:?}");
}
