//! The fan-out stage's pure logic: a conversation's events, in partition order → per-recipient [`Delta`]s.
//!
//! [`FanOut`] keeps, per conversation, its head (the highest `seq` sent) and its members with the head at which
//! each joined ([`ConversationState`]). [`FanOut::process_batch`] takes a batch of events as a Kafka poll returns
//! them (any mix of conversations, each in its partition order) and returns at most one [`Delta`] per
//! (recipient, conversation): the cost is proportional to members × runs, not members × messages.
//!
//! Rules (`CONTRACT.md` § Semantics): a `message.sent` whose seq is not above the head is a duplicate and changes
//! nothing; a `message.recalled` takes effect only for a seq at or below the head; joining as a member and leaving
//! as a non-member change nothing; `conversation.created` joins its listed members.
//!
//! Every delta of a batch starts with the batch's effective recalls, those of messages sent in the same batch
//! included: a fan-out restarted from its checkpoint may batch the same events differently, and a message that an
//! earlier batching already delivered must still be taken back.
//!
//! A conversation whose member count reaches the [`Diffusion`] threshold is read-diffused ([`crate::core::hybrid`]):
//! its countable messages go to its [`ConvIndex`] (and, as [`ListOp`]s, to Redis) instead of every member's delta.
//! A switch splits the batch at the membership event that causes it: what came before is emitted first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::broadcast::{ListId, ListOp, ListState, Lists};
use crate::core::contract::{Addressed, ConversationEvent, ConversationKind, ConversationOp, MessageSent};
use crate::core::delta::{Delta, DeltaOp, ReactionSummary, ThreadRun};
use crate::core::expiry::expiry_day;
use crate::core::hybrid::{ConvIndex, Diffusion, ShareQuery};
use crate::core::seqset::SeqSet;
use crate::core::Map;

/// The fan-out's state of one conversation; serializes for checkpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationState {
    /// From `conversation.created`, if seen.
    pub kind: Option<ConversationKind>,
    /// The highest seq of a `message.sent` so far (0 before any).
    pub head: u64,
    /// Current members → the head when each (last) joined.
    pub members: BTreeMap<String, u64>,
    /// The index while the conversation is read-diffused ([`crate::core::hybrid`]); `None`: write-diffused.
    #[serde(default)]
    pub index: Option<ConvIndex>,
    /// v3: `unread_ttl_days` of the first `conversation.created` (`CONTRACT.md` § v3, "Expiry"); `None`: unread
    /// never expires.
    #[serde(default)]
    pub ttl_days: Option<u64>,
    /// v3: before the first `conversation.created`, the countable seqs sent so far by their UTC day: a ttl that
    /// comes with the creation applies to them too (§ v3: the conversation's ttl is its first creation's).
    #[serde(default)]
    pub uncreated_days: BTreeMap<i64, SeqSet>,
    /// v3: the seqs sent and not recalled (duplicates are not sent): the messages that have read receipts.
    #[serde(default)]
    pub sent: SeqSet,
    /// v4: the team of the first `conversation.created` (`CONTRACT.md` § v4, "Teams"); `None`: no team.
    #[serde(default)]
    pub team: Option<String>,
    /// v4: every reply sent (not a duplicate) → the root of its thread, resolved one level deep (§ v4, "Threads").
    #[serde(default)]
    pub roots: BTreeMap<u64, u64>,
    /// v4: the seqs sent and then recalled; with `sent`, every seq ever sent (a reply's root must have been).
    #[serde(default)]
    pub recalled: SeqSet,
    /// v4: the highest `reaction_seq` so far, 0 before any (§ v4, "Reactions": one not above it is a duplicate).
    #[serde(default)]
    pub reaction_head: u64,
    /// v4: per message, its live reactions that count (the message was sent before the add and is not recalled).
    #[serde(default)]
    pub reactions: BTreeMap<u64, Vec<LiveReaction>>,
}

/// v4: a live reaction that counts: the last event of its (message, user, reaction) was a `reaction.added`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveReaction {
    /// Who reacted.
    pub user: String,
    /// The reaction (an emoji, `+1`).
    pub reaction: String,
    /// The `reaction_seq` of its latest add.
    pub reaction_seq: u64,
}

impl ConversationState {
    /// Whether message `seq` was ever sent here (not a duplicate), recalled or not.
    pub fn was_sent(&self, seq: u64) -> bool {
        self.sent.contains(seq) || self.recalled.contains(seq)
    }

    /// The thread a message with `thread_root` joins (`CONTRACT.md` § v4, "Threads"): the root, or the root's own
    /// root when it is a reply (one level deep); `None`, the main timeline, when no message `thread_root` was sent.
    pub fn thread_of(&self, thread_root: Option<u64>) -> Option<u64> {
        let root = thread_root?;
        self.was_sent(root).then(|| self.roots.get(&root).copied().unwrap_or(root))
    }

    /// The reactions of message `seq` as its sender's fold needs them ([`ReactionSummary`]).
    pub fn reaction_summary(&self, seq: u64) -> ReactionSummary {
        let live = self.reactions.get(&seq).map(Vec::as_slice).unwrap_or_default();
        let Some(top) = live.iter().max_by_key(|r| r.reaction_seq) else {
            return ReactionSummary { seq, ..ReactionSummary::default() };
        };
        let other = live.iter().filter(|r| r.user != top.user).map(|r| r.reaction_seq).max().unwrap_or(0);
        ReactionSummary { seq, top: top.reaction_seq, by: top.user.clone(), other }
    }

    /// Applies a reaction event; returns whether message `seq`'s live reactions may have changed (false for a
    /// duplicate, a `reaction_seq` not above the highest so far).
    fn react(&mut self, e: &crate::core::contract::Reaction, added: bool) -> bool {
        if e.reaction_seq <= self.reaction_head {
            return false;
        }
        self.reaction_head = e.reaction_seq;
        // It counts only when the message was sent before the add and is not recalled (§ v4, "Reactions").
        let counts = added && self.sent.contains(e.seq);
        let live = self.reactions.entry(e.seq).or_default();
        live.retain(|r| !(r.user == e.user_id && r.reaction == e.reaction));
        if counts {
            let (user, reaction) = (e.user_id.clone(), e.reaction.clone());
            live.push(LiveReaction { user, reaction, reaction_seq: e.reaction_seq });
        }
        if live.is_empty() {
            self.reactions.remove(&e.seq);
        }
        true
    }
}

/// The fan-out's state of every conversation and broadcast list it has seen.
#[derive(Debug, Default, Clone)]
pub struct FanOut {
    conversations: Map<String, ConversationState>,
    lists: Map<String, ListState>,
    /// The list and index changes of the batches since [`FanOut::take_list_ops`], in order.
    list_ops: Vec<(ListId, ListOp)>,
    /// v4: the replies of the batches since [`FanOut::take_new_replies`], per conversation: (reply, root).
    new_replies: Map<String, Vec<(u64, u64)>>,
    diffusion: Diffusion,
    /// How many conversations have an index (read-diffused), so a checkpoint need not scan them all to know.
    indexed: usize,
}

/// Counts of what a batch held, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchStats {
    /// `message.sent` at or below the head, ignored.
    pub duplicate_messages: u64,
    /// `message.recalled` above the head, ignored.
    pub early_recalls: u64,
    /// Conversations switched to read diffusion.
    pub to_read: u64,
    /// Conversations switched back to write diffusion.
    pub to_write: u64,
}

/// One mark in a user's timeline within a batch of one conversation.
#[derive(Debug, Clone, Copy)]
enum Mark {
    /// The head and the reaction head at the join.
    Join(u64, u64),
    Leave(u64),
    Own(u64),
}

/// What a batch did to one conversation: shared by every recipient.
struct ConvBatch<'e> {
    conversation_id: &'e str,
    /// The kind was decided `feed` in this batch: every member hears of it.
    became_feed: bool,
    start_head: u64,
    /// The index's `since` when the conversation is read-diffused for the whole batch.
    read_since: Option<u64>,
    /// Countable, not recalled seqs sent in the batch (none while read-diffused: they go to the index).
    countable: SeqSet,
    /// The seqs of `countable` with `mention_all`.
    mention_all: SeqSet,
    /// Per user: the seqs of `countable` (or, read-diffused, of the index) that mention the user by name and not
    /// everyone.
    mentioned: Map<&'e str, SeqSet>,
    /// Per user whose membership changed or who sent: marks in order.
    timeline: Map<&'e str, Vec<Mark>>,
    /// Every effective recall of the batch (seq at or below the head when it arrived).
    recalls: SeqSet,
    /// v3, a conversation with a ttl: the seqs of `countable` by the UTC day they expire.
    expiry: BTreeMap<i64, SeqSet>,
    /// v3: the creation in this batch gave a ttl to messages sent before it: their expiry, for every member.
    retro_expiry: Vec<(i64, SeqSet)>,
    /// v4: the countable, not recalled replies sent in the batch (never in `countable`).
    replies: SeqSet,
    /// v4: every reply sent in the batch (countable or not) → its thread's root.
    roots: BTreeMap<u64, u64>,
    /// v4: the seqs of `replies` with `mention_all`.
    reply_all: SeqSet,
    /// v4: per user, the seqs of `replies` that name the user and not everyone.
    reply_named: Map<&'e str, SeqSet>,
    /// v4: per user, every seq sent in the batch that names the user (countable or not, main or reply).
    named: Map<&'e str, SeqSet>,
    /// v4: the messages whose reactions changed in the batch.
    reacted: BTreeSet<u64>,
    /// v4: the team was decided in this batch: every member hears of it.
    team_decided: bool,
}

impl FanOut {
    /// An empty fan-out (no conversation known), read-diffusing from [`crate::core::hybrid::DEFAULT_THRESHOLD`]
    /// members.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty fan-out with the given read-diffusion policy.
    pub fn with_diffusion(diffusion: Diffusion) -> Self {
        Self { diffusion, ..Self::default() }
    }

    /// Whether it holds no conversation and no broadcast list (as a partition that was never checkpointed).
    pub fn is_empty(&self) -> bool {
        self.conversations.is_empty() && self.lists.is_empty()
    }

    /// The state of one conversation, if it has had any event.
    pub fn conversation(&self, conversation_id: &str) -> Option<&ConversationState> {
        self.conversations.get(conversation_id)
    }

    /// Puts back a conversation's state, e.g. loaded from a checkpoint.
    pub fn restore(&mut self, conversation_id: String, state: ConversationState) {
        self.indexed += usize::from(state.index.is_some());
        let old = self.conversations.insert(conversation_id, state);
        self.indexed -= usize::from(old.is_some_and(|c| c.index.is_some()));
    }

    /// Every conversation's state.
    pub fn conversations(&self) -> impl Iterator<Item = (&String, &ConversationState)> {
        self.conversations.iter()
    }

    /// Every broadcast list's state, by id.
    pub fn lists(&self) -> &Map<String, ListState> {
        &self.lists
    }

    /// One broadcast list's state, if it has had any event.
    pub fn list(&self, broadcast_id: &str) -> Option<&ListState> {
        self.lists.get(broadcast_id)
    }

    /// Puts back a list's state, e.g. loaded from a checkpoint.
    pub fn restore_list(&mut self, broadcast_id: String, state: ListState) {
        self.lists.insert(broadcast_id, state);
    }

    /// Every list and index whole, as the ops that rebuild each from empty (for a projection that lost them).
    pub fn whole_shared(&self) -> Vec<(ListId, Vec<ListOp>)> {
        let lists = self.lists.iter().map(|(id, l)| (ListId::Broadcast(id.clone()), l.whole_ops()));
        let indexes = self
            .conversations
            .iter()
            .filter_map(|(id, c)| Some((ListId::Index(id.clone()), c.index.as_ref()?.whole_ops())));
        lists.chain(indexes).collect()
    }

    /// Whether anything is kept once in Redis: a broadcast list or a read-diffused conversation's index.
    pub fn has_shared(&self) -> bool {
        !self.lists.is_empty() || self.indexed > 0
    }

    /// Whether list or index changes wait to be taken.
    pub fn has_list_ops(&self) -> bool {
        !self.list_ops.is_empty()
    }

    /// v4: the replies sent since the last call, per conversation: (reply, its thread's root), ascending (what
    /// the read receipts of replies look up).
    pub fn take_new_replies(&mut self) -> Map<String, Vec<(u64, u64)>> {
        std::mem::take(&mut self.new_replies)
    }

    /// The list and index changes since the last call, in order (what the projection applies to its copy).
    pub fn take_list_ops(&mut self) -> Vec<(ListId, ListOp)> {
        crate::core::lists::last_buckets_only(std::mem::take(&mut self.list_ops))
    }

    /// Applies a batch of conversation events (each conversation's in partition order) and returns the
    /// per-recipient deltas: for each conversation in order of first appearance, one delta per affected user
    /// (members at the start of the batch by user id, then other users by user id). Deterministic.
    pub fn process_batch<'e, I>(&mut self, events: I) -> (Vec<Delta>, BatchStats)
    where
        I: IntoIterator<Item = &'e ConversationEvent>,
    {
        let mut stats = BatchStats::default();
        let mut batches: Vec<ConvBatch<'e>> = Vec::new();
        let mut index: Map<&'e str, usize> = Map::default();
        let mut deltas = Vec::new();
        for event in events {
            let (cid, event) = match event.addressed() {
                Addressed::Conversation(cid, event) => (cid, event),
                Addressed::Broadcast(bid, event) => {
                    // Broadcasts are never fanned out: the list changes once, whatever the number of readers.
                    if let Some(op) = self.lists.entry_ref(bid).or_default().apply(event) {
                        self.list_ops.push((ListId::Broadcast(bid.to_owned()), op));
                    }
                    continue;
                }
            };
            let state = self.conversations.entry_ref(cid).or_default();
            let b = *index.entry(cid).or_insert_with(|| {
                batches.push(ConvBatch::start(cid, state));
                batches.len() - 1
            });
            batches[b].apply(state, event, &mut stats, &mut self.list_ops);
            if let Some(op) = switch(self.diffusion, cid, state, event, &mut self.list_ops) {
                let to_read = matches!(op, DeltaOp::ReadDiffusion { .. });
                self.indexed = if to_read { self.indexed + 1 } else { self.indexed - 1 };
                (stats.to_read, stats.to_write) =
                    (stats.to_read + u64::from(to_read), stats.to_write + u64::from(!to_read));
                // The switch happens at this event: what came before is emitted with the old diffusion.
                batches[b].emit(state, &self.diffusion, &mut deltas);
                note_replies(&mut self.new_replies, &batches[b]);
                switch_deltas(cid, state, op, &mut deltas);
                batches[b] = ConvBatch::start(cid, state);
            }
        }
        for batch in &batches {
            batch.emit(&self.conversations[batch.conversation_id], &self.diffusion, &mut deltas);
            note_replies(&mut self.new_replies, batch);
        }
        (deltas, stats)
    }
}

impl Lists for FanOut {
    fn unread_above(&self, broadcast_id: &str, cursor: u64) -> u64 {
        self.lists.get(broadcast_id).map_or(0, |l| l.unread_above(cursor))
    }

    fn index_counts(&self, conversation_id: &str, query: &ShareQuery) -> (u64, u64) {
        let index = self.conversations.get(conversation_id).and_then(|c| c.index.as_ref());
        index.map_or((0, 0), |i| i.counts(query))
    }

    fn index_first(&self, conversation_id: &str, query: &ShareQuery) -> Option<u64> {
        self.conversations.get(conversation_id)?.index.as_ref()?.first(query)
    }
}

/// Adds the replies of `batch` to `new_replies` ([`FanOut::take_new_replies`]).
fn note_replies(new_replies: &mut Map<String, Vec<(u64, u64)>>, batch: &ConvBatch<'_>) {
    if !batch.roots.is_empty() {
        let replies = new_replies.entry_ref(batch.conversation_id).or_default();
        replies.extend(batch.roots.iter().map(|(seq, root)| (*seq, *root)));
    }
}

/// The diffusion switch `event` causes, if any (only membership changes do): the op every member receives. Updates
/// the conversation's index and records the index's [`ListOp::Clear`].
fn switch(
    diffusion: Diffusion,
    conversation_id: &str,
    state: &mut ConversationState,
    event: ConversationOp<'_>,
    list_ops: &mut Vec<(ListId, ListOp)>,
) -> Option<DeltaOp> {
    if matches!(event, ConversationOp::Sent(_) | ConversationOp::Recalled(_)) {
        return None;
    }
    let clear = (ListId::Index(conversation_id.to_owned()), ListOp::Clear);
    match &state.index {
        None if diffusion.to_read(state.members.len()) => {
            state.index = Some(ConvIndex::new(state.head));
            list_ops.push(clear);
            Some(DeltaOp::ReadDiffusion { since: state.head })
        }
        Some(_) if diffusion.to_write(state.members.len()) => {
            let index = state.index.take().expect("matched Some");
            list_ops.push(clear);
            let expiry = index.expiry.into_iter().collect();
            Some(DeltaOp::WriteDiffusion { unread: index.live, mentions: index.mention_all, expiry })
        }
        _ => None,
    }
}

/// The conversation's id and team as every delta of one batch shares them: one copy each, not one a delta.
fn batch_names(conversation_id: &str, state: &ConversationState) -> (Arc<str>, Option<Arc<str>>) {
    (conversation_id.into(), state.team.as_deref().map(Arc::from))
}

/// One delta per current member with the switch's op.
fn switch_deltas(conversation_id: &str, state: &ConversationState, op: DeltaOp, out: &mut Vec<Delta>) {
    let feed = state.kind == Some(ConversationKind::Feed);
    let (conversation_id, team) = batch_names(conversation_id, state);
    out.extend(state.members.keys().map(|user| Delta {
        user_id: user.clone(),
        conversation_id: conversation_id.clone(),
        ops: vec![op.clone()],
        feed,
        source: None,
        team: team.clone(),
    }));
}

/// A Messages op for every member split in two: (its main timeline, its replies), each `None` when empty. The
/// expiry buckets go with the seqs they hold.
fn split_replies(all: DeltaOp) -> (Option<DeltaOp>, Option<DeltaOp>) {
    let DeltaOp::Messages { unread, mentions, read_to, expiry, own, threads } = all else { return (Some(all), None) };
    let held = |seqs: &SeqSet| buckets_holding(expiry.iter().map(|(day, bucket)| (day, bucket)), seqs);
    let replies = (!threads.is_empty()).then(|| DeltaOp::Messages {
        unread: SeqSet::new(),
        mentions: SeqSet::new(),
        read_to: 0,
        expiry: held(&thread_seqs(&threads, SeqSet::new())),
        own: SeqSet::new(),
        threads,
    });
    let main = (!unread.is_empty() || !mentions.is_empty() || read_to > 0).then(|| DeltaOp::Messages {
        expiry: held(&unread),
        unread,
        mentions,
        read_to,
        own,
        threads: BTreeMap::new(),
    });
    (main, replies)
}

/// `seqs` and every run's unread replies, in one set.
fn thread_seqs(threads: &BTreeMap<u64, ThreadRun>, mut seqs: SeqSet) -> SeqSet {
    for run in threads.values() {
        seqs.union_above(&run.unread, 0);
    }
    seqs
}

/// Of the expiry buckets `expiry` (day, seqs), those that hold some of `seqs`, with only those seqs.
fn buckets_holding<'a>(expiry: impl IntoIterator<Item = (&'a i64, &'a SeqSet)>, seqs: &SeqSet) -> Vec<(i64, SeqSet)> {
    let buckets = expiry.into_iter().map(|(day, bucket)| (*day, bucket.intersection(seqs)));
    buckets.filter(|(_, b)| !b.is_empty()).collect()
}

impl<'e> ConvBatch<'e> {
    fn start(conversation_id: &'e str, state: &ConversationState) -> Self {
        Self {
            conversation_id,
            became_feed: false,
            read_since: state.index.as_ref().map(|i| i.since),
            start_head: state.head,
            countable: SeqSet::new(),
            mention_all: SeqSet::new(),
            mentioned: Map::default(),
            timeline: Map::default(),
            recalls: SeqSet::new(),
            expiry: BTreeMap::new(),
            retro_expiry: Vec::new(),
            replies: SeqSet::new(),
            roots: BTreeMap::new(),
            reply_all: SeqSet::new(),
            reply_named: Map::default(),
            named: Map::default(),
            reacted: BTreeSet::new(),
            team_decided: false,
        }
    }

    fn join(&mut self, state: &mut ConversationState, user: &'e str) {
        if !state.members.contains_key(user) {
            state.members.insert(user.to_owned(), state.head);
            self.timeline.entry(user).or_default().push(Mark::Join(state.head, state.reaction_head));
        }
    }

    fn apply(
        &mut self,
        state: &mut ConversationState,
        event: ConversationOp<'e>,
        stats: &mut BatchStats,
        list_ops: &mut Vec<(ListId, ListOp)>,
    ) {
        match event {
            ConversationOp::Created(e) => {
                // The first conversation.created decides the kind (`CONTRACT.md` § v2, "Kind").
                if state.kind.is_none() {
                    (state.kind, state.ttl_days, state.team) = (Some(e.kind), e.unread_ttl_days, e.team.clone());
                    self.team_decided = e.team.is_some();
                    let days = std::mem::take(&mut state.uncreated_days);
                    if let Some(ttl) = e.unread_ttl_days {
                        // ttl is at most 3,650 (the decoder's bound).
                        let retro: Vec<(i64, SeqSet)> =
                            days.into_iter().map(|(day, seqs)| (day + ttl as i64, seqs)).collect();
                        if let Some(index) = &mut state.index {
                            let id = ListId::Index(self.conversation_id.to_owned());
                            list_ops.extend(index.retag(&retro).into_iter().map(|op| (id.clone(), op)));
                        }
                        self.retro_expiry.extend(retro);
                    }
                    self.became_feed = e.kind == ConversationKind::Feed;
                }
                for m in &e.members {
                    self.join(state, m);
                }
            }
            ConversationOp::Joined(e) => self.join(state, &e.user_id),
            ConversationOp::Left(e) => {
                if state.members.remove(&e.user_id).is_some() {
                    self.timeline.entry(&e.user_id).or_default().push(Mark::Leave(state.head));
                }
            }
            ConversationOp::Sent(e) => {
                if e.seq <= state.head {
                    stats.duplicate_messages += 1;
                    return;
                }
                let root = state.thread_of(e.thread_root);
                state.head = e.seq;
                state.sent.insert(e.seq);
                self.timeline.entry(&e.sender_id).or_default().push(Mark::Own(e.seq));
                for m in &e.mentions {
                    self.named.entry(m).or_default().insert(e.seq);
                }
                match root {
                    Some(root) => self.reply_sent(state, e, root),
                    None if e.countable => self.countable_sent(state, e, list_ops),
                    None => {}
                }
            }
            ConversationOp::Recalled(e) if e.seq > state.head => stats.early_recalls += 1,
            ConversationOp::Recalled(e) => self.recalled(state, e.seq, list_ops),
            ConversationOp::Reaction(e, added) => {
                if state.react(e, added) {
                    self.reacted.insert(e.seq);
                }
            }
        }
    }

    /// v4: a reply in the thread of `root` (`CONTRACT.md` § v4, "Threads"): never in the conversation's counts, but
    /// in its thread's, for every member; its expiry as a message's.
    fn reply_sent(&mut self, state: &mut ConversationState, e: &'e MessageSent, root: u64) {
        state.roots.insert(e.seq, root);
        self.roots.insert(e.seq, root);
        if !e.countable {
            return;
        }
        if let Some(day) = state.kind.is_none().then(|| expiry_day(&e.occurred_at, 0)).flatten() {
            state.uncreated_days.entry(day).or_default().insert(e.seq);
        }
        self.replies.insert(e.seq);
        if e.mention_all {
            self.reply_all.insert(e.seq);
        } else {
            for m in &e.mentions {
                self.reply_named.entry(m).or_default().insert(e.seq);
            }
        }
        if let Some(day) = state.ttl_days.and_then(|ttl| expiry_day(&e.occurred_at, ttl)) {
            self.expiry.entry(day).or_default().insert(e.seq);
        }
    }

    /// A countable message above the head: into the index (read-diffused) or this batch's countable seqs; its named
    /// mentions, unless it mentions everyone, per user.
    fn countable_sent(
        &mut self,
        state: &mut ConversationState,
        e: &'e MessageSent,
        list_ops: &mut Vec<(ListId, ListOp)>,
    ) {
        // The decoder refused an occurred_at that does not parse, so None cannot happen here.
        let expires = state.ttl_days.and_then(|ttl| expiry_day(&e.occurred_at, ttl));
        if let Some(day) = state.kind.is_none().then(|| expiry_day(&e.occurred_at, 0)).flatten() {
            state.uncreated_days.entry(day).or_default().insert(e.seq);
        }
        if let Some(index) = &mut state.index {
            let id = ListId::Index(self.conversation_id.to_owned());
            list_ops.extend(index.add(e.seq, e.mention_all, expires).into_iter().map(|op| (id.clone(), op)));
        } else {
            self.countable.insert(e.seq);
            if e.mention_all {
                self.mention_all.insert(e.seq);
            }
            if let Some(day) = expires {
                self.expiry.entry(day).or_default().insert(e.seq);
            }
        }
        if !e.mention_all {
            for m in &e.mentions {
                self.mentioned.entry(m).or_default().insert(e.seq);
            }
        }
    }

    /// A recall of `seq`, at or below the head.
    fn recalled(&mut self, state: &mut ConversationState, seq: u64, list_ops: &mut Vec<(ListId, ListOp)>) {
        if state.sent.remove(seq) {
            state.recalled.insert(seq);
        }
        if state.reactions.remove(&seq).is_some() {
            self.reacted.insert(seq);
        }
        if seq > self.start_head {
            // Sent in this batch: this batch's Messages ops never carry it.
            self.countable.remove(seq);
            self.mention_all.remove(seq);
            self.replies.remove(seq);
            self.reply_all.remove(seq);
            for set in self.reply_named.values_mut() {
                set.remove(seq);
            }
            for set in self.expiry.values_mut() {
                set.remove(seq);
            }
            for set in self.mentioned.values_mut() {
                set.remove(seq);
            }
        }
        match &mut state.index {
            // Read-diffused since before it was sent: only the index ever held it (a reply is never in it).
            Some(index) if seq > index.since && !state.roots.contains_key(&seq) => {
                let id = ListId::Index(self.conversation_id.to_owned());
                list_ops.extend(index.remove(seq).into_iter().map(|op| (id.clone(), op)));
            }
            // Emitted even when sent in this batch: a fan-out that crashed after producing an earlier batching of
            // these events may already have delivered the message.
            _ => {
                self.recalls.insert(seq);
            }
        }
    }

    /// The Messages op for a membership interval: messages with seq in `above+1 ..= upto` but the user's own
    /// (`own`, whose highest main-timeline seq is the op's `read_to`), and per thread its replies (v4). Messages
    /// below the user's own are sent too: the fold keeps them as read history, which "unread from here" counts
    /// again (`CONTRACT.md` § v3). With `apart` (the batch's replies go in a delta for every member), the op keeps
    /// only the threads the user replied in or is named in: any other reaches the user from that delta if it has a
    /// stake, else from the fold's shared replies.
    fn messages(&self, user: &str, above: u64, upto: u64, own: &SeqSet, apart: bool) -> Option<DeltaOp> {
        let mut unread = self.countable.slice(above, upto);
        let mut mentions = self.mention_all.slice(above, upto);
        if let Some(named) = self.mentioned.get(user) {
            mentions.union_above(&named.slice(above, upto), above);
        }
        unread.remove_all(own);
        mentions.remove_all(own);
        let mut threads = self.own_runs(own);
        let named_roots = if apart { self.named_roots(user) } else { Vec::new() };
        // Apart, a user with no reply of its own and not named in one takes none of the batch's replies here.
        let replies = match apart && threads.is_empty() && named_roots.is_empty() {
            true => SeqSet::new(),
            false => self.replies.slice(above, upto),
        };
        for seq in replies.iter().filter(|seq| !own.contains(*seq)) {
            let root = self.roots[&seq];
            // `threads` holds the threads of the user's own replies, and those it is named in once one is met.
            if apart && !threads.contains_key(&root) && named_roots.binary_search(&root).is_err() {
                continue;
            }
            let run = threads.entry(root).or_default();
            run.unread.insert(seq);
            if self.reply_all.contains(seq) || self.reply_named.get(user).is_some_and(|n| n.contains(seq)) {
                run.mentions.insert(seq);
            }
        }
        let read_to = self.main_read_to(own);
        if unread.is_empty() && mentions.is_empty() && read_to == 0 && threads.is_empty() {
            return None;
        }
        let expiry = buckets_holding(&self.expiry, &thread_seqs(&threads, unread.clone()));
        Some(DeltaOp::Messages { unread, mentions, read_to, expiry, own: own.clone(), threads })
    }

    /// The highest main-timeline seq of `own`, 0 for none: a reply moves its thread's cursor, not the
    /// conversation's (`CONTRACT.md` § v4).
    fn main_read_to(&self, own: &SeqSet) -> u64 {
        own.iter().filter(|seq| !self.roots.contains_key(seq)).max().unwrap_or(0)
    }

    /// Per thread, the highest reply of `own` in it (v4: the thread's cursor moves, and its sender follows it).
    fn own_runs(&self, own: &SeqSet) -> BTreeMap<u64, ThreadRun> {
        let mut runs: BTreeMap<u64, ThreadRun> = BTreeMap::new();
        for seq in own.iter() {
            if let Some(root) = self.roots.get(&seq) {
                let run = runs.entry(*root).or_default();
                run.read_to = run.read_to.max(seq);
            }
        }
        runs
    }

    /// The op of a user's own messages sent while not a member (`CONTRACT.md` § Semantics: only its cursors move).
    fn own_op(&self, own: &SeqSet) -> DeltaOp {
        DeltaOp::Messages {
            unread: SeqSet::new(),
            mentions: SeqSet::new(),
            read_to: self.main_read_to(own),
            expiry: Vec::new(),
            own: own.clone(),
            threads: self.own_runs(own),
        }
    }

    /// v4: the seqs of the batch that name `user`, with the threads of the replies among them.
    fn named_op(&self, user: &str) -> Option<DeltaOp> {
        let seqs = self.named.get(user)?;
        Some(DeltaOp::Named { seqs: seqs.clone(), threads: self.named_roots(user) })
    }

    /// v4: the roots of the threads of the batch's replies that name `user`, ascending, each once.
    fn named_roots(&self, user: &str) -> Vec<u64> {
        let seqs = self.named.get(user).into_iter().flat_map(|seqs| seqs.iter());
        let mut roots: Vec<u64> = seqs.filter_map(|seq| self.roots.get(&seq).copied()).collect();
        roots.sort_unstable();
        roots.dedup();
        roots
    }

    /// Whether `user` was a member at the start of the batch, from its first membership mark in the batch (a
    /// join: no; a leave: yes) or, without one, from the membership at the end (`state`).
    fn was_member(&self, state: &ConversationState, user: &str) -> bool {
        let first = self.timeline.get(user).and_then(|m| m.iter().find(|m| !matches!(m, Mark::Own(_))));
        match first {
            Some(Mark::Join(..)) => false,
            Some(Mark::Leave(_)) => true,
            _ => state.members.contains_key(user),
        }
    }

    /// The members at the start of the batch who may get a delta, without copying the membership: those still
    /// members (by id), then those who left during the batch (by id). All of them when the batch has something for
    /// every member (`everyone`); otherwise only those it names (marks or mentions), so a batch of joins to a
    /// read-diffused conversation of a million members costs the joiners, not the million.
    fn start_members<'s>(&'s self, state: &'s ConversationState, everyone: bool) -> Vec<&'s str> {
        let mut members: Vec<&str> = match everyone {
            true => state.members.keys().map(String::as_str).filter(|u| self.was_member(state, u)).collect(),
            false => {
                let named = self.timeline.keys().chain(self.named.keys()).copied();
                let mut named: Vec<&str> =
                    named.filter(|u| state.members.contains_key(*u) && self.was_member(state, u)).collect();
                named.sort_unstable();
                named.dedup();
                named
            }
        };
        let mut left: Vec<&str> = self
            .timeline
            .keys()
            .copied()
            .filter(|u| !state.members.contains_key(*u) && self.was_member(state, u))
            .collect();
        left.sort_unstable();
        members.extend(left);
        members
    }

    fn emit(&self, state: &ConversationState, diffusion: &Diffusion, out: &mut Vec<Delta>) {
        let (end_head, feed) = (state.head, state.kind == Some(ConversationKind::Feed));
        let shares = diffusion.shares(state.members.len());
        // The batch's replies go in a delta for every member (`shared_ops`).
        let apart = !feed && (self.read_since.is_some() || shares);
        let (shared, reactions, for_members) = self.shared_ops(state, shares);
        let (conversation_id, team) = batch_names(self.conversation_id, state);
        let delta = |user: &str, ops: Vec<DeltaOp>| Delta {
            user_id: user.to_owned(),
            conversation_id: conversation_id.clone(),
            ops,
            feed,
            source: None,
            team: team.clone(),
        };
        let decided = self.became_feed || self.team_decided;
        // What every user's delta starts with (the batch's recalls, then what names the user) and ends with.
        let first = |user: &str| -> Vec<DeltaOp> {
            let recalled = (!self.recalls.is_empty()).then(|| DeltaOp::Recalled { seqs: self.recalls.clone() });
            recalled.into_iter().chain(self.named_op(user)).collect()
        };
        let last = |user: &str, ops: &mut Vec<DeltaOp>| {
            self.add_retro_expiry(state, user, ops);
            ops.extend(reactions.clone());
        };
        let everyone = shared.is_some()
            || !self.recalls.is_empty()
            || decided
            || !self.retro_expiry.is_empty()
            || reactions.is_some();
        for user in self.start_members(state, everyone) {
            let mut ops = first(user);
            match self.timeline.get(user) {
                Some(marks) => self.walk(user, Some(self.start_head), marks, end_head, apart, &mut ops),
                None if self.named.contains_key(user) => {
                    ops.extend(self.messages(user, self.start_head, end_head, &SeqSet::new(), apart))
                }
                None => ops.extend(shared.clone()),
            }
            last(user, &mut ops);
            if !ops.is_empty() || decided {
                out.push(delta(user, ops));
            }
        }
        // Users who were not members at the start: those with marks (joins, own messages), and, v4, those only
        // named (their naming makes them follow threads, member or not).
        let marked = self.timeline.keys().copied().filter(|u| !self.was_member(state, u));
        let named =
            self.named.keys().copied().filter(|u| !self.timeline.contains_key(u) && !state.members.contains_key(*u));
        let mut others: Vec<&str> = marked.chain(named).collect();
        others.sort_unstable();
        for user in others {
            let mut ops = first(user);
            if let Some(marks) = self.timeline.get(user) {
                self.walk(user, None, marks, end_head, apart, &mut ops);
            }
            last(user, &mut ops);
            if !ops.is_empty() {
                out.push(delta(user, ops));
            }
        }
        if !for_members.is_empty() {
            out.push(Delta { team: None, ..delta("", for_members) });
        }
    }

    /// What the batch has for every member: (the op each member's delta carries, the reactions op each member's
    /// delta ends with, the ops of the delta for every member). Replies and reactions concern only the threads'
    /// followers and the messages' senders: in a read-diffused conversation, and in a write-diffused one of at least
    /// `shared_from` members ([`Diffusion::shares`]), they go once to each fold in a delta for every member
    /// ([`Delta::is_for_members`]), which the fold gives only to the members with a stake in them. Read-diffused,
    /// the batch's messages are in the index, so that delta is all a member without marks gets. None in a feed,
    /// where replies and reactions count nowhere.
    fn shared_ops(&self, state: &ConversationState, shares: bool) -> (Option<DeltaOp>, Option<DeltaOp>, Vec<DeltaOp>) {
        let feed = state.kind == Some(ConversationKind::Feed);
        let all = self.messages("", self.start_head, state.head, &SeqSet::new(), false);
        let reactions = (!self.reacted.is_empty()).then(|| DeltaOp::Reactions {
            summaries: self.reacted.iter().map(|seq| state.reaction_summary(*seq)).collect(),
        });
        match self.read_since {
            Some(_) if feed => (None, None, Vec::new()),
            Some(_) => (None, None, all.into_iter().chain(reactions).collect()),
            None if !feed && shares => {
                let (main, replies) = all.map_or((None, None), split_replies);
                (main, None, replies.into_iter().chain(reactions).collect())
            }
            None => (all, reactions, Vec::new()),
        }
    }

    /// A member at the end of the batch gets the expiry a creation gave to messages sent before it (the fold keeps
    /// the buckets of the seqs it holds).
    fn add_retro_expiry(&self, state: &ConversationState, user: &str, ops: &mut Vec<DeltaOp>) {
        if !self.retro_expiry.is_empty() && state.members.contains_key(user) {
            ops.push(DeltaOp::Expiry { expiry: self.retro_expiry.clone() });
        }
    }

    /// Turns one user's marks into ops. `member_from` is the head from which the user is a member (None: not a
    /// member) at the start of the batch; `apart` as for [`ConvBatch::messages`].
    fn walk(
        &self,
        user: &str,
        mut member_from: Option<u64>,
        marks: &[Mark],
        end_head: u64,
        apart: bool,
        ops: &mut Vec<DeltaOp>,
    ) {
        let mut own = SeqSet::new();
        for mark in marks {
            match *mark {
                Mark::Own(seq) => {
                    own.insert(seq);
                }
                Mark::Leave(head) => {
                    if let Some(from) = member_from.take() {
                        ops.extend(self.messages(user, from, head, &own, apart));
                        own.clear();
                        ops.push(DeltaOp::Left);
                    }
                }
                Mark::Join(head, reactions) => {
                    if member_from.is_none() {
                        if !own.is_empty() {
                            ops.push(self.own_op(&own));
                            own.clear();
                        }
                        ops.push(DeltaOp::Joined { head, reactions });
                        ops.extend(self.read_since.map(|since| DeltaOp::ReadDiffusion { since }));
                        member_from = Some(head);
                    }
                }
            }
        }
        match member_from {
            Some(from) => ops.extend(self.messages(user, from, end_head, &own, apart)),
            None if !own.is_empty() => ops.push(self.own_op(&own)),
            None => {}
        }
    }
}
