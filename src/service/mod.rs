//! `unread run`: the fan-out stage, the fold stage and the read API in one process (or any subset of them).
//!
//! The imperative shell around the pure core: consumer-group members ([`group`]) hand records of each assigned
//! partition to a task of its own ([`fanout_stage`], [`fold_stage`]), which owns that partition's state, writes the
//! Redis projection and checkpoints to PostgreSQL.

pub mod fanout_stage;
pub mod fold_stage;
pub mod group;
pub mod prepare;
pub mod records;
pub mod shared_transaction;
pub mod task;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rdkafka::error::KafkaError;
use tokio::sync::watch;
use tracing::info;

use crate::checkpoint::store::{CheckpointStore, StoreError};
use crate::checkpoint::Stage;
use crate::config::{parse_duration, parse_duration_or_ms, Settings};
use crate::kafka::ProducerSlot;
use crate::metrics::{Assignment, Metrics};
use crate::projection::redis::RedisProjection;
use crate::projection::ProjectionError;
use crate::topology::Topics;

/// When a partition task commits ([`task`]: pre-commit, then Redis → marker → PostgreSQL): after `interval` with
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
    /// ([`task::linger`]; zero: never).
    pub linger: Duration,
}

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
    /// waits 1 ms per record of its previous batch, up to this: about 3 ms at 1,000 msg/s on 8 partitions, the whole
    /// of it from about 10,000 msg/s. A batch that waited longer holds more messages per conversation, so each
    /// member gets one delta for more of them: at 20,000 msg/s less CPU per update and a lower latency
    /// (docs/performance.md, "The fan-out lingers under load"). Never while a backlog fills the batches.
    #[arg(help_heading = "Latency and batching", long, env = "UNREAD_FANOUT_LINGER", default_value = "100ms",
          value_parser = crate::config::parse_duration_or_zero)]
    pub fanout_linger: Duration,
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
    /// group ([`fanout_stage::fence`]).
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

/// Runs a sampled verify of the namespace every `every` for as long as the process runs, into the metrics.
fn spawn_verifier(settings: Settings, shared: &Shared, every: Duration, sample: usize, repair: Option<usize>) {
    let (store, projection, metrics) = (shared.store.clone(), shared.projection.clone(), shared.metrics.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let quiet = &mut |_, _| {};
            match crate::state::verify::verify(&settings.topics(), &store, &projection, (Some(sample), repair), quiet)
                .await
            {
                Ok(r) => {
                    metrics.verified(r.checked, r.differing.len(), r.ahead);
                    metrics.repaired(r.repaired);
                    if !r.differing.is_empty() {
                        tracing::warn!(differing = r.differing.len(), checked = r.checked, first = ?r.differing.first(), "background verify: Redis differs from the checkpoint");
                    }
                }
                Err(e) => {
                    metrics.verify_failed();
                    tracing::warn!(error = %format!("{e:#}"), "background verify failed");
                }
            }
        }
    });
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

/// What every partition task shares.
pub struct Shared {
    /// The namespace's topics.
    pub topics: Topics,
    /// The namespace's checkpoint store.
    pub store: CheckpointStore,
    /// The namespace's projection.
    pub projection: RedisProjection,
    /// The producer of the fold's dead letters (each fan-out task has its own, transactional).
    pub producer: ProducerSlot,
    /// The Kafka bootstrap servers.
    pub brokers: String,
    /// What the fan-out's transactional ids start with: its consumer group, `{group}.fanout`; the instance's shared
    /// producer's id is `{group}.fanout.{instance}`, partition `p`'s own (`--producer-per-partition`)
    /// `{group}.fanout.{p}`.
    pub transactional_prefix: String,
    /// When tasks flush.
    pub flush: FlushPolicy,
    /// When the fan-out read-diffuses a conversation.
    pub diffusion: crate::core::hybrid::Diffusion,
    /// How deltas go into records of `unread.user-deltas`, and where a user's events are.
    pub deltas: DeltaRecords,
    /// Where the producers put a conversation's (or list's) events on `unread.conversation-events`; 0 partitions on
    /// an instance without the fan-out, which does not read it.
    pub conversations: crate::kafka::Placement,
    /// Fault injection for tests (`UNREAD_FAULT_PRODUCE_DELAY`, e.g. `3s`): the fan-out sleeps this long between
    /// its lease check and producing a batch's deltas, the window in which a paused task becomes a zombie.
    pub produce_delay: Option<std::time::Duration>,
    /// The service's metrics.
    pub metrics: Arc<Metrics>,
    /// This process, as named in partition leases ([`owner_name`]).
    pub owner: String,
    /// The partitions' starts made before the assignment by a static member ([`prepare`]).
    pub prepared: prepare::Preparations,
    /// The instance's one transaction of every fan-out task ([`shared_transaction`]); `None` with
    /// `--producer-per-partition`.
    pub shared_transaction: Option<shared_transaction::SharedTransaction>,
    /// The previous owners' producers this instance fenced, and when ([`fanout_stage::fence`]).
    pub fences: fanout_stage::Fences,
}

/// How the fan-out packs deltas into records of `unread.user-deltas` ([`crate::core::delta::pack`]), and how the
/// fold checks that a record's deltas belong to its partition.
#[derive(Debug, Clone, Copy)]
pub struct DeltaRecords {
    /// The topic's partitions, the same as `unread.user-events`' (co-partitioned); 0 on an instance without the
    /// stages, where the topic need not exist.
    pub partitions: i32,
    /// The most bytes of deltas in one record (`--delta-record-bytes`); 0: one delta per record.
    pub max_bytes: usize,
    /// The input producers' partitioner (`--partitioner`).
    pub partitioner: crate::kafka::Partitioner,
}

impl DeltaRecords {
    /// The partition of `user_id`'s deltas: where the input producers' partitioner puts the user's own events
    /// ([`DeltaRecords::users`]), so that one fold task owns both.
    ///
    /// Panics when the topic's partitions are unknown (0): only the stages call it, and they need the topic.
    pub fn partition_of(&self, user_id: &str) -> i32 {
        self.users().of(user_id.as_bytes())
    }

    /// Where the producers put a user's events on `unread.user-events` (co-partitioned with the deltas).
    pub fn users(&self) -> crate::kafka::Placement {
        crate::kafka::Placement { partitioner: self.partitioner, partitions: self.partitions }
    }
}

impl From<StoreError> for TaskError {
    fn from(e: StoreError) -> Self {
        TaskError::State(e.into())
    }
}

impl From<ProjectionError> for TaskError {
    fn from(e: ProjectionError) -> Self {
        TaskError::State(e.into())
    }
}

impl Shared {
    /// The transactional id fan-out partition `p` writes its deltas with: the instance's shared producer's, or
    /// with `--producer-per-partition` `{group}.fanout.{p}`. Recorded with the partition's lease, so that a
    /// successor that takes the lease unreleased fences it.
    pub fn transactional_id(&self, p: i32) -> String {
        match &self.shared_transaction {
            Some(t) => t.id().to_owned(),
            None => format!("{}.{p}", self.transactional_prefix),
        }
    }

    /// Where the tasks commit partition state ([`crate::state::commit`]).
    pub fn home(&self) -> crate::state::commit::Home<'_> {
        let (topics, store, projection, metrics) = (&self.topics, &self.store, &self.projection, &*self.metrics);
        crate::state::commit::Home { topics, store, projection, metrics }
    }
}

/// Why a partition task stopped. The dispatcher starts it again from its checkpoint, except after a fencing,
/// when another task owns the partition.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The checkpoint store failed (still after retries) or fenced the task, Redis failed or holds a malformed
    /// hash, or a checkpointed state does not decode ([`crate::state::StateError`]).
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// A Kafka call failed; `doing` says which.
    #[error("{doing}: {source}")]
    Kafka {
        /// What the task was doing, e.g. `producing a delta`.
        doing: &'static str,
        /// The client's error.
        #[source]
        source: KafkaError,
    },
    /// The runtime stopped while a checkpoint ran beside the task (the process is exiting).
    #[error("the runtime stopped during a checkpoint")]
    Stopped,
}

impl TaskError {
    /// The `map_err` of a Kafka call.
    pub fn kafka(doing: &'static str) -> impl FnOnce(KafkaError) -> TaskError {
        move |source| TaskError::Kafka { doing, source }
    }

    /// Whether another task took the partition's lease, or Kafka fenced the task's transactional producer (a
    /// successor initialized the same transactional id).
    pub fn is_fenced(&self) -> bool {
        matches!(self, TaskError::State(crate::state::StateError::Store(StoreError::Fenced(_))))
            || self.is_kafka_fenced()
    }

    /// Whether Kafka fenced the task's transactional producer: what a zombie fan-out's late batch meets.
    pub fn is_kafka_fenced(&self) -> bool {
        match self {
            TaskError::Kafka { source: KafkaError::Transaction(e), .. } => is_fenced_code(e.code()),
            TaskError::Kafka { source: KafkaError::MessageProduction(code), .. } => is_fenced_code(*code),
            _ => false,
        }
    }
}

/// Whether a Kafka error code says a successor initialized the producer's transactional id (librdkafka's own
/// `_FENCED`, or the broker's `PRODUCER_FENCED` / `INVALID_PRODUCER_EPOCH`).
pub fn is_fenced_code(code: rdkafka::types::RDKafkaErrorCode) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{Fenced, InvalidProducerEpoch, ProducerFenced};
    matches!(code, Fenced | ProducerFenced | InvalidProducerEpoch)
}

/// Starts a stage's partition task with `run`, its end logged by [`logged`].
fn task_spawner<F, Fut>(shared: &Arc<Shared>, stage: Stage, run: F) -> group::SpawnTask
where
    F: Fn(Arc<Shared>, group::PartitionInput) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), TaskError>> + Send + 'static,
{
    let shared = shared.clone();
    Arc::new(move |input| {
        let (sh, p) = (shared.clone(), input.partition);
        let task = run(sh.clone(), input);
        tokio::spawn(async move { logged(stage, p, &sh.metrics, task.await) })
    })
}

/// Logs how a partition task ended (also when nobody awaits it any more: a revoked task ends on its own) and
/// counts fencings.
fn logged(stage: Stage, partition: i32, metrics: &Metrics, result: Result<(), TaskError>) -> Result<(), TaskError> {
    match &result {
        Ok(()) => tracing::debug!(%stage, partition, "task ended"),
        Err(e) if e.is_fenced() => {
            metrics.fenced(e.is_kafka_fenced());
            tracing::warn!(%stage, partition, error = %e, "task fenced: another task owns the partition now");
        }
        Err(e) => tracing::warn!(%stage, partition, error = %e, "task failed"),
    }
    result
}

/// This process as named in partition leases: `{hostname or "host"}:{pid}`, after `{instance}@` for a static
/// member (`--group-instance-id`), so that its next incarnation finds what it held ([`prepare`]).
fn owner_name(instance: Option<&str>) -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "host".into());
    let static_member = instance.map(|id| format!("{id}@")).unwrap_or_default();
    format!("{static_member}{host}:{}", std::process::id())
}

/// Connects to the namespace's stores (applying the migrations) and builds what the tasks share; a restarted static
/// member's preparations start here ([`prepare`]).
async fn connect(opts: &RunOptions) -> anyhow::Result<Arc<Shared>> {
    let s = &opts.settings;
    let ttl = s.checked_projection_ttl()?;
    // Kafka answers and accepts us (credentials, TLS) before anything joins a group (issue 23: fail fast). The
    // three services are reached at once: a restart waits for the slowest, not for their sum.
    let (brokers, started) = (s.brokers.clone(), std::time::Instant::now());
    let ms = move || started.elapsed().as_millis();
    let kafka = async {
        let (topics, stages) = (s.topics(), stages(&opts.roles));
        let counts = tokio::task::spawn_blocking(move || partitions_of(&brokers, &topics, &stages));
        anyhow::Ok((counts.await.context("checking Kafka")??, ms()))
    };
    let transactional_prefix = s.stage_group(Stage::FanOut);
    let store = async {
        let store =
            CheckpointStore::connect(&s.database_url, &s.ns_db_schema(), 20).await.context("checkpoint store")?;
        let connected = ms();
        store.migrate().await?;
        let migrated = ms();
        // A restarted static member reads what it held and starts its producers' connections now.
        let producers = (!opts.one_producer()).then_some((s.brokers.as_str(), transactional_prefix.as_str()));
        let early = match &opts.group_instance_id {
            Some(id) => Some(prepare::early(&store, &stages(&opts.roles), id, producers).await),
            None => None,
        };
        anyhow::Ok((store, connected, migrated, early))
    };
    let projection = async {
        let projection = RedisProjection::connect(&s.redis_url, &s.ns_redis_prefix()).await.context("projection")?;
        anyhow::Ok((projection.with_ttl(ttl), ms()))
    };
    let (
        ((conversation_partitions, delta_partitions), kafka_ms),
        (store, postgres_ms, migrated_ms, early),
        (projection, redis_ms),
    ) = tokio::try_join!(kafka, store, projection)?;
    info!(kafka_ms, postgres_ms, migrated_ms, redis_ms, "connected");
    let partitioner = crate::kafka::Partitioner::configured();
    let owner = owner_name(opts.group_instance_id.as_deref());
    // The shared producer's instance: a static member's id, else this process (its owner name, `host:pid`).
    let instance = opts.group_instance_id.as_deref().unwrap_or(&owner);
    let shared_transaction = opts
        .one_producer()
        .then(|| shared_transaction::SharedTransaction::new(format!("{transactional_prefix}.{instance}")));
    let shared = Arc::new(Shared {
        topics: s.topics(),
        store,
        projection,
        producer: ProducerSlot::new(&s.brokers)?,
        brokers: s.brokers.clone(),
        transactional_prefix: transactional_prefix.clone(),
        flush: FlushPolicy {
            interval: opts.flush_interval,
            events: opts.flush_events,
            transaction: opts.transaction_interval.min(opts.flush_interval),
            publish: opts.publish_interval.min(opts.flush_interval),
            linger: opts.fanout_linger.min(opts.flush_interval),
        },
        diffusion: s.diffusion(),
        deltas: DeltaRecords { partitions: delta_partitions, max_bytes: opts.delta_record_bytes, partitioner },
        conversations: crate::kafka::Placement { partitioner, partitions: conversation_partitions },
        produce_delay: std::env::var("UNREAD_FAULT_PRODUCE_DELAY")
            .ok()
            .and_then(|d| humantime::parse_duration(&d).ok()),
        metrics: Arc::new(Metrics::default()),
        owner,
        prepared: Default::default(),
        shared_transaction,
        fences: Default::default(),
    });
    if let (Some(early), Some(id)) = (early, &opts.group_instance_id) {
        prepare::start(&shared, early, id);
    }
    Ok(shared)
}

/// The partition counts of `unread.conversation-events` and `unread.user-deltas` (0 for one that is absent), from
/// the broker's metadata. A blocking call.
///
/// Errors: Kafka does not answer; a topic the `stages` need is missing ([`missing_topics`]); `unread.user-events`
/// and `unread.user-deltas` have different partition counts (a user's events and deltas would not meet in one task).
fn partitions_of(brokers: &str, topics: &Topics, stages: &[Stage]) -> anyhow::Result<(i32, i32)> {
    let counts = crate::kafka::partition_counts(brokers)?;
    missing_topics(topics, stages, &counts)?;
    let count = |topic: &str| counts.get(topic).copied().unwrap_or(0);
    let (users, deltas) = (count(&topics.user_events), count(&topics.user_deltas));
    if users > 0 && deltas > 0 && users != deltas {
        anyhow::bail!(
            "{} has {users} partitions and {} {deltas}: they must be co-partitioned (the same count)",
            topics.user_events,
            topics.user_deltas
        );
    }
    Ok((count(&topics.conversation_events), deltas))
}

/// The running parts of `unread run`, each a task of `tasks` that ends when `stop` turns true.
struct Parts {
    tasks: tokio::task::JoinSet<anyhow::Result<()>>,
    assignments: Vec<(Stage, Arc<Assignment>)>,
    stop: watch::Receiver<bool>,
}

impl Parts {
    /// Starts one stage: its group member ([`members`]) subscribes to the stage's topics ([`stage_topics`]) and
    /// its dispatcher runs one task per partition.
    ///
    /// Errors: the subscription fails.
    fn start_stage(
        &mut self,
        topics: &Topics,
        stage: Stage,
        member: group::Dispatcher,
        spawn: group::SpawnTask,
    ) -> anyhow::Result<()> {
        member.subscribe(&stage_topics(topics, stage).0)?;
        let dispatcher = member;
        self.assignments.push((stage, dispatcher.assignment.clone()));
        self.tasks.spawn(dispatcher.run(stage, spawn, self.stop.clone()));
        Ok(())
    }

    /// Starts the read API ([`crate::app`]) on its listener when given, following the live pointer, and the admin
    /// address ([`crate::api::admin`]) on `admin`, both bound at start.
    ///
    /// Errors: Redis unreachable, or the gateway's producer cannot be created.
    async fn start_http(
        &mut self,
        opts: &RunOptions,
        api: Option<(Option<Arc<crate::auth::Verifier>>, tokio::net::TcpListener)>,
        admin: tokio::net::TcpListener,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<()> {
        let s = &opts.settings;
        let api = match api {
            Some((auth, listener)) => {
                let producer = Some(crate::kafka::gateway_producer(&s.brokers)?);
                let (limits, metrics, stop) = (opts.limits.clone(), metrics.clone(), self.stop.clone());
                let deps = crate::app::ApiDeps { settings: s.clone(), auth, limits, metrics, producer, stop };
                Some((crate::app::build(deps).await?, listener))
            }
            None => None,
        };
        let state = crate::app::admin(s, api.as_ref().map(|(a, _)| a), self.assignments.clone(), metrics).await?;
        if let Some((api, listener)) = api {
            info!(addr = %listener.local_addr().context("the API's address")?, "read API listening");
            let stop = self.stop.clone();
            self.tasks.spawn(async move {
                crate::app::serve(listener, api, stop).await;
                Ok(())
            });
        }
        info!(addr = %admin.local_addr().context("the admin address")?, "admin address listening");
        let (limits, stop) = (opts.limits.clone(), self.stop.clone());
        self.tasks.spawn(async move {
            crate::app::serve_admin(admin, state, &limits, stop).await;
            Ok(())
        });
        Ok(())
    }
}

/// Runs until SIGINT or SIGTERM, then stops the stages cleanly (each task flushes and checkpoints).
///
/// Errors: a service unreachable at start, the API address in use, or a part stopping unexpectedly.
pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let s = &opts.settings;
    // Refuse before connecting anything or joining a group: no key, or the API's or the admin address taken.
    let api = match opts.roles.contains(&Role::Api) {
        true => Some((opts.verifier()?, crate::app::bind(opts.listen).await?)),
        false => None,
    };
    let admin = crate::app::bind_admin(opts.admin_listen).await?;
    let membership = crate::kafka::Membership {
        session_timeout: opts.session_timeout,
        instance_id: opts.group_instance_id.clone(),
        protocol: opts.group_protocol,
        client_id: Some(owner_name(opts.group_instance_id.as_deref())),
    };
    // Created while the services are checked, joined once all answered: their clients connect meanwhile.
    let members = members(&opts, &membership)?;
    let shared = connect(&opts).await?;
    if opts.group_protocol == crate::kafka::GroupProtocol::Consumer && opts.group_instance_id.is_some() {
        // Measured with Kafka 4.1 and librdkafka 2.12 (docs/performance.md, "Rolling restart"): a restart kept the member's
        // partitions idle for the whole session timeout.
        tracing::warn!(
            "--group-protocol consumer with --group-instance-id: a restarted member's partitions may wait for the \
               broker's session timeout; prefer one of the two"
        );
    }
    if let Some(every) = opts.verify_every {
        let repair = opts.repair.then_some(opts.repair_limit);
        spawn_verifier(s.clone(), &shared, every, opts.verify_sample, repair);
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut parts = Parts { tasks: tokio::task::JoinSet::new(), assignments: Vec::new(), stop: stop_rx };
    for (stage, member) in members {
        let spawn = match stage {
            Stage::FanOut => task_spawner(&shared, stage, fanout_stage::run),
            Stage::Fold => task_spawner(&shared, stage, fold_stage::run),
        };
        parts.start_stage(&shared.topics, stage, member, spawn)?;
    }
    shared.metrics.set_assignments(parts.assignments.clone());
    parts.start_http(&opts, api, admin, shared.metrics.clone()).await?;
    wait_for_stop(parts.tasks, stop_tx, &shared).await
}

/// The topics a stage's member subscribes to, and the one whose records its tasks take first: the fold takes user
/// events first, so a read ack does not wait behind a backlog of deltas (its state is order-proof across the two).
fn stage_topics(topics: &Topics, stage: Stage) -> (Vec<&str>, Option<&str>) {
    match stage {
        Stage::FanOut => (vec![&topics.conversation_events], None),
        Stage::Fold => (vec![&topics.user_events, &topics.user_deltas], Some(&topics.user_events)),
    }
}

/// Fails when a topic the `stages` subscribe to, or the fan-out's output `unread.user-deltas`, is not in the
/// broker's metadata (`counts`): a consumer subscribed to a missing topic would wait, never ready, until its next
/// metadata refresh (5 minutes) and then get nothing, and the fan-out packs its deltas by that topic's partitions,
/// so the process stops at once instead, before joining any group (issue 23: fail fast).
///
/// Errors: names the missing topics and the command that creates them.
fn missing_topics(topics: &Topics, stages: &[Stage], counts: &HashMap<String, i32>) -> anyhow::Result<()> {
    let mut missing: Vec<&str> = stages.iter().flat_map(|&s| stage_topics(topics, s).0).collect();
    if stages.contains(&Stage::FanOut) && !missing.contains(&topics.user_deltas.as_str()) {
        missing.push(&topics.user_deltas); // the fan-out writes it, and packs its records by its partitions
    }
    missing.retain(|t| !counts.contains_key(*t));
    match missing.len() {
        0 => Ok(()),
        1 => anyhow::bail!("topic {} does not exist; create it with `unread topics create`", missing[0]),
        _ => anyhow::bail!("topics {} do not exist; create them with `unread topics create`", missing.join(", ")),
    }
}

/// The group members (`{group}.{stage}`) of the stages in `opts.roles`, created and not subscribed: nothing joins
/// a group before every service answered (issue 23: fail fast).
///
/// Errors: a client cannot be created.
fn members(
    opts: &RunOptions,
    membership: &crate::kafka::Membership,
) -> anyhow::Result<Vec<(Stage, group::Dispatcher)>> {
    let (s, topics) = (&opts.settings, opts.settings.topics());
    let member = |stage| group::member(&s.brokers, &s.stage_group(stage), stage_topics(&topics, stage).1, membership);
    stages(&opts.roles).into_iter().map(|stage| Ok((stage, member(stage)?))).collect()
}

/// The stages among `roles` (the API is none), fan-out first.
fn stages(roles: &[Role]) -> Vec<Stage> {
    let stages = [(Role::Fanout, Stage::FanOut), (Role::Fold, Stage::Fold)];
    stages.into_iter().filter(|(role, _)| roles.contains(role)).map(|(_, stage)| stage).collect()
}

/// Marks this process's leases draining at a clean stop, so that a restarted static member waits for each task's
/// last checkpoint and Kafka transaction ([`prepare`]); it runs beside the drain (the tasks' releases and the mark
/// may come in either order). Bounded by 1 s; a failure is only logged (that member then starts as it would after
/// a crash).
async fn mark_draining(shared: &Shared) {
    match tokio::time::timeout(Duration::from_secs(1), shared.store.mark_draining(&shared.owner)).await {
        Ok(Ok(n)) => tracing::debug!(leases = n, "leases marked draining"),
        Ok(Err(e)) => tracing::warn!(error = %e, "marking the leases draining"),
        Err(_) => tracing::warn!("marking the leases draining took over 1 s; stopping without"),
    }
}

/// Waits for SIGINT, SIGTERM or a part ending, then tells every part to stop and waits for them.
async fn wait_for_stop(
    mut tasks: tokio::task::JoinSet<anyhow::Result<()>>,
    stop: watch::Sender<bool>,
    shared: &Shared,
) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT: stopping"),
        _ = term.recv() => info!("SIGTERM: stopping"),
        Some(done) = tasks.join_next() => {
            let _ = stop.send(true);
            done.context("a stage panicked")??;
            anyhow::bail!("a stage stopped unexpectedly");
        }
    }
    let marking = mark_draining(shared); // beside the drain: a task's release may come first
    let _ = stop.send(true);
    marking.await;
    while let Some(done) = tasks.join_next().await {
        done.context("a stage panicked")??;
    }
    info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_topics_names_each_topic_a_stage_reads_or_writes_and_the_command() {
        let topics = Topics::new("t.");
        let mut counts: HashMap<String, i32> = [(topics.conversation_events.clone(), 8)].into_iter().collect();
        let err = missing_topics(&topics, &[Stage::FanOut], &counts).unwrap_err().to_string();
        assert_eq!(err, "topic t.unread.user-deltas does not exist; create it with `unread topics create`");
        let err = missing_topics(&topics, &[Stage::FanOut, Stage::Fold], &counts).unwrap_err().to_string();
        assert_eq!(
            err,
            "topics t.unread.user-events, t.unread.user-deltas do not exist; create them with `unread topics create`"
        );
        counts.insert(topics.user_events.clone(), 8);
        let err = missing_topics(&topics, &[Stage::Fold], &counts).unwrap_err().to_string();
        assert_eq!(err, "topic t.unread.user-deltas does not exist; create it with `unread topics create`");
        counts.insert(topics.user_deltas.clone(), 8);
        assert!(missing_topics(&topics, &[Stage::FanOut, Stage::Fold], &counts).is_ok());
        assert!(missing_topics(&topics, &[], &HashMap::new()).is_ok());
    }
}
