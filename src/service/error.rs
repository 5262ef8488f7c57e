//! Why a partition task stopped ([`TaskError`]), and how a fencing is told from other failures.

use rdkafka::error::KafkaError;

use crate::checkpoint::store::StoreError;
use crate::projection::ProjectionError;

/// Why a partition task stopped. The dispatcher starts it again from its checkpoint, except after a fencing,
/// when another task owns the partition.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The checkpoint store failed (still after retries) or fenced the task, Redis failed or holds a malformed
    /// hash, or a checkpointed state does not decode ([`crate::state::StateError`]).
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// A Kafka call failed; `doing` says which.
    #[error("{doing}: {source}")]
    Kafka {
        /// What the task was doing, e.g. `producing a delta`.
        doing: &'static str,
        /// The client's error.
        #[source]
        source: KafkaError,
    },
    /// The runtime stopped while a checkpoint ran beside the task (the process is exiting).
    #[error("the runtime stopped during a checkpoint")]
    Stopped,
}

impl TaskError {
    /// The `map_err` of a Kafka call.
    pub fn kafka(doing: &'static str) -> impl FnOnce(KafkaError) -> TaskError {
        move |source| TaskError::Kafka { doing, source }
    }

    /// Whether another task took the partition's lease, or Kafka fenced the task's transactional producer (a
    /// successor initialized the same transactional id).
    pub fn is_fenced(&self) -> bool {
        matches!(self, TaskError::State(crate::state::StateError::Store(StoreError::Fenced(_))))
            || self.is_kafka_fenced()
    }

    /// Whether Kafka fenced the task's transactional producer: what a zombie fan-out's late batch meets.
    pub fn is_kafka_fenced(&self) -> bool {
        match self {
            TaskError::Kafka { source: KafkaError::Transaction(e), .. } => is_fenced_code(e.code()),
            TaskError::Kafka { source: KafkaError::MessageProduction(code), .. } => is_fenced_code(*code),
            _ => false,
        }
    }
}

/// Whether a Kafka error code says a successor initialized the producer's transactional id (librdkafka's own
/// `_FENCED`, or the broker's `PRODUCER_FENCED` / `INVALID_PRODUCER_EPOCH`).
pub fn is_fenced_code(code: rdkafka::types::RDKafkaErrorCode) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{Fenced, InvalidProducerEpoch, ProducerFenced};
    matches!(code, Fenced | ProducerFenced | InvalidProducerEpoch)
}

impl From<StoreError> for TaskError {
    fn from(e: StoreError) -> Self {
        TaskError::State(e.into())
    }
}

impl From<ProjectionError> for TaskError {
    fn from(e: ProjectionError) -> Self {
        TaskError::State(e.into())
    }
}
