//! Connection settings shared by every subcommand that talks to Kafka, Redis or PostgreSQL. Each is a flag and an
//! `UNREAD_*` environment variable; the defaults match `scripts/stack up` (native mode).

use clap::Args;

/// Where the services are and which namespace this instance uses.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Kafka bootstrap servers, comma-separated host:port.
    #[arg(long, env = "UNREAD_BROKERS", default_value = "127.0.0.1:39092")]
    pub brokers: String,
    /// Redis URL of the projection.
    #[arg(long, env = "UNREAD_REDIS_URL", default_value = "redis://127.0.0.1:36379")]
    pub redis_url: String,
    /// PostgreSQL URL of the checkpoint store.
    #[arg(long, env = "UNREAD_DATABASE_URL", default_value = "postgres://unread@127.0.0.1:35432/unread")]
    pub database_url: String,
    /// PostgreSQL schema holding the checkpoint tables (created if missing; letters, digits and _ only).
    #[arg(long, env = "UNREAD_DB_SCHEMA", default_value = "unread")]
    pub db_schema: String,
    /// Prefix of every topic name (e.g. `test1.` gives `test1.unread.user-events`).
    #[arg(long, env = "UNREAD_TOPIC_PREFIX", default_value = "")]
    pub topic_prefix: String,
    /// Consumer group id; the fan-out stage uses `{group}.fanout`, the fold stage `{group}.fold`.
    #[arg(long, env = "UNREAD_GROUP_ID", default_value = "unread")]
    pub group_id: String,
    /// Prefix of every Redis key of the projection.
    #[arg(long, env = "UNREAD_REDIS_PREFIX", default_value = "unread:")]
    pub redis_prefix: String,
}
