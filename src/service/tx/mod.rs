//! The fan-out's transactional producer ([`TxProducer`]), in one of two modes:
//! - **shared** (the default): one producer and one Kafka transaction for every fan-out task of the instance, which
//!   any of them commits for all ([`shared`]);
//! - **own** (`--producer-per-partition`): each task its own producer, `transactional.id`
//!   `{group}.fanout.{partition}`, and its own transaction.
//!
//! Its lifecycle: connected ([`producer::connected_producer`], which fences nothing), initialized
//! ([`TxProducer::initialize`], which fences every earlier producer of its id), then begin and commit as the task
//! produces, and at the end discarded ([`TxProducer::finish`]). A previous owner's producer is fenced by
//! [`fence::fence`]. The stage keeps its apply and commit steps; this module keeps Kafka's transactions.

pub mod fence;
pub mod producer;
pub mod shared;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::Producer;

use crate::kafka::producer::AsyncProducer;
use crate::service::error::TaskError;
use producer::{blocking, fenced_or, initialized, transactional_producer};
pub use shared::{Open, SharedTransaction};

/// A fan-out task's transactional producer and where its transaction stands.
pub struct TxProducer {
    producer: AsyncProducer,
    /// The instance's shared transaction; `None`: the task's own (`--producer-per-partition`).
    shared: Option<Arc<SharedTransaction>>,
    /// Since when a transaction holds this task's records (begun at its first record after a commit), if one does.
    open_since: Option<Instant>,
    /// Shared mode: the number of the shared transaction this task's uncommitted records are in.
    epoch: Option<u64>,
}

impl TxProducer {
    /// The initialized producer of a task: `connected` (its own, created early) initialized, or else the instance's
    /// `shared` one (created and initialized by its first task), or else its own of transactional id `id` created
    /// and initialized on `brokers` now. Initializing fences every earlier producer of the same id.
    ///
    /// Errors: the producer cannot be created or initialized (the broker unreachable, say).
    pub async fn initialize(
        connected: Option<AsyncProducer>,
        shared: Option<Arc<SharedTransaction>>,
        brokers: &str,
        id: &str,
    ) -> Result<Self, TaskError> {
        let producer = match (connected, &shared) {
            (Some(producer), _) => initialized(producer).await?,
            (None, Some(t)) => t.producer(brokers).await?,
            (None, None) => transactional_producer(brokers, id).await?,
        };
        Ok(Self { producer, shared, open_since: None, epoch: None })
    }

    /// The producer, to send records into the transaction [`TxProducer::begin`] opened.
    pub fn producer(&self) -> &AsyncProducer {
        &self.producer
    }

    /// Whether the transaction is the instance's shared one.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Since when a transaction holds this task's records; `None` when none does.
    pub fn open_since(&self) -> Option<Instant> {
        self.open_since
    }

    /// Begins a transaction unless one is open: the instance's shared one, which then stays open (uncommitted)
    /// while the caller holds what this returns, or the task's own.
    ///
    /// Errors: beginning fails (the producer was fenced); the shared transaction this task's records were in was
    /// aborted (they are gone: the task must restart from its checkpoint).
    pub async fn begin(&mut self) -> Result<Option<Open>, TaskError> {
        let open = match &self.shared {
            Some(t) => Some(t.open(self.epoch).await?),
            None if self.open_since.is_none() => {
                self.producer.begin_transaction().map_err(TaskError::kafka("beginning a transaction"))?;
                None
            }
            None => None,
        };
        self.epoch = open.as_ref().map(|o| o.epoch).or(self.epoch);
        self.open_since.get_or_insert_with(Instant::now);
        Ok(open)
    }

    /// Commits the transaction holding this task's records, if any (shared: unless another task did; own: a
    /// blocking call of up to 30 s, run off the async threads). Returns when the commit began, or `None` when no
    /// transaction held anything.
    ///
    /// Errors: the commit failed (a shared one is then aborted for every task in it).
    pub async fn commit(&mut self) -> Result<Option<Instant>, TaskError> {
        let started = Instant::now();
        match &self.shared {
            Some(t) => {
                let Some(epoch) = self.epoch.take() else { return Ok(None) };
                t.commit(epoch).await?;
            }
            None if self.open_since.is_none() => return Ok(None),
            None => blocking(self.producer.clone(), |p| p.commit_transaction(Duration::from_secs(30)))
                .await
                .map_err(TaskError::kafka("committing a transaction"))?,
        }
        self.open_since = None;
        Ok(Some(started))
    }

    /// Ends the task's use of the producer: `result`, or Kafka's fencing when it fenced the producer (the cause
    /// only the client keeps, [`fenced_or`]); the producer is dropped, which aborts a transaction of its own still
    /// open.
    pub fn finish<T>(self, result: Result<T, TaskError>) -> Result<T, TaskError> {
        result.map_err(|e| fenced_or(&self.producer, e))
    }
}
