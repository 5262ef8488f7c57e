//! Hybrid diffusion: write diffusion (one [`crate::core::delta::Delta`] per member per batch) for ordinary
//! conversations, **read diffusion** for huge ones (`docs/operations.md`, "Read diffusion").
//!
//! A conversation of any kind (feeds included) whose member count reaches the threshold ([`Diffusion`]) switches to
//! read diffusion at that membership event: the fan-out keeps its countable, not recalled seqs above the head at the
//! switch (`since`) once, in a [`ConvIndex`], and sends per-recipient deltas only for what must be per user: joins
//! and leaves, a sender's own messages (the read floor) and named mentions. A member's count is combined at read
//! time from the index and the member's own state: `unread` = the member's unread seqs up to `since` (delivered
//! while the conversation was write-diffused) + the index's seqs above `max(cursor, since)`
//! ([`ConvIndex::counts`]). It switches back when the count falls below half the threshold (hysteresis): every
//! member then receives the index's seqs as one delta and the index is dropped. Either switch happens at one event
//! of the conversation's log, so a fan-out replaying from its checkpoint switches at the same place, whatever its
//! batching: the switch is exact both ways and survives a crash in the middle.

use serde::{Deserialize, Serialize};

use crate::core::contract::UserView;
use crate::core::lists::ListOp;
use crate::core::seqset::SeqSet;
use crate::core::totals::Totals;

/// The default threshold: conversations with at least 1,000 members are read-diffused.
pub const DEFAULT_THRESHOLD: u64 = 1000;

/// When a conversation is read-diffused: at `threshold` members or more; back to write diffusion below
/// `back_below` (by default `threshold / 2`: the hysteresis keeps a conversation whose size hovers around the
/// threshold from switching at every join and leave). `None`: never (every conversation is write-diffused; a
/// read-diffused one switches back at its next membership change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diffusion {
    /// The member count from which a conversation is read-diffused; `None` turns read diffusion off.
    pub threshold: Option<u64>,
    /// A read-diffused conversation with fewer members switches back (at most `threshold`).
    pub back_below: u64,
}

impl Default for Diffusion {
    /// Read diffusion from [`DEFAULT_THRESHOLD`] members, back below half of it.
    fn default() -> Self {
        Self::from_threshold(DEFAULT_THRESHOLD)
    }
}

impl Diffusion {
    /// Write diffusion only.
    pub const OFF: Diffusion = Diffusion { threshold: None, back_below: 0 };

    /// Read diffusion from `threshold` members (0 turns it off), back below half of it.
    pub fn from_threshold(threshold: u64) -> Self {
        Self::with_band(threshold, threshold / 2)
    }

    /// Read diffusion from `threshold` members (0 turns it off), back below `back_below` (clamped to `threshold`).
    pub fn with_band(threshold: u64, back_below: u64) -> Self {
        Self { threshold: (threshold > 0).then_some(threshold), back_below: back_below.min(threshold) }
    }

    /// Whether a write-diffused conversation with `members` members switches to read diffusion.
    pub fn to_read(&self, members: usize) -> bool {
        self.threshold.is_some_and(|t| members as u64 >= t)
    }

    /// Whether a read-diffused conversation with `members` members switches back to write diffusion.
    pub fn to_write(&self, members: usize) -> bool {
        self.threshold.is_none() || (members as u64) < self.back_below
    }
}

/// A read-diffused conversation's index: what every member's count is combined with at read time. Kept by the
/// fan-out (checkpointed with the conversation) and copied into Redis (two sorted sets).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvIndex {
    /// The conversation's head when it switched: the index holds only seqs above it.
    pub since: u64,
    /// The countable, not recalled seqs above `since`.
    pub live: SeqSet,
    /// The seqs of `live` that mention everyone (`mention_all`).
    pub mention_all: SeqSet,
}

impl ConvIndex {
    /// An empty index from head `since`.
    pub fn new(since: u64) -> Self {
        Self { since, ..Self::default() }
    }

    /// Adds a countable message above `since` (`mention_all`: it mentions everyone); returns the projection's op.
    pub fn add(&mut self, seq: u64, mention_all: bool) -> ListOp {
        self.live.insert(seq);
        if mention_all {
            self.mention_all.insert(seq);
            return ListOp::AddMention(seq);
        }
        ListOp::Add(seq)
    }

    /// Removes a recalled message above `since`; returns the projection's op.
    pub fn remove(&mut self, seq: u64) -> ListOp {
        self.live.remove(seq);
        self.mention_all.remove(seq);
        ListOp::Remove(seq)
    }

    /// The ops that rebuild the index from empty (for a projection that lost it).
    pub fn whole_ops(&self) -> Vec<ListOp> {
        let op = |s: u64| if self.mention_all.contains(s) { ListOp::AddMention(s) } else { ListOp::Add(s) };
        self.live.iter().map(op).collect()
    }

    /// A member's share of the index: (unread, mentions) above `lo` = max(the member's cursor, `since`), the
    /// mentions being the `mention_all` seqs plus the member's `named` mentions still live (a recalled one no
    /// longer counts).
    pub fn counts(&self, lo: u64, named: &SeqSet) -> (u64, u64) {
        let above = named.slice(lo, u64::MAX);
        let named = above.iter().filter(|s| self.live.contains(*s) && !self.mention_all.contains(*s)).count();
        (self.live.count_above(lo), self.mention_all.count_above(lo) + named as u64)
    }
}

/// A member's share of a read-diffused conversation's index, with what decides where it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexShare {
    /// The user muted the conversation: its unread do not count in the totals.
    pub muted: bool,
    /// The conversation is a feed: its unread count in `feed_unread` only.
    pub feed: bool,
    /// The index's seqs unread for the member ([`ConvIndex::counts`]).
    pub unread: u64,
    /// The index's seqs that mention the member.
    pub mentions: u64,
}

impl IndexShare {
    /// Adds the share to `view`, which holds the conversation's own part (for a non-feed, its entry in
    /// `conversations`; without one the user is not a member and nothing is added): the totals change from what the
    /// own part contributes to what own part and share contribute together ([`Totals::of_member`], the fold's rule).
    pub fn add_to(&self, view: &mut UserView, conversation_id: &str) {
        let entry = view.conversations.get(conversation_id);
        if entry.is_none() && !self.feed {
            return;
        }
        let (unread, mentions) = entry.map_or((0, 0), |c| (c.unread, c.mentions));
        let (muted, feed, marked) = (self.muted, self.feed, entry.is_some_and(|c| c.marked_unread));
        let before = Totals::of_member(unread, mentions, muted, feed, marked);
        let after = Totals::of_member(unread + self.unread, mentions + self.mentions, muted, feed, marked);
        Totals::replace_in(view, before, after);
        if let Some(c) = view.conversations.get_mut(conversation_id) {
            (c.unread, c.mentions) = (unread + self.unread, mentions + self.mentions);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hysteresis_between_the_threshold_and_its_half() {
        let d = Diffusion::from_threshold(10);
        assert!(!d.to_read(9) && d.to_read(10));
        assert!(!d.to_write(5) && d.to_write(4));
        assert!(!Diffusion::OFF.to_read(usize::MAX) && Diffusion::OFF.to_write(usize::MAX));
        assert_eq!(Diffusion::from_threshold(0), Diffusion::OFF);
    }

    #[test]
    fn counts_take_live_seqs_above_lo_and_live_named_mentions_once() {
        let index = ConvIndex {
            since: 10,
            live: [11, 12, 13, 15].into_iter().collect(),
            mention_all: [12].into_iter().collect(),
        };
        let named: SeqSet = [12, 13, 14, 15].into_iter().collect(); // 12 is also mention_all, 14 was recalled
        assert_eq!(index.counts(10, &named), (4, 3));
        assert_eq!(index.counts(13, &named), (1, 1));
        assert_eq!(index.counts(15, &SeqSet::new()), (0, 0));
    }
}
