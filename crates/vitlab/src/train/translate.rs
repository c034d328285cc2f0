//! `vitlab translate`: one generator of a CycleGAN run applied to image files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::Device;

use super::cyclegan::{to_images, CycleGan};
use super::{Checkpoint, RunDir};
use crate::data::loader::resize_bilinear;
use crate::models::weights::apply;
use crate::models::{VitUnet, VitUnetConfig};
use crate::{Error, Result};

/// Which generator `vitlab translate` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// `G_A`: domain A to domain B.
    AToB,
    /// `G_B`: domain B to domain A.
    BToA,
}

impl Direction {
    pub fn parse(s: &str) -> Result<Direction> {
        match s {
            "a2b" => Ok(Direction::AToB),
            "b2a" => Ok(Direction::BToA),
            _ => Err(Error::usage("--direction", format!("{s:?}: expected a2b or b2a"))),
        }
    }
}

/// One generator of a CycleGAN run directory (its `best` checkpoint, else `latest`) or checkpoint file.
pub fn load_generator(path: &Path, direction: Direction, device: &Device) -> Result<(VitUnet, VitUnetConfig, PathBuf)> {
    let file = if path.is_dir() {
        let run = RunDir::new(path);
        [run.best(), run.latest()].into_iter().find(|p| p.exists()).ok_or_else(|| {
            Error::data(path, "no checkpoints/best.safetensors or latest.safetensors: not a (started) run directory")
        })?
    } else {
        path.to_path_buf()
    };
    let ck = Checkpoint::load(&file)?;
    if ck.metadata.get("task").map(String::as_str) != Some("cyclegan") {
        return Err(Error::weights(
            &file,
            "a classification checkpoint, not a CycleGAN run (translate needs a run of `task = \"cyclegan\"`)",
        ));
    }
    let config: VitUnetConfig = ck
        .metadata
        .get("generator_config")
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(|| Error::weights(&file, "checkpoint has no generator_config metadata"))?;
    let prefix = match direction {
        Direction::AToB => "g_a",
        Direction::BToA => "g_b",
    };
    let g = apply(VitUnet::new(&config, device)?, &ck.group(prefix), &file)?;
    Ok((g, config, file))
}

/// Translates image files (decoded, resized to the generator's size) and writes
/// PNGs named like the inputs into `out` (resized to `size` when given). Returns
/// the written paths. Two inputs with one file stem are an error.
pub fn translate_files(
    g: &VitUnet,
    config: &VitUnetConfig,
    files: &[PathBuf],
    out: &Path,
    size: Option<usize>,
    device: &Device,
) -> Result<Vec<PathBuf>> {
    let mut targets: Vec<PathBuf> = Vec::with_capacity(files.len());
    let mut seen: HashMap<PathBuf, &Path> = HashMap::new();
    for f in files {
        let stem = f.file_stem().ok_or_else(|| Error::data(f, "not a file name"))?;
        let target = out.join(stem).with_extension("png");
        if let Some(other) = seen.insert(target.clone(), f) {
            return Err(Error::data(f, format!("would write {} as {} does too", target.display(), other.display())));
        }
        targets.push(target);
    }
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let side = config.image_size;
    for (chunk, dest) in files.chunks(16).zip(targets.chunks(16)) {
        let set = crate::data::read_images(chunk, side, vec!["input".into()])?;
        let x: Vec<f32> = set.pixels.iter().map(|&p| p as f32 / 127.5 - 1.0).collect();
        let y = CycleGan::translate(g, &x, set.len(), side, device);
        for (img, path) in to_images(&y, set.len(), side).into_iter().zip(dest) {
            let (w, pixels) = match size {
                Some(s) if s != side => {
                    let mut buf = Vec::new();
                    resize_bilinear(&img.chw, 3, side, side, s, &mut buf);
                    (s, buf)
                }
                _ => (side, img.chw),
            };
            let png = crate::util::png::encode_png(&pixels, 3, w, w).map_err(|m| Error::data(path, m))?;
            crate::util::fs::atomic_write(path, &png)?;
        }
    }
    Ok(targets)
}
