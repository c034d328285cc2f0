//! Image decoding for the folder-based readers (and FID): JPEG/PNG files to RGB CHW
//! bytes on several threads, then one common size.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::ImageSet;
use crate::{Error, Result};

/// File extensions the folder readers take as images (case-insensitive).
pub(crate) const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png"];

pub(crate) fn is_image(path: &Path) -> bool {
    path.extension().map(|e| e.to_string_lossy().to_lowercase()).is_some_and(|e| IMAGE_EXTENSIONS.contains(&e.as_str()))
}

/// One decoded image: RGB, channel-major.
pub struct Img {
    pub h: usize,
    pub w: usize,
    pub chw: Vec<u8>,
}

/// Decodes an encoded image (JPEG or PNG, any colour type) to RGB CHW.
pub(crate) fn decode_bytes(bytes: &[u8]) -> std::result::Result<Img, String> {
    let reader = image::ImageReader::new(std::io::Cursor::new(bytes)).with_guessed_format().map_err(|e| e.to_string())?;
    if reader.format().is_none() {
        return Err("not a JPEG or PNG image".into());
    }
    let img = reader.decode().map_err(|e| e.to_string())?.into_rgb8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    if w == 0 || h == 0 {
        return Err("image has no pixels".into());
    }
    let hwc = img.into_raw();
    let plane = h * w;
    let mut chw = vec![0u8; 3 * plane];
    let (r, rest) = chw.split_at_mut(plane);
    let (g, b) = rest.split_at_mut(plane);
    for (i, px) in hwc.chunks_exact(3).enumerate() {
        r[i] = px[0];
        g[i] = px[1];
        b[i] = px[2];
    }
    Ok(Img { h, w, chw })
}

pub fn decode_file(path: &Path) -> Result<Img> {
    let bytes = fs::read(path).map_err(|e| Error::io(path, e))?;
    decode_bytes(&bytes).map_err(|m| Error::data(path, format!("cannot decode image: {m}")))
}

/// Decodes `paths` on `threads` threads, in order; the first failing file (in
/// list order) is the error.
pub(crate) fn decode_all(paths: &[PathBuf], threads: usize) -> Result<Vec<Img>> {
    let threads = threads.clamp(1, 64).min(paths.len().max(1));
    let next = AtomicUsize::new(0);
    const CHUNK: usize = 64;
    let mut parts: Vec<(usize, Vec<Result<Img>>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if start >= paths.len() {
                            break;
                        }
                        let end = (start + CHUNK).min(paths.len());
                        out.push((start, paths[start..end].iter().map(|p| decode_file(p)).collect()));
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    parts.sort_by_key(|p| p.0);
    let mut out = Vec::with_capacity(paths.len());
    for (_, chunk) in parts {
        for r in chunk {
            out.push(r?);
        }
    }
    if out.len() != paths.len() {
        return Err(Error::data(paths.first().map(|p| p.as_path()).unwrap_or(Path::new(".")), "a decoding thread failed"));
    }
    Ok(out)
}

/// The size every image of a dataset gets: `forced` (square) if given, else
/// the most common size among `imgs` (ties: the larger area, then the first
/// seen). Returns `(height, width)` and a note when some images differ.
pub(crate) fn common_size<'a>(imgs: impl Iterator<Item = &'a Img>, forced: Option<usize>) -> ((usize, usize), Option<String>) {
    let mut counts: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
    let mut total = 0;
    for (i, im) in imgs.enumerate() {
        let e = counts.entry((im.h, im.w)).or_insert((0, i));
        e.0 += 1;
        total += 1;
    }
    if let Some(s) = forced {
        let same = counts.get(&(s, s)).map(|c| c.0).unwrap_or(0);
        let note = (same != total).then(|| format!("{} images resized to {s}x{s} (bilinear)", total - same));
        return ((s, s), note);
    }
    let best = counts
        .iter()
        .max_by(|a, b| {
            (a.1 .0, a.0 .0 * a.0 .1, std::cmp::Reverse(a.1 .1)).cmp(&(b.1 .0, b.0 .0 * b.0 .1, std::cmp::Reverse(b.1 .1)))
        })
        .map(|(k, _)| *k)
        .unwrap_or((1, 1));
    let same = counts.get(&best).map(|c| c.0).unwrap_or(0);
    let note = (same != total).then(|| {
        format!(
            "{} of {total} images differ in size; resized to the most common size {}x{} (bilinear)",
            total - same,
            best.0,
            best.1
        )
    });
    (best, note)
}

/// Packs decoded images and labels into an [`ImageSet`] of size `hw`, resizing where needed.
pub(crate) fn pack(imgs: Vec<Img>, labels: Vec<u32>, classes: Vec<String>, hw: (usize, usize)) -> ImageSet {
    let (h, w) = hw;
    let mut pixels = Vec::with_capacity(imgs.len() * 3 * h * w);
    let mut scratch = Vec::new();
    for im in imgs {
        if im.h == h && im.w == w {
            pixels.extend_from_slice(&im.chw);
        } else {
            resize_planes(&im.chw, 3, im.h, im.w, h, w, &mut scratch);
            pixels.extend_from_slice(&scratch);
        }
    }
    ImageSet { pixels, labels, channels: 3, height: h, width: w, classes }
}

/// Bilinear resize of `ch` planes from `h x w` to `oh x ow`, half-pixel
/// centres (torchvision's `antialias=False`).
pub(crate) fn resize_planes(src: &[u8], ch: usize, h: usize, w: usize, oh: usize, ow: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(ch * oh * ow, 0);
    if h == 0 || w == 0 {
        return;
    }
    let (sy, sx) = (h as f32 / oh as f32, w as f32 / ow as f32);
    let xs: Vec<(usize, usize, f32)> = (0..ow)
        .map(|x| {
            let fx = ((x as f32 + 0.5) * sx - 0.5).max(0.0);
            let x0 = (fx as usize).min(w - 1);
            (x0, (x0 + 1).min(w - 1), fx - x0 as f32)
        })
        .collect();
    for c in 0..ch {
        let plane = &src[c * h * w..(c + 1) * h * w];
        for y in 0..oh {
            let fy = ((y as f32 + 0.5) * sy - 0.5).max(0.0);
            let y0 = (fy as usize).min(h - 1);
            let y1 = (y0 + 1).min(h - 1);
            let wy = fy - y0 as f32;
            let (r0, r1) = (&plane[y0 * w..(y0 + 1) * w], &plane[y1 * w..(y1 + 1) * w]);
            let o = &mut out[c * oh * ow + y * ow..c * oh * ow + (y + 1) * ow];
            for (ox, &(x0, x1, wx)) in o.iter_mut().zip(&xs) {
                let top = (1.0 - wx) * r0[x0] as f32 + wx * r0[x1] as f32;
                let bot = (1.0 - wx) * r1[x0] as f32 + wx * r1[x1] as f32;
                *ox = ((1.0 - wy) * top + wy * bot).round().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

/// Sorted visible entries of a folder: `(name, path, is_dir)`.
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<(String, PathBuf, bool)>> {
    let rd = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    let mut v = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let p = entry.path();
        // Follow symlinks: a linked folder counts as a folder.
        let is_dir = p.is_dir();
        v.push((name, p, is_dir));
    }
    v.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(v)
}

/// The image files directly in `dir`, sorted; an empty list is an error naming the folder.
pub(crate) fn images_in(dir: &Path, what: &str) -> Result<Vec<PathBuf>> {
    let files: Vec<PathBuf> =
        list_dir(dir)?.into_iter().filter(|(_, p, is_dir)| !is_dir && is_image(p)).map(|(_, p, _)| p).collect();
    if files.is_empty() {
        return Err(Error::data(dir, format!("{what} has no images (.jpg, .jpeg or .png files)")));
    }
    Ok(files)
}
