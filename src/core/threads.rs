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
//! set a state per (member, thread) took ten times the memory of everything else, and a list of pending replies per
//! member still 235 MiB of 614. So the pending replies are kept once per conversation for every user of a fold, in
//! [`Replies`]: a member was delivered every reply above the head at its latest join, so its pending replies are
//! those of [`Replies`] above that head, of the threads not its own.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::core::delta::{DeltaOp, ThreadRun};
use crate::core::expiry::Buckets;
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
    pub expiry: Buckets,
}

impl ThreadState {
    /// The thread's cursor for a member who joined at head `joined`: nothing at or below it is unread.
    pub fn cursor(&self, joined: u64) -> u64 {
        self.floor.max(joined)
    }

    /// (unread, mentions) at UTC day `today`: what has expired by then counts nowhere.
    pub fn counts_at(&self, today: i64) -> (u64, u64) {
        let (mut unread, mut mentions) = (self.unread.len(), self.mentions.len());
        for bucket in self.expiry.expired_at(today).map(|(_, b)| b) {
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
        self.expiry.drop_empty();
    }

    /// Adds the buckets' seqs this thread holds.
    fn add_expiry(&mut self, expiry: &[(i64, SeqSet)]) {
        for (day, seqs) in expiry {
            let held = seqs.intersection(&self.unread);
            if !held.is_empty() {
                self.expiry.bucket(*day).union_above(&held, 0);
            }
        }
    }
}

/// A reply of a thread that is not a user's yet ([`Replies`]): countable, not recalled. In a checkpoint row, one of
/// a user's pending replies (of someone else, above the head at the user's join).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The reply.
    pub seq: u64,
    /// Its thread's root.
    pub root: u64,
    /// The UTC day it expires on, [`NO_EXPIRY`] for never.
    pub day: i64,
    /// It mentions the user (`mention_all`: a reply naming a user makes the thread the user's).
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
    /// The unread replies of the other threads, ascending by seq, as a checkpoint row carries them: a [`Replies`]
    /// takes them in when a fold restores the user (`crate::core::fold::Fold::restore`), so in a fold it is always
    /// empty and no op reads it.
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
    /// replies count nowhere. `share`: the conversation's [`Replies`] while the user is a member and it is no feed
    /// (a run of a thread not the user's goes there), else `None`.
    pub fn apply_run(
        &mut self,
        root: u64,
        run: &ThreadRun,
        (joined, count): (Option<u64>, bool),
        authored: &SeqSet,
        expiry: &[(i64, SeqSet)],
        share: Option<&mut Replies>,
    ) {
        let theirs = run.read_to > 0 || authored.contains(root) || self.named_in.contains(root);
        if !theirs && !self.by_root.contains_key(&root) {
            if let (Some(joined), true, Some(share)) = (joined, count, share) {
                share.add(root, run, joined, expiry);
            }
            return;
        }
        let thread = self.materialize(root, joined, share.as_deref());
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

    /// `thread.read` of `root` up to `read_seq`, whenever it arrives. `share`: as for [`Threads::apply_run`].
    pub fn read(&mut self, root: u64, read_seq: u64, joined: Option<u64>, share: Option<&Replies>) {
        let thread = self.materialize(root, joined, share);
        thread.floor = thread.floor.max(read_seq);
        thread.drop_read(joined.unwrap_or(0));
        self.forget_if_empty(root);
    }

    /// `thread.followed` of `root`. `share`: as for [`Threads::apply_run`].
    pub fn follow(&mut self, root: u64, followed: bool, joined: Option<u64>, share: Option<&Replies>) {
        self.materialize(root, joined, share).follow = Some(followed);
    }

    /// Seqs that name the user, and the roots of the threads of the replies among them. `share`: as for
    /// [`Threads::apply_run`].
    pub fn named(&mut self, seqs: &SeqSet, roots: &[u64], joined: Option<u64>, share: Option<&Replies>) {
        self.named_in.union_above(seqs, 0);
        for root in roots {
            self.materialize(*root, joined, share).involved = true;
        }
    }

    /// Forgets every unread reply (a join, a leave, the conversation became a feed); cursors, choices and
    /// involvement stay.
    pub fn clear_unread(&mut self) {
        for thread in self.by_root.values_mut() {
            (thread.unread, thread.mentions, thread.expiry) = Default::default();
        }
        self.by_root.retain(|_, t| !t.is_empty());
    }

    /// These seqs were recalled: they stop counting (the fold takes them out of the conversation's [`Replies`]).
    pub fn recalled(&mut self, seqs: &SeqSet) {
        for thread in self.by_root.values_mut() {
            if thread.unread.remove_all(seqs) > 0 {
                thread.mentions.remove_all(seqs);
                thread.prune_expiry();
            }
        }
    }

    /// Expiry buckets for seqs sent before the conversation's creation gave its ttl (the fold gives them to the
    /// conversation's [`Replies`]).
    pub fn add_expiry(&mut self, expiry: &[(i64, SeqSet)]) {
        self.by_root.values_mut().for_each(|t| t.add_expiry(expiry));
    }

    /// The thread of `root` as the user's: its state, created if need be with the thread's pending replies taken
    /// in: those of `share` above its cursor, for a member who joined at head `joined`.
    fn materialize(&mut self, root: u64, joined: Option<u64>, share: Option<&Replies>) -> &mut ThreadState {
        let fresh = !self.by_root.contains_key(&root);
        let thread = self.by_root.entry(root).or_default();
        let cursor = thread.cursor(joined.unwrap_or(0));
        for p in share.filter(|_| fresh).into_iter().flat_map(|share| share.thread(root, cursor)) {
            thread.unread.insert(p.seq);
            if p.mention {
                thread.mentions.insert(p.seq);
            }
            if p.day != NO_EXPIRY {
                thread.expiry.bucket(p.day).insert(p.seq);
            }
        }
        thread
    }

    fn forget_if_empty(&mut self, root: u64) {
        if self.by_root.get(&root).is_some_and(ThreadState::is_empty) {
            self.by_root.remove(&root);
        }
    }
}

/// The replies of one conversation's threads that a fold was delivered for a user whose thread they were not yet
/// ([`Threads`]), kept once for every user of the fold: countable, not recalled, with their expiry day and whether
/// they mention everyone. A member of the conversation since head J was delivered every reply above J, so its
/// pending replies are those above J of the threads it has no state for. A reply another user's delta brought
/// before the member's own is taken early and its own delta adds it again, a set union: order does not matter.
///
/// A fold partition's checkpoint keeps a read-diffused conversation's replies in rows of their own, one per chunk of
/// [`CHUNK`] seqs ([`Replies::keep_rows`]), so that a commit writes the chunks that changed, not every reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replies {
    /// Every reply, by seq.
    by_seq: BTreeMap<u64, Pending>,
    /// The seqs of `by_seq` per root.
    by_root: BTreeMap<u64, SeqSet>,
    /// While the replies have checkpoint rows: the chunks changed since [`Replies::take_changed_chunks`].
    rows: Option<BTreeSet<u64>>,
}

/// Seqs per checkpoint row of [`Replies`]: chunk `k` holds the replies with `k * CHUNK <= seq < (k + 1) * CHUNK`.
pub const CHUNK: u64 = 4096;

impl Replies {
    /// Keeps a reply; one already kept stays as it is.
    pub fn insert(&mut self, reply: Pending) {
        if let std::collections::btree_map::Entry::Vacant(at) = self.by_seq.entry(reply.seq) {
            at.insert(reply);
            self.by_root.entry(reply.root).or_default().insert(reply.seq);
            self.changed(reply.seq);
        }
    }

    /// From now on the replies have checkpoint rows: every chunk a later change touches is changed (to be written),
    /// and so, when `written` is false, is every chunk held now (none is written yet; true: they were loaded from
    /// their rows). Nothing changes when they already have rows.
    pub fn keep_rows(&mut self, written: bool) {
        if self.rows.is_none() {
            let held = self.by_seq.keys().map(|seq| seq / CHUNK).filter(|_| !written);
            self.rows = Some(held.collect());
        }
    }

    /// Whether the replies have checkpoint rows.
    pub fn has_rows(&self) -> bool {
        self.rows.is_some()
    }

    /// The chunks changed since the last call (none without rows), ascending: each is written whole, or deleted
    /// when it holds no reply ([`Replies::chunk`]).
    pub fn take_changed_chunks(&mut self) -> Vec<u64> {
        self.rows.as_mut().map(|changed| std::mem::take(changed).into_iter().collect()).unwrap_or_default()
    }

    /// Marks every chunk held changed, when the replies have rows (a replay seeded from a snapshot writes all).
    pub fn mark_all_changed(&mut self) {
        if let Some(changed) = &mut self.rows {
            changed.extend(self.by_seq.keys().map(|seq| seq / CHUNK));
        }
    }

    /// The replies of chunk `chunk`, ascending by seq: one checkpoint row.
    pub fn chunk(&self, chunk: u64) -> impl Iterator<Item = &Pending> + '_ {
        self.by_seq.range(chunk * CHUNK..(chunk + 1).saturating_mul(CHUNK)).map(|(_, reply)| reply)
    }

    fn changed(&mut self, seq: u64) {
        if let Some(changed) = &mut self.rows {
            changed.insert(seq / CHUNK);
        }
    }

    /// A run's replies of the thread of `root` above `joined`: for a member whose thread it is not, its `mentions`
    /// among them mention everyone (a reply naming the member made the thread the member's first); in a delta for
    /// every member (`joined` 0), the run's `mentions` are those mentioning everyone.
    pub fn add(&mut self, root: u64, run: &ThreadRun, joined: u64, expiry: &[(i64, SeqSet)]) {
        for seq in run.unread.iter().filter(|seq| *seq > joined) {
            if self.by_seq.contains_key(&seq) {
                continue;
            }
            let day = expiry.iter().find(|(_, seqs)| seqs.contains(seq)).map_or(NO_EXPIRY, |(day, _)| *day);
            self.insert(Pending { seq, root, day, mention: run.mentions.contains(seq) });
        }
    }

    /// What a delta's op changes of the conversation's replies, whichever member's delta it came in: a recall
    /// forgets them, a creation's ttl gives them expiry days.
    pub fn apply(&mut self, op: &DeltaOp) {
        match op {
            DeltaOp::Recalled { seqs } => self.recalled(seqs),
            DeltaOp::Expiry { expiry } => self.add_expiry(expiry),
            _ => {}
        }
    }

    /// These seqs were recalled: they are forgotten.
    fn recalled(&mut self, seqs: &SeqSet) {
        for seq in seqs.iter() {
            let Some(reply) = self.by_seq.remove(&seq) else { continue };
            self.changed(seq);
            if let Some(of_root) = self.by_root.get_mut(&reply.root) {
                of_root.remove(seq);
                if of_root.is_empty() {
                    self.by_root.remove(&reply.root);
                }
            }
        }
    }

    /// Expiry buckets for replies sent before the conversation's creation gave its ttl.
    fn add_expiry(&mut self, expiry: &[(i64, SeqSet)]) {
        for (day, seqs) in expiry {
            for seq in seqs.iter() {
                if let Some(reply) = self.by_seq.get_mut(&seq).filter(|reply| reply.day != *day) {
                    reply.day = *day;
                    self.changed(seq);
                }
            }
        }
    }

    /// The replies of the thread of `root` above `above`, ascending.
    fn thread(&self, root: u64, above: u64) -> impl Iterator<Item = &Pending> + '_ {
        let seqs = self.by_root.get(&root).into_iter().flat_map(move |seqs| seqs.iter().filter(move |s| *s > above));
        seqs.filter_map(|seq| self.by_seq.get(&seq))
    }

    /// A member's pending replies, as its checkpoint row carries them: those above `joined` of the threads
    /// `threads` has no state for, ascending by seq.
    pub fn pending_of<'a>(&'a self, threads: &'a Threads, joined: u64) -> impl Iterator<Item = Pending> + 'a {
        let above = self.by_seq.range(joined.saturating_add(1)..).map(|(_, reply)| *reply);
        above.filter(move |reply| !threads.by_root.contains_key(&reply.root))
    }
}

#[cfg(test)]
mod tests {
    use crate::core::broadcast::NoLists;
    use crate::core::contract::{ThreadFollowed, UserEvent};
    use crate::core::delta::{Delta, DeltaOp, ThreadRun};
    use crate::core::fold::Fold;
    use crate::core::seqset::SeqSet;

    fn delta(user: &str, ops: Vec<DeltaOp>) -> Delta {
        let (user_id, conversation_id) = (user.to_owned(), "c".into());
        Delta { user_id, conversation_id, ops, feed: false, source: None, team: None }
    }

    fn joined() -> DeltaOp {
        DeltaOp::Joined { head: 1, reactions: 0 }
    }

    /// Replies 2 and 3 of others in the thread of root 1 (3 mentions everyone).
    fn replies() -> DeltaOp {
        let (unread, mentions) = (SeqSet::from_iter([2, 3]), SeqSet::from_iter([3]));
        let run = ThreadRun { unread, mentions, read_to: 0 };
        let (unread, mentions, own) = (SeqSet::new(), SeqSet::new(), SeqSet::new());
        DeltaOp::Messages { unread, mentions, read_to: 0, expiry: vec![], own, threads: [(1, run)].into() }
    }

    fn follows(user: &str) -> UserEvent {
        UserEvent::ThreadFollowed(ThreadFollowed {
            event_id: format!("f-{user}"),
            occurred_at: "2026-11-28T00:00:00Z".to_owned(),
            user_id: user.to_owned(),
            conversation_id: "c".to_owned(),
            thread_root: 1,
            followed: true,
        })
    }

    /// (unread, mentions) of the thread of root 1 in `user`'s view.
    fn counts(fold: &Fold, user: &str) -> Option<(u64, u64)> {
        let view = fold.view(user, &NoLists);
        view.threads.get("c").and_then(|t| t.get(&1)).map(|t| (t.unread, t.mentions))
    }

    #[test]
    fn a_member_who_follows_later_counts_the_replies_kept_once_for_the_fold() {
        // u follows after its own delta: the replies come from the fold's shared replies.
        let mut fold = Fold::new();
        for user in ["u", "v"] {
            fold.apply_delta(&delta(user, vec![joined(), replies()]));
        }
        assert_eq!(counts(&fold, "u"), None, "nobody follows the thread yet");
        fold.apply_user_event(&follows("u"));
        assert_eq!(counts(&fold, "u"), Some((2, 1)));
        assert_eq!(counts(&fold, "v"), None);
        assert!(fold.user("u").unwrap().conversations()["c"].threads.pending.is_empty(), "nothing kept per member");
    }

    #[test]
    fn replies_taken_from_another_members_delta_before_ones_own_count_once() {
        // v's delta brought the replies; u follows before its own delta with them arrives.
        let mut fold = Fold::new();
        fold.apply_delta(&delta("u", vec![joined()]));
        fold.apply_delta(&delta("v", vec![joined(), replies()]));
        fold.apply_user_event(&follows("u"));
        assert_eq!(counts(&fold, "u"), Some((2, 1)), "taken early");
        fold.apply_delta(&delta("u", vec![replies()]));
        assert_eq!(counts(&fold, "u"), Some((2, 1)), "its own delta adds them again: a union");
        // A member who left (its Left not yet folded when it followed) ends with nothing.
        fold.apply_delta(&delta("u", vec![DeltaOp::Left]));
        assert_eq!(counts(&fold, "u"), None);
    }

    #[test]
    fn a_recalled_reply_leaves_the_shared_replies() {
        let mut fold = Fold::new();
        for user in ["u", "v"] {
            fold.apply_delta(&delta(user, vec![joined(), replies()]));
        }
        fold.apply_delta(&delta("v", vec![DeltaOp::Recalled { seqs: SeqSet::from_iter([3]) }]));
        fold.apply_user_event(&follows("u"));
        assert_eq!(counts(&fold, "u"), Some((1, 0)), "3 was recalled, though only v's delta has said so yet");
    }
}
