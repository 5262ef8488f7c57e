//! Contract v4's threads of one user in one conversation (`CONTRACT.md` § v4, "Threads"): the fold's side.
//!
//! Per thread root the user has a [`ThreadState`]: its cursor's floor (the largest `thread.read` and the user's
//! own highest reply, whenever they arrived), the last `thread.followed` if any, whether the user is involved
//! (sent a reply, or is named in one), and, while a member, the thread's unread replies above the cursor with the
//! mentions among them and their expiry buckets. Everything is a max or a set operation, as for a conversation, so
//! order and redelivery do not change the counts.
//!
//! Whether the user follows a thread is decided when it is counted ([`Threads::follows`]): the last
//! `thread.followed`, else involvement: the root or a reply sent by the user, or naming the user. Replies of a
//! thread the user does not follow are kept too, so that following it later counts them exactly: as
//! [`Threads::pending`], a flat sorted list of 24-byte entries (seq, root, expiry day, mention), until something
//! makes the thread the user's (a `thread.followed` or `thread.read`, a reply of the user's, a reply naming the
//! user), which moves them into the thread's [`ThreadState`]. Most members never touch most threads: on the v4 full
//! set a state per (member, thread) took ten times the memory of everything else.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::delta::ThreadRun;
use crate::core::seqset::SeqSet;

/// One user's state of one thread.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadState {
    /// max(every `read_seq` of `thread.read`, every reply the user sent in the thread): kept across leaving.
    #[serde(default)]
    pub floor: u64,
    /// The last `thread.followed` of the user for the thread, if any: it overrides involvement.
    #[serde(default)]
    pub follow: Option<bool>,
    /// The user sent a reply in the thread or is named in one (countable or not, recalled or not).
    #[serde(default)]
    pub involved: bool,
    /// Countable, not recalled replies of others above the cursor; empty while not a member.
    #[serde(default)]
    pub unread: SeqSet,
    /// The seqs of `unread` that mention the user.
    #[serde(default)]
    pub mentions: SeqSet,
    /// The seqs of `unread` by the UTC day they expire (v3's expiry applies to replies); no empty bucket.
    #[serde(default)]
    pub expiry: BTreeMap<i64, SeqSet>,
}

impl ThreadState {
    /// The thread's cursor for a member who joined at head `joined`: nothing at or below it is unread.
    pub fn cursor(&self, joined: u64) -> u64 {
        self.floor.max(joined)
    }

    /// (unread, mentions) at UTC day `today`: what has expired by then counts nowhere.
    pub fn counts_at(&self, today: i64) -> (u64, u64) {
        let (mut unread, mut mentions) = (self.unread.len(), self.mentions.len());
        for bucket in self.expiry.range(..=today).map(|(_, b)| b) {
            unread -= bucket.len();
            mentions -= bucket.intersection(&self.mentions).len();
        }
        (unread, mentions)
    }

    /// Nothing worth keeping: no cursor, no choice, no involvement, nothing unread.
    fn is_empty(&self) -> bool {
        self.floor == 0 && self.follow.is_none() && !self.involved && self.unread.is_empty()
    }

    /// Drops what is at or below the cursor, and the expiry of seqs no longer held.
    fn drop_read(&mut self, joined: u64) {
        let cursor = self.cursor(joined);
        self.unread.remove_through(cursor);
        self.mentions.remove_through(cursor);
        self.prune_expiry();
    }

    fn prune_expiry(&mut self) {
        for bucket in self.expiry.values_mut() {
            *bucket = bucket.intersection(&self.unread);
        }
        self.expiry.retain(|_, b| !b.is_empty());
    }

    /// Adds the buckets' seqs this thread holds.
    fn add_expiry(&mut self, expiry: &[(i64, SeqSet)]) {
        for (day, seqs) in expiry {
            let held = seqs.intersection(&self.unread);
            if !held.is_empty() {
                self.expiry.entry(*day).or_default().union_above(&held, 0);
            }
        }
    }
}

/// A reply of a thread that is not the user's yet ([`Threads::pending`]): countable, of someone else, above the
/// head at the user's join, not recalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The reply.
    pub seq: u64,
    /// Its thread's root.
    pub root: u64,
    /// The UTC day it expires on, [`NO_EXPIRY`] for never.
    pub day: i64,
    /// It mentions the user (by name or `mention_all`).
    pub mention: bool,
}

/// [`Pending::day`] of a reply that never expires.
pub const NO_EXPIRY: i64 = i64::MAX;

/// One user's threads in one conversation, by root seq, and the seqs that name the user there.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Threads {
    /// Per root seq, the threads that are the user's in some way (a choice, a cursor, involvement); only those can
    /// be followed.
    #[serde(default)]
    pub by_root: BTreeMap<u64, ThreadState>,
    /// The unread replies of the other threads, ascending by seq.
    #[serde(default)]
    pub pending: Vec<Pending>,
    /// Every seq of the conversation that names the user (countable or not, recalled or not): a root among them
    /// makes the user follow its thread.
    #[serde(default)]
    pub named_in: SeqSet,
}

impl Threads {
    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.by_root.is_empty() && self.named_in.is_empty() && self.pending.is_empty()
    }

    /// Whether the user follows the thread of `root` (`CONTRACT.md` § v4): the last `thread.followed`, else the
    /// user sent the root (`authored`) or a reply, or is named in the root or a reply.
    pub fn follows(&self, root: u64, thread: &ThreadState, authored: &SeqSet) -> bool {
        thread.follow.unwrap_or_else(|| thread.involved || authored.contains(root) || self.named_in.contains(root))
    }

    /// The followed threads with unread at UTC day `today`, ascending by root: (root, unread, mentions).
    pub fn unread_at<'a>(&'a self, authored: &'a SeqSet, today: i64) -> impl Iterator<Item = (u64, u64, u64)> + 'a {
        self.by_root
            .iter()
            .filter(|(_, t)| !t.unread.is_empty())
            .filter(move |(root, t)| self.follows(**root, t, authored))
            .map(move |(root, t)| {
                let (unread, mentions) = t.counts_at(today);
                (*root, unread, mentions)
            })
            .filter(|(_, unread, _)| *unread > 0)
    }

    /// (followed threads with unread, the sum of their mentions) at UTC day `today`.
    pub fn totals_at(&self, authored: &SeqSet, today: i64) -> (u64, u64) {
        self.unread_at(authored, today).fold((0, 0), |(n, m), (_, _, mentions)| (n + 1, m + mentions))
    }

    /// The user's cursor floor in the thread of `root` (0: none): what the receipts of its replies count (§ v4).
    pub fn floor(&self, root: u64) -> u64 {
        self.by_root.get(&root).map_or(0, |t| t.floor)
    }

    /// Every (root, floor) with a floor above 0, ascending by root.
    pub fn floors(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_root.iter().filter(|(_, t)| t.floor > 0).map(|(root, t)| (*root, t.floor))
    }

    /// Whether any thread holds expiry buckets (its counts depend on the day).
    pub fn expires(&self) -> bool {
        self.by_root.values().any(|t| !t.expiry.is_empty())
    }

    /// A run of replies of the thread of `root` (from a Messages op). `joined`: the head at the member's latest
    /// join, `None` for a non-member (only the cursor and involvement move). `count`: false in a feed, where
    /// replies count nowhere.
    pub fn apply_run(
        &mut self,
        root: u64,
        run: &ThreadRun,
        (joined, count): (Option<u64>, bool),
        authored: &SeqSet,
        expiry: &[(i64, SeqSet)],
    ) {
        let theirs = run.read_to > 0 || authored.contains(root) || self.named_in.contains(root);
        if !theirs && !self.by_root.contains_key(&root) {
            if let (Some(joined), true) = (joined, count) {
                self.add_pending(root, run, joined, expiry);
            }
            return;
        }
        let thread = self.materialize(root, joined);
        thread.floor = thread.floor.max(run.read_to);
        thread.involved |= run.read_to > 0;
        if let (Some(joined), true) = (joined, count) {
            thread.drop_read(joined);
            let cursor = thread.cursor(joined);
            thread.unread.union_above(&run.unread, cursor);
            for seq in run.mentions.iter().filter(|seq| thread.unread.contains(*seq)) {
                thread.mentions.insert(seq);
            }
            thread.add_expiry(expiry);
        }
        self.forget_if_empty(root);
    }

    /// `thread.read` of `root` up to `read_seq`, whenever it arrives.
    pub fn read(&mut self, root: u64, read_seq: u64, joined: Option<u64>) {
        let thread = self.materialize(root, joined);
        thread.floor = thread.floor.max(read_seq);
        thread.drop_read(joined.unwrap_or(0));
        self.forget_if_empty(root);
    }

    /// `thread.followed` of `root`.
    pub fn follow(&mut self, root: u64, followed: bool, joined: Option<u64>) {
        self.materialize(root, joined).follow = Some(followed);
    }

    /// Seqs that name the user, and the roots of the threads of the replies among them.
    pub fn named(&mut self, seqs: &SeqSet, roots: &[u64], joined: Option<u64>) {
        self.named_in.union_above(seqs, 0);
        for root in roots {
            self.materialize(*root, joined).involved = true;
        }
    }

    /// Forgets every unread reply (a join, a leave, the conversation became a feed); cursors, choices and
    /// involvement stay.
    pub fn clear_unread(&mut self) {
        self.pending.clear();
        for thread in self.by_root.values_mut() {
            (thread.unread, thread.mentions, thread.expiry) = Default::default();
        }
        self.by_root.retain(|_, t| !t.is_empty());
    }

    /// These seqs were recalled: they stop counting.
    pub fn recalled(&mut self, seqs: &SeqSet) {
        self.pending.retain(|p| !seqs.contains(p.seq));
        for thread in self.by_root.values_mut() {
            if thread.unread.remove_all(seqs) > 0 {
                thread.mentions.remove_all(seqs);
                thread.prune_expiry();
            }
        }
    }

    /// Expiry buckets for seqs sent before the conversation's creation gave its ttl.
    pub fn add_expiry(&mut self, expiry: &[(i64, SeqSet)]) {
        self.by_root.values_mut().for_each(|t| t.add_expiry(expiry));
        for p in &mut self.pending {
            if let Some((day, _)) = expiry.iter().find(|(_, seqs)| seqs.contains(p.seq)) {
                p.day = *day;
            }
        }
    }

    /// The thread of `root` as the user's: its state, created if need be with the pending replies of the thread
    /// moved in (above its cursor, for a member who joined at head `joined`).
    fn materialize(&mut self, root: u64, joined: Option<u64>) -> &mut ThreadState {
        let thread = self.by_root.entry(root).or_default();
        if self.pending.iter().any(|p| p.root == root) {
            let cursor = thread.cursor(joined.unwrap_or(0));
            for p in self.pending.iter().filter(|p| p.root == root && p.seq > cursor) {
                thread.unread.insert(p.seq);
                if p.mention {
                    thread.mentions.insert(p.seq);
                }
                if p.day != NO_EXPIRY {
                    thread.expiry.entry(p.day).or_default().insert(p.seq);
                }
            }
            self.pending.retain(|p| p.root != root);
        }
        thread
    }

    /// A run's replies of a thread that is not the user's, kept as pending (above the join head: no cursor of the
    /// thread exists).
    fn add_pending(&mut self, root: u64, run: &ThreadRun, joined: u64, expiry: &[(i64, SeqSet)]) {
        for seq in run.unread.iter().filter(|seq| *seq > joined) {
            let day = expiry.iter().find(|(_, seqs)| seqs.contains(seq)).map_or(NO_EXPIRY, |(day, _)| *day);
            let entry = Pending { seq, root, day, mention: run.mentions.contains(seq) };
            match self.pending.binary_search_by_key(&seq, |p| p.seq) {
                Ok(at) => self.pending[at] = entry,
                Err(at) => self.pending.insert(at, entry),
            }
        }
    }

    fn forget_if_empty(&mut self, root: u64) {
        if self.by_root.get(&root).is_some_and(ThreadState::is_empty) {
            self.by_root.remove(&root);
        }
    }
}
