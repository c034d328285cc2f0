//! Writing files so that a crash never leaves a half-written one: every file
//! vitlab writes (weights, checkpoints, configs, results, reports, figures,
//! images) goes through [`atomic_write`].

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::{Error, Result};

/// Writes `bytes` to `path` through a synced temporary file and a rename.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(path, e)
    })
}

/// The path each input file's output goes to: `out/` + the input's whole stem +
/// `suffix` (`cat.4001.jpg` -> `OUT/cat.4001.png` for `.png`, not `cat.png`). Two
/// inputs that would write one path are an error naming both.
pub fn output_paths(files: &[std::path::PathBuf], out: &Path, suffix: &str) -> Result<Vec<std::path::PathBuf>> {
    let mut targets = Vec::with_capacity(files.len());
    let mut seen: std::collections::HashMap<std::path::PathBuf, &Path> = std::collections::HashMap::new();
    for f in files {
        let mut name = f.file_stem().ok_or_else(|| Error::data(f, "not a file name"))?.to_os_string();
        name.push(suffix);
        let target = out.join(name);
        if let Some(other) = seen.insert(target.clone(), f) {
            return Err(Error::data(f, format!("would write {} as {} does too", target.display(), other.display())));
        }
        targets.push(target);
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn outputs_keep_the_whole_stem_of_inputs_named_with_several_dots() {
        let out = Path::new("out");
        let files: Vec<PathBuf> =
            ["cat.4001.jpg", "cat.4002.jpg", "dir/noext", "DOG.JPG", "a.b.c.png"].map(PathBuf::from).to_vec();
        let names = output_paths(&files, out, ".png").unwrap();
        let want = ["out/cat.4001.png", "out/cat.4002.png", "out/noext.png", "out/DOG.png", "out/a.b.c.png"];
        assert_eq!(names, want.map(PathBuf::from));
        // Two inputs that would write one file: an error naming both.
        let e = output_paths(&[PathBuf::from("x/a.jpg"), PathBuf::from("y/a.png")], out, ".png").unwrap_err().to_string();
        assert!(e.contains("y/a.png") && e.contains("x/a.jpg") && e.contains("out/a.png"), "{e}");
    }
}
