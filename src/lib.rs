//! unread: exact unread counts for chat apps, as an event-sourced stream processor.
//!
//! ```text
//!  producers ──► unread.conversation-events ──► fan-out (per conversation partition) ──► unread.user-deltas ─┐
//!            └─► unread.user-events ─────────────────────────────────────────────────────────────────────┴─► fold
//!                                          (per user partition) ──► Redis projection (reads) + PostgreSQL checkpoint
//! ```
//!
//! The crate is a functional core and an imperative shell (`docs/architecture.md` walks one event through both):
//! - [`core`]: the pure core: the [`core::contract`], [`core::fanout`], [`core::fold`], [`core::delta`] and
//!   [`core::seqset`]; no I/O;
//! - [`checkpoint`]: the bytes of state checkpointed to PostgreSQL, and the transactional store;
//! - [`projection`]: the Redis hash layout readers are served from, its version, and its guarded writer;
//! - [`kafka`]: every Kafka client's configuration, the broker queries, header names; [`partitioner`]: the key
//!   partitioners of the Kafka clients and where an input topic puts a key;
//! - [`state`]: the home of checkpointed partition state (offsets, loading, the one commit protocol, users'
//!   checkpointed state for degraded reads and the operator tools); [`metrics`]: the service's metrics;
//! - [`service`]: `unread run`, the consumer-group stages around the core, one partition task for both;
//!   [`api`]: the read API, the stream and the admin address; [`app`]: the API's composition root; [`read`]: the
//!   read model (every answer about a user, from Redis or, degraded, from the checkpoint);
//! - [`push`]: the hub that turns the Redis change channel into messages for each connected socket;
//! - [`pipeline`]: fan-out and fold wired in one process (`unread fold`);
//! - [`replay`]: `unread replay`, the log folded into another namespace; [`namespace`]: promote and drop;
//! - [`ops`]: `lag`, `verify`, `inspect`, `projection rebuild`; [`produce`], [`dead_letter`], [`topology`];
//! - [`config`]: settings and namespaces; [`cli`]: the `unread` command line; [`shutdown`]: SIGINT/SIGTERM as a
//!   future.

#![warn(missing_docs)]
#![warn(clippy::too_many_lines)]

pub mod api;
pub mod app;
pub mod auth;
pub mod checkpoint;
pub mod cli;
pub mod clients;
pub mod clock;
pub mod config;
pub mod core;
pub mod dead_letter;
pub mod kafka;
pub mod metrics;
pub mod namespace;
pub mod ops;
pub mod partitioner;
pub mod pipeline;
pub mod produce;
pub mod progress;
pub mod projection;
pub mod push;
pub mod read;
pub mod records;
pub mod replay;
pub mod service;
pub mod shutdown;
pub mod state;
pub mod topology;
