//! The `unread` command line: one binary, one subcommand per job. Each subcommand's arguments and its `run` live
//! in a module of their own ([`fold`], [`service`], [`ops`], [`namespaces`], [`dead_letter`]); the reports they
//! print format themselves ([`std::fmt::Display`]) in the modules that produce them.

pub mod config_file;
pub mod dead_letter;
pub mod fold;
pub mod namespaces;
pub mod ops;
pub mod service;
pub mod watch;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::checkpoint::store::CheckpointStore;
use crate::config::Settings;
use crate::service::RunOptions;

/// Exact unread counts for chat apps.
#[derive(Debug, Parser)]
#[command(name = "unread", version, about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
    /// How the clients reach managed services (TLS, SASL), for every subcommand.
    #[command(flatten)]
    pub clients: crate::clients::ClientSettings,
    /// The log's format on stderr: `text` (colours on a terminal) or `json` (one object a line: `timestamp`,
    /// `level`, `target`, `fields` with the message and every field, for Loki or Elasticsearch). The filter is
    /// `UNREAD_LOG` (default `info,rdkafka=warn,sqlx=warn`).
    #[arg(long, global = true, env = "UNREAD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// A TOML file of settings, each key a flag's long name (`brokers = "kafka:9092"`, `flush-interval = "200ms"`);
    /// flags and `UNREAD_*` variables win over it (docs/operations.md, "Configuration").
    #[arg(long, global = true, env = "UNREAD_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

/// How a report is printed (`--output`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// For people: tables and sentences.
    #[default]
    Text,
    /// For scripts: one JSON document (`docs/operations.md` gives each command's fields).
    Json,
}

/// The log's format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `timestamp LEVEL target: message key=value …`, coloured only on a terminal.
    Text,
    /// One JSON object a line.
    Json,
}

/// Installs the process's log subscriber on stderr: `UNREAD_LOG`'s filter, in `format`.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("UNREAD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rdkafka=warn,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        // Colours only on a terminal: a log file or a collector gets plain `key=value` text.
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run fan-out and fold in-process over a JSON Lines file of events and print every user's final counts.
    ///
    /// Output: one JSON object per user who is a member of at least one conversation, in the contract's reader
    /// shape, sorted by user_id. Invalid lines stop the run with their line number unless --skip-invalid.
    Fold(fold::FoldArgs),
    /// Run the service: fan-out and fold stages as consumer-group members, and the read API.
    ///
    /// Consumes the input topics, materializes every user's counts into Redis and checkpoints state with the input
    /// offsets to PostgreSQL (migrations applied at start). Stops cleanly on SIGINT/SIGTERM.
    Run(Box<RunOptions>),
    /// Create the topics of topology/topics.toml (under --topic-prefix) and check existing ones' partition counts.
    Topics {
        /// What to do with them.
        #[command(subcommand)]
        action: service::TopicsAction,
    },
    /// Validate JSON Lines of events and publish each to its topic, keyed as the contract says.
    ///
    /// Invalid lines are reported with their line number and not sent; they make the exit status non-zero.
    Produce(service::ProduceArgs),
    /// Apply the PostgreSQL migrations (also done by `unread run`).
    Migrate(service::MigrateArgs),
    /// Show, per input partition of both stages, the end offset, the checkpointed offset and the lag.
    Lag(ops::LagArgs),
    /// Compare the Redis projection with the PostgreSQL checkpoint, or with another namespace's; exit 1 when
    /// anything differs.
    ///
    /// Reports users checked, users ahead in Redis (flushed after the checkpoint: not compared), users that differ
    /// and their first differences field by field. --repair rewrites the differing users from the trusted side:
    /// the checkpoint, or with --against the other namespace.
    Verify(ops::VerifyArgs),
    /// Fold the retained input log into another namespace (Redis prefix, PostgreSQL schema) while the service runs.
    ///
    /// Shows progress and records/s; checkpoints as it goes, so running the same command again after an
    /// interruption resumes. Exit 1 when refused (e.g. --from earliest on a log retention truncated).
    Replay(namespaces::ReplayArgs),
    /// Make a namespace the one every read API instance serves (atomically: no request fails).
    Promote(namespaces::PromoteArgs),
    /// Delete a namespace: Redis keys, PostgreSQL schema, consumer groups, delta topic (not the live one, not one
    /// a service runs in).
    Drop(namespaces::DropArgs),
    /// Print the state of one user or conversation as JSON, for support and debugging.
    Inspect {
        /// A user or a conversation.
        #[command(subcommand)]
        what: ops::InspectWhat,
    },
    /// Inspect or re-publish the records of the dead-letter topic.
    DeadLetter {
        /// List or replay.
        #[command(subcommand)]
        action: dead_letter::DeadLetterAction,
    },
    /// Mint a bearer token (HS256, from the configured secret) for development and tests; prints it.
    Token(service::TokenArgs),
    /// Follow a user's stream (WebSocket) and print each message as one JSON line.
    Watch(watch::WatchArgs),
    /// Operate on the Redis projection.
    Projection {
        /// What to do with it.
        #[command(subcommand)]
        action: ops::ProjectionAction,
    },
}

/// Runs the parsed command line; returns the process's exit status.
///
/// Errors: whatever the subcommand reports (unreadable input, a service unreachable, …), with context.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    crate::clients::init(&cli.clients)?;
    match cli.command {
        Command::Fold(args) => args.run(),
        Command::Run(opts) => {
            block_on(crate::service::run(*opts, crate::shutdown::signal())).map(|()| ExitCode::SUCCESS)
        }
        Command::Topics { action } => action.run(),
        Command::Produce(args) => args.run(),
        Command::Migrate(args) => args.run(),
        Command::Lag(args) => args.run(),
        Command::Verify(args) => args.run(),
        Command::Replay(args) => args.run(),
        Command::Promote(args) => args.run(),
        Command::Drop(args) => args.run(),
        Command::Inspect { what } => what.run(),
        Command::DeadLetter { action } => action.run(),
        Command::Projection { action } => action.run(),
        Command::Token(args) => args.run(),
        Command::Watch(args) => args.run(),
    }
}

/// Runs `f` to completion on a new multi-threaded runtime.
fn block_on<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    rt.block_on(f)
}

/// Connects to the namespace's checkpoint store and applies the migrations.
async fn store(settings: &Settings) -> anyhow::Result<CheckpointStore> {
    let store = CheckpointStore::connect(&settings.database_url, &settings.ns_db_schema(), 4).await?;
    store.migrate().await?;
    Ok(store)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// `unread run --fanout-batch`: 1,000 unless given, at most `unread fold`'s bound.
    #[test]
    fn the_fanout_batch_defaults_to_1000_and_is_bounded_by_the_fold_s() {
        use clap::Parser;
        let batch = |args: &[&str]| {
            let cli = super::Cli::try_parse_from([&["unread", "run"], args].concat())?;
            let super::Command::Run(opts) = cli.command else { panic!("not run") };
            Ok::<_, clap::Error>(opts.fanout_batch)
        };
        assert_eq!(batch(&[]).unwrap(), crate::service::options::DEFAULT_FANOUT_BATCH);
        assert_eq!(batch(&["--fanout-batch", "4000"]).unwrap(), crate::pipeline::MAX_BATCH as u64);
        assert!(batch(&["--fanout-batch", "0"]).is_err());
        assert!(batch(&["--fanout-batch", "4001"]).is_err());
    }
}
