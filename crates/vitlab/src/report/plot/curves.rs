//! The training curves: the classification report's training loss per step
//! (window means) and validation accuracy per epoch of every run (with an EMA,
//! the EMA's solid and the trained weights' dashed), and the CycleGAN report's
//! generators' loss per epoch of every run.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{caption_style, color, err, legend, loss_label, render, Draw, DrawResult, Figure, LIGHT};
use crate::report::{Report, RunRecord};
use crate::Result;

/// One run's training curves.
struct CurveSeries {
    cell: usize,
    label: String,
    first_of_cell: bool,
    /// (step, mean training loss over a window of steps), finite values only.
    loss: Vec<(f64, f64)>,
    /// (epoch, validation accuracy) of the weights the run validates with (the EMA's
    /// when it keeps one).
    val: Vec<(f64, f64)>,
    /// With an EMA, (epoch, the trained weights' validation accuracy); empty without.
    model_val: Vec<(f64, f64)>,
}

pub(super) struct Curves {
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
    pub(super) fn new(r: &Report) -> Self {
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
                let model_val: Vec<(f64, f64)> = run
                    .epochs
                    .iter()
                    .filter(|e| e.model_val_acc.is_finite())
                    .map(|e| (e.epoch as f64, e.model_val_acc))
                    .collect();
                if steps.is_empty() && val.is_empty() {
                    continue;
                }
                series.push(CurveSeries {
                    cell: ci,
                    label: c.label.clone(),
                    first_of_cell: first,
                    loss: window_means(&steps, window),
                    val,
                    model_val,
                });
                first = false;
            }
        }
        Curves { series, window }
    }

    pub(super) fn has_data(&self) -> bool {
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
            let ema = !s.model_val.is_empty();
            let drawn = chart.draw_series(LineSeries::new(s.val.iter().copied(), c.stroke_width(2))).map_err(err)?;
            if s.first_of_cell {
                labelled = true;
                let label = if ema { format!("{} (EMA)", s.label) } else { s.label.clone() };
                drawn.label(label).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            }
            if ema {
                let dashed = chart
                    .draw_series(DashedLineSeries::new(s.model_val.iter().copied(), 6, 4, c.stroke_width(2)))
                    .map_err(err)?;
                if s.first_of_cell {
                    dashed
                        .label(format!("{} (trained weights)", s.label))
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 7, y)], c.stroke_width(3)));
                }
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

/// The CycleGAN generators' total loss per epoch, one line per run, coloured by cell.
struct GanLosses<'a> {
    /// (cell, (epoch, loss) points) per run.
    lines: &'a [(usize, Vec<(f64, f64)>)],
    /// The cells' labels.
    labels: &'a [String],
}

impl Draw for GanLosses<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult {
        let (xmax, ymax) = self.lines.iter().flat_map(|(_, l)| l).fold((1.0f64, 0.0f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..xmax, 0.0..(ymax * 1.05).max(1e-9))
            .map_err(err)?;
        chart.configure_mesh().x_desc("epoch").y_desc("generators' loss").light_line_style(LIGHT).draw().map_err(err)?;
        let mut labelled = vec![false; self.labels.len()];
        for (cell, line) in self.lines {
            let c = color(*cell);
            let drawn = chart.draw_series(LineSeries::new(line.iter().copied(), c.stroke_width(2))).map_err(err)?;
            if !std::mem::replace(&mut labelled[*cell], true) {
                drawn
                    .label(self.labels[*cell].clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
            }
        }
        if labelled.contains(&true) {
            legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        }
        Ok(())
    }
}

/// Draws the CycleGAN report's `losses` figure into `dir`: `lines` holds
/// (cell index into `labels`, (epoch, generators' loss) points) per run.
pub(crate) fn gan_losses(lines: &[(usize, Vec<(f64, f64)>)], labels: &[String], dir: &Path) -> Result<Figure> {
    render(&GanLosses { lines, labels }, "losses", (720, 420), dir)?;
    Ok(Figure { name: "losses".into(), caption: "Generators' total loss per epoch of every run, one colour per cell".into() })
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
