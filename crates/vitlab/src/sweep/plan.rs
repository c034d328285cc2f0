//! Planning a sweep: the cartesian product of the grid's levels x the seeds,
//! each run's directory name and resolved config (so a bad key or value fails
//! before anything runs).

use std::fs;
use std::path::{Path, PathBuf};

use super::manifest::{Axis, Manifest, PlannedRun};
use crate::config::ExperimentConfig;
use crate::{Error, Result};

/// What to sweep.
#[derive(Clone, Debug, Default)]
pub struct SweepSpec {
    /// The base experiment config (TOML), if any.
    pub config: Option<PathBuf>,
    /// `key=value` overrides applied to every run (before the grid's).
    pub overrides: Vec<String>,
    pub grid: Vec<Axis>,
    pub seeds: Vec<u64>,
}

/// A planned sweep: where it lives, the manifest, and every run's resolved config.
#[derive(Clone, Debug)]
pub struct Plan {
    pub root: PathBuf,
    pub manifest: Manifest,
    /// Resolved configs, in the order of `manifest.runs`.
    pub configs: Vec<ExperimentConfig>,
}

/// A value as a path component: characters outside `[A-Za-z0-9._+=-]` become `_`.
fn path_safe(s: &str) -> String {
    let cleaned: String =
        s.trim_matches('"').chars().map(|c| if c.is_ascii_alphanumeric() || "._+-=".contains(c) { c } else { '_' }).collect();
    if cleaned.is_empty() || cleaned.starts_with('.') {
        format!("_{cleaned}")
    } else {
        cleaned
    }
}

/// Builds the plan: every cell (the cartesian product of the grid, first axis
/// slowest) x seed, with its config resolved (so a bad key or value fails here,
/// before anything runs). Runs are ordered seed-major, so every cell gets its
/// first seed before any gets a second.
pub fn plan(spec: &SweepSpec, root: &Path) -> Result<Plan> {
    if spec.seeds.is_empty() {
        return Err(Error::usage("--seeds", "a sweep needs at least one seed"));
    }
    for (i, a) in spec.grid.iter().enumerate() {
        if spec.grid[..i].iter().any(|b| b.name == a.name) {
            return Err(Error::config(&a.name, "appears in two --grid axes"));
        }
        if a.levels.is_empty() {
            return Err(Error::config(&a.name, "a grid axis needs at least one value"));
        }
        if a.name == "seed" || a.levels.iter().flat_map(|l| &l.overrides).any(|o| o.split('=').next() == Some("seed")) {
            return Err(Error::config("seed", "use --seeds for seeds, not a grid axis"));
        }
    }
    let names = crate::config::short_names(&spec.grid.iter().map(|a| a.name.clone()).collect::<Vec<_>>());
    // Cartesian product, first axis slowest.
    let mut cells: Vec<Vec<usize>> = vec![vec![]];
    for axis in &spec.grid {
        cells = cells
            .into_iter()
            .flat_map(|c| {
                (0..axis.levels.len()).map(move |v| {
                    let mut c = c.clone();
                    c.push(v);
                    c
                })
            })
            .collect();
    }
    let mut runs = Vec::new();
    let mut configs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for &seed in &spec.seeds {
        for cell in &cells {
            let cell_overrides: Vec<String> =
                cell.iter().zip(&spec.grid).flat_map(|(&v, a)| a.levels[v].overrides.iter().cloned()).collect();
            let label: Vec<String> =
                cell.iter().zip(&spec.grid).zip(&names).map(|((&v, a), n)| format!("{n}={}", a.levels[v].label)).collect();
            let cell_name = if label.is_empty() { "base".to_string() } else { label.join(",") };
            let cell_dir = if label.is_empty() {
                "base".to_string()
            } else {
                cell.iter()
                    .zip(&spec.grid)
                    .zip(&names)
                    .map(|((&v, a), n)| path_safe(&format!("{n}={}", a.levels[v].label)))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let dir = format!("{cell_dir}/seed={seed}");
            if !seen.insert(dir.clone()) {
                return Err(Error::config(
                    "--grid",
                    format!("two cells map to the run directory {dir}; make the values distinct"),
                ));
            }
            let overrides = run_overrides(&spec.overrides, &cell_overrides, seed);
            let config = ExperimentConfig::load(spec.config.as_deref(), &overrides)?;
            // Model constraints (patch size, heads) fail here rather than mid-sweep.
            config.model.resolve(config.model.num_classes.unwrap_or(2), 3)?;
            runs.push(PlannedRun { dir, cell: cell_name, cell_overrides, seed });
            configs.push(config);
        }
    }
    let config_text = match &spec.config {
        Some(p) => Some(fs::read_to_string(p).map_err(|e| Error::io(p, e))?),
        None => None,
    };
    Ok(Plan {
        root: root.to_path_buf(),
        manifest: Manifest {
            version: 1,
            config: spec.config.as_ref().map(|p| p.display().to_string()),
            config_text,
            overrides: spec.overrides.clone(),
            grid: spec.grid.clone(),
            seeds: spec.seeds.clone(),
            command: Vec::new(),
            runs,
        },
        configs,
    })
}

/// The overrides of one run: the sweep's, the cell's, then the seed.
pub(super) fn run_overrides(base: &[String], cell: &[String], seed: u64) -> Vec<String> {
    let mut o: Vec<String> = base.to_vec();
    o.extend(cell.iter().cloned());
    o.push(format!("seed={seed}"));
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_parse_with_toml_arrays_and_strings() {
        let a = Axis::parse("model.block=vit,vit22b, vit22b-ln").unwrap();
        let labels = |a: &Axis| a.levels.iter().map(|l| l.label.clone()).collect::<Vec<_>>();
        assert_eq!(a.name, "model.block");
        assert_eq!(labels(&a), ["vit", "vit22b", "vit22b-ln"]);
        assert_eq!(a.levels[2].overrides, ["model.block=vit22b-ln"]);
        let b = Axis::parse("optim.betas=[0.9,0.95],[0.9, 0.999]").unwrap();
        assert_eq!(labels(&b), ["[0.9,0.95]", "[0.9, 0.999]"]);
        let c = Axis::parse(r#"data.path="a,b",synthetic"#).unwrap();
        assert_eq!(labels(&c), [r#""a,b""#, "synthetic"]);
        assert!(Axis::parse("model.block").is_err());
        assert!(Axis::parse("model.block=").is_err());
        assert!(Axis::parse("model.block=vit,,vit22b").is_err());
    }

    #[test]
    fn plan_names_cells_and_orders_runs_seed_major() {
        let spec = SweepSpec {
            config: None,
            overrides: vec!["data.path=synthetic".into()],
            grid: vec![Axis::parse("model.block=vit,vit22b").unwrap(), Axis::parse("optim.lr=1e-3,3e-4").unwrap()],
            seeds: vec![0, 1],
        };
        let p = plan(&spec, Path::new("/tmp/x")).unwrap();
        let dirs: Vec<&str> = p.manifest.runs.iter().map(|r| r.dir.as_str()).collect();
        assert_eq!(dirs.len(), 8);
        assert_eq!(dirs[0], "block=vit,lr=1e-3/seed=0");
        assert_eq!(dirs[3], "block=vit22b,lr=3e-4/seed=0");
        assert_eq!(dirs[4], "block=vit,lr=1e-3/seed=1");
        assert_eq!(p.configs[3].optim.lr, 3e-4);
        assert_eq!(p.configs[5].seed, 1);
        assert_eq!(p.manifest.runs[1].cell_overrides, ["model.block=vit", "optim.lr=3e-4"]);
    }

    #[test]
    fn plan_rejects_bad_keys_values_and_duplicates_before_running() {
        let spec = |grid: &str| SweepSpec {
            config: None,
            overrides: vec!["data.path=synthetic".into()],
            grid: vec![Axis::parse(grid).unwrap()],
            seeds: vec![0],
        };
        let err = plan(&spec("model.blok=vit"), Path::new("/tmp/x")).unwrap_err().to_string();
        assert!(err.contains("blok"), "{err}");
        let err = plan(&spec("model.block=vit,vit23b"), Path::new("/tmp/x")).unwrap_err().to_string();
        assert!(err.contains("vit23b"), "{err}");
        let err = plan(&spec("model.patch_size=4,5"), Path::new("/tmp/x")).unwrap_err().to_string();
        assert!(err.contains("divisible"), "{err}");
        let err = plan(&spec("seed=1,2"), Path::new("/tmp/x")).unwrap_err().to_string();
        assert!(err.contains("--seeds"), "{err}");
        let mut s = spec("optim.lr=1e-3");
        s.seeds.clear();
        assert!(plan(&s, Path::new("/tmp/x")).is_err());
    }

    #[test]
    fn bundle_axes_set_several_keys_per_level() {
        let spec = SweepSpec {
            config: None,
            overrides: vec!["data.path=synthetic".into()],
            grid: vec![Axis::bundles(
                "stabilizer",
                &[("none", &[]), ("clip+z", &["stabilizers.clip_grad_norm=1.0", "stabilizers.z_loss=1e-4"])],
            )],
            seeds: vec![3],
        };
        let p = plan(&spec, Path::new("/tmp/x")).unwrap();
        assert_eq!(p.manifest.runs[1].dir, "stabilizer=clip+z/seed=3");
        assert_eq!(p.configs[0].stabilizers.clip_grad_norm, 0.0);
        assert_eq!((p.configs[1].stabilizers.clip_grad_norm, p.configs[1].stabilizers.z_loss), (1.0, 1e-4));
    }

    #[test]
    fn path_components_are_safe() {
        assert_eq!(path_safe("path=/data/cifar"), "path=_data_cifar");
        assert_eq!(path_safe("betas=[0.9, 0.95]"), "betas=_0.9__0.95_");
        assert_eq!(path_safe(".."), "_..");
    }
}
