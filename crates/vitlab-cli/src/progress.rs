//! The training progress bar: epoch, step, loss, the task's running means
//! (e.g. `train_acc`), images/s and ETA on a terminal; the library's plain
//! lines otherwise or with `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vitlab::train::{Observer, Progress};

pub struct Bar {
    bar: Option<ProgressBar>,
    quiet: bool,
    lines: Progress,
}

impl Bar {
    /// `quiet`: no bar, one line per epoch. The bar is also hidden when stderr is not a terminal.
    pub fn new(quiet: bool) -> Self {
        Bar { bar: None, quiet, lines: Progress::new(true) }
    }
}

impl Observer for Bar {
    fn start(&mut self, total_steps: u64, done: u64) {
        self.lines.start(total_steps, done);
        // A hidden bar (stderr not a terminal: a log file, nohup, mpiexec) drops what it is
        // asked to print, so there the plain lines are the output.
        if !self.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            let bar = ProgressBar::with_draw_target(Some(total_steps), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{prefix} [{bar:28}] step {pos}/{len} {msg} ETA {eta}")
                    .expect("template")
                    .progress_chars("=> "),
            );
            bar.set_position(done);
            self.bar = Some(bar);
        }
    }

    fn epoch(&mut self, epoch: usize, epochs: usize) {
        if let Some(bar) = &self.bar {
            bar.set_prefix(format!("epoch {}/{}", epoch + 1, epochs));
        }
    }

    fn step(&mut self, step: u64, loss: f64, columns: &[String], means: &[f64], images_per_s: f64) {
        self.lines.step(step, loss, columns, means, images_per_s);
        if let Some(bar) = &self.bar {
            bar.set_position(step);
            // The running accuracy when the task has one (classification's train_acc).
            let acc = columns.iter().position(|c| c == "train_acc").and_then(|i| means.get(i));
            let acc = acc.map_or(String::new(), |a| format!(" acc {a:.3}"));
            bar.set_message(format!("loss {loss:.4}{acc} {images_per_s:.1} img/s"));
        }
    }

    fn epoch_done(&mut self, epoch: usize, epochs: usize, detail: &str, images_per_s: f64) {
        match &self.bar {
            Some(bar) => bar.println(format!("epoch {}/{epochs}: {detail} {images_per_s:.1} img/s", epoch + 1)),
            None => self.lines.epoch_done(epoch, epochs, detail, images_per_s),
        }
    }

    fn message(&mut self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => self.lines.message(line),
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
