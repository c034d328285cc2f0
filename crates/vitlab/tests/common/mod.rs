//! Shared helpers of the integration tests: fixture loading, comparisons, devices.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};
use vitlab::backend::Backend;
use vitlab::models::weights::{read_safetensors, tensor_to_vec, HostTensor, TensorMap};

pub fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
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

/// The CPU backends this test binary was built with (flex always, LibTorch with `tch`).
pub fn backends() -> Vec<(Backend, Device)> {
    Backend::compiled_cpu().into_iter().map(|b| (b, b.device().expect("compiled backend"))).collect()
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
