//! The options of `unread run` ([`RunOptions`]): roles, addresses, batching, membership, tokens and limits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::config::{parse_duration, parse_duration_or_ms, Settings};

/// When a partition task commits ([`super::task`]: pre-commit, then Redis → marker → PostgreSQL): after `interval` with
/// anything pending, or as soon as `events` records are pending.
#[derive(Debug, Clone, Copy)]
pub struct FlushPolicy {
    /// Commit (checkpoint) at least this often while records are pending.
    pub interval: Duration,
    /// Commit as soon as this many records are pending.
    pub events: usize,
    /// The fold publishes its changed users to Redis this long after the first change since its last publish
    /// (zero: after every batch).
    pub publish: Duration,
    /// Commit a fan-out task's open Kafka transaction at least this often, also between checkpoints: its deltas
    /// reach the fold only then, and an open transaction holds back every later delta on the partitions it wrote.
    pub transaction: Duration,
    /// The most a fan-out task waits for more records before it applies a batch that did not fill
    /// ([`super::task::linger`]; zero: never).
    pub linger: Duration,
    /// The most input records a fan-out task applies as one batch while it keeps up (`--fanout-batch`; a backlog
    /// takes more: [`super::task::batch_bound`]).
    pub fanout_batch: usize,
}

/// `--fanout-batch`'s default: 1,000 records, which keeps a burst's own reads quick; `unread fold`, and a task
/// whose partition is a backlog behind, batch [`crate::pipeline::MAX_BATCH`].
pub const DEFAULT_FANOUT_BATCH: u64 = 1_000;

/// Options of `unread run`.
#[derive(Debug, Clone, Args)]
pub struct RunOptions {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub settings: Settings,
    /// Which parts to run, comma-separated: fanout, fold, api.
    #[arg(
        help_heading = "Roles",
        long,
        env = "UNREAD_ROLES",
        value_delimiter = ',',
        default_value = "fanout,fold,api"
    )]
    pub roles: Vec<Role>,
    /// Address of the read API (role `api`).
    #[arg(help_heading = "Roles", long, env = "UNREAD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address of `/healthz`, `/readyz` and `/metrics`, served whatever the roles (`docs/operations.md`, "The admin
    /// address"). Port 0: any free port.
    #[arg(help_heading = "Roles", long, env = "UNREAD_ADMIN_LISTEN", default_value = "127.0.0.1:9090")]
    pub admin_listen: SocketAddr,
    /// Commit a partition task's changes to the checkpoint (PostgreSQL) at least this often, e.g. `200ms`: how much
    /// input a restarted task reads again. Not on the live path (see `--publish-interval`). A bare number is
    /// milliseconds (the old `--flush-interval-ms` spelling, still accepted).
    #[arg(help_heading = "Latency and batching", long, alias = "flush-interval-ms", env = "UNREAD_FLUSH_INTERVAL", default_value = "200ms",
          value_parser = parse_duration_or_ms)]
    pub flush_interval: Duration,
    /// Commit a partition task as soon as this many records are pending.
    #[arg(help_heading = "Latency and batching", long, env = "UNREAD_FLUSH_EVENTS", default_value_t = 20_000)]
    pub flush_events: usize,
    /// How long a fold task lets its changed users wait before it writes them to Redis, e.g. `0ms` (after every
    /// batch: while a write runs, the next batch gathers) or `200ms` (fewer, larger writes). At most the flush
    /// interval. This, the transaction interval and the batches are the floor of the live path
    /// (docs/performance.md).
    #[arg(help_heading = "Latency and batching", long, env = "UNREAD_PUBLISH_INTERVAL", default_value = "0ms", value_parser = crate::config::parse_duration_or_zero)]
    pub publish_interval: Duration,
    /// Commit a fan-out task's Kafka transaction this long after it began, e.g. `0ms` (after every batch, once its
    /// deltas are acknowledged: while a commit runs the next batch gathers) or `50ms` (at most the flush
    /// interval): shorter makes deltas visible to the fold sooner, at one commit (a marker per delta partition
    /// written) each time (docs/operations.md, "Fencing"; docs/performance.md).
    #[arg(help_heading = "Latency and batching", long, env = "UNREAD_TRANSACTION_INTERVAL", default_value = "0ms",
          value_parser = crate::config::parse_duration_or_zero)]
    pub transaction_interval: Duration,
    /// The most a fan-out task waits for more records before it applies a batch, e.g. `100ms`, or `0ms` (never). It
    /// waits 1 ms per record of its previous batch, up to this: little at low rates, all of it under heavy load. A
    /// batch that waited longer holds more messages per conversation, so each member gets one delta for more of
    /// them (what it saves: docs/performance.md, "The fan-out lingers under load"). Never while a backlog fills the
    /// batches.
    #[arg(help_heading = "Latency and batching", long, env = "UNREAD_FANOUT_LINGER", default_value = "100ms",
          value_parser = crate::config::parse_duration_or_zero)]
    pub fanout_linger: Duration,
    /// The most input records a fan-out task applies as one batch while its partition keeps up, 1 to 4000. A partition
    /// 8,000 records or more behind (a catch-up, a restart) takes 4,000 whatever this says: there a conversation's
    /// messages in one batch reach each member as one delta, so fewer deltas, Redis writes and checkpoint bytes. Live,
    /// a batch holds a worker and its Kafka transaction while it runs, and a burst's own reads reached their sockets
    /// later in larger ones (4000 against 1000: probes during a burst p99 333 against 271 ms) and in smaller ones (500:
    /// 344 against 308 ms; docs/performance.md, "Batches that follow the backlog").
    #[arg(help_heading = "Latency and batching", long, env = "UNREAD_FANOUT_BATCH", default_value_t = DEFAULT_FANOUT_BATCH,
          value_parser = clap::value_parser!(u64).range(1..=crate::pipeline::MAX_BATCH as u64))]
    pub fanout_batch: u64,
    /// The most bytes of deltas a fan-out task puts in one record of `unread.user-deltas`, e.g. `262144`: a batch's
    /// deltas for one partition travel as JSON arrays up to this size ([`crate::core::delta::pack`]), at a record's
    /// overhead per array rather than per delta (docs/performance.md, "Deltas packed per partition"). `0`: one delta
    /// per record, the only form releases before 2026-11-27 read; set it while such a release still runs the fold
    /// stage in a rolling upgrade (docs/operations.md, "Upgrading"). At most the topic's `max.message.bytes`.
    #[arg(help_heading = "Latency and batching", long, env = "UNREAD_DELTA_RECORD_BYTES", default_value_t = 262_144)]
    pub delta_record_bytes: usize,
    /// An instance that stops heart-beating (killed, paused) loses its partitions after this long, e.g. `3s`: the
    /// pause its partitions see after a SIGKILL (docs/operations.md, "Adding instances or partitions"). At least
    /// the broker's `group.min.session.timeout.ms`.
    #[arg(help_heading = "Group membership and fencing", long, env = "UNREAD_SESSION_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub session_timeout: Duration,
    /// Static group membership: this instance's stable id (e.g. a StatefulSet pod's name), its Kafka
    /// `group.instance.id` in both stages' groups. A restart within --session-timeout gets the same partitions
    /// back without a rebalance; an instance gone for good keeps its partitions idle until the timeout.
    #[arg(help_heading = "Group membership and fencing", long, env = "UNREAD_GROUP_INSTANCE_ID")]
    pub group_instance_id: Option<String>,
    /// One transactional producer per fan-out partition (`{group}.fanout.{p}`), each committing its own
    /// transactions, instead of the default: one producer per instance whose one transaction every fan-out task
    /// produces into and any of them commits for all (lower latency at low rates: docs/performance.md). Always on
    /// with --group-protocol consumer. What each mode fences:
    /// docs/operations.md, "Fencing".
    #[arg(help_heading = "Group membership and fencing", long, env = "UNREAD_PRODUCER_PER_PARTITION")]
    pub producer_per_partition: bool,
    /// Accepted for compatibility: one producer per instance is now the default (`--producer-per-partition`
    /// turns it off).
    #[arg(
        help_heading = "Group membership and fencing",
        long,
        env = "UNREAD_SHARED_PRODUCER",
        hide = true,
        conflicts_with = "producer_per_partition"
    )]
    pub shared_producer: bool,
    /// The consumer group protocol of both stages: `classic` (eager rebalances: every partition of every member
    /// revoked and assigned again) or `consumer` (KIP-848, Kafka 4.0+: the broker reconciles incrementally, so a
    /// member that joins or leaves moves only the partitions that change owner; co-partitioned by the broker's
    /// `range` assignor). docs/operations.md, "Adding instances or partitions".
    #[arg(help_heading = "Group membership and fencing", long, env = "UNREAD_GROUP_PROTOCOL", value_enum, default_value_t = crate::kafka::GroupProtocol::Classic)]
    pub group_protocol: crate::kafka::GroupProtocol,
    /// Run a sampled `unread verify` (Redis against the checkpoint) this often, e.g. `30s`, `5m`; results go to
    /// `/metrics` as `unread_verify_*`. Off when not given.
    #[arg(help_heading = "Background verify", long, env = "UNREAD_VERIFY_EVERY", value_parser = parse_duration)]
    pub verify_every: Option<Duration>,
    /// Users each background verify samples.
    #[arg(help_heading = "Background verify", long, env = "UNREAD_VERIFY_SAMPLE", default_value_t = 1000)]
    pub verify_sample: usize,
    /// Scheduled repair: each background verify rewrites the users that differ from the checkpoint (at the
    /// checkpoint's version: never over newer state), at most --repair-limit a run; counted in
    /// `unread_verify_repaired_users_total`.
    #[arg(help_heading = "Background verify", long, env = "UNREAD_VERIFY_REPAIR", requires = "verify_every")]
    pub repair: bool,
    /// Users one background verify may rewrite (the repair's rate: this many per --verify-every).
    #[arg(help_heading = "Background verify", long, env = "UNREAD_REPAIR_LIMIT", default_value_t = 100)]
    pub repair_limit: usize,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub auth: crate::auth::AuthOptions,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub limits: crate::api::limits::LimitOptions,
    /// Serve the read API without authorization: every caller reads every user. For a demo on loopback only;
    /// without it, `run` refuses to start the API with no key configured.
    #[arg(help_heading = "Tokens", long, env = "UNREAD_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
}

impl RunOptions {
    /// Whether the instance's fan-out tasks share one transactional producer (the default), rather than one per
    /// partition (`--producer-per-partition`). Not with `--group-protocol consumer`: a successor tells a live
    /// previous owner, which it must not fence, from a dead one by describing the group, and the classic
    /// DescribeGroups that librdkafka's `rd_kafka_list_groups` sends answers `GROUP_ID_NOT_FOUND` for a KIP-848
    /// group ([`super::tx::fence::fence`]).
    pub fn one_producer(&self) -> bool {
        !self.producer_per_partition && self.group_protocol == crate::kafka::GroupProtocol::Classic
    }

    /// The API's token verifier: `None` with `--insecure-no-auth`.
    ///
    /// Errors: no key configured and no `--insecure-no-auth`; a key file that does not load.
    pub fn verifier(&self) -> anyhow::Result<Option<Arc<crate::auth::Verifier>>> {
        if self.insecure_no_auth {
            tracing::warn!("--insecure-no-auth: the read API answers every caller about every user");
            return Ok(None);
        }
        match crate::auth::Verifier::from_options(&self.auth)? {
            Some(v) => Ok(Some(Arc::new(v))),
            None => anyhow::bail!(
                "the read API needs a key to verify tokens (--auth-hs256-secret, --auth-public-key or --auth-jwks, \
                 or UNREAD_AUTH_*); pass --insecure-no-auth to serve without authorization"
            ),
        }
    }
}

/// A part of `unread run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// The fan-out stage.
    Fanout,
    /// The fold stage.
    Fold,
    /// The read API.
    Api,
}
