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
//! - the per-user [`Totals`] are kept incrementally from each conversation's contribution before and after a
//!   change, so they equal the sums in every state.
//!
//! Conversations the user is not a member of are kept only while they carry information (a floor above 0 or a
//! mute), at most [`MAX_DETACHED_PER_USER`] per user, least recently touched evicted first.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::core::contract::{ConversationView, UserEvent, UserView};
use crate::core::delta::{Delta, DeltaOp};
use crate::core::seqset::SeqSet;

/// Most conversations a user is not a member of whose floor and mute are kept (the retention bound).
pub const MAX_DETACHED_PER_USER: usize = 1024;

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
}

impl ConvState {
    /// Whether the user is a member.
    pub fn is_member(&self) -> bool {
        self.joined_at.is_some()
    }

    /// The read cursor: max(head at the latest join, floor); nothing at or below it is unread.
    pub fn cursor(&self) -> u64 {
        self.floor.max(self.joined_at.unwrap_or(0))
    }

    /// A non-member entry with nothing worth keeping.
    fn is_empty_detached(&self) -> bool {
        !self.is_member() && self.floor == 0 && !self.muted
    }

    fn contribution(&self) -> Totals {
        if !self.is_member() {
            return Totals::default();
        }
        let counted = !self.muted && !self.unread.is_empty();
        Totals {
            total_unread: if self.muted { 0 } else { self.unread.len() },
            total_mentions: self.mentions.len(),
            unread_conversations: u64::from(counted),
            memberships: 1,
        }
    }

    fn drop_read(&mut self) {
        let cursor = self.cursor();
        self.unread.remove_through(cursor);
        self.mentions.remove_through(cursor);
    }
}

/// A user's totals (`CONTRACT.md` § Semantics, "Per user").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Sum of `unread` over member, unmuted conversations.
    pub total_unread: u64,
    /// Sum of `mentions` over member conversations, muted ones included.
    pub total_mentions: u64,
    /// Member, unmuted conversations with `unread > 0`.
    pub unread_conversations: u64,
    /// Conversations the user is a member of.
    pub memberships: u64,
}

impl Totals {
    fn replace(&mut self, before: Totals, after: Totals) {
        self.total_unread = self.total_unread + after.total_unread - before.total_unread;
        self.total_mentions = self.total_mentions + after.total_mentions - before.total_mentions;
        self.unread_conversations =
            self.unread_conversations + after.unread_conversations - before.unread_conversations;
        self.memberships = self.memberships + after.memberships - before.memberships;
    }
}

/// One user's state: per-conversation [`ConvState`]s and the [`Totals`] over them. Serializes for checkpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserState {
    conversations: BTreeMap<String, ConvState>,
    totals: Totals,
    clock: u64,
    detached: usize,
}

impl UserState {
    /// The totals, kept incrementally.
    pub fn totals(&self) -> Totals {
        self.totals
    }

    /// Every kept conversation (members and retained non-members), by id.
    pub fn conversations(&self) -> &BTreeMap<String, ConvState> {
        &self.conversations
    }

    /// Whether nothing is kept for this user.
    pub fn is_empty(&self) -> bool {
        self.conversations.is_empty()
    }

    /// The reader shape of `CONTRACT.md` § "The state a reader sees": member conversations only.
    pub fn view(&self, user_id: &str) -> UserView {
        let conversations = self
            .conversations
            .iter()
            .filter(|(_, c)| c.is_member())
            .map(|(id, c)| {
                (id.clone(), ConversationView { unread: c.unread.len(), mentions: c.mentions.len(), muted: c.muted })
            })
            .collect();
        UserView {
            user_id: user_id.to_owned(),
            total_unread: self.totals.total_unread,
            total_mentions: self.totals.total_mentions,
            unread_conversations: self.totals.unread_conversations,
            conversations,
        }
    }

    /// The totals recomputed by scanning: for tests and `unread verify`, never on the hot path.
    pub fn recount(&self) -> Totals {
        let mut t = Totals::default();
        for c in self.conversations.values() {
            t.replace(Totals::default(), c.contribution());
        }
        t
    }

    /// Checks the invariants: non-members hold no unread, unread seqs are above the cursor, mentions are within
    /// unread, totals and the detached count equal what the conversations give. Returns the first broken one.
    pub fn check(&self) -> Result<(), String> {
        for (id, c) in &self.conversations {
            let holds_counts = !c.unread.is_empty() || !c.mentions.is_empty();
            if !c.is_member() && holds_counts {
                return Err(format!("conversation {id:?}: unread kept while not a member"));
            }
            if c.unread.ranges().first().is_some_and(|r| r.0 <= c.cursor()) {
                return Err(format!("conversation {id:?}: unread at or below the cursor {}", c.cursor()));
            }
            if c.mentions.iter().any(|m| !c.unread.contains(m)) {
                return Err(format!("conversation {id:?}: a mention that is not unread"));
            }
        }
        if self.recount() != self.totals {
            return Err(format!("totals {:?} differ from the sums {:?}", self.totals, self.recount()));
        }
        let detached = self.conversations.values().filter(|c| !c.is_member()).count();
        if detached != self.detached {
            return Err(format!("detached count {} differs from {detached}", self.detached));
        }
        Ok(())
    }

    /// Applies one op about `conversation_id`; returns how many seqs became unread.
    pub fn apply_op(&mut self, conversation_id: &str, op: &DeltaOp) -> u64 {
        match op {
            DeltaOp::Joined { head } => self.update(conversation_id, true, |c| {
                if c.joined_at.is_none() {
                    c.joined_at = Some(*head);
                    c.unread.clear();
                    c.mentions.clear();
                }
                0
            }),
            DeltaOp::Left => self.update(conversation_id, false, |c| {
                c.joined_at = None;
                c.unread.clear();
                c.mentions.clear();
                0
            }),
            DeltaOp::Messages { unread, mentions, read_to } => self.update(conversation_id, *read_to > 0, |c| {
                c.floor = c.floor.max(*read_to);
                if !c.is_member() {
                    return 0;
                }
                c.drop_read();
                let cursor = c.cursor();
                let added = c.unread.union_above(unread, cursor);
                for seq in mentions.iter().filter(|s| *s > cursor) {
                    if c.unread.contains(seq) {
                        c.mentions.insert(seq);
                    }
                }
                added
            }),
            DeltaOp::Recalled { seqs } => self.update(conversation_id, false, |c| {
                for seq in seqs.iter() {
                    if c.unread.remove(seq) {
                        c.mentions.remove(seq);
                    }
                }
                0
            }),
        }
    }

    /// Applies one of the user's own events (`read.ack`, `conversation.muted`).
    pub fn apply_event(&mut self, event: &UserEvent) {
        match event {
            UserEvent::ReadAck(e) => self.update(&e.conversation_id, true, |c| {
                c.floor = c.floor.max(e.read_seq);
                if c.is_member() {
                    c.drop_read();
                }
                0
            }),
            UserEvent::Muted(e) => self.update(&e.conversation_id, true, |c| {
                c.muted = e.muted;
                0
            }),
        };
    }

    /// Runs `f` on the conversation's entry (creating it if `create`; otherwise doing nothing when it is absent),
    /// then brings the totals, the detached count and retention up to date.
    fn update(&mut self, conversation_id: &str, create: bool, f: impl FnOnce(&mut ConvState) -> u64) -> u64 {
        self.clock += 1;
        let (before, existed) = match self.conversations.get(conversation_id) {
            Some(c) => (c.contribution(), true),
            None if create => (Totals::default(), false),
            None => return 0,
        };
        if !existed {
            self.conversations.insert(conversation_id.to_owned(), ConvState::default());
        }
        let c = self.conversations.get_mut(conversation_id).expect("present");
        let result = f(c);
        c.touched = self.clock;
        let after = c.contribution();
        let (was_detached, is_detached, remove) =
            (existed && before.memberships == 0, !c.is_member(), c.is_empty_detached());
        self.totals.replace(before, after);
        if remove {
            self.conversations.remove(conversation_id);
        }
        self.detached = self.detached + usize::from(is_detached && !remove) - usize::from(was_detached);
        if self.detached > MAX_DETACHED_PER_USER {
            self.evict_oldest_detached();
        }
        result
    }

    fn evict_oldest_detached(&mut self) {
        let oldest = self.conversations.iter().filter(|(_, c)| !c.is_member()).min_by_key(|(_, c)| c.touched);
        if let Some(id) = oldest.map(|(id, _)| id.clone()) {
            self.conversations.remove(&id);
            self.detached -= 1;
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
    users: HashMap<String, UserState>,
    stats: FoldStats,
}

impl Fold {
    /// An empty fold.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a delta from the fan-out.
    pub fn apply_delta(&mut self, delta: &Delta) {
        self.stats.deltas += 1;
        let user = self.user_mut(&delta.user_id);
        let mut added = 0;
        for op in &delta.ops {
            added += user.apply_op(&delta.conversation_id, op);
        }
        self.stats.increments += added;
        self.forget_if_empty(&delta.user_id);
    }

    /// Applies one of a user's own events.
    pub fn apply_user_event(&mut self, event: &UserEvent) {
        self.stats.user_events += 1;
        self.user_mut(event.user_id()).apply_event(event);
        self.forget_if_empty(event.user_id());
    }

    /// One user's state, if anything is kept for them.
    pub fn user(&self, user_id: &str) -> Option<&UserState> {
        self.users.get(user_id)
    }

    /// Puts back a user's state, e.g. loaded from a checkpoint.
    pub fn restore(&mut self, user_id: String, state: UserState) {
        self.users.insert(user_id, state);
    }

    /// Every user with kept state, in no particular order.
    pub fn users(&self) -> impl Iterator<Item = (&String, &UserState)> {
        self.users.iter()
    }

    /// One user's reader shape: the zero state (no conversations, zero totals) when nothing is kept for them.
    pub fn view(&self, user_id: &str) -> UserView {
        match self.users.get(user_id) {
            Some(state) => state.view(user_id),
            None => UserView { user_id: user_id.to_owned(), ..Default::default() },
        }
    }

    /// The reader shape of every user who is a member of at least one conversation, sorted by user id.
    pub fn views(&self) -> Vec<UserView> {
        let mut ids: Vec<&String> =
            self.users.iter().filter(|(_, u)| u.totals().memberships > 0).map(|(id, _)| id).collect();
        ids.sort_unstable();
        ids.into_iter().map(|id| self.users[id].view(id)).collect()
    }

    /// What the fold has done so far.
    pub fn stats(&self) -> FoldStats {
        self.stats
    }

    fn user_mut(&mut self, user_id: &str) -> &mut UserState {
        if !self.users.contains_key(user_id) {
            self.users.insert(user_id.to_owned(), UserState::default());
        }
        self.users.get_mut(user_id).expect("present")
    }

    fn forget_if_empty(&mut self, user_id: &str) {
        if self.users.get(user_id).is_some_and(UserState::is_empty) {
            self.users.remove(user_id);
        }
    }
}
