//! A replay's progress on stderr: a bar on a terminal, otherwise a line every 2 s.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// A progress bar on a terminal; otherwise a line on stderr every 2 s.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    started: Instant,
    last_line: Instant,
}

impl Progress {
    /// Progress towards `total` records, from now.
    pub fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let style = indicatif::ProgressStyle::with_template(
                "replay [{bar:40}] {pos}/{len} records {percent}% {msg} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> ");
            indicatif::ProgressBar::new(total).with_style(style)
        });
        Self { bar, total, started: Instant::now(), last_line: Instant::now() }
    }

    /// `done` records so far.
    pub fn set(&mut self, done: u64) {
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(format!("{rate:.0} records/s"));
            }
            None if self.last_line.elapsed() >= Duration::from_secs(2) => {
                self.last_line = Instant::now();
                let pct = if self.total == 0 { 100.0 } else { done as f64 * 100.0 / self.total as f64 };
                eprintln!("replay: {done}/{} records ({pct:.1}%), {rate:.0} records/s", self.total);
            }
            None => {}
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
