//! The report's figures, drawn with plotters to SVG and PNG from one drawing
//! routine each. PNG text uses the DejaVu Sans subset bundled under
//! `assets/fonts/` (no system fonts needed); SVG text names `sans-serif`.

use std::path::Path;
use std::sync::Once;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Report, RunRecord};
use crate::util::fs::atomic_write;
use crate::util::png;
use crate::{Error, Result};

static FONT: &[u8] = include_bytes!("../../../../assets/fonts/DejaVuSans-subset.ttf");
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

/// The colour of cell `i`, as the classification figures use it.
pub(crate) fn cell_rgb(i: usize) -> (u8, u8, u8) {
    COLORS[i % COLORS.len()]
}

/// Registers the bundled font for PNG text (once).
pub(crate) fn register_font_once() {
    register_font();
}

fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

type DrawResult = std::result::Result<(), String>;

/// The minor grid lines.
const LIGHT: RGBColor = RGBColor(238, 238, 238);

/// Log-axis tick labels: 0.01, 0.1, 1, 10, 100, 1000, 1e4, 1e5, ...
fn log_label(v: f64) -> String {
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
fn loss_label(v: f64) -> String {
    if v >= 1e4 {
        log_label(v)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The series legend, in the same style on every figure.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
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
trait Draw {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult;
}

/// Draws `d` to `dir/NAME.svg` and `dir/NAME.png`.
fn render<D: Draw>(d: &D, name: &str, (w, h): (u32, u32), dir: &Path) -> Result<()> {
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
            caption: "Training loss (mean over windows of steps; log axis when a run's loss grew over 20-fold) and validation accuracy per epoch of every run"
                .into(),
        });
    }
    Ok(out)
}

fn caption_style() -> FontDesc<'static> {
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

/// A bar's label, top-1 (mean, std) and top-5 (mean, std).
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

/// Reduces a series to at most `max` points, keeping each bucket's largest value
/// (spikes survive).
fn downsample(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max {
        return points.to_vec();
    }
    let per = points.len().div_ceil(max);
    points.chunks(per).map(|c| *c.iter().max_by(|a, b| a.1.total_cmp(&b.1)).expect("non-empty chunk")).collect()
}

struct Series {
    cell: usize,
    label: String,
    first_of_cell: bool,
    logit: Vec<(f64, f64)>,
    grad: Vec<(f64, f64)>,
    /// The step at which the run exploded, if it did.
    explosion: Option<u64>,
}

struct Stability {
    series: Vec<Series>,
    logit_threshold: f64,
    grad_threshold: f64,
    /// Titles of the left (`logit`) and right (`grad`) panels.
    titles: [&'static str; 2],
}

/// The block monitors, drawn like [`Stability`]: the top block's output RMS on
/// the left, the largest attention logit on the right, no thresholds.
struct Blocks {
    stab: Stability,
}

/// One [`Series`] per run with data; `points` gives a run's (step, value) points
/// for the left and right panels (non-finite and non-positive values are dropped:
/// the axes are logarithmic).
fn series_per_run(r: &Report, points: impl Fn(&RunRecord) -> [Vec<(f64, f64)>; 2]) -> Vec<Series> {
    let mut series = Vec::new();
    for (ci, c) in r.cells.iter().enumerate() {
        let mut first = true;
        for &i in &c.runs {
            let run: &RunRecord = &r.runs[i];
            let [logit, grad] = points(run).map(|pts| {
                let kept: Vec<(f64, f64)> = pts.into_iter().filter(|p| p.1.is_finite() && p.1 > 0.0).collect();
                downsample(&kept, 1500)
            });
            if logit.is_empty() && grad.is_empty() {
                continue;
            }
            series.push(Series {
                cell: ci,
                label: c.label.clone(),
                first_of_cell: std::mem::replace(&mut first, false),
                logit,
                grad,
                explosion: run.results.as_ref().and_then(|x| x.explosion.as_ref()).map(|e| e.step),
            });
        }
    }
    series
}

impl Blocks {
    fn new(r: &Report) -> Self {
        let at = |run: &RunRecord, f: fn(&super::BlockStep) -> f64| run.blocks.iter().map(|b| (b.step as f64, f(b))).collect();
        Blocks {
            stab: Stability {
                series: series_per_run(r, |run| [at(run, |b| b.top_rms), at(run, |b| b.max_attn_logit)]),
                logit_threshold: 0.0,
                grad_threshold: 0.0,
                titles: ["last block's output RMS", "max attention logit (all blocks)"],
            },
        }
    }
}

impl Stability {
    fn new(r: &Report) -> Self {
        let at = |run: &RunRecord, f: fn(&super::StepRow) -> f64| run.steps.iter().map(|s| (s.step as f64, f(s))).collect();
        let series = series_per_run(r, |run| [at(run, |s| s.max_logit), at(run, |s| s.max_grad)]);
        let first = r.cells.first();
        Stability {
            series,
            logit_threshold: first.map_or(0.0, |c| c.logit_threshold),
            grad_threshold: first.map_or(0.0, |c| c.grad_threshold),
            titles: ["max logit per step", "max |gradient| per step"],
        }
    }

    fn has_data(&self) -> bool {
        self.series.iter().any(|s| !s.logit.is_empty() || !s.grad.is_empty())
    }

    fn panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        title: &str,
        pick: fn(&Series) -> &Vec<(f64, f64)>,
        threshold: f64,
        show_legend: bool,
    ) -> DrawResult {
        let all: Vec<(f64, f64)> = self.series.iter().flat_map(|s| pick(s).iter().copied()).collect();
        let max_x = all.iter().map(|p| p.0).fold(1.0, f64::max);
        let max_x = self.series.iter().filter_map(|s| s.explosion).map(|e| e as f64).fold(max_x, f64::max);
        let lo = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (1e-3, 1.0) };
        let hi = if threshold > 0.0 { hi.max(threshold) } else { hi };
        let (y0, y1) = ((lo / 2.0).max(1e-12), hi * 3.0);
        let mut chart = ChartBuilder::on(area)
            .caption(title, caption_style())
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..max_x * 1.02, (y0..y1).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| log_label(*y))
            .light_line_style(LIGHT)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        for s in &self.series {
            let c = color(s.cell);
            let drawn = chart.draw_series(LineSeries::new(pick(s).iter().copied(), c.stroke_width(1))).map_err(err)?;
            if show_legend && s.first_of_cell {
                drawn.label(s.label.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            }
            if let Some(step) = s.explosion {
                let y = pick(s).last().map_or(y1 / 3.0, |p| p.1).min(y1 / 1.5);
                chart.draw_series([Cross::new((step as f64, y), 7, c.stroke_width(3))]).map_err(err)?;
            }
        }
        if threshold > 0.0 {
            chart
                .draw_series(DashedLineSeries::new([(0.0, threshold), (max_x * 1.02, threshold)], 10, 6, BLACK.stroke_width(2)))
                .map_err(err)?
                .label(format!("explosion threshold {}", log_label(threshold)))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(2)));
        }
        if show_legend || threshold > 0.0 {
            legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        }
        Ok(())
    }
}

impl Draw for Stability {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        let panels = area.split_evenly((1, 2));
        self.panel(&panels[0], self.titles[0], |s| &s.logit, self.logit_threshold, true)?;
        self.panel(&panels[1], self.titles[1], |s| &s.grad, self.grad_threshold, false)?;
        Ok(())
    }
}

/// One run's training curves.
struct CurveSeries {
    cell: usize,
    label: String,
    first_of_cell: bool,
    /// (step, mean training loss over a window of steps), finite values only.
    loss: Vec<(f64, f64)>,
    /// (epoch, validation accuracy).
    val: Vec<(f64, f64)>,
}

struct Curves {
    series: Vec<CurveSeries>,
    /// Steps per point of the loss curves.
    window: usize,
}

/// Means of consecutive windows of `window` points (x: the window's last x);
/// a trailing partial window counts when it holds at least half a window.
fn window_means(pts: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let window = window.max(1);
    pts.chunks(window)
        .filter(|c| c.len() * 2 >= window || c.len() == pts.len())
        .map(|c| (c[c.len() - 1].0, c.iter().map(|p| p.1).sum::<f64>() / c.len() as f64))
        .collect()
}

impl Curves {
    fn new(r: &Report) -> Self {
        let longest = r.runs.iter().map(|run| run.steps.len()).max().unwrap_or(0);
        // about 200 points along the longest run, in whole steps
        let window = (longest / 200).max(1);
        let mut series = Vec::new();
        for (ci, c) in r.cells.iter().enumerate() {
            let mut first = true;
            for &i in &c.runs {
                let run: &RunRecord = &r.runs[i];
                let steps: Vec<(f64, f64)> =
                    run.steps.iter().map(|s| (s.step as f64, s.loss)).filter(|p| p.1.is_finite() && p.1 > 0.0).collect();
                let val: Vec<(f64, f64)> =
                    run.epochs.iter().filter(|e| e.val_acc.is_finite()).map(|e| (e.epoch as f64, e.val_acc)).collect();
                if steps.is_empty() && val.is_empty() {
                    continue;
                }
                series.push(CurveSeries {
                    cell: ci,
                    label: c.label.clone(),
                    first_of_cell: first,
                    loss: window_means(&steps, window),
                    val,
                });
                first = false;
            }
        }
        Curves { series, window }
    }

    fn has_data(&self) -> bool {
        !self.series.is_empty()
    }

    fn loss_panel<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        let all: Vec<(f64, f64)> = self.series.iter().flat_map(|s| s.loss.iter().copied()).collect();
        let max_x = all.iter().map(|p| p.0).fold(1.0, f64::max);
        let lo = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.1, 10.0) };
        let title = if self.window > 1 {
            format!("training loss (mean of {} steps)", self.window)
        } else {
            "training loss per step".to_string()
        };
        // the same chart on a linear axis, or a log axis when a run's loss grew by orders of
        // magnitude (an explosion) and a linear one would flatten every other curve
        macro_rules! chart {
            ($y:expr, $y_desc:expr) => {{
                let mut chart = ChartBuilder::on(area)
                    .caption(title, caption_style())
                    .margin(12)
                    .x_label_area_size(40)
                    .y_label_area_size(60)
                    .build_cartesian_2d(0f64..max_x * 1.02, $y)
                    .map_err(err)?;
                chart
                    .configure_mesh()
                    .x_desc("step")
                    .y_desc($y_desc)
                    .x_label_formatter(&|x| format!("{x:.0}"))
                    .y_label_formatter(&|y| loss_label(*y))
                    .light_line_style(LIGHT)
                    .label_style(("sans-serif", 14))
                    .draw()
                    .map_err(err)?;
                for s in &self.series {
                    let c = color(s.cell);
                    let drawn = chart.draw_series(LineSeries::new(s.loss.iter().copied(), c.stroke_width(2))).map_err(err)?;
                    if s.first_of_cell {
                        drawn
                            .label(s.label.clone())
                            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
                    }
                }
                legend(&mut chart, SeriesLabelPosition::UpperRight)
            }};
        }
        if hi > 20.0 * lo {
            chart!(((lo / 1.3).max(1e-6)..hi * 1.3).log_scale(), "loss (log scale)")
        } else {
            let pad = (hi - lo).max(1e-3) * 0.05;
            chart!((lo - pad).max(0.0)..hi + pad, "loss")
        }
    }

    fn val_panel<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        let max_epoch = self.series.iter().flat_map(|s| s.val.iter().map(|p| p.0)).fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption("validation accuracy per epoch", caption_style())
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.5f64..max_epoch + 0.5, 0f64..1.0)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("epoch")
            .y_desc("validation accuracy")
            .x_label_formatter(&|x| if (x - x.round()).abs() < 1e-9 { format!("{x:.0}") } else { String::new() })
            .light_line_style(LIGHT)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        let mut labelled = false;
        for s in &self.series {
            if s.val.is_empty() {
                continue;
            }
            let c = color(s.cell);
            let drawn = chart.draw_series(LineSeries::new(s.val.iter().copied(), c.stroke_width(2))).map_err(err)?;
            if s.first_of_cell {
                labelled = true;
                drawn.label(s.label.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            }
            if s.val.len() <= 30 {
                chart.draw_series(s.val.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(err)?;
            }
        }
        if labelled {
            legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        }
        Ok(())
    }
}

impl Draw for Curves {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        if self.series.iter().all(|s| s.val.is_empty()) {
            // no run finished an epoch (e.g. short stability runs): the loss alone
            return self.loss_panel(area);
        }
        let panels = area.split_evenly((1, 2));
        self.loss_panel(&panels[0])?;
        self.val_panel(&panels[1])
    }
}

#[cfg(test)]
mod tests {
    use super::window_means;

    #[test]
    fn loss_curves_average_whole_windows_and_keep_a_long_enough_tail() {
        let pts: Vec<(f64, f64)> = (1..=10).map(|i| (i as f64, i as f64)).collect();
        // windows 1-4, 5-8 and the tail 9-10 (half a window)
        assert_eq!(window_means(&pts, 4), vec![(4.0, 2.5), (8.0, 6.5), (10.0, 9.5)]);
        // a tail shorter than half a window is dropped
        assert_eq!(window_means(&pts[..9], 4), vec![(4.0, 2.5), (8.0, 6.5)]);
        // a run shorter than one window still gets its one point
        assert_eq!(window_means(&pts[..1], 4), vec![(1.0, 1.0)]);
        assert_eq!(window_means(&pts[..3], 1).len(), 3);
    }
}
