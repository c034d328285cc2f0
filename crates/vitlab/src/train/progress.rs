//! Progress display: a bar with epoch, step, loss, accuracy, images/s and ETA
//! on a terminal; plain log lines per epoch otherwise or with `--quiet`.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    quiet: bool,
    started: Instant,
    total: u64,
    first_step: u64,
    last_step: u64,
}

impl Progress {
    /// `quiet`: no bar, one line per epoch. The bar is also hidden when stderr is not a terminal.
    pub fn new(quiet: bool) -> Self {
        Progress {
            bar: None,
            quiet,
            started: Instant::now(),
            total: 0,
            first_step: 0,
            last_step: 0,
        }
    }

    /// A progress that prints nothing (library use, tests).
    pub fn silent() -> Self {
        let mut p = Progress::new(true);
        p.total = u64::MAX;
        p
    }

    fn is_silent(&self) -> bool {
        self.total == u64::MAX
    }

    pub fn start(&mut self, total_steps: u64, done: u64) {
        if self.is_silent() {
            return;
        }
        self.total = total_steps;
        self.first_step = done;
        self.last_step = done;
        self.started = Instant::now();
        if !self.quiet {
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

    pub fn epoch(&mut self, epoch: usize, epochs: usize, _batches: usize, _start: usize) {
        if let Some(bar) = &self.bar {
            bar.set_prefix(format!("epoch {}/{}", epoch + 1, epochs));
        }
    }

    /// `acc`: the training accuracy, for tasks that have one.
    pub fn step(&mut self, step: u64, loss: f64, acc: Option<f64>, images_per_s: f64) {
        self.last_step = step;
        if let Some(bar) = &self.bar {
            bar.set_position(step);
            let acc = acc.map_or(String::new(), |a| format!(" acc {a:.3}"));
            bar.set_message(format!("loss {loss:.4}{acc} {images_per_s:.1} img/s"));
        }
    }

    fn eta(&self, step: u64) -> String {
        let done = step.saturating_sub(self.first_step);
        if done == 0 || self.total == 0 {
            return "?".into();
        }
        let per = self.started.elapsed().as_secs_f64() / done as f64;
        let left = per * self.total.saturating_sub(step) as f64;
        format!("{:.0}m{:02.0}s", (left / 60.0).floor(), left % 60.0)
    }

    /// One line per epoch; `detail` holds the task's metrics (losses, validation).
    pub fn epoch_done(&mut self, epoch: usize, epochs: usize, detail: &str, images_per_s: f64) {
        if self.is_silent() {
            return;
        }
        let line = format!(
            "epoch {}/{epochs}: {detail} {images_per_s:.1} img/s, ETA {}",
            epoch + 1,
            self.eta(self.last_step)
        );
        self.message(&line);
    }

    pub fn message(&self, line: &str) {
        if self.is_silent() {
            return;
        }
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
