//! PNG encoding: the one place vitlab turns pixels into PNG bytes (sample
//! grids, report figures, unpaired folders, augmented images).

use image::ImageEncoder;

/// 8-bit pixels, interleaved (`channels` = 1: grey, 3: RGB per pixel) row
/// after row, to a PNG file's bytes. The error is the encoder's message.
pub fn encode_interleaved(pixels: &[u8], channels: usize, h: usize, w: usize) -> std::result::Result<Vec<u8>, String> {
    let colour = match channels {
        1 => image::ExtendedColorType::L8,
        3 => image::ExtendedColorType::Rgb8,
        c => return Err(format!("cannot write an image of {c} channels as PNG")),
    };
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png).write_image(pixels, w as u32, h as u32, colour).map_err(|e| e.to_string())?;
    Ok(png)
}

/// CHW uint8 (1 or 3 channels) to a PNG file's bytes.
pub fn encode_png(chw: &[u8], channels: usize, h: usize, w: usize) -> std::result::Result<Vec<u8>, String> {
    let plane = h * w;
    let interleaved = match channels {
        1 => chw[..plane].to_vec(),
        3 => {
            let mut hwc = Vec::with_capacity(3 * plane);
            for p in 0..plane {
                hwc.extend_from_slice(&[chw[p], chw[plane + p], chw[2 * plane + p]]);
            }
            hwc
        }
        c => return Err(format!("cannot write an image of {c} channels as PNG")),
    };
    encode_interleaved(&interleaved, channels, h, w).map_err(|e| format!("cannot encode PNG: {e}"))
}
