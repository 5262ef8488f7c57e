//! `unread dead-letter list|replay`: the records of the dead-letter topic ([`crate::dead_letter`]).

use std::process::ExitCode;

use clap::Subcommand;

use super::{block_on, OutputFormat};
use crate::config::Settings;
use crate::dead_letter::{read_all, DeadLetter};

/// `unread dead-letter ...`
#[derive(Debug, Subcommand)]
pub enum DeadLetterAction {
    /// Print dead-lettered records, oldest first: source, error kind and reason, key, value preview.
    List {
        /// Print at most N records.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Only records of this error kind (e.g. invalid_json, key_mismatch).
        #[arg(long)]
        kind: Option<String>,
        /// `text` or `json` (one JSON object a line per record: position, source, kind, reason, key, value).
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: OutputFormat,
        #[command(flatten)]
        #[allow(missing_docs)]
        settings: Settings,
    },
    /// Re-publish dead-lettered records to their source topics (those still invalid come back here).
    Replay {
        /// Only records of this error kind.
        #[arg(long)]
        kind: Option<String>,
        #[command(flatten)]
        #[allow(missing_docs)]
        settings: Settings,
    },
}

/// The dead letters of `settings`' topic, of error kind `kind` when given.
fn matching(settings: &Settings, kind: Option<&str>) -> anyhow::Result<(usize, Vec<DeadLetter>)> {
    let all = read_all(&settings.brokers, &settings.topics().dead_letter)?;
    let total = all.len();
    Ok((total, all.into_iter().filter(|d| kind.is_none_or(|k| d.kind == k)).collect()))
}

impl DeadLetterAction {
    /// Lists (on stdout, with a count on stderr) or re-publishes.
    ///
    /// Errors: Kafka unreachable, or a send failing.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            DeadLetterAction::List { limit, kind, output, settings } => {
                let (total, matching) = matching(&settings, kind.as_deref())?;
                for d in matching.iter().take(limit) {
                    match output {
                        OutputFormat::Text => println!("{d}"),
                        OutputFormat::Json => println!("{}", d.to_json()),
                    }
                }
                let shown = matching.len().min(limit);
                eprintln!("{total} dead-letter records, {} matching, {shown} shown", matching.len());
                Ok(ExitCode::SUCCESS)
            }
            DeadLetterAction::Replay { kind, settings } => block_on(async {
                let (_, matching) = matching(&settings, kind.as_deref())?;
                let n = crate::dead_letter::replay(&settings.brokers, &matching).await?;
                println!("{n} dead-letter records re-published to their source topics");
                Ok(ExitCode::SUCCESS)
            }),
        }
    }
}
