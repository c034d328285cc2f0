//! `vitlab report` for CycleGAN runs: per cell (runs that share every config
//! value but the seed), FID_A and FID_B as mean ± std over seeds with Welch's
//! t-test against a baseline cell, generator and discriminator parameter
//! counts, the generators' loss per epoch of every run (a figure), and the last
//! sample grid of every run.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Serialize;

use super::cells::{same_value, short_names, MeanStd};
use super::runs::{collect_dirs, is_run};
use crate::config::{flatten_config, ExperimentConfig, TaskKind};
use crate::stats::welch_t_test;
use crate::train::cyclegan::Results;
use crate::train::RunDir;
use crate::util::fs::atomic_write;
use crate::{Error, Result};

/// One CycleGAN run directory.
#[derive(Clone, Debug)]
pub struct GanRun {
    pub dir: PathBuf,
    pub name: String,
    pub seed: u64,
    pub flat: BTreeMap<String, String>,
    pub results: Option<Results>,
    /// `(epoch, generators' loss, FID_A, FID_B)` from metrics.csv (NaN where empty).
    pub epochs: Vec<(f64, f64, f64, f64)>,
    /// The newest sample grid.
    pub last_samples: Option<PathBuf>,
}

/// Whether `dir` is a CycleGAN run directory.
pub fn is_cyclegan_run(dir: &Path) -> bool {
    let run = RunDir::new(dir);
    is_run(&run) && ExperimentConfig::load(Some(&run.config()), &[]).is_ok_and(|c| c.task == TaskKind::Cyclegan)
}

fn read_epochs(path: &Path) -> Result<Vec<(f64, f64, f64, f64)>> {
    let Ok(text) = fs::read_to_string(path) else { return Ok(Vec::new()) };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (e, l, a, b) = (col("epoch"), col("train_loss"), col("FID_A"), col("FID_B"));
    let (Some(e), Some(l)) = (e, l) else {
        return Err(Error::data(path, "metrics.csv without epoch and train_loss columns"));
    };
    let get = |f: &[&str], i: Option<usize>| i.and_then(|i| f.get(i)).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    Ok(lines
        .filter(|l| !l.is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            (get(&f, Some(e)), get(&f, Some(l)), get(&f, a), get(&f, b))
        })
        .collect())
}

/// Every CycleGAN run under `roots`, by path.
pub fn load_runs(roots: &[PathBuf]) -> Result<Vec<GanRun>> {
    let mut out = Vec::new();
    for root in roots {
        let mut dirs = Vec::new();
        collect_dirs(root, &mut dirs)?;
        dirs.sort();
        for d in dirs {
            let run = RunDir::new(&d);
            if !is_run(&run) {
                continue;
            }
            let config = ExperimentConfig::load(Some(&run.config()), &[])?;
            if config.task != TaskKind::Cyclegan {
                continue;
            }
            let results = match fs::read_to_string(run.results()) {
                Ok(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| Error::data(run.results(), format!("unreadable CycleGAN results: {e}")))?,
                ),
                Err(_) => None,
            };
            let last_samples = fs::read_dir(d.join("samples")).ok().and_then(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "png")).max()
            });
            let name = d
                .strip_prefix(root)
                .ok()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| root.display().to_string(), |p| format!("{}/{}", root.display(), p.display()));
            out.push(GanRun {
                epochs: read_epochs(&run.metrics())?,
                seed: config.seed,
                flat: flatten_config(&config),
                dir: d,
                name,
                results,
                last_samples,
            });
        }
    }
    Ok(out)
}

/// The runs of one configuration over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct GanCell {
    pub label: String,
    pub values: BTreeMap<String, String>,
    pub runs: Vec<String>,
    pub seeds: Vec<u64>,
    /// Runs without results (still training or stopped).
    pub unfinished: usize,
    pub fid_a: Option<MeanStd>,
    pub fid_b: Option<MeanStd>,
    /// Welch's two-sided p-value of FID_A / FID_B against the baseline cell.
    pub p_fid_a: Option<f64>,
    pub p_fid_b: Option<f64>,
    pub generator_params: Option<usize>,
    pub discriminator_params: Option<usize>,
    pub fid: Option<String>,
    #[serde(skip)]
    fid_a_values: Vec<f64>,
    #[serde(skip)]
    fid_b_values: Vec<f64>,
}

/// A CycleGAN report (`report.md`, `report.json`, `figures/`, `samples/`).
#[derive(Clone, Debug, Serialize)]
pub struct GanReport {
    pub title: String,
    pub keys: Vec<String>,
    pub baseline: Vec<(String, String)>,
    pub cells: Vec<GanCell>,
    pub notes: Vec<String>,
    #[serde(skip)]
    runs: Vec<GanRun>,
}

impl GanReport {
    pub fn build(title: &str, runs: Vec<GanRun>, baseline: Option<Vec<(String, String)>>) -> Result<GanReport> {
        // The keys that differ between runs, the seed aside.
        let all: Vec<String> =
            runs.iter().flat_map(|r| r.flat.keys().cloned()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        let keys: Vec<String> = all
            .into_iter()
            .filter(|k| k != "seed")
            .filter(|k| runs.iter().any(|r| r.flat.get(k) != runs[0].flat.get(k)))
            .collect();
        let short = short_names(&keys);
        let mut cells: Vec<GanCell> = Vec::new();
        for r in &runs {
            let values: BTreeMap<String, String> =
                keys.iter().map(|k| (k.clone(), r.flat.get(k).cloned().unwrap_or_default())).collect();
            let i = match cells.iter().position(|c| c.values == values) {
                Some(i) => i,
                None => {
                    let label = if keys.is_empty() {
                        "all runs".to_string()
                    } else {
                        short.iter().zip(&keys).map(|(s, k)| format!("{s}={}", values[k])).collect::<Vec<_>>().join(", ")
                    };
                    cells.push(GanCell {
                        label,
                        values,
                        runs: Vec::new(),
                        seeds: Vec::new(),
                        unfinished: 0,
                        fid_a: None,
                        fid_b: None,
                        p_fid_a: None,
                        p_fid_b: None,
                        generator_params: None,
                        discriminator_params: None,
                        fid: None,
                        fid_a_values: Vec::new(),
                        fid_b_values: Vec::new(),
                    });
                    cells.len() - 1
                }
            };
            let c = &mut cells[i];
            c.runs.push(r.name.clone());
            c.seeds.push(r.seed);
            match &r.results {
                Some(res) => {
                    c.fid_a_values.extend(res.fid_a);
                    c.fid_b_values.extend(res.fid_b);
                    c.generator_params = Some(res.generator_params);
                    c.discriminator_params = Some(res.discriminator_params);
                    c.fid = Some(format!("{} features, {} preprocessing", res.fid_feature, res.fid_preprocess));
                }
                None => c.unfinished += 1,
            }
        }
        let baseline = baseline.unwrap_or_else(|| {
            if keys.iter().any(|k| k == "model.block") {
                vec![("model.block".to_string(), "vit".to_string())]
            } else {
                Vec::new()
            }
        });
        for (k, _) in &baseline {
            if !keys.contains(k) {
                return Err(Error::config(
                    "--baseline",
                    format!("{k} does not differ between the runs (it varies: {})", keys.join(", ")),
                ));
            }
        }
        let snapshot = cells.clone();
        for c in &mut cells {
            c.fid_a = MeanStd::of(&c.fid_a_values);
            c.fid_b = MeanStd::of(&c.fid_b_values);
            if baseline.is_empty() {
                continue;
            }
            // The baseline for this cell: the baseline's values, this cell's others.
            let want: BTreeMap<String, String> = c
                .values
                .iter()
                .map(|(k, v)| (k.clone(), baseline.iter().find(|(b, _)| b == k).map_or(v.clone(), |(_, bv)| bv.clone())))
                .collect();
            if want == c.values {
                continue;
            }
            if let Some(b) = snapshot.iter().find(|o| o.values.iter().all(|(k, v)| same_value(v, &want[k]))) {
                c.p_fid_a = welch_t_test(&c.fid_a_values, &b.fid_a_values).map(|t| t.p);
                c.p_fid_b = welch_t_test(&c.fid_b_values, &b.fid_b_values).map(|t| t.p);
            }
        }
        Ok(GanReport { title: title.to_string(), keys, baseline, cells, notes: Vec::new(), runs })
    }

    /// Writes `report.md`, `report.json`, `figures/losses.{svg,png}` and the
    /// runs' last sample grids under `samples/`; returns the written files.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>> {
        for d in [out.to_path_buf(), out.join("figures"), out.join("samples")] {
            fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
        }
        let mut written = Vec::new();
        let mut samples = Vec::new();
        for r in &self.runs {
            if let Some(src) = &r.last_samples {
                let name = format!("{}.png", r.name.replace(['/', '\\', '=', ','], "_"));
                let dst = out.join("samples").join(&name);
                let bytes = fs::read(src).map_err(|e| Error::io(src, e))?;
                atomic_write(&dst, &bytes)?;
                samples.push((
                    r.name.clone(),
                    src.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
                    name,
                ));
                written.push(dst);
            }
        }
        for ext in ["svg", "png"] {
            let path = out.join("figures").join(format!("losses.{ext}"));
            self.draw_losses(&path)?;
            written.push(path);
        }
        let md = self.markdown(&samples);
        atomic_write(&out.join("report.md"), md.as_bytes())?;
        written.push(out.join("report.md"));
        let json = serde_json::to_string_pretty(self).expect("report serialises");
        atomic_write(&out.join("report.json"), json.as_bytes())?;
        written.push(out.join("report.json"));
        Ok(written)
    }

    fn markdown(&self, samples: &[(String, String, String)]) -> String {
        let pm = |m: Option<MeanStd>| m.map_or("-".to_string(), |m| format!("{:.4} ± {:.4} (n={})", m.mean, m.std, m.n));
        let p = |v: Option<f64>| v.map_or("-".to_string(), |p| if p < 1e-3 { format!("{p:.1e}") } else { format!("{p:.3}") });
        let mut s = format!("# {}\n\n", self.title);
        for n in &self.notes {
            s.push_str(&format!("{n}\n\n"));
        }
        if !self.baseline.is_empty() {
            let b: Vec<String> = self.baseline.iter().map(|(k, v)| format!("{k}={v}")).collect();
            s.push_str(&format!(
                "p: Welch's two-sided t-test against the cell with {} (its other values equal).\n\n",
                b.join(", ")
            ));
        }
        s.push_str("| cell | seeds | FID_A | p | FID_B | p | generator params | discriminator params | FID |\n|---|---|---|---|---|---|---|---|---|\n");
        for c in &self.cells {
            let seeds: Vec<String> = c.seeds.iter().map(u64::to_string).collect();
            let unfinished = if c.unfinished > 0 { format!(" ({} unfinished)", c.unfinished) } else { String::new() };
            s.push_str(&format!(
                "| {} | {}{unfinished} | {} | {} | {} | {} | {} | {} | {} |\n",
                c.label,
                seeds.join(", "),
                pm(c.fid_a),
                p(c.p_fid_a),
                pm(c.fid_b),
                p(c.p_fid_b),
                c.generator_params.map_or("-".into(), |n| n.to_string()),
                c.discriminator_params.map_or("-".into(), |n| n.to_string()),
                c.fid.clone().unwrap_or_else(|| "-".into()),
            ));
        }
        s.push_str("\nFID_A: real test A vs G_B(test B); FID_B: real test B vs G_A(test A), after the last epoch.\n\n");
        s.push_str("![generators' loss per epoch](figures/losses.png)\n\n## Last sample grids\n\nColumns: A, G_A(A), G_B(G_A(A)), B, G_B(B), G_A(G_B(B)).\n\n");
        for (run, file, name) in samples {
            s.push_str(&format!("{run} ({file}):\n\n![{run}](samples/{name})\n\n"));
        }
        s
    }

    /// The generators' total loss per epoch, one line per run, coloured by cell.
    fn draw_losses(&self, path: &Path) -> Result<()> {
        let series: Vec<(usize, &GanRun)> = self
            .runs
            .iter()
            .map(|r| {
                let values: BTreeMap<String, String> =
                    self.keys.iter().map(|k| (k.clone(), r.flat.get(k).cloned().unwrap_or_default())).collect();
                (self.cells.iter().position(|c| c.values == values).unwrap_or(0), r)
            })
            .collect();
        let pts: Vec<(f64, f64)> =
            series.iter().flat_map(|(_, r)| r.epochs.iter().map(|e| (e.0, e.1))).filter(|p| p.1.is_finite()).collect();
        let (xmax, ymax) = pts.iter().fold((1.0f64, 0.0f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
        let labels: Vec<String> = self.cells.iter().map(|c| c.label.clone()).collect();
        let lines: Vec<(usize, Vec<(f64, f64)>)> = series
            .iter()
            .map(|(cell, r)| (*cell, r.epochs.iter().map(|e| (e.0, e.1)).filter(|p| p.1.is_finite()).collect()))
            .collect();
        fn chart<DB: DrawingBackend>(
            root: DrawingArea<DB, plotters::coord::Shift>,
            lines: &[(usize, Vec<(f64, f64)>)],
            labels: &[String],
            (xmax, ymax): (f64, f64),
        ) -> std::result::Result<(), String> {
            root.fill(&WHITE).map_err(|e| e.to_string())?;
            let mut chart = ChartBuilder::on(&root)
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(50)
                .build_cartesian_2d(0.0..xmax, 0.0..(ymax * 1.05).max(1e-9))
                .map_err(|e| e.to_string())?;
            chart.configure_mesh().x_desc("epoch").y_desc("generators' loss").draw().map_err(|e| e.to_string())?;
            let mut labelled = vec![false; labels.len()];
            for (cell, line) in lines {
                let (cr, cg, cb) = super::plot::cell_rgb(*cell);
                let style = RGBColor(cr, cg, cb);
                let drawn = chart.draw_series(LineSeries::new(line.clone(), style.stroke_width(2))).map_err(|e| e.to_string())?;
                if !labelled[*cell] {
                    labelled[*cell] = true;
                    drawn
                        .label(labels[*cell].clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style.stroke_width(2)));
                }
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
            root.present().map_err(|e| e.to_string())
        }
        let bad = |m: String| Error::data(path, format!("figure: {m}"));
        super::plot::register_font_once();
        if path.extension().is_some_and(|e| e == "svg") {
            let mut svg = String::new();
            chart(SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area(), &lines, &labels, (xmax, ymax))
                .map_err(bad)?;
            atomic_write(path, svg.as_bytes())
        } else {
            let mut buf = vec![0u8; 720 * 420 * 3];
            chart(BitMapBackend::with_buffer(&mut buf, (720, 420)).into_drawing_area(), &lines, &labels, (xmax, ymax))
                .map_err(bad)?;
            let png = crate::util::png::encode_interleaved(&buf, 3, 420, 720)
                .map_err(|e| Error::data(path, format!("cannot encode PNG: {e}")))?;
            atomic_write(path, &png)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{DiscriminatorConfig, DiscriminatorKind, VitUnetConfig};
    use crate::train::ExitCause;

    fn run(block: &str, seed: u64, fid: (f64, f64)) -> GanRun {
        let flat = BTreeMap::from([
            ("model.block".to_string(), block.to_string()),
            ("seed".to_string(), seed.to_string()),
            ("epochs".to_string(), "4".to_string()),
        ]);
        let results = Results {
            summary: crate::train::Summary {
                task: crate::config::TaskKind::Cyclegan,
                exit_cause: ExitCause::Completed,
                explosion: None,
                score: Some(fid.0 + fid.1),
                score_name: Some("FID_A + FID_B".into()),
                higher_is_better: Some(false),
                best_epoch: Some(4),
                epochs: 4,
                steps: 100,
                params: 2 * (if block == "vit" { 1000 } else { 990 } + 50),
                wall_time_s: 1.0,
                backend: "flex".into(),
            },
            fid_a: Some(fid.0),
            fid_b: Some(fid.1),
            fid_note: None,
            best_fid_sum: Some(fid.0 + fid.1),
            fid_feature: 64,
            fid_preprocess: "torchmetrics".into(),
            generator_params: if block == "vit" { 1000 } else { 990 },
            discriminator_params: 50,
            generator: VitUnetConfig::vitunet(),
            discriminator: DiscriminatorConfig::new(DiscriminatorKind::Patchgan),
            data: String::new(),
        };
        GanRun {
            dir: PathBuf::from(format!("runs/{block}-{seed}")),
            name: format!("runs/{block}-{seed}"),
            seed,
            flat,
            results: Some(results),
            epochs: vec![(1.0, 3.0, fid.0, fid.1)],
            last_samples: None,
        }
    }

    #[test]
    fn cells_pool_seeds_and_compare_with_the_baseline_by_welch() {
        let (a, b) = ([10.0, 12.0, 11.0], [8.0, 9.5, 9.0]);
        let mut runs: Vec<GanRun> = (0..3).map(|s| run("vit", s, (a[s as usize], 20.0 + s as f64))).collect();
        runs.extend((0..3).map(|s| run("vit22b", s, (b[s as usize], 20.5 + s as f64))));
        let r = GanReport::build("t", runs, None).unwrap();
        assert_eq!(r.keys, vec!["model.block"]);
        assert_eq!(r.cells.len(), 2);
        let (base, other) = (&r.cells[0], &r.cells[1]);
        assert_eq!((base.label.as_str(), other.label.as_str()), ("block=vit", "block=vit22b"));
        assert_eq!(base.seeds, vec![0, 1, 2]);
        let m = other.fid_a.unwrap();
        assert!((m.mean - 26.5 / 3.0).abs() < 1e-12 && m.n == 3);
        assert!(base.p_fid_a.is_none(), "the baseline is not compared with itself");
        let want = crate::stats::welch_t_test(&b, &a).unwrap().p;
        assert!((other.p_fid_a.unwrap() - want).abs() < 1e-12);
        assert_eq!(other.generator_params, Some(990));
        let md = r.markdown(&[]);
        assert!(md.contains("| block=vit22b | 0, 1, 2 | 8.8333 ± 0.7638 (n=3) |"), "{md}");
        // A baseline key that does not vary is an error naming it.
        let runs: Vec<GanRun> = (0..2).map(|s| run("vit", s, (1.0, 1.0))).collect();
        let e = GanReport::build("t", runs, Some(vec![("optim.lr".into(), "1".into())])).unwrap_err().to_string();
        assert!(e.contains("optim.lr"), "{e}");
    }
}
