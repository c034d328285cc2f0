//! `vitlab attention`: what a trained classifier's blocks attend to, per image
//! file: per block and head the attention the pooled output reads
//! ([`AttentionMaps::query`]), attention rollout ([`AttentionMaps::rollout`]),
//! drawn as heat-map overlays on the image as the model sees it, and the raw
//! maps as safetensors for a notebook.
//!
//! For each image `OUT/STEM/` holds:
//! - `grid.png`: one row per block; the image, then one overlay per head, then
//!   the heads' mean;
//! - `rollout.png`: the image and the rollout overlay;
//! - `maps.safetensors`: `attention` `[blocks, heads, tokens, tokens]` (softmax
//!   weights, the class token first when there is one), `query`
//!   `[blocks, heads, gh, gw]`, `rollout` `[gh, gw]`, and metadata (the image,
//!   the prediction, how the maps were made).
//!
//! `OUT/attention.json` lists the images with their predictions and files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};
use serde::Serialize;

use super::maps::{AttentionMaps, Fusion};
use crate::data::ImageSet;
use crate::metrics::softmax;
use crate::tensor_file::{tensor_to_vec, write_safetensors, HostTensor, TensorMap};
use crate::train::classify::{checkpoint_classes, image_loader, load_model_with, Weights};
use crate::util::fs::{atomic_write, output_paths};
use crate::util::png;
use crate::{Error, Result};

/// How `vitlab attention` makes its maps.
#[derive(Clone, Copy, Debug)]
pub struct AttentionOptions {
    /// How rollout fuses the heads of a block.
    pub fusion: Fusion,
    /// The share of each fused matrix's lowest entries rollout sets to 0, in [0, 1).
    pub discard_ratio: f64,
    /// Which weights of the checkpoint (the EMA when present, by default).
    pub weights: Weights,
}

/// What was written for one image.
#[derive(Clone, Debug, Serialize)]
pub struct ImageAttention {
    pub image: PathBuf,
    /// `OUT/STEM/`, holding grid.png, rollout.png and maps.safetensors.
    pub dir: PathBuf,
    pub predicted: String,
    pub probability: f64,
}

/// The summary `OUT/attention.json` holds.
#[derive(Clone, Debug, Serialize)]
pub struct AttentionSummary {
    pub checkpoint: PathBuf,
    /// `ema` or `model`.
    pub weights: &'static str,
    /// What the maps show: `class token` (its row of each attention) or
    /// `mean over tokens` (GAP and MAP models, which have no class token).
    pub query: &'static str,
    pub blocks: usize,
    pub heads: usize,
    pub fusion: Fusion,
    pub discard_ratio: f64,
    pub images: Vec<ImageAttention>,
}

/// Pixels a tile of the PNGs is at least wide (small images are enlarged).
const MIN_TILE: usize = 96;
/// White pixels between tiles.
const GAP: usize = 2;

/// Runs the classifier of `checkpoint` (a run directory or a checkpoint file)
/// on `images` and writes their maps under `out` (see the module docs).
pub fn attention_files(
    checkpoint: &Path,
    images: &[PathBuf],
    out: &Path,
    opts: &AttentionOptions,
    device: &Device,
) -> Result<AttentionSummary> {
    if !(0.0..1.0).contains(&opts.discard_ratio) {
        return Err(Error::usage("--discard-ratio", format!("expected a share in [0, 1), got {}", opts.discard_ratio)));
    }
    if images.is_empty() {
        return Err(Error::usage("IMAGE", "no image files given"));
    }
    let dirs = output_paths(images, out, "")?;
    let (model, ck, which) = load_model_with(checkpoint, device, opts.weights)?;
    let classes = checkpoint_classes(&ck)?;
    let mc = &ck.config.model;
    if model.channels() != 3 {
        return Err(Error::weights(
            &ck.path,
            format!("the model takes {}-channel images; image files are read as RGB (3 channels)", model.channels()),
        ));
    }
    let set = Arc::new(crate::data::read_images(images, mc.image_size, classes.clone())?);
    let grid = mc.image_size / mc.patch_size;
    let has_cls = model.has_class_token();
    let loader = image_loader(&set, &(0..set.len()).collect::<Vec<_>>(), &ck.config)?;
    let mut written = Vec::with_capacity(images.len());
    let (mut blocks, mut heads) = (0, 0);
    for batch in loader.epoch(0, 0) {
        let x = Tensor::<4>::from_data(TensorData::new(batch.images, batch.shape), device);
        let (logits, per_block) = model.forward_attention(x);
        let n = batch.shape[0];
        let logits = tensor_to_vec(logits);
        let [_, h, t, _] = per_block[0].dims();
        (blocks, heads) = (per_block.len(), h);
        let host: Vec<Vec<f32>> = per_block.into_iter().map(tensor_to_vec).collect();
        for b in 0..n {
            let i = written.len();
            let mut attention = Vec::with_capacity(blocks * h * t * t);
            for block in &host {
                attention.extend_from_slice(&block[b * h * t * t..(b + 1) * h * t * t]);
            }
            let maps = AttentionMaps { blocks, heads: h, tokens: t, has_cls, attention };
            let (predicted, probability) = top_class(&logits[b * classes.len()..(b + 1) * classes.len()]);
            let image = ImageAttention {
                image: images[i].clone(),
                dir: dirs[i].clone(),
                predicted: classes[predicted].clone(),
                probability,
            };
            write_image(&image, &maps, &set, i, grid, opts, which)?;
            written.push(image);
        }
    }
    let summary = AttentionSummary {
        checkpoint: ck.path.clone(),
        weights: which,
        query: if has_cls { "class token" } else { "mean over tokens" },
        blocks,
        heads,
        fusion: opts.fusion,
        discard_ratio: opts.discard_ratio,
        images: written,
    };
    let json = serde_json::to_vec_pretty(&summary).expect("the summary serialises");
    atomic_write(&out.join("attention.json"), &json)?;
    Ok(summary)
}

/// The most probable class and its softmax probability.
fn top_class(logits: &[f32]) -> (usize, f64) {
    let p = softmax(logits);
    let best = (0..p.len()).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap_or(0);
    (best, p[best])
}

fn write_image(
    image: &ImageAttention,
    maps: &AttentionMaps,
    set: &ImageSet,
    i: usize,
    grid: usize,
    opts: &AttentionOptions,
    weights: &str,
) -> Result<()> {
    let (l, h, t, n) = (maps.blocks, maps.heads, maps.tokens, maps.patches());
    let query = maps.query();
    let rollout: Vec<f32> = maps.rollout(opts.fusion, opts.discard_ratio).iter().map(|&v| v as f32).collect();
    std::fs::create_dir_all(&image.dir).map_err(|e| Error::io(&image.dir, e))?;
    let mut tensors = TensorMap::new();
    tensors.insert("attention".into(), HostTensor::new(vec![l, h, t, t], maps.attention.clone()));
    tensors.insert("query".into(), HostTensor::new(vec![l, h, grid, grid], query.clone()));
    tensors.insert("rollout".into(), HostTensor::new(vec![grid, grid], rollout.clone()));
    let meta: HashMap<String, String> = [
        ("image", image.image.display().to_string()),
        ("predicted", image.predicted.clone()),
        ("probability", image.probability.to_string()),
        ("weights", weights.to_string()),
        ("class_token", maps.has_cls.to_string()),
        ("fusion", opts.fusion.name().to_string()),
        ("discard_ratio", opts.discard_ratio.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    write_safetensors(&image.dir.join("maps.safetensors"), &tensors, meta)?;

    let tile = Tile::new(set.image(i), set.height, set.width);
    let mut sheet = Sheet::new(l, h + 2, tile.side);
    for block in 0..l {
        sheet.put(block, 0, &tile.pixels);
        let mut mean = vec![0.0f32; n];
        for head in 0..h {
            let m = &query[(block * h + head) * n..(block * h + head + 1) * n];
            sheet.put(block, head + 1, &tile.overlay(m, grid));
            mean.iter_mut().zip(m).for_each(|(a, v)| *a += v / h as f32);
        }
        sheet.put(block, h + 1, &tile.overlay(&mean, grid));
    }
    sheet.write(&image.dir.join("grid.png"))?;
    let mut pair = Sheet::new(1, 2, tile.side);
    pair.put(0, 0, &tile.pixels);
    pair.put(0, 1, &tile.overlay(&rollout, grid));
    pair.write(&image.dir.join("rollout.png"))
}

/// One image enlarged to a tile (nearest neighbour), RGB interleaved.
struct Tile {
    side: usize,
    pixels: Vec<u8>,
}

impl Tile {
    fn new(chw: &[u8], h: usize, w: usize) -> Tile {
        let side = h.max(w).max(1) * MIN_TILE.div_ceil(h.max(w).max(1));
        let mut pixels = vec![0u8; side * side * 3];
        for y in 0..side {
            for x in 0..side {
                let (sy, sx) = (y * h / side, x * w / side);
                for c in 0..3 {
                    pixels[(y * side + x) * 3 + c] = chw[(c * h + sy) * w + sx];
                }
            }
        }
        Tile { side, pixels }
    }

    /// The image under a map of `grid x grid` patches: the map scaled to its
    /// maximum, resized bilinearly to the tile, coloured with the jet colormap and
    /// blended half and half with the image (as vit-explain's `show_mask_on_image`).
    fn overlay(&self, map: &[f32], grid: usize) -> Vec<u8> {
        let max = map.iter().fold(0f32, |a, &b| a.max(b));
        let scale = if max > 0.0 { 1.0 / max } else { 0.0 };
        let heat = resize_bilinear_f32(map, grid, self.side);
        let mut out = self.pixels.clone();
        for (p, &v) in out.chunks_mut(3).zip(&heat) {
            let rgb = jet((v * scale).clamp(0.0, 1.0));
            for c in 0..3 {
                p[c] = ((p[c] as f32 + rgb[c] * 255.0) / 2.0).round() as u8;
            }
        }
        out
    }
}

/// The jet colormap: blue (0) through green to red (1).
fn jet(v: f32) -> [f32; 3] {
    let f = |centre: f32| (1.5 - (4.0 * v - centre).abs()).clamp(0.0, 1.0);
    [f(3.0), f(2.0), f(1.0)]
}

/// Bilinear resize of a square `n x n` map to `side x side`, half-pixel centres.
fn resize_bilinear_f32(map: &[f32], n: usize, side: usize) -> Vec<f32> {
    let s = n as f32 / side as f32;
    let coord = |o: usize| {
        let f = ((o as f32 + 0.5) * s - 0.5).max(0.0);
        let i0 = (f as usize).min(n - 1);
        (i0, (i0 + 1).min(n - 1), f - i0 as f32)
    };
    let mut out = Vec::with_capacity(side * side);
    for y in 0..side {
        let (y0, y1, fy) = coord(y);
        for x in 0..side {
            let (x0, x1, fx) = coord(x);
            let top = map[y0 * n + x0] * (1.0 - fx) + map[y0 * n + x1] * fx;
            let bottom = map[y1 * n + x0] * (1.0 - fx) + map[y1 * n + x1] * fx;
            out.push(top * (1.0 - fy) + bottom * fy);
        }
    }
    out
}

/// Tiles of one size in rows and columns on white.
struct Sheet {
    cols: usize,
    side: usize,
    width: usize,
    height: usize,
    rgb: Vec<u8>,
}

impl Sheet {
    fn new(rows: usize, cols: usize, side: usize) -> Sheet {
        let (width, height) = (cols * side + (cols + 1) * GAP, rows * side + (rows + 1) * GAP);
        Sheet { cols, side, width, height, rgb: vec![255; width * height * 3] }
    }

    fn put(&mut self, row: usize, col: usize, tile: &[u8]) {
        debug_assert!(col < self.cols);
        let (x0, y0) = (GAP + col * (self.side + GAP), GAP + row * (self.side + GAP));
        for y in 0..self.side {
            let dst = ((y0 + y) * self.width + x0) * 3;
            self.rgb[dst..dst + self.side * 3].copy_from_slice(&tile[y * self.side * 3..(y + 1) * self.side * 3]);
        }
    }

    fn write(&self, path: &Path) -> Result<()> {
        let bytes = png::encode_interleaved(&self.rgb, 3, self.height, self.width).map_err(|m| Error::data(path, m))?;
        atomic_write(path, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jet_runs_from_blue_to_red() {
        assert_eq!(jet(0.0), [0.0, 0.0, 0.5]);
        assert_eq!(jet(0.5), [0.5, 1.0, 0.5]);
        assert_eq!(jet(1.0), [0.5, 0.0, 0.0]);
    }

    #[test]
    fn bilinear_resize_keeps_a_constant_and_interpolates_between_patches() {
        assert!(resize_bilinear_f32(&[0.25; 4], 2, 8).iter().all(|&v| (v - 0.25).abs() < 1e-7));
        let r = resize_bilinear_f32(&[0.0, 1.0, 0.0, 1.0], 2, 4);
        // Columns at centres 0.5, 1.5, 2.5, 3.5 of a 4-wide tile over 2 patches.
        assert_eq!(&r[..4], &[0.0, 0.25, 0.75, 1.0]);
    }

    #[test]
    fn a_small_image_is_enlarged_to_a_whole_tile() {
        let chw: Vec<u8> = (0..3 * 32 * 32).map(|i| (i % 251) as u8).collect();
        let tile = Tile::new(&chw, 32, 32);
        assert_eq!(tile.side, 96);
        // Pixel (0, 0) of the image covers the first 3 x 3 tile pixels.
        assert_eq!(&tile.pixels[..3], &[chw[0], chw[1024], chw[2048]]);
        assert_eq!(&tile.pixels[(2 * 96 + 2) * 3..(2 * 96 + 2) * 3 + 3], &[chw[0], chw[1024], chw[2048]]);
    }
}
