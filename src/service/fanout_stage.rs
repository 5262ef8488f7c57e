//! The fan-out stage: one task per partition of `unread.conversation-events`.
//!
//! A task takes its partition's lease, loads its conversations and next offset from the checkpoint, and gets its
//! transactional producer ([`super::tx`]): the instance's shared one or, with
//! `--producer-per-partition`, its own (`transactional.id` `{group}.fanout.{partition}`, which fences the producer
//! of any earlier owner: a zombie). A previous owner that did not release the lease and wrote with another id is
//! fenced too, unless it is still a member of the group ([`super::tx::fence`]). A restarted static member does those steps
//! before it rejoins ([`super::prepare`]). Then it repeats: take a batch of records, decode them (bad ones go to
//! the dead-letter topic), run [`crate::core::fanout::FanOut::process_batch`], produce the deltas to `unread.user-deltas`, packed per
//! partition of their users ([`crate::core::delta::pack`]), inside a Kafka transaction, commit the transaction
//! every transaction interval, and every flush interval (or flush events) commit it, then checkpoint the changed
//! conversations with the next offset in one PostgreSQL transaction. Deltas are committed before the checkpoint
//! that covers their input, so a crash can repeat deltas but never lose one; the fold applies a repeated suffix
//! idempotently (docs/semantics.md). The fold reads `read_committed`: a zombie's late batch is
//! refused or aborted by the broker and never reaches it (docs/operations.md § Fencing).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureRecord;
use tracing::{debug, info};

use super::context::{DeltaRecords, Shared};
use super::error::TaskError;
use super::group::{PartitionInput, Verdict};
use super::prepare::FanOutStart;
use super::records;
use super::task::{self, StageTask};
use super::tx::producer::connected_producer;
use super::tx::{fence, Open, TxProducer};
use crate::checkpoint::Stage;
use crate::core::contract::ConversationEvent;
use crate::core::delta::DeltaSource;
use crate::kafka::producer::{AsyncProducer, DeliveryFuture};
use crate::metrics::Step;
use crate::state::commit::{publish, Commit, RedisWrites};
use crate::state::load;
use crate::state::partition::{FanOutPartition, Write};
use crate::state::retry::retry;

/// One fan-out partition task: its input, the shared context, its transactional producer and its partition's
/// state.
struct FanOutTask {
    shared: Arc<Shared>,
    input: PartitionInput,
    /// Its transactional producer and transaction, its own or the instance's shared one.
    tx: TxProducer,
    state: FanOutPartition,
    in_flight: Vec<DeliveryFuture>,
    /// When each batch of the open transaction was taken, and its records: for the live path's
    /// [`Step::FanOutReadToCommitted`].
    read: Vec<(Instant, usize)>,
}

/// Runs the task of one partition until its input closes (then it checkpoints and returns).
///
/// Errors: PostgreSQL or Kafka failing (after retries), a corrupt checkpoint, or a fencing (by the lease in
/// PostgreSQL, or by Kafka when a successor initialized the partition's transactional id); the dispatcher restarts
/// the task from its checkpoint with a new producer. An open transaction of a failed task is aborted.
pub async fn run(shared: Arc<Shared>, mut input: PartitionInput) -> Result<(), TaskError> {
    let p = input.partition;
    let (FanOutStart { loaded, producer: tx, ms: [lease_ms, connect_ms, load_ms, producer_ms] }, prepared) =
        match shared.prepared.fanout(p).await {
            Some(started) => (started, true),
            None => (start(&shared, p).await?, false),
        };
    let (generation, next) = (loaded.generation, loaded.next);
    info!(
        partition = p,
        generation, next, lease_ms, connect_ms, load_ms, producer_ms, prepared, "fan-out task started"
    );
    input.rewind(&shared.topics.conversation_events, next).await;
    let (in_flight, read) = (Vec::new(), Vec::new());
    let empty = loaded.fanout().is_empty();
    let mut task = FanOutTask { shared, input, tx, state: loaded, in_flight, read };
    let result = match task::mark_if_empty(&task.shared, Stage::FanOut, p, empty).await {
        Ok(()) => task::run(&mut task).await,
        Err(e) => Err(e),
    };
    task.tx.finish(result)
}

/// Takes partition `p`'s lease while its producer connects, then [`begin`]s.
///
/// Errors: as [`load::lease`], [`connect_own`] and [`begin`].
async fn start(shared: &Shared, p: i32) -> Result<FanOutStart, TaskError> {
    let id = shared.fanout.transactional_id(p);
    let lease = timed(load::lease(&shared.store, Stage::FanOut, p, &shared.owner, Some(&id)));
    let ((lease, lease_ms), (connected, connect_ms)) = tokio::join!(lease, timed(connect_own(shared, p)));
    let connected = connected?;
    match lease {
        Ok(lease) => begin(shared, p, lease, connected, [lease_ms, connect_ms]).await,
        Err(e) => Err(e.into()), // a producer connected meanwhile is dropped
    }
}

/// Partition `p`'s start made before the assignment by a static member ([`super::prepare`]): [`begin`] under the
/// lease its previous incarnation (owner `{prefix}…`) held, its producer connecting meanwhile; `None` when another
/// process took the lease since.
///
/// Errors: as [`load::lease_if_held`], [`connect_own`] and [`begin`].
pub async fn prepare(shared: Arc<Shared>, p: i32, prefix: String) -> Result<Option<FanOutStart>, TaskError> {
    let id = shared.fanout.transactional_id(p);
    let held = timed(load::lease_if_held(&shared.store, Stage::FanOut, p, &prefix, &shared.owner, Some(&id)));
    let ((lease, lease_ms), (connected, connect_ms)) = tokio::join!(held, timed(connect_own(&shared, p)));
    let connected = connected?;
    let lease = match lease {
        Ok(Some(lease)) => lease,
        not_held => return Ok(not_held?.and(None)), // another owner, or failing
    };
    begin(&shared, p, lease, connected, [lease_ms, connect_ms]).await.map(Some)
}

/// Partition `p`'s own transactional producer, created and connected ([`connected_producer`]; by a restarted static
/// member since its start, [`super::prepare::early`]) but not initialized, so it fences nothing yet; `None` unless
/// `--producer-per-partition`: the producer is the instance's.
///
/// Errors: as [`connected_producer`].
async fn connect_own(shared: &Shared, p: i32) -> Result<Option<AsyncProducer>, TaskError> {
    if shared.fanout.shared_transaction.is_some() {
        return Ok(None);
    }
    if let Some(connecting) = shared.prepared.producer(p) {
        let stopped = || Err(TaskError::kafka("connecting the transactional producer")(KafkaError::Canceled));
        return connecting.await.unwrap_or_else(|_| stopped()).map(Some);
    }
    let (brokers, id) = (shared.brokers.clone(), shared.fanout.transactional_id(p));
    connected_producer(brokers, id, Arc::default()).await.map(Some)
}

/// Under `lease` (taken in `ms[0]`, beside the producer's connection in `ms[1]`), loads partition `p`'s state while
/// its transactional producer initializes (`connected`, or the instance's shared one) and, when the previous owner
/// did not release the lease and wrote with another transactional id, while that owner is [`fence`]d: a restart's
/// pause is the longest of the three, not their sum. After the lease: a zombie that checked its lease before is
/// fenced from here on, and the initializations, which fence the earlier producers, follow the lease too.
///
/// Errors: as [`load::fanout_partition`], [`initialized`] and [`fence`]; a producer initialized beside a failure
/// is dropped.
async fn begin(
    shared: &Shared,
    p: i32,
    mut lease: load::Lease,
    connected: Option<AsyncProducer>,
    [lease_ms, connect_ms]: [u64; 2],
) -> Result<FanOutStart, TaskError> {
    let (leased, previous) = (Instant::now(), lease.unreleased.take());
    let (id, transaction) = (shared.fanout.transactional_id(p), shared.fanout.shared_transaction.clone());
    let ((loaded, load_ms), (producer, producer_ms), fenced) = tokio::join!(
        timed(load::fanout_partition(&shared.store, &shared.topics, p, lease, shared.fanout.diffusion)),
        timed(TxProducer::initialize(connected, transaction, &shared.brokers, &id)),
        async {
            match &previous {
                Some(previous) => {
                    fence::fence(&shared.fanout.fences, shared.producer.get().1, p, previous, leased).await
                }
                None => Ok(()),
            }
        },
    );
    match (loaded, producer, fenced) {
        (Ok(loaded), Ok(producer), Ok(())) => {
            Ok(FanOutStart { loaded, producer, ms: [lease_ms, connect_ms, load_ms, producer_ms] })
        }
        (Err(e), _, _) => Err(e.into()),
        (Ok(_), Err(e), _) | (Ok(_), Ok(_), Err(e)) => Err(e),
    }
}

/// `work`'s output and how long it took, in ms.
async fn timed<T>(work: impl std::future::Future<Output = T>) -> (T, u64) {
    let started = Instant::now();
    let output = work.await;
    (output, started.elapsed().as_millis() as u64)
}

impl FanOutTask {
    /// Begins a Kafka transaction unless one is open ([`TxProducer::begin`]): hold what it returns while producing.
    async fn begin(&mut self) -> Result<Option<Open>, TaskError> {
        self.tx.begin().await
    }

    /// Commits the Kafka transaction holding this task's records, if any: its deltas and dead letters become
    /// visible to `read_committed` readers at once.
    async fn commit_transaction(&mut self) -> Result<(), TaskError> {
        if let Some(started) = self.tx.commit().await? {
            self.committed_transaction(started);
        }
        Ok(())
    }

    /// A Kafka commit begun at `started` is done: counted, and the latency of the batches it made visible.
    fn committed_transaction(&mut self, started: Instant) {
        self.shared.metrics.kafka_commit(started.elapsed());
        for (at, n) in self.read.drain(..) {
            self.shared.metrics.live_path(Step::FanOutReadToCommitted, at.elapsed(), n);
        }
    }

    /// Decodes a batch (bad records go to the dead-letter topic), fans it out and enqueues the deltas. Returns how
    /// many records it moved past.
    async fn process(&mut self, batch: &[OwnedMessage]) -> Result<usize, TaskError> {
        let mut events: Vec<ConversationEvent> = Vec::with_capacity(batch.len());
        let (mut pending, mut ages) = (0, Vec::with_capacity(batch.len()));
        let (read_at, now) = (Instant::now(), std::time::SystemTime::now());
        for record in batch {
            match self.input.accept(record, self.state.next) {
                Verdict::Skip | Verdict::Gap => continue,
                Verdict::Process => ages.extend(records::age(record, now)),
            }
            match records::conversation_event(record, self.shared.fanout.conversations) {
                Ok(e) => events.push(e),
                Err(e) => {
                    let sh = self.shared.clone();
                    sh.metrics.dead_letter(e.kind());
                    let _open = self.begin().await?;
                    records::dead_letter(self.tx.producer(), &sh.topics.dead_letter, record, &e).await?;
                }
            }
            self.state.next = record.offset() + 1;
            pending += 1;
        }
        self.shared.metrics.processed(&self.shared.topics.conversation_events, events.len());
        self.shared.metrics.live_path_each(Step::ProducedToFanOutRead, ages);
        if pending > 0 {
            self.read.push((read_at, pending));
        }
        if !events.is_empty() {
            let (sh, p) = (&*self.shared.clone(), self.input.partition);
            if !self.tx.is_shared() {
                self.begin().await?; // the task's own transaction begins before its lease check
            }
            // A task whose partition moved must not add deltas to the stream of its successor.
            let generation = self.state.generation;
            retry(&sh.metrics, "postgres", || sh.store.check_lease(Stage::FanOut, p, generation)).await?;
            if let Some(delay) = sh.fanout.produce_delay {
                tokio::time::sleep(delay).await; // fault injection: widens the window a zombie produces in
            }
            let (mut deltas, stats) = self.state.apply(&events);
            sh.metrics.fanout_batch(&stats);
            let source = DeltaSource { partition: p, generation };
            let open = self.begin().await?;
            let (topic, records) = (&sh.topics.user_deltas, sh.deltas);
            let produced = produce(self.tx.producer(), topic, &mut deltas, source, records, &mut self.in_flight).await;
            if let (Err(_), Some(open)) = (&produced, open) {
                open.abort(self.tx.producer()).await; // the shared transaction would refuse every later record
            }
            produced?;
        }
        Ok(pending)
    }

    /// The Redis writes of a commit: the broadcast lists' and read-diffused conversations' indexes' changes since
    /// the last commit (O(1) per publication or message, whatever the number of readers) and the changed
    /// conversations' sent seqs (receipts), or every list, index and conversation of the partition whole when Redis
    /// lost them (no marker); and whether they are whole.
    async fn list_writes(&mut self) -> Result<(RedisWrites, bool), TaskError> {
        let (sh, p) = (&*self.shared, self.input.partition);
        if !self.state.has_redis_writes() {
            // Nothing changed and nothing shared: no round trip. (One whose last index was just dropped still
            // writes the drop.)
            return Ok((RedisWrites::Nothing, false));
        }
        let full = !retry(&sh.metrics, "redis", || sh.projection.has_marker(Stage::FanOut, p)).await?;
        Ok((self.state.redis_writes(if full { Write::All } else { Write::Changes }), full))
    }

    /// Writes the list and index changes since the last write to Redis once the transaction of their batch is
    /// committed, so that a broadcast's or a read-diffused conversation's message is visible to readers then, not
    /// at the next checkpoint. Each write is guarded by the lease generation and re-applying one is harmless, so a
    /// crash before the checkpoint only writes them again from the same input. When Redis lost the partition's
    /// lists (no marker) the changes wait: the commit rewrites every list whole.
    ///
    /// Errors: Redis still failing after retries.
    async fn publish_lists(&mut self) -> Result<(), TaskError> {
        let (sh, p) = (self.shared.clone(), self.input.partition);
        if !self.state.has_list_ops()
            || !retry(&sh.metrics, "redis", || sh.projection.has_marker(Stage::FanOut, p)).await?
        {
            return Ok(());
        }
        let writes = RedisWrites::Lists(self.state.take_list_writes(), Vec::new());
        publish(sh.home(), Stage::FanOut, p, &writes, false).await?;
        Ok(())
    }
}

impl StageTask for &mut FanOutTask {
    const STAGE: Stage = Stage::FanOut;
    const LINGERS: bool = true;

    fn parts(&mut self) -> (&mut PartitionInput, &Arc<Shared>) {
        (&mut self.input, &self.shared)
    }

    fn max_batch(&self) -> usize {
        self.shared.flush.fanout_batch
    }

    fn generation(&self) -> i64 {
        self.state.generation
    }

    async fn apply(&mut self, batch: &[OwnedMessage]) -> Result<usize, TaskError> {
        self.process(batch).await
    }

    /// How long until the open transaction is due for a Kafka commit ([`super::options::FlushPolicy::transaction`]); zero
    /// when overdue, `None` when no transaction is open.
    fn publish_due_in(&self) -> Option<Duration> {
        let since = self.tx.open_since()?;
        Some((since + self.shared.flush.transaction).saturating_duration_since(Instant::now()))
    }

    /// Waits for the deltas' acknowledgements, then commits the transaction, then writes the list and index
    /// changes to Redis ([`FanOutTask::publish_lists`]). In that order: librdkafka's commit flushes undelivered
    /// messages itself, and that flush takes about 100 ms more (measured: a commit of 50 acknowledged deltas ~1 ms,
    /// of 50 unacknowledged ones ~101 ms; docs/performance.md).
    async fn publish(&mut self) -> Result<(), TaskError> {
        acknowledged(&mut self.in_flight).await?;
        self.commit_transaction().await?;
        self.publish_lists().await
    }

    /// Waits for every outstanding delta acknowledgement and commits the Kafka transaction: deltas are committed
    /// before the checkpoint that covers their input, so a crash can repeat deltas but never lose one.
    async fn pre_commit(&mut self) -> Result<(), TaskError> {
        self.publish().await
    }

    async fn prepare(&mut self, idle: bool) -> Result<Option<Commit>, TaskError> {
        let (redis, mark) = self.list_writes().await?;
        if idle && !mark {
            return Ok(None); // idle, and Redis holds the partition's lists: nothing to rewrite
        }
        let commit = self.state.take_commit(redis, mark);
        let (conversations, lists) = (commit.changes.states.len(), commit.changes.lists.len());
        debug!(partition = commit.partition, next = self.state.next, conversations, lists, "fan-out commit");
        Ok(Some(commit))
    }

    fn committed(&mut self, _whole: Vec<String>) {
        self.state.committed();
    }
}

/// Enqueues deltas, each carrying its `source` ([`crate::core::delta::Delta::source`], for the fold's fence against
/// zombie deltas), packed into records by partition of their users ([`crate::core::delta::pack`], up to
/// `records.max_bytes` each); their acknowledgements join `in_flight`. Waits only while the producer's queue is
/// full. The source travels in the payload, not in a record header: a header costs librdkafka a list and its
/// copies on both sides, about a seventh of the service's samples in a profile at 20,000 msg/s; without it the CPU
/// per update fell about 5% (docs/performance.md, "The fan-out lingers under load").
async fn produce(
    producer: &AsyncProducer,
    topic: &str,
    deltas: &mut [crate::core::delta::Delta],
    source: DeltaSource,
    records: DeltaRecords,
    in_flight: &mut Vec<DeliveryFuture>,
) -> Result<(), TaskError> {
    for d in deltas.iter_mut() {
        d.source = Some(source);
    }
    for r in crate::core::delta::pack(deltas, |user| records.partition_of(user), records.partitions, records.max_bytes)
    {
        let mut record = FutureRecord::to(topic).partition(r.partition).payload(&r.payload);
        if let Some(key) = &r.key {
            record = record.key(key.as_bytes());
        }
        loop {
            match producer.send_result(record) {
                Ok(delivery) => break in_flight.push(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(TaskError::kafka("producing a delta")(e)),
            }
        }
    }
    Ok(())
}

/// Waits for every outstanding delta acknowledgement.
async fn acknowledged(in_flight: &mut Vec<DeliveryFuture>) -> Result<(), TaskError> {
    for result in futures::future::join_all(in_flight.drain(..)).await {
        match result {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => return Err(TaskError::kafka("producing a delta")(e)),
            // The producer dropped the delivery.
            Err(_) => return Err(TaskError::kafka("producing a delta")(KafkaError::Canceled)),
        }
    }
    Ok(())
}
