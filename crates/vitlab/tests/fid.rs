//! FID and KID against the reference implementations, on fixtures written by
//! tools/make_fid_fixtures.py (docs/FID.md):
//! - the two preprocessings (pytorch-fid, torch-fidelity) against their outputs;
//! - the Inception architecture with reproducible stand-in weights against
//!   pytorch-fid's `FIDInceptionV3` (all four taps, every compiled backend);
//! - FID and KID from stored features against pytorch-fid's and torch-fidelity's formulas;
//! - with the real weights (tests marked `ignore`, run by CI with `--include-ignored`
//!   and VITLAB_FID_WEIGHTS; they fail, not skip, without the weights): features of real
//!   CIFAR-10 images against pytorch-fid, the TorchScript original and torch-fidelity,
//!   and FID / KID of two 100-image sets against pytorch-fid, torch-fidelity and torchmetrics.

mod common;

use std::collections::HashMap;

use burn::tensor::{Tensor, TensorData};
use common::{assert_close, backends, fixture_path, Fixture};
use safetensors::SafeTensors;
use vitlab::data::decode::Img;
use vitlab::metrics::features::{find_weights, Extractor, Resize};
use vitlab::metrics::fid::{frechet_distance, FeatureStats};
use vitlab::metrics::kid::kid;
use vitlab::models::inception::{FidInception, Tap, INPUT_SIZE};
use vitlab::models::weights::HostTensor;

/// The uint8 tensors of a fixture (HWC images), which `Fixture` (float only) drops.
fn u8_tensors(name: &str) -> HashMap<String, (Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(fixture_path(&format!("{name}.safetensors"))).expect("fixture");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    st.iter()
        .filter(|(_, v)| v.dtype() == safetensors::Dtype::U8)
        .map(|(k, v)| (k.to_string(), (v.shape().to_vec(), v.data().to_vec())))
        .collect()
}

/// `[n, h, w, 3]` uint8 HWC to decoded images (CHW).
fn images(shape: &[usize], hwc: &[u8]) -> Vec<Img> {
    let (h, w) = (shape[shape.len() - 3], shape[shape.len() - 2]);
    hwc.chunks_exact(h * w * 3)
        .map(|im| {
            let mut chw = vec![0u8; 3 * h * w];
            for (i, px) in im.chunks_exact(3).enumerate() {
                for c in 0..3 {
                    chw[c * h * w + i] = px[c];
                }
            }
            Img { h, w, chw }
        })
        .collect()
}

/// A fixture whose float tensors are read as `Fixture` reads them; its uint8
/// ones come from [`u8_tensors`].
fn load(name: &str) -> Fixture {
    let bytes = std::fs::read(fixture_path(&format!("{name}.safetensors")))
        .unwrap_or_else(|e| panic!("fixture {name}: {e} (regenerate with tools/make_fid_fixtures.py)"));
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let (_, meta) = SafeTensors::read_metadata(&bytes).expect("safetensors");
    let tensors = st
        .iter()
        .filter(|(_, v)| v.dtype() == safetensors::Dtype::F32)
        .map(|(k, v)| {
            let data = v.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            (k.to_string(), HostTensor::new(v.shape().to_vec(), data))
        })
        .collect();
    Fixture {
        name: name.to_string(),
        tensors,
        config: serde_json::Value::Null,
        meta: meta.metadata().clone().unwrap_or_default(),
    }
}

fn meta_f64(f: &Fixture, key: &str) -> f64 {
    f.meta.get(key).unwrap_or_else(|| panic!("fixture {} has no metadata {key}", f.name)).parse().expect("a number")
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

#[test]
fn preprocessing_equals_pytorch_fid_and_torch_fidelity() {
    let f = load("fid_resize");
    let imgs = u8_tensors("fid_resize");
    let s = INPUT_SIZE;
    for i in 0..2 {
        let (shape, hwc) = &imgs[&format!("img{i}")];
        let im = &images(&[1, shape[0], shape[1], 3], hwc)[0];
        let modes =
            [(Resize::PytorchFid, "pytorchfid"), (Resize::TorchFidelity, "fidelity"), (Resize::Torchmetrics, "torchmetrics")];
        for (mode, key) in modes {
            let mut out = vec![0f32; 3 * s * s];
            mode.apply(&im.chw, im.h, im.w, &mut out);
            let got = HostTensor::new(vec![3, s, s], out);
            // Values in [-1, 1]: a float32 rounding or two.
            assert_close(&format!("{key}{i} ({}x{})", im.h, im.w), &got, f.get(&format!("{key}{i}")), 2e-6);
        }
    }
}

#[test]
fn inception_architecture_equals_pytorch_fid_on_every_backend() {
    let f = load("fid_inception_det");
    for (backend, device) in backends() {
        let net = FidInception::deterministic(&device);
        let x: Tensor<4> = common::tensor(f.get("input"), &device);
        let taps = net.taps(x, Tap::F2048);
        for (tap, got) in Tap::ALL.into_iter().zip(taps) {
            let what = format!("{backend}: {tap}-d features, stand-in weights");
            assert_close(&what, &common::host(got), f.get(&format!("f{}", tap.dim())), 1e-4);
        }
    }
}

#[test]
fn fid_from_features_equals_pytorch_fid() {
    let f = load("fid_sets");
    let stats = |key: &str, dim| FeatureStats::from_features(&f.get(key).data, dim, key);
    let (a, b) = (stats("feat_a_64", 64).unwrap(), stats("feat_b_64", 64).unwrap());
    let got = frechet_distance(&a, "a", &b, "b").unwrap();
    let want = meta_f64(&f, "features.fid64");
    assert!(rel(got, want) < 1e-6, "FID-64: {got} vs pytorch-fid's {want}");
    // 100 images for 192 features: pytorch-fid prints a number (here {features.fid192}) from a
    // singular covariance; vitlab refuses, naming the set.
    let e = stats("feat_a_192", 192).and_then(|a| frechet_distance(&a, "a", &stats("feat_b_192", 192)?, "b"));
    let e = e.unwrap_err().to_string();
    assert!(e.contains("100 samples for 192 feature dimensions"), "{e}");
}

#[test]
fn kid_from_features_equals_torch_fidelity() {
    let f = load("fid_sets");
    let device = backends()[0].1.clone();
    for dim in [64, 2048] {
        let (a, b) = (&f.get(&format!("feat_a_{dim}")).data, &f.get(&format!("feat_b_{dim}")).data);
        let got = kid(a, b, dim, 100, 1000, 0, ("a", "b"), &device).unwrap();
        assert_eq!(got.subset_size, 100);
        let exact = meta_f64(&f, &format!("features.kid{dim}.float64"));
        let fidelity = meta_f64(&f, &format!("features.kid{dim}.mean"));
        assert!(rel(got.mean, exact) < 1e-5, "KID-{dim}: {} vs the float64 estimator's {exact}", got.mean);
        assert!(rel(got.mean, fidelity) < 1e-3, "KID-{dim}: {} vs torch-fidelity's {fidelity}", got.mean);
        assert_eq!(got.std, 0.0);
    }
}

/// The real weights, or a failure that says how to get them.
fn real_extractor(resize: Resize) -> Extractor {
    let path = find_weights(None).unwrap_or_else(|e| panic!("this test needs the FID Inception weights: {e}"));
    let device = backends()[0].1.clone();
    let net = FidInception::load(&path, &device).unwrap_or_else(|e| panic!("{e}"));
    Extractor::new(net, device, resize, 50)
}

#[test]
#[ignore = "needs the FID Inception weights (VITLAB_FID_WEIGHTS or the cache; docs/FID.md); CI runs it"]
fn real_weights_features_equal_pytorch_fid_torchscript_and_torch_fidelity() {
    let f = load("fid_real");
    let imgs = u8_tensors("fid_real");
    let (shape, hwc) = &imgs["images"];
    let images = images(shape, hwc);
    for (backend, device) in backends() {
        let path = find_weights(None).unwrap_or_else(|e| panic!("this test needs the FID Inception weights: {e}"));
        let net = FidInception::load(&path, &device).unwrap();
        for (resize, prefix) in [(Resize::PytorchFid, "f"), (Resize::PytorchFid, "ts"), (Resize::TorchFidelity, "fidelity")] {
            let s = INPUT_SIZE;
            let mut input = vec![0f32; images.len() * 3 * s * s];
            for (im, dst) in images.iter().zip(input.chunks_mut(3 * s * s)) {
                resize.apply(&im.chw, im.h, im.w, dst);
            }
            let x = Tensor::<4>::from_data(TensorData::new(input, [images.len(), 3, s, s]), &device);
            for (tap, got) in Tap::ALL.into_iter().zip(net.taps(x, Tap::F2048)) {
                let key = format!("{prefix}{}", tap.dim());
                if f.tensors.contains_key(&key) {
                    let r = assert_close(&format!("{backend}: {key}"), &common::host(got), f.get(&key), 1e-4);
                    eprintln!("{backend}: {key}: max error {r:.1e} of the largest value");
                }
            }
        }
    }
}

#[test]
#[ignore = "needs the FID Inception weights (VITLAB_FID_WEIGHTS or the cache; docs/FID.md); CI runs it"]
fn real_weights_fid_and_kid_equal_the_references() {
    let f = load("fid_sets");
    let imgs = u8_tensors("fid_sets");
    let (a, b) = (images(&imgs["a"].0, &imgs["a"].1), images(&imgs["b"].0, &imgs["b"].1));
    let device = backends()[0].1.clone();
    let fid = |ex: &Extractor, tap: Tap| {
        let sa = FeatureStats::from_features(&ex.features(&a, tap), tap.dim(), "a").unwrap();
        let sb = FeatureStats::from_features(&ex.features(&b, tap), tap.dim(), "b").unwrap();
        frechet_distance(&sa, "a", &sb, "b").unwrap()
    };
    // pytorch-fid: FID at 64 features (100 images: the larger layers are singular).
    let ex = real_extractor(Resize::PytorchFid);
    let want = meta_f64(&f, "pytorch_fid.fid64");
    let got = fid(&ex, Tap::F64);
    assert!(rel(got, want) < 1e-3, "FID-64 (pytorch-fid preprocessing): {got} vs pytorch-fid's {want}");
    eprintln!("FID-64, pytorch-fid: vitlab {got} pytorch-fid {want} (rel {:.1e})", rel(got, want));
    // torchmetrics' default (antialias=True): its feature=64 FID, the paper's metric.
    let ex = real_extractor(Resize::Torchmetrics);
    let (got, want) = (fid(&ex, Tap::F64), meta_f64(&f, "torchmetrics.fid64"));
    assert!(rel(got, want) < 1e-3, "FID-64 (torchmetrics preprocessing): {got} vs torchmetrics' {want}");
    eprintln!("FID-64, torchmetrics: vitlab {got} torchmetrics {want} (rel {:.1e})", rel(got, want));
    // torch-fidelity's preprocessing (one pass for all layers): torchmetrics' feature=64
    // FID with antialias=False, and torch-fidelity's FID and KID.
    let ex = real_extractor(Resize::TorchFidelity);
    let (ta, tb) = (ex.taps(&a, Tap::F2048), ex.taps(&b, Tap::F2048));
    let sa = FeatureStats::from_features(&ta[0], 64, "a").unwrap();
    let sb = FeatureStats::from_features(&tb[0], 64, "b").unwrap();
    let got = frechet_distance(&sa, "a", &sb, "b").unwrap();
    for key in ["torchmetrics.fid64.antialias_false", "torch_fidelity.fid64"] {
        let want = meta_f64(&f, key);
        assert!(rel(got, want) < 1e-3, "FID-64 (torch-fidelity preprocessing): {got} vs {key} {want}");
        eprintln!("FID-64, torch-fidelity: vitlab {got} {key} {want} (rel {:.1e})", rel(got, want));
    }
    for (i, tap) in [(0, Tap::F64), (3, Tap::F2048)] {
        let got = kid(&ta[i], &tb[i], tap.dim(), 100, 1000, 0, ("a", "b"), &device).unwrap();
        let want = meta_f64(&f, &format!("torch_fidelity.kid{}.mean", tap.dim()));
        assert!(rel(got.mean, want) < 1e-3, "KID-{tap}: {} vs torch-fidelity's {want}", got.mean);
        eprintln!("KID-{tap}: vitlab {} torch-fidelity {want} (rel {:.1e})", got.mean, rel(got.mean, want));
    }
}

/// pytorch-fid's weights are a `torch.save` file: both of its formats are read,
/// views, shared storages and every float dtype included; integer tensors are dropped.
#[test]
fn pytorch_state_dicts_are_read_in_the_zip_and_legacy_formats() {
    let (want, _) = vitlab::models::weights::read_safetensors(&fixture_path("torch_state_dict.safetensors")).unwrap();
    for name in ["torch_state_dict_zip.pth", "torch_state_dict_legacy.pth"] {
        let got = vitlab::models::weights::read_any(&fixture_path(name)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{name}");
        for (k, w) in &want {
            assert_eq!(&got[k], w, "{name}: {k}");
        }
        assert!(!got.contains_key("bn.num_batches_tracked"));
    }
    // A truncated or garbled file is an error naming it, not a panic.
    let dir = tempfile::tempdir().unwrap();
    for name in ["torch_state_dict_zip.pth", "torch_state_dict_legacy.pth"] {
        let bytes = std::fs::read(fixture_path(name)).unwrap();
        for cut in [20, bytes.len() / 2, bytes.len() - 9] {
            let p = dir.path().join(format!("cut-{cut}-{name}"));
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let e = vitlab::models::weights::read_any(&p).unwrap_err().to_string();
            assert!(e.contains(p.to_str().unwrap()), "{e}");
        }
    }
}
