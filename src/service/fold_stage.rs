//! The fold stage: one task per partition number p, owning partition p of `unread.user-events` and of
//! `unread.user-deltas` (co-partitioned, see [`super::group`]).
//!
//! A task loads its users, both next offsets and its fence from the checkpoint ([`crate::state::load`]), then
//! applies records as they come. After each batch it publishes the changed users to Redis (one atomic,
//! version-guarded script per user, the version being the lease generation and the two next offsets); every
//! flush interval it commits through [`super::task`]: the users changed since the last commit, with both offsets,
//! to PostgreSQL in one transaction ([`crate::state::commit`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::message::{Message, OwnedMessage};
use tracing::{debug, info};

use super::context::Shared;
use super::error::TaskError;
use super::group::{PartitionInput, Verdict};
use super::records;
use super::task::{self, StageTask};
use crate::checkpoint::Stage;
use crate::metrics::Step;
use crate::state::commit::{publish, Commit, RedisWrites};
use crate::state::load;
use crate::state::partition::{FoldPartition, Write};
use crate::state::retry::retry;

/// One fold partition task: its input, the shared context, its partition's state, and when the batches not yet
/// published were read.
struct FoldTask {
    shared: Arc<Shared>,
    input: PartitionInput,
    state: FoldPartition,
    /// When each batch not yet published was taken, and its records: for [`Step::FoldReadToRedis`]. The first one
    /// starts the publish interval.
    read: Vec<(Instant, usize)>,
}

/// Runs the task of one partition number until its input closes (then it commits and returns).
///
/// Errors: PostgreSQL, Redis or Kafka failing (after retries), a corrupt checkpoint, or a fencing; the dispatcher
/// restarts the task from its checkpoint.
pub async fn run(shared: Arc<Shared>, mut input: PartitionInput) -> Result<(), TaskError> {
    let (p, started) = (input.partition, Instant::now());
    let (loaded, prepared) = match shared.prepared.fold(p).await {
        Some(loaded) => (loaded, true),
        None => {
            let lease = load::lease(&shared.store, Stage::Fold, p, &shared.owner, None).await?;
            (load::fold_partition(&shared.store, &shared.topics, p, lease).await?, false)
        }
    };
    let (generation, next, ms) = (loaded.generation, loaded.next, started.elapsed().as_millis() as u64);
    let (user_events, user_deltas) = (next.user_events, next.user_deltas);
    info!(partition = p, generation, user_events, user_deltas, ms, prepared, "fold task started");
    task::mark_if_empty(&shared, Stage::Fold, p, loaded.fold.users().next().is_none()).await?;
    input.rewind(&shared.topics.user_events, next.user_events).await;
    input.rewind(&shared.topics.user_deltas, next.user_deltas).await;
    task::run(FoldTask { shared, input, state: loaded, read: Vec::new() }).await
}

/// Partition `p`'s start made before the assignment by a static member ([`super::prepare`]): its state loaded under
/// the lease its previous incarnation (owner `{prefix}…`) held; `None` when another process took the lease since.
///
/// Errors: PostgreSQL failing, or a corrupt checkpoint.
pub async fn prepare(shared: Arc<Shared>, p: i32, prefix: String) -> Result<Option<FoldPartition>, TaskError> {
    let Some(lease) = load::lease_if_held(&shared.store, Stage::Fold, p, &prefix, &shared.owner, None).await? else {
        return Ok(None);
    };
    Ok(Some(load::fold_partition(&shared.store, &shared.topics, p, lease).await?))
}

impl StageTask for FoldTask {
    const STAGE: Stage = Stage::Fold;
    const LINGERS: bool = false;

    fn parts(&mut self) -> (&mut PartitionInput, &Arc<Shared>) {
        (&mut self.input, &self.shared)
    }

    /// 4,000 delta records (packed: a record holds many deltas in a backlog). Four times as many added about 80 MiB
    /// to a catch-up's peak RSS and saved no CPU beyond two runs' spread (`docs/performance.md`, "Fan-out batches
    /// of 4,000 events").
    fn max_batch(&self) -> usize {
        4_000
    }

    fn generation(&self) -> i64 {
        self.state.generation
    }

    async fn apply(&mut self, batch: &[OwnedMessage]) -> Result<usize, TaskError> {
        let (mut n_events, mut n_deltas, mut pending) = (0, 0, 0);
        let increments_before = self.state.fold.stats().increments;
        let (read_at, now) = (Instant::now(), SystemTime::now());
        let (mut ages, mut event_ages) = (Vec::with_capacity(batch.len()), Vec::new());
        for record in batch {
            let is_event = record.topic() == self.shared.topics.user_events;
            let next = &mut self.state.next;
            let next = if is_event { &mut next.user_events } else { &mut next.user_deltas };
            match self.input.accept(record, *next) {
                Verdict::Skip | Verdict::Gap => continue,
                Verdict::Process => *next = record.offset() + 1,
            }
            pending += 1;
            let ages = if is_event { &mut event_ages } else { &mut ages };
            ages.extend(records::age(record, now));
            let outcome = if is_event { self.apply_event(record).map(|()| 1) } else { self.apply_deltas(record) };
            match outcome {
                Ok(_) if is_event => n_events += 1,
                Ok(n) => n_deltas += n,
                Err(e) => self.dead_letter(record, &e).await?,
            }
        }
        let metrics = &self.shared.metrics;
        metrics.increments(self.state.fold.stats().increments - increments_before);
        metrics.processed(&self.shared.topics.user_events, n_events);
        metrics.processed(&self.shared.topics.user_deltas, n_deltas);
        metrics.live_path_each(Step::DeltaToFoldRead, ages);
        metrics.live_path_each(Step::UserEventToFoldRead, event_ages);
        if pending > 0 {
            self.read.push((read_at, pending));
        }
        Ok(pending)
    }

    /// Due the publish interval after the first change since the last publish (at once by default); at once when
    /// users are to be written whole.
    fn publish_due_in(&self) -> Option<Duration> {
        if self.state.has_whole() {
            return Some(Duration::ZERO);
        }
        let first = self.read.first().filter(|_| self.state.has_unpublished())?.0;
        Some((first + self.shared.flush.publish).saturating_duration_since(Instant::now()))
    }

    /// Writes the users changed since the last publish to Redis (every user of the partition, and its marker, when
    /// Redis lost the partition's projection).
    async fn publish(&mut self) -> Result<(), TaskError> {
        let (writes, full) = self.user_writes().await?;
        let whole = publish(self.shared.home(), Stage::Fold, self.input.partition, &writes, full).await?;
        self.published(whole);
        Ok(())
    }

    /// A task whose partition moved stops here rather than write Redis (the script would refuse most of it).
    async fn pre_commit(&mut self) -> Result<(), TaskError> {
        let (sh, p) = (&*self.shared, self.input.partition);
        Ok(retry(&sh.metrics, "postgres", || sh.store.check_lease(Stage::Fold, p, self.state.generation)).await?)
    }

    async fn prepare(&mut self, idle: bool) -> Result<Option<Commit>, TaskError> {
        let (redis, full) = self.user_writes().await?;
        if idle && !full {
            return Ok(None);
        }
        Ok(Some(self.state.take_commit(redis, full)))
    }

    fn committed(&mut self, whole: Vec<String>) {
        self.state.committed(whole);
        self.count_published();
    }
}

impl FoldTask {
    /// What was unpublished is in Redis ([`FoldPartition::published`]): counts its latency.
    fn published(&mut self, whole: Vec<String>) {
        self.state.published(whole);
        self.count_published();
    }

    fn count_published(&mut self) {
        for (at, n) in self.read.drain(..) {
            self.shared.metrics.live_path(Step::FoldReadToRedis, at.elapsed(), n);
        }
    }

    fn apply_event(&mut self, record: &OwnedMessage) -> Result<(), records::RecordError> {
        let e = records::user_event(record, self.shared.deltas.users())?;
        self.state.apply_event(&e);
        Ok(())
    }

    /// Applies a record's deltas in order, but those its fence drops ([`records::admitted_deltas`]); counts them.
    fn apply_deltas(&mut self, record: &OwnedMessage) -> Result<usize, records::RecordError> {
        let packing = self.shared.deltas;
        let fence = &mut self.state.fence;
        let (deltas, dropped) = records::admitted_deltas(record, |user| packing.partition_of(user), fence)?;
        for _ in 0..dropped {
            self.shared.metrics.zombie_delta();
            debug!(partition = self.input.partition, offset = record.offset(), "dropped a zombie delta");
        }
        self.state.apply_deltas(&deltas);
        Ok(deltas.len() + dropped)
    }

    /// Sends a record that failed to the dead-letter topic; a failed delivery replaces the shared producer.
    async fn dead_letter(&self, record: &OwnedMessage, e: &records::RecordError) -> Result<(), TaskError> {
        self.shared.metrics.dead_letter(e.kind());
        let (generation, producer) = self.shared.producer.get();
        let sent = records::dead_letter(&producer, &self.shared.topics.dead_letter, record, e).await;
        if sent.is_err() {
            self.shared.producer.replace(generation);
        }
        sent
    }

    /// The Redis writes of a publish or commit, and whether they are whole: when Redis lost the partition's
    /// projection (restarted empty, flushed: no marker), every user of the partition from memory.
    async fn user_writes(&self) -> Result<(RedisWrites, bool), TaskError> {
        let (sh, p) = (&*self.shared, self.input.partition);
        let full = !retry(&sh.metrics, "redis", || sh.projection.has_marker(Stage::Fold, p)).await?;
        let write = if full { Write::All } else { Write::Changes };
        Ok((RedisWrites::Users(self.state.writes(write)), full))
    }
}
