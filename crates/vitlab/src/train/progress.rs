//! What a training run reports while it goes: the [`Observer`] the loop calls,
//! and [`Progress`], the library's plain one (a line per epoch on stderr, or
//! nothing). The command-line program draws a progress bar with its own.

use std::time::Instant;

/// Receives a run's progress from the loop.
pub trait Observer {
    /// Training starts at step `done` of `total_steps`.
    fn start(&mut self, total_steps: u64, done: u64);
    /// Epoch `epoch` (0-based) of `epochs` begins.
    fn epoch(&mut self, epoch: usize, epochs: usize);
    /// After a step: its loss, the running epoch means of the task's training columns, images/s.
    fn step(&mut self, step: u64, loss: f64, columns: &[String], means: &[f64], images_per_s: f64);
    /// After an epoch: `detail` names its training and validation values.
    fn epoch_done(&mut self, epoch: usize, epochs: usize, detail: &str, images_per_s: f64);
    /// A line for the user (data, model, warnings, explosions, early stops).
    fn message(&mut self, line: &str);
    fn finish(&mut self);
}

/// One line per epoch and the messages on stderr, or nothing ([`Progress::silent`]).
pub struct Progress {
    silent: bool,
    started: Instant,
    total: u64,
    first_step: u64,
    last_step: u64,
}

impl Progress {
    /// Lines on stderr (`_quiet` is accepted for callers that had a bar; lines are what this prints).
    pub fn new(_quiet: bool) -> Self {
        Progress { silent: false, started: Instant::now(), total: 0, first_step: 0, last_step: 0 }
    }

    /// A progress that prints nothing (library use, tests).
    pub fn silent() -> Self {
        Progress { silent: true, ..Progress::new(true) }
    }

    /// The time left at `step`, from the rate since [`Observer::start`].
    pub fn eta(started: Instant, first: u64, step: u64, total: u64) -> String {
        let done = step.saturating_sub(first);
        if done == 0 || total == 0 {
            return "?".into();
        }
        let left = started.elapsed().as_secs_f64() / done as f64 * total.saturating_sub(step) as f64;
        format!("{:.0}m{:02.0}s", (left / 60.0).floor(), left % 60.0)
    }
}

impl Observer for Progress {
    fn start(&mut self, total_steps: u64, done: u64) {
        (self.total, self.first_step, self.last_step, self.started) = (total_steps, done, done, Instant::now());
    }

    fn epoch(&mut self, _epoch: usize, _epochs: usize) {}

    fn step(&mut self, step: u64, _loss: f64, _columns: &[String], _means: &[f64], _images_per_s: f64) {
        self.last_step = step;
    }

    fn epoch_done(&mut self, epoch: usize, epochs: usize, detail: &str, images_per_s: f64) {
        let eta = Progress::eta(self.started, self.first_step, self.last_step, self.total);
        self.message(&format!("epoch {}/{epochs}: {detail} {images_per_s:.1} img/s, ETA {eta}", epoch + 1));
    }

    fn message(&mut self, line: &str) {
        if !self.silent {
            eprintln!("{line}");
        }
    }

    fn finish(&mut self) {}
}
