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

pub mod read;
mod report;
mod state;

use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::config::Settings;
use crate::core::contract::Stream;
use crate::kafka;
use crate::projection::redis::RedisProjection;
pub use read::PerStream;
use read::{read_input, Positions, ReadBatch};
pub use report::ReplayReport;
use state::Replay;

/// Where a replay starts (`--from`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPoint {
    /// Empty state, offset 0 of every input partition.
    Earliest,
    /// The source namespace's checkpoint and its offsets.
    Checkpoint,
    /// Empty state, the first offset at or after this time in every input partition.
    Timestamp {
        /// The time, ms since the Unix epoch.
        ms: i64,
        /// As given.
        text: String,
    },
}

impl FromStr for StartPoint {
    type Err = anyhow::Error;

    /// `earliest`, `checkpoint`, or an RFC 3339 timestamp such as `2026-11-20T08:00:00Z`.
    fn from_str(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "earliest" => StartPoint::Earliest,
            "checkpoint" => StartPoint::Checkpoint,
            t => {
                let at = chrono::DateTime::parse_from_rfc3339(t)
                    .with_context(|| format!("--from {t:?}: expected earliest, checkpoint or an RFC 3339 time"))?;
                StartPoint::Timestamp { ms: at.timestamp_millis(), text: t.to_owned() }
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
    LogTruncated {
        /// The input topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// Its log start (low watermark).
        log_start: i64,
        /// The offset the replay would start at.
        from: i64,
    },
    /// The target is the namespace the command runs in, or the one the read API serves.
    #[error("cannot replay into namespace {0:?}: it is the source or the live one; replay into a new namespace")]
    LiveTarget(String),
    /// The target holds state that `unread run` wrote (its fold read the namespace's delta topic).
    #[error("namespace {0:?} holds state written by `unread run`, not by a replay; drop it first (`unread drop {0}`)")]
    ServiceState(String),
}

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Refused before anything was written (exit status 1, no retry helps).
    #[error("refused: {0}")]
    Refused(#[from] Refused),
    /// A store or Kafka failed, or a lease was taken meanwhile; run the same command again to resume.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl From<crate::checkpoint::store::StoreError> for ReplayError {
    fn from(e: crate::checkpoint::store::StoreError) -> Self {
        ReplayError::Failed(e.into())
    }
}

/// Options of one replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Where a fresh replay starts.
    pub from: StartPoint,
    /// The namespace to fill.
    pub into: String,
    /// Checkpoint at least this often.
    pub checkpoint_interval: Duration,
    /// Fold at most this many records per second (to spare the live service's brokers and Redis); `None`: no limit.
    pub max_rate: Option<u64>,
}

/// Runs a replay from `source` (the namespace of the settings) into `opts.into`, printing progress on stderr.
///
/// Errors: [`ReplayError::Refused`] before anything is written; [`ReplayError::Failed`] for a service
/// unreachable, a corrupt checkpoint, or another replay or service taking the namespace's leases meanwhile
/// (fenced). An interrupted replay (an error, or `shutdown` completing: [`crate::shutdown::signal`] for the
/// command) resumes from its last checkpoint when run again.
pub async fn replay(
    source: &Settings,
    opts: &ReplayOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<ReplayReport, ReplayError> {
    let started = Instant::now();
    let target = source.in_namespace(&opts.into)?;
    if opts.into == source.namespace || crate::namespace::live_namespace(source).await? == opts.into {
        return Err(Refused::LiveTarget(opts.into.clone()).into());
    }
    let topics = target.topics();
    let store = CheckpointStore::connect(&target.database_url, &target.ns_db_schema(), 4).await?;
    store.migrate().await?;
    let resumed = check_target(&store, &topics, &opts.into).await?;
    let c: StreamConsumer =
        kafka::reader(&source.brokers, "unread-replay").create().context("creating the replay's consumer")?;
    let partitions = input_partitions(&source.brokers, &topics)?;
    let marks = PerStream {
        conversation: kafka::watermarks(&c, &topics.conversation_events, partitions.conversation)?,
        user: kafka::watermarks(&c, &topics.user_events, partitions.user)?,
    };
    let owner = format!("replay:{}", std::process::id());
    let projection =
        RedisProjection::connect(&target.redis_url, &target.ns_redis_prefix()).await.context("projection")?;
    let mut r = Replay::new(topics.clone(), store, projection, partitions, &owner, target.diffusion()).await?;
    let mut report = ReplayReport { namespace: opts.into.clone(), resumed, ..Default::default() };
    if resumed {
        r.restore_own().await?;
        check_retained(&r, &marks)?;
        r.store.start_replay(&source.namespace, &opts.from.to_string(), false).await?;
        info!(namespace = %opts.into, "resuming the namespace's replay from its checkpoint (--from applies only to a fresh namespace)");
    } else {
        report.in_flight_deltas = seed(source, opts, &mut r, &c, &marks).await?;
    }
    let end = marks.map(|m| m.iter().map(|(_, high)| *high).collect());
    let positions = Positions { next: r.next(), end };
    fold_input(&source.brokers, &mut r, positions, opts, &mut report, shutdown).await?;
    finish(source, &mut r, &mut report).await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The partition counts of both input topics.
fn input_partitions(brokers: &str, topics: &crate::topology::Topics) -> anyhow::Result<PerStream<i32>> {
    let counts = kafka::partition_counts(brokers)?;
    let count = |t: &str| counts.get(t).copied().with_context(|| format!("topic {t} does not exist"));
    Ok(PerStream { conversation: count(&topics.conversation_events)?, user: count(&topics.user_events)? })
}

/// Refuses a target that a service wrote; returns whether it holds a replay to resume (a replay that died during
/// its first checkpoint is reset to start afresh).
async fn check_target(
    store: &CheckpointStore,
    topics: &crate::topology::Topics,
    into: &str,
) -> Result<bool, ReplayError> {
    let fold_offsets = store.offsets(Stage::Fold).await?;
    if fold_offsets.iter().any(|((t, _), o)| *t == topics.user_deltas && *o > 0) {
        return Err(Refused::ServiceState(into.to_owned()).into());
    }
    let status = store.replay_status().await?;
    if !store.is_empty().await? && status.is_none() {
        return Err(Refused::ServiceState(into.to_owned()).into());
    }
    let resumed = status.as_ref().is_some_and(|s| s.seeded);
    if status.is_some() && !resumed {
        store.reset().await?; // died during its first checkpoint: start afresh
    }
    Ok(resumed)
}

/// A fresh replay's start: positions (and state, `--from checkpoint`) per `opts.from`, checked against
/// retention, then the first checkpoint. Returns the in-flight deltas applied.
async fn seed(
    source: &Settings,
    opts: &ReplayOptions,
    r: &mut Replay,
    c: &StreamConsumer,
    marks: &PerStream<Vec<(i64, i64)>>,
) -> Result<u64, ReplayError> {
    let mut in_flight = 0;
    match &opts.from {
        StartPoint::Earliest => {}
        StartPoint::Checkpoint => {
            let src = CheckpointStore::connect(&source.database_url, &source.ns_db_schema(), 2).await?;
            let snap = src.snapshot().await.context("reading the source's checkpoint")?;
            // Its own reader, told each partition's end: the delta topic is transactional, so its last offsets
            // can be commit markers no reader ever gets.
            let deltas: StreamConsumer<crate::kafka::EofContext> = kafka::eof_reader(&source.brokers, "unread-replay")
                .create_with_context(crate::kafka::EofContext)
                .context("creating the replay's delta reader")?;
            in_flight = r.seed_from(snap, &source.topics(), &deltas).await?;
        }
        StartPoint::Timestamp { ms, text } => {
            seek_to_time(r, c, *ms, marks)?;
            warn!(from = %text, "replay from a timestamp: state before it is unknown, counts are partial");
        }
    }
    check_retained(r, marks)?;
    r.store.start_replay(&source.namespace, &opts.from.to_string(), true).await?;
    r.checkpoint().await?;
    r.store.mark_replay_seeded().await?;
    Ok(in_flight)
}

/// Sets every input partition's next offset to its first record at or after `ms` (its end when there is none).
fn seek_to_time(r: &mut Replay, c: &StreamConsumer, ms: i64, marks: &PerStream<Vec<(i64, i64)>>) -> anyhow::Result<()> {
    let mut tpl = TopicPartitionList::new();
    for (t, n) in
        [(&r.topics.conversation_events, r.partitions.conversation), (&r.topics.user_events, r.partitions.user)]
    {
        for p in 0..n {
            tpl.add_partition_offset(t, p, Offset::Offset(ms))?;
        }
    }
    let found = c.offsets_for_times(tpl, kafka::QUERY_TIMEOUT).context("offsets for the timestamp")?;
    for e in found.elements() {
        let stream = if e.topic() == r.topics.user_events { Stream::User } else { Stream::Conversation };
        let p = e.partition() as usize;
        let next = match e.offset() {
            Offset::Offset(o) => o,
            _ => marks[stream][p].1, // no record at or after the time
        };
        r.set_next(stream, p, next);
    }
    Ok(())
}

/// Refuses (before anything is written) a start position below its partition's log start: retention deleted
/// records the replay needs, and skipping them would give wrong counts with no sign of it.
fn check_retained(r: &Replay, marks: &PerStream<Vec<(i64, i64)>>) -> Result<(), Refused> {
    for (stream, topic) in
        [(Stream::Conversation, &r.topics.conversation_events), (Stream::User, &r.topics.user_events)]
    {
        let next = r.next();
        let deleted = next[stream].iter().zip(&marks[stream]).enumerate().find(|(_, (n, (low, _)))| *n < low);
        if let Some((p, (from, (low, _)))) = deleted {
            return Err(Refused::LogTruncated {
                topic: topic.clone(),
                partition: p as i32,
                log_start: *low,
                from: *from,
            });
        }
    }
    Ok(())
}

/// Starts the reader thread over the partitions with records left in `positions`; the receiver ends when it is
/// done (at once when nothing is left).
fn start_reader(
    brokers: &str,
    user_topic: &str,
    conv_topic: &str,
    positions: Positions,
) -> anyhow::Result<tokio::sync::mpsc::Receiver<anyhow::Result<ReadBatch>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut tpl = TopicPartitionList::new();
    for (stream, t) in [(Stream::Conversation, conv_topic), (Stream::User, user_topic)] {
        for (p, (n, e)) in positions.next[stream].iter().zip(&positions.end[stream]).enumerate() {
            if n < e {
                tpl.add_partition_offset(t, p as i32, Offset::Offset(*n))?;
            }
        }
    }
    if tpl.count() > 0 {
        let reader: BaseConsumer =
            kafka::reader(brokers, "unread-replay").create().context("creating the replay's consumer")?;
        reader.assign(&tpl).context("assigning the input partitions")?;
        let user_topic = user_topic.to_owned();
        // A reader thread polls and decodes (one core) while the replay's task folds and checkpoints (the other).
        std::thread::spawn(move || read_input(reader, user_topic, kafka::Partitioner::configured(), positions, tx));
    }
    Ok(rx)
}

/// Reads every input partition up to its end and folds it, checkpointing every `opts.checkpoint_interval`, until
/// the end or until `shutdown` completes (`report.interrupted`).
async fn fold_input(
    brokers: &str,
    r: &mut Replay,
    positions: Positions,
    opts: &ReplayOptions,
    report: &mut ReplayReport,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut progress = crate::progress::Progress::new(positions.remaining() as u64, ("replay", "records"));
    let mut rx = start_reader(brokers, &r.topics.user_events, &r.topics.conversation_events, positions)?;
    let mut last_checkpoint = Instant::now();
    let mut stop = std::pin::pin!(shutdown);
    loop {
        let batch = tokio::select! {
            b = rx.recv() => match b {
                Some(b) => b.context("reading the input topics")?,
                None => break, // the reader reached every end
            },
            _ = &mut stop => { report.interrupted = true; break; }
        };
        for (stream, p, next) in batch.next {
            r.set_next(stream, p, next);
        }
        let t = Instant::now();
        r.process(batch.conv, batch.user);
        report.fold_seconds += t.elapsed().as_secs_f64();
        (report.records, report.invalid) = (report.records + batch.records, report.invalid + batch.invalid);
        progress.set(report.records);
        if last_checkpoint.elapsed() >= opts.checkpoint_interval {
            let t = Instant::now();
            r.checkpoint().await?;
            (report.checkpoint_seconds, last_checkpoint) =
                (report.checkpoint_seconds + t.elapsed().as_secs_f64(), Instant::now());
        }
        if let Some(wait) = opts.max_rate.and_then(|rate| {
            Duration::from_secs_f64(report.records as f64 / rate.max(1) as f64).checked_sub(started.elapsed())
        }) {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stop => { report.interrupted = true; break; }
            }
        }
    }
    progress.finish();
    Ok(())
}

/// The last checkpoint; when complete, marks the replay finished and creates the namespace's delta topic, for
/// `unread run --namespace` to continue from here.
async fn finish(source: &Settings, r: &mut Replay, report: &mut ReplayReport) -> anyhow::Result<()> {
    info!("replay read everything");
    let t = Instant::now();
    r.checkpoint().await?;
    report.checkpoint_seconds += t.elapsed().as_secs_f64();
    if !report.interrupted {
        r.store.finish_replay(report.records as i64).await?;
        let (topic, n) = (&r.topics.user_deltas, r.partitions.user);
        crate::topology::create_one(&source.brokers, crate::topology::USER_DELTAS, topic, n).await?;
    }
    report.checkpoints = r.checkpoints;
    (report.users, report.conversations) = r.sizes();
    Ok(())
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
        let offset: StartPoint = "2024-01-01T01:00:01+01:00".parse().unwrap();
        assert!(matches!(offset, StartPoint::Timestamp { ms: 1_704_067_201_000, .. }));
        assert!("yesterday".parse::<StartPoint>().is_err());
    }
}
