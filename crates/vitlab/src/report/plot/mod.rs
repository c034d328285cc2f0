//! The reports' figures, drawn with plotters to SVG and PNG from one drawing
//! routine each (`Draw`, written by `render`). PNG text uses the DejaVu Sans
//! subset bundled under `assets/fonts/` (no system fonts needed); SVG text
//! names `sans-serif`. This file holds what every figure shares (colours, tick
//! labels, the legend, the category axis), [`draw_all`] (the classification
//! report's figures) and the accuracy bars; `stability.rs` the per-step
//! monitor panels (stability and blocks), `curves.rs` the training curves of
//! both reports (loss and validation accuracy; the CycleGAN generators' loss).

mod curves;
mod stability;

pub(crate) use curves::gan_losses;

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::Report;
use crate::util::fs::atomic_write;
use crate::util::png;
use crate::{Error, Result};
use curves::Curves;
use stability::{Blocks, Stability};

static FONT: &[u8] = include_bytes!("../../../../../assets/fonts/DejaVuSans-subset.ttf");
static REGISTER: Once = Once::new();

fn register_font() {
    REGISTER.call_once(|| {
        // The bundled font is known to parse; a failure would only lose PNG text.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// A figure written as `NAME.png` and `NAME.svg`.
#[derive(Clone, Debug)]
pub struct Figure {
    pub name: String,
    pub caption: String,
}

/// Colours for up to 20 cells (tab10, then its light variants), cycling beyond.
const COLORS: [(u8, u8, u8); 20] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (174, 199, 232),
    (255, 187, 120),
    (152, 223, 138),
    (255, 152, 150),
    (197, 176, 213),
    (196, 156, 148),
    (247, 182, 210),
    (199, 199, 199),
    (219, 219, 141),
    (158, 218, 229),
];

pub(super) fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

pub(super) type DrawResult = std::result::Result<(), String>;

/// The minor grid lines.
pub(super) const LIGHT: RGBColor = RGBColor(238, 238, 238);

/// Log-axis tick labels: 0.01, 0.1, 1, 10, 100, 1000, 1e4, 1e5, ...
pub(super) fn log_label(v: f64) -> String {
    if v >= 1e4 || (v > 0.0 && v < 1e-3) {
        let e = v.log10().round() as i32;
        let m = v / 10f64.powi(e);
        if (m - 1.0).abs() < 1e-6 {
            format!("1e{e}")
        } else {
            format!("{m:.1}e{e}")
        }
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

/// Loss-axis tick labels: two decimals below 10, whole numbers above, powers of ten from 1e4.
pub(super) fn loss_label(v: f64) -> String {
    if v >= 1e4 {
        log_label(v)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The series legend, in the same style on every figure.
pub(super) fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)
}

/// A figure's drawing routine, for any plotters backend.
pub(super) trait Draw {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult;
}

/// Draws `d` to `dir/NAME.svg` and `dir/NAME.png`.
pub(super) fn render<D: Draw>(d: &D, name: &str, (w, h): (u32, u32), dir: &Path) -> Result<()> {
    register_font();
    let fail = |what: &str, e: String| Error::data(dir.join(format!("{name}.{what}")), format!("drawing failed: {e}"));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail("svg", err(e)))?;
        d.draw(&root).map_err(|e| fail("svg", e))?;
        root.present().map_err(|e| fail("svg", err(e)))?;
    }
    atomic_write(&dir.join(format!("{name}.svg")), svg.as_bytes())?;
    let mut buf = vec![0u8; (w * h * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail("png", err(e)))?;
        d.draw(&root).map_err(|e| fail("png", e))?;
        root.present().map_err(|e| fail("png", err(e)))?;
    }
    let png = png::encode_interleaved(&buf, 3, h as usize, w as usize).map_err(|e| fail("png", e))?;
    atomic_write(&dir.join(format!("{name}.png")), &png)
}

/// Draws every figure the data allows; returns the ones written.
pub fn draw_all(report: &Report, dir: &Path) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let acc = Accuracy::new(report);
    if !acc.bars.is_empty() {
        let longest = acc.bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(10) as u32;
        let w = (acc.bars.len() as u32 * (longest * 8 + 24)).clamp(700, 2400) + 120;
        render(&acc, "accuracy", (w, 520), dir)?;
        out.push(Figure {
            name: "accuracy".into(),
            caption: "Test top-1 and top-5 accuracy per cell, mean over seeds, error bars ± 1 std where a cell has two or more seeds (cf. the paper's Figure 2)"
                .into(),
        });
    }
    let stab = Stability::new(report);
    if stab.has_data() {
        render(&stab, "stability", (1500, 620), dir)?;
        out.push(Figure {
            name: "stability".into(),
            caption: "Per-step max logit and max |gradient| of every run (log scale), explosion thresholds dashed, \
                      explosions marked x (cf. the paper's Figure 1)"
                .into(),
        });
    }
    let blocks = Blocks::new(report);
    if blocks.stab.has_data() {
        render(&blocks.stab, "blocks", (1500, 620), dir)?;
        out.push(Figure {
            name: "blocks".into(),
            caption: "Per logged step, RMS of the last block's output (the residual stream) and the largest attention \
                      logit over the blocks, every run (log scale), explosions marked x"
                .into(),
        });
    }
    let curves = Curves::new(report);
    if curves.has_data() {
        render(&curves, "curves", (1500, 560), dir)?;
        out.push(Figure {
            name: "curves".into(),
            caption: "Training loss (mean over windows of steps; log axis when a run's loss grew over 20-fold) and validation accuracy per epoch of every run \
                      (a run with an EMA: the EMA's solid, the trained weights' dashed)"
                .into(),
        });
    }
    Ok(out)
}

pub(super) fn caption_style() -> FontDesc<'static> {
    ("sans-serif", 20).into_font()
}

/// An x axis of `n` categories at 0, 1, ..., n - 1 (ticks exactly there),
/// spanning [-0.5, n - 0.5] so bars can sit either side of a category.
struct Categories(usize);

impl Ranged for Categories {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let r = self.range();
        let t = (v - r.start) / (r.end - r.start);
        limit.0 + (t * (limit.1 - limit.0) as f64).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        (0..self.0).map(|i| i as f64).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

/// One cell's bars: (label, top-1 (mean, std), top-5 (mean, std)).
type Bar = (String, (f64, f64), Option<(f64, f64)>);

/// Grouped bars with error bars.
struct Accuracy {
    bars: Vec<Bar>,
}

impl Accuracy {
    fn new(r: &Report) -> Self {
        let bars = r
            .cells
            .iter()
            .filter_map(|c| {
                // std is NaN for a single seed: no error bar then, rather than one of zero length
                let t1 = c.top1?;
                Some((c.label.clone(), (t1.mean, t1.std), c.top5.map(|t| (t.mean, t.std))))
            })
            .collect();
        Accuracy { bars }
    }
}

impl Draw for Accuracy {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        let n = self.bars.len();
        let labels: Vec<String> = self.bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = ChartBuilder::on(area)
            .caption("Test accuracy (mean ± std over seeds)", caption_style())
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(Categories(n), 0f64..1.15)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_desc("accuracy")
            .y_label_formatter(&|y| if *y <= 1.0 + 1e-9 { format!("{y:.1}") } else { String::new() })
            .light_line_style(LIGHT)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        let series = [("top-1", color(0), -0.19), ("top-5", color(1), 0.19)];
        for (s, (name, c, offset)) in series.iter().enumerate() {
            let values: Vec<(f64, (f64, f64))> = self
                .bars
                .iter()
                .enumerate()
                .filter_map(|(i, b)| if s == 0 { Some((i as f64, b.1)) } else { b.2.map(|v| (i as f64, v)) })
                .collect();
            if values.is_empty() {
                continue;
            }
            let c = *c;
            chart
                .draw_series(
                    values
                        .iter()
                        .map(|&(x, (m, _))| Rectangle::new([(x + offset - 0.17, 0.0), (x + offset + 0.17, m)], c.filled())),
                )
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()));
            // Error bars: ± 1 std with caps (cells with two or more seeds).
            for &(x, (m, sd)) in &values {
                let xc = x + offset;
                let hi = if sd.is_finite() {
                    let (lo, hi) = ((m - sd).max(0.0), (m + sd).min(1.0));
                    chart
                        .draw_series([
                            PathElement::new(vec![(xc, lo), (xc, hi)], BLACK.stroke_width(2)),
                            PathElement::new(vec![(xc - 0.06, lo), (xc + 0.06, lo)], BLACK.stroke_width(2)),
                            PathElement::new(vec![(xc - 0.06, hi), (xc + 0.06, hi)], BLACK.stroke_width(2)),
                        ])
                        .map_err(err)?;
                    hi
                } else {
                    m
                };
                chart
                    .draw_series([Text::new(format!("{m:.3}"), (xc - 0.12, hi + 0.035), ("sans-serif", 12).into_font())])
                    .map_err(err)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    }
}
