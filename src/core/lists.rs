//! What broadcast lists ([`crate::core::broadcast`]) and read-diffused conversations' indexes
//! ([`crate::core::hybrid`]) share: the ops that change a list's live seqs, and which list an op applies to.

use serde::{Deserialize, Serialize};

use crate::core::seqset::SeqSet;

/// A change to a list's live seqs, in the order it happened: what the projection applies to its copy of the list
/// (`ZADD` / `ZREM`), O(1) per event. A read-diffused conversation's index ([`crate::core::hybrid::ConvIndex`])
/// changes by the same ops, plus the three only it has: a seq that mentions everyone, clearing, and expiry buckets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListOp {
    /// A countable publication (or message).
    Add(u64),
    /// A countable message that mentions everyone (indexes only): added to the live seqs and the mentions.
    AddMention(u64),
    /// A recall of a publication (or message) at or below the head.
    Remove(u64),
    /// Empties the set (indexes only: the conversation switched diffusion).
    Clear,
    /// v3, indexes only: the live seqs that expire on UTC `day` are now `seqs` (empty: none), the whole bucket.
    /// A later one of the same day replaces it, so only the last of a run need be applied
    /// ([`last_buckets_only`]).
    Expiring {
        /// The UTC day the seqs expire ([`crate::core::expiry`]).
        day: i64,
        /// The bucket's live seqs.
        seqs: SeqSet,
    },
}

/// `ops` without the [`ListOp::Expiring`] ops that a later one of the same list and day replaces (a bucket op
/// carries the whole bucket, and a later [`ListOp::Clear`] empties it anyway): what a batch of messages of one day
/// sends to Redis is one bucket, not one per message. Order is kept.
pub fn last_buckets_only(ops: Vec<(ListId, ListOp)>) -> Vec<(ListId, ListOp)> {
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<(ListId, ListOp)> = Vec::with_capacity(ops.len());
    for (id, op) in ops.into_iter().rev() {
        if let ListOp::Expiring { day, .. } = &op {
            if !seen.insert((id.clone(), *day)) {
                continue;
            }
        }
        kept.push((id, op));
    }
    kept.reverse();
    kept
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
