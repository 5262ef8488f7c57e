//! The functional core: pure, deterministic, no I/O. Everything here is a function of its inputs, tested without
//! Kafka, Redis or PostgreSQL; the rest of the crate is the imperative shell around it.
//!
//! - [`contract`]: the event types of `CONTRACT.md`, their decoder, and the reader shape;
//! - [`fanout`]: per conversation, events → per-recipient [`delta::Delta`]s;
//! - [`delta`]: the delta, payload of the internal topic `unread.user-deltas`;
//! - [`fold`]: per user, deltas and the user's own events → unread state;
//! - [`seqset`]: the range set both are built on;
//! - [`broadcast`]: broadcast lists, kept once and combined with each reader's cursor at read time;
//! - [`hybrid`]: read diffusion for huge conversations, whose index is kept once the same way;
//! - [`lists`]: the ops both kinds of shared list change by; [`totals`]: a user's totals and what one member
//!   conversation adds to them;
//! - [`notifications`]: a user's notifications, their counts per category and the bounded history behind them;
//! - [`changes`]: what changed between two reader shapes, as the push stream sends it;
//! - [`expiry`]: unread that expires (v3), as whole UTC days; [`receipts`]: read receipts (v3), "read by N of M",
//!   from the members' join heads and cursors;
//! - [`threads`] and [`reactions`]: contract v4's threads and reactions of one user in one conversation;
//!   [`stakes`]: which of a fold's users a read-diffused conversation's replies concern.

/// The hash map of the core's per-entity state: hashbrown's (std's own table, with `entry_ref`, which looks an id up
/// without copying it) keyed with aHash, several times faster than SipHash on short ids and still seeded at random
/// per process (no hash flooding from chosen ids).
pub type Map<K, V> = hashbrown::HashMap<K, V, ahash::RandomState>;

/// The hash set beside [`Map`], hashed the same way.
pub type Set<T> = hashbrown::HashSet<T, ahash::RandomState>;

pub mod broadcast;
pub mod changes;
pub mod contract;
pub mod counts;
pub mod delta;
pub mod expiry;
pub mod fanout;
pub mod fold;
pub mod hybrid;
pub mod lists;
pub mod notifications;
pub mod reactions;
pub mod receipts;
pub mod seqset;
pub mod stakes;
pub mod threads;
pub mod totals;
