//! What broadcast lists ([`crate::core::broadcast`]) and read-diffused conversations' indexes
//! ([`crate::core::hybrid`]) share: the ops that change a list's live seqs, and which list an op applies to.

use serde::{Deserialize, Serialize};

/// A change to a list's live seqs, in the order it happened: what the projection applies to its copy of the list
/// (`ZADD` / `ZREM`), O(1) per event. A read-diffused conversation's index ([`crate::core::hybrid::ConvIndex`])
/// changes by the same ops, plus the two only it has: a seq that mentions everyone, and clearing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListOp {
    /// A countable publication (or message).
    Add(u64),
    /// A countable message that mentions everyone (indexes only): added to the live seqs and the mentions.
    AddMention(u64),
    /// A recall of a publication (or message) at or below the head.
    Remove(u64),
    /// Empties the set (indexes only: the conversation switched diffusion).
    Clear,
}

/// What a [`ListOp`] applies to: a broadcast list, or a read-diffused conversation's index. Their Redis keys differ
/// ([`crate::projection::shared_keys`]), so a list and a conversation may share an id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ListId {
    /// A broadcast list, by `broadcast_id`.
    Broadcast(String),
    /// A read-diffused conversation's index, by `conversation_id`.
    Index(String),
}
