//! Image grids as PNG: the sample sheets a generator trainer writes during
//! training (SPEC §5: A, G_AB(A), B, G_BA(B), every 10 % of training), and the
//! grid of training images that `vitlab data preview` shows.

use std::path::Path;

use crate::tensor_file::HostTensor;
use crate::util::fs::atomic_write;
use crate::util::png;
use crate::{Error, Result};

/// Pixels between tiles (white).
const GAP: usize = 2;

/// Writes `columns` (each a `[B, C, H, W]` batch of images in `[-1, 1]`, C = 1
/// or 3, all of one shape) as a PNG grid: column j holds batch j, row i image
/// i of every batch. Values outside `[-1, 1]` are clamped. The file is written
/// to a temporary name and renamed.
pub fn write_image_grid(path: &Path, columns: &[HostTensor]) -> Result<()> {
    let bad = |message: String| Error::data(path, format!("image grid: {message}"));
    let first = columns.first().ok_or_else(|| bad("no columns".into()))?;
    let [b, c, h, w] = first.shape[..] else {
        return Err(bad(format!("expected [B, C, H, W] images, got shape {:?}", first.shape)));
    };
    if c != 1 && c != 3 {
        return Err(bad(format!("expected 1 or 3 channels, got {c}")));
    }
    if let Some((j, t)) = columns.iter().enumerate().find(|(_, t)| t.shape != first.shape) {
        return Err(bad(format!("column {j} has shape {:?}, column 0 {:?}", t.shape, first.shape)));
    }
    if let Some((j, t)) = columns.iter().enumerate().find(|(_, t)| t.data.len() != b * c * h * w) {
        return Err(bad(format!("column {j} holds {} values for shape {:?}", t.data.len(), t.shape)));
    }
    let cols = columns.len();
    let (width, height) = (cols * w + (cols + 1) * GAP, b * h + (b + 1) * GAP);
    let mut rgb = vec![255u8; width * height * 3];
    for (j, t) in columns.iter().enumerate() {
        for i in 0..b {
            for y in 0..h {
                for x in 0..w {
                    let px = ((GAP + i * (h + GAP) + y) * width + GAP + j * (w + GAP) + x) * 3;
                    for k in 0..3 {
                        let ch = if c == 1 { 0 } else { k };
                        let v = t.data[((i * c + ch) * h + y) * w + x];
                        rgb[px + k] = to_u8(v);
                    }
                }
            }
        }
    }
    let png = png::encode_interleaved(&rgb, 3, height, width).map_err(bad)?;
    atomic_write(path, &png)
}

/// `[-1, 1]` to `0..=255`, rounding to nearest (NaN as 0).
pub(crate) fn to_u8(v: f32) -> u8 {
    let v = if v.is_nan() { -1.0 } else { v.clamp(-1.0, 1.0) };
    ((v + 1.0) * 127.5).round() as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grid_puts_batch_j_in_column_j_and_image_i_in_row_i() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("samples.png");
        // Two columns of two 3x2 RGB images; pixel value encodes (column, image, channel).
        let column = |j: usize| {
            let mut data = Vec::new();
            for i in 0..2 {
                for ch in 0..3 {
                    let v = -1.0 + 0.25 * (j * 4 + i * 2) as f32 + 0.05 * ch as f32;
                    data.extend(std::iter::repeat_n(v, 3 * 2));
                }
            }
            HostTensor::new(vec![2, 3, 3, 2], data)
        };
        write_image_grid(&path, &[column(0), column(1)]).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        // 2 columns of width 2, 2 rows of height 3, 2-pixel white gaps.
        assert_eq!(img.dimensions(), (2 * 2 + 3 * GAP as u32, 2 * 3 + 3 * GAP as u32));
        assert_eq!(img.get_pixel(0, 0).0, [255, 255, 255]);
        for (j, i) in [(0usize, 0usize), (0, 1), (1, 0), (1, 1)] {
            let (x, y) = (GAP + j * (2 + GAP), GAP + i * (3 + GAP) + 2);
            let expected: Vec<u8> = (0..3).map(|ch| to_u8(-1.0 + 0.25 * (j * 4 + i * 2) as f32 + 0.05 * ch as f32)).collect();
            assert_eq!(img.get_pixel(x as u32, y as u32).0.to_vec(), expected, "column {j}, image {i}");
        }
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    }

    #[test]
    fn values_map_from_minus_one_one_to_bytes_and_clamp() {
        assert_eq!([to_u8(-1.0), to_u8(0.0), to_u8(1.0), to_u8(-3.0), to_u8(7.0), to_u8(f32::NAN)], [0, 128, 255, 0, 255, 0]);
    }

    #[test]
    fn mismatched_or_malformed_columns_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.png");
        let a = HostTensor::new(vec![1, 3, 2, 2], vec![0.0; 12]);
        let b = HostTensor::new(vec![1, 3, 2, 3], vec![0.0; 18]);
        let msg = write_image_grid(&path, &[a.clone(), b]).unwrap_err().to_string();
        assert!(msg.contains("g.png") && msg.contains("column 1"), "{msg}");
        let two = HostTensor::new(vec![1, 2, 2, 2], vec![0.0; 8]);
        assert!(write_image_grid(&path, &[two]).unwrap_err().to_string().contains("1 or 3 channels"));
        assert!(write_image_grid(&path, &[]).unwrap_err().to_string().contains("no columns"));
        let short = HostTensor { shape: vec![1, 3, 2, 2], data: vec![0.0; 11] };
        assert!(write_image_grid(&path, &[short]).unwrap_err().to_string().contains("11 values"));
        assert!(!path.exists());
    }
}
