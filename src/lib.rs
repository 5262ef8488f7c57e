//! unread: exact unread counts for chat apps, as an event-sourced stream processor.
//!
//! ```text
//!  producers ──► unread.conversation-events ──► fan-out (per conversation partition) ──► unread.user-deltas ─┐
//!            └─► unread.user-events ─────────────────────────────────────────────────────────────────────┴─► fold
//!                                          (per user partition) ──► Redis projection (reads) + PostgreSQL checkpoint
//! ```
//!
//! The crate is a functional core and an imperative shell:
//! - [`contract`]: the event types of `CONTRACT.md`, their decoder, and the reader shape;
//! - [`fanout`]: per conversation, events → per-recipient [`delta::Delta`]s (pure);
//! - [`fold`]: per user, deltas and the user's own events → unread state (pure);
//! - [`seqset`]: the range set both are built on;
//! - [`checkpoint`]: the bytes of state checkpointed to PostgreSQL;
//! - [`projection`]: the Redis hash layout readers are served from;
//! - [`pipeline`]: fan-out and fold wired in one process (`unread fold`);
//! - [`service`]: `unread run`, the consumer-group stages around the core; [`api`]: the read API;
//! - [`replay`]: `unread replay`, the log folded into another namespace; [`namespace`]: promote and drop;
//! - [`produce`], [`ops`], [`topology`], [`config`]: the other subcommands and their settings;
//! - [`cli`]: the `unread` command line.

pub mod api;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod contract;
pub mod dead_letter;
pub mod delta;
pub mod fanout;
pub mod fold;
pub mod namespace;
pub mod ops;
pub mod pipeline;
pub mod produce;
pub mod projection;
pub mod replay;
pub mod seqset;
pub mod service;
pub mod topology;
