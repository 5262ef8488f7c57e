//! The fan-out stage: one task per partition of `unread.conversation-events`.
//!
//! A task takes its partition's lease, loads its conversations and next offset from the checkpoint, and
//! initializes its own transactional producer (`transactional.id` `{group}.fanout.{partition}`, which fences the
//! producer of any earlier owner: a zombie). Then it repeats: take a batch of records, decode them (bad ones go to
//! the dead-letter topic), run [`FanOut::process_batch`], produce the deltas to `unread.user-deltas` keyed by user
//! inside a Kafka transaction, commit the transaction every transaction interval, and every flush interval (or
//! flush events) commit it, then checkpoint the changed conversations with the next offset in one PostgreSQL
//! transaction. Deltas are committed before the
//! checkpoint that covers their input, so a crash can repeat deltas but never lose one; the fold applies a
//! repeated suffix idempotently (docs/semantics.md). The fold reads `read_committed`: a zombie's late batch is
//! refused or aborted by the broker and never reaches it (docs/operations.md § Fencing).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use tracing::{debug, info};

use super::group::{PartitionInput, Verdict};
use super::{records, retry, Shared, TaskError};
use crate::checkpoint::store::{Changes, CheckpointStore, StateRow};
use crate::checkpoint::{self, Stage};
use crate::core::broadcast::{ListId, ListOp};
use crate::core::contract::{ConversationEvent, Event, Stream, Target};
use crate::core::delta::DeltaSource;
use crate::core::fanout::FanOut;
use crate::core::hybrid::Diffusion;
use crate::pipeline::MAX_BATCH;
use crate::projection::redis::ListWrite;

/// One fan-out partition task's state.
struct FanOutTask {
    shared: Arc<Shared>,
    input: PartitionInput,
    /// The task's own transactional producer ([`crate::kafka::transactional_producer`]).
    producer: FutureProducer,
    /// Since when a Kafka transaction is open (begun at the first record produced after a commit), if one is.
    transaction_since: Option<Instant>,
    generation: i64,
    fanout: FanOut,
    next: i64,
    /// (is a broadcast list, id) of what changed since the last checkpoint.
    dirty: HashSet<(bool, String)>,
    in_flight: Vec<DeliveryFuture>,
}

/// Runs the task of one partition until its input closes (then it checkpoints and returns).
///
/// Errors: PostgreSQL or Kafka failing (after retries), a corrupt checkpoint, or a fencing (by the lease in
/// PostgreSQL, or by Kafka when a successor initialized the partition's transactional id); the dispatcher restarts
/// the task from its checkpoint with a new producer. An open transaction of a failed task is aborted.
pub async fn run(shared: Arc<Shared>, input: PartitionInput) -> Result<(), TaskError> {
    let mut task = FanOutTask::load(shared, input).await?;
    let result = task.run().await.map_err(|e| fenced_or(&task.producer, e));
    discard(task.producer);
    result
}

/// `error`, or the producer's fatal error when Kafka fenced it: once a successor initializes the partition's
/// transactional id, the old producer's sends and commit fail with a fatal error whose cause only the client
/// keeps (`rd_kafka_fatal_error`).
fn fenced_or(producer: &FutureProducer, error: TaskError) -> TaskError {
    match producer.client().fatal_error() {
        Some((code, reason)) if super::is_fenced_code(code) => {
            debug!(%reason, "the transactional producer was fenced");
            TaskError::kafka("producing to Kafka")(KafkaError::MessageProduction(code))
        }
        _ => error,
    }
}

/// Drops a producer off the async threads: dropping waits for its queue (up to 500 ms) and, when a transaction
/// is open, for its abort.
fn discard(producer: FutureProducer) {
    tokio::task::spawn_blocking(move || drop(producer));
}

/// Creates partition `p`'s transactional producer and initializes it (up to 60 s), which fences every earlier
/// producer of the partition. Blocking calls run off the async threads.
///
/// Errors: the client cannot be created, or the initialization fails (the broker is unreachable, say).
async fn transactional_producer(shared: &Shared, p: i32) -> Result<FutureProducer, TaskError> {
    let id = format!("{}.{p}", shared.transactional_prefix);
    let producer = crate::kafka::transactional_producer(&shared.brokers, &id)
        .map_err(TaskError::kafka("creating the transactional producer"))?;
    let init = producer.clone();
    let result = tokio::task::spawn_blocking(move || init.init_transactions(Duration::from_secs(60)))
        .await
        .expect("init_transactions does not panic");
    match result {
        Ok(()) => Ok(producer),
        Err(e) => {
            discard(producer);
            Err(TaskError::kafka("initializing transactions")(e))
        }
    }
}

impl FanOutTask {
    /// The task's loop: batches, flushes, idle checks; checkpoints and returns once its input closes.
    async fn run(&mut self) -> Result<(), TaskError> {
        let flush = self.shared.flush;
        let (mut pending, mut last_checkpoint) = (0usize, Instant::now());
        loop {
            let wait = self.transaction_due_in().map_or(flush.interval, |due| due.min(flush.interval));
            let Some(batch) = self.input.next_batch(MAX_BATCH, wait).await else {
                let done = self.checkpoint().await;
                self.shared.metrics.forget_lag(Stage::FanOut, self.input.partition);
                return done;
            };
            pending += self.process(&batch).await?;
            if pending >= flush.events || (pending > 0 && last_checkpoint.elapsed() >= flush.interval) {
                self.checkpoint().await?;
                (pending, last_checkpoint) = (0, Instant::now());
            } else if self.transaction_due_in().is_some_and(|due| due.is_zero()) {
                self.commit_transaction().await?;
            } else if batch.is_empty() && pending == 0 && last_checkpoint.elapsed() >= super::fold_stage::IDLE_CHECK {
                // Idle: rewrite the partition's broadcast lists if Redis lost them (no marker).
                self.write_lists().await?;
                last_checkpoint = Instant::now();
            }
        }
    }

    /// Takes the partition's lease, loads its conversations and next offset from the checkpoint, and initializes
    /// its transactional producer.
    async fn load(shared: Arc<Shared>, mut input: PartitionInput) -> Result<Self, TaskError> {
        let (p, topic) = (input.partition, &shared.topics.conversation_events);
        // The lease first: from then on the previous owner cannot commit, so the offset and the state read next
        // are one checkpoint. (Read the other way round, a commit in between gave a state newer than its offset:
        // re-processing a leave and a rejoin on it moved the member's join head forward and lost its unread.)
        let generation = shared.store.acquire(Stage::FanOut, p, &shared.owner).await?;
        let next = shared.store.offset(Stage::FanOut, topic, p).await?.unwrap_or(0);
        let fanout = load_fanout(&shared.store, Some(p), shared.diffusion).await?;
        // After the lease: a zombie that checked its lease before is fenced from here on.
        let producer = transactional_producer(&shared, p).await?;
        info!(partition = p, generation, next, "fan-out task started");
        input.rewind(topic, next).await;
        let (dirty, in_flight) = (HashSet::new(), Vec::new());
        Ok(Self { shared, input, producer, transaction_since: None, generation, fanout, next, dirty, in_flight })
    }

    /// Begins a Kafka transaction unless one is open.
    fn begin(&mut self) -> Result<(), TaskError> {
        if self.transaction_since.is_none() {
            self.producer.begin_transaction().map_err(TaskError::kafka("beginning a transaction"))?;
            self.transaction_since = Some(Instant::now());
        }
        Ok(())
    }

    /// How long until the open transaction is due for a commit ([`super::FlushPolicy::transaction`]); zero when
    /// overdue, `None` when no transaction is open.
    fn transaction_due_in(&self) -> Option<Duration> {
        let since = self.transaction_since?;
        Some((since + self.shared.flush.transaction).saturating_duration_since(Instant::now()))
    }

    /// Commits the open Kafka transaction, if any (a blocking call, up to 30 s, run off the async threads): its
    /// deltas and dead letters become visible to `read_committed` readers at once.
    async fn commit_transaction(&mut self) -> Result<(), TaskError> {
        if self.transaction_since.is_none() {
            return Ok(());
        }
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || producer.commit_transaction(Duration::from_secs(30)))
            .await
            .expect("commit_transaction does not panic")
            .map_err(TaskError::kafka("committing a transaction"))?;
        self.transaction_since = None;
        Ok(())
    }

    /// Decodes a batch (bad records go to the dead-letter topic), fans it out and enqueues the deltas. Returns how
    /// many records it moved past.
    async fn process(&mut self, batch: &[OwnedMessage]) -> Result<usize, TaskError> {
        let mut events: Vec<ConversationEvent> = Vec::with_capacity(batch.len());
        let mut pending = 0;
        for record in batch {
            match self.input.accept(record, self.next) {
                Verdict::Skip | Verdict::Gap => continue,
                Verdict::Process => {}
            }
            match records::event(record, Stream::Conversation) {
                Ok(Event::Conversation(e)) => events.push(e),
                Ok(Event::User(_)) => unreachable!("records::event checks the stream"),
                Err(e) => {
                    self.shared.metrics.dead_letter(e.kind());
                    self.begin()?;
                    records::dead_letter(&self.producer, &self.shared.topics.dead_letter, record, &e).await?;
                }
            }
            self.next = record.offset() + 1;
            pending += 1;
        }
        self.shared.metrics.processed(&self.shared.topics.conversation_events, events.len());
        if !events.is_empty() {
            self.begin()?;
            let (sh, p) = (&*self.shared, self.input.partition);
            // A task whose partition moved must not add deltas to the stream of its successor.
            retry(&sh.metrics, "postgres", || sh.store.check_lease(Stage::FanOut, p, self.generation)).await?;
            if let Some(delay) = sh.produce_delay {
                tokio::time::sleep(delay).await; // fault injection: widens the window a zombie produces in
            }
            let (deltas, _) = self.fanout.process_batch(&events);
            self.dirty.extend(events.iter().map(|e| e.target()).map(|t| match t {
                Target::Conversation(id) => (false, id.to_owned()),
                Target::Broadcast(id) => (true, id.to_owned()),
            }));
            let source = DeltaSource { partition: p, generation: self.generation };
            produce(&self.producer, &sh.topics.user_deltas, &deltas, source, &mut self.in_flight).await?;
        }
        Ok(pending)
    }

    /// Waits for every outstanding delta acknowledgement and commits the Kafka transaction, then commits the
    /// changed conversations with the next offset in one PostgreSQL transaction.
    async fn checkpoint(&mut self) -> Result<(), TaskError> {
        let started = Instant::now();
        acknowledged(&mut self.in_flight).await?;
        self.commit_transaction().await?;
        self.write_lists().await?;
        let (sh, p, next) = (&*self.shared, self.input.partition, self.next);
        let changes = changes(&self.fanout, self.dirty.iter());
        let offsets = [(sh.topics.conversation_events.as_str(), next)];
        let commit_started = Instant::now();
        retry(&sh.metrics, "postgres", || sh.store.commit(Stage::FanOut, p, self.generation, &changes, &offsets))
            .await?;
        // The checkpoint's counters first: the lag probe below may wait up to 1 s for the broker.
        let (rows, bytes) = changes.size();
        sh.metrics.checkpoint_rows(rows, bytes);
        sh.metrics.checkpoint(started.elapsed());
        sh.metrics.flush_latency(Stage::FanOut, started.elapsed(), commit_started.elapsed());
        self.dirty.clear();
        self.input.store_offsets(&offsets);
        if let Some(lag) = self.input.lag(offsets[0].0, next) {
            sh.metrics.lag(Stage::FanOut, offsets[0].0, p, lag);
        }
        debug!(
            partition = p,
            next,
            conversations = changes.states.len(),
            lists = changes.lists.len(),
            "fan-out checkpoint"
        );
        Ok(())
    }

    /// Writes the broadcast lists' and read-diffused conversations' indexes' changes since the last checkpoint to
    /// Redis (O(1) per publication or message, whatever the number of readers), or every list and index of the
    /// partition whole when Redis lost them (no marker).
    async fn write_lists(&mut self) -> Result<(), TaskError> {
        let (sh, p, generation) = (&*self.shared, self.input.partition, self.generation);
        if !self.fanout.has_shared() && !self.fanout.has_list_ops() {
            // A partition without lists or read-diffused conversations keeps nothing in Redis: no round trip, no
            // dependency on it. (One whose last index was just dropped still writes the drop.)
            return Ok(());
        }
        let full = !retry(&sh.metrics, "redis", || sh.projection.has_marker(Stage::FanOut, p)).await?;
        let ops = self.fanout.take_list_ops();
        if ops.is_empty() && !full {
            return Ok(());
        }
        let writes = if full { whole_lists(&self.fanout, generation) } else { list_writes(ops, generation) };
        let (_, refused) = retry(&sh.metrics, "redis", || async {
            let r = sh.projection.write_lists(&writes).await?;
            if full {
                sh.projection.set_marker(Stage::FanOut, p).await?;
            }
            Ok::<_, crate::projection::ProjectionError>(r)
        })
        .await?;
        if refused > 0 {
            tracing::warn!(partition = p, refused, "broadcast lists refused older writes (another task is ahead)");
        }
        Ok(())
    }
}

/// The list and index ops grouped per list, each list's in order.
fn list_writes(ops: Vec<(ListId, ListOp)>, generation: i64) -> Vec<ListWrite> {
    let mut by_list: Vec<ListWrite> = Vec::new();
    let mut index: HashMap<ListId, usize> = HashMap::new();
    for (list, op) in ops {
        let i = *index.entry(list.clone()).or_insert_with(|| {
            by_list.push(ListWrite { list, generation, ops: Vec::new(), replace: false });
            by_list.len() - 1
        });
        by_list[i].ops.push(op);
    }
    by_list
}

/// Every list and index of the fan-out, whole.
fn whole_lists(fanout: &FanOut, generation: i64) -> Vec<ListWrite> {
    let whole = |(list, ops)| ListWrite { list, generation, ops, replace: true };
    fanout.whole_shared().into_iter().map(whole).collect()
}

/// What a fan-out checkpoint writes for the changed conversations and lists.
pub fn changes<'a>(fanout: &FanOut, dirty: impl IntoIterator<Item = &'a (bool, String)>) -> Changes {
    let mut changes = Changes::default();
    for (is_list, id) in dirty {
        if *is_list {
            changes.lists.extend(fanout.list(id).map(|l| (id.clone(), Some(checkpoint::encode_list(l)))));
        } else {
            let c = fanout.conversation(id).map(checkpoint::encode_conversation);
            changes.states.extend(c.map(|c| (id.clone(), Some(c))));
        }
    }
    changes
}

/// Loads the conversations and lists of one fan-out partition (or every partition).
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn load_fanout(
    store: &CheckpointStore,
    partition: Option<i32>,
    diffusion: Diffusion,
) -> Result<FanOut, TaskError> {
    fanout_from_rows(store.states(Stage::FanOut, partition).await?, store.lists(partition).await?, diffusion)
}

/// A fan-out from checkpoint rows of conversations and broadcast lists.
///
/// Errors: a corrupt row.
pub fn fanout_from_rows(
    conversations: Vec<StateRow>,
    lists: Vec<StateRow>,
    diffusion: Diffusion,
) -> Result<FanOut, TaskError> {
    let mut fanout = FanOut::with_diffusion(diffusion);
    for row in conversations {
        let state = checkpoint::decode_conversation(&row.state)
            .map_err(|source| TaskError::Corrupt { id: row.id.clone(), source })?;
        fanout.restore(row.id, state);
    }
    for row in lists {
        let state =
            checkpoint::decode_list(&row.state).map_err(|source| TaskError::Corrupt { id: row.id.clone(), source })?;
        fanout.restore_list(row.id, state);
    }
    Ok(fanout)
}

/// Enqueues deltas keyed by user, each with its `source` header (for the fold's fence against zombie deltas);
/// their acknowledgements join `in_flight`. Waits only while the producer's queue is full.
async fn produce(
    producer: &FutureProducer,
    topic: &str,
    deltas: &[crate::core::delta::Delta],
    source: DeltaSource,
    in_flight: &mut Vec<DeliveryFuture>,
) -> Result<(), TaskError> {
    let source = source.header_value();
    for d in deltas {
        let payload = serde_json::to_vec(d).expect("deltas serialize");
        let header = Header { key: crate::kafka::headers::DELTA_SOURCE, value: Some(&source) };
        let mut record = FutureRecord::to(topic)
            .key(d.user_id.as_bytes())
            .payload(&payload)
            .headers(OwnedHeaders::new().insert(header));
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
