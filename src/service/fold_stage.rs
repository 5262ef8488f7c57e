//! The fold stage: one task per partition number p, owning partition p of `unread.user-events` and of
//! `unread.user-deltas` (co-partitioned, see [`super::group`]).
//!
//! A task loads its users and both next offsets from the checkpoint, then applies records as they come and, every
//! flush interval (or flush events), flushes: first the changed users to Redis (one atomic, version-guarded
//! script per user, the version being the two next offsets), then the changed users' states with both offsets to
//! PostgreSQL in one transaction. Redis goes first so that a crash between the two leaves Redis ahead of the
//! checkpoint, never behind: the replay from the checkpoint rewrites those users, and the guard refuses the
//! replay's writes that the stored position dominates (older in both offsets).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use rdkafka::message::Message;
use tracing::{debug, info, warn};

use super::group::{PartitionInput, Verdict};
use super::{records, Shared};
use crate::checkpoint::{self, store::Stage};
use crate::contract::{Event, Stream};
use crate::fold::Fold;
use crate::pipeline::MAX_BATCH;
use crate::projection::redis::UserWrite;

/// Runs the task of one partition number until its input closes (then it flushes and returns).
///
/// Errors: PostgreSQL, Redis or Kafka failing; the dispatcher restarts the task from its checkpoint.
pub async fn run(shared: Arc<Shared>, mut input: PartitionInput) -> anyhow::Result<()> {
    let p = input.partition;
    let (ue, ud) = (shared.topics.user_events.clone(), shared.topics.user_deltas.clone());
    let mut next = [
        shared.store.offset(Stage::Fold, &ue, p).await?.unwrap_or(0),
        shared.store.offset(Stage::Fold, &ud, p).await?.unwrap_or(0),
    ];
    let generation = shared.store.acquire(Stage::Fold, p, &shared.owner).await?;
    let mut fold = Fold::new();
    for (id, _, bytes) in shared.store.states(Stage::Fold, Some(p)).await? {
        fold.restore(id.clone(), checkpoint::decode_user(&bytes).with_context(|| format!("user {id:?}"))?);
    }
    info!(partition = p, generation, user_events = next[0], user_deltas = next[1], "fold task started");
    input.rewind(&ue, next[0]).await;
    input.rewind(&ud, next[1]).await;
    // user → conversations changed since the last flush
    let mut dirty: HashMap<String, BTreeSet<String>> = HashMap::new();
    let (mut pending, mut last_flush) = (0usize, Instant::now());
    loop {
        let Some(batch) = input.next_batch(MAX_BATCH * 4, shared.flush.interval).await else {
            let done = flush(&shared, &mut input, generation, &fold, &mut dirty, next).await;
            shared.metrics.forget_lag("fold", p);
            return done;
        };
        let (mut n_events, mut n_deltas) = (0, 0);
        let increments_before = fold.stats().increments;
        for record in &batch {
            let i = if record.topic() == ue { 0 } else { 1 };
            match input.accept(record, next[i]) {
                Verdict::Skip | Verdict::Gap => continue,
                Verdict::Process => {}
            }
            let outcome = if i == 0 {
                records::event(record, Stream::User).map(|e| match e {
                    Event::User(e) => {
                        dirty.entry(e.user_id().to_owned()).or_default().insert(e.conversation_id().to_owned());
                        fold.apply_user_event(&e);
                        n_events += 1;
                    }
                    Event::Conversation(_) => unreachable!("records::event checks the stream"),
                })
            } else {
                records::delta(record).map(|d| {
                    dirty.entry(d.user_id.clone()).or_default().insert(d.conversation_id.clone());
                    fold.apply_delta(&d);
                    n_deltas += 1;
                })
            };
            if let Err(e) = outcome {
                shared.metrics.dead_letter(e.kind());
                let (generation, producer) = shared.producer.get();
                if let Err(e) = records::dead_letter(&producer, &shared.topics.dead_letter, record, &e).await {
                    shared.producer.replace(generation);
                    return Err(e);
                }
            }
            next[i] = record.offset() + 1;
            pending += 1;
        }
        shared.metrics.increments(fold.stats().increments - increments_before);
        shared.metrics.processed(&ue, n_events);
        shared.metrics.processed(&ud, n_deltas);
        if pending >= shared.flush.events || (pending > 0 && last_flush.elapsed() >= shared.flush.interval) {
            flush(&shared, &mut input, generation, &fold, &mut dirty, next).await?;
            (pending, last_flush) = (0, Instant::now());
        }
    }
}

/// The projection version of a fold task's state: its lease generation and both next offsets.
pub fn version(generation: i64, next: [i64; 2]) -> String {
    format!("{generation} {} {}", next[0], next[1])
}

async fn flush(
    shared: &Shared,
    input: &mut PartitionInput,
    generation: i64,
    fold: &Fold,
    dirty: &mut HashMap<String, BTreeSet<String>>,
    next: [i64; 2],
) -> anyhow::Result<()> {
    let started = Instant::now();
    let (p, store, projection, metrics) = (input.partition, &shared.store, &shared.projection, &*shared.metrics);
    // A task whose partition moved stops here rather than write Redis (the script would refuse most of it anyway).
    super::retry(metrics, "postgres", || store.check_lease(Stage::Fold, p, generation)).await?;
    let version = version(generation, next);
    // Redis lost the projection (restarted empty, flushed): rewrite every user of the partition from memory.
    let full = !super::retry(metrics, "redis", || async { Ok(projection.has_marker(p).await?) }).await?;
    let mut writes = Vec::with_capacity(dirty.len());
    if full {
        warn!(
            partition = p,
            users = fold.users().count(),
            "Redis lacks this partition's projection: rewriting all its users"
        );
        for (user, state) in fold.users() {
            writes.push(UserWrite::replace(state.view(user), version.clone()));
        }
    }
    let mut changed = Vec::with_capacity(dirty.len());
    for (user, conversations) in dirty.iter() {
        let state = fold.user(user);
        if !full || state.is_none() {
            writes.push(UserWrite {
                user_id: user.clone(),
                version: version.clone(),
                view: fold.view(user),
                changed: conversations.iter().cloned().collect(),
                replace: false,
            });
        }
        changed.push((user.clone(), state.map(checkpoint::encode_user)));
    }
    let (written, refused) = super::retry(metrics, "redis", || async {
        let r = projection.write(&writes).await?;
        if full {
            projection.set_marker(p).await?;
        }
        Ok(r)
    })
    .await?;
    if refused > 0 {
        warn!(partition = p, refused, "projection refused older writes (another task is ahead)");
    }
    shared.metrics.redis_writes(written);
    let offsets = [(shared.topics.user_events.as_str(), next[0]), (shared.topics.user_deltas.as_str(), next[1])];
    let commit_started = Instant::now();
    super::retry(metrics, "postgres", || store.commit(Stage::Fold, p, generation, &changed, &offsets)).await?;
    metrics.flush_latency("fold", started.elapsed(), commit_started.elapsed());
    for (topic, next) in offsets {
        if let Some(lag) = input.lag(topic, next) {
            metrics.lag("fold", topic, p, lag);
        }
    }
    let bytes = changed.iter().map(|(_, s)| s.as_ref().map_or(0, Vec::len)).sum();
    shared.metrics.checkpoint_rows(changed.len(), bytes);
    input.store_offsets(&offsets);
    dirty.clear();
    shared.metrics.checkpoint(started.elapsed());
    debug!(partition = input.partition, users = changed.len(), "fold flush");
    Ok(())
}
