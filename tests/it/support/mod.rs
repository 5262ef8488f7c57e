//! The integration tests' harness, one concern per module (as zero-to-production's `tests/api/helpers.rs`):
//! [`stack`] finds or starts Kafka, Redis and PostgreSQL (and private instances a test may stop), [`namespace`]
//! gives a test its own topics, schema, groups and keys and removes them on `Drop`, [`http`] asks the read API,
//! [`fixtures`] holds the bundled data and the comparisons, [`app`] serves the read API in-process from its
//! composition root.

pub mod app;
pub mod fixtures;
pub mod http;
pub mod namespace;
pub mod stack;

pub use app::*;
pub use fixtures::*;
pub use http::*;
pub use namespace::*;
pub use stack::*;
