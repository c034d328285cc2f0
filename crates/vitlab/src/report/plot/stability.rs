//! The per-step monitor figures: the stability panels (max logit and max
//! |gradient| of every run per step, log scale, thresholds dashed, explosions
//! marked) and the same panels for the block monitors of blocks.csv.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{caption_style, color, err, legend, log_label, Draw, DrawResult, LIGHT};
use crate::report::{BlockStep, Report, RunRecord, StepRow};

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

pub(super) struct Stability {
    series: Vec<Series>,
    logit_threshold: f64,
    grad_threshold: f64,
    /// Titles of the left (`logit`) and right (`grad`) panels.
    titles: [&'static str; 2],
}

/// The block monitors, drawn like [`Stability`]: the top block's output RMS on
/// the left, the largest attention logit on the right, no thresholds.
pub(super) struct Blocks {
    pub(super) stab: Stability,
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
    pub(super) fn new(r: &Report) -> Self {
        let at = |run: &RunRecord, f: fn(&BlockStep) -> f64| run.blocks.iter().map(|b| (b.step as f64, f(b))).collect();
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
    pub(super) fn new(r: &Report) -> Self {
        let at = |run: &RunRecord, f: fn(&StepRow) -> f64| run.steps.iter().map(|s| (s.step as f64, f(s))).collect();
        let series = series_per_run(r, |run| [at(run, |s| s.max_logit), at(run, |s| s.max_grad)]);
        let first = r.cells.first();
        Stability {
            series,
            logit_threshold: first.map_or(0.0, |c| c.logit_threshold),
            grad_threshold: first.map_or(0.0, |c| c.grad_threshold),
            titles: ["max logit per step", "max |gradient| per step"],
        }
    }

    pub(super) fn has_data(&self) -> bool {
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
