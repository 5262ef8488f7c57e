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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::contract::UserView;
use crate::core::lists::ListOp;
use crate::core::seqset::SeqSet;
use crate::core::totals::Sums;

/// The default threshold: conversations with at least 1,000 members are read-diffused.
pub const DEFAULT_THRESHOLD: u64 = 1000;

/// The default member count from which a write-diffused conversation's replies and reactions go once to each fold,
/// in a delta for every member, instead of in every member's delta ([`Diffusion::shares`]). Below it a delta per
/// member costs less than one per partition of the delta topic.
pub const DEFAULT_SHARED_FROM: usize = 64;

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
    /// A write-diffused conversation with at least this many members sends its replies and reactions in a delta for
    /// every member ([`Diffusion::shares`]); [`DEFAULT_SHARED_FROM`] unless a test sets another.
    pub shared_from: usize,
}

impl Default for Diffusion {
    /// Read diffusion from [`DEFAULT_THRESHOLD`] members, back below half of it.
    fn default() -> Self {
        Self::from_threshold(DEFAULT_THRESHOLD)
    }
}

impl Diffusion {
    /// Write diffusion only.
    pub const OFF: Diffusion = Diffusion { threshold: None, back_below: 0, shared_from: DEFAULT_SHARED_FROM };

    /// Read diffusion from `threshold` members (0 turns it off), back below half of it.
    pub fn from_threshold(threshold: u64) -> Self {
        Self::with_band(threshold, threshold / 2)
    }

    /// Read diffusion from `threshold` members (0 turns it off), back below `back_below` (clamped to `threshold`).
    pub fn with_band(threshold: u64, back_below: u64) -> Self {
        let (threshold, back_below) = ((threshold > 0).then_some(threshold), back_below.min(threshold));
        Self { threshold, back_below, shared_from: DEFAULT_SHARED_FROM }
    }

    /// The same, with replies and reactions in a delta for every member from `members` members (0 and 1: always;
    /// `usize::MAX`: never). Every choice gives the same counts; it changes only what goes on the delta topic.
    pub fn with_shared_from(self, members: usize) -> Self {
        Self { shared_from: members, ..self }
    }

    /// The same, for a fan-out whose deltas all go to one fold (`unread fold`, the benchmarks' in-memory pipeline):
    /// a delta for every member reaches that fold once, so every write-diffused conversation's replies and
    /// reactions go in one ([`Diffusion::with_shared_from`] 1).
    pub fn for_one_fold(self) -> Self {
        self.with_shared_from(1)
    }

    /// Whether a write-diffused conversation with `members` members (at the end of a batch) sends the batch's
    /// replies and reactions once to each fold, which gives them to the members with a stake in them
    /// ([`crate::core::stakes::Stakes`]), instead of in each member's delta.
    pub fn shares(&self, members: usize) -> bool {
        members >= self.shared_from
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
/// fan-out (checkpointed with the conversation) and copied into Redis (two sorted sets and, with a ttl, a hash of
/// expiry buckets).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvIndex {
    /// The conversation's head when it switched: the index holds only seqs above it.
    pub since: u64,
    /// The countable, not recalled seqs above `since`.
    pub live: SeqSet,
    /// The seqs of `live` that mention everyone (`mention_all`).
    pub mention_all: SeqSet,
    /// v3, a conversation with `unread_ttl_days`: the seqs of `live` by the UTC day they expire
    /// ([`crate::core::expiry`]; `CONTRACT.md` § v3, "Expiry"). No empty bucket is kept.
    #[serde(default)]
    pub expiry: BTreeMap<i64, SeqSet>,
}

/// What a member's share of an index depends on besides the index ([`ConvIndex::counts`]).
#[derive(Debug, Clone, Copy)]
pub struct ShareQuery<'a> {
    /// Counting starts above this seq: `max(since, where the member's count starts)` ([`crate::core::fold::
    /// ConvState::index_from`]: the cursor, or lower with a mark "unread from here").
    pub lo: u64,
    /// The member's named mentions above `since` (counted while live).
    pub named: &'a SeqSet,
    /// The member's own seqs of this membership: never unread for their sender (§ v3, "unread from here").
    pub own: &'a SeqSet,
    /// The UTC day of the read ([`crate::core::expiry::NEVER`]: nothing expired).
    pub today: i64,
}

impl ConvIndex {
    /// An empty index from head `since`.
    pub fn new(since: u64) -> Self {
        Self { since, ..Self::default() }
    }

    /// An index of these seqs without expiry buckets (a row from before contract v3).
    pub fn from_sets(since: u64, live: SeqSet, mention_all: SeqSet) -> Self {
        Self { since, live, mention_all, expiry: BTreeMap::new() }
    }

    /// Adds a countable message above `since` (`mention_all`: it mentions everyone; `expires`: the day it expires,
    /// with a ttl); returns the projection's ops.
    pub fn add(&mut self, seq: u64, mention_all: bool, expires: Option<i64>) -> Vec<ListOp> {
        self.live.insert(seq);
        let mut ops = match mention_all {
            true => {
                self.mention_all.insert(seq);
                vec![ListOp::AddMention(seq)]
            }
            false => vec![ListOp::Add(seq)],
        };
        if let Some(day) = expires {
            let bucket = self.expiry.entry(day).or_default();
            bucket.insert(seq);
            ops.push(ListOp::Expiring { day, seqs: bucket.clone() });
        }
        ops
    }

    /// Removes a recalled message above `since`; returns the projection's ops.
    pub fn remove(&mut self, seq: u64) -> Vec<ListOp> {
        self.live.remove(seq);
        self.mention_all.remove(seq);
        let mut ops = vec![ListOp::Remove(seq)];
        if let Some((&day, bucket)) = self.expiry.iter_mut().find(|(_, b)| b.contains(seq)) {
            bucket.remove(seq);
            ops.push(ListOp::Expiring { day, seqs: bucket.clone() });
            self.expiry.retain(|_, b| !b.is_empty());
        }
        ops
    }

    /// A ttl given by a creation that came after some messages: these seqs (those still live) expire on these
    /// days. Returns the projection's ops.
    pub fn retag(&mut self, expiry: &[(i64, SeqSet)]) -> Vec<ListOp> {
        let mut ops = Vec::new();
        for (day, seqs) in expiry {
            let held = seqs.intersection(&self.live);
            if !held.is_empty() {
                let bucket = self.expiry.entry(*day).or_default();
                bucket.union_above(&held, 0);
                ops.push(ListOp::Expiring { day: *day, seqs: bucket.clone() });
            }
        }
        ops
    }

    /// The ops that rebuild the index from empty (for a projection that lost it).
    pub fn whole_ops(&self) -> Vec<ListOp> {
        let op = |s: u64| if self.mention_all.contains(s) { ListOp::AddMention(s) } else { ListOp::Add(s) };
        let buckets = self.expiry.iter().map(|(day, seqs)| ListOp::Expiring { day: *day, seqs: seqs.clone() });
        self.live.iter().map(op).chain(buckets).collect()
    }

    /// The live seqs above `lo` expired at UTC day `today`.
    pub fn expired_above(&self, lo: u64, today: i64) -> SeqSet {
        let mut gone = SeqSet::new();
        for bucket in self.expiry.range(..=today).map(|(_, b)| b) {
            gone.union_above(bucket, lo);
        }
        gone
    }

    /// v4: the lowest seq [`ConvIndex::counts`] counts as unread for the query, `None` for none ("jump to the
    /// first unread", `CONTRACT.md` § v4).
    pub fn first(&self, q: &ShareQuery) -> Option<u64> {
        let gone = self.expired_above(q.lo, q.today);
        self.live.slice(q.lo, u64::MAX).iter().find(|s| !gone.contains(*s) && !q.own.contains(*s))
    }

    /// A member's share of the index: (unread, mentions) of the live seqs above `q.lo` that have not expired at
    /// `q.today` and are not the member's own; the mentions being the `mention_all` ones plus the member's `named`
    /// mentions among them.
    pub fn counts(&self, q: &ShareQuery) -> (u64, u64) {
        let gone = self.expired_above(q.lo, q.today);
        let live = |s: u64| self.live.contains(s) && !gone.contains(s);
        let counted = |s: u64| live(s) && !q.own.contains(s);
        let own: Vec<u64> = q.own.slice(q.lo, u64::MAX).iter().filter(|s| live(*s)).collect();
        let own_all = own.iter().filter(|s| self.mention_all.contains(**s)).count() as u64;
        let unread = self.live.count_above(q.lo) - gone.len() - own.len() as u64;
        let all = self.mention_all.count_above(q.lo) - gone.intersection(&self.mention_all).len() - own_all;
        let named = q.named.slice(q.lo, u64::MAX);
        let named = named.iter().filter(|s| counted(*s) && !self.mention_all.contains(*s)).count() as u64;
        (unread, all + named)
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
    /// v4: the lowest of the index's seqs unread for the member ([`ConvIndex::first`]).
    pub first: Option<u64>,
}

impl IndexShare {
    /// Adds the share to `view`, which holds the conversation's own part (for a non-feed, its entry in
    /// `conversations`; without one the user is not a member and nothing is added): the totals change from what the
    /// own part contributes to what own part and share contribute together ([`Sums::of_member`], the fold's rule).
    pub fn add_to(&self, view: &mut UserView, conversation_id: &str) {
        let entry = view.conversations.get(conversation_id);
        if entry.is_none() && !self.feed {
            return;
        }
        let (unread, mentions) = entry.map_or((0, 0), |c| (c.unread, c.mentions));
        let (muted, feed, marked) = (self.muted, self.feed, entry.is_some_and(|c| c.marked_unread));
        let before = Sums::of_member(unread, mentions, muted, feed, marked);
        let after = Sums::of_member(unread + self.unread, mentions + self.mentions, muted, feed, marked);
        Sums::replace_in(view, before, after);
        if let Some(c) = view.conversations.get_mut(conversation_id) {
            (c.unread, c.mentions) = (unread + self.unread, mentions + self.mentions);
            // The member's own part holds seqs at or below the switch only: its first comes before the index's.
            c.first_unread = c.first_unread.or(self.first);
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
            expiry: BTreeMap::new(),
        };
        let named: SeqSet = [12, 13, 14, 15].into_iter().collect(); // 12 is also mention_all, 14 was recalled
        let none = SeqSet::new();
        let q = |lo, named| ShareQuery { lo, named, own: &none, today: crate::core::expiry::NEVER };
        assert_eq!(index.counts(&q(10, &named)), (4, 3));
        assert_eq!(index.counts(&q(13, &named)), (1, 1));
        assert_eq!(index.counts(&q(15, &none)), (0, 0));
    }

    #[test]
    fn counts_leave_out_expired_and_own_seqs() {
        let mut index = ConvIndex::new(10);
        index.add(11, false, Some(100));
        index.add(12, true, Some(100));
        index.add(13, false, Some(101));
        index.add(14, true, Some(101));
        let (named, own): (SeqSet, SeqSet) = ([11, 13].into_iter().collect(), [14].into_iter().collect());
        let q = |today| ShareQuery { lo: 10, named: &named, own: &own, today };
        assert_eq!(index.counts(&q(99)), (3, 3)); // 14 is the member's own
        assert_eq!(index.counts(&q(100)), (1, 1)); // 11 and 12 expired
        assert_eq!(index.counts(&q(101)), (0, 0));
        let ops = index.remove(13);
        assert_eq!(ops, vec![ListOp::Remove(13), ListOp::Expiring { day: 101, seqs: [14].into_iter().collect() }]);
        assert_eq!(index.counts(&q(99)), (2, 2));
    }
}
