//! What every partition task shares ([`Shared`]): the namespace's stores and producers, the flush policy, the
//! metrics, and the fan-out's own part ([`FanOutContext`]); built once per process by [`connect`].

use std::sync::Arc;

use anyhow::Context;
use tracing::info;

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::kafka::ProducerSlot;
use crate::metrics::Metrics;
use crate::projection::redis::RedisProjection;
use crate::topology::Topics;

use super::options::{FlushPolicy, RunOptions};
use super::prepare;
use super::topics::{partitions_of, stages};
use super::tx;

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
    /// When tasks flush.
    pub flush: FlushPolicy,
    /// How deltas go into records of `unread.user-deltas`, and where a user's events are.
    pub deltas: DeltaRecords,
    /// The service's metrics.
    pub metrics: Arc<Metrics>,
    /// This process, as named in partition leases ([`owner_name`]).
    pub owner: String,
    /// The partitions' starts made before the assignment by a static member ([`prepare`]).
    pub prepared: prepare::Preparations,
    /// What only the fan-out's tasks use.
    pub fanout: FanOutContext,
}

/// What only the fan-out's tasks share: their transactional producers' ids, transaction and fencings, where the
/// input producers put a conversation, when to read-diffuse.
pub struct FanOutContext {
    /// What the fan-out's transactional ids start with: its consumer group, `{group}.fanout`; the instance's shared
    /// producer's id is `{group}.fanout.{instance}`, partition `p`'s own (`--producer-per-partition`)
    /// `{group}.fanout.{p}`.
    pub transactional_prefix: String,
    /// The instance's one transaction of every fan-out task ([`tx::shared`]); `None` with
    /// `--producer-per-partition`.
    pub shared_transaction: Option<Arc<tx::SharedTransaction>>,
    /// The previous owners' producers this instance fenced, and when ([`tx::fence::fence`]).
    pub fences: tx::fence::Fences,
    /// When the fan-out read-diffuses a conversation.
    pub diffusion: crate::core::hybrid::Diffusion,
    /// Where the producers put a conversation's (or list's) events on `unread.conversation-events`; 0 partitions on
    /// an instance without the fan-out, which does not read it.
    pub conversations: crate::kafka::Placement,
    /// Fault injection for tests (`UNREAD_FAULT_PRODUCE_DELAY`, e.g. `3s`): the fan-out sleeps this long between
    /// its lease check and producing a batch's deltas, the window in which a paused task becomes a zombie.
    pub produce_delay: Option<std::time::Duration>,
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

impl FanOutContext {
    /// The transactional id fan-out partition `p` writes its deltas with: the instance's shared producer's, or
    /// with `--producer-per-partition` `{group}.fanout.{p}`. Recorded with the partition's lease, so that a
    /// successor that takes the lease unreleased fences it.
    pub fn transactional_id(&self, p: i32) -> String {
        match &self.shared_transaction {
            Some(t) => t.id().to_owned(),
            None => format!("{}.{p}", self.transactional_prefix),
        }
    }
}

impl Shared {
    /// Where the tasks commit partition state ([`crate::state::commit`]).
    pub fn home(&self) -> crate::state::commit::Home<'_> {
        let (topics, store, projection, metrics) = (&self.topics, &self.store, &self.projection, &*self.metrics);
        crate::state::commit::Home { topics, store, projection, metrics }
    }
}

/// This process as named in partition leases: `{hostname or "host"}:{pid}`, after `{instance}@` for a static
/// member (`--group-instance-id`), so that its next incarnation finds what it held ([`prepare`]).
pub fn owner_name(instance: Option<&str>) -> String {
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "host".into());
    let static_member = instance.map(|id| format!("{id}@")).unwrap_or_default();
    format!("{static_member}{host}:{}", std::process::id())
}

/// Connects to the namespace's stores (applying the migrations) and builds what the tasks share, with what a
/// restarted static member learned early ([`prepare::early`]) for its preparations.
///
/// Errors: a service unreachable or refusing us, a topic missing, a bad `--projection-ttl`.
pub async fn connect(opts: &RunOptions) -> anyhow::Result<(Arc<Shared>, Option<prepare::Early>)> {
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
    let shared_transaction =
        opts.one_producer().then(|| Arc::new(tx::SharedTransaction::new(format!("{transactional_prefix}.{instance}"))));
    let shared = Arc::new(Shared {
        topics: s.topics(),
        store,
        projection,
        producer: ProducerSlot::new(&s.brokers)?,
        brokers: s.brokers.clone(),
        flush: FlushPolicy {
            interval: opts.flush_interval,
            events: opts.flush_events,
            transaction: opts.transaction_interval.min(opts.flush_interval),
            publish: opts.publish_interval.min(opts.flush_interval),
            linger: opts.fanout_linger.min(opts.flush_interval),
            fanout_batch: opts.fanout_batch as usize,
        },
        deltas: DeltaRecords { partitions: delta_partitions, max_bytes: opts.delta_record_bytes, partitioner },
        metrics: Arc::new(Metrics::default()),
        owner,
        prepared: Default::default(),
        fanout: FanOutContext {
            fences: tx::fence::Fences::new(&s.brokers, &transactional_prefix),
            transactional_prefix,
            shared_transaction,
            diffusion: s.diffusion(),
            conversations: crate::kafka::Placement { partitioner, partitions: conversation_partitions },
            produce_delay: std::env::var("UNREAD_FAULT_PRODUCE_DELAY")
                .ok()
                .and_then(|d| humantime::parse_duration(&d).ok()),
        },
    });
    Ok((shared, early))
}
