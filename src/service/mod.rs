//! `unread run`: the fan-out stage, the fold stage and the read API in one process (or any subset of them).
//!
//! The imperative shell around the pure core: consumer-group members ([`group`]) hand records of each assigned
//! partition to a task of its own ([`fanout_stage`], [`fold_stage`]), which owns that partition's state, writes the
//! Redis projection and checkpoints to PostgreSQL.

pub mod context;
pub mod error;
pub mod fanout_stage;
pub mod fold_stage;
pub mod group;
pub mod options;
pub mod prepare;
pub mod records;
pub mod run;
pub mod task;
pub mod topics;
pub mod tx;

pub use context::{DeltaRecords, FanOutContext, Shared};
pub use error::{is_fenced_code, TaskError};
pub use options::{FlushPolicy, Role, RunOptions};
pub use run::run;
