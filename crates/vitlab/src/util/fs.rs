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
