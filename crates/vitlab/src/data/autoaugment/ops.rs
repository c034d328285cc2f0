//! The pixel kernels behind [`super::apply`]. Each reproduces what torchvision's
//! `_apply_op` does to a PIL image, down to PIL's integer and float rounding:
//! the NEAREST affine sampler (16.16 fixed point, pixel centres at `x + 0.5`) and
//! the 90/180/270 degree transposes of `Image.rotate`, `Image.blend` (all four
//! ImageEnhance operations), the 3x3 SMOOTH filter, RGB -> L conversion, and the
//! lookup tables of ImageOps (posterize, solarize, autocontrast, equalize, invert).
//!
//! Images are planar CHW `u8`. One channel behaves as PIL mode "L", three as "RGB".
//! Only Color and Contrast depend on the channel meaning (they need the luma);
//! with another channel count they leave the image unchanged.

use std::f64::consts::PI;
use std::io::Write;

/// PIL's RGB -> L conversion: ITU-R 601-2 luma in 16.16 fixed point, rounded.
#[inline]
fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}

/// One sample of PIL's `Image.blend(degenerate, image, alpha)`, which every
/// ImageEnhance operation ends in: `d + alpha * (v - d)` in f32, clamped to
/// [0, 255] and truncated (PIL does not round here).
#[inline]
fn blend(d: u8, v: u8, alpha: f32) -> u8 {
    let t = d as f32 + alpha * (v as i32 - d as i32) as f32;
    if t <= 0.0 {
        0
    } else if t >= 255.0 {
        255
    } else {
        t as u8
    }
}

fn map(src: &[u8], lut: &[u8; 256], dst: &mut [u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = lut[s as usize];
    }
}

/// `ImageEnhance.Brightness`: blend with a black image.
pub(super) fn brightness(src: &[u8], factor: f64, dst: &mut [u8]) {
    let alpha = factor as f32;
    let mut lut = [0u8; 256];
    for (v, l) in lut.iter_mut().enumerate() {
        *l = blend(0, v as u8, alpha);
    }
    map(src, &lut, dst);
}

/// `ImageEnhance.Color`: blend with the image's luma (RGB -> L -> RGB). PIL's
/// degenerate image of an L image is the image itself, so one channel is unchanged.
pub(super) fn color(src: &[u8], channels: usize, hw: usize, factor: f64, dst: &mut [u8]) {
    if channels != 3 {
        dst.copy_from_slice(src);
        return;
    }
    let alpha = factor as f32;
    let (r, rest) = src.split_at(hw);
    let (g, b) = rest.split_at(hw);
    for i in 0..hw {
        let l = luma(r[i], g[i], b[i]);
        for c in 0..3 {
            dst[c * hw + i] = blend(l, src[c * hw + i], alpha);
        }
    }
}

/// `ImageEnhance.Contrast`: blend with a uniform grey at the mean luma, which PIL
/// rounds as `int(mean + 0.5)`.
pub(super) fn contrast(src: &[u8], channels: usize, hw: usize, factor: f64, dst: &mut [u8]) {
    let sum: u64 = match channels {
        1 => src.iter().map(|&v| v as u64).sum(),
        3 => (0..hw).map(|i| luma(src[i], src[hw + i], src[2 * hw + i]) as u64).sum(),
        _ => {
            dst.copy_from_slice(src);
            return;
        }
    };
    // ImageStat sums `value * count` in f64 and divides by the pixel count.
    let mean = (sum as f64 / hw as f64 + 0.5) as u8;
    let alpha = factor as f32;
    let mut lut = [0u8; 256];
    for (v, l) in lut.iter_mut().enumerate() {
        *l = blend(mean, v as u8, alpha);
    }
    map(src, &lut, dst);
}

/// `ImageEnhance.Sharpness`: blend with `filter(SMOOTH)`, the 3x3 kernel
/// [[1 1 1] [1 5 1] [1 1 1]] / 13 whose border rows and columns PIL copies unchanged.
pub(super) fn sharpness(src: &[u8], channels: usize, h: usize, w: usize, factor: f64, dst: &mut [u8]) {
    // PIL divides the kernel by its scale in f32, sums in f32 starting from 0.5
    // (for rounding), the row below first, and truncates; the order matters for
    // sums that land near .5.
    const K: f32 = 1.0 / 13.0;
    const K5: f32 = 5.0 / 13.0;
    let alpha = factor as f32;
    let row = |r: &[u8], x: usize, mid: f32| (r[x - 1] as f32 * K + r[x] as f32 * mid) + r[x + 1] as f32 * K;
    for c in 0..channels {
        let plane = &src[c * h * w..(c + 1) * h * w];
        let out = &mut dst[c * h * w..(c + 1) * h * w];
        out.copy_from_slice(plane);
        for y in 1..h.saturating_sub(1) {
            let (above, cur, below) = (&plane[(y - 1) * w..y * w], &plane[y * w..(y + 1) * w], &plane[(y + 1) * w..(y + 2) * w]);
            for x in 1..w.saturating_sub(1) {
                let mut ss = 0.5f32;
                ss += row(below, x, K);
                ss += row(cur, x, K5);
                ss += row(above, x, K);
                let smooth = if ss <= 0.0 {
                    0
                } else if ss >= 255.0 {
                    255
                } else {
                    ss as u8
                };
                out[y * w + x] = blend(smooth, cur[x], alpha);
            }
        }
    }
}

/// `ImageOps.posterize`: keep the top `bits` bits (PIL accepts 1..=8; clamped).
pub(super) fn posterize(src: &[u8], bits: i64, dst: &mut [u8]) {
    let mask = !((1u32 << (8 - bits.clamp(1, 8))) - 1) as u8;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s & mask;
    }
}

/// `ImageOps.solarize`: invert every value at or above `threshold`.
pub(super) fn solarize(src: &[u8], threshold: f64, dst: &mut [u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = if (s as f64) < threshold { s } else { 255 - s };
    }
}

/// `ImageOps.invert`.
pub(super) fn invert(src: &[u8], dst: &mut [u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = 255 - s;
    }
}

fn histogram(plane: &[u8]) -> [u32; 256] {
    let mut h = [0u32; 256];
    for &v in plane {
        h[v as usize] += 1;
    }
    h
}

/// `ImageOps.autocontrast` (cutoff 0), per channel: stretch [lo, hi] to [0, 255]
/// with `int(v * scale + offset)` in f64; a channel with one value is unchanged.
pub(super) fn autocontrast(src: &[u8], channels: usize, hw: usize, dst: &mut [u8]) {
    for c in 0..channels {
        let plane = &src[c * hw..(c + 1) * hw];
        let h = histogram(plane);
        let lo = h.iter().position(|&n| n > 0).unwrap_or(0);
        let hi = h.iter().rposition(|&n| n > 0).unwrap_or(0);
        let mut lut = [0u8; 256];
        for (v, l) in lut.iter_mut().enumerate() {
            *l = if hi <= lo {
                v as u8
            } else {
                let scale = 255.0 / (hi - lo) as f64;
                let offset = -(lo as f64) * scale;
                // Python's int() truncates toward zero, then the result is clamped.
                ((v as f64 * scale + offset) as i64).clamp(0, 255) as u8
            };
        }
        map(plane, &lut, &mut dst[c * hw..(c + 1) * hw]);
    }
}

/// `ImageOps.equalize`, per channel: the LUT maps value i to
/// `(step / 2 + #pixels below i) / step` with `step = (N - count of the highest
/// value present) / 255` (integer division); one distinct value or `step == 0`
/// leaves the channel unchanged.
pub(super) fn equalize(src: &[u8], channels: usize, hw: usize, dst: &mut [u8]) {
    for c in 0..channels {
        let plane = &src[c * hw..(c + 1) * hw];
        let h = histogram(plane);
        let present = h.iter().filter(|&&n| n > 0).count();
        let last = h.iter().rev().find(|&&n| n > 0).copied().unwrap_or(0);
        let step = (hw as u64 - last as u64) / 255;
        let mut lut = [0u8; 256];
        let mut n = step / 2;
        for (v, l) in lut.iter_mut().enumerate() {
            *l = if present <= 1 || step == 0 {
                v as u8
            } else {
                // PIL clips LUT entries to 255 when it applies them.
                (n / step).min(255) as u8
            };
            n += h[v] as u64;
        }
        map(plane, &lut, &mut dst[c * hw..(c + 1) * hw]);
    }
}

/// torchvision's `_get_inverse_affine_matrix` as `F.affine` uses it for PIL images
/// (scale 1): the output -> input map `[a0 a1 a2; a3 a4 a5]` of a shear `shear`
/// (degrees) and rotation `angle` about `center`, followed by translation. The
/// operations keep torchvision's f64 order so that the matrix is bit-identical.
fn inverse_affine(center: [f64; 2], angle: f64, translate: [f64; 2], shear: [f64; 2]) -> [f64; 6] {
    let rad = |deg: f64| deg * (PI / 180.0);
    let (rot, sx, sy) = (rad(angle), rad(shear[0]), rad(shear[1]));
    // The forward linear part [a b; c d] (rotation after shear, determinant 1) ...
    let a = (rot - sy).cos() / sy.cos();
    let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
    let c = (rot - sy).sin() / sy.cos();
    let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();
    // ... inverted as [d -b; -c a], with centre and translation folded into the offsets.
    let mut m = [d, -b, 0.0, -c, a, 0.0];
    let (px, py) = (-center[0] - translate[0], -center[1] - translate[1]);
    m[2] += m[0] * px + m[1] * py;
    m[5] += m[3] * px + m[4] * py;
    m[2] += center[0];
    m[5] += center[1];
    m
}

/// PIL's `Image.transform(size, AFFINE, m, NEAREST)` onto a zero-filled image of the
/// same size: output pixel (x, y) takes input pixel
/// `(floor(m0 (x + .5) + m1 (y + .5) + m2), floor(m3 (x + .5) + m4 (y + .5) + m5))`,
/// evaluated the way PIL does, so that ties round identically.
fn affine(src: &[u8], channels: usize, h: usize, w: usize, m: &[f64; 6], dst: &mut [u8]) {
    let hw = h * w;
    dst.fill(0);
    let mut put = |x: usize, y: usize, xi: i64, yi: i64| {
        if xi >= 0 && (xi as usize) < w && yi >= 0 && (yi as usize) < h {
            let s = yi as usize * w + xi as usize;
            for c in 0..channels {
                dst[c * hw + y * w + x] = src[c * hw + s];
            }
        }
    };
    if m[1] == 0.0 && m[3] == 0.0 {
        // Axis-aligned (translations): PIL's scale path accumulates the source
        // position in f64 and takes `v < 0 ? -1 : (int)v`.
        let coord = |v: f64| if v < 0.0 { -1 } else { v as i64 };
        let mut yo = m[5] + m[4] * 0.5;
        for y in 0..h {
            let yi = coord(yo);
            yo += m[4];
            let mut xo = m[2] + m[0] * 0.5;
            for x in 0..w {
                put(x, y, coord(xo), yi);
                xo += m[0];
            }
        }
        return;
    }
    // General case: PIL steps the source position in 16.16 fixed point from the
    // centre of pixel (0, 0), which is what makes shears and rotations exact here.
    // (PIL switches to an f64 loop when a corner maps beyond +-32768 px; vitlab's
    // images never come near that, and this keeps the 16.16 steps in i64.)
    let fix = |v: f64| (v * 65536.0 + 0.5).floor() as i64;
    let (a0, a1, a3, a4) = (fix(m[0]), fix(m[1]), fix(m[3]), fix(m[4]));
    let mut a2 = fix(m[2] + m[1] * 0.5 + m[0] * 0.5);
    let mut a5 = fix(m[5] + m[4] * 0.5 + m[3] * 0.5);
    for y in 0..h {
        let (mut xx, mut yy) = (a2, a5);
        for x in 0..w {
            put(x, y, xx >> 16, yy >> 16);
            xx += a0;
            yy += a3;
        }
        a2 += a1;
        a5 += a4;
    }
}

/// torchvision's ShearX / ShearY: `F.affine` about the origin (centre `[0, 0]`)
/// with shear angle `degrees(atan(magnitude))`, so that x_in = x + magnitude * y
/// (ShearX) or y_in = y + magnitude * x (ShearY) up to rounding.
pub(super) fn shear(src: &[u8], channels: usize, h: usize, w: usize, magnitude: f64, horizontal: bool, dst: &mut [u8]) {
    let deg = magnitude.atan() * (180.0 / PI);
    let shear = if horizontal { [deg, 0.0] } else { [0.0, deg] };
    let m = inverse_affine([0.0, 0.0], 0.0, [0.0, 0.0], shear);
    affine(src, channels, h, w, &m, dst);
}

/// torchvision's TranslateX / TranslateY: `F.affine` by whole pixels (`int(magnitude)`).
pub(super) fn translate(src: &[u8], channels: usize, h: usize, w: usize, tx: i64, ty: i64, dst: &mut [u8]) {
    let center = [w as f64 * 0.5, h as f64 * 0.5];
    let m = inverse_affine(center, 0.0, [tx as f64, ty as f64], [0.0, 0.0]);
    affine(src, channels, h, w, &m, dst);
}

/// Python's `round(x, 15)`: the nearest double to x rounded to 15 decimals. Rust's
/// fixed-precision formatting is exact, so formatting and parsing back reproduces it.
fn round15(x: f64) -> f64 {
    let mut buf = [0u8; 64];
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    write!(cur, "{x:.15}").expect("a value in [-1, 1] fits");
    let n = cur.position() as usize;
    std::str::from_utf8(&buf[..n]).ok().and_then(|s| s.parse().ok()).unwrap_or(x)
}

/// torchvision's Rotate: PIL's `Image.rotate(angle)` counter-clockwise about the
/// centre `(w / 2, h / 2)`, including its exact transposes for multiples of 90
/// degrees (90 and 270 only on square images, as PIL).
pub(super) fn rotate(src: &[u8], channels: usize, h: usize, w: usize, degrees: f64, dst: &mut [u8]) {
    // Python's float modulo: the result takes the sign of 360.
    let mut angle = degrees % 360.0;
    if angle < 0.0 {
        angle += 360.0;
    } else if angle == 0.0 {
        angle = 0.0;
    }
    let hw = h * w;
    // Transposes: output (x, y) reads input index `pick(x, y)`.
    let transpose = |dst: &mut [u8], pick: &dyn Fn(usize, usize) -> usize| {
        for c in 0..channels {
            for y in 0..h {
                for x in 0..w {
                    dst[c * hw + y * w + x] = src[c * hw + pick(x, y)];
                }
            }
        }
    };
    if angle == 0.0 {
        dst.copy_from_slice(src);
        return;
    } else if angle == 180.0 {
        return transpose(dst, &|x, y| (h - 1 - y) * w + (w - 1 - x));
    } else if angle == 90.0 && w == h {
        return transpose(dst, &|x, y| x * w + (w - 1 - y));
    } else if angle == 270.0 && w == h {
        return transpose(dst, &|x, y| (h - 1 - x) * w + y);
    }
    // PIL rounds the rotation matrix to 15 decimals, then moves the centre.
    let theta = -(angle * (PI / 180.0));
    let (sin, cos) = (theta.sin(), theta.cos());
    let mut m = [round15(cos), round15(sin), 0.0, round15(-sin), round15(cos), 0.0];
    let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
    m[2] += m[0] * -cx + m[1] * -cy;
    m[5] += m[3] * -cx + m[4] * -cy;
    m[2] += cx;
    m[5] += cy;
    affine(src, channels, h, w, &m, dst);
}
