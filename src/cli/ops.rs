//! `unread lag`, `unread verify`, `unread inspect` and `unread projection rebuild`: operator tools over a
//! namespace's stores ([`crate::ops`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::{block_on, store, OutputFormat};
use crate::config::{parse_duration_or_secs, Settings};
use crate::projection::redis::RedisProjection;

/// Arguments of `unread lag`.
#[derive(Debug, Args)]
pub struct LagArgs {
    /// Block until every lag is zero (folded and flushed to Redis and PostgreSQL), e.g. `2m`; fail after that long.
    /// A bare number is seconds.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_or_secs)]
    wait: Option<Duration>,
    /// `text` (a table) or `json` (`{"rows": [{"stage", "topic", "partition", "end", "checkpoint", "lag"}],
    /// "total"}`).
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: OutputFormat,
    #[command(flatten)]
    settings: Settings,
}

impl LagArgs {
    /// Prints the lag table.
    ///
    /// Errors: a store unreachable, or `--wait` passing with lag left.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        block_on(async {
            let store = store(&self.settings).await?;
            let report = match self.wait {
                Some(wait) => crate::ops::lag::wait_for_zero_lag(&self.settings, &store, wait).await?,
                None => crate::ops::lag::lag(&self.settings, &store).await?,
            };
            match self.output {
                OutputFormat::Text => println!("{report}"),
                OutputFormat::Json => println!("{}", report.to_json()),
            }
            Ok(ExitCode::SUCCESS)
        })
    }
}

/// Arguments of `unread verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Compare with this namespace's projection (e.g. one `unread replay` filled) instead of the checkpoint.
    #[arg(long, value_name = "NAMESPACE")]
    against: Option<String>,
    /// Check N users chosen at random instead of all.
    #[arg(long)]
    sample: Option<usize>,
    /// Rewrite the differing users in Redis from the trusted side (never over newer state).
    #[arg(long)]
    repair: bool,
    /// `text` or `json` (`{"checked", "ahead", "differing": [{"user", "differences"}], "repaired", "evicted",
    /// "clean"}`).
    #[arg(long, short = 'o', value_enum, default_value_t)]
    output: OutputFormat,
    #[command(flatten)]
    settings: Settings,
}

/// `unread verify`'s exit status when it could not compare (a store unreachable, a corrupt row): 2, apart from
/// [`ExitCode::FAILURE`] (1), which says that something differs.
pub const VERIFY_COULD_NOT_RUN: u8 = 2;

impl VerifyArgs {
    /// Compares and prints the report; exit 0 when nothing differs (or every difference was repaired), 1 when
    /// something differs, [`VERIFY_COULD_NOT_RUN`] (2, with the reason on stderr) when it could not compare.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let output = self.output;
        match self.compare() {
            Ok((report, clean)) => {
                match output {
                    OutputFormat::Text => println!("{report}"),
                    OutputFormat::Json => println!("{}", report.to_json(clean)),
                }
                Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
            }
            Err(e) => {
                eprintln!("unread verify: could not compare: {e:#}");
                Ok(ExitCode::from(VERIFY_COULD_NOT_RUN))
            }
        }
    }

    /// The comparison and whether it is clean.
    ///
    /// Errors: a store unreachable or a corrupt row.
    fn compare(self) -> anyhow::Result<(crate::state::verify::VerifyReport, bool)> {
        let Self { against, sample, repair, settings, .. } = self;
        block_on(async {
            settings.check()?;
            let report = match against {
                Some(other) => {
                    crate::ops::verify::verify_against(&settings, &settings.in_namespace(&other)?, sample, repair)
                        .await?
                }
                None => {
                    let (store, projection) = (store(&settings).await?, projection(&settings).await?);
                    let repair = repair.then_some(usize::MAX);
                    let mut bar = crate::progress::Progress::new(0, ("verify", "users"));
                    let mut progress = |done: usize, total: usize| bar.set_total_and(total as u64, done as u64);
                    let topics = settings.topics();
                    let report =
                        crate::ops::verify::verify(&topics, &store, &projection, (sample, repair), &mut progress)
                            .await?;
                    bar.finish();
                    report
                }
            };
            let clean = report.clean(repair);
            Ok((report, clean))
        })
    }
}

/// `unread inspect ...`
#[derive(Debug, Subcommand)]
pub enum InspectWhat {
    /// The fold state of a user (cursors, unread ranges, mentions, membership, mutes, totals), its partition's
    /// checkpointed offsets, lease generation and checkpoint time, and what Redis serves. Exit 1 if unknown.
    User {
        /// The user id.
        id: String,
        #[command(flatten)]
        #[allow(missing_docs)]
        settings: Settings,
    },
    /// The fan-out state of a conversation (kind, head, members with their join heads), its partition's
    /// checkpointed offset, lease generation and checkpoint time. Exit 1 if unknown.
    Conversation {
        /// The conversation id.
        id: String,
        #[command(flatten)]
        #[allow(missing_docs)]
        settings: Settings,
    },
}

impl InspectWhat {
    /// Prints the state as JSON; exit 1 when nothing is checkpointed for the id.
    ///
    /// Errors: a store unreachable or a corrupt row.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        block_on(async {
            let (found, name) = match &self {
                InspectWhat::User { id, settings } => {
                    let (store, projection) = (store(settings).await?, projection(settings).await?);
                    (
                        crate::ops::inspect::inspect_user(settings, &store, &projection, id).await?,
                        format!("user {id:?}"),
                    )
                }
                InspectWhat::Conversation { id, settings } => {
                    let store = store(settings).await?;
                    (
                        crate::ops::inspect::inspect_conversation(settings, &store, id).await?,
                        format!("conversation {id:?}"),
                    )
                }
            };
            let Some(v) = found else {
                eprintln!("unread inspect: no checkpointed state for {name}");
                return Ok(ExitCode::FAILURE);
            };
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(ExitCode::SUCCESS)
        })
    }
}

/// `unread projection ...`
#[derive(Debug, Subcommand)]
pub enum ProjectionAction {
    /// Rewrite Redis from the PostgreSQL checkpoint (all users, or those given), never over newer state.
    Rebuild {
        /// A user to rebuild; repeat for several; none means every user.
        #[arg(long = "user", value_name = "ID")]
        users: Vec<String>,
        #[command(flatten)]
        #[allow(missing_docs)]
        settings: Settings,
    },
}

impl ProjectionAction {
    /// Rebuilds and prints the report.
    ///
    /// Errors: a store unreachable or a corrupt row.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let ProjectionAction::Rebuild { users, settings } = self;
        block_on(async {
            let (store, projection) = (store(&settings).await?, projection(&settings).await?);
            println!("{}", crate::ops::rebuild::rebuild_projection(&settings, &store, &projection, &users).await?);
            Ok(ExitCode::SUCCESS)
        })
    }
}

/// Connects to the namespace's projection (whose hashes expire with `--projection-ttl`).
async fn projection(settings: &Settings) -> anyhow::Result<RedisProjection> {
    let ttl = settings.checked_projection_ttl()?;
    Ok(RedisProjection::connect(&settings.redis_url, &settings.ns_redis_prefix()).await?.with_ttl(ttl))
}
