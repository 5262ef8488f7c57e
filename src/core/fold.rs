//! The fold stage's pure logic: per-recipient [`Delta`]s and the user's own events → per-user unread state.
//!
//! Per (user, conversation) the state is a [`ConvState`]: the read floor (the highest `read_seq` acked and the
//! highest seq the user sent, whenever they arrived), the head at which the user last joined (while a member), the
//! unread seqs above the cursor as a [`SeqSet`], the mentioned seqs among them, and the mute flag. The cursor is
//! `max(floor, joined_at)` (`CONTRACT.md` § Semantics). Everything is a max or a set operation, so:
//! - an ack before or after the messages it covers gives the same state (messages at or below the cursor are never
//!   added, and raising the cursor drops them);
//! - applying any delta or event twice gives the same state, and so does re-applying a suffix of one
//!   conversation's deltas (a fan-out restarted from its checkpoint);
//! - the per-user [`Sums`] are kept incrementally from each conversation's contribution before and after a
//!   change, so they equal the sums in every state.
//!
//! In a read-diffused conversation ([`crate::core::hybrid`]) the user's [`ConvState`] holds only the unread seqs up
//! to the switch (`read_from`) and the named mentions above it; the rest of the count comes from the conversation's
//! index at read time, through [`Lists::index_counts`], in [`UserState::view`] (and, in the service, in Redis's read
//! script). The incremental [`Sums`] cover the user's own part; the view adds the index's.
//!
//! Conversations the user is not a member of are kept only while they carry information (a floor above 0 or a
//! mute), least recently touched evicted first beyond a bound per user: [`MAX_DETACHED_PER_USER`] of those the
//! fan-out has said something about (most of them left), and apart from them [`MAX_AWAITING_PER_USER`] that only
//! the user's own events made, whose join is still on its way ([`ConvState::awaiting`]). Kept apart, the second
//! kind never pushes out the first, so which entry goes does not depend on how the two inputs interleave until a
//! user has that many joins in flight.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::broadcast::{Lists, NoLists};
use crate::core::contract::{BroadcastView, ConversationView, NotificationView, ThreadView, UserEvent, UserView};
use crate::core::delta::{Delta, DeltaOp};
use crate::core::expiry::Buckets;
use crate::core::hybrid::{IndexShare, ShareQuery};
use crate::core::notifications::{NoteBook, Summary};
use crate::core::reactions::Reactions;
use crate::core::seqset::SeqSet;
use crate::core::stakes::Stakes;
use crate::core::threads::{Replies, Threads};
pub use crate::core::totals::Sums;
use crate::core::Map;

/// Per conversation, the replies of threads that are not yet a user's, kept once for every user of a fold
/// ([`Replies`]).
pub type SharedReplies = Map<String, Replies>;

/// Most conversations a user is not a member of, and that a delta has reached, whose floor and mute are kept (the
/// retention bound; docs/semantics.md, "Retention of conversations U is not a member of").
pub const MAX_DETACHED_PER_USER: usize = 1024;

/// Most conversations a user is not a member of that only the user's own events made ([`ConvState::awaiting`]),
/// kept apart from [`MAX_DETACHED_PER_USER`]: in a catch-up the fold can take a user's read acks, mutes and thread
/// follows long before the fan-out's joins arrive (the v4 full set's `ubottu` waits for up to 1,412), and an
/// entry evicted then would lose what the join needs.
pub const MAX_AWAITING_PER_USER: usize = 16_384;

/// One user's state in one conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvState {
    /// max(every `read_seq` acked, every seq the user sent): kept across leaving and rejoining.
    pub floor: u64,
    /// The conversation's head when the user last joined; `None` while not a member.
    pub joined_at: Option<u64>,
    /// The last `muted` value set (default false); kept across leaving and rejoining.
    pub muted: bool,
    /// Unread seqs, all above [`ConvState::cursor`]; empty while not a member.
    pub unread: SeqSet,
    /// The seqs of `unread` that mention the user.
    pub mentions: SeqSet,
    /// The user's op clock when this entry last changed (drives retention).
    pub touched: u64,
    /// The conversation is a feed (`CONTRACT.md` § v2, "Kind"): it counts in `feed_unread`, not in the chat
    /// totals. Only ever turns true (a kind is decided once, by the first `conversation.created`).
    pub feed: bool,
    /// While the conversation is read-diffused (and the user a member): the head at the switch. `unread` then
    /// holds only seqs at or below it; those above count from the conversation's index.
    #[serde(default)]
    pub read_from: Option<u64>,
    /// Read-diffused: the seqs above `read_from` and the cursor that mention the user by name (counted at read time
    /// while still in the index).
    #[serde(default)]
    pub named: SeqSet,
    /// v3: the conversation is marked unread, with its "unread from" seq if any (`CONTRACT.md` § v3, "Marked
    /// unread"). Kept across leaving and rejoining, like `muted`; a later read ack or unmark clears it.
    #[serde(default)]
    pub mark: Option<Mark>,
    /// v3: the read history of this membership, which "unread from here" counts again: the countable, not recalled
    /// seqs of others above the head at the latest join and at or below the cursor. Empty for a feed.
    #[serde(default)]
    pub read: SeqSet,
    /// v3: the seqs of `read` that mention the user.
    #[serde(default)]
    pub read_mentions: SeqSet,
    /// v3, conversations with a ttl: the seqs of `unread` and `read` by the UTC day they expire
    /// ([`crate::core::expiry`]): at day D, the buckets up to D no longer count. Empty buckets are not kept.
    #[serde(default)]
    pub expiry: Buckets,
    /// v3: the seqs the user sent during this membership, not recalled (countable or not): the messages whose read
    /// receipts leave the user out ([`crate::core::receipts`]). Empty for a non-member.
    #[serde(default)]
    pub own: SeqSet,
    /// v4: every seq the user sent here (main timeline or reply, countable or not, recalled or not, in any
    /// membership): the messages whose reactions are the user's, and roots whose threads the user follows.
    #[serde(default)]
    pub authored: SeqSet,
    /// v4: the user's threads here (`CONTRACT.md` § v4, "Threads").
    #[serde(default)]
    pub threads: Threads,
    /// v4: the reactions to the user's messages here (§ v4, "Reactions").
    #[serde(default)]
    pub reactions: Reactions,
    /// v4: the conversation's team (§ v4, "Teams"), from the deltas.
    #[serde(default)]
    pub team: Option<String>,
    /// No delta has reached this entry yet: only the user's own events made it (a read ack, a mute, a thread
    /// follow ahead of the join the fan-out has not delivered yet). A delta clears it. Such entries are retained
    /// under [`MAX_AWAITING_PER_USER`], not [`MAX_DETACHED_PER_USER`].
    #[serde(default)]
    pub awaiting: bool,
    /// What the conversation added to the user's totals after the last change the fold made to it, so that the
    /// next change need not compute it again. Not part of the state's value: a state loaded from its checkpoint
    /// has none, and two states are equal whatever they hold here.
    #[serde(skip)]
    pub part: Part,
}

/// A conversation's part of its user's totals as the fold last computed it, if it did (see [`ConvState::part`]):
/// only the fold reads or sets it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Part(Option<Sums>);

impl PartialEq for Part {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Part {}

/// What the read receipts of one conversation (`CONTRACT.md` § v3) have not heard yet of the user: the changes of
/// its [`ConvState::own`] (the conversation side's senders follow them) and whether its membership changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnChange {
    /// Seqs the user sent as a member.
    pub added: SeqSet,
    /// Seqs no longer the user's as a member (the membership ended, or a recall).
    pub removed: SeqSet,
    /// The user's [`ConvState::receipt_entry`] there changed (joined, left, or the cursor moved): the receipts'
    /// join and cursor entries must be written. A message received leaves it unchanged, so most writes skip them.
    pub membership: bool,
    /// v4: the roots of the threads whose cursor floor may have risen (a `thread.read`, a reply the user sent):
    /// the receipts of replies (§ v4) count thread cursors.
    pub threads: std::collections::BTreeSet<u64>,
}

/// A conversation marked unread (`CONTRACT.md` § v3): `from_seq` S makes unread count as if the user's cursor were
/// `max(head at join, min(cursor, S - 1))`; without it the mark only makes the conversation count as unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// "Unread from this message" (1..=2^53), if given.
    pub from_seq: Option<u64>,
}

impl ConvState {
    /// Whether the user is a member.
    pub fn is_member(&self) -> bool {
        self.joined_at.is_some()
    }

    /// v4: the conversation's team as its latest delta names it (§ v4, "Teams"); a delta naming none leaves it.
    fn set_team(&mut self, team: Option<&str>) {
        if let Some(team) = team.filter(|t| self.team.as_deref() != Some(*t)) {
            self.team = Some(team.to_owned());
        }
    }

    /// These seqs were recalled: they stop counting anywhere in the conversation, threads included.
    fn recalled(&mut self, seqs: &SeqSet) {
        let sets = [&mut self.unread, &mut self.mentions, &mut self.named, &mut self.read, &mut self.read_mentions];
        for set in sets.into_iter().chain([&mut self.own]) {
            set.remove_all(seqs);
        }
        self.prune_expiry();
        self.threads.recalled(seqs);
    }

    /// The conversation became read-diffused at head `since`: a member keeps only the seqs at or below it (those
    /// above count from the index) and the named mentions above it.
    fn read_diffused_from(&mut self, since: u64) {
        if self.is_member() {
            self.read_from = Some(since);
            (self.unread, self.mentions) = (self.unread.slice(0, since), self.mentions.slice(0, since));
            self.named = self.named.slice(since, u64::MAX);
            self.prune_expiry();
        }
    }

    /// Whether the fold keeps the user's [`Stakes`] here: in any conversation that is no feed, whose replies and
    /// reactions may come in deltas for every member (read-diffused, or large:
    /// [`crate::core::hybrid::Diffusion::shares`]).
    pub fn keeps_stakes(&self) -> bool {
        !self.feed
    }

    /// v4: every seq that may root a thread the user follows (`CONTRACT.md` § v4): those it sent, those naming it,
    /// and its threads' roots ([`Stakes`]).
    pub fn stakes(&self) -> impl Iterator<Item = u64> + '_ {
        let roots = self.threads.by_root.keys().copied();
        self.authored.iter().chain(self.threads.named_in.iter()).chain(roots)
    }

    /// Whether the user's threads here take replies from the conversation's [`Replies`]: a member of a
    /// conversation that is no feed (a feed's replies count nowhere).
    pub fn takes_replies(&self) -> bool {
        self.is_member() && !self.feed
    }

    /// The read cursor: max(head at the latest join, floor); nothing at or below it is unread.
    pub fn cursor(&self) -> u64 {
        self.floor.max(self.joined_at.unwrap_or(0))
    }

    /// What the conversation's read receipts hold of the user: (head at the latest join, cursor) while a member,
    /// `None` otherwise.
    pub fn receipt_entry(&self) -> Option<(u64, u64)> {
        self.is_member().then(|| (self.joined_at.unwrap_or(0), self.cursor()))
    }

    /// The retention bound a non-member entry counts under; `None` for a member's.
    fn held(&self) -> Option<Held> {
        match (self.is_member(), self.awaiting) {
            (true, _) => None,
            (false, true) => Some(Held::Awaiting),
            (false, false) => Some(Held::Detached),
        }
    }

    /// A non-member entry with nothing worth keeping.
    fn is_empty_detached(&self) -> bool {
        !self.is_member()
            && self.floor == 0
            && !self.muted
            && self.mark.is_none()
            && self.authored.is_empty()
            && self.threads.is_empty()
            && self.reactions.is_empty()
    }

    /// Whether the conversation shows as marked unread (never a feed's: § v3, "On a feed conversation the flag
    /// changes nothing").
    pub fn is_marked(&self) -> bool {
        self.mark.is_some() && !self.feed
    }

    /// Where counting starts: the cursor or, marked unread from S, `max(head at join, min(cursor, S - 1))`.
    pub fn count_from(&self) -> u64 {
        let cursor = self.cursor();
        match self.mark {
            Some(Mark { from_seq: Some(s) }) if !self.feed => self.joined_at.unwrap_or(0).max(cursor.min(s - 1)),
            _ => cursor,
        }
    }

    /// This member's (unread, mentions), marks applied, nothing expired.
    pub fn counts(&self) -> (u64, u64) {
        let from = self.count_from();
        (self.unread.len() + self.read.count_above(from), self.mentions.len() + self.read_mentions.count_above(from))
    }

    /// Of [`ConvState::counts`], the (unread, mentions) that have expired at UTC day `today`.
    pub fn expired(&self, today: i64) -> (u64, u64) {
        let buckets = self.bucket_counts(self.expiry.expired_at(today));
        buckets.fold((0, 0), |(u, m), (_, bu, bm)| (u + bu, m + bm))
    }

    /// Per expiry bucket, ascending by day: (day, unread, mentions) of [`ConvState::counts`] that expire that day
    /// (what the projection stores, `e:` fields).
    pub fn expiry_counts(&self) -> Vec<(i64, u64, u64)> {
        self.bucket_counts(self.expiry.iter()).filter(|(_, u, _)| *u > 0).collect()
    }

    /// Each of `buckets` as (day, unread, mentions): its seqs that [`ConvState::counts`] counts.
    fn bucket_counts<'a>(
        &'a self,
        buckets: impl Iterator<Item = (&'a i64, &'a SeqSet)> + 'a,
    ) -> impl Iterator<Item = (i64, u64, u64)> + 'a {
        let from = self.count_from();
        buckets.map(move |(day, bucket)| {
            let mentions =
                bucket.intersection(&self.mentions).len() + bucket.intersection(&self.read_mentions).count_above(from);
            (*day, bucket.count_above(from), mentions)
        })
    }

    /// What the conversation adds to the totals with these (unread, mentions), its threads at UTC day `today`:
    /// nothing for a non-member.
    fn contribution_of(&self, (unread, mentions): (u64, u64), today: i64) -> Sums {
        if !self.is_member() {
            return Sums::default();
        }
        let sums = self.contribution_of_main((unread, mentions));
        match self.feed {
            true => sums,
            false => sums.with_v4(self.threads.totals_at(&self.authored, today), self.muted, self.reactions.count()),
        }
    }

    /// A member's part without the v4 counters, with these (unread, mentions).
    fn contribution_of_main(&self, (unread, mentions): (u64, u64)) -> Sums {
        Sums::of_member(unread, mentions, self.muted, self.feed, self.is_marked())
    }

    /// What the conversation adds to the incremental totals (nothing expired).
    fn contribution(&self) -> Sums {
        self.contribution_of(self.counts(), crate::core::expiry::NEVER)
    }

    /// [`ConvState::contribution`] after a change that left the user's threads, reactions, mute, kind and
    /// membership here as they were, given the contribution `before` it: the v4 counters are `before`'s, so only
    /// the conversation's own counts are walked.
    fn contribution_after_main(&self, before: Sums) -> Sums {
        match self.is_member() && !self.feed && before.memberships == 1 {
            true => self.contribution_of_main(self.counts()).with_v4_of(before),
            false => self.contribution(),
        }
    }

    /// The reader shape of this member conversation with these (unread, mentions), at UTC day `today`.
    fn view(&self, (unread, mentions): (u64, u64), today: i64) -> ConversationView {
        let (muted, marked_unread) = (self.muted, self.is_marked());
        let (first_unread, reactions) = (self.first_unread(today), self.reactions.count());
        ConversationView { unread, mentions, muted, marked_unread, first_unread, reactions }
    }

    /// Whether some of what the conversation counts expires (its counts depend on the day).
    fn expires(&self) -> bool {
        !self.expiry.is_empty() || self.threads.expires()
    }

    /// v4: the lowest seq counted in `unread` at UTC day `today` (marks applied), `None` when nothing is
    /// (`CONTRACT.md` § v4, "First unread"). A read-diffused conversation's index may hold a lower one.
    pub fn first_unread(&self, today: i64) -> Option<u64> {
        self.first_counted_outside(self.expiry.expired_at(today).map(|(_, bucket)| bucket))
    }

    /// The lowest seq `unread` counts (marks applied, nothing expired) that is in `seqs`, `None` for none.
    pub fn first_counted_in(&self, seqs: &SeqSet) -> Option<u64> {
        self.first_counted(|set, above| set.first_in(seqs, above))
    }

    /// The lowest seq `unread` counts (marks applied, nothing expired) that is in none of `buckets` (expiry
    /// buckets), `None` for none.
    pub fn first_counted_outside<'a>(&self, buckets: impl Iterator<Item = &'a SeqSet>) -> Option<u64> {
        let mut outside = SeqSet::new();
        for bucket in buckets {
            outside.union_above(bucket, 0);
        }
        self.first_counted(|set, above| set.first_not_in(&outside, above))
    }

    /// `first(set, above)` over what `unread` counts in ascending order, range by range: the read history above
    /// where counting starts (all of it at or below the cursor), then the unread seqs (all above it).
    fn first_counted(&self, first: impl Fn(&SeqSet, u64) -> Option<u64>) -> Option<u64> {
        first(&self.read, self.count_from()).or_else(|| first(&self.unread, 0))
    }

    /// The cursor rose: unread at or below it becomes read history (a feed keeps none).
    fn drop_read(&mut self) {
        let cursor = self.cursor();
        if self.feed {
            self.unread.remove_through(cursor);
            self.mentions.remove_through(cursor);
            self.prune_expiry();
            self.named.remove_through(cursor);
        } else {
            self.unread.move_through(cursor, &mut self.read);
            self.mentions.move_through(cursor, &mut self.read_mentions);
        }
    }

    /// Forgets every seq of this membership (a join or a leave).
    fn clear_seqs(&mut self) {
        let sets = [&mut self.unread, &mut self.mentions, &mut self.named, &mut self.read, &mut self.read_mentions];
        for set in sets.into_iter().chain([&mut self.own]) {
            set.clear();
        }
        self.expiry.clear();
        self.threads.clear_unread();
    }

    /// Keeps in the expiry buckets only seqs still in `unread` or `read`, and no empty bucket.
    fn prune_expiry(&mut self) {
        if self.expiry.is_empty() {
            return;
        }
        let (unread, read) = (&self.unread, &self.read);
        for bucket in self.expiry.values_mut() {
            let mut kept = bucket.intersection(unread);
            kept.union_above(&bucket.intersection(read), 0);
            *bucket = kept;
        }
        self.expiry.drop_empty();
    }

    /// Adds the op's expiry buckets for the seqs now held.
    fn add_expiry(&mut self, expiry: &[(i64, SeqSet)]) {
        for (day, seqs) in expiry {
            let mut held = seqs.intersection(&self.unread);
            held.union_above(&seqs.intersection(&self.read), 0);
            if !held.is_empty() {
                self.expiry.bucket(*day).union_above(&held, 0);
            }
        }
    }

    /// Read-diffused and a member: where the index's share starts, `max(read_from, count_from)` (the cursor, or
    /// lower with a mark "unread from here", [`ConvState::count_from`]).
    pub fn index_from(&self) -> Option<u64> {
        self.read_from.filter(|_| self.is_member()).map(|since| since.max(self.count_from()))
    }

    /// Read-diffused: the seq above which the member keeps its named mentions of the index, the join head (the read
    /// history "unread from here" counts again), or the cursor in a feed (which keeps no read history).
    fn named_kept_above(&self) -> u64 {
        if self.feed {
            self.cursor()
        } else {
            self.joined_at.unwrap_or(0)
        }
    }

    /// Read-diffused and a member: what its share of the index depends on, at UTC day `today`.
    pub fn share_query(&self, today: i64) -> Option<ShareQuery<'_>> {
        let lo = self.index_from()?;
        Some(ShareQuery { lo, named: &self.named, own: &self.own, today })
    }

    /// Adds `unread` seqs and the `mentions` among them above the cursor; returns how many seqs became unread.
    /// Read-diffused, seqs above `read_from` are the index's and are not added; their `mentions` go to `named`,
    /// those at or below the cursor too (the read history "unread from here" counts again), but in a feed.
    fn add_messages(&mut self, unread: &SeqSet, mentions: &SeqSet) -> u64 {
        let cursor = self.cursor();
        let added = match self.read_from {
            Some(since) => self.unread.union_above(&unread.slice(0, since), cursor),
            None => self.unread.union_above(unread, cursor),
        };
        let kept_from = self.named_kept_above();
        for seq in mentions.iter() {
            if self.read_from.is_some_and(|since| seq > since) {
                if seq > kept_from {
                    self.named.insert(seq);
                }
            } else if seq > cursor && self.unread.contains(seq) {
                self.mentions.insert(seq);
            }
        }
        added
    }
}

impl ConvState {
    /// The conversation went back to write diffusion with these index seqs: those of others become unread above
    /// the cursor or read history below it, with their expiry. Returns how many seqs became unread.
    fn back_to_write_diffusion(&mut self, unread: &SeqSet, mentions: &SeqSet, expiry: &[(i64, SeqSet)]) -> u64 {
        if !self.is_member() {
            return 0;
        }
        let mut all_mentions = std::mem::take(&mut self.named);
        all_mentions.union_above(mentions, 0);
        let mut others = unread.clone();
        others.remove_all(&self.own);
        self.read_from = None;
        self.drop_read();
        if !self.feed {
            self.add_read_history(&others, &all_mentions, self.cursor());
        }
        let added = self.add_messages(&others, &all_mentions);
        self.add_expiry(expiry);
        added
    }

    /// Adds the seqs of `unread` (and `mentions` among them) above the join head and at or below `cursor` to the
    /// read history.
    fn add_read_history(&mut self, unread: &SeqSet, mentions: &SeqSet, cursor: u64) {
        let joined = self.joined_at.unwrap_or(0);
        self.read.union_above(&unread.slice(joined, cursor), joined);
        for seq in mentions.slice(joined, cursor).iter() {
            if self.read.contains(seq) {
                self.read_mentions.insert(seq);
            }
        }
    }
}

/// The read history lies above the join head and at or below the cursor (none for a non-member or a feed), its
/// mentions within it, and every expiry bucket within `unread` and `read`, none empty.
fn check_v3(id: &str, c: &ConvState) -> Result<(), String> {
    let (lo, hi) = (c.joined_at.unwrap_or(0), c.cursor());
    if (!c.is_member() || c.feed) && !c.read.is_empty() {
        return Err(format!("conversation {id:?}: read history kept while not a member or in a feed"));
    }
    if c.read.min().is_some_and(|m| m <= lo) || c.read.max().is_some_and(|m| m > hi) {
        return Err(format!("conversation {id:?}: read history outside {lo}..={hi}"));
    }
    if c.read_mentions.iter().any(|m| !c.read.contains(m)) {
        return Err(format!("conversation {id:?}: a read mention that is not in the read history"));
    }
    for (day, bucket) in &c.expiry {
        let held = bucket.intersection(&c.unread).len() + bucket.intersection(&c.read).len();
        if bucket.is_empty() || held != bucket.len() {
            return Err(format!("conversation {id:?}: expiry bucket of day {day} empty or holding seqs not kept"));
        }
    }
    Ok(())
}

/// A non-member holds no read diffusion; a read-diffused member's unread seqs are at or below the switch and its
/// named mentions above both the switch and the cursor.
fn check_read_diffused(id: &str, c: &ConvState) -> Result<(), String> {
    if !c.is_member() && (c.read_from.is_some() || !c.named.is_empty()) {
        return Err(format!("conversation {id:?}: read diffusion kept while not a member"));
    }
    let Some(since) = c.read_from else {
        return match c.named.is_empty() {
            true => Ok(()),
            false => Err(format!("conversation {id:?}: named mentions while write-diffused")),
        };
    };
    if c.unread.max().is_some_and(|m| m > since) {
        return Err(format!("conversation {id:?}: unread above the switch at {since}"));
    }
    if c.named.min().is_some_and(|m| m <= since.max(c.named_kept_above())) {
        return Err(format!(
            "conversation {id:?}: a named mention at or below the switch, the join or (feed) the cursor"
        ));
    }
    Ok(())
}

/// A user's conversations by id, in no order (whatever reads them in order sorts them: the reader shape, the
/// checkpoint row, a read-all's acks). A hash map: a lookup hashes the id and compares it once, where a `BTreeMap` compared it with
/// five keys on average, each a load from another heap block (ids such as `ubuntu.2004-11-15_03` share their first
/// 16 bytes; docs/performance.md, "A user's conversations in a hash map"). Each state is boxed, so that a table
/// slot is a pointer and growing the table moves no `ConvState`.
pub type Conversations = crate::core::Map<Arc<str>, Box<ConvState>>;

/// A conversation's id as the fold gets it, from which a new entry's key is made: an id borrowed from an event is
/// copied; the id a delta shares with the other deltas of its batch ([`Delta::conversation_id`]) is shared, so that
/// the users of one conversation hold one copy of its id, not one each.
pub trait ConvKey {
    /// The id.
    fn id(&self) -> &str;
    /// The id as a map key.
    fn key(&self) -> Arc<str>;
}

impl ConvKey for str {
    fn id(&self) -> &str {
        self
    }

    fn key(&self) -> Arc<str> {
        Arc::from(self)
    }
}

impl ConvKey for Arc<str> {
    fn id(&self) -> &str {
        self
    }

    fn key(&self) -> Arc<str> {
        self.clone()
    }
}

/// One user's state: per-conversation [`ConvState`]s and the [`Sums`] over them, broadcast cursors, and the
/// notification [`Summary`]. Serializes for the user's checkpoint row; the remembered notifications
/// ([`NoteBook`]) are checkpointed apart, one row each, so that a flush writes what changed, not the history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserState {
    conversations: Conversations,
    totals: Sums,
    clock: u64,
    /// Non-member entries a delta has reached ([`MAX_DETACHED_PER_USER`]).
    detached: usize,
    /// Non-member entries only the user's own events made ([`MAX_AWAITING_PER_USER`]); counted again on load.
    #[serde(skip)]
    awaiting: usize,
    /// Broadcast list → the largest `read_seq` of the user's `broadcast.read` in it.
    broadcasts: BTreeMap<String, u64>,
    notifications: Summary,
    #[serde(skip)]
    notes: NoteBook,
    /// Per conversation, what changed in the user's own seqs since [`UserState::take_own_changes`].
    #[serde(skip)]
    own_changes: Pending,
}

/// What the projection has not heard yet of a user's own seqs: transient, so not part of the state's value (two
/// states equal whatever their pending changes, as a state loaded from its checkpoint has none).
#[derive(Debug, Clone, Default)]
struct Pending(BTreeMap<String, OwnChange>);

impl PartialEq for Pending {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Pending {}

/// Who changes a conversation's entry: the fan-out through a delta, or the user through one of its own events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Delta,
    User,
}

/// The retention bound a non-member entry counts under ([`ConvState::held`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// A delta reached it: [`MAX_DETACHED_PER_USER`].
    Detached,
    /// Only the user's own events made it: [`MAX_AWAITING_PER_USER`].
    Awaiting,
}

impl UserState {
    /// A state from its parts (a v1 checkpoint has no broadcasts and no notifications).
    pub(crate) fn from_parts(conversations: Conversations, totals: Sums, clock: u64, detached: usize) -> Self {
        let awaiting = conversations.values().filter(|c| c.held() == Some(Held::Awaiting)).count();
        Self { conversations, totals, clock, detached, awaiting, ..Self::default() }
    }

    /// A version-2 checkpoint's state: `self` with its broadcast cursors and notification summary.
    pub(crate) fn with_v2_parts(self, broadcasts: BTreeMap<String, u64>, notifications: Summary) -> Self {
        Self { broadcasts, notifications, ..self }
    }

    /// The user's op clock: ops applied so far (drives retention of detached conversations).
    pub(crate) fn clock(&self) -> u64 {
        self.clock
    }

    /// Conversations kept while the user is not a member (their floor or mute is remembered) that a delta has
    /// reached (the row stores the count; those awaiting their first delta are counted again on load).
    pub(crate) fn detached(&self) -> usize {
        self.detached
    }

    /// The totals, kept incrementally.
    pub fn totals(&self) -> Sums {
        self.totals
    }

    /// Every kept conversation (members and retained non-members), by id.
    pub fn conversations(&self) -> &Conversations {
        &self.conversations
    }

    /// Every broadcast list read, with the user's cursor in it.
    pub fn broadcasts(&self) -> &BTreeMap<String, u64> {
        &self.broadcasts
    }

    /// The notification counts per category.
    pub fn notification_summary(&self) -> &Summary {
        &self.notifications
    }

    /// What changed in the user's own seqs per conversation since the last call, taken (the projection writes
    /// it to the conversations' senders).
    pub fn take_own_changes(&mut self) -> BTreeMap<String, OwnChange> {
        std::mem::take(&mut self.own_changes.0)
    }

    /// The changes [`UserState::take_own_changes`] would take.
    pub fn own_changes(&self) -> &BTreeMap<String, OwnChange> {
        &self.own_changes.0
    }

    /// The receipts' entry of the user in `conversation_id` ([`ConvState::receipt_entry`]).
    fn receipt_entry(&self, conversation_id: &str) -> Option<(u64, u64)> {
        self.conversations.get(conversation_id).and_then(|c| c.receipt_entry())
    }

    /// Notes that the receipts must hear of the user's membership in `conversation_id` when its entry is no
    /// longer `before` ([`OwnChange::membership`]).
    fn note_membership(&mut self, conversation_id: &str, before: Option<(u64, u64)>) {
        if self.receipt_entry(conversation_id) != before {
            self.own_changes.0.entry(conversation_id.to_owned()).or_default().membership = true;
        }
    }

    /// Notes that the receipts must hear of the user's cursor floor in the thread of `root` in `conversation_id`
    /// ([`OwnChange::threads`]).
    fn note_thread(&mut self, conversation_id: &str, root: u64) {
        self.own_changes.0.entry(conversation_id.to_owned()).or_default().threads.insert(root);
    }

    /// The remembered notifications.
    pub fn notes(&self) -> &NoteBook {
        &self.notes
    }

    /// The remembered notifications, to take what changed ([`NoteBook::take_dirty`]).
    pub fn notes_mut(&mut self) -> &mut NoteBook {
        &mut self.notes
    }

    /// Puts back the remembered notifications (loaded from their checkpoint rows).
    pub fn set_notes(&mut self, notes: NoteBook) {
        self.notes = notes;
    }

    /// Whether nothing is kept for this user.
    pub fn is_empty(&self) -> bool {
        self.conversations.is_empty()
            && self.broadcasts.is_empty()
            && self.notifications.categories.is_empty()
            && self.notes.is_empty()
    }

    /// Whether the user has a state a reader sees (`CONTRACT.md` § v2): a member of a conversation of any kind,
    /// or a reader of a broadcast list, or with a notification.
    pub fn is_listed(&self) -> bool {
        self.totals.memberships > 0 || !self.broadcasts.is_empty() || !self.notifications.categories.is_empty()
    }

    /// The reader shape of `CONTRACT.md` § "The state a reader sees" with nothing expired (what the projection
    /// stores; a read applies expiry on top): [`UserState::view_at`] at [`crate::core::expiry::NEVER`].
    pub fn view(&self, user_id: &str, lists: &impl Lists) -> UserView {
        self.view_at(user_id, lists, crate::core::expiry::NEVER)
    }

    /// The reader shape of `CONTRACT.md` § "The state a reader sees" at UTC day `today` (§ v3, "Expiry": what has
    /// expired by then counts nowhere), with the broadcast counts and the shares of read-diffused conversations'
    /// indexes from `lists`.
    pub fn view_at(&self, user_id: &str, lists: &impl Lists, today: i64) -> UserView {
        let mut totals = self.totals;
        let mut conversations = BTreeMap::new();
        let mut threads = BTreeMap::new();
        for (id, c) in self.conversations.iter().filter(|(_, c)| c.is_member()) {
            let (counts, expired) = (c.counts(), c.expired(today));
            let (unread, mentions) = (counts.0 - expired.0, counts.1 - expired.1);
            if c.expires() {
                let never = crate::core::expiry::NEVER;
                totals.replace(c.contribution_of(counts, never), c.contribution_of((unread, mentions), today));
            }
            if !c.feed {
                conversations.insert(id.to_string(), c.view((unread, mentions), today));
                let unread_threads: BTreeMap<u64, ThreadView> = c
                    .threads
                    .unread_at(&c.authored, today)
                    .map(|(root, unread, mentions)| (root, ThreadView { unread, mentions }))
                    .collect();
                if !unread_threads.is_empty() {
                    threads.insert(id.to_string(), unread_threads);
                }
            }
        }
        let mut view = self.view_with(user_id, totals, conversations, lists);
        view.threads = threads;
        for (id, c) in self.read_diffused() {
            let Some(query) = c.share_query(today) else { continue };
            let (unread, mentions) = lists.index_counts(id, &query);
            let first = lists.index_first(id, &query);
            IndexShare { muted: c.muted, feed: c.feed, unread, mentions, first }.add_to(&mut view, id);
        }
        crate::core::totals::add_teams(&mut view, |id| self.conversations.get(id).and_then(|c| c.team.as_deref()));
        view
    }

    /// What the projection stores of the conversations `ids`: [`UserState::view`] with [`NoLists`] (nothing expired,
    /// no list's share), the totals, notifications and broadcasts whole, but of the conversations only those named
    /// (a member's, not a feed's, as the view holds them). Costs what is named, not what the user has: a patch of
    /// one conversation of a user in thousands builds one.
    pub fn view_of<'a>(&self, user_id: &str, ids: impl IntoIterator<Item = &'a String>) -> UserView {
        let conversations = ids
            .into_iter()
            .filter_map(|id| Some((id, self.conversations.get(id.as_str())?)))
            .filter(|(_, c)| c.is_member() && !c.feed)
            .map(|(id, c)| (id.clone(), c.view(c.counts(), crate::core::expiry::NEVER)))
            .collect();
        self.view_with(user_id, self.totals, conversations, &NoLists)
    }

    /// The reader shape with `totals` and `conversations` as given, the broadcasts from `lists` and the
    /// notification counts: what [`UserState::view_at`] and [`UserState::view_of`] share.
    fn view_with(
        &self,
        user_id: &str,
        totals: Sums,
        conversations: BTreeMap<String, ConversationView>,
        lists: &impl Lists,
    ) -> UserView {
        let mut view = UserView {
            user_id: user_id.to_owned(),
            conversations,
            broadcasts: self.broadcast_views(lists),
            ..UserView::default()
        };
        totals.counts.set_in(&mut view);
        self.add_notifications(&mut view);
        view
    }

    fn broadcast_views(&self, lists: &impl Lists) -> BTreeMap<String, BroadcastView> {
        let views = self.broadcasts.iter().map(|(id, cursor)| {
            let unread = lists.unread_above(id, *cursor);
            (id.clone(), BroadcastView { unread, dot: unread > 0 })
        });
        views.collect()
    }

    fn add_notifications(&self, view: &mut UserView) {
        let categories = self.notifications.categories.iter();
        view.notifications =
            categories.map(|(cat, c)| (cat.clone(), NotificationView { unread: c.unread, unseen: c.unseen })).collect();
        (view.total_notifications_unread, view.total_notifications_unseen) = self.notifications.totals();
    }

    /// The totals recomputed by scanning: for tests and `unread verify`, never on the hot path.
    pub fn recount(&self) -> Sums {
        let mut t = Sums::default();
        for c in self.conversations.values() {
            t.replace(Sums::default(), c.contribution());
        }
        t
    }

    /// Checks every invariant ([`UserState::check_own`], and the notification counts against the remembered
    /// notifications). Returns the first broken one.
    pub fn check(&self) -> Result<(), String> {
        self.check_own()?;
        self.check_notifications()
    }

    /// Checks the invariants of the user's own row: non-members hold no unread, unread seqs are above the cursor,
    /// mentions are within unread, totals and the detached count equal what the conversations give.
    pub fn check_own(&self) -> Result<(), String> {
        for (id, c) in &self.conversations {
            let holds_counts = !c.unread.is_empty() || !c.mentions.is_empty();
            if !c.is_member() && holds_counts {
                return Err(format!("conversation {id:?}: unread kept while not a member"));
            }
            if c.unread.min().is_some_and(|m| m <= c.cursor()) {
                return Err(format!("conversation {id:?}: unread at or below the cursor {}", c.cursor()));
            }
            if c.mentions.iter().any(|m| !c.unread.contains(m)) {
                return Err(format!("conversation {id:?}: a mention that is not unread"));
            }
            check_read_diffused(id, c)?;
            check_v3(id, c)?;
        }
        if self.recount() != self.totals {
            return Err(format!("totals {:?} differ from the sums {:?}", self.totals, self.recount()));
        }
        let held = |h| self.conversations.values().filter(|c| c.held() == Some(h)).count();
        let (detached, awaiting) = (held(Held::Detached), held(Held::Awaiting));
        if (detached, awaiting) != (self.detached, self.awaiting) {
            let kept = (self.detached, self.awaiting);
            return Err(format!("detached and awaiting counts {kept:?} differ from {:?}", (detached, awaiting)));
        }
        Ok(())
    }

    /// Every read-diffused conversation the user is a member of (what the projection stores as `r:` fields).
    pub fn read_diffused(&self) -> impl Iterator<Item = (&str, &ConvState)> {
        self.conversations.iter().filter(|(_, c)| c.index_from().is_some()).map(|(id, c)| (&**id, &**c))
    }

    /// The notification counts equal what the remembered notifications give (a forgotten, done one counted 0).
    fn check_notifications(&self) -> Result<(), String> {
        let recount = self.notes.recount();
        for (cat, c) in &self.notifications.categories {
            let got = recount.get(cat).copied().unwrap_or_default();
            if got != *c {
                return Err(format!("notifications {cat:?}: counts {c:?} differ from the notes' {got:?}"));
            }
        }
        match recount.keys().find(|cat| !self.notifications.categories.contains_key(*cat)) {
            Some(cat) => Err(format!("notifications {cat:?}: a note in a category not counted")),
            None => Ok(()),
        }
    }

    /// Applies one op about the conversation `key` (its id: borrowed, or the `Arc` its delta shares, [`ConvKey`]);
    /// returns how many seqs became unread. Notes what changed in the user's own seqs there
    /// ([`UserState::take_own_changes`]). `shared`: the fold's [`SharedReplies`].
    pub fn apply_op(
        &mut self,
        user_id: &str,
        key: &(impl ConvKey + ?Sized),
        op: &DeltaOp,
        shared: &mut SharedReplies,
    ) -> u64 {
        let conversation_id = key.id();
        // Only a member's own messages add to its own seqs, and a non-member has none to lose (a join finds them
        // empty): most ops need no before-and-after copy.
        let has_own = || self.conversations.get(conversation_id).is_some_and(|c| !c.own.is_empty());
        let touches_own = match op {
            DeltaOp::Messages { own, .. } => !own.is_empty(),
            DeltaOp::Left | DeltaOp::Recalled { .. } => has_own(),
            _ => false,
        };
        if !touches_own {
            return self.apply_op_inner(user_id, key, op, shared);
        }
        let own_before = self.conversations.get(conversation_id).map(|c| c.own.clone()).unwrap_or_default();
        let added = self.apply_op_inner(user_id, key, op, shared);
        let own_after = self.conversations.get(conversation_id).map(|c| &c.own);
        if own_after != Some(&own_before) && !(own_before.is_empty() && own_after.is_none()) {
            let after = own_after.cloned().unwrap_or_default();
            let change = self.own_changes.0.entry(conversation_id.to_owned()).or_default();
            let (mut gained, mut lost) = (after.clone(), own_before);
            gained.remove_all(&lost);
            lost.remove_all(&after);
            change.removed.remove_all(&gained);
            change.added.remove_all(&lost);
            change.added.union_above(&gained, 0);
            change.removed.union_above(&lost, 0);
        }
        added
    }

    fn apply_op_inner(
        &mut self,
        user_id: &str,
        key: &(impl ConvKey + ?Sized),
        op: &DeltaOp,
        shared: &mut SharedReplies,
    ) -> u64 {
        let conversation_id = key.id();
        if let Some(replies) = shared.get_mut(conversation_id) {
            replies.apply(op);
        }
        match op {
            DeltaOp::Joined { head, reactions } => self.update(key, true, |c| {
                if c.joined_at.is_none() {
                    (c.joined_at, c.read_from, c.reactions.from) = (Some(*head), None, *reactions);
                    c.clear_seqs();
                }
                0
            }),
            DeltaOp::Left => self.update(key, false, |c| {
                (c.joined_at, c.read_from, c.reactions.from) = (None, None, 0);
                c.clear_seqs();
                0
            }),
            DeltaOp::Messages { unread, mentions, read_to, expiry, own, threads } => {
                let create = *read_to > 0 || !own.is_empty();
                self.update(key, create, |c| {
                    c.floor = c.floor.max(*read_to);
                    c.authored.union_above(own, 0);
                    let membership = (c.joined_at, !c.feed);
                    let mut share = (c.takes_replies() && !threads.is_empty())
                        .then(|| shared.entry_ref(conversation_id).or_default());
                    for (root, run) in threads {
                        c.threads.apply_run(*root, run, membership, &c.authored, expiry, share.as_deref_mut());
                    }
                    if !c.is_member() {
                        return 0;
                    }
                    c.own.union_above(own, 0);
                    c.drop_read();
                    if !c.feed {
                        c.add_read_history(unread, mentions, c.cursor());
                    }
                    let added = c.add_messages(unread, mentions);
                    c.add_expiry(expiry);
                    added
                })
            }
            DeltaOp::Recalled { seqs } => self.update(key, false, |c| {
                c.recalled(seqs);
                0
            }),
            DeltaOp::Named { seqs, threads } => self.update(key, true, |c| {
                let share = shared.get(conversation_id).filter(|_| c.takes_replies());
                c.threads.named(seqs, threads, c.joined_at, share);
                0
            }),
            DeltaOp::Reactions { summaries } => self.update(key, false, |c| {
                c.reactions.apply(user_id, &c.authored, summaries);
                0
            }),
            DeltaOp::ReadDiffusion { since } => self.update(key, false, |c| {
                c.read_diffused_from(*since);
                0
            }),
            DeltaOp::Expiry { expiry } => self.update(key, false, |c| {
                if c.is_member() {
                    c.add_expiry(expiry);
                    c.threads.add_expiry(expiry);
                }
                0
            }),
            DeltaOp::WriteDiffusion { unread, mentions, expiry } => {
                self.update(key, false, |c| c.back_to_write_diffusion(unread, mentions, expiry))
            }
        }
    }

    /// Marks a conversation as a feed (its kind was decided `feed`), if the user has an entry for it.
    pub fn mark_feed(&mut self, conversation_id: &str) {
        if self.conversations.get(conversation_id).is_some_and(|c| !c.feed) {
            self.update(conversation_id, false, |c| {
                c.feed = true;
                (c.read, c.read_mentions) = (SeqSet::new(), SeqSet::new());
                c.threads.clear_unread();
                c.named.remove_through(c.cursor());
                c.prune_expiry();
                0
            });
        }
    }

    /// Applies one of the user's own events.
    pub fn apply_event(&mut self, event: &UserEvent, shared: &SharedReplies) {
        match event {
            UserEvent::BroadcastRead(e) => {
                let cursor = self.broadcasts.entry(e.broadcast_id.clone()).or_default();
                *cursor = (*cursor).max(e.read_seq);
            }
            UserEvent::NotificationCreated(_)
            | UserEvent::NotificationRead(_)
            | UserEvent::NotificationRetracted(_)
            | UserEvent::NotificationsSeen(_)
            | UserEvent::NotificationsRead(_) => self.notes.apply(&mut self.notifications, event),
            UserEvent::ReadAck(e) => self.update_main(&e.conversation_id, |c| {
                c.floor = c.floor.max(e.read_seq);
                c.mark = None; // a later read ack clears the mark, whatever its read_seq (§ v3)
                if c.is_member() {
                    c.drop_read();
                }
            }),
            UserEvent::Muted(e) => self.update_own(&e.conversation_id, |c| c.muted = e.muted),
            UserEvent::MarkedUnread(e) => self.update_main(&e.conversation_id, |c| {
                c.mark = e.marked.then_some(Mark { from_seq: e.from_seq });
            }),
            UserEvent::ThreadRead(e) => self.update_own(&e.conversation_id, |c| {
                let share = shared.get(&e.conversation_id).filter(|_| c.takes_replies());
                c.threads.read(e.thread_root, e.read_seq, c.joined_at, share);
            }),
            UserEvent::ThreadFollowed(e) => self.update_own(&e.conversation_id, |c| {
                let share = shared.get(&e.conversation_id).filter(|_| c.takes_replies());
                c.threads.follow(e.thread_root, e.followed, c.joined_at, share);
            }),
            UserEvent::ReactionsRead(e) => {
                self.update_own(&e.conversation_id, |c| c.reactions.read = c.reactions.read.max(e.read_seq))
            }
        }
    }

    /// Runs a delta's change `f` on the conversation's entry (creating it if `create`; otherwise doing nothing when
    /// it is absent), then brings the totals, the retention counts and retention up to date.
    fn update(&mut self, key: &(impl ConvKey + ?Sized), create: bool, f: impl FnOnce(&mut ConvState) -> u64) -> u64 {
        self.update_with(key, create, By::Delta, false, f)
    }

    /// [`UserState::update`] for one of the user's own events, which makes the entry when absent.
    fn update_own(&mut self, conversation_id: &str, f: impl FnOnce(&mut ConvState)) {
        self.update_with(conversation_id, true, By::User, false, |c| {
            f(c);
            0
        });
    }

    /// [`UserState::update_own`] for a change `f` that leaves the user's threads, reactions, mute, kind and
    /// membership in the conversation as they were (`main_only`: a read ack, a mark), whose v4 counters need no
    /// walk.
    fn update_main(&mut self, conversation_id: &str, f: impl FnOnce(&mut ConvState)) {
        self.update_with(conversation_id, true, By::User, true, |c| {
            f(c);
            0
        });
    }

    fn update_with(
        &mut self,
        key: &(impl ConvKey + ?Sized),
        create: bool,
        by: By,
        main_only: bool,
        f: impl FnOnce(&mut ConvState) -> u64,
    ) -> u64 {
        self.clock += 1;
        let conversation_id = key.id();
        let (c, existed) = match self.conversations.get_mut(conversation_id) {
            Some(c) => (c, true),
            None if create => (self.conversations.entry(key.key()).or_default(), false),
            None => return 0,
        };
        let held_before = c.held().filter(|_| existed);
        // An entry only the user's events made awaits its first delta; any delta ends the wait.
        c.awaiting = by == By::User && (c.awaiting || !existed);
        // Every change to an entry goes through here, so the part kept since the last one is still its part.
        let before = c.part.0.unwrap_or_else(|| c.contribution());
        let result = f(c);
        c.touched = self.clock;
        let after = match main_only {
            true => c.contribution_after_main(before),
            false => c.contribution(),
        };
        c.part = Part(Some(after));
        let remove = c.is_empty_detached();
        let held_after = c.held().filter(|_| !remove);
        self.totals.replace(before, after);
        if remove {
            self.conversations.remove(conversation_id);
        }
        self.count_held(held_before, held_after);
        result
    }

    /// Moves an entry's count from the retention bound it was held under to the one it is held under now, and
    /// evicts the least recently touched entry of a bound gone over.
    fn count_held(&mut self, before: Option<Held>, after: Option<Held>) {
        if let Some(held) = before {
            *self.count_of(held) -= 1;
        }
        if let Some(held) = after {
            *self.count_of(held) += 1;
        }
        if self.detached > MAX_DETACHED_PER_USER {
            self.evict_oldest(Held::Detached);
        }
        if self.awaiting > MAX_AWAITING_PER_USER {
            self.evict_oldest(Held::Awaiting);
        }
    }

    fn evict_oldest(&mut self, held: Held) {
        // Of two touched by the same op, the smaller id goes, whatever the map's order.
        let oldest =
            self.conversations.iter().filter(|(_, c)| c.held() == Some(held)).min_by_key(|(id, c)| (c.touched, &**id));
        if let Some(id) = oldest.map(|(id, _)| id.clone()) {
            self.conversations.remove(&id);
            *self.count_of(held) -= 1;
        }
    }

    /// The count of the entries held under `held`'s bound.
    fn count_of(&mut self, held: Held) -> &mut usize {
        match held {
            Held::Detached => &mut self.detached,
            Held::Awaiting => &mut self.awaiting,
        }
    }
}

/// Whether an op can change its conversation's [`Replies`] (its threads' runs, a recall, a creation's ttl).
fn may_change_replies(op: &DeltaOp) -> bool {
    match op {
        DeltaOp::Messages { threads, .. } => !threads.is_empty(),
        DeltaOp::Recalled { .. } | DeltaOp::Expiry { .. } => true,
        _ => false,
    }
}

/// Notes in `stakes` what a delta just applied to its user's entry `c` gave the user a stake in
/// ([`ConvState::keeps_stakes`]): everything when it became read-diffused for the user, else the seqs it sent or is
/// named in and the threads it replied in.
fn note_stakes(stakes: &mut Stakes, c: &ConvState, delta: &Delta) {
    if !c.keeps_stakes() {
        return;
    }
    let (id, user_id) = (&*delta.conversation_id, delta.user_id.as_str());
    for op in &delta.ops {
        match op {
            DeltaOp::ReadDiffusion { .. } => return stakes.add(id, user_id, c.stakes()),
            DeltaOp::Messages { own, threads, .. } => {
                let replied = threads.iter().filter(|(_, run)| run.read_to > 0).map(|(root, _)| *root);
                stakes.add(id, user_id, own.iter().chain(replied));
            }
            DeltaOp::Named { seqs, threads } => stakes.add(id, user_id, seqs.iter().chain(threads.iter().copied())),
            _ => {}
        }
    }
}

/// Counts of what the fold did, for metrics and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FoldStats {
    /// Deltas applied.
    pub deltas: u64,
    /// User events applied.
    pub user_events: u64,
    /// Per-recipient increments: seqs that became unread for some user.
    pub increments: u64,
}

/// Every user's state: what one fold task owns for its partition (or, in `unread fold`, for everything).
#[derive(Debug, Default, Clone)]
pub struct Fold {
    /// Each state boxed: a `UserState` is 360 bytes, and the table of a partition's users grows by doubling, each
    /// time copying every entry into fresh memory. Inline, a profile of 300,000 joins put 13% of the service's
    /// samples in that rehash, most of them the kernel zeroing the new table's pages (docs/performance.md, "A
    /// user's state, boxed in the table").
    users: Map<String, Box<UserState>>,
    /// The replies of threads not yet a user's, once per conversation for all users ([`Replies`]).
    shared: SharedReplies,
    /// The conversations whose [`Replies`] may have changed since [`Fold::take_changed_replies`] (not kept when
    /// own changes are not: a fold with no checkpoint).
    changed_replies: crate::core::Set<String>,
    /// Which users a read-diffused conversation's replies concern ([`Stakes`]).
    stakes: Stakes,
    stats: FoldStats,
    /// The users' own-seq changes are not noted ([`Fold::without_own_changes`]).
    skip_own_changes: bool,
}

impl Fold {
    /// An empty fold.
    pub fn new() -> Self {
        Self::default()
    }

    /// This fold, noting no user's own-seq changes ([`UserState::take_own_changes`]): for a fold with no projection
    /// to tell them to (`unread fold`), where they would only pile up.
    pub fn without_own_changes(self) -> Self {
        Self { skip_own_changes: true, ..self }
    }

    /// Applies a delta from the fan-out; one for every member goes to [`Fold::apply_for_members`].
    pub fn apply_delta(&mut self, delta: &Delta) {
        if delta.is_for_members() {
            self.apply_for_members(delta);
            return;
        }
        self.stats.deltas += 1;
        let skip_own_changes = self.skip_own_changes;
        if !skip_own_changes && delta.ops.iter().any(may_change_replies) {
            self.note_replies_changed(&delta.conversation_id);
        }
        let user = &mut **self.users.entry_ref(delta.user_id.as_str()).or_default();
        let before = (!skip_own_changes).then(|| user.receipt_entry(&delta.conversation_id)).flatten();
        let mut added = 0;
        for op in &delta.ops {
            added += match skip_own_changes {
                true => user.apply_op_inner(&delta.user_id, &delta.conversation_id, op, &mut self.shared),
                false => user.apply_op(&delta.user_id, &delta.conversation_id, op, &mut self.shared),
            };
        }
        if delta.feed {
            user.mark_feed(&delta.conversation_id);
        }
        // One lookup for what the delta leaves in the entry after its ops: the team, and the stakes it gives.
        if let Some(c) = user.conversations.get_mut(&*delta.conversation_id) {
            c.set_team(delta.team.as_deref());
            note_stakes(&mut self.stakes, c, delta);
        }
        if !skip_own_changes {
            user.note_membership(&delta.conversation_id, before);
            for op in &delta.ops {
                let DeltaOp::Messages { threads, .. } = op else { continue };
                for root in threads.iter().filter(|(_, run)| run.read_to > 0).map(|(root, _)| *root) {
                    user.note_thread(&delta.conversation_id, root);
                }
            }
        }
        self.stats.increments += added;
        if user.is_empty() {
            self.users.remove(&delta.user_id);
        }
    }

    /// Applies a delta for every member ([`Delta::is_for_members`]): a read-diffused conversation's replies and
    /// reactions. The replies join the conversation's [`Replies`]; both reach only the members with a stake in
    /// their threads or messages ([`Stakes`]: a reaction concerns its message's sender), each through its own
    /// state as a member's delta would. Returns those users, whose state may have changed.
    pub fn apply_for_members(&mut self, delta: &Delta) -> Vec<String> {
        self.stats.deltas += 1;
        let id = &*delta.conversation_id;
        let mut seqs = Vec::new();
        for op in &delta.ops {
            match op {
                DeltaOp::Messages { threads, expiry, .. } => {
                    let replies = self.shared.entry_ref(id).or_default();
                    threads.iter().for_each(|(root, run)| replies.add(*root, run, 0, expiry));
                    seqs.extend(threads.keys().copied());
                }
                DeltaOp::Reactions { summaries } => seqs.extend(summaries.iter().map(|s| s.seq)),
                _ => {}
            }
        }
        if !self.skip_own_changes {
            // The members' rows do not all hold these replies: they get rows of their own.
            self.shared.entry_ref(id).or_default().keep_rows(false);
            self.note_replies_changed(id);
        }
        // Members only: a member's delta never reaches a user who is not one.
        let member =
            |user: &&str| self.users.get(*user).is_some_and(|u| u.conversations.get(id).is_some_and(|c| c.is_member()));
        let users: Vec<String> = self.stakes.users_of(id, seqs).into_iter().filter(member).map(str::to_owned).collect();
        for user in &users {
            let state = self.users.get_mut(user.as_str()).expect("a member");
            for op in &delta.ops {
                self.stats.increments += state.apply_op_inner(user, id, op, &mut self.shared);
            }
        }
        users
    }

    /// The checkpoint rows of replies changed since the last call, as (conversation, chunk): each is written from
    /// [`Replies::chunk`] of [`Fold::replies_of`], or deleted when empty. Only a conversation whose replies have
    /// rows ([`Replies::keep_rows`]) has any; every change of its replies is noted (a recall in a member's delta
    /// too), so its rows are never behind the members' rows.
    pub fn take_changed_replies(&mut self) -> Vec<(String, u64)> {
        let mut changed = Vec::new();
        for id in self.changed_replies.drain() {
            let Some(replies) = self.shared.get_mut(id.as_str()) else { continue };
            changed.extend(replies.take_changed_chunks().into_iter().map(|chunk| (id.clone(), chunk)));
        }
        changed
    }

    /// Notes every chunk of every conversation's replies with rows as changed: the next
    /// [`Fold::take_changed_replies`] has them all (a replay seeded from a snapshot writes everything).
    pub fn mark_all_replies_changed(&mut self) {
        for (id, replies) in self.shared.iter_mut().filter(|(_, r)| r.has_rows()) {
            replies.mark_all_changed();
            self.changed_replies.insert(id.clone());
        }
    }

    /// One conversation's [`Replies`], if the fold keeps any.
    pub fn replies_of(&self, conversation_id: &str) -> Option<&Replies> {
        self.shared.get(conversation_id)
    }

    /// Puts back replies of a conversation from one of its checkpoint rows (merged with any its users' rows and
    /// its other rows carried): from now on its replies have rows.
    pub fn restore_replies(
        &mut self,
        conversation_id: &str,
        replies: impl IntoIterator<Item = crate::core::threads::Pending>,
    ) {
        let kept = self.shared.entry_ref(conversation_id).or_default();
        kept.keep_rows(true);
        replies.into_iter().for_each(|reply| kept.insert(reply));
        kept.take_changed_chunks();
    }

    fn note_replies_changed(&mut self, conversation_id: &str) {
        if !self.changed_replies.contains(conversation_id) {
            self.changed_replies.insert(conversation_id.to_owned());
        }
    }

    /// Applies one of a user's own events.
    pub fn apply_user_event(&mut self, event: &UserEvent) {
        self.stats.user_events += 1;
        let skip_own_changes = self.skip_own_changes;
        let user = &mut **self.users.entry_ref(event.user_id()).or_default();
        let conversation_id = event.conversation_id().filter(|_| !skip_own_changes);
        let before = conversation_id.and_then(|id| user.receipt_entry(id));
        user.apply_event(event, &self.shared);
        let thread = match event {
            UserEvent::ThreadRead(e) => Some((&e.conversation_id, e.thread_root)),
            UserEvent::ThreadFollowed(e) => Some((&e.conversation_id, e.thread_root)),
            _ => None,
        };
        if let Some((id, root)) =
            thread.filter(|(id, _)| user.conversations.get(id.as_str()).is_some_and(|c| c.keeps_stakes()))
        {
            self.stakes.add(id, event.user_id(), [root]);
        }
        if let Some(id) = conversation_id {
            user.note_membership(id, before);
            if let UserEvent::ThreadRead(e) = event {
                user.note_thread(id, e.thread_root);
            }
        }
        if user.is_empty() {
            self.users.remove(event.user_id());
        }
    }

    /// One user's state, if anything is kept for them.
    pub fn user(&self, user_id: &str) -> Option<&UserState> {
        self.users.get(user_id).map(|state| &**state)
    }

    /// Puts back a user's state, e.g. loaded from a checkpoint. The pending replies its row carried go to the
    /// fold's [`SharedReplies`].
    pub fn restore(&mut self, user_id: String, mut state: UserState) {
        for (id, c) in &mut state.conversations {
            if !c.threads.pending.is_empty() {
                let replies = self.shared.entry_ref(&**id).or_default();
                std::mem::take(&mut c.threads.pending).into_iter().for_each(|p| replies.insert(p));
            }
            if c.keeps_stakes() {
                self.stakes.add(id, &user_id, c.stakes());
            }
        }
        self.users.insert(user_id, Box::new(state));
    }

    /// The replies of threads not yet a user's, per conversation ([`Replies::pending_of`] gives one member's, for
    /// its checkpoint row).
    pub fn shared_replies(&self) -> &SharedReplies {
        &self.shared
    }

    /// Every user with kept state, in no particular order.
    pub fn users(&self) -> impl Iterator<Item = (&String, &UserState)> {
        self.users.iter().map(|(id, state)| (id, &**state))
    }

    /// One user's reader shape, broadcast counts from `lists`: the zero state (no conversations, zero totals,
    /// empty maps) when nothing is kept for them.
    pub fn view(&self, user_id: &str, lists: &impl Lists) -> UserView {
        match self.users.get(user_id) {
            Some(state) => state.view(user_id, lists),
            None => UserView { user_id: user_id.to_owned(), ..Default::default() },
        }
    }

    /// The reader shape of every listed user ([`UserState::is_listed`]) with nothing expired, sorted by user id.
    pub fn views(&self, lists: &impl Lists) -> Vec<UserView> {
        self.views_at(lists, crate::core::expiry::NEVER)
    }

    /// The reader shape of every listed user at UTC day `today` ([`UserState::view_at`]), sorted by user id.
    pub fn views_at(&self, lists: &impl Lists, today: i64) -> Vec<UserView> {
        self.views_iter_at(lists, today).collect()
    }

    /// [`Fold::views_at`] one view at a time, in the same order, each built when asked for: nothing holds every
    /// view at once (for the full v3 set they took 33 MiB).
    pub fn views_iter_at<'a>(&'a self, lists: &'a impl Lists, today: i64) -> impl Iterator<Item = UserView> + 'a {
        let mut ids: Vec<&String> = self.users.iter().filter(|(_, u)| u.is_listed()).map(|(id, _)| id).collect();
        ids.sort_unstable();
        ids.into_iter().map(move |id| self.users[id].view_at(id, lists, today))
    }

    /// One user's state, mutably (to take the notifications that changed).
    pub fn user_mut_existing(&mut self, user_id: &str) -> Option<&mut UserState> {
        self.users.get_mut(user_id).map(|state| &mut **state)
    }

    /// What the fold has done so far.
    pub fn stats(&self) -> FoldStats {
        self.stats
    }
}
