//! `unread replay`, `unread promote` and `unread drop`: whole namespaces ([`crate::replay`], [`crate::namespace`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::block_on;
use crate::config::{parse_duration, Settings};
use crate::replay::{ReplayError, ReplayOptions, StartPoint};

/// Arguments of `unread replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Where to start: `earliest` (offset 0, empty state), `checkpoint` (the --namespace's checkpoint), or an
    /// RFC 3339 time (empty state, first records at or after it: partial counts).
    #[arg(long, default_value = "earliest")]
    from: StartPoint,
    /// The namespace to fill (1 to 32 of a-z, 0-9, _); resumed when it holds an unfinished replay.
    #[arg(long, value_name = "NAMESPACE")]
    into: String,
    /// Checkpoint at least this often, e.g. `5s`.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    checkpoint_every: Duration,
    /// Read at most this many records per second (spares the live service's brokers); no limit by default.
    #[arg(long, value_name = "RECORDS_PER_S")]
    max_rate: Option<u64>,
    #[command(flatten)]
    settings: Settings,
}

impl ReplayArgs {
    /// Replays and prints the report; exit 1 when refused, 130 when interrupted (run again to resume).
    ///
    /// Errors: as [`crate::replay::replay`], refusals aside.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let opts = ReplayOptions {
            from: self.from,
            into: self.into,
            checkpoint_interval: self.checkpoint_every,
            max_rate: self.max_rate,
        };
        block_on(async {
            self.settings.check()?;
            match crate::replay::replay(&self.settings, &opts, crate::shutdown::signal()).await {
                Err(ReplayError::Refused(e)) => {
                    eprintln!("unread replay: refused: {e}");
                    Ok(ExitCode::FAILURE)
                }
                Err(ReplayError::Failed(e)) => Err(e),
                Ok(r) => {
                    println!("{r}");
                    Ok(if r.interrupted { ExitCode::from(130) } else { ExitCode::SUCCESS })
                }
            }
        })
    }
}

/// Arguments of `unread promote`.
#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The namespace to serve.
    #[arg(value_name = "NAMESPACE")]
    name: String,
    /// Then delete the previously served namespace (refused, before switching, while a service runs in it).
    #[arg(long)]
    drop_old: bool,
    /// Promote a namespace replayed from a timestamp (partial counts) all the same.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    settings: Settings,
}

impl PromoteArgs {
    /// Promotes and prints the report.
    ///
    /// Errors: as [`crate::namespace::promote`].
    pub fn run(self) -> anyhow::Result<ExitCode> {
        block_on(async {
            let r = crate::namespace::promote(&self.settings, &self.name, self.drop_old, self.force).await?;
            println!("{r}");
            Ok(ExitCode::SUCCESS)
        })
    }
}

/// Arguments of `unread drop`.
#[derive(Debug, Args)]
pub struct DropArgs {
    /// The namespace to delete.
    #[arg(value_name = "NAMESPACE")]
    name: String,
    #[command(flatten)]
    settings: Settings,
}

impl DropArgs {
    /// Drops and prints what was deleted.
    ///
    /// Errors: as [`crate::namespace::drop`].
    pub fn run(self) -> anyhow::Result<ExitCode> {
        block_on(async {
            println!("{}", crate::namespace::drop(&self.settings, &self.name).await?);
            Ok(ExitCode::SUCCESS)
        })
    }
}
