//! A consumer-group member that runs one task per assigned partition number.
//!
//! The member subscribes to one or more topics with the **range** assignor: for topics with the same partition
//! count and the same subscribers, range gives partition p of every topic to the same member, so the fold task p
//! owns partition p of both `unread.user-events` and `unread.user-deltas` (co-partitioning). A dispatcher loop
//! polls the consumer and hands each record to the task of its partition number, in order, through a bounded
//! channel per topic kind; rebalance callbacks tell it which tasks to start and stop. A full channel never stops
//! the dispatcher: the record waits in the dispatcher and its partition is paused in the consumer until the task
//! takes it ([`Lane`]), so one busy partition holds back neither the others nor the priority topic, whose records
//! a task takes first (the fold's user events: a read ack does not queue behind a burst of deltas).
//!
//! Offsets belong to the tasks' checkpoints in PostgreSQL. Kafka's committed offsets are only a hint, stored after
//! each checkpoint: a task drops records below its checkpoint, and seeks back ([`PartitionInput::accept`]) when the
//! first record it sees is above it and records in between are visible. Offsets of a transactional topic (the
//! delta topic) are not contiguous: commit markers and aborted records take offsets a `read_committed` consumer
//! never gets.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{FutureExt, StreamExt};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::error::TaskError;
use crate::checkpoint::Stage;
use crate::metrics::Assignment;

/// What the rebalance callbacks report to the dispatcher.
#[derive(Debug)]
enum RebalanceEvent {
    Assigned(HashSet<i32>),
    Revoked(HashSet<i32>),
}

/// The consumer context: forwards rebalances to the dispatcher.
pub struct GroupContext {
    events: mpsc::UnboundedSender<RebalanceEvent>,
    /// Whether the member subscribed. Created while the process checks that Kafka answers, it keeps quiet until
    /// then: that check says why Kafka refused, in the one line the process exits with.
    subscribed: AtomicBool,
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

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let _ = self.events.send(RebalanceEvent::Revoked(partitions(tpl)));
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let _ = self.events.send(RebalanceEvent::Assigned(partitions(tpl)));
        }
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
        let (consumer, p) = (&self.consumer, self.partition);
        let marks = tokio::task::block_in_place(|| consumer.fetch_watermarks(topic, p, Duration::from_secs(5)));
        if let Ok((low, _)) = marks {
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

    /// Asks the consumer to go back to `next` in `topic`'s partition, unless it was asked less than 5 s ago.
    fn seek_back(&mut self, topic: &str, next: i64, from: i64) {
        let due = self.last_seek.get(topic).is_none_or(|t| t.elapsed() > Duration::from_secs(5));
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
    let context = GroupContext { events: tx, subscribed: AtomicBool::new(false) };
    let consumer: GroupConsumer = crate::kafka::group_member(brokers, group, membership)
        .create_with_context(context)
        .with_context(|| format!("creating consumer of group {group}"))?;
    let (consumer, brokers) = (Arc::new(consumer), brokers.into());
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

/// Most records the dispatcher hands over in one turn of its loop: 512.
const DRAIN: usize = 512;

/// How often records that found a full channel try again: 2 ms.
const STALLED_RETRY: Duration = Duration::from_millis(2);

struct Running {
    records: Lane,
    priority: Lane,
    handle: JoinHandle<Result<(), TaskError>>,
}

/// One channel into a task, and the records that found it full, in order. While any wait, their topic's partition
/// is paused in the consumer, so the dispatcher goes on serving the other partitions and the other topic instead
/// of waiting for this task (a backlog of deltas no longer holds back a user event, or another partition).
struct Lane {
    tx: mpsc::Sender<OwnedMessage>,
    stalled: VecDeque<OwnedMessage>,
    /// The (topic, partition) paused while records wait.
    paused: Option<(String, i32)>,
}

impl Lane {
    fn new() -> (Self, mpsc::Receiver<OwnedMessage>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        (Self { tx, stalled: VecDeque::new(), paused: None }, rx)
    }

    /// Hands `m` over, or keeps it behind the records already waiting (pausing its partition when it is the first).
    /// Returns whether it paused the partition.
    fn push(&mut self, m: OwnedMessage, consumer: &GroupConsumer) -> bool {
        if !self.stalled.is_empty() {
            self.stalled.push_back(m);
            return false;
        }
        match self.tx.try_send(m) {
            Ok(()) => false,
            Err(TrySendError::Full(m)) => {
                let tp = (m.topic().to_owned(), m.partition());
                set_paused(consumer, &tp, true);
                (self.paused, _) = (Some(tp), self.stalled.push_back(m));
                true
            }
            // The task ended; note_ended starts it again and it seeks back to its checkpoint.
            Err(TrySendError::Closed(_)) => {
                tracing::debug!("task input closed");
                false
            }
        }
    }

    /// The lane's partition was assigned again after an eager revoke, which forgot its pause: pauses it again
    /// while records wait.
    fn reassigned(&mut self, consumer: &GroupConsumer) {
        if let Some(tp) = &self.paused {
            set_paused(consumer, tp, true);
        }
    }

    /// Hands over what waits, as far as the channel takes it; resumes the partition once nothing waits (or the
    /// task ended: its successor seeks back to its checkpoint).
    fn drain(&mut self, consumer: &GroupConsumer) {
        while let Some(m) = self.stalled.pop_front() {
            match self.tx.try_send(m) {
                Ok(()) => {}
                Err(TrySendError::Full(m)) => return self.stalled.push_front(m),
                Err(TrySendError::Closed(_)) => self.stalled.clear(),
            }
        }
        if let Some(tp) = self.paused.take() {
            set_paused(consumer, &tp, false);
        }
    }
}

/// Pauses or resumes fetching one topic-partition; a failure (the partition was just revoked) is only logged.
fn set_paused(consumer: &GroupConsumer, (topic, partition): &(String, i32), pause: bool) {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, *partition);
    let done = if pause { consumer.pause(&tpl) } else { consumer.resume(&tpl) };
    if let Err(e) = done {
        tracing::debug!(topic, partition, pause, error = %e, "pause or resume refused");
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
    /// Partitions whose task ended while still assigned, and when each starts again ([`Tasks::note_ended`]).
    restarting: HashMap<i32, Instant>,
    /// Where the pauses of full lanes are counted (`unread_consumer_pauses_total`).
    assignment: Arc<Assignment>,
}

impl Tasks {
    /// Starts partition `p`'s task; `restarted` after its previous task failed (it seeks back to its checkpoint).
    fn start(&mut self, p: i32, restarted: bool) {
        let ((records, rx), (priority, priority_rx)) = (Lane::new(), Lane::new());
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
            restarted,
            skipped: 0,
            timing: (Instant::now(), None),
        };
        self.running.insert(p, Running { records, priority, handle: (self.spawn)(input) });
    }

    /// Forgets partition `p`'s task: closes its input and resumes what its lanes paused. Returns its handle.
    fn remove(&mut self, p: i32) -> Option<JoinHandle<Result<(), TaskError>>> {
        let t = self.running.remove(&p)?;
        Some(self.close(t))
    }

    /// Closes a task's input and resumes what its lanes paused. Returns its handle.
    fn close(&self, t: Running) -> JoinHandle<Result<(), TaskError>> {
        for lane in [t.records, t.priority] {
            if let Some(tp) = lane.paused {
                set_paused(&self.consumer, &tp, false);
            }
        }
        t.handle
    }

    /// Whether records wait for a full channel.
    fn stalled(&self) -> bool {
        self.running.values().any(|t| !t.records.stalled.is_empty() || !t.priority.stalled.is_empty())
    }

    /// Hands over waiting records wherever a channel has room again.
    fn drain_stalled(&mut self) {
        for t in self.running.values_mut() {
            t.priority.drain(&self.consumer);
            t.records.drain(&self.consumer);
        }
    }

    /// Stops the tasks of revoked partitions. Their input is closed rather than the tasks aborted: an aborted task
    /// could drop a checkpoint transaction half-way. Each finishes its step, flushes and ends; if a successor took
    /// the partition's lease meanwhile, that last flush is fenced.
    ///
    /// Under eager rebalances every partition is revoked, and most come back to the same member a few ms later
    /// (a SIGKILLed member's survivors keep theirs, and take more): those tasks are set aside, still running,
    /// until the assignment, which keeps the ones it gives back (no flush, load or new producer) and stops the
    /// others. A kept task's consumer starts again at the group's committed offsets, at or below the task's
    /// position: its input drops what its checkpoint covers ([`PartitionInput::accept`]).
    fn revoke(&mut self, partitions: &HashSet<i32>) {
        for p in partitions {
            self.restarting.remove(p); // a task the partition's next owner (or this member, anew) starts
            let Some(t) = self.running.remove(p) else { continue };
            if self.eager {
                info!(stage = %self.stage, partition = p, "partition revoked; its task waits for the assignment");
                self.revoked.insert(*p, t);
            } else {
                self.stop(*p, t);
            }
        }
    }

    /// Stops partition `p`'s task `t` ([`Tasks::close`]); it ends on its own.
    fn stop(&self, p: i32, t: Running) {
        self.close(t);
        info!(stage = %self.stage, partition = p, "partition revoked; stopping its task");
    }

    /// Starts the tasks of newly assigned partitions; under eager rebalances, keeps the revoked tasks whose
    /// partitions it gives back and stops the others ([`Tasks::revoke`]).
    fn assign(&mut self, partitions: &HashSet<i32>) {
        info!(stage = %self.stage, partitions = ?partitions, "partitions assigned");
        for (p, mut t) in std::mem::take(&mut self.revoked) {
            if partitions.contains(&p) {
                info!(stage = %self.stage, partition = p, "partition assigned again; its task goes on");
                t.records.reassigned(&self.consumer);
                t.priority.reassigned(&self.consumer);
                self.running.insert(p, t);
            } else {
                self.stop(p, t);
            }
        }
        for p in partitions {
            if !self.running.contains_key(p) {
                self.start(*p, false);
            }
        }
    }

    /// Notes every task that ended (failed, panicked or fenced) though its partition is still assigned: it starts
    /// again 1 s later ([`RESTART_AFTER`], [`Tasks::start_due`]) and resumes from its checkpoint. The dispatcher
    /// goes on meanwhile: the other partitions are not held up, and the records of a waiting partition are dropped
    /// ([`Tasks::dispatch`]), since its new task seeks back to its checkpoint and reads them again. One wait for all
    /// that ended together: a fencing of the instance's shared producer ends every fan-out task at once.
    fn note_ended(&mut self) {
        let ended: Vec<i32> = self.running.iter().filter(|(_, t)| t.handle.is_finished()).map(|(p, _)| *p).collect();
        let due = Instant::now() + RESTART_AFTER;
        for p in ended {
            let handle = self.remove(p).expect("listed");
            let stage = self.stage;
            match handle.now_or_never() {
                // `None` cannot be: the handle is finished.
                Some(Ok(Ok(()))) | None => warn!(%stage, partition = p, "task ended; starting it again"),
                Some(Ok(Err(_))) => info!(%stage, partition = p, "starting the failed task again from its checkpoint"),
                Some(Err(e)) => warn!(%stage, partition = p, error = %e, "task panicked; starting it again"),
            }
            self.restarting.insert(p, due);
        }
    }

    /// When the next noted task is due to start again ([`Tasks::note_ended`]); `None`: none waits.
    fn next_restart(&self) -> Option<Instant> {
        self.restarting.values().min().copied()
    }

    /// Starts again every noted task whose wait is over; it seeks back to its checkpoint.
    fn start_due(&mut self) {
        let now = Instant::now();
        let due: Vec<i32> = self.restarting.iter().filter(|(_, at)| **at <= now).map(|(p, _)| *p).collect();
        for p in due {
            self.restarting.remove(&p);
            self.start(p, true);
        }
    }

    /// Hands a record to its partition's task (starting it if needed), through the priority lane when it is of the
    /// priority topic; never waits for a full channel ([`Lane`]).
    fn dispatch(&mut self, m: OwnedMessage) {
        let p = m.partition();
        if self.restarting.contains_key(&p) {
            return; // its task starts again soon, from its checkpoint, and reads this record again
        }
        if !self.running.contains_key(&p) && !self.revoked.contains_key(&p) {
            self.start(p, false);
        }
        let t = self.running.get_mut(&p).or(self.revoked.get_mut(&p)).expect("started");
        let lane = if self.priority.as_deref() == Some(m.topic()) { &mut t.priority } else { &mut t.records };
        if lane.push(m, &self.consumer) {
            self.assignment.pauses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A record or error from the consumer: the record to its task ([`Tasks::dispatch`]), the error to the log.
    fn take(&mut self, msg: Result<rdkafka::message::BorrowedMessage<'_>, KafkaError>) {
        match msg {
            Ok(m) => self.dispatch(m.detach()),
            Err(e) => warn!(stage = %self.stage, error = %e, "consumer error"),
        }
    }

    /// Closes every task's input (each flushes and checkpoints) and waits for them, up to 30 s.
    async fn stop_all(self) {
        info!(stage = %self.stage, "stopping: flushing partition tasks");
        let handles: Vec<_> = self.running.into_values().chain(self.revoked.into_values()).map(|t| t.handle).collect();
        if tokio::time::timeout(Duration::from_secs(30), futures::future::join_all(handles)).await.is_err() {
            warn!(stage = %self.stage, "tasks did not stop within 30 s");
        }
    }
}

impl Dispatcher {
    /// Runs until `shutdown` turns true, then closes every task's input (each flushes and checkpoints) and waits
    /// for them, up to 30 s. A task that fails is logged and started again from its checkpoint after 1 s.
    ///
    /// Errors: never for a task's failure; only if the consumer itself breaks.
    pub async fn run(
        mut self,
        stage: Stage,
        spawn: SpawnTask,
        mut shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let (consumer, brokers) = (self.consumer.clone(), self.brokers.clone());
        // One stream for the loop's life: `recv` would register and drop a waker slot per record.
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
            // Records waiting for a full channel go first, each turn (and every STALLED_RETRY while idle).
            if tasks.stalled() {
                tasks.drain_stalled();
            }
            let next_restart = tasks.next_restart();
            tokio::select! {
                biased;
                _ = shutdown.changed() => if *shutdown.borrow() { break },
                Some(event) = self.events.recv() => {
                    self.assignment.rebalances.fetch_add(1, Ordering::Relaxed);
                    let mut held = self.assignment.partitions.lock().expect("not poisoned");
                    match event {
                        RebalanceEvent::Revoked(ps) => {
                            tasks.revoke(&ps);
                            held.retain(|p| !ps.contains(p));
                        }
                        RebalanceEvent::Assigned(ps) => {
                            tasks.assign(&ps);
                            held.extend(ps);
                        }
                    }
                }
                _ = health.tick() => tasks.note_ended(),
                _ = async { tokio::time::sleep_until(next_restart.unwrap_or_else(Instant::now).into()).await },
                    if next_restart.is_some() => tasks.start_due(),
                // In a block, so that the timer is made only when records wait (a disabled branch is still built).
                _ = async { tokio::time::sleep(STALLED_RETRY).await }, if tasks.stalled() => tasks.drain_stalled(),
                msg = stream.next() => {
                    tasks.take(msg.expect("Kafka streams never end"));
                    // The records already fetched follow in this turn: one turn of the loop per batch, not per
                    // record. A rebalance in the queue stops it (its callback leaves the stream pending), so the
                    // event is handled before any record behind it.
                    for _ in 1..DRAIN {
                        match stream.next().now_or_never() {
                            Some(msg) => tasks.take(msg.expect("Kafka streams never end")),
                            None => break,
                        }
                    }
                }
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

    use super::{
        GroupConsumer, GroupContext, Lane, PartitionInput, Run, SpawnTask, Tasks, Verdict, QUEUE, RESTART_AFTER,
    };

    /// A consumer that never connects (librdkafka connects lazily): enough to pause and resume.
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
                .create_with_context(GroupContext { events, subscribed: std::sync::atomic::AtomicBool::new(true) })
                .unwrap(),
        )
    }

    fn record(topic: &str, offset: i64) -> OwnedMessage {
        OwnedMessage::new(Some(vec![]), None, topic.into(), Timestamp::NotAvailable, 0, offset, None)
    }

    fn input(consumer: Arc<GroupConsumer>) -> (Lane, Lane, PartitionInput) {
        let ((records, rx), (priority, priority_rx)) = (Lane::new(), Lane::new());
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
            restarted,
            skipped: 0,
            timing: (std::time::Instant::now(), None),
        };
        (records, priority, p)
    }

    #[tokio::test]
    async fn a_user_event_is_taken_before_a_backlog_of_deltas_and_each_topic_keeps_its_order() {
        let c = consumer();
        let (mut deltas, mut events, mut input) = input(c.clone());
        // The channel holds QUEUE, 500 wait in the lane; the push that found it full paused the partition, once.
        let paused: Vec<i64> =
            (0..QUEUE as i64 + 500).filter(|offset| deltas.push(record("deltas", *offset), &c)).collect();
        assert_eq!(paused, [QUEUE as i64], "one pause, by the first record that found the channel full");
        assert_eq!((deltas.stalled.len(), deltas.paused.as_ref().map(|(t, _)| t.as_str())), (500, Some("deltas")));
        assert!(!events.push(record("events", 0), &c) && !events.push(record("events", 1), &c));
        let batch = input.next_batch(100, Duration::from_secs(1)).await.unwrap();
        let taken: Vec<(&str, i64)> = batch.iter().map(|m| (m.topic(), m.offset())).collect();
        assert_eq!(taken[..3], [("events", 0), ("events", 1), ("deltas", 0)]);
        assert_eq!(taken.len(), 100);
        // As the task takes records, the waiting ones follow in order; the partition is resumed once none wait.
        deltas.drain(&c);
        assert_eq!((deltas.stalled.len(), deltas.paused.is_some()), (402, true), "98 found room");
        let mut offsets = Vec::new();
        while let Some(batch) = input.next_batch(4000, Duration::from_millis(1)).await.filter(|b| !b.is_empty()) {
            offsets.extend(batch.iter().map(|m| m.offset()));
            deltas.drain(&c);
        }
        assert_eq!((deltas.stalled.len(), deltas.paused.is_some()), (0, false));
        assert_eq!(offsets, (98..QUEUE as i64 + 500).collect::<Vec<_>>());
        // Both lanes dropped (the task revoked): the input ends.
        drop((deltas, events));
        assert!(input.next_batch(10, Duration::from_secs(1)).await.is_none());
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
        tasks.dispatch(at(0, 0));
        tasks.dispatch(at(1, 0));
        while !tasks.running[&0].handle.is_finished() {
            tokio::task::yield_now().await;
        }
        let noted = std::time::Instant::now();
        tasks.note_ended();
        assert!(!tasks.running.contains_key(&0) && tasks.running.contains_key(&1));
        let due = tasks.next_restart().expect("partition 0 waits");
        assert!(due >= noted + RESTART_AFTER - Duration::from_millis(50), "it waits about {RESTART_AFTER:?}");
        // Meanwhile the dispatcher goes on: partition 1 gets its records; partition 0's are left to its restart.
        tasks.dispatch(at(0, 1));
        tasks.dispatch(at(1, 1));
        assert!(!tasks.running.contains_key(&0), "no task started for a waiting partition");
        tasks.start_due();
        assert!(!tasks.running.contains_key(&0), "not before its time");
        tokio::time::sleep_until(due.into()).await;
        tasks.start_due();
        assert_eq!(*starts.lock().unwrap(), [(0, false), (1, false), (0, true)], "restarted: it seeks back");
        assert_eq!(tasks.next_restart(), None);
        // A revoke forgets a waiting partition: its next owner starts it afresh.
        while !tasks.running[&0].handle.is_finished() {
            tokio::task::yield_now().await;
        }
        tasks.note_ended();
        tasks.revoke(&[0].into());
        assert_eq!(tasks.next_restart(), None);
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
