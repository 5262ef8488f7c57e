//! `unread replay --from earliest|checkpoint|TIMESTAMP --into NAMESPACE`: folds the retained input log into a
//! separate namespace ([`crate::config`]) while the live service keeps running, resumably.
//!
//! The replay reads both input topics with one consumer that assigns itself every partition (no consumer group, so
//! it takes nothing from the live service) and runs the same pure fan-out and fold as `unread fold`, in one process:
//! deltas go straight from the fan-out to the fold, never through a topic. Every checkpoint interval it checkpoints
//! like the service does, into the namespace's own Redis prefix and PostgreSQL schema: first every changed user to
//! Redis (version-guarded), then every fold partition's users with its `user-events` offset, then every fan-out
//! partition's conversations with its `conversation-events` offset, each partition in one transaction under a
//! lease the replay holds. Because deltas never leave the process, a checkpoint has none in flight: the
//! namespace's own delta topic starts empty, and `unread run --namespace NAME` continues from the replay's
//! checkpoint as from its own. A crash between two partitions' commits can only leave fold partitions ahead of the
//! fan-out; resuming re-runs the fan-out over those events, and the fold absorbs the repeated deltas (CONTRACT.md
//! § Delivery; docs/semantics.md).
//!
//! Where it starts:
//! - `earliest`: empty state, every input partition from offset 0. Refused when a partition's log no longer starts
//!   at 0 (retention deleted records): a replay from there would silently miss them. The same check refuses a
//!   checkpoint (the source's, or the namespace's own when resuming) older than what retention kept.
//! - `checkpoint`: the source namespace's checkpoint (one consistent snapshot), from its offsets, plus the deltas the
//!   source's fold had not yet read (its delta topic from the fold's offsets to the end), which the source's
//!   fan-out produced before its checkpoint. Covers whatever retention deleted before the checkpoint.
//! - a timestamp (RFC 3339): empty state, every input partition from the first record at or after it. A partial
//!   state: what happened before (joins, reads) is unknown, so counts are those of a log that began then.
//!
//! A namespace that already holds a replay's checkpoint is resumed from it (and caught up to the current end);
//! `--from` then only applies to a fresh namespace. A replay that died before its first checkpoint was complete
//! (start state and offsets of every partition) starts afresh.

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tracing::{info, warn};

use crate::checkpoint::{self, store::CheckpointStore, store::Stage};
use crate::config::Settings;
use crate::contract::{ConversationEvent, Event, Stream, UserEvent};
use crate::fanout::FanOut;
use crate::fold::Fold;
use crate::projection::redis::{RedisProjection, UserWrite};
use crate::service::{fold_stage, records};
use crate::topology::{partition_counts, partition_for_key, Topics};

/// Where a replay starts (`--from`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPoint {
    /// Empty state, offset 0 of every input partition.
    Earliest,
    /// The source namespace's checkpoint and its offsets.
    Checkpoint,
    /// Empty state, the first offset at or after this time (ms since the Unix epoch) in every input partition.
    Timestamp { ms: i64, text: String },
}

impl FromStr for StartPoint {
    type Err = anyhow::Error;

    /// `earliest`, `checkpoint`, or an RFC 3339 timestamp such as `2026-11-20T08:00:00Z`.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "earliest" => StartPoint::Earliest,
            "checkpoint" => StartPoint::Checkpoint,
            t => {
                let at = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                    .with_context(|| format!("--from {t:?}: expected earliest, checkpoint or an RFC 3339 time"))?;
                StartPoint::Timestamp { ms: (at.unix_timestamp_nanos() / 1_000_000) as i64, text: t.to_owned() }
            }
        })
    }
}

impl std::fmt::Display for StartPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartPoint::Earliest => f.write_str("earliest"),
            StartPoint::Checkpoint => f.write_str("checkpoint"),
            StartPoint::Timestamp { text, .. } => f.write_str(text),
        }
    }
}

/// Why a replay refuses to start. Nothing was written to the namespace then.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The replay would start below a partition's log start: `--from earliest` (offset 0) or a checkpoint older
    /// than what retention kept.
    #[error(
        "{topic} partition {partition} starts at offset {log_start}, but the replay must read it from offset {from}: \
         retention deleted records it needs, so it would miss them. Replay --from checkpoint instead, from a \
         checkpoint newer than that (docs/operations.md § Retention)"
    )]
    LogTruncated { topic: String, partition: i32, log_start: i64, from: i64 },
    /// The target is the namespace the command runs in, or the one the read API serves.
    #[error("cannot replay into namespace {0:?}: it is the source or the live one; replay into a new namespace")]
    LiveTarget(String),
    /// The target holds state that `unread run` wrote (its fold read the namespace's delta topic).
    #[error("namespace {0:?} holds state written by `unread run`, not by a replay; drop it first (`unread drop {0}`)")]
    ServiceState(String),
}

/// Options of one replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub from: StartPoint,
    /// The namespace to fill.
    pub into: String,
    /// Checkpoint at least this often.
    pub checkpoint_interval: Duration,
    /// Fold at most this many records per second (to spare the live service's brokers and Redis); `None`: no limit.
    pub max_rate: Option<u64>,
}

/// What a replay did.
#[derive(Debug, Default, Clone)]
pub struct ReplayReport {
    /// Whether it resumed a namespace that held a replay's checkpoint.
    pub resumed: bool,
    /// Input records read in this run (user events and conversation events).
    pub records: u64,
    /// Records that fail the contract (the live service dead-lettered them): skipped.
    pub invalid: u64,
    /// Deltas of the source's delta topic applied (`--from checkpoint` only).
    pub in_flight_deltas: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Users and conversations held at the end.
    pub users: usize,
    pub conversations: usize,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// Of which: folding (fan-out and fold of the batches), and checkpointing (Redis and PostgreSQL), seconds.
    pub fold_seconds: f64,
    pub checkpoint_seconds: f64,
    /// Stopped by SIGINT/SIGTERM after checkpointing; run the same command to resume.
    pub interrupted: bool,
}

impl ReplayReport {
    /// Records per second over the run.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
}

/// A partition's changed entities for [`CheckpointStore::commit`]: id and encoded state (`None`: delete).
type Changes = Vec<(String, Option<Vec<u8>>)>;

/// The replay's state between checkpoints.
struct Replay {
    topics: Topics,
    store: CheckpointStore,
    projection: RedisProjection,
    fanout: FanOut,
    fold: Fold,
    /// Partition counts of conversation-events and user-events.
    nc: i32,
    nu: i32,
    /// Lease generations per partition.
    gen_fanout: Vec<i64>,
    gen_fold: Vec<i64>,
    /// Next offsets per partition: `next[CONV]` of conversation-events, `next[USER]` of user-events.
    next: [Vec<i64>; 2],
    dirty_users: HashSet<String>,
    dirty_convs: HashSet<String>,
    checkpoints: u64,
}

impl Replay {
    /// Checkpoints: Redis first (changed users, then every partition's marker), then each fold partition, then
    /// each fan-out partition, each in one transaction with its offsets.
    async fn checkpoint(&mut self) -> anyhow::Result<()> {
        let mut writes = Vec::with_capacity(self.dirty_users.len());
        let mut by_partition: HashMap<i32, Changes> = HashMap::new();
        for user in self.dirty_users.drain() {
            let p = partition_for_key(user.as_bytes(), self.nu);
            let version = fold_stage::version(self.gen_fold[p as usize], [self.next[USER][p as usize], 0]);
            writes.push(UserWrite::replace(self.fold.view(&user), version));
            let state = self.fold.user(&user).map(checkpoint::encode_user);
            by_partition.entry(p).or_default().push((user, state));
        }
        self.projection.write(&writes).await.context("writing the namespace's Redis projection")?;
        for p in 0..self.nu {
            self.projection.set_marker(p).await?;
        }
        for p in 0..self.nu {
            let changed = by_partition.remove(&p).unwrap_or_default();
            let offsets = [
                (self.topics.user_events.as_str(), self.next[USER][p as usize]),
                (self.topics.user_deltas.as_str(), 0),
            ];
            self.store.commit(Stage::Fold, p, self.gen_fold[p as usize], &changed, &offsets).await?;
        }
        let mut by_partition: HashMap<i32, Changes> = HashMap::new();
        for conv in self.dirty_convs.drain() {
            let p = partition_for_key(conv.as_bytes(), self.nc);
            let state = self.fanout.conversation(&conv).map(checkpoint::encode_conversation);
            by_partition.entry(p).or_default().push((conv, state));
        }
        for p in 0..self.nc {
            let changed = by_partition.remove(&p).unwrap_or_default();
            let offsets = [(self.topics.conversation_events.as_str(), self.next[CONV][p as usize])];
            self.store.commit(Stage::FanOut, p, self.gen_fanout[p as usize], &changed, &offsets).await?;
        }
        self.checkpoints += 1;
        Ok(())
    }

    /// Folds one batch of records (both topics, any order within a partition's sequence preserved).
    fn process(&mut self, conv: Vec<ConversationEvent>, user: Vec<UserEvent>) {
        let (deltas, _) = self.fanout.process_batch(&conv);
        self.dirty_convs.extend(conv.iter().map(|e| e.conversation_id().to_owned()));
        for d in &deltas {
            self.dirty_users.insert(d.user_id.clone());
            self.fold.apply_delta(d);
        }
        for e in &user {
            self.dirty_users.insert(e.user_id().to_owned());
            self.fold.apply_user_event(e);
        }
    }
}

/// A consumer outside any consumer group (nothing is committed; it only assigns partitions to itself).
fn consumer_config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("group.id", "unread-replay")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("fetch.wait.max.ms", "50")
        .set("queued.max.messages.kbytes", "65536")
        // When the local queue is full, retry fetching after 10 ms, not librdkafka's default 1 s: the reader
        // decodes more slowly than the broker sends, so it would otherwise sit idle for whole seconds.
        .set("fetch.queue.backoff.ms", "10");
    c
}

fn consumer(brokers: &str) -> anyhow::Result<StreamConsumer> {
    consumer_config(brokers).create().context("creating the replay's Kafka consumer")
}

/// Index of conversation-events and of user-events in the per-topic arrays (`[_; 2]`) below.
const CONV: usize = 0;
const USER: usize = 1;

/// Largest batch the reader hands over: 5,000 records.
const READ_BATCH: u64 = 5000;

/// Records read and decoded by [`read_input`], in partition order.
#[derive(Default)]
struct ReadBatch {
    conv: Vec<ConversationEvent>,
    user: Vec<UserEvent>,
    /// Records read, the invalid ones included.
    records: u64,
    /// Records that fail the contract (skipped: the live service dead-lettered them).
    invalid: u64,
    /// (topic index, partition, next offset) of the partitions this batch advanced.
    next: Vec<(usize, usize, i64)>,
}

/// Where a replay starts and stops, per partition of each input topic (indexed by [`CONV`] and [`USER`]).
struct Positions {
    next: [Vec<i64>; 2],
    end: [Vec<i64>; 2],
}

impl Positions {
    /// Records from each partition's next offset to its end, over every partition.
    fn remaining(&self) -> i64 {
        (0..2).map(|i| self.next[i].iter().zip(&self.end[i]).map(|(n, e)| (e - n).max(0)).sum::<i64>()).sum()
    }
}

/// The reader thread: polls the assigned partitions, skips records outside [next, end), decodes the rest and sends
/// them in batches of at most [`READ_BATCH`] (or what 50 ms brought). Ends when every partition reached its end,
/// after a consumer error (sent on), or when the receiver is gone.
fn read_input(
    c: BaseConsumer,
    user_topic: String,
    mut pos: Positions,
    tx: tokio::sync::mpsc::Sender<anyhow::Result<ReadBatch>>,
) {
    while pos.remaining() > 0 {
        let mut batch = ReadBatch::default();
        let mut touched: HashMap<(usize, usize), i64> = HashMap::new();
        let deadline = Instant::now() + Duration::from_millis(50);
        while batch.records < READ_BATCH && Instant::now() < deadline {
            let msg = match c.poll(Duration::from_millis(20)) {
                None => continue,
                Some(Err(e)) => {
                    let _ = tx.blocking_send(Err(e.into()));
                    return;
                }
                Some(Ok(m)) => m,
            };
            let (p, i) = (msg.partition() as usize, if msg.topic() == user_topic { USER } else { CONV });
            if msg.offset() < pos.next[i][p] || msg.offset() >= pos.end[i][p] {
                continue; // before the resume point, or after the end this replay aims at
            }
            pos.next[i][p] = msg.offset() + 1;
            touched.insert((i, p), msg.offset() + 1);
            batch.records += 1;
            match records::event(&msg, if i == USER { Stream::User } else { Stream::Conversation }) {
                Ok(Event::Conversation(e)) => batch.conv.push(e),
                Ok(Event::User(e)) => batch.user.push(e),
                Err(_) => batch.invalid += 1,
            }
        }
        if batch.records > 0 {
            batch.next = touched.into_iter().map(|((i, p), n)| (i, p, n)).collect();
            if tx.blocking_send(Ok(batch)).is_err() {
                return;
            }
        }
    }
}

fn watermarks(c: &StreamConsumer, topic: &str, n: i32) -> anyhow::Result<Vec<(i64, i64)>> {
    (0..n)
        .map(|p| {
            c.fetch_watermarks(topic, p, Duration::from_secs(10)).with_context(|| format!("watermarks of {topic}[{p}]"))
        })
        .collect()
}

/// Runs a replay from `source` (the namespace of the settings) into `opts.into`, printing progress on stderr.
///
/// Errors: [`Refused`] before anything is written; a service unreachable; a corrupt checkpoint; another replay or
/// service taking the namespace's leases meanwhile (fenced). An interrupted replay (error or signal) resumes from
/// its last checkpoint when run again.
pub async fn replay(source: &Settings, opts: &ReplayOptions) -> anyhow::Result<ReplayReport> {
    let started = Instant::now();
    let target = source.in_namespace(&opts.into)?;
    if opts.into == source.namespace || crate::namespace::live_namespace(source).await? == opts.into {
        return Err(Refused::LiveTarget(opts.into.clone()).into());
    }
    let topics = target.topics();
    let store = CheckpointStore::connect(&target.database_url, &target.ns_db_schema(), 4).await?;
    store.migrate().await?;
    let fold_offsets = store.offsets(Stage::Fold).await?;
    if fold_offsets.iter().any(|((t, _), o)| *t == topics.user_deltas && *o > 0) {
        return Err(Refused::ServiceState(opts.into.clone()).into());
    }
    let counts = partition_counts(&source.brokers)?;
    let count = |t: &str| counts.get(t).copied().with_context(|| format!("topic {t} does not exist"));
    let (nc, nu) = (count(&topics.conversation_events)?, count(&topics.user_events)?);
    let c = consumer(&source.brokers)?;
    let marks = [watermarks(&c, &topics.conversation_events, nc)?, watermarks(&c, &topics.user_events, nu)?];
    let status = store.replay_status().await?;
    if !store.is_empty().await? && status.is_none() {
        return Err(Refused::ServiceState(opts.into.clone()).into());
    }
    let resumed = status.as_ref().is_some_and(|s| s.seeded);
    if status.is_some() && !resumed {
        store.reset().await?; // died during its first checkpoint: start afresh
    }
    let mut report = ReplayReport { resumed, ..Default::default() };

    let owner = format!("replay:{}", std::process::id());
    let mut gen_fanout = Vec::new();
    for p in 0..nc {
        gen_fanout.push(store.acquire(Stage::FanOut, p, &owner).await?);
    }
    let mut gen_fold = Vec::new();
    for p in 0..nu {
        gen_fold.push(store.acquire(Stage::Fold, p, &owner).await?);
    }
    let projection = RedisProjection::connect(&target.redis_url, &target.ns_redis_prefix()).await?;
    let mut r = Replay {
        topics: topics.clone(),
        store,
        projection,
        fanout: FanOut::new(),
        fold: Fold::new(),
        nc,
        nu,
        gen_fanout,
        gen_fold,
        next: [vec![0; nc as usize], vec![0; nu as usize]],
        dirty_users: HashSet::new(),
        dirty_convs: HashSet::new(),
        checkpoints: 0,
    };

    if resumed {
        for (id, _, bytes) in r.store.states(Stage::FanOut, None).await? {
            r.fanout.restore(id.clone(), checkpoint::decode_conversation(&bytes).with_context(|| format!("{id:?}"))?);
        }
        for (id, _, bytes) in r.store.states(Stage::Fold, None).await? {
            r.fold.restore(id.clone(), checkpoint::decode_user(&bytes).with_context(|| format!("{id:?}"))?);
        }
        let fanout_offsets = r.store.offsets(Stage::FanOut).await?;
        for p in 0..nc {
            if let Some(o) = fanout_offsets.get(&(topics.conversation_events.clone(), p)) {
                r.next[CONV][p as usize] = *o;
            }
        }
        for p in 0..nu {
            if let Some(o) = fold_offsets.get(&(topics.user_events.clone(), p)) {
                r.next[USER][p as usize] = *o;
            }
        }
        check_retained(&r, &marks)?;
        r.store.start_replay(&source.namespace, &opts.from.to_string(), false).await?;
        info!(namespace = %opts.into, "resuming the namespace's replay from its checkpoint (--from applies only to a fresh namespace)");
    } else {
        match &opts.from {
            StartPoint::Earliest => {}
            StartPoint::Checkpoint => {
                report.in_flight_deltas = seed_from_checkpoint(source, &mut r, &c).await?;
            }
            StartPoint::Timestamp { ms, text } => {
                let mut tpl = TopicPartitionList::new();
                for (t, n) in [(&topics.conversation_events, nc), (&topics.user_events, nu)] {
                    for p in 0..n {
                        tpl.add_partition_offset(t, p, Offset::Offset(*ms))?;
                    }
                }
                let found = c.offsets_for_times(tpl, Duration::from_secs(10)).context("offsets for the timestamp")?;
                for e in found.elements() {
                    let (p, i) = (e.partition() as usize, if e.topic() == topics.user_events { USER } else { CONV });
                    r.next[i][p] = match e.offset() {
                        Offset::Offset(o) => o,
                        _ => marks[i][p].1, // no record at or after the time
                    };
                }
                warn!(from = %text, "replay from a timestamp: state before it is unknown, counts are partial");
            }
        }
        check_retained(&r, &marks)?;
        r.store.start_replay(&source.namespace, &opts.from.to_string(), true).await?;
        r.checkpoint().await?;
        r.store.mark_replay_seeded().await?;
    }

    let positions = Positions { next: r.next.clone(), end: marks.map(|m| m.iter().map(|(_, high)| *high).collect()) };
    let total = positions.remaining() as u64;
    let mut tpl = TopicPartitionList::new();
    for (i, t) in [(CONV, &topics.conversation_events), (USER, &topics.user_events)] {
        for (p, (n, e)) in positions.next[i].iter().zip(&positions.end[i]).enumerate() {
            if n < e {
                tpl.add_partition_offset(t, p as i32, Offset::Offset(*n))?;
            }
        }
    }
    let progress = Progress::new(total);
    // A reader thread polls and decodes (one core) while this task folds and checkpoints (the other).
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    if tpl.count() > 0 {
        let reader: BaseConsumer =
            consumer_config(&source.brokers).create().context("creating the replay's consumer")?;
        reader.assign(&tpl).context("assigning the input partitions")?;
        let user_topic = topics.user_events.clone();
        std::thread::spawn(move || read_input(reader, user_topic, positions, tx));
    } else {
        drop(tx);
    }
    info!(after_s = started.elapsed().as_secs_f64(), records = total, "replay reading");
    let mut last_checkpoint = Instant::now();
    let mut stop = Box::pin(shutdown_signal());
    loop {
        let batch = tokio::select! {
            b = rx.recv() => match b {
                Some(b) => b.context("reading the input topics")?,
                None => break, // the reader reached every end
            },
            _ = &mut stop => { report.interrupted = true; break; }
        };
        for (i, p, next) in batch.next {
            r.next[i][p] = next;
        }
        let t = Instant::now();
        r.process(batch.conv, batch.user);
        report.fold_seconds += t.elapsed().as_secs_f64();
        report.records += batch.records;
        report.invalid += batch.invalid;
        progress.set(report.records, started);
        if last_checkpoint.elapsed() >= opts.checkpoint_interval {
            let t = Instant::now();
            r.checkpoint().await?;
            report.checkpoint_seconds += t.elapsed().as_secs_f64();
            last_checkpoint = Instant::now();
        }
        if let Some(rate) = opts.max_rate {
            let due = Duration::from_secs_f64(report.records as f64 / rate.max(1) as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = &mut stop => { report.interrupted = true; break; }
                }
            }
        }
    }
    drop(rx);
    info!(after_s = started.elapsed().as_secs_f64(), "replay read everything");
    let t = Instant::now();
    r.checkpoint().await?;
    report.checkpoint_seconds += t.elapsed().as_secs_f64();
    progress.finish();
    if !report.interrupted {
        r.store.finish_replay(report.records as i64).await?;
        // The namespace's own delta topic, for `unread run --namespace` to continue from here.
        crate::topology::create_one(&source.brokers, crate::topology::USER_DELTAS, &topics.user_deltas, nu).await?;
    }
    report.checkpoints = r.checkpoints;
    report.users = r.fold.users().count();
    report.conversations = r.fanout.conversations().count();
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Refuses (before anything is written) a start position below its partition's log start: retention deleted
/// records the replay needs, and skipping them would give wrong counts with no sign of it.
fn check_retained(r: &Replay, marks: &[Vec<(i64, i64)>; 2]) -> anyhow::Result<()> {
    for (i, topic) in [(CONV, &r.topics.conversation_events), (USER, &r.topics.user_events)] {
        let deleted = r.next[i].iter().zip(&marks[i]).enumerate().find(|(_, (n, (low, _)))| *n < low);
        if let Some((p, (from, (low, _)))) = deleted {
            return Err(Refused::LogTruncated {
                topic: topic.clone(),
                partition: p as i32,
                log_start: *low,
                from: *from,
            }
            .into());
        }
    }
    Ok(())
}

/// `--from checkpoint`: loads the source's checkpoint snapshot and offsets, then applies the deltas its fold had not
/// read yet (source delta topic, from the fold's offsets to the current end). Returns the deltas applied.
async fn seed_from_checkpoint(source: &Settings, r: &mut Replay, c: &StreamConsumer) -> anyhow::Result<u64> {
    let src = CheckpointStore::connect(&source.database_url, &source.ns_db_schema(), 2).await?;
    let snap = src.snapshot().await.context("reading the source's checkpoint")?;
    for (id, bytes) in snap.conversations {
        let state = checkpoint::decode_conversation(&bytes).with_context(|| format!("{id:?}"))?;
        r.dirty_convs.insert(id.clone());
        r.fanout.restore(id, state);
    }
    for (id, bytes) in snap.users {
        let state = checkpoint::decode_user(&bytes).with_context(|| format!("{id:?}"))?;
        r.dirty_users.insert(id.clone());
        r.fold.restore(id, state);
    }
    let src_topics = source.topics();
    for p in 0..r.nc {
        // A partition never checkpointed starts at 0, which check_retained requires to be retained.
        if let Some(o) = snap.fanout_offsets.get(&(src_topics.conversation_events.clone(), p)) {
            r.next[CONV][p as usize] = *o;
        }
    }
    for p in 0..r.nu {
        if let Some(o) = snap.fold_offsets.get(&(src_topics.user_events.clone(), p)) {
            r.next[USER][p as usize] = *o;
        }
    }
    // The deltas in flight at the snapshot: produced by the source's fan-out (for events before its checkpoint, or
    // after: those are produced again by this replay's fan-out, and the fold absorbs the repetition).
    let deltas_topic = &src_topics.user_deltas;
    let marks = watermarks(c, deltas_topic, r.nu)?;
    let mut tpl = TopicPartitionList::new();
    let mut pending = 0i64;
    let mut next = Vec::new();
    for (p, (low, high)) in marks.iter().enumerate() {
        let from = snap.fold_offsets.get(&(deltas_topic.clone(), p as i32)).copied().unwrap_or(0).max(*low);
        next.push(from);
        if from < *high {
            tpl.add_partition_offset(deltas_topic, p as i32, Offset::Offset(from))?;
            pending += high - from;
        }
    }
    let mut applied = 0u64;
    if pending > 0 {
        c.assign(&tpl).context("assigning the source's delta topic")?;
        while next.iter().zip(&marks).any(|(n, (_, high))| n < high) {
            let msg = tokio::time::timeout(Duration::from_secs(30), c.recv())
                .await
                .context("no delta records for 30 s")?
                .context("reading the source's delta topic")?;
            let p = msg.partition() as usize;
            if msg.offset() < next[p] || msg.offset() >= marks[p].1 {
                continue;
            }
            next[p] = msg.offset() + 1;
            if let Ok(d) = records::delta(&msg) {
                r.dirty_users.insert(d.user_id.clone());
                r.fold.apply_delta(&d);
                applied += 1;
            }
        }
        c.unassign()?;
    }
    Ok(applied)
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// A progress bar on a terminal; otherwise a line on stderr every 2 s.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    last_line: std::cell::Cell<Instant>,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "replay [{bar:40}] {pos}/{len} records {percent}% {msg} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar
        });
        Self { bar, total, last_line: std::cell::Cell::new(Instant::now()) }
    }

    fn set(&self, done: u64, started: Instant) {
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        match &self.bar {
            Some(bar) => {
                bar.set_position(done);
                bar.set_message(format!("{rate:.0} records/s"));
            }
            None if self.last_line.get().elapsed() >= Duration::from_secs(2) => {
                self.last_line.set(Instant::now());
                let pct = if self.total == 0 { 100.0 } else { done as f64 * 100.0 / self.total as f64 };
                eprintln!("replay: {done}/{} records ({pct:.1}%), {rate:.0} records/s", self.total);
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_points_parse() {
        assert_eq!("earliest".parse::<StartPoint>().unwrap(), StartPoint::Earliest);
        assert_eq!("checkpoint".parse::<StartPoint>().unwrap(), StartPoint::Checkpoint);
        let t: StartPoint = "2024-01-01T00:00:01Z".parse().unwrap();
        assert_eq!(t, StartPoint::Timestamp { ms: 1_704_067_201_000, text: "2024-01-01T00:00:01Z".into() });
        assert_eq!(t.to_string(), "2024-01-01T00:00:01Z");
        assert!("yesterday".parse::<StartPoint>().is_err());
    }
}
