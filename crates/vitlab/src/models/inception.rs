//! InceptionV3 as FID uses it: the TensorFlow 2015-12-05 graph that pytorch-fid,
//! torch-fidelity, torchmetrics and clean-fid all load (docs/FID.md). Inference only.
//!
//! It is torchvision's InceptionV3 with the FID graph's differences (pytorch-fid's
//! `FIDInceptionA/C/E_1/E_2`): the pooling branches of the A, C and E blocks
//! average over 3x3 windows *excluding* padding, and the last block's pooling
//! branch takes the maximum instead. Every convolution is followed by BatchNorm
//! (eps 1e-3, no scale in the TF graph) and ReLU; at load time the BatchNorm is
//! folded into the convolution (`w * s`, `b = beta - mean * s`,
//! `s = gamma / sqrt(var + eps)`), which changes results by float rounding only.
//!
//! The input is `[B, 3, 299, 299]` in `[-1, 1]` (preprocessing: `metrics::fid_features`).
//! Four taps, each globally averaged over its spatial positions as pytorch-fid and
//! torch-fidelity do: 64 channels after the first max-pool, 192 after the second,
//! 768 after `Mixed_6e`, and the 2048 of the final average pool (standard FID).
//!
//! Weights are addressed by pytorch-fid's `FIDInceptionV3` state-dict keys
//! (`Conv2d_1a_3x3.conv.weight`, `Mixed_5b.branch1x1.bn.running_mean`, ...),
//! which is vitlab's layout for this network; the classifier (`fc.*`) is not used.

use burn::tensor::activation::relu;
use burn::tensor::module::{avg_pool2d, conv2d, max_pool2d};
use burn::tensor::ops::{AvgPoolOptions, ConvOptions, MaxPoolOptions};
use burn::tensor::{Device, Tensor, TensorData};
use std::borrow::Cow;
use std::cell::RefCell;
use std::path::Path;

use super::weights::deterministic_values;
use crate::tensor_file::{read_any, HostTensor, TensorMap};
use crate::{Error, Result};

/// BatchNorm epsilon of the TF graph (torchvision's BasicConv2d uses the same).
pub const BN_EPS: f64 = 1e-3;
/// The input side the network was trained at; every FID implementation resizes to it.
pub const INPUT_SIZE: usize = 299;

/// A feature layer: how many channels it has, which is also its name on the
/// command line (`--feature 64|192|768|2048`, as pytorch-fid's `--dims` and
/// torchmetrics' `feature`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tap {
    /// After the first max-pool.
    F64,
    /// After the second max-pool.
    F192,
    /// After `Mixed_6e` (before the auxiliary classifier).
    F768,
    /// The final average pool: standard FID.
    F2048,
}

impl Tap {
    pub const ALL: [Tap; 4] = [Tap::F64, Tap::F192, Tap::F768, Tap::F2048];

    pub fn dim(self) -> usize {
        match self {
            Tap::F64 => 64,
            Tap::F192 => 192,
            Tap::F768 => 768,
            Tap::F2048 => 2048,
        }
    }

    pub fn from_dim(dim: usize) -> Option<Tap> {
        Tap::ALL.into_iter().find(|t| t.dim() == dim)
    }

    /// Parses a `--feature` value; the error names `field`.
    pub fn parse(field: &str, s: &str) -> Result<Tap> {
        s.trim()
            .parse::<usize>()
            .ok()
            .and_then(Tap::from_dim)
            .ok_or_else(|| Error::config(field, format!("{s:?}: expected one of 64, 192, 768, 2048")))
    }
}

impl std::fmt::Display for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.dim())
    }
}

/// Convolution + BatchNorm (folded) + ReLU: torchvision's `BasicConv2d`.
#[derive(Debug)]
struct ConvBn {
    weight: Tensor<4>,
    bias: Tensor<1>,
    stride: usize,
    padding: [usize; 2],
}

impl ConvBn {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let options = ConvOptions::new([self.stride; 2], self.padding, [1, 1], 1);
        relu(conv2d(x, self.weight.clone(), Some(self.bias.clone()), options))
    }
}

/// The 1x1 convolutions that open a block's branches, all reading the block's input.
/// (Running them as one convolution with the outputs split again was measured
/// 3-5 % slower on flex, so they stay separate.)
#[derive(Debug)]
struct Heads(Vec<ConvBn>);

impl Heads {
    fn forward(&self, x: Tensor<4>) -> Vec<Tensor<4>> {
        self.0.iter().map(|c| c.forward(x.clone())).collect()
    }
}

/// Where the weights come from.
enum Source<'a> {
    /// A state dict; every key and shape is checked against the architecture.
    Map(&'a TensorMap),
    /// Reproducible values for architecture tests: [`deterministic_values`], with
    /// convolution weights scaled by `sqrt(24 / fan_in)` (He-like, so activations
    /// keep their scale through the 94 layers) and BatchNorm scales of one, as
    /// `det_state_dict` in tools/make_fid_fixtures.py.
    Deterministic,
}

/// Reads the convolutions out of a weight source; the first problem is the error.
struct Reader<'a> {
    source: Source<'a>,
    path: &'a Path,
    device: &'a Device,
    /// Every deterministic tensor handed out, by key (to write them as a weights file).
    record: RefCell<TensorMap>,
}

impl Reader<'_> {
    fn has(&self, key: &str) -> bool {
        match &self.source {
            Source::Map(map) => map.contains_key(key),
            Source::Deterministic => true,
        }
    }

    fn get(&self, key: &str, shape: &[usize]) -> Result<Cow<'_, [f32]>> {
        let map = match &self.source {
            Source::Map(map) => map,
            Source::Deterministic => {
                let values = if key.ends_with(".bn.weight") {
                    vec![1.0; shape.iter().product()]
                } else if shape.len() == 4 {
                    let scale = (24.0 / (shape[1] * shape[2] * shape[3]) as f64).sqrt() as f32;
                    deterministic_values(key, shape).into_iter().map(|v| v * scale).collect()
                } else {
                    deterministic_values(key, shape)
                };
                self.record.borrow_mut().insert(key.to_string(), HostTensor::new(shape.to_vec(), values.clone()));
                return Ok(Cow::Owned(values));
            }
        };
        let t = map
            .get(key)
            .ok_or_else(|| Error::weights(self.path, format!("not the FID Inception weights: key `{key}` is missing")))?;
        if t.shape != shape {
            return Err(Error::weights(
                self.path,
                format!("not the FID Inception weights: `{key}` has shape {:?}, expected {shape:?}", t.shape),
            ));
        }
        Ok(Cow::Borrowed(&t.data))
    }

    /// `name`: a `BasicConv2d` with `cin -> cout` channels and a `k = [kh, kw]` kernel.
    fn conv(&self, name: &str, cin: usize, cout: usize, k: [usize; 2], stride: usize, padding: [usize; 2]) -> Result<ConvBn> {
        let w = self.get(&format!("{name}.conv.weight"), &[cout, cin, k[0], k[1]])?;
        let beta = self.get(&format!("{name}.bn.bias"), &[cout])?;
        let mean = self.get(&format!("{name}.bn.running_mean"), &[cout])?;
        let var = self.get(&format!("{name}.bn.running_var"), &[cout])?;
        // The TF graph has no BatchNorm scale; pytorch-fid's file stores ones.
        let gamma_key = format!("{name}.bn.weight");
        let gamma = if self.has(&gamma_key) { Some(self.get(&gamma_key, &[cout])?) } else { None };
        let per_out = cin * k[0] * k[1];
        let mut wf = Vec::with_capacity(w.len());
        let mut bf = Vec::with_capacity(cout);
        for o in 0..cout {
            let g = gamma.as_ref().map_or(1.0, |g| g[o] as f64);
            let s = g / (var[o] as f64 + BN_EPS).sqrt();
            wf.extend(w[o * per_out..(o + 1) * per_out].iter().map(|&v| (v as f64 * s) as f32));
            bf.push((beta[o] as f64 - mean[o] as f64 * s) as f32);
        }
        Ok(ConvBn {
            weight: Tensor::from_data(TensorData::new(wf, [cout, cin, k[0], k[1]]), self.device),
            bias: Tensor::from_data(TensorData::new(bf, [cout]), self.device),
            stride,
            padding,
        })
    }

    fn conv1(&self, name: &str, cin: usize, cout: usize) -> Result<ConvBn> {
        self.conv(name, cin, cout, [1, 1], 1, [0, 0])
    }
}

/// 3x3 average over the window, stride 1, padding 1, not counting the padding.
fn avg3x3(x: Tensor<4>) -> Tensor<4> {
    avg_pool2d(x, AvgPoolOptions::new([3, 3]).with_stride([1, 1]).with_padding([1, 1]).with_count_include_pad(false))
}

/// 3x3 max-pool, stride 2, no padding.
fn max3x3s2(x: Tensor<4>) -> Tensor<4> {
    max_pool2d(x, MaxPoolOptions::new([3, 3]).with_stride([2, 2]))
}

/// `FIDInceptionA` (Mixed_5b/c/d): 1x1, 5x5, double 3x3 and an average-pool branch.
#[derive(Debug)]
struct BlockA {
    /// branch1x1, branch5x5_1, branch3x3dbl_1.
    heads: Heads,
    branch5x5_2: ConvBn,
    branch3x3dbl: [ConvBn; 2],
    branch_pool: ConvBn,
}

impl BlockA {
    fn load(r: &Reader, name: &str, cin: usize, pool_features: usize) -> Result<Self> {
        let n = |s: &str| format!("{name}.{s}");
        Ok(BlockA {
            heads: Heads(vec![
                r.conv1(&n("branch1x1"), cin, 64)?,
                r.conv1(&n("branch5x5_1"), cin, 48)?,
                r.conv1(&n("branch3x3dbl_1"), cin, 64)?,
            ]),
            branch5x5_2: r.conv(&n("branch5x5_2"), 48, 64, [5, 5], 1, [2, 2])?,
            branch3x3dbl: [
                r.conv(&n("branch3x3dbl_2"), 64, 96, [3, 3], 1, [1, 1])?,
                r.conv(&n("branch3x3dbl_3"), 96, 96, [3, 3], 1, [1, 1])?,
            ],
            branch_pool: r.conv1(&n("branch_pool"), cin, pool_features)?,
        })
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let [b1, b5, b3]: [Tensor<4>; 3] = self.heads.forward(x.clone()).try_into().expect("three heads");
        let b5 = self.branch5x5_2.forward(b5);
        let b3 = chain(&self.branch3x3dbl, b3);
        let bp = self.branch_pool.forward(avg3x3(x));
        Tensor::cat(vec![b1, b5, b3, bp], 1)
    }
}

/// `InceptionB` (Mixed_6a): grid reduction 35 -> 17.
#[derive(Debug)]
struct BlockB {
    branch3x3: ConvBn,
    branch3x3dbl: [ConvBn; 3],
}

impl BlockB {
    fn load(r: &Reader, name: &str, cin: usize) -> Result<Self> {
        let n = |s: &str| format!("{name}.{s}");
        Ok(BlockB {
            branch3x3: r.conv(&n("branch3x3"), cin, 384, [3, 3], 2, [0, 0])?,
            branch3x3dbl: [
                r.conv1(&n("branch3x3dbl_1"), cin, 64)?,
                r.conv(&n("branch3x3dbl_2"), 64, 96, [3, 3], 1, [1, 1])?,
                r.conv(&n("branch3x3dbl_3"), 96, 96, [3, 3], 2, [0, 0])?,
            ],
        })
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let b3 = self.branch3x3.forward(x.clone());
        let bd = chain(&self.branch3x3dbl, x.clone());
        Tensor::cat(vec![b3, bd, max3x3s2(x)], 1)
    }
}

/// `FIDInceptionC` (Mixed_6b..e): factorised 7x7 convolutions.
#[derive(Debug)]
struct BlockC {
    /// branch1x1, branch7x7_1, branch7x7dbl_1.
    heads: Heads,
    branch7x7: [ConvBn; 2],
    branch7x7dbl: [ConvBn; 4],
    branch_pool: ConvBn,
}

impl BlockC {
    fn load(r: &Reader, name: &str, cin: usize, c7: usize) -> Result<Self> {
        let n = |s: &str| format!("{name}.{s}");
        let (row, col) = ([1, 7], [7, 1]);
        let (prow, pcol) = ([0, 3], [3, 0]);
        Ok(BlockC {
            heads: Heads(vec![
                r.conv1(&n("branch1x1"), cin, 192)?,
                r.conv1(&n("branch7x7_1"), cin, c7)?,
                r.conv1(&n("branch7x7dbl_1"), cin, c7)?,
            ]),
            branch7x7: [r.conv(&n("branch7x7_2"), c7, c7, row, 1, prow)?, r.conv(&n("branch7x7_3"), c7, 192, col, 1, pcol)?],
            branch7x7dbl: [
                r.conv(&n("branch7x7dbl_2"), c7, c7, col, 1, pcol)?,
                r.conv(&n("branch7x7dbl_3"), c7, c7, row, 1, prow)?,
                r.conv(&n("branch7x7dbl_4"), c7, c7, col, 1, pcol)?,
                r.conv(&n("branch7x7dbl_5"), c7, 192, row, 1, prow)?,
            ],
            branch_pool: r.conv1(&n("branch_pool"), cin, 192)?,
        })
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let [b1, b7, bd]: [Tensor<4>; 3] = self.heads.forward(x.clone()).try_into().expect("three heads");
        let b7 = chain(&self.branch7x7, b7);
        let bd = chain(&self.branch7x7dbl, bd);
        let bp = self.branch_pool.forward(avg3x3(x));
        Tensor::cat(vec![b1, b7, bd, bp], 1)
    }
}

/// `InceptionD` (Mixed_7a): grid reduction 17 -> 8.
#[derive(Debug)]
struct BlockD {
    /// branch3x3_1, branch7x7x3_1.
    heads: Heads,
    branch3x3_2: ConvBn,
    branch7x7x3: [ConvBn; 3],
}

impl BlockD {
    fn load(r: &Reader, name: &str, cin: usize) -> Result<Self> {
        let n = |s: &str| format!("{name}.{s}");
        Ok(BlockD {
            heads: Heads(vec![r.conv1(&n("branch3x3_1"), cin, 192)?, r.conv1(&n("branch7x7x3_1"), cin, 192)?]),
            branch3x3_2: r.conv(&n("branch3x3_2"), 192, 320, [3, 3], 2, [0, 0])?,
            branch7x7x3: [
                r.conv(&n("branch7x7x3_2"), 192, 192, [1, 7], 1, [0, 3])?,
                r.conv(&n("branch7x7x3_3"), 192, 192, [7, 1], 1, [3, 0])?,
                r.conv(&n("branch7x7x3_4"), 192, 192, [3, 3], 2, [0, 0])?,
            ],
        })
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let [b3, b7]: [Tensor<4>; 2] = self.heads.forward(x.clone()).try_into().expect("two heads");
        let b3 = self.branch3x3_2.forward(b3);
        let b7 = chain(&self.branch7x7x3, b7);
        Tensor::cat(vec![b3, b7, max3x3s2(x)], 1)
    }
}

/// `FIDInceptionE_1` / `FIDInceptionE_2` (Mixed_7b / Mixed_7c): expanded filter bank;
/// the pooling branch averages (E_1, excluding padding) or takes the maximum (E_2).
#[derive(Debug)]
struct BlockE {
    /// branch1x1, branch3x3_1, branch3x3dbl_1.
    heads: Heads,
    branch3x3_2: [ConvBn; 2],
    branch3x3dbl_2: ConvBn,
    branch3x3dbl_3: [ConvBn; 2],
    branch_pool: ConvBn,
    max_pool: bool,
}

impl BlockE {
    fn load(r: &Reader, name: &str, cin: usize, max_pool: bool) -> Result<Self> {
        let n = |s: &str| format!("{name}.{s}");
        let split = |a: &str, b: &str| -> Result<[ConvBn; 2]> {
            Ok([r.conv(&n(a), 384, 384, [1, 3], 1, [0, 1])?, r.conv(&n(b), 384, 384, [3, 1], 1, [1, 0])?])
        };
        Ok(BlockE {
            heads: Heads(vec![
                r.conv1(&n("branch1x1"), cin, 320)?,
                r.conv1(&n("branch3x3_1"), cin, 384)?,
                r.conv1(&n("branch3x3dbl_1"), cin, 448)?,
            ]),
            branch3x3_2: split("branch3x3_2a", "branch3x3_2b")?,
            branch3x3dbl_2: r.conv(&n("branch3x3dbl_2"), 448, 384, [3, 3], 1, [1, 1])?,
            branch3x3dbl_3: split("branch3x3dbl_3a", "branch3x3dbl_3b")?,
            branch_pool: r.conv1(&n("branch_pool"), cin, 192)?,
            max_pool,
        })
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let [b1, b3, bd]: [Tensor<4>; 3] = self.heads.forward(x.clone()).try_into().expect("three heads");
        let b3 = Tensor::cat(self.branch3x3_2.iter().map(|c| c.forward(b3.clone())).collect(), 1);
        let bd = self.branch3x3dbl_2.forward(bd);
        let bd = Tensor::cat(self.branch3x3dbl_3.iter().map(|c| c.forward(bd.clone())).collect(), 1);
        let pooled = if self.max_pool {
            max_pool2d(x, MaxPoolOptions::new([3, 3]).with_stride([1, 1]).with_padding([1, 1]))
        } else {
            avg3x3(x)
        };
        let bp = self.branch_pool.forward(pooled);
        Tensor::cat(vec![b1, b3, bd, bp], 1)
    }
}

fn chain(convs: &[ConvBn], x: Tensor<4>) -> Tensor<4> {
    convs.iter().fold(x, |x, c| c.forward(x))
}

/// Global average over the spatial positions: `[B, C, H, W] -> [B, C]`.
fn global_mean(x: Tensor<4>) -> Tensor<2> {
    let [b, c, h, w] = x.dims();
    x.reshape([b, c, h * w]).mean_dim(2).reshape([b, c])
}

/// The FID InceptionV3 (see the module docs).
#[derive(Debug)]
pub struct FidInception {
    stem1: [ConvBn; 3],
    stem2: [ConvBn; 2],
    mixed_5: [BlockA; 3],
    mixed_6a: BlockB,
    mixed_6: [BlockC; 4],
    mixed_7a: BlockD,
    mixed_7b: BlockE,
    mixed_7c: BlockE,
}

impl FidInception {
    /// Builds the network from a state dict in vitlab's (pytorch-fid's) layout;
    /// `path` names the file in errors.
    pub fn from_map(map: &TensorMap, path: &Path, device: &Device) -> Result<Self> {
        Self::build(&Reader { source: Source::Map(map), path, device, record: RefCell::default() })
    }

    /// The network with reproducible stand-in weights (see `Source::Deterministic`),
    /// for architecture tests that must not need the real weights.
    pub fn deterministic(device: &Device) -> Self {
        Self::deterministic_with_state_dict(device).0
    }

    /// [`Self::deterministic`] and its weights as a state dict in vitlab's layout.
    pub fn deterministic_with_state_dict(device: &Device) -> (Self, TensorMap) {
        let r = Reader { source: Source::Deterministic, path: Path::new("deterministic"), device, record: RefCell::default() };
        let net = Self::build(&r).expect("deterministic weights fit by construction");
        (net, r.record.into_inner())
    }

    fn build(r: &Reader) -> Result<Self> {
        Ok(FidInception {
            stem1: [
                r.conv("Conv2d_1a_3x3", 3, 32, [3, 3], 2, [0, 0])?,
                r.conv("Conv2d_2a_3x3", 32, 32, [3, 3], 1, [0, 0])?,
                r.conv("Conv2d_2b_3x3", 32, 64, [3, 3], 1, [1, 1])?,
            ],
            stem2: [r.conv1("Conv2d_3b_1x1", 64, 80)?, r.conv("Conv2d_4a_3x3", 80, 192, [3, 3], 1, [0, 0])?],
            mixed_5: [
                BlockA::load(r, "Mixed_5b", 192, 32)?,
                BlockA::load(r, "Mixed_5c", 256, 64)?,
                BlockA::load(r, "Mixed_5d", 288, 64)?,
            ],
            mixed_6a: BlockB::load(r, "Mixed_6a", 288)?,
            mixed_6: [
                BlockC::load(r, "Mixed_6b", 768, 128)?,
                BlockC::load(r, "Mixed_6c", 768, 160)?,
                BlockC::load(r, "Mixed_6d", 768, 160)?,
                BlockC::load(r, "Mixed_6e", 768, 192)?,
            ],
            mixed_7a: BlockD::load(r, "Mixed_7a", 768)?,
            mixed_7b: BlockE::load(r, "Mixed_7b", 1280, false)?,
            mixed_7c: BlockE::load(r, "Mixed_7c", 2048, true)?,
        })
    }

    /// Loads a weights file (see [`read_any`] for the formats).
    pub fn load(path: &Path, device: &Device) -> Result<Self> {
        let map = read_any(path)?;
        Self::from_map(&map, path, device)
    }

    /// The globally averaged features `[B, C]` of every tap up to `last`, in order,
    /// of preprocessed images `[B, 3, H, W]` in `[-1, 1]` (H, W: 299 for FID; the
    /// network runs on any side of at least 75).
    pub fn taps(&self, x: Tensor<4>, last: Tap) -> Vec<Tensor<2>> {
        let mut out = Vec::with_capacity(4);
        let x = max3x3s2(chain(&self.stem1, x));
        out.push(global_mean(x.clone()));
        if last == Tap::F64 {
            return out;
        }
        let x = max3x3s2(chain(&self.stem2, x));
        out.push(global_mean(x.clone()));
        if last == Tap::F192 {
            return out;
        }
        let x = self.mixed_5.iter().fold(x, |x, b| b.forward(x));
        let x = self.mixed_6a.forward(x);
        let x = self.mixed_6.iter().fold(x, |x, b| b.forward(x));
        out.push(global_mean(x.clone()));
        if last == Tap::F768 {
            return out;
        }
        let x = self.mixed_7c.forward(self.mixed_7b.forward(self.mixed_7a.forward(x)));
        out.push(global_mean(x));
        out
    }

    /// The features `[B, tap.dim()]` of one tap.
    pub fn features(&self, x: Tensor<4>, tap: Tap) -> Tensor<2> {
        self.taps(x, tap).pop().expect("at least one tap")
    }
}
