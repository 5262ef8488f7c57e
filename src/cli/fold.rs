//! `unread fold --input FILE`: the whole pipeline in one process over a file, no services.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use crate::pipeline::{for_each_batch, open_input, write_receipts, write_views_shaped, Pipeline, Shape, MAX_BATCH};

/// An RFC 3339 instant → seconds since the epoch.
fn parse_instant(text: &str) -> Result<i64, String> {
    crate::core::expiry::seconds_of(text).ok_or_else(|| format!("{text:?} is not an RFC 3339 time"))
}

/// Arguments of `unread fold`.
#[derive(Debug, Args)]
pub struct FoldArgs {
    /// Events as JSON Lines; gunzipped when the name ends in .gz; `-` reads stdin.
    #[arg(long, short)]
    input: String,
    /// Where to write the users' states; `-` (the default) writes stdout.
    #[arg(long, short, default_value = "-")]
    output: String,
    /// Report invalid lines on stderr and go on, instead of failing.
    #[arg(long)]
    skip_invalid: bool,
    /// Events per fan-out batch, 1 to 4000 (the counts are the same whatever the batches).
    #[arg(long, default_value_t = MAX_BATCH as u64, value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH as u64))]
    batch_size: u64,
    /// The instant the counts are at (RFC 3339; `CONTRACT.md` § v3, "Expiry"); default: the latest `occurred_at`
    /// of the input.
    #[arg(long, value_parser = parse_instant)]
    now: Option<i64>,
    /// Also write every message's read receipts (v3) to this file, sorted by conversation then seq.
    #[arg(long)]
    receipts: Option<String>,
    /// The reader shape written: `v4` (default); `v3`, without v4's fields (`first_unread`, `reactions`,
    /// `threads`, `unread_threads`, `thread_mentions`, `total_reactions`, `teams`); or `v2`, also without
    /// `marked_unread`, the shape of the v1 and v2 expected files (refused when a conversation is marked unread,
    /// which `v2` cannot say).
    #[arg(long, default_value = "v4", value_parser = ["v2", "v3", "v4"])]
    shape: String,
    /// Member count from which a conversation is read-diffused (0: never); the counts are the same either way.
    #[arg(long, env = "UNREAD_READ_DIFFUSION_THRESHOLD", default_value_t = crate::core::hybrid::DEFAULT_THRESHOLD)]
    read_diffusion_threshold: u64,
}

/// The summary `unread fold` prints on stderr.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FoldReport {
    /// Valid events folded.
    pub events: u64,
    /// Invalid lines skipped (`--skip-invalid`).
    pub invalid: u64,
    /// Users written.
    pub users: usize,
    /// Per-recipient increments.
    pub increments: u64,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl fmt::Display for FoldReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { events, invalid, users, increments, seconds } = self;
        write!(
            f,
            "unread fold: {events} events ({invalid} invalid skipped), {users} users, {increments} per-recipient \
             increments in {seconds:.3} s"
        )
    }
}

impl FoldArgs {
    /// Folds the input and writes every user's view.
    ///
    /// Errors: unreadable input, an invalid line (unless skipping), unwritable output.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let started = Instant::now();
        let diffusion = crate::core::hybrid::Diffusion::from_threshold(self.read_diffusion_threshold).for_one_fold();
        let mut pipeline = Pipeline::with_diffusion(diffusion).without_own_changes();
        if self.receipts.is_some() {
            pipeline.keep_receipts();
        }
        let (input, skip) = (&self.input, self.skip_invalid);
        let on_invalid = |invalid| {
            if skip {
                eprintln!("unread fold: skipped {input}:{invalid}");
                return Ok(());
            }
            Err(anyhow::Error::new(invalid))
                .with_context(|| format!("{input} holds an invalid event (use --skip-invalid to go on)"))
        };
        let stats =
            for_each_batch(open_input(input)?, self.batch_size as usize, on_invalid, |b| pipeline.process_batch(b))?;
        let now = self.now.or(pipeline.latest()).unwrap_or(0);
        if let (Some(path), Some(receipts)) = (&self.receipts, pipeline.receipts()) {
            let file = File::create(path).with_context(|| format!("cannot create receipts file {path}"))?;
            write_receipts(&receipts.all(), BufWriter::with_capacity(1 << 20, file))
                .with_context(|| format!("writing {path}"))?;
        }
        let out: Box<dyn Write> = match self.output.as_str() {
            "-" => Box::new(io::stdout().lock()),
            path => Box::new(File::create(path).with_context(|| format!("cannot create output {path}"))?),
        };
        let mut out = BufWriter::with_capacity(1 << 20, out);
        let users = match self.shape.as_str() {
            "v2" => {
                let views = pipeline.views_at(now);
                if views.iter().any(|v| v.conversations.values().any(|c| c.marked_unread)) {
                    anyhow::bail!("--shape v2 cannot say that a conversation is marked unread: use --shape v3");
                }
                write_views_shaped(&views, Shape::V2, &mut out).map(|()| views.len())
            }
            // One view at a time: the views of every user are never all held (33 MiB for the full v3 set).
            "v3" => pipeline.write_views_at(now, Shape::V3, &mut out),
            _ => pipeline.write_views_at(now, Shape::V4, &mut out),
        };
        let users = users.with_context(|| format!("writing {}", self.output))?;
        let (events, invalid) = (stats.events, stats.invalid);
        let increments = pipeline.fold().stats().increments;
        eprintln!("{}", FoldReport { events, invalid, users, increments, seconds: started.elapsed().as_secs_f64() });
        // The process ends here: freeing every user's state one by one would only delay the exit.
        std::mem::forget(pipeline);
        Ok(ExitCode::SUCCESS)
    }
}
