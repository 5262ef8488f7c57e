//! A consumer-group member that runs one task per assigned partition number.
//!
//! The member subscribes to one or more topics with the **range** assignor: for topics with the same partition
//! count and the same subscribers, range gives partition p of every topic to the same member, so the fold task p
//! owns partition p of both `unread.user-events` and `unread.user-deltas` (co-partitioning). A dispatcher loop
//! polls the consumer and hands each record to the task of its partition number, in order, through a bounded
//! channel; rebalance callbacks tell it which tasks to start and stop.
//!
//! Offsets belong to the tasks' checkpoints in PostgreSQL. Kafka's committed offsets are only a hint, stored after
//! each checkpoint: a task drops records below its checkpoint, and seeks back ([`PartitionInput::accept`]) when the
//! first record it sees is above it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// What the rebalance callbacks report to the dispatcher.
#[derive(Debug)]
enum RebalanceEvent {
    Assigned(HashSet<i32>),
    Revoked(HashSet<i32>),
}

/// The consumer context: forwards rebalances to the dispatcher.
pub struct GroupContext {
    events: mpsc::UnboundedSender<RebalanceEvent>,
}

impl ClientContext for GroupContext {}

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
    pub partition: i32,
    pub records: mpsc::Receiver<OwnedMessage>,
    pub consumer: Arc<GroupConsumer>,
    last_seek: HashMap<String, Instant>,
    last_lag_probe: HashMap<String, Instant>,
    /// Started again after the previous task of this partition failed, without a rebalance: the records since
    /// the checkpoint went to the failed task, so the new one must [`PartitionInput::rewind`].
    pub restarted: bool,
}

/// Whether a task should process a record, from its checkpointed next offset for the record's topic.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The record is the next one: process it.
    Process,
    /// Already covered by the checkpoint: drop it.
    Skip,
    /// Above the checkpoint: a seek back was asked for; drop it and wait for the records in between.
    Gap,
}

impl PartitionInput {
    /// Decides about one record given the next offset the task expects for its topic. On a gap it seeks the
    /// consumer back to `next` (at most once every 5 s per topic, in case a seek is lost), unless `next` is below
    /// the log start, in which case the records in between are gone and the record is processed.
    pub fn accept(&mut self, record: &OwnedMessage, next: i64) -> Verdict {
        let offset = record.offset();
        if offset < next {
            return Verdict::Skip;
        }
        if offset == next {
            return Verdict::Process;
        }
        let topic = record.topic().to_owned();
        if let Ok((low, _)) = self.consumer.fetch_watermarks(&topic, self.partition, Duration::from_secs(5)) {
            if next < low && offset == low {
                warn!(topic, partition = self.partition, next, low, "checkpoint is below the log start; going on");
                return Verdict::Process;
            }
        }
        let due = self.last_seek.get(&topic).is_none_or(|t| t.elapsed() > Duration::from_secs(5));
        if due {
            info!(topic, partition = self.partition, from = offset, to = next, "seeking back to the checkpoint");
            if let Err(e) = self.consumer.seek(&topic, self.partition, Offset::Offset(next), Duration::from_secs(5)) {
                warn!(topic, partition = self.partition, error = %e, "seek failed; will retry");
            }
            self.last_seek.insert(topic, Instant::now());
        }
        Verdict::Gap
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

    /// Records behind the end of `topic`'s partition, asking the broker at most every 2 s per topic (a blocking
    /// call, run off the async workers); `None` when not due or when the broker does not answer within 1 s.
    pub fn lag(&mut self, topic: &str, next: i64) -> Option<i64> {
        if self.last_lag_probe.get(topic).is_some_and(|t| t.elapsed() < Duration::from_secs(2)) {
            return None;
        }
        self.last_lag_probe.insert(topic.to_owned(), Instant::now());
        let (consumer, p) = (&self.consumer, self.partition);
        let (_, high) =
            tokio::task::block_in_place(|| consumer.fetch_watermarks(topic, p, Duration::from_secs(1))).ok()?;
        Some((high - next).max(0))
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
        match tokio::time::timeout(wait, self.records.recv()).await {
            Err(_) => return Some(batch),
            Ok(None) => return None,
            Ok(Some(m)) => batch.push(m),
        }
        while batch.len() < max {
            match self.records.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        Some(batch)
    }
}

/// Shared view of a group member's assignment, for readiness and metrics.
#[derive(Debug, Default)]
pub struct Assignment {
    partitions: Mutex<HashSet<i32>>,
    pub rebalances: AtomicUsize,
}

impl Assignment {
    /// The partition numbers currently assigned.
    pub fn partitions(&self) -> HashSet<i32> {
        self.partitions.lock().expect("not poisoned").clone()
    }
}

/// Starts the task of one partition number: given its input, returns its handle.
pub type SpawnTask = Arc<dyn Fn(PartitionInput) -> JoinHandle<anyhow::Result<()>> + Send + Sync>;

/// Creates a group member subscribed to `topics`.
///
/// Errors: the client cannot be created or the subscription fails.
pub fn consumer(brokers: &str, group: &str, topics: &[&str]) -> anyhow::Result<(Arc<GroupConsumer>, Dispatcher)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let consumer: GroupConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "range")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .set("fetch.wait.max.ms", "50")
        .set("queued.max.messages.kbytes", "65536")
        .create_with_context(GroupContext { events: tx })
        .with_context(|| format!("creating consumer of group {group}"))?;
    consumer.subscribe(topics).with_context(|| format!("subscribing to {topics:?}"))?;
    let consumer = Arc::new(consumer);
    Ok((consumer.clone(), Dispatcher { consumer, events: rx, assignment: Arc::new(Assignment::default()) }))
}

/// The loop that polls the consumer and feeds the partition tasks.
pub struct Dispatcher {
    consumer: Arc<GroupConsumer>,
    events: mpsc::UnboundedReceiver<RebalanceEvent>,
    pub assignment: Arc<Assignment>,
}

struct Running {
    records: mpsc::Sender<OwnedMessage>,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Dispatcher {
    /// Runs until `shutdown` turns true, then closes every task's input (each flushes and checkpoints) and waits
    /// for them, up to 30 s. A task that fails is logged and started again from its checkpoint after 1 s.
    ///
    /// Errors: never for a task's failure; only if the consumer itself breaks.
    pub async fn run(
        mut self,
        name: &'static str,
        spawn: SpawnTask,
        mut shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let mut tasks: HashMap<i32, Running> = HashMap::new();
        let start = |p: i32, tasks: &mut HashMap<i32, Running>, restarted: bool| {
            let (tx, rx) = mpsc::channel(20_000);
            let input = PartitionInput {
                partition: p,
                records: rx,
                consumer: self.consumer.clone(),
                last_seek: HashMap::new(),
                last_lag_probe: HashMap::new(),
                restarted,
            };
            tasks.insert(p, Running { records: tx, handle: spawn(input) });
        };
        let mut health = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => if *shutdown.borrow() { break },
                Some(event) = self.events.recv() => match event {
                    RebalanceEvent::Revoked(ps) => {
                        self.assignment.rebalances.fetch_add(1, Ordering::Relaxed);
                        for p in &ps {
                            if let Some(t) = tasks.remove(p) {
                                // Close its input rather than abort it: an aborted task could drop a checkpoint
                                // transaction half-way. It finishes its step, flushes and ends; if a successor
                                // took the partition's lease meanwhile, that last flush is fenced.
                                info!(stage = name, partition = p, "partition revoked; stopping its task");
                                drop(t.records);
                                drop(t.handle);
                            }
                        }
                        self.assignment.partitions.lock().expect("not poisoned").retain(|p| !ps.contains(p));
                    }
                    RebalanceEvent::Assigned(ps) => {
                        self.assignment.rebalances.fetch_add(1, Ordering::Relaxed);
                        info!(stage = name, partitions = ?ps, "partitions assigned");
                        for p in &ps {
                            if !tasks.contains_key(p) {
                                start(*p, &mut tasks, false);
                            }
                        }
                        self.assignment.partitions.lock().expect("not poisoned").extend(ps);
                    }
                },
                _ = health.tick() => {
                    let failed: Vec<i32> = tasks.iter().filter(|(_, t)| t.handle.is_finished()).map(|(p, _)| *p).collect();
                    for p in failed {
                        let t = tasks.remove(&p).expect("listed");
                        match t.handle.await {
                            Ok(Ok(())) => warn!(stage = name, partition = p, "task ended; starting it again"),
                            Ok(Err(_)) => info!(stage = name, partition = p, "starting the failed task again from its checkpoint"),
                            Err(e) => warn!(stage = name, partition = p, error = %e, "task panicked; starting it again"),
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        start(p, &mut tasks, true);
                    }
                }
                msg = self.consumer.recv() => match msg {
                    Ok(m) => {
                        let p = m.partition();
                        let m = m.detach();
                        if !tasks.contains_key(&p) {
                            start(p, &mut tasks, false);
                        }
                        if tasks[&p].records.send(m).await.is_err() {
                            // The task ended; the health check restarts it and it seeks back to its checkpoint.
                            tracing::debug!(stage = name, partition = p, "task input closed");
                        }
                    }
                    Err(e) => warn!(stage = name, error = %e, "consumer error"),
                }
            }
        }
        info!(stage = name, "stopping: flushing partition tasks");
        let handles: Vec<_> = tasks
            .into_values()
            .map(|t| {
                drop(t.records);
                t.handle
            })
            .collect();
        let all = futures::future::join_all(handles);
        if tokio::time::timeout(Duration::from_secs(30), all).await.is_err() {
            warn!(stage = name, "tasks did not stop within 30 s");
        }
        Ok(())
    }
}
