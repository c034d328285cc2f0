//! `vitlab translate`: one generator of a CycleGAN run applied to image files,
//! and optionally pytorch-CycleGAN's test page (`index.html`: each input, its
//! translation, and the translation's reconstruction by the other generator).

use std::path::{Path, PathBuf};

use burn::tensor::Device;

use super::cyclegan::{to_images, CycleGan};
use super::{Checkpoint, RunDir};
use crate::data::decode::Img;
use crate::data::loader::resize_bilinear;
use crate::models::weights::apply;
use crate::models::{VitUnet, VitUnetConfig};
use crate::util::fs::output_paths;
use crate::util::html::escape;
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
    let targets = output_paths(files, out, ".png")?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    translate_chunks(g, None, config.image_size, files, device, |i, _, fake, _| write_png(&targets[i], &fake, size))?;
    Ok(targets)
}

/// Runs `g` over `files` in chunks (and `back` over each translation); calls
/// `f(index, input, translation, reconstruction)` per image, at the generator's size.
fn translate_chunks(
    g: &VitUnet,
    back: Option<&VitUnet>,
    side: usize,
    files: &[PathBuf],
    device: &Device,
    mut f: impl FnMut(usize, Img, Img, Option<Img>) -> Result<()>,
) -> Result<()> {
    for (c, chunk) in files.chunks(16).enumerate() {
        let set = crate::data::read_images(chunk, side, vec!["input".into()])?;
        let n = set.len();
        let x: Vec<f32> = set.pixels.iter().map(|&p| p as f32 / 127.5 - 1.0).collect();
        let y = CycleGan::translate(g, &x, n, side, device);
        let mut recs = back.map(|b| to_images(&CycleGan::translate(b, &y, n, side, device), n, side).into_iter());
        for (i, fake) in to_images(&y, n, side).into_iter().enumerate() {
            let input = Img { h: side, w: side, chw: set.image(i).to_vec() };
            f(c * 16 + i, input, fake, recs.as_mut().and_then(Iterator::next))?;
        }
    }
    Ok(())
}

/// Writes `img` as a PNG, resized to `size` when given.
fn write_png(path: &Path, img: &Img, size: Option<usize>) -> Result<()> {
    let (w, pixels) = match size {
        Some(s) if s != img.w => {
            let mut buf = Vec::new();
            resize_bilinear(&img.chw, 3, img.h, img.w, s, &mut buf);
            (s, buf)
        }
        _ => (img.w, img.chw.clone()),
    };
    let png = crate::util::png::encode_png(&pixels, 3, w, w).map_err(|m| Error::data(path, m))?;
    crate::util::fs::atomic_write(path, &png)
}

/// What the test page says about where its images come from.
pub struct PageInfo<'a> {
    pub checkpoint: &'a Path,
    pub direction: Direction,
}

/// pytorch-CycleGAN's test page: translates `files` with `g` into `OUT/NAME.png`
/// as [`translate_files`] does, writes each input and the reconstruction of its
/// translation by `back` (the other generator) beside them as
/// `OUT/page/NAME.input.png` and `OUT/page/NAME.reconstruction.png`, and
/// `OUT/index.html` showing the three side by side. Returns the page's path.
#[allow(clippy::too_many_arguments)]
pub fn translate_page(
    g: &VitUnet,
    back: &VitUnet,
    config: &VitUnetConfig,
    files: &[PathBuf],
    out: &Path,
    size: Option<usize>,
    info: PageInfo,
    device: &Device,
) -> Result<PathBuf> {
    let targets = output_paths(files, out, ".png")?;
    let page = out.join("page");
    std::fs::create_dir_all(&page).map_err(|e| Error::io(&page, e))?;
    let mut rows = Vec::new();
    translate_chunks(g, Some(back), config.image_size, files, device, |i, input, fake, rec| {
        let stem = targets[i].file_stem().expect("named by output_paths");
        let name = stem
            .to_str()
            .ok_or_else(|| Error::data(&files[i], "a file name that is not UTF-8 cannot be linked from the page"))?;
        let (real_file, rec_file) = (format!("{name}.input.png"), format!("{name}.reconstruction.png"));
        write_png(&page.join(&real_file), &input, size)?;
        write_png(&targets[i], &fake, size)?;
        write_png(&page.join(&rec_file), &rec.expect("a back generator"), size)?;
        rows.push((
            files[i].display().to_string(),
            format!("page/{real_file}"),
            format!("{name}.png"),
            format!("page/{rec_file}"),
        ));
        Ok(())
    })?;
    let (there, back_name) = match info.direction {
        Direction::AToB => ("G_A (A -> B)", "G_B"),
        Direction::BToA => ("G_B (B -> A)", "G_A"),
    };
    let mut html = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>vitlab translate: {t}</title>\n<style>\
         body{{font-family:sans-serif;margin:2em}} td{{padding:4px;vertical-align:top}} img{{image-rendering:pixelated;width:{w}px}}\
         </style></head><body>\n<h1>vitlab translate</h1>\n<p>{n} image(s) through {there} of <code>{t}</code>; \
         reconstruction: {back_name} of the translation.</p>\n<table>\n<tr><th>input file</th><th>input</th>\
         <th>translation</th><th>reconstruction</th></tr>\n",
        t = escape(&info.checkpoint.display().to_string()),
        w = size.unwrap_or(config.image_size).max(128),
        n = rows.len(),
    );
    for (file, real, fake, rec) in &rows {
        html.push_str(&format!(
            "<tr><td>{}</td><td><img src=\"{}\"></td><td><img src=\"{}\"></td><td><img src=\"{}\"></td></tr>\n",
            escape(file),
            url(real),
            url(fake),
            url(rec)
        ));
    }
    html.push_str("</table>\n</body></html>\n");
    let index = out.join("index.html");
    crate::util::fs::atomic_write(&index, html.as_bytes())?;
    Ok(index)
}

/// A relative path as a URL: bytes outside `A-Za-z0-9-._~/` percent-encoded.
fn url(path: &str) -> String {
    path.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}
