//! The `unread` command line: one binary, one subcommand per job.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::pipeline::{for_each_batch, open_input, write_views, Pipeline, MAX_BATCH};

/// Exact unread counts for chat apps.
#[derive(Debug, Parser)]
#[command(name = "unread", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run fan-out and fold in-process over a JSON Lines file of events and print every user's final counts.
    ///
    /// Output: one JSON object per user who is a member of at least one conversation, in the contract's reader
    /// shape, sorted by user_id. Invalid lines stop the run with their line number unless --skip-invalid.
    Fold {
        /// Events as JSON Lines; gunzipped when the name ends in .gz; `-` reads stdin.
        #[arg(long, short)]
        input: String,
        /// Where to write the users' states; `-` (the default) writes stdout.
        #[arg(long, short, default_value = "-")]
        output: String,
        /// Report invalid lines on stderr and go on, instead of failing.
        #[arg(long)]
        skip_invalid: bool,
        /// Events per fan-out batch, 1 to 1000.
        #[arg(long, default_value_t = MAX_BATCH as u64, value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH as u64))]
        batch_size: u64,
    },
}

/// Runs the parsed command line.
///
/// Errors: whatever the subcommand reports (unreadable input, invalid lines, unwritable output), with context.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Fold { input, output, skip_invalid, batch_size } => {
            fold(&input, &output, skip_invalid, batch_size as usize)
        }
    }
}

fn fold(input: &str, output: &str, skip_invalid: bool, batch_size: usize) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let reader = open_input(input)?;
    let mut pipeline = Pipeline::new();
    let stats = for_each_batch(
        reader,
        batch_size,
        |invalid| {
            if skip_invalid {
                eprintln!("unread fold: skipped {input}:{invalid}");
                Ok(())
            } else {
                Err(anyhow::Error::new(invalid))
                    .with_context(|| format!("{input} holds an invalid event (use --skip-invalid to go on)"))
            }
        },
        |batch| pipeline.process_batch(batch),
    )?;
    let views = pipeline.views();
    let out: Box<dyn Write> = if output == "-" {
        Box::new(io::stdout().lock())
    } else {
        Box::new(File::create(output).with_context(|| format!("cannot create output {output}"))?)
    };
    write_views(&views, BufWriter::with_capacity(1 << 20, out)).with_context(|| format!("writing {output}"))?;
    let fold_stats = pipeline.fold().stats();
    eprintln!(
        "unread fold: {} events ({} invalid skipped), {} users, {} per-recipient increments in {:.3} s",
        stats.events,
        stats.invalid,
        views.len(),
        fold_stats.increments,
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
