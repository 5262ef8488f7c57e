//! Broadcast lists (`CONTRACT.md` § v2, "Broadcasts"): system notices and red dots shared by every user, **never
//! fanned out**. A list's state lives once, with the fan-out (head and the countable, not recalled seqs: a
//! [`ListState`]); a user holds only a cursor per list read (in the fold); the count is combined at read time:
//! `unread(U, B)` = the list's seqs above U's cursor ([`ListState::unread_above`]). A publication therefore costs
//! O(1) writes whatever the number of users.

use serde::{Deserialize, Serialize};

use crate::core::contract::ConversationEvent;
use crate::core::seqset::SeqSet;

/// One list's state: its head and the publications that count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListState {
    /// The highest published seq (0 before any): a publication at or below it is a duplicate.
    pub head: u64,
    /// The countable publications not recalled.
    pub live: SeqSet,
}

/// A change to a list's live seqs, in the order it happened: what the projection applies to its copy of the list
/// (`ZADD` / `ZREM`), O(1) per event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListOp {
    /// A countable publication.
    Add(u64),
    /// A recall of a publication at or below the head.
    Remove(u64),
}

impl ListState {
    /// Applies `broadcast.published` or `broadcast.recalled`; returns the op that changed the live seqs, if any.
    /// Other events change nothing.
    pub fn apply(&mut self, event: &ConversationEvent) -> Option<ListOp> {
        match event {
            ConversationEvent::Published(e) if e.seq > self.head => {
                self.head = e.seq;
                (e.countable && self.live.insert(e.seq)).then_some(ListOp::Add(e.seq))
            }
            ConversationEvent::Unpublished(e) if e.seq <= self.head => {
                self.live.remove(e.seq).then_some(ListOp::Remove(e.seq))
            }
            _ => None,
        }
    }

    /// The publications that count for a reader at `cursor`: live seqs above it.
    pub fn unread_above(&self, cursor: u64) -> u64 {
        self.live.count_above(cursor)
    }
}

/// Where a reader's broadcast counts come from: a list's unread count above a cursor (0 for a list never
/// published). The fan-out's lists in one process ([`crate::pipeline`]), Redis in the service.
pub trait Lists {
    /// `unread(U, B)` for a reader at `cursor` in list `broadcast_id`.
    fn unread_above(&self, broadcast_id: &str, cursor: u64) -> u64;
}

impl Lists for crate::core::Map<String, ListState> {
    fn unread_above(&self, broadcast_id: &str, cursor: u64) -> u64 {
        self.get(broadcast_id).map_or(0, |l| l.unread_above(cursor))
    }
}

/// No list at all (every count 0): for a view whose broadcast counts are combined elsewhere (in Redis).
pub struct NoLists;

impl Lists for NoLists {
    fn unread_above(&self, _: &str, _: u64) -> u64 {
        0
    }
}
