//! A long command's progress on stderr (`replay`, `projection rebuild`, `verify`): a bar on a terminal, otherwise a
//! line every 2 s.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// A progress bar on a terminal; otherwise a line on stderr every 2 s.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    /// What the command is (`replay`) and what it counts (`records`).
    what: (&'static str, &'static str),
    total: u64,
    started: Instant,
    last_line: Instant,
}

impl Progress {
    /// Progress of `command` towards `total` `units` (e.g. `("replay", "records")`), from now.
    pub fn new(total: u64, (command, units): (&'static str, &'static str)) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let template = format!("{command} [{{bar:40}}] {{pos}}/{{len}} {units} {{percent}}% {{msg}} eta {{eta}}");
            let style =
                indicatif::ProgressStyle::with_template(&template).expect("valid template").progress_chars("=> ");
            indicatif::ProgressBar::new(total).with_style(style)
        });
        Self { bar, what: (command, units), total, started: Instant::now(), last_line: Instant::now() }
    }

    /// `done` units so far.
    pub fn set(&mut self, done: u64) {
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        let (command, units) = self.what;
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(format!("{rate:.0} {units}/s"));
            }
            None if self.last_line.elapsed() >= Duration::from_secs(2) => {
                self.last_line = Instant::now();
                let pct = if self.total == 0 { 100.0 } else { done as f64 * 100.0 / self.total as f64 };
                eprintln!("{command}: {done}/{} {units} ({pct:.1}%), {rate:.0} {units}/s", self.total);
            }
            None => {}
        }
    }

    /// `done` of `total` units so far, for a count known only once the work began (`verify`'s users).
    pub fn set_total_and(&mut self, total: u64, done: u64) {
        if self.total != total {
            self.total = total;
            if let Some(bar) = &self.bar {
                bar.set_length(total);
            }
        }
        self.set(done);
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
