//! `vitlab report` for CycleGAN runs: per cell (runs that share every config
//! value but the seed), FID_A and FID_B as mean ± std over seeds with Welch's
//! t-test against a baseline cell, generator and discriminator parameter
//! counts, the generators' loss per epoch of every run (a figure), and the last
//! sample grid of every run. Cells and the baseline come from [`super::cells`],
//! the document is [`Block`]s rendered like the classification report's
//! (`report.md`, `report.html`), the figure is drawn by [`super::plot`].

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::cells::{self, MeanStd, Member};
use super::plot;
use super::render::{baseline_sentence, intro, n_cell, p_cell, pm, render_html, render_markdown, Block};
use super::runs::{candidates, read_columns_requiring};
use crate::config::{flatten_config, ExperimentConfig, TaskKind};
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
    /// Its sample grids (`samples/step_*.png`), oldest first.
    pub samples: Vec<PathBuf>,
    /// The config keys its sweep's grid sets, in grid order (for ordering cell keys).
    pub grid_keys: Vec<String>,
    /// Its cell name in its sweep's manifest, if a sweep made it.
    pub sweep_cell: Option<String>,
}

impl Member for GanRun {
    fn flat(&self) -> &BTreeMap<String, String> {
        &self.flat
    }
    fn grid_keys(&self) -> &[String] {
        &self.grid_keys
    }
    fn sweep_cell(&self) -> Option<&str> {
        self.sweep_cell.as_deref()
    }
}

fn read_epochs(path: &Path) -> Result<Vec<(f64, f64, f64, f64)>> {
    Ok(read_columns_requiring(path, &["epoch", "train_loss", "FID_A", "FID_B"], 2)?
        .into_iter()
        .filter(|r| r[0].is_finite())
        .map(|r| (r[0], r[1], r[2], r[3]))
        .collect())
}

/// Every CycleGAN run under `roots`: runs of a sweep in the order of its
/// `sweep.json`, others by path.
pub fn load_runs(roots: &[PathBuf]) -> Result<Vec<GanRun>> {
    let mut out = Vec::new();
    for root in roots {
        for c in candidates(root)? {
            let run = RunDir::new(&c.dir);
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
            let mut samples: Vec<PathBuf> = fs::read_dir(c.dir.join("samples"))
                .map(|rd| {
                    rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "png")).collect()
                })
                .unwrap_or_default();
            samples.sort();
            out.push(GanRun {
                epochs: read_epochs(&run.metrics())?,
                seed: config.seed,
                flat: flatten_config(&config),
                dir: c.dir,
                name: c.name,
                results,
                samples,
                grid_keys: c.grid_keys,
                sweep_cell: c.sweep_cell,
            });
        }
    }
    Ok(out)
}

/// Copies a file (whole, through a temporary name).
fn copy(src: &Path, dst: &Path) -> Result<()> {
    let bytes = fs::read(src).map_err(|e| Error::io(src, e))?;
    atomic_write(dst, &bytes)
}

/// A run's sample grids over training as pytorch-CycleGAN's training page shows
/// them (`web/index.html`: newest first, one per saved step): the grids copied
/// into `dir` with `index.html` and `index.md`; returns the written files.
fn run_samples_page(run: &GanRun, dir: &Path) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let title = format!("{}: sample grids", run.name);
    let mut doc = vec![Block::Heading(1, title.clone()), Block::Para(format!("{SAMPLE_COLUMNS} Newest first."))];
    let mut written = Vec::new();
    for src in run.samples.iter().rev() {
        let file = src.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        copy(src, &dir.join(&file))?;
        written.push(dir.join(&file));
        let step = file.trim_start_matches("step_").trim_end_matches(".png").trim_start_matches('0');
        doc.push(Block::Heading(2, format!("step {}", if step.is_empty() { "0" } else { step })));
        doc.push(Block::Picture { src: file.clone(), alt: file });
    }
    for (name, text) in [("index.md", render_markdown(&doc)), ("index.html", render_html(&title, &doc))] {
        atomic_write(&dir.join(name), text.as_bytes())?;
        written.push(dir.join(name));
    }
    Ok(written)
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
    /// The label of the baseline cell the p-values compare with.
    pub baseline: Option<String>,
    /// Welch's two-sided p-value of FID_A / FID_B against the baseline cell.
    pub p_fid_a: Option<f64>,
    pub p_fid_b: Option<f64>,
    pub generator_params: Option<usize>,
    pub discriminator_params: Option<usize>,
    pub fid: Option<String>,
    /// Indices into the report's runs.
    #[serde(skip)]
    members: Vec<usize>,
    #[serde(skip)]
    fid_a_values: Vec<f64>,
    #[serde(skip)]
    fid_b_values: Vec<f64>,
}

impl GanCell {
    /// The numbers of `group`'s runs (no baseline yet).
    fn of(group: &cells::Group, runs: &[GanRun]) -> GanCell {
        let rs: Vec<&GanRun> = group.runs.iter().map(|&i| &runs[i]).collect();
        let results: Vec<&Results> = rs.iter().filter_map(|r| r.results.as_ref()).collect();
        let fid_a_values: Vec<f64> = results.iter().filter_map(|r| r.fid_a).collect();
        let fid_b_values: Vec<f64> = results.iter().filter_map(|r| r.fid_b).collect();
        let last = results.last();
        GanCell {
            label: group.label.clone(),
            values: group.values.clone(),
            runs: rs.iter().map(|r| r.name.clone()).collect(),
            seeds: rs.iter().map(|r| r.seed).collect(),
            unfinished: rs.len() - results.len(),
            fid_a: MeanStd::of(&fid_a_values),
            fid_b: MeanStd::of(&fid_b_values),
            baseline: None,
            p_fid_a: None,
            p_fid_b: None,
            generator_params: last.map(|r| r.generator_params),
            discriminator_params: last.map(|r| r.discriminator_params),
            fid: last.map(|r| format!("{} features, {} preprocessing", r.fid_feature, r.fid_preprocess)),
            members: group.runs.clone(),
            fid_a_values,
            fid_b_values,
        }
    }
}

/// A CycleGAN report (`report.md`, `report.html`, `report.json`, `figures/`, `samples/`).
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

/// A run's sample grids as copied into the report: (run, the last grid's source
/// file name, the copy's name, how many grids its page shows).
type Sample = (String, String, String, usize);

/// What the sample grids show, column by column.
const SAMPLE_COLUMNS: &str = "Columns: A, G_A(A), G_B(G_A(A)), B, G_B(B), G_A(G_B(B)).";

impl GanReport {
    /// Groups `runs` into cells and computes every number; `baseline` as for
    /// [`super::Report::build`] (the same checks, the same default).
    pub fn build(title: &str, runs: Vec<GanRun>, baseline: Option<Vec<(String, String)>>) -> Result<GanReport> {
        let grouping = cells::group(&runs);
        let baseline = cells::resolve_baseline(baseline, &grouping.keys, &grouping.cells)?;
        let targets = cells::baseline_cells(&grouping.cells, &baseline);
        let mut cells: Vec<GanCell> = grouping.cells.iter().map(|g| GanCell::of(g, &runs)).collect();
        for (i, target) in targets.into_iter().enumerate() {
            let Some(b) = target else { continue };
            cells[i].baseline = Some(cells[b].label.clone());
            if b != i {
                cells[i].p_fid_a = cells::welch(&cells[i].fid_a_values, &cells[b].fid_a_values).map(|t| t.p);
                cells[i].p_fid_b = cells::welch(&cells[i].fid_b_values, &cells[b].fid_b_values).map(|t| t.p);
            }
        }
        Ok(GanReport { title: title.to_string(), keys: grouping.keys, baseline, cells, notes: Vec::new(), runs })
    }

    /// Writes `report.md`, `report.html`, `report.json`, `figures/losses.{svg,png}`
    /// and the runs' last sample grids under `samples/`; returns the written files.
    pub fn write(&self, out: &Path) -> Result<Vec<PathBuf>> {
        let figures_dir = out.join("figures");
        for d in [out.to_path_buf(), figures_dir.clone(), out.join("samples")] {
            fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
        }
        let mut written = Vec::new();
        let mut samples = Vec::new();
        for r in &self.runs {
            let Some(src) = r.samples.last() else { continue };
            let name = r.name.replace(['/', '\\', '=', ','], "_");
            let dst = out.join("samples").join(format!("{name}.png"));
            copy(src, &dst)?;
            written.push(dst);
            written.extend(run_samples_page(r, &out.join("samples").join(&name))?);
            let file = src.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            samples.push((r.name.clone(), file, name, r.samples.len()));
        }
        let figure =
            plot::gan_losses(&self.loss_lines(), &self.cells.iter().map(|c| c.label.clone()).collect::<Vec<_>>(), &figures_dir)?;
        for ext in ["svg", "png"] {
            written.push(figures_dir.join(format!("{}.{ext}", figure.name)));
        }
        let doc = self.document(&figure, &samples);
        for (name, text) in [("report.md", render_markdown(&doc)), ("report.html", render_html(&self.title, &doc))] {
            let path = out.join(name);
            atomic_write(&path, text.as_bytes())?;
            written.push(path);
        }
        let json = serde_json::to_string_pretty(self).expect("report serialises");
        atomic_write(&out.join("report.json"), json.as_bytes())?;
        written.push(out.join("report.json"));
        Ok(written)
    }

    /// (cell, the generators' loss per epoch) of every run, cell by cell.
    fn loss_lines(&self) -> Vec<(usize, Vec<(f64, f64)>)> {
        self.cells
            .iter()
            .enumerate()
            .flat_map(|(ci, c)| c.members.iter().map(move |&i| (ci, i)))
            .map(|(ci, i)| (ci, self.runs[i].epochs.iter().map(|e| (e.0, e.1)).filter(|p| p.1.is_finite()).collect()))
            .collect()
    }

    /// The report's content: the intro, the FID table, the loss figure and the sample grids.
    fn document(&self, losses: &plot::Figure, samples: &[Sample]) -> Vec<Block> {
        let mut doc = vec![Block::Heading(1, self.title.clone())];
        let finished = self.runs.iter().filter(|r| r.results.is_some()).count();
        doc.push(Block::Para(intro(self.runs.len(), finished, self.cells.len(), &self.keys)));
        doc.extend(self.notes.iter().map(|n| Block::Para(n.clone())));
        doc.push(Block::Heading(2, "FID".into()));
        doc.push(Block::Para(format!(
            "FID_A: real test A vs G_B(test B); FID_B: real test B vs G_A(test A), after the last epoch; mean ± unbiased \
             std over seeds (n: runs with a finite FID_A); {}.",
            baseline_sentence("FID_A and FID_B", &self.baseline)
        )));
        doc.push(self.table());
        doc.push(Block::Image { path: losses.name.clone(), alt: losses.caption.clone() });
        doc.push(Block::Heading(2, "Last sample grids".into()));
        doc.push(Block::Para(SAMPLE_COLUMNS.into()));
        for (run, file, name, count) in samples {
            doc.push(Block::Para(format!(
                "{run} ({file}; all {count} grids over training, newest first: `samples/{name}/index.html`):"
            )));
            doc.push(Block::Picture { src: format!("samples/{name}.png"), alt: run.clone() });
        }
        doc
    }

    /// One row per cell: n, FID_A and FID_B with their p-values, seeds, parameters, FID settings.
    fn table(&self) -> Block {
        let header =
            ["cell", "n", "FID_A", "p (FID_A)", "FID_B", "p (FID_B)", "seeds", "generator params", "discriminator params", "FID"];
        let rows = self
            .cells
            .iter()
            .map(|c| {
                vec![
                    c.label.clone(),
                    n_cell(c.fid_a.map_or(0, |m| m.n), c.unfinished, 0),
                    pm(c.fid_a),
                    p_cell(c.p_fid_a, &c.label, c.baseline.as_deref()),
                    pm(c.fid_b),
                    p_cell(c.p_fid_b, &c.label, c.baseline.as_deref()),
                    c.seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
                    c.generator_params.map_or("-".into(), |n| n.to_string()),
                    c.discriminator_params.map_or("-".into(), |n| n.to_string()),
                    c.fid.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        Block::table(&header, rows)
    }

    /// The report as markdown, without figures or samples written (for tests).
    #[cfg(test)]
    fn markdown(&self) -> String {
        let figure = plot::Figure { name: "losses".into(), caption: String::new() };
        render_markdown(&self.document(&figure, &[]))
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
            samples: Vec::new(),
            grid_keys: Vec::new(),
            sweep_cell: None,
        }
    }

    /// Three seeds of each block, FID_A as given.
    fn two_cells(first: &str, second: &str) -> Vec<GanRun> {
        let (a, b) = ([10.0, 12.0, 11.0], [8.0, 9.5, 9.0]);
        let mut runs: Vec<GanRun> = (0..3).map(|s| run(first, s, (a[s as usize], 20.0 + s as f64))).collect();
        runs.extend((0..3).map(|s| run(second, s, (b[s as usize], 20.5 + s as f64))));
        runs
    }

    #[test]
    fn cells_pool_seeds_and_compare_with_the_baseline_by_welch() {
        let (a, b) = ([10.0, 12.0, 11.0], [8.0, 9.5, 9.0]);
        let r = GanReport::build("t", two_cells("vit", "vit22b"), None).unwrap();
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
        let md = r.markdown();
        // cell, n, FID_A mean ± std, its p-value, ..., seeds (the shared formatting: n in its own column)
        let row = format!("| block=vit22b | 3 | 8.8333 ± 0.7638 | {} |", crate::report::render::p_value(want));
        assert!(md.contains(&row) && md.contains("| 0, 1, 2 |"), "{row}\n{md}");
        assert!(md.contains("| block=vit | 3 | 11.0000 ± 1.0000 | baseline |"), "{md}");
        // A baseline key that does not vary is an error naming it.
        let runs: Vec<GanRun> = (0..2).map(|s| run("vit", s, (1.0, 1.0))).collect();
        let e = GanReport::build("t", runs, Some(vec![("optim.lr".into(), "1".into())])).unwrap_err().to_string();
        assert!(e.contains("optim.lr"), "{e}");
    }

    #[test]
    fn an_explicit_baseline_that_no_cell_has_is_an_error_naming_the_cells() {
        let base = Some(vec![("model.block".to_string(), "vit22b-ln".to_string())]);
        let e = GanReport::build("t", two_cells("vit", "vit22b"), base).unwrap_err().to_string();
        assert!(e.contains("--baseline") && e.contains("no cell has model.block=vit22b-ln"), "{e}");
        assert!(e.contains("block=vit; block=vit22b"), "{e}");
    }

    #[test]
    fn without_a_vit_cell_no_baseline_is_assumed() {
        let r = GanReport::build("t", two_cells("vit22b", "vit22b-ln"), None).unwrap();
        assert!(r.baseline.is_empty());
        assert!(r.cells.iter().all(|c| c.baseline.is_none() && c.p_fid_a.is_none() && c.p_fid_b.is_none()));
        let md = r.markdown();
        assert!(md.contains("no baseline cell chosen") && md.contains("| block=vit22b-ln | 3 | 8.8333 ± 0.7638 | n/a |"), "{md}");
    }

    #[test]
    fn a_cell_label_with_a_bar_is_escaped_in_the_markdown_table() {
        let r = GanReport::build("t", two_cells("vit", "vit|x"), None).unwrap();
        assert_eq!(r.cells[1].label, "block=vit|x");
        let md = r.markdown();
        assert!(md.contains("| block=vit\\|x | 3 |"), "{md}");
    }

    #[test]
    fn the_report_writes_markdown_html_json_and_the_loss_figure() {
        let dir = tempfile::tempdir().unwrap();
        let r = GanReport::build("gan <report>", two_cells("vit", "vit22b"), None).unwrap();
        let written = r.write(dir.path()).unwrap();
        for f in ["report.md", "report.html", "report.json", "figures/losses.svg", "figures/losses.png"] {
            assert!(written.contains(&dir.path().join(f)) && dir.path().join(f).exists(), "{f}: {written:?}");
        }
        let html = fs::read_to_string(dir.path().join("report.html")).unwrap();
        assert!(html.contains("<title>gan &lt;report&gt;</title>") && html.contains("<td>block=vit22b</td>"), "{html}");
        assert!(html.contains("figures/losses.png"), "{html}");
    }

    #[test]
    fn each_run_gets_a_page_of_its_sample_grids_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("run/samples");
        fs::create_dir_all(&src).unwrap();
        let mut runs = two_cells("vit", "vit22b");
        for (i, step) in [0u64, 120, 40].into_iter().enumerate() {
            let path = src.join(format!("step_{step:07}.png"));
            fs::write(&path, [i as u8; 4]).unwrap();
            runs[0].samples.push(path);
        }
        runs[0].samples.sort();
        let out = dir.path().join("report");
        let written = GanReport::build("gan", runs.clone(), None).unwrap().write(&out).unwrap();
        let name = runs[0].name.replace(['/', '\\', '=', ','], "_");
        let page = out.join("samples").join(&name);
        let html = fs::read_to_string(page.join("index.html")).unwrap();
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("{s} in {html}"));
        assert!(at("step 120") < at("step 40") && at("step 40") < at("step 0"), "newest first: {html}");
        assert!(html.contains("<img src=\"step_0000120.png\""), "{html}");
        for step in ["0000000", "0000040", "0000120"] {
            let copy = page.join(format!("step_{step}.png"));
            assert_eq!(fs::read(&copy).unwrap(), fs::read(src.join(format!("step_{step}.png"))).unwrap());
            assert!(written.contains(&copy));
        }
        // The report shows the newest grid and names the page.
        assert_eq!(fs::read(out.join("samples").join(format!("{name}.png"))).unwrap(), [1u8; 4]);
        let md = fs::read_to_string(out.join("report.md")).unwrap();
        assert!(md.contains(&format!("all 3 grids over training, newest first: `samples/{name}/index.html`")), "{md}");
        assert!(!out.join("samples").join(runs[1].name.replace(['/', '\\', '=', ','], "_")).exists(), "no page without grids");
    }
}
