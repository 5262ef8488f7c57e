//! A consumer-group member that runs one task per assigned partition number.
//!
//! The member subscribes to one or more topics with the **range** assignor: for topics with the same partition
//! count and the same subscribers, range gives partition p of every topic to the same member, so the fold task p
//! owns partition p of both `unread.user-events` and `unread.user-deltas` (co-partitioning). When partitions are
//! assigned, the rebalance callback splits each topic-partition's queue from the consumer's, before librdkafka
//! fetches it; a feed of its own ([`feed`]) reads it into the task of its partition number, in order, through a
//! bounded channel per topic kind. A full channel stops only its feed, and librdkafka stops fetching that partition
//! once its queue holds its bound: one busy partition holds back neither the others nor the priority topic, whose
//! records a task takes first (the fold's user events: a read ack does not queue behind a burst of deltas), and
//! nothing is paused, so nothing fetched ahead is dropped and fetched again. The dispatcher loop serves the
//! consumer's own queue (rebalance callbacks, errors) and starts, stops and restarts the tasks.
//!
//! Offsets belong to the tasks' checkpoints in PostgreSQL. Kafka's committed offsets are only a hint, stored after
//! each checkpoint: a task drops records below its checkpoint, and seeks back ([`PartitionInput::accept`]) when the
//! first record it sees is above it and records in between are visible. Offsets of a transactional topic (the
//! delta topic) are not contiguous: commit markers and aborted records take offsets a `read_committed` consumer
//! never gets.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{FutureExt, Stream, StreamExt};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::stream_consumer::StreamPartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::error::TaskError;
use crate::checkpoint::Stage;
use crate::metrics::Assignment;

/// A partition's own queue in the consumer ([`StreamConsumer::split_partition_queue`]): its records, fetched ahead
/// and bounded on their own (`queued.max.messages.kbytes` per partition, [`crate::kafka::group_member`]).
type PartitionQueue = StreamPartitionQueue<GroupContext>;

/// What the rebalance callbacks report to the dispatcher.
enum RebalanceEvent {
    /// Partitions assigned, with the queue of each topic-partition, split from the consumer's before the assignment
    /// started fetching them ([`GroupContext::split`]).
    Assigned(HashSet<i32>, Vec<(String, i32, PartitionQueue)>),
    Revoked(HashSet<i32>),
}

/// The consumer context: forwards rebalances to the dispatcher.
pub struct GroupContext {
    events: mpsc::UnboundedSender<RebalanceEvent>,
    /// Whether the member subscribed. Created while the process checks that Kafka answers, it keeps quiet until
    /// then: that check says why Kafka refused, in the one line the process exits with.
    subscribed: AtomicBool,
    /// The consumer itself, set once it is made: an assignment splits each partition's queue from it.
    consumer: OnceLock<Weak<GroupConsumer>>,
}

impl ClientContext for GroupContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if self.subscribed.load(Ordering::Relaxed) {
            DefaultClientContext.log(level, fac, log_message);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if self.subscribed.load(Ordering::Relaxed) {
            DefaultClientContext.error(error, reason);
        }
    }
}

fn partitions(tpl: &TopicPartitionList) -> HashSet<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

impl GroupContext {
    /// Splits the queue of every topic-partition in `tpl` from the consumer's. Done before the assignment, so no
    /// record of them ever reaches the consumer's own queue (librdkafka forwards a partition's records there when
    /// it starts fetching it, unless the application took its queue first). A partition whose queue cannot be
    /// split (librdkafka refuses only a topic name it cannot hold) keeps to the consumer's queue ([`Tasks::dispatch`]).
    fn split(&self, tpl: &TopicPartitionList) -> Vec<(String, i32, PartitionQueue)> {
        let Some(consumer) = self.consumer.get().and_then(Weak::upgrade) else { return Vec::new() };
        let split = |e: rdkafka::topic_partition_list::TopicPartitionListElem<'_>| {
            let (topic, p) = (e.topic(), e.partition());
            let queue = consumer.split_partition_queue(topic, p);
            if queue.is_none() {
                warn!(topic, partition = p, "could not split the partition's queue; it goes through the consumer's");
            }
            queue.map(|q| (topic.to_owned(), p, q))
        };
        tpl.elements().into_iter().filter_map(split).collect()
    }
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let event = match rebalance {
            Rebalance::Revoke(tpl) => RebalanceEvent::Revoked(partitions(tpl)),
            Rebalance::Assign(tpl) => RebalanceEvent::Assigned(partitions(tpl), self.split(tpl)),
            Rebalance::Error(_) => return,
        };
        let _ = self.events.send(event);
    }
}

/// The consumer shared by the dispatcher and its tasks (for seeks and offset hints).
pub type GroupConsumer = StreamConsumer<GroupContext>;

/// What a partition task gets: its records in order, and the consumer.
pub struct PartitionInput {
    /// The partition number (of every topic the stage reads).
    pub partition: i32,
    /// Its records, in order per topic: those of the bulk topic (deltas, conversation events) here...
    pub records: mpsc::Receiver<OwnedMessage>,
    /// ... and those of the priority topic (the fold's user events) here, taken first: a read ack does not wait
    /// behind a backlog of deltas (the fold's state is order-proof across its two topics, not within one).
    pub priority: mpsc::Receiver<OwnedMessage>,
    /// The group member's consumer (seeks, watermarks, offset hints).
    pub consumer: Arc<GroupConsumer>,
    brokers: Arc<str>,
    last_seek: HashMap<String, Instant>,
    last_lag_probe: HashMap<String, Instant>,
    runs: HashMap<String, Run>,
    /// Per topic, the last probe's answer ([`crate::kafka::first_visible`]): (from, first visible offset at or
    /// after it).
    probed: HashMap<String, (i64, i64)>,
    /// Per topic, the partition's log start and when the broker said so: asked at most every [`SEEK_EVERY`], so
    /// that the records a gap leaves queued (thousands after a restart) are each refused without a broker call.
    log_start: HashMap<String, (Instant, Option<i64>)>,
    /// Started again after the previous task of this partition failed, without a rebalance: the records since
    /// the checkpoint went to the failed task, so the new one must [`PartitionInput::rewind`].
    pub restarted: bool,
    /// Records dropped as already covered by the checkpoint ([`Verdict::Skip`]): a task starts where the group's
    /// committed offsets are, which may trail the checkpoint (logged with the task's first output).
    pub skipped: u64,
    /// When the task was started (at its assignment), and when its first batch came (empty or not): logged with
    /// its first output, so a restart's pause splits into the task's start, its first batch and its first output.
    pub timing: (Instant, Option<Instant>),
}

/// The records of one topic a task got since the consumer last started a sequence (at an assignment's committed
/// offset, or at a seek): their offsets only grow, so a record at or below the last one starts a new sequence.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// The offset of the sequence's last record.
    last: i64,
    /// Whether the sequence is known to have started at or below the task's next offset. Then every record of
    /// it at or above the next offset is the next record the task must process, whatever offsets lie between
    /// (transaction markers and aborted records never arrive).
    covered: bool,
    /// Whether the sequence is the one the assignment started, at the group's committed offset for the
    /// partition: the task's first, before any seek.
    assigned: bool,
}

/// Whether a task should process a record, from its checkpointed next offset for the record's topic.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The record is the next one: process it.
    Process,
    /// Already covered by the checkpoint: drop it.
    Skip,
    /// Above the checkpoint with visible records in between: a seek back was asked for; drop it and wait for
    /// them.
    Gap,
}

impl Run {
    /// A run before its first record.
    fn new() -> Self {
        Run { last: i64::MAX, covered: false, assigned: true }
    }

    /// Takes the next record of the topic, at `offset`, and gives its verdict from the task's `next` offset when
    /// telling needs no broker: `None` for a record above `next` in a sequence not known to cover it.
    fn observe(&mut self, offset: i64, next: i64) -> Option<Verdict> {
        if offset <= self.last {
            self.covered = false; // a new sequence: after a seek, or a task's first record
            self.assigned &= self.last == i64::MAX;
        }
        self.last = offset;
        if offset < next {
            self.covered = true;
            Some(Verdict::Skip)
        } else if offset == next || self.covered {
            self.covered = true;
            Some(Verdict::Process)
        } else {
            None
        }
    }
}

impl PartitionInput {
    /// Decides about one record given the next offset the task expects for its topic. A record above `next` is
    /// processed when the consumer's sequence is known to have passed `next` ([`Run`]), or when a probe finds no
    /// visible record between ([`crate::kafka::first_visible`], once per `next`); otherwise it is a gap and the
    /// consumer is sought back to `next` (at most once every 5 s per topic, in case a seek is lost), unless `next`
    /// is below the log start, in which case the records in between are gone and the record is processed.
    pub fn accept(&mut self, record: &OwnedMessage, next: i64) -> Verdict {
        let (offset, topic) = (record.offset(), record.topic());
        if !self.runs.contains_key(topic) {
            self.runs.insert(topic.to_owned(), Run::new()); // once per topic: no allocation per record
        }
        if let Some(verdict) = self.runs.get_mut(topic).expect("inserted above").observe(offset, next) {
            self.skipped += u64::from(verdict == Verdict::Skip);
            return verdict;
        }
        if self.assignment_started_at_or_below(topic, next) || self.nothing_visible_between(topic, next, offset) {
            self.runs.get_mut(topic).expect("inserted above").covered = true;
            return Verdict::Process;
        }
        self.seek_back(topic, next, offset);
        Verdict::Gap
    }

    /// Whether the consumer's sequence of `topic` is the one the assignment started and the group's committed
    /// offset for the partition is at or below `next`: the sequence started there (committed offsets only grow),
    /// so its first record is the first visible at or after `next`. One offset fetch from the group coordinator,
    /// where the probe of [`PartitionInput::nothing_visible_between`] makes a client of its own (100-150 ms at a
    /// restart under load): on a transactional topic a checkpoint's next offset is often a commit marker's, so a
    /// task's first record lies above it.
    fn assignment_started_at_or_below(&mut self, topic: &str, next: i64) -> bool {
        let assigned = self.runs.get(topic).is_some_and(|r| r.assigned) && !self.restarted;
        if !assigned {
            return false;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, self.partition);
        let consumer = &self.consumer;
        let committed = tokio::task::block_in_place(|| consumer.committed_offsets(tpl, Duration::from_secs(5)));
        let offset = committed.ok().and_then(|t| t.find_partition(topic, self.partition).map(|e| e.offset()));
        matches!(offset, Some(Offset::Offset(c)) if c <= next)
    }

    /// Whether `offset` is the first record at or after `next` a `read_committed` consumer gets (or `next` is
    /// below the log start and `offset` is the start): the records in between are invisible or gone.
    fn nothing_visible_between(&mut self, topic: &str, next: i64, offset: i64) -> bool {
        let p = self.partition;
        if let Some(low) = self.log_start(topic) {
            if next < low && offset == low {
                warn!(topic, partition = p, next, low, "checkpoint is below the log start; going on");
                return true;
            }
        }
        let first = match self.probed.get(topic) {
            Some((from, first)) if *from == next => Some(*first),
            _ => {
                let (brokers, started) = (&self.brokers, Instant::now());
                let probe = tokio::task::block_in_place(|| {
                    crate::kafka::first_visible(brokers, topic, &[(p, next)], Duration::from_secs(5))
                });
                let ms = started.elapsed().as_millis();
                info!(topic, partition = p, next, offset, ms, "probed for the first visible record at the checkpoint");
                let first = probe.map_err(|e| warn!(topic, partition = p, error = %format!("{e:#}"), "probe failed"));
                let first = first.ok().and_then(|found| found.get(&p).copied().flatten());
                // Only an answer is kept: a failed probe, or one that saw nothing, is asked again.
                if let Some(at) = first {
                    self.probed.insert(topic.to_owned(), (next, at));
                }
                first
            }
        };
        first == Some(offset)
    }

    /// The log start of `topic`'s partition, as the broker said at most [`SEEK_EVERY`] ago (it only grows); `None`
    /// when the broker did not answer then.
    fn log_start(&mut self, topic: &str) -> Option<i64> {
        if let Some((_, low)) = self.log_start.get(topic).filter(|(at, _)| at.elapsed() < SEEK_EVERY) {
            return *low;
        }
        let (consumer, p) = (&self.consumer, self.partition);
        let marks = tokio::task::block_in_place(|| consumer.fetch_watermarks(topic, p, Duration::from_secs(5)));
        let low = marks.ok().map(|(low, _)| low);
        self.log_start.insert(topic.to_owned(), (Instant::now(), low));
        low
    }

    /// Asks the consumer to go back to `next` in `topic`'s partition, unless it was asked less than 5 s ago.
    fn seek_back(&mut self, topic: &str, next: i64, from: i64) {
        let due = self.last_seek.get(topic).is_none_or(|t| t.elapsed() > SEEK_EVERY);
        if due {
            info!(topic, partition = self.partition, from, to = next, "seeking back to the checkpoint");
            self.runs.entry(topic.to_owned()).or_insert_with(Run::new).assigned = false;
            if let Err(e) = self.consumer.seek(topic, self.partition, Offset::Offset(next), Duration::from_secs(5)) {
                warn!(topic, partition = self.partition, error = %e, "seek failed; will retry");
            }
            self.last_seek.insert(topic.to_owned(), Instant::now());
        }
    }

    /// When [`PartitionInput::restarted`], moves the consumer's position in `topic`'s partition back to `next`
    /// (the task's checkpoint): the records since went to the failed task, and waiting for a new record to reveal
    /// the gap would wait forever on an idle partition. A no-op for a task started by an assignment, which resumes
    /// from the committed offsets and seeks back on a gap ([`PartitionInput::accept`]); seeking during a
    /// rebalance stalled the consumer in tests. Retried for up to 5 s.
    pub async fn rewind(&mut self, topic: &str, next: i64) {
        if !self.restarted {
            return;
        }
        for attempt in 0..25 {
            let (consumer, p) = (&self.consumer, self.partition);
            match tokio::task::block_in_place(|| consumer.seek(topic, p, Offset::Offset(next), Duration::from_secs(1)))
            {
                Ok(()) => {
                    self.last_seek.insert(topic.to_owned(), Instant::now());
                    return;
                }
                Err(e) if attempt == 24 => {
                    warn!(topic, partition = p, error = %e, "could not seek to the checkpoint; relying on gap detection")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Measures how many records of `topic`'s partition lie past `next` and hands the count to `report`, asking the
    /// broker at most every 2 s per topic. The question runs on a blocking thread (up to 1 s), never in the task's
    /// way; nothing is reported when the broker does not answer.
    pub fn probe_lag(&mut self, topic: &str, next: i64, report: impl FnOnce(i64) + Send + 'static) {
        if self.last_lag_probe.get(topic).is_some_and(|t| t.elapsed() < Duration::from_secs(2)) {
            return;
        }
        self.last_lag_probe.insert(topic.to_owned(), Instant::now());
        let (consumer, p, topic) = (self.consumer.clone(), self.partition, topic.to_owned());
        tokio::task::spawn_blocking(move || {
            if let Ok((_, high)) = consumer.fetch_watermarks(&topic, p, Duration::from_secs(1)) {
                report((high - next).max(0));
            }
        });
    }

    /// Tells Kafka how far the checkpoint got (a progress hint for the group's committed offsets).
    pub fn store_offsets(&self, offsets: &[(&str, i64)]) {
        let mut tpl = TopicPartitionList::new();
        for (topic, next) in offsets {
            let _ = tpl.add_partition_offset(topic, self.partition, Offset::Offset(*next));
        }
        if let Err(e) = self.consumer.store_offsets(&tpl) {
            // Normal while the partition is being revoked.
            tracing::debug!(partition = self.partition, error = %e, "storing offsets failed");
        }
    }

    /// Waits up to `wait` for records, then takes what is already there, up to `max`. `None` once the dispatcher
    /// has stopped the task; an empty batch when `wait` passed with nothing (time to flush).
    pub async fn next_batch(&mut self, max: usize, wait: Duration) -> Option<Vec<OwnedMessage>> {
        let mut batch = Vec::new();
        take_ready(&mut self.priority, &mut batch, max);
        if batch.is_empty() {
            tokio::select! {
                biased;
                Some(m) = self.priority.recv() => batch.push(m),
                m = self.records.recv() => match m {
                    Some(m) => batch.push(m),
                    None => return None, // both close together: the dispatcher dropped the task
                },
                _ = tokio::time::sleep(wait) => return Some(batch),
            }
        }
        self.take_more(&mut batch, max);
        if !batch.is_empty() {
            self.timing.1 = self.timing.1.or(Some(Instant::now()));
        }
        Some(batch)
    }

    /// Adds what the task's lanes already hold to `batch` (the priority lane first), up to `max` records in all;
    /// never waits.
    pub fn take_more(&mut self, batch: &mut Vec<OwnedMessage>, max: usize) {
        take_ready(&mut self.priority, batch, max);
        take_ready(&mut self.records, batch, max);
    }
}

/// Moves what `rx` already holds into `batch`, up to `max` records in all.
fn take_ready(rx: &mut mpsc::Receiver<OwnedMessage>, batch: &mut Vec<OwnedMessage>, max: usize) {
    while batch.len() < max {
        match rx.try_recv() {
            Ok(m) => batch.push(m),
            Err(_) => break,
        }
    }
}

/// Starts the task of one partition number: given its input, returns its handle.
pub type SpawnTask = Arc<dyn Fn(PartitionInput) -> JoinHandle<Result<(), TaskError>> + Send + Sync>;

/// Creates a member of `group` ([`crate::kafka::group_member`], out of the group after `session_timeout` without
/// heartbeats) and its dispatcher, whose tasks take the records of `priority` first. It joins the group when it
/// [`Dispatcher::subscribe`]s; until then its client only connects to the brokers (and finds the group's
/// coordinator), so that the join, once every service answered, is shorter.
///
/// Errors: the client cannot be created.
pub fn member(
    brokers: &str,
    group: &str,
    priority: Option<&str>,
    membership: &crate::kafka::Membership,
) -> anyhow::Result<Dispatcher> {
    let (tx, rx) = mpsc::unbounded_channel();
    let context = GroupContext { events: tx, subscribed: AtomicBool::new(false), consumer: OnceLock::new() };
    let consumer: GroupConsumer = crate::kafka::group_member(brokers, group, membership)
        .create_with_context(context)
        .with_context(|| format!("creating consumer of group {group}"))?;
    let (consumer, brokers) = (Arc::new(consumer), brokers.into());
    let _ = consumer.context().consumer.set(Arc::downgrade(&consumer));
    // The metadata, fetched on a thread of its own, connects the client at once (librdkafka connects lazily). Not
    // on the runtime's blocking pool, which a process that exits at once (Kafka refused it) would wait for.
    let warm = consumer.clone();
    let fetch = move || drop(warm.fetch_metadata(None, Duration::from_secs(5)));
    std::thread::Builder::new().name("kafka-warm".into()).spawn(fetch).context("starting a thread")?;
    let (priority, assignment) = (priority.map(str::to_owned), Arc::new(Assignment::default()));
    let eager = membership.protocol == crate::kafka::GroupProtocol::Classic;
    Ok(Dispatcher { consumer, brokers, events: rx, assignment, priority, eager })
}

impl Dispatcher {
    /// Subscribes the member to `topics`: it joins its group.
    ///
    /// Errors: the subscription fails (a topic name librdkafka refuses).
    pub fn subscribe(&self, topics: &[&str]) -> anyhow::Result<()> {
        self.consumer.context().subscribed.store(true, Ordering::Relaxed);
        self.consumer.subscribe(topics).with_context(|| format!("subscribing to {topics:?}"))
    }
}

/// The loop that polls the consumer and feeds the partition tasks.
pub struct Dispatcher {
    consumer: Arc<GroupConsumer>,
    brokers: Arc<str>,
    events: mpsc::UnboundedReceiver<RebalanceEvent>,
    /// What the member holds now.
    pub assignment: Arc<Assignment>,
    /// The topic whose records tasks take first.
    priority: Option<String>,
    /// Whether rebalances are eager (the classic protocol): every partition is revoked, and the next assignment
    /// is the member's whole new one ([`Tasks::revoke`]).
    eager: bool,
}

/// Records a task holds per partition: 20,000 per topic.
pub(super) const QUEUE: usize = 20_000;

/// How long a task that ended, its partition still assigned, waits before it starts again: 1 s.
const RESTART_AFTER: Duration = Duration::from_secs(1);

/// How often a task asks the consumer to seek back to its checkpoint while records above it keep coming (in case a
/// seek is lost), and asks the broker for the log start while refusing them.
const SEEK_EVERY: Duration = Duration::from_secs(5);

/// Room a feed waits for in its task's channel before it moves records again, and the most it moves in one turn:
/// 512 records. A feed whose task is behind wakes once per 512 records the task takes, not once per record.
const FEED_ROOM: usize = 512;

/// Reads one partition's queue into its task's channel, as the channel has room: a full channel stops the reading,
/// and with it librdkafka's fetching of that partition once its queue holds `queued.max.messages.kbytes`. Nothing
/// is paused in the consumer, so nothing prefetched is dropped and fetched again (`docs/performance.md`, "A queue
/// per partition"). The dispatcher aborts it when the partition is revoked or its task ends.
async fn feed(queue: PartitionQueue, tx: mpsc::Sender<OwnedMessage>, waits: Arc<Assignment>) {
    forward(queue.stream(), tx, waits, owned).await;
}

/// A record of a partition's queue, detached from the consumer; an error goes to the log.
fn owned(record: Result<rdkafka::message::BorrowedMessage<'_>, KafkaError>) -> Option<OwnedMessage> {
    record.map(|m| m.detach()).map_err(|e| warn!(error = %e, "consumer error")).ok()
}

/// Moves `records` into `tx` in order, each through `own` (`None`: not moved), waiting for room for
/// [`FEED_ROOM`] records whenever the channel has less, and counting each such wait in `waits.pauses`
/// (`unread_consumer_pauses_total`). Ends when `records` ends or the channel closes (the task ended).
async fn forward<T>(
    mut records: impl Stream<Item = T> + Unpin,
    tx: mpsc::Sender<OwnedMessage>,
    waits: Arc<Assignment>,
    own: impl Fn(T) -> Option<OwnedMessage>,
) {
    loop {
        if tx.capacity() < FEED_ROOM {
            waits.pauses.fetch_add(1, Ordering::Relaxed);
        }
        let Ok(room) = tx.reserve_many(FEED_ROOM).await else { return };
        let mut next = records.next().await;
        if next.is_none() {
            return;
        }
        // A record is taken from the queue only when a permit waits for it.
        for permit in room {
            let Some(record) = next.take().or_else(|| records.next().now_or_never().flatten()) else { break };
            if let Some(m) = own(record) {
                permit.send(m);
            }
        }
    }
}

/// A running task: its two channels, and per topic the feed that reads the partition's queue into one of them.
struct Running {
    records: mpsc::Sender<OwnedMessage>,
    priority: mpsc::Sender<OwnedMessage>,
    feeds: HashMap<String, JoinHandle<()>>,
    handle: JoinHandle<Result<(), TaskError>>,
}

impl Running {
    /// Stops every feed and waits until each has let its queue go: a queue split again must have one reader, and
    /// a handle dropped late would turn off the new reader's wake-ups. Returns the topics they fed.
    async fn unfeed(&mut self) -> Vec<String> {
        let mut topics = Vec::new();
        for (topic, feed) in self.feeds.drain() {
            feed.abort();
            let _ = feed.await;
            topics.push(topic);
        }
        topics
    }
}

/// The running partition tasks of one stage and how to start one.
struct Tasks {
    stage: Stage,
    spawn: SpawnTask,
    consumer: Arc<GroupConsumer>,
    brokers: Arc<str>,
    running: HashMap<i32, Running>,
    /// The topic whose records a task takes first ([`PartitionInput::priority`]).
    priority: Option<String>,
    /// Whether rebalances are eager ([`Dispatcher::eager`]).
    eager: bool,
    /// Under eager rebalances, the tasks of partitions revoked since the last assignment, still running: the
    /// next assignment keeps those it gives back and stops the others ([`Tasks::revoke`]).
    revoked: HashMap<i32, Running>,
    /// Partitions whose task ended while still assigned: when each starts again, and the topics whose queues
    /// it reads ([`Tasks::note_ended`]).
    restarting: HashMap<i32, (Instant, Vec<String>)>,
    /// Where the feeds' waits for a full channel are counted (`unread_consumer_pauses_total`).
    assignment: Arc<Assignment>,
}

impl Tasks {
    /// Starts partition `p`'s task, with no feed yet; `restarted` after its previous task failed (it seeks back to
    /// its checkpoint).
    fn start(&mut self, p: i32, restarted: bool) {
        let ((records, rx), (priority, priority_rx)) = (mpsc::channel(QUEUE), mpsc::channel(QUEUE));
        let input = PartitionInput {
            partition: p,
            records: rx,
            priority: priority_rx,
            consumer: self.consumer.clone(),
            brokers: self.brokers.clone(),
            last_seek: HashMap::new(),
            last_lag_probe: HashMap::new(),
            runs: HashMap::new(),
            probed: HashMap::new(),
            log_start: HashMap::new(),
            restarted,
            skipped: 0,
            timing: (Instant::now(), None),
        };
        let feeds = HashMap::new();
        self.running.insert(p, Running { records, priority, feeds, handle: (self.spawn)(input) });
    }

    /// Feeds `topic`'s queue of partition `p` to its task, through the priority channel when it is the priority
    /// topic. A queue for a partition with no task is dropped. Should the task have a feed of that topic already,
    /// that one is stopped first and the queue split again (the old handle's drop turned its wake-ups off).
    async fn attach(&mut self, p: i32, topic: String, mut queue: PartitionQueue) {
        let Some(t) = self.running.get_mut(&p) else { return };
        if let Some(old) = t.feeds.remove(&topic) {
            warn!(stage = %self.stage, topic, partition = p, "a partition's queue was fed twice; replacing the feed");
            drop(queue);
            old.abort();
            let _ = old.await;
            let Some(again) = self.consumer.split_partition_queue(&topic, p) else { return };
            queue = again;
        }
        let tx = if self.priority.as_deref() == Some(topic.as_str()) { &t.priority } else { &t.records };
        let fed = tokio::spawn(feed(queue, tx.clone(), self.assignment.clone()));
        t.feeds.insert(topic, fed);
    }

    /// Stops the tasks of revoked partitions. Their feeds stop at once; their input is closed rather than the
    /// tasks aborted: an aborted task could drop a checkpoint transaction half-way. Each finishes what its channels
    /// hold, flushes and ends; if a successor took the partition's lease meanwhile, that last flush is fenced.
    ///
    /// Under eager rebalances every partition is revoked, and most come back to the same member a few ms later
    /// (a SIGKILLed member's survivors keep theirs, and take more): those tasks are set aside, still running,
    /// until the assignment, which keeps the ones it gives back (no flush, load or new producer) and stops the
    /// others. A kept task's queue starts again at the group's committed offsets, at or below the task's
    /// position: its input drops what its checkpoint covers ([`PartitionInput::accept`]).
    async fn revoke(&mut self, partitions: &HashSet<i32>) {
        for p in partitions {
            self.restarting.remove(p); // a task the partition's next owner (or this member, anew) starts
            let Some(mut t) = self.running.remove(p) else { continue };
            t.unfeed().await;
            if self.eager {
                info!(stage = %self.stage, partition = p, "partition revoked; its task waits for the assignment");
                self.revoked.insert(*p, t);
            } else {
                info!(stage = %self.stage, partition = p, "partition revoked; stopping its task");
            }
        }
    }

    /// Starts the tasks of newly assigned partitions and feeds each its queues; under eager rebalances, keeps the
    /// revoked tasks whose partitions it gives back and stops the others ([`Tasks::revoke`]).
    async fn assign(&mut self, partitions: &HashSet<i32>, queues: Vec<(String, i32, PartitionQueue)>) {
        info!(stage = %self.stage, partitions = ?partitions, "partitions assigned");
        for (p, t) in std::mem::take(&mut self.revoked) {
            if partitions.contains(&p) {
                info!(stage = %self.stage, partition = p, "partition assigned again; its task goes on");
                self.running.insert(p, t);
            } else {
                info!(stage = %self.stage, partition = p, "partition not assigned again; stopping its task");
            }
        }
        for p in partitions {
            if !self.running.contains_key(p) {
                self.start(*p, false);
            }
        }
        for (topic, p, queue) in queues {
            self.attach(p, topic, queue).await;
        }
    }

    /// Notes every task that ended (failed, panicked or fenced) though its partition is still assigned, and stops
    /// its feeds: it starts again 1 s later ([`RESTART_AFTER`], [`Tasks::start_due`]) and resumes from its
    /// checkpoint. The other partitions go on meanwhile. One wait for all that ended together: a fencing of the
    /// instance's shared producer ends every fan-out task at once.
    async fn note_ended(&mut self) {
        let ended: Vec<i32> = self.running.iter().filter(|(_, t)| t.handle.is_finished()).map(|(p, _)| *p).collect();
        let due = Instant::now() + RESTART_AFTER;
        for p in ended {
            let mut t = self.running.remove(&p).expect("listed");
            let topics = t.unfeed().await;
            let stage = self.stage;
            match t.handle.now_or_never() {
                // `None` cannot be: the handle is finished.
                Some(Ok(Ok(()))) | None => warn!(%stage, partition = p, "task ended; starting it again"),
                Some(Ok(Err(_))) => info!(%stage, partition = p, "starting the failed task again from its checkpoint"),
                Some(Err(e)) => warn!(%stage, partition = p, error = %e, "task panicked; starting it again"),
            }
            self.restarting.insert(p, (due, topics));
        }
    }

    /// When the next noted task is due to start again ([`Tasks::note_ended`]); `None`: none waits.
    fn next_restart(&self) -> Option<Instant> {
        self.restarting.values().map(|(at, _)| *at).min()
    }

    /// Starts again every noted task whose wait is over, fed from its partition's queues split anew; it seeks back
    /// to its checkpoint.
    async fn start_due(&mut self) {
        let now = Instant::now();
        let due: Vec<i32> = self.restarting.iter().filter(|(_, (at, _))| *at <= now).map(|(p, _)| *p).collect();
        for p in due {
            let (_, topics) = self.restarting.remove(&p).expect("listed");
            self.start(p, true);
            for topic in topics {
                if let Some(queue) = self.consumer.split_partition_queue(&topic, p) {
                    self.attach(p, topic, queue).await;
                }
            }
        }
    }

    /// Hands a record that came through the consumer's own queue to its partition's task (starting it if needed),
    /// through the priority channel when it is of the priority topic. Only a partition whose queue could not be
    /// split ([`GroupContext::split`]) has records there; the dispatcher waits while that task's channel is full.
    async fn dispatch(&mut self, m: OwnedMessage) {
        let p = m.partition();
        if self.restarting.contains_key(&p) {
            return; // its task starts again soon, from its checkpoint, and reads this record again
        }
        if !self.running.contains_key(&p) && !self.revoked.contains_key(&p) {
            self.start(p, false);
        }
        let t = self.running.get(&p).or(self.revoked.get(&p)).expect("started");
        let lane = if self.priority.as_deref() == Some(m.topic()) { &t.priority } else { &t.records };
        if lane.send(m).await.is_err() {
            tracing::debug!("task input closed"); // note_ended starts it again; it seeks back to its checkpoint
        }
    }

    /// A record or error from the consumer's own queue: the record to its task ([`Tasks::dispatch`]), the error to
    /// the log.
    async fn take(&mut self, msg: Result<rdkafka::message::BorrowedMessage<'_>, KafkaError>) {
        match msg {
            Ok(m) => self.dispatch(m.detach()).await,
            Err(e) => warn!(stage = %self.stage, error = %e, "consumer error"),
        }
    }

    /// Stops every feed, closes every task's input (each flushes and checkpoints) and waits for them, up to 30 s.
    async fn stop_all(self) {
        info!(stage = %self.stage, "stopping: flushing partition tasks");
        let mut handles = Vec::new();
        for mut t in self.running.into_values().chain(self.revoked.into_values()) {
            t.unfeed().await;
            handles.push(t.handle);
        }
        if tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(handles)).await.is_err() {
            warn!(stage = %self.stage, "tasks did not stop within 30 s");
        }
    }
}

impl Dispatcher {
    /// Runs until `shutdown` turns true, then closes every task's input (each flushes and checkpoints) and waits
    /// for them, up to 30 s. A task that fails is logged and started again from its checkpoint after 1 s.
    ///
    /// The loop serves the consumer's own queue (rebalances, errors) and the tasks' lifecycle; the records go from
    /// each partition's queue to its task through a feed of their own ([`feed`]).
    ///
    /// Errors: never for a task's failure; only if the consumer itself breaks.
    pub async fn run(
        mut self,
        stage: Stage,
        spawn: SpawnTask,
        mut shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let (consumer, brokers) = (self.consumer.clone(), self.brokers.clone());
        // One stream for the loop's life: `recv` would register and drop a waker slot per poll.
        let source = self.consumer.clone();
        let mut stream = source.stream();
        let priority = self.priority.take();
        let (eager, revoked) = (self.eager, HashMap::new());
        let restarting = HashMap::new();
        let running = HashMap::new();
        let assignment = self.assignment.clone();
        let mut tasks =
            Tasks { stage, spawn, consumer, brokers, running, priority, eager, revoked, restarting, assignment };
        let mut health = tokio::time::interval(Duration::from_secs(1));
        loop {
            let next_restart = tasks.next_restart();
            tokio::select! {
                biased;
                _ = shutdown.changed() => if *shutdown.borrow() { break },
                Some(event) = self.events.recv() => {
                    self.assignment.rebalances.fetch_add(1, Ordering::Relaxed);
                    match event {
                        RebalanceEvent::Revoked(ps) => {
                            tasks.revoke(&ps).await;
                            self.assignment.partitions.lock().expect("not poisoned").retain(|p| !ps.contains(p));
                        }
                        RebalanceEvent::Assigned(ps, queues) => {
                            tasks.assign(&ps, queues).await;
                            self.assignment.partitions.lock().expect("not poisoned").extend(ps);
                        }
                    }
                }
                _ = health.tick() => tasks.note_ended().await,
                _ = async { tokio::time::sleep_until(next_restart.unwrap_or_else(Instant::now).into()).await },
                    if next_restart.is_some() => tasks.start_due().await,
                msg = stream.next() => tasks.take(msg.expect("Kafka streams never end")).await,
            }
        }
        tasks.stop_all().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::Duration;

    use rdkafka::message::{Message, OwnedMessage, Timestamp};

    use tokio::sync::mpsc;

    use super::{
        forward, GroupConsumer, GroupContext, PartitionInput, Run, SpawnTask, Tasks, Verdict, FEED_ROOM, QUEUE,
        RESTART_AFTER,
    };

    /// A consumer that never connects (librdkafka connects lazily).
    fn consumer() -> Arc<GroupConsumer> {
        let m = crate::kafka::Membership {
            session_timeout: Duration::from_secs(10),
            instance_id: None,
            protocol: crate::kafka::GroupProtocol::Classic,
            client_id: None,
        };
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(
            crate::kafka::group_member("127.0.0.1:9", "g", &m)
                .create_with_context(GroupContext {
                    events,
                    subscribed: std::sync::atomic::AtomicBool::new(true),
                    consumer: std::sync::OnceLock::new(),
                })
                .unwrap(),
        )
    }

    fn record(topic: &str, offset: i64) -> OwnedMessage {
        OwnedMessage::new(Some(vec![]), None, topic.into(), Timestamp::NotAvailable, 0, offset, None)
    }

    type Lane = mpsc::Sender<OwnedMessage>;

    fn input(consumer: Arc<GroupConsumer>) -> (Lane, Lane, PartitionInput) {
        let ((records, rx), (priority, priority_rx)) = (mpsc::channel(QUEUE), mpsc::channel(QUEUE));
        let (last_seek, last_lag_probe, runs, probed) =
            (HashMap::new(), HashMap::new(), HashMap::new(), HashMap::new());
        let (brokers, restarted) = ("127.0.0.1:9".into(), false);
        let p = PartitionInput {
            partition: 0,
            records: rx,
            priority: priority_rx,
            consumer,
            brokers,
            last_seek,
            last_lag_probe,
            runs,
            probed,
            log_start: HashMap::new(),
            restarted,
            skipped: 0,
            timing: (std::time::Instant::now(), None),
        };
        (records, priority, p)
    }

    #[tokio::test]
    async fn a_user_event_is_taken_before_a_backlog_of_deltas_and_each_topic_keeps_its_order() {
        let (deltas, events, mut input) = input(consumer());
        for offset in 0..QUEUE as i64 {
            deltas.try_send(record("deltas", offset)).unwrap();
        }
        assert!(deltas.try_send(record("deltas", QUEUE as i64)).is_err(), "the channel holds QUEUE records");
        events.try_send(record("events", 0)).unwrap();
        events.try_send(record("events", 1)).unwrap();
        let batch = input.next_batch(100, Duration::from_secs(1)).await.unwrap();
        let taken: Vec<(&str, i64)> = batch.iter().map(|m| (m.topic(), m.offset())).collect();
        assert_eq!(taken[..3], [("events", 0), ("events", 1), ("deltas", 0)]);
        assert_eq!(taken.len(), 100);
        let mut offsets = Vec::new();
        while let Some(batch) = input.next_batch(4000, Duration::from_millis(1)).await.filter(|b| !b.is_empty()) {
            offsets.extend(batch.iter().map(|m| m.offset()));
        }
        assert_eq!(offsets, (98..QUEUE as i64).collect::<Vec<_>>());
        // Both channels dropped (the task revoked): the input ends.
        drop((deltas, events));
        assert!(input.next_batch(10, Duration::from_secs(1)).await.is_none());
    }

    #[tokio::test]
    async fn a_feed_moves_every_record_in_order_and_waits_for_room_in_a_full_channel() {
        let (tx, mut rx) = mpsc::channel(FEED_ROOM + 100);
        let records: Vec<OwnedMessage> = (0..5_000).map(|offset| record("t", offset)).collect();
        let waits = Arc::new(crate::metrics::Assignment::default());
        tokio::spawn(forward(futures::stream::iter(records), tx, waits.clone(), Some));
        let mut offsets = Vec::new();
        while let Some(m) = rx.recv().await {
            offsets.push(m.offset()); // ends once the feed ended (its records did) and dropped its sender
        }
        assert_eq!(offsets, (0..5_000).collect::<Vec<_>>(), "none lost, none repeated, in order");
        assert!(waits.pauses.load(std::sync::atomic::Ordering::Relaxed) > 0, "the channel filled: it waited");
    }

    /// Tasks whose spawn records each start (partition, restarted) and makes partition 0's task fail at once and
    /// the others run until their input closes.
    fn failing_tasks(starts: Arc<std::sync::Mutex<Vec<(i32, bool)>>>) -> Tasks {
        let spawn: SpawnTask = Arc::new(move |mut input: PartitionInput| {
            starts.lock().unwrap().push((input.partition, input.restarted));
            tokio::spawn(async move {
                if input.partition == 0 {
                    return Err(crate::service::TaskError::Stopped);
                }
                while input.next_batch(10, Duration::from_secs(60)).await.is_some() {}
                Ok(())
            })
        });
        let (consumer, brokers, stage) = (consumer(), "127.0.0.1:9".into(), crate::checkpoint::Stage::Fold);
        let (running, revoked, restarting) = (HashMap::new(), HashMap::new(), HashMap::new());
        let assignment = Arc::default();
        Tasks {
            stage,
            spawn,
            consumer,
            brokers,
            running,
            priority: None,
            eager: false,
            revoked,
            restarting,
            assignment,
        }
    }

    #[tokio::test]
    async fn a_failed_task_starts_again_from_its_checkpoint_without_holding_up_the_other_partitions() {
        let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = failing_tasks(starts.clone());
        let at = |p: i32, offset: i64| {
            OwnedMessage::new(Some(vec![]), None, "t".into(), Timestamp::NotAvailable, p, offset, None)
        };
        tasks.dispatch(at(0, 0)).await;
        tasks.dispatch(at(1, 0)).await;
        while !tasks.running[&0].handle.is_finished() {
            tokio::task::yield_now().await;
        }
        let noted = std::time::Instant::now();
        tasks.note_ended().await;
        assert!(!tasks.running.contains_key(&0) && tasks.running.contains_key(&1));
        let due = tasks.next_restart().expect("partition 0 waits");
        assert!(due >= noted + RESTART_AFTER - Duration::from_millis(50), "it waits about {RESTART_AFTER:?}");
        // Meanwhile the dispatcher goes on: partition 1 gets its records; partition 0's are left to its restart.
        tasks.dispatch(at(0, 1)).await;
        tasks.dispatch(at(1, 1)).await;
        assert!(!tasks.running.contains_key(&0), "no task started for a waiting partition");
        tasks.start_due().await;
        assert!(!tasks.running.contains_key(&0), "not before its time");
        tokio::time::sleep_until(due.into()).await;
        tasks.start_due().await;
        assert_eq!(*starts.lock().unwrap(), [(0, false), (1, false), (0, true)], "restarted: it seeks back");
        assert_eq!(tasks.next_restart(), None);
        // A revoke forgets a waiting partition: its next owner starts it afresh.
        while !tasks.running[&0].handle.is_finished() {
            tokio::task::yield_now().await;
        }
        tasks.note_ended().await;
        tasks.revoke(&[0].into()).await;
        assert_eq!(tasks.next_restart(), None);
    }

    /// After a restart, the records the failed task's queue still held (thousands, above the checkpoint) come
    /// before those of the seek back: each is refused as a gap, and the broker is asked for the log start once per
    /// [`super::SEEK_EVERY`], not once per record (a call of up to 5 s each; 55 ms each under load stalled a
    /// partition for minutes).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_left_above_a_restarted_task_checkpoint_are_refused_with_one_question_to_the_broker() {
        let (_records, _priority, mut p) = input(consumer());
        p.restarted = true;
        let (topic, next) = ("t", 4_165);
        p.probed.insert(topic.to_owned(), (next, next)); // the probe found the checkpoint's record visible
        let verdicts: Vec<_> = (5_604..5_704).map(|offset| p.accept(&record(topic, offset), next)).collect();
        assert!(verdicts.iter().all(|v| *v == Verdict::Gap), "{verdicts:?}");
        let asked = p.log_start.get(topic).map(|(at, _)| *at).expect("the log start was asked for");
        assert_eq!(p.log_start.len(), 1);
        p.accept(&record(topic, 5_704), next);
        assert_eq!(p.log_start[topic].0, asked, "asked again within SEEK_EVERY");
        // The seek back's first record is the checkpoint's: processed.
        assert_eq!(p.accept(&record(topic, next), next), Verdict::Process);
    }

    #[test]
    fn a_sequence_that_passed_the_next_offset_goes_on_over_holes() {
        let mut run = Run::new();
        // From the committed hint below the checkpoint (next 10): skipped, then processed; the holes at 12 and 15
        // (commit markers) need nothing.
        let (offsets, nexts) = ([8, 9, 10, 11, 13, 14, 16], [10, 10, 10, 11, 12, 14, 15]);
        let verdicts: Vec<_> = offsets.iter().zip(nexts).map(|(o, next)| run.observe(*o, next)).collect();
        assert_eq!(verdicts[..2], [Some(Verdict::Skip), Some(Verdict::Skip)]);
        assert!(verdicts[2..].iter().all(|v| *v == Some(Verdict::Process)), "{verdicts:?}");
    }

    #[test]
    fn a_first_record_above_the_next_offset_needs_the_broker_until_a_new_sequence_starts() {
        let mut run = Run::new();
        assert_eq!(run.observe(12, 10), None, "a marker at 10 or records skipped: not known");
        assert_eq!(run.observe(13, 10), None, "the same sequence, still not known");
        assert!(run.assigned, "the assignment's sequence: the group's committed offset can tell");
        // A seek back to 10 starts a new sequence (its first offset is not above the last one).
        assert_eq!(run.observe(10, 10), Some(Verdict::Process));
        assert!(!run.assigned, "a sequence after a seek is not the assignment's");
        assert_eq!(run.observe(12, 11), Some(Verdict::Process), "11 is a marker: this sequence passed 10");
        assert_eq!(run.observe(3, 13), Some(Verdict::Skip), "a new sequence from below");
        assert_eq!(run.observe(20, 13), Some(Verdict::Process));
    }
}
