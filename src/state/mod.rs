//! The home of checkpointed partition state: a shell over PostgreSQL ([`crate::checkpoint`]) and Redis
//! ([`crate::projection`]), with no Kafka in it.
//!
//! - [`codec`]: the checkpoint rows, one row type and version per kind, so the core's structs are not the format;
//! - [`offsets`]: the inputs of each stage ([`Input`]) and their next offsets, typed, one shape everywhere;
//! - [`load`]: one loader of a partition's state (fan-out or fold, with its fence) under its lease, and the
//!   loaders of a whole namespace's state from checkpoint rows (replay, `--from checkpoint`);
//! - [`user`]: one reader of a user's checkpointed state with its version and its Redis write, for degraded reads,
//!   `verify`, `projection rebuild` and `inspect`;
//! - [`partition`]: one partition's state of each stage between commits (apply records, take a commit): a live
//!   task owns one, a replay one per partition;
//! - [`commit`]: the one commit protocol, Redis writes → the partition's marker → the PostgreSQL transaction
//!   with the offsets, used by both stages and by replay;
//! - [`verify`]: the Redis projection compared with the checkpoint, user by user.
//!
//! The stages ([`crate::service`]), replay ([`crate::replay`]), the operator tools ([`crate::ops`]) and the API's
//! degraded reads ([`crate::read`]) all reach checkpointed state through here, never through each other.

pub mod codec;
pub mod commit;
pub mod load;
pub mod offsets;
pub mod partition;
pub mod retry;
pub mod user;
pub mod verify;

pub use offsets::{FoldNext, Input, Offsets};

use crate::checkpoint::store::StoreError;
use crate::projection::ProjectionError;
use crate::state::codec::CheckpointError;

/// Why reading or committing partition state failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The checkpoint store failed (still after retries) or fenced the caller.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis failed (still after retries), or holds a malformed hash.
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// A checkpointed state does not decode.
    #[error("checkpoint of {id:?}: {source}")]
    Corrupt {
        /// The user, conversation, list or `user/notification`.
        id: String,
        /// Why it does not decode.
        #[source]
        source: CheckpointError,
    },
}

impl StateError {
    /// The `map_err` of decoding the row of `id`.
    pub fn corrupt(id: &str) -> impl FnOnce(CheckpointError) -> StateError + '_ {
        move |source| StateError::Corrupt { id: id.to_owned(), source }
    }
}

/// A result of the state home.
pub type StateResult<T> = Result<T, StateError>;
