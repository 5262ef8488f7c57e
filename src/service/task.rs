//! The one partition task of both stages: lease → load → rewind → batches, each followed by a publish when one is
//! due → pre-commit → commit under the flush policy. What differs per stage is a [`StageTask`]: how it applies a
//! batch, how it publishes, what must precede its commit (the fan-out's delivery acks and Kafka commit), and what
//! it commits. Everything else, the loop, when to publish and commit, the idle check of the Redis marker and the
//! metrics of each commit, is here once.
//!
//! The live path runs through the publish, not the commit: the fold publishes its changed users to Redis after
//! every batch, and the fan-out commits its Kafka transaction every `--transaction-interval`. While a publish runs,
//! records queue up and the next batch takes them all (a group commit), so a publish costs per batch, not per
//! record. The commit (the checkpoint in PostgreSQL) follows every `--flush-interval`, off the live path. Under
//! load a fan-out batch also lingers ([`linger`]), so that it holds more messages of each conversation.
//!
//! Words, the same in both stages, in the flags and in the metrics:
//! - **publish**: what makes applied records visible downstream (fold: the changed users' Redis writes, version
//!   guarded; fan-out: its Kafka commit);
//! - **commit**: the [`crate::state::commit`] protocol, Redis → marker → PostgreSQL with the offsets (a
//!   "flush" in the flags `--flush-interval` and `--flush-events`, which say when it happens);
//! - **pre-commit**: what a stage must finish before it commits (fan-out: every delta acknowledged and its Kafka
//!   transaction committed; fold: its lease checked);
//! - **Kafka commit**: the fan-out's Kafka transaction commit, its publish, due every `--transaction-interval`
//!   while a transaction is open, and before each commit (`unread_kafka_commit_seconds`);
//! - **checkpoint**: the PostgreSQL transaction of a commit (`unread_checkpoint_transaction_seconds`).

use std::future::Future;
use std::time::{Duration, Instant};

use rdkafka::message::OwnedMessage;

use std::sync::Arc;

use super::context::Shared;
use super::error::TaskError;
use super::group::PartitionInput;
use crate::checkpoint::Stage;
use crate::state::commit::{checkpoint, publish, Commit, RedisWrites};
use crate::state::Input;

/// How often an idle task checks that Redis still holds its partition (and rewrites it when not): 1 s.
pub const IDLE_CHECK: Duration = Duration::from_secs(1);

/// What one stage's partition task does differently; [`run`] drives it.
pub trait StageTask: Send {
    /// The stage.
    const STAGE: Stage;
    /// Whether the task waits for more records under load ([`linger`]): the fan-out's does; the fold's does not
    /// (a user's own events are on its path).
    const LINGERS: bool;

    /// Most records taken in one batch while the partition keeps up (a backlog may take more: [`batch_bound`]).
    fn max_batch(&self) -> usize;

    /// The task's input and what it shares with the other tasks.
    fn parts(&mut self) -> (&mut PartitionInput, &Arc<Shared>);

    /// The generation of the partition's lease the task holds.
    fn generation(&self) -> i64;

    /// Applies a batch of records (bad ones go to the dead-letter topic). Returns how many records it moved past.
    fn apply(&mut self, batch: &[OwnedMessage]) -> impl Future<Output = Result<usize, TaskError>> + Send;

    /// How long until a publish is due; `None`: nothing to publish.
    fn publish_due_in(&self) -> Option<Duration>;

    /// Makes what was applied visible downstream ([`StageTask::publish_due_in`]).
    fn publish(&mut self) -> impl Future<Output = Result<(), TaskError>> + Send;

    /// What must be done before the commit: waits for what the commit covers to be durable elsewhere.
    fn pre_commit(&mut self) -> impl Future<Output = Result<(), TaskError>> + Send;

    /// The commit of everything changed since the last one: its Redis writes (all of the partition's when Redis
    /// lost it, then marked), rows and offsets. `None`: nothing to write (an idle check found Redis whole).
    fn prepare(&mut self, idle: bool) -> impl Future<Output = Result<Option<Commit>, TaskError>> + Send;

    /// The commit's Redis writes are done and its checkpoint is under way: forget what it covered, except the
    /// users in `whole`, whose patch found no hash to patch ([`crate::state::commit::publish`]) and who must be
    /// written whole by the next publish.
    fn committed(&mut self, whole: Vec<String>);
}

/// Runs a loaded task until its input closes (then it commits and returns): applies batches; commits after
/// `flush.interval` with anything pending or once `flush.events` records are pending; otherwise publishes when
/// due; and when idle, checks every [`IDLE_CHECK`] that Redis still holds the partition.
///
/// Errors: as the stage's steps, or the commit's ([`crate::state::commit::commit`]); the dispatcher restarts the
/// task from its checkpoint.
pub async fn run<T: StageTask>(mut task: T) -> Result<(), TaskError> {
    let (flush, max_batch) = (task.parts().1.flush, task.max_batch());
    let (mut pending, mut last_commit, mut running) = (0usize, Instant::now(), None);
    let mut first = true; // the first output is logged: where a restart's pause of the partition ends
    let mut waits = Duration::ZERO; // how long the next batch lingers
    loop {
        let commit_in = if pending > 0 { flush.interval.saturating_sub(last_commit.elapsed()) } else { flush.interval };
        let wait = task.publish_due_in().map_or(commit_in, |due| due.min(commit_in));
        let bound = batch_bound(max_batch, task.parts().0.records.len());
        let Some(mut batch) = task.parts().0.next_batch(bound, wait).await else {
            let mut done = commit_task(&mut task, false, &mut running).await;
            done = done.and(finish(&mut task, &mut running).await);
            let generation = task.generation();
            let (input, shared) = task.parts();
            shared.metrics.forget_lag(T::STAGE, input.partition);
            if done.is_ok() {
                release(shared, T::STAGE, input.partition, generation).await;
            }
            return done;
        };
        if !waits.is_zero() && !batch.is_empty() && batch.len() < bound {
            tokio::time::sleep(waits).await;
            task.parts().0.take_more(&mut batch, bound);
        }
        if T::LINGERS {
            waits = linger(batch.len(), flush.linger);
        }
        pending += task.apply(&batch).await?;
        if pending >= flush.events || (pending > 0 && last_commit.elapsed() >= flush.interval) {
            commit_task(&mut task, false, &mut running).await?;
            (pending, last_commit) = (0, Instant::now());
            log_first(&mut task, &mut first);
        } else if task.publish_due_in().is_some_and(|due| due.is_zero()) {
            task.publish().await?;
            log_first(&mut task, &mut first);
        } else if batch.is_empty() && pending == 0 && last_commit.elapsed() >= IDLE_CHECK {
            commit_task(&mut task, true, &mut running).await?;
            last_commit = Instant::now();
        }
    }
}

/// Marks partition `p`'s projection whole in Redis when its task starts with nothing loaded (`empty`: a partition
/// never checkpointed), before anything is published: an empty state is all written. Without it, the first commit
/// found no marker, took Redis for having lost the projection, and rewrote every user (or list) folded by then,
/// with a warning, on every first start. A marker that goes missing later (Redis flushed) is still found by the
/// commit, which then rewrites everything.
///
/// Errors: Redis still failing after retries.
pub async fn mark_if_empty(shared: &Shared, stage: Stage, p: i32, empty: bool) -> Result<(), TaskError> {
    if empty {
        publish(shared.home(), stage, p, &RedisWrites::Nothing, true).await?;
    }
    Ok(())
}

/// The most records a task's next batch takes, given its stage's bound while it keeps up (`live`, the fan-out's
/// `--fanout-batch`) and how many records its bulk lane already holds (`queued`): `live`, or [`BACKLOG_BATCH`]
/// (4,000) when the lane holds [`BACKLOG`] (8,000) records or more, two such batches.
///
/// A batch holds its tokio worker and, in the fan-out, its Kafka transaction while it runs, so a live burst is
/// served in batches of `live`: in `scripts/bench-push` a read ack reached its sockets later in batches of 4,000
/// (and of 500, each costing a publish). In a backlog (a catch-up, a restart, a replayed topic) a new record waits
/// behind the whole queue anyway, and larger batches cost less per record: a conversation's messages in one batch
/// reach each member as one delta (`docs/performance.md`, "Batches that follow the backlog").
pub fn batch_bound(live: usize, queued: usize) -> usize {
    if queued >= BACKLOG {
        live.max(BACKLOG_BATCH)
    } else {
        live
    }
}

/// The batch a task takes in a backlog ([`batch_bound`]): 4,000 records, as `unread fold`'s; more saved no CPU.
pub const BACKLOG_BATCH: usize = crate::pipeline::MAX_BATCH;

/// Records queued in a task's bulk lane from which it takes [`BACKLOG_BATCH`]es: 8,000. The push benchmark's whole
/// burst puts at most 4,713 conversation events on one partition; a catch-up fills the lane (20,000 records).
pub const BACKLOG: usize = 2 * BACKLOG_BATCH;

// A lane that could not hold a backlog would never take a backlog's batch.
const _: () = assert!(BACKLOG <= super::group::QUEUE, "a task's lane holds fewer records than a backlog");

/// How long a task waits for more records after its next batch begins, given that its previous batch took `taken`
/// records: 1 ms per record, at most `most` (`--fanout-linger`). Under light load a batch is a record or two, so
/// the wait is a few milliseconds; from about 1,000 records/s on a partition it grows to `most`, and the batches
/// with it: a conversation's messages in one batch reach each member as one delta, so the cost per message falls
/// as the load rises. A full batch (a backlog) never waits, nor does the first after an idle spell.
pub fn linger(taken: usize, most: Duration) -> Duration {
    (LINGER_PER_RECORD * u32::try_from(taken).unwrap_or(u32::MAX)).min(most)
}

/// What each record of a task's previous batch adds to its next batch's wait ([`linger`]): 1 ms.
const LINGER_PER_RECORD: Duration = Duration::from_millis(1);

/// After a clean stop (last commit and checkpoint done): marks the lease released, which a restarted static member
/// waits for while the lease is draining ([`super::prepare`]). A failure is only logged: that member then waits out
/// its bound.
async fn release(shared: &Shared, stage: Stage, partition: i32, generation: i64) {
    if let Err(e) = shared.store.release(stage, partition, generation).await {
        tracing::warn!(%stage, partition, error = %e, "marking the lease released");
    }
}

/// Logs the task's first output downstream (`first records published`) once: `scripts/bench-sustained
/// --restart` measures each partition's pause from the SIGTERM to it.
fn log_first<T: StageTask>(task: &mut T, first: &mut bool) {
    if std::mem::take(first) {
        let input = &task.parts().0;
        let (partition, skipped, (started, first_batch)) = (input.partition, input.skipped, input.timing);
        let first_batch_ms = first_batch.map_or(0, |at| at.duration_since(started).as_millis() as u64);
        let ms = started.elapsed().as_millis() as u64;
        tracing::info!(stage = %T::STAGE, partition, skipped, ms, first_batch_ms, "first records published");
    }
}

/// Pre-commit, then the commit's Redis writes, then its checkpoint in the background ([`Checkpointing`]), once the
/// previous one is done.
async fn commit_task<T: StageTask>(
    task: &mut T,
    idle: bool,
    running: &mut Option<Checkpointing>,
) -> Result<(), TaskError> {
    let started = Instant::now();
    if !idle {
        task.pre_commit().await?;
    }
    let Some(c) = task.prepare(idle).await? else { return Ok(()) };
    let sh = task.parts().1.clone();
    let whole = publish(sh.home(), c.stage, c.partition, &c.redis, c.mark).await?;
    task.committed(whole);
    finish(task, running).await?;
    let offsets = c.offsets.clone();
    let handle = tokio::spawn(async move {
        let postgres = checkpoint(sh.home(), &c).await?;
        sh.metrics.checkpoint(started.elapsed());
        sh.metrics.flush_latency(T::STAGE, started.elapsed(), postgres);
        tracing::debug!(stage = %T::STAGE, partition = c.partition, "checkpoint");
        Ok(())
    });
    *running = Some(Checkpointing { handle, offsets });
    Ok(())
}

/// A checkpoint (the PostgreSQL transaction of a commit) running beside the task, which goes on reading and
/// publishing meanwhile. At most one runs per task, so checkpoints commit in order; a failed one fails the task,
/// which restarts from the last checkpoint that committed.
pub struct Checkpointing {
    handle: tokio::task::JoinHandle<Result<(), TaskError>>,
    /// The next offsets it commits.
    offsets: Vec<(Input, i64)>,
}

/// Waits for the running checkpoint, if any; then gives Kafka its offsets as a hint and probes the lag.
///
/// Errors: the checkpoint's ([`crate::state::commit::checkpoint`]); [`TaskError::Stopped`] when the runtime
/// stopped under it.
async fn finish<T: StageTask>(task: &mut T, running: &mut Option<Checkpointing>) -> Result<(), TaskError> {
    let Some(Checkpointing { handle, offsets }) = running.take() else { return Ok(()) };
    match handle.await {
        Ok(done) => done?,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => return Err(TaskError::Stopped),
    }
    let (input, sh) = task.parts();
    let named: Vec<(&str, i64)> = offsets.iter().map(|(i, next)| (i.topic(&sh.topics), *next)).collect();
    input.store_offsets(&named);
    for (topic, next) in named {
        let (metrics, p, label) = (sh.metrics.clone(), input.partition, topic.to_owned());
        input.probe_lag(topic, next, move |lag| metrics.lag(T::STAGE, &label, p, lag));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{batch_bound, linger, BACKLOG, BACKLOG_BATCH};

    #[test]
    fn a_batch_lingers_a_millisecond_per_record_of_the_previous_one_up_to_the_flag() {
        let ms = Duration::from_millis;
        assert_eq!(linger(0, ms(100)), ms(0), "after an idle spell: no wait");
        assert_eq!(linger(3, ms(100)), ms(3), "light load: a few milliseconds");
        assert_eq!(linger(250, ms(100)), ms(100), "heavy load: the flag's bound");
        assert_eq!(linger(250, ms(0)), ms(0), "--fanout-linger 0ms: never");
    }

    #[test]
    fn a_batch_takes_4000_records_only_when_its_lane_holds_two_such_batches() {
        assert_eq!(batch_bound(1_000, 0), 1_000, "keeping up: the live bound");
        assert_eq!(batch_bound(1_000, 2_300), 1_000, "a live burst: still the live bound");
        assert_eq!(batch_bound(1_000, BACKLOG - 1), 1_000);
        assert_eq!(batch_bound(1_000, BACKLOG), BACKLOG_BATCH, "a backlog: the backlog's batch");
        assert_eq!(batch_bound(1_000, 20_000), 4_000, "a full lane");
        assert_eq!(batch_bound(10, 20_000), 4_000, "whatever the live bound");
        assert_eq!(batch_bound(4_000, 20_000), 4_000, "the fold's bound is already the backlog's");
    }
}
