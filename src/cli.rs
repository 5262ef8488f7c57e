//! The `unread` command line: one binary, one subcommand per job.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::checkpoint::store::CheckpointStore;
use crate::config::Settings;
use crate::pipeline::{for_each_batch, open_input, write_views, Pipeline, MAX_BATCH};
use crate::projection::redis::RedisProjection;
use crate::service::RunOptions;

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
    /// Run the service: fan-out and fold stages as consumer-group members, and the read API.
    ///
    /// Consumes the input topics, materializes every user's counts into Redis and checkpoints state with the input
    /// offsets to PostgreSQL (migrations applied at start). Stops cleanly on SIGINT/SIGTERM.
    Run(RunOptions),
    /// Create the topics of topology/topics.toml (under --topic-prefix) and check existing ones' partition counts.
    Topics {
        #[command(subcommand)]
        action: TopicsAction,
    },
    /// Validate JSON Lines of events and publish each to its topic, keyed as the contract says.
    ///
    /// Invalid lines are reported with their line number and not sent; they make the exit status non-zero.
    Produce {
        /// Events as JSON Lines; gunzipped when the name ends in .gz; `-` reads stdin.
        file: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// Apply the PostgreSQL migrations (also done by `unread run`).
    Migrate {
        #[command(flatten)]
        settings: Settings,
    },
    /// Show, per input partition of both stages, the end offset, the checkpointed offset and the lag.
    Lag {
        /// Block until every lag is zero (folded and flushed to Redis and PostgreSQL); fail after SECS.
        #[arg(long, value_name = "SECS")]
        wait: Option<u64>,
        #[command(flatten)]
        settings: Settings,
    },
    /// Compare the Redis projection with the PostgreSQL checkpoint, or with another namespace's; exit 1 when
    /// anything differs.
    ///
    /// Reports users checked, users ahead in Redis (flushed after the checkpoint: not compared), users that differ
    /// and their first differences field by field. --repair rewrites the differing users from the trusted side:
    /// the checkpoint, or with --against the other namespace.
    Verify {
        /// Compare with this namespace's projection (e.g. one `unread replay` filled) instead of the checkpoint.
        #[arg(long, value_name = "NAMESPACE")]
        against: Option<String>,
        /// Check N users chosen at random instead of all.
        #[arg(long)]
        sample: Option<usize>,
        /// Rewrite the differing users in Redis from the trusted side (never over newer state).
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        settings: Settings,
    },
    /// Fold the retained input log into another namespace (Redis prefix, PostgreSQL schema) while the service runs.
    ///
    /// Shows progress and records/s; checkpoints as it goes, so running the same command again after an
    /// interruption resumes. Exit 1 when refused (e.g. --from earliest on a log retention truncated).
    Replay {
        /// Where to start: `earliest` (offset 0, empty state), `checkpoint` (the --namespace's checkpoint), or an
        /// RFC 3339 time (empty state, first records at or after it: partial counts).
        #[arg(long, default_value = "earliest")]
        from: crate::replay::StartPoint,
        /// The namespace to fill (1 to 32 of a-z, 0-9, _); resumed when it holds an unfinished replay.
        #[arg(long, value_name = "NAMESPACE")]
        into: String,
        /// Checkpoint at least this often, e.g. `5s`.
        #[arg(long, default_value = "5s", value_parser = crate::service::parse_duration)]
        checkpoint_every: std::time::Duration,
        /// Read at most this many records per second (spares the live service's brokers); no limit by default.
        #[arg(long, value_name = "RECORDS_PER_S")]
        max_rate: Option<u64>,
        #[command(flatten)]
        settings: Settings,
    },
    /// Make a namespace the one every read API instance serves (atomically: no request fails).
    Promote {
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
    },
    /// Delete a namespace: Redis keys, PostgreSQL schema, consumer groups, delta topic (not the live one, not one
    /// a service runs in).
    Drop {
        #[arg(value_name = "NAMESPACE")]
        name: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// Print the state of one user or conversation as JSON, for support and debugging.
    Inspect {
        #[command(subcommand)]
        what: InspectWhat,
    },
    /// Inspect or re-publish the records of the dead-letter topic.
    DeadLetter {
        #[command(subcommand)]
        action: DeadLetterAction,
    },
    /// Operate on the Redis projection.
    Projection {
        #[command(subcommand)]
        action: ProjectionAction,
    },
}

/// `unread topics ...`
#[derive(Debug, Subcommand)]
pub enum TopicsAction {
    /// Create missing topics; fail if an existing one has another partition count.
    Create {
        /// Override the partition count of every topic but the dead-letter one (default: topology/topics.toml).
        #[arg(long)]
        partitions: Option<i32>,
        #[command(flatten)]
        settings: Settings,
    },
}

/// `unread inspect ...`
#[derive(Debug, Subcommand)]
pub enum InspectWhat {
    /// The fold state of a user (cursors, unread ranges, mentions, membership, mutes, totals), its partition's
    /// checkpointed offsets, lease generation and checkpoint time, and what Redis serves. Exit 1 if unknown.
    User {
        id: String,
        #[command(flatten)]
        settings: Settings,
    },
    /// The fan-out state of a conversation (kind, head, members with their join heads), its partition's
    /// checkpointed offset, lease generation and checkpoint time. Exit 1 if unknown.
    Conversation {
        id: String,
        #[command(flatten)]
        settings: Settings,
    },
}

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
        #[command(flatten)]
        settings: Settings,
    },
    /// Re-publish dead-lettered records to their source topics (those still invalid come back here).
    Replay {
        /// Only records of this error kind.
        #[arg(long)]
        kind: Option<String>,
        #[command(flatten)]
        settings: Settings,
    },
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
        settings: Settings,
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
        Command::Run(opts) => runtime()?.block_on(crate::service::run(opts)).map(|()| ExitCode::SUCCESS),
        Command::Topics { action: TopicsAction::Create { partitions, settings } } => runtime()?.block_on(async {
            for line in crate::topology::create(&settings.brokers, &settings.topics(), partitions).await? {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::Produce { file, settings } => {
            let r = crate::produce::produce(&settings.brokers, &settings.topic_prefix, &file)?;
            let sent = r.conversation_events + r.user_events;
            eprintln!(
                "unread produce: {sent} events sent ({} conversation, {} user), {} invalid not sent, {} failed, \
                 {:.2} s, {:.0} events/s",
                r.conversation_events,
                r.user_events,
                r.invalid,
                r.failed,
                r.seconds,
                sent as f64 / r.seconds.max(1e-9)
            );
            Ok(if r.invalid == 0 && r.failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Command::Migrate { settings } => runtime()?.block_on(async {
            store(&settings).await?;
            println!("migrations applied to schema {}", settings.ns_db_schema());
            Ok(ExitCode::SUCCESS)
        }),
        Command::Lag { wait, settings } => runtime()?.block_on(async {
            let store = store(&settings).await?;
            let rows = match wait {
                Some(secs) => {
                    crate::ops::wait_for_zero_lag(&settings, &store, std::time::Duration::from_secs(secs)).await?
                }
                None => crate::ops::lag(&settings, &store).await?,
            };
            crate::ops::print_lag(&rows);
            Ok(ExitCode::SUCCESS)
        }),
        Command::Verify { against, sample, repair, settings } => runtime()?.block_on(async {
            settings.check()?;
            let r = match against {
                Some(other) => {
                    let other = settings.in_namespace(&other)?;
                    crate::ops::verify_against(&settings, &other, sample, repair).await?
                }
                None => {
                    let store = store(&settings).await?;
                    let projection = RedisProjection::connect(&settings.redis_url, &settings.ns_redis_prefix()).await?;
                    crate::ops::verify(&settings, &store, &projection, sample, repair).await?
                }
            };
            for (user, diffs) in r.differing.iter().take(10) {
                println!("user {user:?} differs:");
                for d in diffs.iter().take(5) {
                    println!("    {d}");
                }
            }
            println!(
                "users checked: {}, differing: {}, ahead in redis (not compared): {}, repaired: {}",
                r.checked,
                r.differing.len(),
                r.ahead,
                r.repaired
            );
            let clean = r.differing.is_empty() || (repair && r.repaired == r.differing.len());
            Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }),
        Command::Replay { from, into, checkpoint_every, max_rate, settings } => runtime()?.block_on(async {
            settings.check()?;
            let opts = crate::replay::ReplayOptions { from, into, checkpoint_interval: checkpoint_every, max_rate };
            let r = match crate::replay::replay(&settings, &opts).await {
                Err(e) if e.downcast_ref::<crate::replay::Refused>().is_some() => {
                    eprintln!("unread replay: refused: {e}");
                    return Ok(ExitCode::FAILURE);
                }
                other => other?,
            };
            println!(
                "replay into {}{}: {} records ({} invalid skipped, {} in-flight deltas) in {:.2} s, {:.0} records/s \
                 (folding {:.2} s, checkpoints {:.2} s); {} users, {} conversations, {} checkpoints; {}",
                opts.into,
                if r.resumed { " (resumed)" } else { "" },
                r.records,
                r.invalid,
                r.in_flight_deltas,
                r.seconds,
                r.rate(),
                r.fold_seconds,
                r.checkpoint_seconds,
                r.users,
                r.conversations,
                r.checkpoints,
                if r.interrupted { "interrupted: run the same command to resume" } else { "complete" }
            );
            Ok(if r.interrupted { ExitCode::from(130) } else { ExitCode::SUCCESS })
        }),
        Command::Promote { name: namespace, drop_old, force, settings } => runtime()?.block_on(async {
            let r = crate::namespace::promote(&settings, &namespace, drop_old, force).await?;
            if r.previous == namespace {
                println!("namespace {namespace} is already live");
            } else {
                println!("promoted {namespace} (was {}): read API instances switch within 0.2 s", r.previous);
            }
            if !r.writer_running {
                eprintln!(
                    "warning: no service runs in namespace {namespace}: readers see its state as of its last write; \
                     start `unread run --namespace {namespace}`"
                );
            }
            if let Some(d) = r.dropped {
                println!(
                    "dropped {}: {} Redis keys, schema {}, groups {:?}, topic {}",
                    r.previous, d.redis_keys, d.schema, d.groups, d.delta_topic
                );
            }
            Ok(ExitCode::SUCCESS)
        }),
        Command::Drop { name: namespace, settings } => runtime()?.block_on(async {
            let d = crate::namespace::drop(&settings, &namespace).await?;
            println!(
                "dropped {namespace}: {} Redis keys, schema {}, groups {:?}, topic {}",
                d.redis_keys, d.schema, d.groups, d.delta_topic
            );
            Ok(ExitCode::SUCCESS)
        }),
        Command::Inspect { what } => runtime()?.block_on(async {
            let (found, name) = match &what {
                InspectWhat::User { id, settings } => {
                    let store = store(settings).await?;
                    let projection = RedisProjection::connect(&settings.redis_url, &settings.ns_redis_prefix()).await?;
                    (crate::ops::inspect_user(settings, &store, &projection, id).await?, format!("user {id:?}"))
                }
                InspectWhat::Conversation { id, settings } => {
                    let store = store(settings).await?;
                    (crate::ops::inspect_conversation(settings, &store, id).await?, format!("conversation {id:?}"))
                }
            };
            match found {
                Some(v) => {
                    println!("{}", serde_json::to_string_pretty(&v)?);
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    eprintln!("unread inspect: no checkpointed state for {name}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }),
        Command::DeadLetter { action: DeadLetterAction::List { limit, kind, settings } } => {
            let topic = settings.topics().dead_letter;
            let all = crate::dead_letter::read_all(&settings.brokers, &topic)?;
            let matching: Vec<_> = all.iter().filter(|d| kind.as_deref().is_none_or(|k| d.kind == k)).collect();
            for d in matching.iter().take(limit) {
                use rdkafka::Message;
                println!(
                    "{}:{} from {}[{}]@{} {}: {}\n    key {}\n    value {}",
                    d.position.0,
                    d.position.1,
                    d.source_topic,
                    d.source_partition,
                    d.source_offset,
                    d.kind,
                    d.reason,
                    crate::dead_letter::preview(d.record.key()),
                    crate::dead_letter::preview(d.record.payload())
                );
            }
            eprintln!(
                "{} dead-letter records, {} matching, {} shown",
                all.len(),
                matching.len(),
                matching.len().min(limit)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::DeadLetter { action: DeadLetterAction::Replay { kind, settings } } => runtime()?.block_on(async {
            let topic = settings.topics().dead_letter;
            let all = crate::dead_letter::read_all(&settings.brokers, &topic)?;
            let matching: Vec<_> = all.into_iter().filter(|d| kind.as_deref().is_none_or(|k| d.kind == k)).collect();
            let n = crate::dead_letter::replay(&settings.brokers, &matching).await?;
            println!("{n} dead-letter records re-published to their source topics");
            Ok(ExitCode::SUCCESS)
        }),
        Command::Projection { action: ProjectionAction::Rebuild { users, settings } } => runtime()?.block_on(async {
            let started = Instant::now();
            let store = store(&settings).await?;
            let projection = RedisProjection::connect(&settings.redis_url, &settings.ns_redis_prefix()).await?;
            let (written, refused) = crate::ops::rebuild_projection(&settings, &store, &projection, &users).await?;
            println!(
                "projection rebuilt: {written} users written, {refused} refused (Redis already newer), {:.2} s",
                started.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

/// Connects to the checkpoint store and applies the migrations.
async fn store(settings: &Settings) -> anyhow::Result<CheckpointStore> {
    let store = CheckpointStore::connect(&settings.database_url, &settings.ns_db_schema(), 4).await?;
    store.migrate().await?;
    Ok(store)
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
