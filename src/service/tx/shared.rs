//! The default (`--producer-per-partition` turns it off): one transactional producer for every fan-out task of an
//! instance, and one Kafka transaction that all of them produce into and that any of them commits for all (a group
//! commit).
//!
//! Eight partition tasks with a producer each brought eight clients (their broker and poll threads) and up to eight
//! commits, each writing a marker into every delta partition it touched, per round of batches. One producer and
//! one commit per round measured, at 1,000 msg/s, p50 42–55 ms and p99 88–228 ms against 83–153 and 386–535 ms,
//! and 14–22% less CPU per per-recipient update (docs/performance.md, "One transactional producer per instance").
//!
//! The transactional id is `{group}.fanout.{instance}` (a static member's `--group-instance-id`, else the
//! process's `host:pid`), so the next incarnation of a static member fences this one and aborts its open
//! transaction when it initializes. Another instance that takes a partition this one did not release fences this
//! producer unless this instance is still a member of the group ([`super::fence::fence`]); a zombie that is
//! a member meets the lease check before every produce and the fold's fence against older lease generations
//! (docs/operations.md, "Fencing").

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::producer::{blocking, transactional_producer};
use crate::kafka::producer::AsyncProducer;
use crate::service::error::TaskError;

/// How long a commit waits for the deltas in flight to be acknowledged before it commits (which then flushes
/// them itself): 30 s.
const ACKS_WAIT: Duration = Duration::from_secs(30);

/// The instance's shared transactional producer and its transaction.
pub struct SharedTransaction {
    /// `{group}.fanout.{instance}` (or `{group}.fanout.{host:pid}`).
    id: String,
    /// Created and initialized by the first task that starts, and again by the first that starts after Kafka
    /// fenced it ([`SharedTransaction::producer`]).
    producer: Mutex<Option<AsyncProducer>>,
    state: Arc<Mutex<Transaction>>,
    /// Set when a begin or an abort failed without making the client fatal: the client's transaction state is no
    /// longer the one kept here (an abort that timed out leaves librdkafka in a transaction this side counts as
    /// ended, and every later begin then fails with "Operation not valid in state InTransaction"), so the next
    /// task to start replaces the producer ([`SharedTransaction::producer`]).
    stale: Arc<AtomicBool>,
}

/// The transaction now: whether it is open, and its number (every commit or abort moves to the next).
struct Transaction {
    open: bool,
    epoch: u64,
    /// The transactions aborted after a failed commit: their tasks' deltas are gone, so those tasks must restart.
    aborted: BTreeSet<u64>,
}

impl SharedTransaction {
    /// The shared transaction of transactional id `id`, with no producer yet.
    pub fn new(id: String) -> Self {
        let state = Arc::new(Mutex::new(Transaction { open: false, epoch: 0, aborted: BTreeSet::new() }));
        Self { id, producer: Mutex::new(None), state, stale: Arc::default() }
    }

    /// The transactional id, `{group}.fanout.{instance}` (or `{group}.fanout.{host:pid}`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The producer (a clone of one client), created and initialized by the first caller, which fences the
    /// previous incarnation of the instance; created again when Kafka fenced it (a successor took one of the
    /// instance's partitions while the instance was cut off from its group, [`super::fence::fence`]) or when a
    /// begin or an abort failed and left its transaction state unknown: the transaction open then is lost, and
    /// every task with deltas in it fails at its commit and restarts from its checkpoint. The new client's
    /// initialization fences the old one and aborts what it left open.
    ///
    /// Errors: as [`transactional_producer`] (on `brokers`).
    pub async fn producer(&self, brokers: &str) -> Result<AsyncProducer, TaskError> {
        let mut slot = self.producer.lock().await;
        let stale = self.stale.swap(false, Ordering::SeqCst);
        let fatal = slot.as_ref().is_some_and(|p| p.client().fatal_error().is_some());
        if let Some(p) = slot.as_ref().filter(|_| !fatal && !stale) {
            return Ok(p.clone());
        }
        if slot.take().is_some() {
            let why = if fatal { "was fenced" } else { "lost its transaction state" };
            tracing::warn!(transactional_id = %self.id, "the shared producer {why}; initializing a new one");
            let mut t = self.state.lock().await;
            if t.open {
                let lost = t.epoch;
                t.aborted.insert(lost);
                (t.open, t.epoch) = (false, lost + 1);
            }
        }
        let producer = transactional_producer(brokers, &self.id).await?;
        tracing::info!(transactional_id = %self.id, "the instance's shared transactional producer is initialized");
        *slot = Some(producer.clone());
        Ok(producer)
    }

    /// The producer now, if initialized.
    async fn current(&self) -> Option<AsyncProducer> {
        self.producer.lock().await.clone()
    }

    /// Begins the transaction unless it is open: while the caller holds what this returns no commit runs, so what
    /// it produces meanwhile is in that transaction.
    ///
    /// `uncommitted`: the transaction the caller's earlier deltas are in, if not committed yet as far as it knows.
    ///
    /// Errors: that transaction was aborted (those deltas are gone: the task must restart from its checkpoint); no
    /// producer yet; beginning fails (the producer was fenced, or its last commit failed).
    pub async fn open(&self, uncommitted: Option<u64>) -> Result<Open, TaskError> {
        let producer = self.current().await; // before the state: [`Self::producer`] locks the two in that order
        let mut t = self.state.clone().lock_owned().await;
        if uncommitted.is_some_and(|e| t.aborted.contains(&e)) {
            return Err(TaskError::kafka("producing into the shared transaction (aborted)")(KafkaError::Canceled));
        }
        if !t.open {
            let begun = producer.as_ref().map_or(Err(KafkaError::Canceled), |p| p.begin_transaction());
            if producer.is_some() && begun.is_err() {
                self.stale.store(true, Ordering::SeqCst);
            }
            begun.map_err(TaskError::kafka("beginning a transaction"))?;
            t.open = true;
        }
        let epoch = t.epoch;
        Ok(Open { transaction: t, epoch, stale: self.stale.clone() })
    }

    /// Commits transaction `epoch`, unless another task did: first waits (up to `ACKS_WAIT`, 30 s) until nothing is in
    /// flight, since librdkafka's commit flushes undelivered messages more slowly itself. A failed commit is
    /// aborted, and every task whose deltas were in it gets an error here and restarts from its checkpoint.
    ///
    /// Errors: the commit failed (then aborted), or `epoch` was aborted by another task's failed commit.
    pub async fn commit(&self, epoch: u64) -> Result<(), TaskError> {
        let current = self.current().await; // before the state, as in [`Self::open`]
        let mut t = self.state.lock().await;
        if t.aborted.contains(&epoch) {
            return Err(TaskError::kafka("committing the shared transaction (aborted)")(KafkaError::Canceled));
        }
        if t.epoch > epoch || !t.open {
            return Ok(());
        }
        let Some(producer) = current else { return Ok(()) };
        let deadline = Instant::now() + ACKS_WAIT;
        while producer.in_flight_count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let committed = blocking(producer.clone(), |p| p.commit_transaction(Duration::from_secs(30))).await;
        (t.open, t.epoch) = (false, t.epoch + 1);
        if let Err(e) = committed {
            t.aborted.insert(epoch);
            if blocking(producer, |p| p.abort_transaction(Duration::from_secs(30))).await.is_err() {
                self.stale.store(true, Ordering::SeqCst);
            }
            return Err(TaskError::kafka("committing the shared transaction")(e));
        }
        Ok(())
    }
}

/// The shared transaction held open by a task while it produces into it.
pub struct Open {
    transaction: OwnedMutexGuard<Transaction>,
    /// The transaction's number: what the task commits ([`SharedTransaction::commit`]).
    pub epoch: u64,
    /// The shared transaction's mark that its producer must be replaced.
    stale: Arc<AtomicBool>,
}

impl Open {
    /// A record could not be produced into this transaction (after a broker outage librdkafka puts it in an
    /// abortable error state and refuses every later record with `State`): aborts it with `producer`, so that the
    /// next task to produce begins a fresh one, and every task with records in this one fails at its next
    /// produce or commit and restarts from its checkpoint. Without the abort the tasks restarted forever into the
    /// same refused transaction. An abort that fails (fatal or not) leaves the producer to be replaced at the
    /// next task's start ([`SharedTransaction::producer`]).
    pub async fn abort(mut self, producer: &AsyncProducer) {
        let t = &mut *self.transaction;
        if t.open && t.epoch == self.epoch {
            tracing::warn!(epoch = self.epoch, "a delta was refused: aborting the shared transaction");
            if let Err(e) = blocking(producer.clone(), |p| p.abort_transaction(Duration::from_secs(30))).await {
                tracing::warn!(epoch = self.epoch, error = %e, "the abort failed: the producer will be replaced");
                self.stale.store(true, Ordering::SeqCst);
            }
            t.aborted.insert(self.epoch);
            (t.open, t.epoch) = (false, self.epoch + 1);
        }
    }
}
