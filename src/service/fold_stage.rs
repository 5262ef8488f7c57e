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

use rdkafka::message::{Message, OwnedMessage};
use tracing::{debug, info, warn};

use super::group::{PartitionInput, Verdict};
use super::{records, retry, Shared, TaskError};
use crate::checkpoint::store::{Changes, CheckpointStore, NoteRow, StateRow};
use crate::checkpoint::{self, Stage};
use crate::core::contract::{Event, Stream};
use crate::core::delta::Fence;
use crate::core::fold::Fold;
use crate::core::notifications::NoteBook;
use crate::pipeline::MAX_BATCH;
use crate::projection::redis::UserWrite;
use crate::projection::ProjectionVersion;

/// The next offsets of a fold task's two input partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Next {
    /// Of `unread.user-events`.
    pub user_events: i64,
    /// Of `unread.user-deltas`.
    pub user_deltas: i64,
}

/// The projection version of a fold task's state: its lease generation and both next offsets.
pub fn version(generation: i64, next: Next) -> ProjectionVersion {
    ProjectionVersion { generation, user_events: next.user_events, user_deltas: next.user_deltas }
}

/// One fold partition task's state.
struct FoldTask {
    shared: Arc<Shared>,
    input: PartitionInput,
    generation: i64,
    fold: Fold,
    next: Next,
    /// user → conversations changed since the last flush
    dirty: HashMap<String, BTreeSet<String>>,
    /// The fence against zombie deltas, checkpointed with the offsets.
    fence: Fence,
}

/// Runs the task of one partition number until its input closes (then it flushes and returns).
///
/// Errors: PostgreSQL, Redis or Kafka failing (after retries), a corrupt checkpoint, or a fencing; the dispatcher
/// restarts the task from its checkpoint.
pub async fn run(shared: Arc<Shared>, input: PartitionInput) -> Result<(), TaskError> {
    let mut task = FoldTask::load(shared, input).await?;
    let (mut pending, mut last_flush) = (0usize, Instant::now());
    let flush = task.shared.flush;
    loop {
        let Some(batch) = task.input.next_batch(MAX_BATCH * 4, flush.interval).await else {
            let done = task.flush().await;
            task.shared.metrics.forget_lag(Stage::Fold, task.input.partition);
            return done;
        };
        pending += task.apply(&batch).await?;
        if pending >= flush.events || (pending > 0 && last_flush.elapsed() >= flush.interval) {
            task.flush().await?;
            (pending, last_flush) = (0, Instant::now());
        } else if batch.is_empty() && pending == 0 && last_flush.elapsed() >= IDLE_CHECK {
            // Idle: rewrite the partition only when Redis lost it (no marker).
            if !task.redis_holds_partition().await? {
                task.flush().await?;
            }
            last_flush = Instant::now();
        }
    }
}

/// How often an idle task checks that Redis still holds its partition (and rewrites it when not): 1 s.
pub const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl FoldTask {
    /// Takes the partition's lease and loads its users and both next offsets from the checkpoint.
    async fn load(shared: Arc<Shared>, mut input: PartitionInput) -> Result<Self, TaskError> {
        let p = input.partition;
        let (ue, ud) = (&shared.topics.user_events, &shared.topics.user_deltas);
        // The lease first, so that the offsets, users and fence read next are one checkpoint (see the fan-out's).
        let generation = shared.store.acquire(Stage::Fold, p, &shared.owner).await?;
        let next = Next {
            user_events: shared.store.offset(Stage::Fold, ue, p).await?.unwrap_or(0),
            user_deltas: shared.store.offset(Stage::Fold, ud, p).await?.unwrap_or(0),
        };
        let fold = load_users(&shared.store, Some(p)).await?;
        let fence = Fence::from_rows(shared.store.fences(p).await?);
        info!(
            partition = p,
            generation,
            user_events = next.user_events,
            user_deltas = next.user_deltas,
            "fold task started"
        );
        input.rewind(ue, next.user_events).await;
        input.rewind(ud, next.user_deltas).await;
        Ok(Self { shared, input, generation, fold, next, dirty: HashMap::new(), fence })
    }

    /// Applies a batch of records of both topics; bad ones go to the dead-letter topic. Returns how many records
    /// it moved past.
    async fn apply(&mut self, batch: &[OwnedMessage]) -> Result<usize, TaskError> {
        let (mut n_events, mut n_deltas, mut pending) = (0, 0, 0);
        let increments_before = self.fold.stats().increments;
        for record in batch {
            let is_event = record.topic() == self.shared.topics.user_events;
            let next = if is_event { &mut self.next.user_events } else { &mut self.next.user_deltas };
            match self.input.accept(record, *next) {
                Verdict::Skip | Verdict::Gap => continue,
                Verdict::Process => *next = record.offset() + 1,
            }
            pending += 1;
            let outcome = if is_event { self.apply_event(record) } else { self.apply_delta(record) };
            match outcome {
                Ok(()) if is_event => n_events += 1,
                Ok(()) => n_deltas += 1,
                Err(e) => self.dead_letter(record, &e).await?,
            }
        }
        let metrics = &self.shared.metrics;
        metrics.increments(self.fold.stats().increments - increments_before);
        metrics.processed(&self.shared.topics.user_events, n_events);
        metrics.processed(&self.shared.topics.user_deltas, n_deltas);
        Ok(pending)
    }

    fn apply_event(&mut self, record: &OwnedMessage) -> Result<(), records::RecordError> {
        match records::event(record, Stream::User)? {
            Event::User(e) => {
                let changed = self.dirty.entry(e.user_id().to_owned()).or_default();
                changed.extend(e.conversation_id().map(str::to_owned));
                self.fold.apply_user_event(&e);
                Ok(())
            }
            Event::Conversation(_) => unreachable!("records::event checks the stream"),
        }
    }

    fn apply_delta(&mut self, record: &OwnedMessage) -> Result<(), records::RecordError> {
        let d = records::delta(record)?;
        if records::delta_source(record).is_some_and(|source| !self.fence.admit(source)) {
            self.shared.metrics.zombie_delta();
            debug!(partition = self.input.partition, offset = record.offset(), "dropped a zombie delta");
            return Ok(());
        }
        self.dirty.entry(d.user_id.clone()).or_default().insert(d.conversation_id.clone());
        self.fold.apply_delta(&d);
        Ok(())
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

    /// The Redis writes of a flush: every changed user's changed conversations, or, when Redis lost the
    /// partition's projection (`full`), every user of the partition whole.
    fn writes(&self, full: bool) -> Vec<UserWrite> {
        let version = version(self.generation, self.next);
        let mut writes = Vec::with_capacity(self.dirty.len());
        if full {
            let users = self.fold.users().count();
            warn!(
                partition = self.input.partition,
                users, "Redis lacks this partition's projection: rewriting all its users"
            );
            writes.extend(self.fold.users().map(|(user, state)| UserWrite::of_state(user, Some(state), version)));
        }
        for (user, conversations) in &self.dirty {
            if !full || self.fold.user(user).is_none() {
                let mut write = UserWrite::of_state(user, self.fold.user(user), version);
                (write.changed, write.replace) = (conversations.iter().cloned().collect(), false);
                writes.push(write);
            }
        }
        writes
    }

    /// Whether Redis still holds the partition's users (its marker is there).
    async fn redis_holds_partition(&self) -> Result<bool, TaskError> {
        let (sh, p) = (&*self.shared, self.input.partition);
        Ok(retry(&sh.metrics, "redis", || sh.projection.has_marker(Stage::Fold, p)).await?)
    }

    /// Writes Redis (all changed users, version-guarded), then checkpoints the changed users' states with both
    /// offsets in one PostgreSQL transaction.
    async fn flush(&mut self) -> Result<(), TaskError> {
        let started = Instant::now();
        let (sh, p) = (&*self.shared, self.input.partition);
        let metrics = &*sh.metrics;
        // A task whose partition moved stops here rather than write Redis (the script would refuse most of it).
        retry(metrics, "postgres", || sh.store.check_lease(Stage::Fold, p, self.generation)).await?;
        // Redis lost the projection (restarted empty, flushed): rewrite every user of the partition from memory.
        let full = !retry(metrics, "redis", || sh.projection.has_marker(Stage::Fold, p)).await?;
        let writes = self.writes(full);
        let (written, refused) = retry(metrics, "redis", || async {
            let r = sh.projection.write(&writes).await?;
            if full {
                sh.projection.set_marker(Stage::Fold, p).await?;
            }
            Ok::<_, crate::projection::ProjectionError>(r)
        })
        .await?;
        if refused > 0 {
            warn!(partition = p, refused, "projection refused older writes (another task is ahead)");
        }
        metrics.redis_writes(written);
        let mut changes = changes(&mut self.fold, self.dirty.keys());
        // (A failed checkpoint ends the task, which restarts from the checkpoint, fence included.)
        changes.fences = self.fence.take_changed();
        self.checkpoint(&changes, started).await?;
        self.dirty.clear();
        debug!(partition = p, users = changes.states.len(), notifications = changes.notes.len(), "fold flush");
        Ok(())
    }

    /// Commits the changed users' states with both offsets, then updates the metrics and Kafka's offset hint.
    async fn checkpoint(&mut self, changes: &Changes, started: Instant) -> Result<(), TaskError> {
        let (sh, p, next) = (&*self.shared, self.input.partition, self.next);
        let offsets =
            [(sh.topics.user_events.as_str(), next.user_events), (sh.topics.user_deltas.as_str(), next.user_deltas)];
        let commit_started = Instant::now();
        retry(&sh.metrics, "postgres", || sh.store.commit(Stage::Fold, p, self.generation, changes, &offsets)).await?;
        // The checkpoint's counters first: the lag probe below may wait up to 1 s for the broker.
        let (rows, bytes) = changes.size();
        sh.metrics.checkpoint_rows(rows, bytes);
        sh.metrics.checkpoint(started.elapsed());
        sh.metrics.flush_latency(Stage::Fold, started.elapsed(), commit_started.elapsed());
        self.input.store_offsets(&offsets);
        for (topic, next) in offsets {
            if let Some(lag) = self.input.lag(topic, next) {
                sh.metrics.lag(Stage::Fold, topic, p, lag);
            }
        }
        Ok(())
    }
}

/// What a fold flush checkpoints for `users`: each user's own row (deleted when nothing is kept) and the remembered
/// notifications that changed since the last flush (taken from the fold).
pub fn changes<'a>(fold: &mut Fold, users: impl IntoIterator<Item = &'a String>) -> Changes {
    let mut changes = Changes::default();
    for user in users {
        changes.states.push((user.clone(), fold.user(user).map(checkpoint::encode_user)));
        let Some(state) = fold.user_mut_existing(user) else { continue };
        for id in state.notes_mut().take_dirty() {
            let note = state.notes().note(&id).map(checkpoint::encode_note);
            changes.notes.push(((user.clone(), id), note));
        }
    }
    changes
}

/// Loads the users of one fold partition (or every partition) with their remembered notifications.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn load_users(store: &CheckpointStore, partition: Option<i32>) -> Result<Fold, TaskError> {
    fold_from_rows(store.states(Stage::Fold, partition).await?, store.notes(partition).await?)
}

/// A fold from checkpoint rows of users and their remembered notifications.
///
/// Errors: a corrupt row.
pub fn fold_from_rows(users: Vec<StateRow>, notes: Vec<NoteRow>) -> Result<Fold, TaskError> {
    let mut by_user: HashMap<String, Vec<(String, crate::core::notifications::Note)>> = HashMap::new();
    for row in notes {
        let id = format!("{}/{}", row.user_id, row.notification_id);
        let note = checkpoint::decode_note(&row.state).map_err(|source| TaskError::Corrupt { id, source })?;
        by_user.entry(row.user_id).or_default().push((row.notification_id, note));
    }
    let mut fold = Fold::new();
    for row in users {
        let mut state =
            checkpoint::decode_user(&row.state).map_err(|source| TaskError::Corrupt { id: row.id.clone(), source })?;
        state.set_notes(NoteBook::restore(by_user.remove(&row.id).unwrap_or_default()));
        fold.restore(row.id, state);
    }
    Ok(fold)
}
