//! `unread run`, `unread migrate`, `unread topics create` and `unread produce`: running and feeding the service.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{block_on, store};
use crate::config::Settings;

/// `unread topics ...`
#[derive(Debug, Subcommand)]
pub enum TopicsAction {
    /// Create missing topics; fail if an existing one has another partition count.
    Create {
        /// Override the partition count of every topic but the dead-letter one (default: topology/topics.toml).
        #[arg(long)]
        partitions: Option<i32>,
        #[command(flatten)]
        #[allow(missing_docs)]
        settings: Settings,
    },
}

impl TopicsAction {
    /// Creates the topics and prints one line per topic.
    ///
    /// Errors: as [`crate::topology::create`].
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let TopicsAction::Create { partitions, settings } = self;
        block_on(async {
            for line in crate::topology::create(&settings.brokers, &settings.topics(), partitions).await? {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        })
    }
}

/// Arguments of `unread produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Events as JSON Lines; gunzipped when the name ends in .gz; `-` reads stdin.
    file: String,
    #[command(flatten)]
    settings: Settings,
}

impl ProduceArgs {
    /// Publishes the file; exit 1 when a line was invalid or a delivery failed.
    ///
    /// Errors: as [`crate::produce::produce`].
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let r = crate::produce::produce(&self.settings.brokers, &self.settings.topic_prefix, &self.file)?;
        eprintln!("{r}");
        Ok(if r.invalid == 0 && r.failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
    }
}

/// Arguments of `unread migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    settings: Settings,
}

impl MigrateArgs {
    /// Applies the migrations to the namespace's schema.
    ///
    /// Errors: PostgreSQL unreachable or a migration failing.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        block_on(async {
            store(&self.settings).await?;
            println!("migrations applied to schema {}", self.settings.ns_db_schema());
            Ok(ExitCode::SUCCESS)
        })
    }
}

/// Arguments of `unread token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The user the token is for (`sub`).
    #[arg(long)]
    user: String,
    /// A service token: reads any user, may use the batch route.
    #[arg(long)]
    service: bool,
    /// How long it is valid, e.g. `1h`, `30m`.
    #[arg(long, default_value = "1h", value_parser = crate::config::parse_duration)]
    ttl: std::time::Duration,
    #[command(flatten)]
    auth: crate::auth::AuthOptions,
}

impl TokenArgs {
    /// Prints the token.
    ///
    /// Errors: no HS256 secret configured.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        println!("{}", crate::auth::mint(&self.auth, &self.user, self.service, self.ttl)?);
        Ok(ExitCode::SUCCESS)
    }
}
