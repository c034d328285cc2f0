//! Shared helpers of the integration tests: fixture loading, comparisons, devices.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use vitlab::backend::Backend;
use vitlab::models::weights::{apply, apply_deterministic, read_safetensors, tensor_to_vec, HostTensor, TensorMap};
use vitlab::models::{AttnScale, HeadKind, Init, ModelConfig, Pool};

/// A committed fixture; `VITLAB_FIXTURES` names their folder when the test binary runs
/// outside the checkout it was built in (tools/gpu_check.sh on the GPU machine).
pub fn fixture_path(name: &str) -> PathBuf {
    match std::env::var_os("VITLAB_FIXTURES") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name),
    }
}

/// A golden fixture written by tools/make_fixtures.py.
pub struct Fixture {
    pub name: String,
    pub tensors: TensorMap,
    pub config: serde_json::Value,
    pub meta: HashMap<String, String>,
}

impl Fixture {
    pub fn load(name: &str) -> Fixture {
        let path = fixture_path(&format!("{name}.safetensors"));
        let (tensors, meta) =
            read_safetensors(&path).unwrap_or_else(|e| panic!("fixture {name}: {e} (regenerate with tools/make_fixtures.py)"));
        let config = match meta.get("config") {
            Some(c) => serde_json::from_str(c).expect("config is JSON"),
            None => serde_json::Value::Null,
        };
        Fixture { name: name.to_string(), tensors, config, meta }
    }

    pub fn get(&self, key: &str) -> &HostTensor {
        self.tensors.get(key).unwrap_or_else(|| panic!("fixture {} has no tensor {key}", self.name))
    }

    /// Tensors under `prefix.`, with the prefix removed.
    pub fn group(&self, prefix: &str) -> TensorMap {
        vitlab::models::weights::group(&self.tensors, prefix)
    }

    pub fn str(&self, key: &str) -> String {
        self.config[key].as_str().unwrap_or_else(|| panic!("config.{key}")).to_string()
    }
    pub fn usize(&self, key: &str) -> usize {
        self.config[key].as_u64().unwrap_or_else(|| panic!("config.{key}")) as usize
    }
    pub fn f64(&self, key: &str) -> f64 {
        self.config[key].as_f64().unwrap_or_else(|| panic!("config.{key}"))
    }
    pub fn bool(&self, key: &str) -> bool {
        self.config[key].as_bool().unwrap_or_else(|| panic!("config.{key}"))
    }
}

pub fn tensor<const D: usize>(t: &HostTensor, device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(t.data.clone(), t.shape.clone()), device)
}

pub fn host<const D: usize>(t: Tensor<D>) -> HostTensor {
    let shape = t.dims().to_vec();
    HostTensor::new(shape, tensor_to_vec(t))
}

/// Asserts `|actual - expected| <= tol * max|expected|` elementwise (and equal shapes);
/// returns the observed relative error.
pub fn assert_close(what: &str, actual: &HostTensor, expected: &HostTensor, tol: f64) -> f64 {
    let max_ref = expected.data.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
    assert_close_scaled(what, actual, expected, tol, max_ref)
}

/// Asserts `|actual - expected| <= tol * scale` elementwise (and equal shapes).
pub fn assert_close_scaled(what: &str, actual: &HostTensor, expected: &HostTensor, tol: f64, scale: f64) -> f64 {
    assert_eq!(actual.shape, expected.shape, "{what}: shape");
    assert!(actual.data.iter().all(|v| v.is_finite()), "{what}: non-finite values");
    let max_err = actual.data.iter().zip(&expected.data).fold(0f64, |m, (a, e)| m.max((*a as f64 - *e as f64).abs()));
    let rel = max_err / scale.max(1e-12);
    assert!(rel <= tol, "{what}: max abs error {max_err:.3e} is {rel:.3e} of the scale {scale:.3e}, over the tolerance {tol:e}");
    rel
}

/// The backends this test binary was built with (flex always, LibTorch with `tch`) and,
/// when a GPU is present and this is a `tch` build, LibTorch CUDA (`tch-cuda`). A `tch`
/// build without a GPU says on stderr that the CUDA cases did not run.
pub fn backends() -> Vec<(Backend, Device)> {
    let mut list = Backend::compiled_cpu();
    if Backend::TchCuda.available() {
        list.push(Backend::TchCuda);
    } else if Backend::TchCuda.compiled() {
        eprintln!("no CUDA device visible to LibTorch: this test's tch-cuda cases did not run");
    }
    list.into_iter().map(|b| (b, b.device().expect("compiled backend"))).collect()
}

// ---------------------------------------------------------------- data tests

pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// Dataset options with the cache kept inside the test's own folder.
pub fn opts(cache_dir: &Path) -> vitlab::data::OpenOptions {
    vitlab::data::OpenOptions { cache_dir: Some(cache_dir.to_path_buf()), ..vitlab::data::OpenOptions::default() }
}

pub fn err_text<T: std::fmt::Debug>(r: vitlab::Result<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// The error names the file and says what is wrong with it.
pub fn assert_err(r: vitlab::Result<impl std::fmt::Debug>, file: &str, problem: &str) {
    let msg = err_text(r);
    assert!(msg.contains(file), "error should name {file:?}: {msg}");
    assert!(msg.contains(problem), "error should say {problem:?}: {msg}");
}

pub fn write_png(path: &Path, w: u32, h: u32, rgb: [u8; 3]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    image::RgbImage::from_pixel(w, h, image::Rgb(rgb)).save(path).unwrap();
}

/// The `ModelConfig` of a model fixture (tools/make_fixtures.py's `config`).
pub fn model_config(f: &Fixture) -> ModelConfig {
    ModelConfig {
        block: f.str("variant").parse().unwrap(),
        depth: f.usize("depth"),
        dim: f.usize("dim"),
        mlp_dim: f.usize("mlp_dim"),
        heads: f.usize("heads"),
        image_size: f.usize("image_size"),
        patch_size: f.usize("patch_size"),
        channels: f.usize("channels"),
        num_classes: f.usize("num_classes"),
        pool: f.str("pool").parse::<Pool>().unwrap(),
        head: f.str("head").parse::<HeadKind>().unwrap(),
        attn_scale: f.str("attn_scale").parse::<AttnScale>().unwrap(),
        final_norm: f.bool("final_norm"),
        qkv_bias: f.bool("qkv_bias"),
        norm_eps: f.f64("norm_eps"),
        norm_center: f.bool("norm_center"),
        init: Init::Timm,
    }
}

/// Loads the fixture's weights (stored or deterministic) into `module`.
pub fn with_weights<M: Module>(f: &Fixture, module: M) -> M {
    if f.meta.get("weights").map(String::as_str) == Some("det") {
        apply_deterministic(module)
    } else {
        apply(module, &f.group("param"), std::path::Path::new(&f.name)).unwrap()
    }
}

/// An unpaired folder of 24x24 PNGs: domain A horizontal stripes, B vertical ones.
pub fn unpaired(dir: &Path, train: usize, test: usize) -> PathBuf {
    let root = dir.join("data");
    for (split, n) in [("train", train), ("test", test)] {
        for (d, vertical) in [("A", false), ("B", true)] {
            let folder = root.join(format!("{split}{d}"));
            std::fs::create_dir_all(&folder).unwrap();
            for i in 0..n {
                let img = image::RgbImage::from_fn(24, 24, |x, y| {
                    let t = if vertical { x } else { y };
                    let v = ((t * 37 + i as u32 * 11) % 200 + 20) as u8;
                    image::Rgb([v, v / 2 + (i as u8 % 50), 255 - v])
                });
                img.save(folder.join(format!("{i:03}.png"))).unwrap();
            }
        }
    }
    root
}
