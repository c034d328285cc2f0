//! The run directory's CSV logs (metrics.csv, steps.csv, blocks.csv): opened
//! for appending, keeping on resume only the rows a predicate accepts, with
//! the first write error kept for the loop to report.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// An append-only CSV file (or none: the logs of a rank that does not write).
pub(crate) struct CsvLog {
    path: PathBuf,
    file: Option<File>,
    error: Option<String>,
    reported: bool,
}

impl CsvLog {
    /// Opens `path` with `header`, keeping the existing rows that `keep` accepts (by fields).
    pub(crate) fn open(path: &Path, header: &str, keep: impl Fn(&[&str]) -> bool) -> Result<CsvLog> {
        let io = |e| Error::io(path, e);
        let mut text = format!("{header}\n");
        if path.exists() {
            let f = File::open(path).map_err(io)?;
            for (i, line) in BufReader::new(f).lines().enumerate() {
                let line = line.map_err(io)?;
                if i > 0 && !line.is_empty() && keep(&line.split(',').collect::<Vec<_>>()) {
                    text.push_str(&line);
                    text.push('\n');
                }
            }
        }
        crate::util::fs::atomic_write(path, text.as_bytes())?;
        let file = OpenOptions::new().append(true).open(path).map_err(io)?;
        Ok(CsvLog { path: path.to_path_buf(), file: Some(file), error: None, reported: false })
    }

    /// A log that drops its rows.
    pub(crate) fn discard() -> CsvLog {
        CsvLog { path: PathBuf::new(), file: None, error: None, reported: false }
    }

    /// Appends one row; a failure is kept (the first one) for [`CsvLog::take_error`].
    pub(crate) fn row(&mut self, fields: &[String]) {
        let Some(file) = &mut self.file else { return };
        if let Err(e) = writeln!(file, "{}", fields.join(",")) {
            self.error.get_or_insert_with(|| format!("cannot write {}: {e}", self.path.display()));
        }
    }

    /// The first write error, once.
    pub(crate) fn take_error(&mut self) -> Option<String> {
        if self.reported {
            return None;
        }
        let e = self.error.take();
        self.reported = e.is_some();
        e
    }
}

/// A value as the logs write it: 7 significant digits, empty for NaN (not measured).
pub(crate) fn fmt(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.6e}")
    }
}
