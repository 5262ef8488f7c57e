//! Broadcast lists (`CONTRACT.md` § v2, "Broadcasts"): system notices and red dots shared by every user, **never
//! fanned out**. A list's state lives once, with the fan-out (head and the countable, not recalled seqs: a
//! [`ListState`]); a user holds only a cursor per list read (in the fold); the count is combined at read time:
//! `unread(U, B)` = the list's seqs above U's cursor ([`ListState::unread_above`]). A publication therefore costs
//! O(1) writes whatever the number of users.

use serde::{Deserialize, Serialize};

use crate::core::contract::BroadcastOp;
use crate::core::hybrid::{ConvIndex, ShareQuery};
pub use crate::core::lists::{ListId, ListOp};
use crate::core::seqset::SeqSet;

/// One list's state: its head and the publications that count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListState {
    /// The highest published seq (0 before any): a publication at or below it is a duplicate.
    pub head: u64,
    /// The countable publications not recalled.
    pub live: SeqSet,
}

impl ListState {
    /// Applies `broadcast.published` or `broadcast.recalled`; returns the op that changed the live seqs, if any (a
    /// duplicate publication, or a recall of a seq not published yet, changes nothing).
    pub fn apply(&mut self, event: BroadcastOp<'_>) -> Option<ListOp> {
        match event {
            BroadcastOp::Published(e) if e.seq > self.head => {
                self.head = e.seq;
                (e.countable && self.live.insert(e.seq)).then_some(ListOp::Add(e.seq))
            }
            BroadcastOp::Recalled(e) if e.seq <= self.head => self.live.remove(e.seq).then_some(ListOp::Remove(e.seq)),
            BroadcastOp::Published(_) | BroadcastOp::Recalled(_) => None,
        }
    }

    /// The ops that rebuild the list from empty (for a projection that lost it).
    pub fn whole_ops(&self) -> Vec<ListOp> {
        self.live.iter().map(ListOp::Add).collect()
    }

    /// The publications that count for a reader at `cursor`: live seqs above it.
    pub fn unread_above(&self, cursor: u64) -> u64 {
        self.live.count_above(cursor)
    }
}

/// What is kept once and combined with each reader's state at read time: broadcast lists and the indexes of
/// read-diffused conversations. The fan-out's in one process ([`crate::pipeline`]), Redis in the service.
pub trait Lists {
    /// `unread(U, B)` for a reader at `cursor` in list `broadcast_id` (0 for a list never published).
    fn unread_above(&self, broadcast_id: &str, cursor: u64) -> u64;

    /// A member's share of a read-diffused conversation's index: (unread, mentions) for the query
    /// ([`crate::core::hybrid::ConvIndex::counts`]); (0, 0) for a conversation without an index.
    fn index_counts(&self, conversation_id: &str, query: &ShareQuery) -> (u64, u64);

    /// v4: the lowest seq of a member's share of a read-diffused conversation's index ([`ConvIndex::first`]),
    /// `None` when the share is empty or the lists do not hold the index.
    fn index_first(&self, conversation_id: &str, query: &ShareQuery) -> Option<u64>;
}

/// The broadcast lists and read-diffused conversations' indexes, loaded from the checkpoint (for `unread verify`
/// and degraded reads).
#[derive(Debug, Clone, Default)]
pub struct SharedLists {
    /// Broadcast lists by id.
    pub lists: crate::core::Map<String, ListState>,
    /// Indexes by conversation id.
    pub indexes: crate::core::Map<String, ConvIndex>,
}

impl Lists for SharedLists {
    fn unread_above(&self, broadcast_id: &str, cursor: u64) -> u64 {
        self.lists.get(broadcast_id).map_or(0, |l| l.unread_above(cursor))
    }

    fn index_counts(&self, conversation_id: &str, query: &ShareQuery) -> (u64, u64) {
        self.indexes.get(conversation_id).map_or((0, 0), |i| i.counts(query))
    }

    fn index_first(&self, conversation_id: &str, query: &ShareQuery) -> Option<u64> {
        self.indexes.get(conversation_id)?.first(query)
    }
}

/// Nothing kept once (every count 0): for a view whose shared counts are combined elsewhere (in Redis).
pub struct NoLists;

impl Lists for NoLists {
    fn unread_above(&self, _: &str, _: u64) -> u64 {
        0
    }

    fn index_counts(&self, _: &str, _: &ShareQuery) -> (u64, u64) {
        (0, 0)
    }

    fn index_first(&self, _: &str, _: &ShareQuery) -> Option<u64> {
        None
    }
}
