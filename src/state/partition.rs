//! One partition's state of each stage between commits: [`FanOutPartition`] and [`FoldPartition`].
//!
//! A live task of [`crate::service`] owns one, loaded under its lease ([`super::load`]); a replay owns one per
//! partition of each input and routes each record to the partition the input producers' partitioner put its key in
//! ([`crate::kafka::Placement`]), as the broker did. Either applies records in partition order, says what changed,
//! and takes its [`Commit`]; [`super::commit`] carries a commit to Redis and PostgreSQL. The owner keeps what is
//! its own: Kafka (records, dead letters, transactions), the lease checks and when to commit.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::checkpoint::Stage;
use crate::core::broadcast::{ListId, ListOp};
use crate::core::contract::{ConversationEvent, UserEvent};
use crate::core::delta::{Delta, Fence};
use crate::core::fanout::{BatchStats, FanOut};
use crate::core::fold::Fold;
use crate::projection::redis::{ListWrite, ReceiptWrite, SentWrite, UserWrite};
use crate::state::commit::{fanout_changes, fold_changes, sent_of, Commit, FanOutKey, RedisWrites};
use crate::state::{FoldNext, Input};

/// What a commit or publish writes to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// What changed since the last write, as patches and ops (a live task whose Redis holds its partition).
    Changes,
    /// Each changed user, conversation, list and index whole (replay, into a namespace it alone writes).
    ChangedWhole,
    /// Everything of the partition whole: Redis lost its projection (no marker).
    All,
}

impl Write {
    /// Whether the write is whole, so the partition's marker is set after it.
    pub fn marks(self) -> bool {
        self != Write::Changes
    }
}

/// A fan-out partition's state: its conversations and broadcast lists, the next offset of its
/// `unread.conversation-events` partition, and what changed since its last commit.
pub struct FanOutPartition {
    /// The partition number.
    pub partition: i32,
    /// The lease generation its owner holds.
    pub generation: i64,
    /// The next offset of its input partition: every record before it is applied (or dead-lettered).
    pub next: i64,
    fanout: FanOut,
    /// The conversations, members and lists changed since the last commit.
    dirty: HashSet<FanOutKey>,
    /// The conversations first seen since the last commit (not in the checkpointed state): their sent-seqs write
    /// marks their receipts keys complete ([`SentWrite::new`]).
    created: HashSet<String>,
}

impl FanOutPartition {
    /// Partition `partition`'s state under lease `generation`, from `next`; `rewrite`: what its first commit must
    /// write even unchanged ([`super::load::RestoredFanOut::rewrite`]).
    pub fn new(partition: i32, generation: i64, next: i64, fanout: FanOut, rewrite: Vec<FanOutKey>) -> Self {
        let (dirty, created) = (rewrite.into_iter().collect(), HashSet::new());
        Self { partition, generation, next, fanout, dirty, created }
    }

    /// Its conversations and lists.
    pub fn fanout(&self) -> &FanOut {
        &self.fanout
    }

    /// Marks everything it holds changed: its first commit writes all of it (a replay seeded from a snapshot).
    pub fn mark_all_changed(&mut self) {
        let conversations = self.fanout.conversations().map(|(id, _)| FanOutKey::Conversation(id.clone()));
        let lists = self.fanout.lists().keys().map(|id| FanOutKey::List(id.clone()));
        let mut all: Vec<FanOutKey> = conversations.chain(lists).collect();
        all.extend(crate::state::commit::all_members(&self.fanout));
        self.dirty.extend(all);
    }

    /// Fans out a batch of decoded events, in partition order: the per-recipient deltas
    /// ([`FanOut::process_batch`]) and the batch's figures.
    pub fn apply(&mut self, events: &[ConversationEvent]) -> (Vec<Delta>, BatchStats) {
        for event in events {
            for key in FanOutKey::of_event(event) {
                if let FanOutKey::Conversation(id) = &key {
                    if self.fanout.conversation(id).is_none() {
                        self.created.insert(id.clone());
                    }
                }
                self.dirty.insert(key);
            }
        }
        self.fanout.process_batch(events)
    }

    /// Whether a commit has anything to write to Redis: something changed, or lists or indexes are kept (a Redis
    /// that lost them gets them whole).
    pub fn has_redis_writes(&self) -> bool {
        !self.dirty.is_empty() || self.fanout.has_shared() || self.fanout.has_list_ops()
    }

    /// Whether list or index changes wait to be written.
    pub fn has_list_ops(&self) -> bool {
        self.fanout.has_list_ops()
    }

    /// The list and index changes since the last write, grouped per list: what a publish between commits writes,
    /// so that a broadcast or a read-diffused conversation's message is visible before the next commit.
    pub fn take_list_writes(&mut self) -> Vec<ListWrite> {
        list_writes(self.fanout.take_list_ops(), self.generation)
    }

    /// The Redis writes of a commit ([`Write`]): lists and indexes (their ops, or whole) and the changed
    /// conversations' sent seqs (receipts, v4: with the replies sent since the last write, or every reply).
    pub fn redis_writes(&mut self, write: Write) -> RedisWrites {
        let generation = self.generation;
        let ops = self.fanout.take_list_ops();
        let mut replies = self.fanout.take_new_replies();
        let lists = match write {
            Write::Changes => list_writes(ops, generation),
            Write::ChangedWhole => {
                let touched: HashSet<ListId> = ops.into_iter().map(|(list, _)| list).collect();
                self.dirty.iter().filter_map(|key| self.whole_list(key, &touched)).collect()
            }
            Write::All => {
                let whole = |(list, ops)| ListWrite { list, generation, ops, replace: true };
                self.fanout.whole_shared().into_iter().map(whole).collect()
            }
        };
        let sent: Vec<SentWrite> = match write {
            Write::All => self.fanout.conversations().map(|(id, c)| sent_of(id, c, &self.created, true)).collect(),
            Write::ChangedWhole | Write::Changes => self
                .changed_conversations()
                .map(|(id, c)| match write {
                    Write::Changes => SentWrite {
                        replies: replies.remove(id).unwrap_or_default(),
                        ..sent_of(id, c, &self.created, false)
                    },
                    _ => sent_of(id, c, &HashSet::new(), true),
                })
                .collect(),
        };
        match lists.is_empty() && sent.is_empty() && !write.marks() {
            true => RedisWrites::Nothing,
            false => RedisWrites::Lists(lists, sent),
        }
    }

    /// The commit of what changed since the last one: `redis` first, then the changed rows with the next offset.
    pub fn take_commit(&mut self, redis: RedisWrites, mark: bool) -> Commit {
        let changes = fanout_changes(&self.fanout, self.dirty.iter());
        let offsets = vec![(Input::ConversationEvents, self.next)];
        let (stage, partition, generation) = (Stage::FanOut, self.partition, self.generation);
        Commit { stage, partition, generation, redis, mark, changes, offsets }
    }

    /// Its last commit is durable: nothing is changed any more.
    pub fn committed(&mut self) {
        self.dirty.clear();
        self.created.clear();
    }

    fn changed_conversations(&self) -> impl Iterator<Item = (&String, &crate::core::fanout::ConversationState)> {
        self.dirty.iter().filter_map(|k| match k {
            FanOutKey::Conversation(id) => self.fanout.conversation(id).map(|c| (id, c)),
            _ => None,
        })
    }

    /// The whole write of a changed broadcast list, or of a changed conversation's index (an index emptied when
    /// its conversation switched back); `None` for a conversation whose index did not change.
    fn whole_list(&self, key: &FanOutKey, touched: &HashSet<ListId>) -> Option<ListWrite> {
        let (list, ops) = match key {
            FanOutKey::List(id) => (ListId::Broadcast(id.clone()), self.fanout.list(id)?.whole_ops()),
            FanOutKey::Conversation(id) if touched.contains(&ListId::Index(id.clone())) => {
                let index = self.fanout.conversation(id).and_then(|c| c.index.as_ref());
                (ListId::Index(id.clone()), index.map(|i| i.whole_ops()).unwrap_or_default())
            }
            FanOutKey::Conversation(_) | FanOutKey::Member(..) => return None,
        };
        Some(ListWrite { list, generation: self.generation, ops, replace: true })
    }
}

/// The list and index ops grouped per list, each list's in order.
fn list_writes(ops: Vec<(ListId, ListOp)>, generation: i64) -> Vec<ListWrite> {
    let mut by_list: Vec<ListWrite> = Vec::new();
    let mut index: HashMap<ListId, usize> = HashMap::new();
    for (list, op) in ops {
        let i = *index.entry(list.clone()).or_insert_with(|| {
            by_list.push(ListWrite { list, generation, ops: Vec::new(), replace: false });
            by_list.len() - 1
        });
        by_list[i].ops.push(op);
    }
    by_list
}

/// A fold partition's state: its users, the next offsets of its two input partitions, its fence against zombie
/// deltas, and which users changed since their last publish and since the last commit.
pub struct FoldPartition {
    /// The partition number.
    pub partition: i32,
    /// The lease generation its owner holds.
    pub generation: i64,
    /// The next offsets of `unread.user-events` and `unread.user-deltas`: the owner moves them past each record.
    pub next: FoldNext,
    /// Its users with their remembered notifications.
    pub fold: Fold,
    /// The fence against zombie deltas, checkpointed with the offsets.
    pub fence: Fence,
    /// user → conversations changed since the last publish.
    unpublished: HashMap<String, BTreeSet<String>>,
    /// Users of `unpublished` whose last patch found no hash to patch (expired or refilled): written whole next.
    whole: HashSet<String>,
    /// Users changed since the last commit.
    uncommitted: HashSet<String>,
}

impl FoldPartition {
    /// Partition `partition`'s state under lease `generation`.
    pub fn new(partition: i32, generation: i64, next: FoldNext, fold: Fold, fence: Fence) -> Self {
        let (unpublished, whole, uncommitted) = (HashMap::new(), HashSet::new(), HashSet::new());
        Self { partition, generation, next, fold, fence, unpublished, whole, uncommitted }
    }

    /// Marks every user changed: the next write and commit carry all of them (a replay seeded from a snapshot).
    pub fn mark_all_changed(&mut self) {
        let users: Vec<String> = self.fold.users().map(|(u, _)| u.clone()).collect();
        for user in users {
            if let Some(state) = self.fold.user_mut_existing(&user) {
                state.notes_mut().mark_all_dirty();
            }
            self.changed(&user, None);
        }
        self.fold.mark_all_replies_changed();
    }

    /// Folds a user event.
    pub fn apply_event(&mut self, e: &UserEvent) {
        self.changed(e.user_id(), e.conversation_id());
        self.fold.apply_user_event(e);
    }

    /// Folds deltas, in order.
    pub fn apply_deltas(&mut self, deltas: &[Delta]) {
        for d in deltas {
            if d.is_for_members() {
                for user in self.fold.apply_for_members(d) {
                    self.changed(&user, Some(&d.conversation_id));
                }
                continue;
            }
            self.changed(&d.user_id, Some(&d.conversation_id));
            self.fold.apply_delta(d);
        }
    }

    /// Whether a user changed since the last publish.
    pub fn has_unpublished(&self) -> bool {
        !self.unpublished.is_empty()
    }

    /// Whether a user waits to be written whole (its patch found no hash).
    pub fn has_whole(&self) -> bool {
        !self.whole.is_empty()
    }

    /// The users' writes of a publish or commit ([`Write`]): each user changed since the last publish, as a patch of
    /// its changed conversations (whole when its last patch found no hash), or whole.
    pub fn writes(&self, write: Write) -> Vec<UserWrite> {
        let version = self.next.version(self.generation);
        let mut writes = Vec::with_capacity(self.unpublished.len());
        if write == Write::All {
            let users = self.fold.users().count();
            tracing::warn!(
                partition = self.partition,
                users,
                "Redis lacks this partition's projection: rewriting all its users"
            );
            writes.extend(self.fold.users().map(|(user, state)| UserWrite::of_state(user, Some(state), version)));
        }
        for (user, conversations) in &self.unpublished {
            let state = self.fold.user(user);
            if write == Write::All && state.is_some() {
                continue;
            }
            if write == Write::ChangedWhole {
                writes.push(UserWrite::of_state(user, state, version));
            } else if self.whole.contains(user) {
                // Whole, plus the receipts of the own seqs changed since the patch that was not applied.
                let mut write = UserWrite::of_state(user, state, version);
                write.receipts.extend(ReceiptWrite::changed(state, conversations));
                writes.push(write);
            } else {
                writes.push(UserWrite::patch_of_state(user, state, version, conversations));
            }
        }
        writes
    }

    /// What was unpublished is in Redis: forgets it (and the own seqs' changes the receipts were written from), but
    /// keeps the users in `whole`, whose patch found no hash, to write them whole next.
    pub fn published(&mut self, whole: Vec<String>) {
        self.whole = whole.into_iter().collect();
        for user in self.unpublished.keys().filter(|u| !self.whole.contains(*u)) {
            if let Some(state) = self.fold.user_mut_existing(user) {
                state.take_own_changes();
            }
        }
        self.unpublished.retain(|user, _| self.whole.contains(user));
    }

    /// The commit of the users changed since the last one, with the fence's changes and both next offsets:
    /// `redis` first ([`Self::writes`]).
    pub fn take_commit(&mut self, redis: RedisWrites, mark: bool) -> Commit {
        let mut changes = fold_changes(&mut self.fold, self.uncommitted.iter());
        changes.fences = self.fence.take_changed();
        let (partition, generation, offsets) = (self.partition, self.generation, self.next.pairs().to_vec());
        Commit { stage: Stage::Fold, partition, generation, redis, mark, changes, offsets }
    }

    /// Its last commit is durable; `whole`: the users whose patch in it found no hash.
    pub fn committed(&mut self, whole: Vec<String>) {
        self.published(whole);
        self.uncommitted.clear();
    }

    /// `user`'s `conversation` (or only the user) changed. Allocates only for what is new (this runs once per
    /// delta).
    fn changed(&mut self, user: &str, conversation: Option<&str>) {
        if !self.uncommitted.contains(user) {
            self.uncommitted.insert(user.to_owned());
        }
        let unpublished = match self.unpublished.get_mut(user) {
            Some(set) => set,
            None => self.unpublished.entry(user.to_owned()).or_default(),
        };
        if let Some(c) = conversation.filter(|c| !unpublished.contains(*c)) {
            unpublished.insert(c.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::core::contract::{decode, Event};
    use crate::core::hybrid::Diffusion;

    fn events(lines: &[&str]) -> Vec<ConversationEvent> {
        let decoded = lines.iter().map(|l| decode(l.as_bytes()).unwrap());
        decoded.map(|e| if let Event::Conversation(c) = e { c } else { panic!("{e:?}") }).collect()
    }

    fn sent(redis: &RedisWrites) -> Vec<&SentWrite> {
        let RedisWrites::Lists(_, sent) = redis else { panic!("{redis:?}") };
        sent.iter().collect()
    }

    /// The three write modes of a fan-out partition: what changed (with the replies new since the last write),
    /// each changed conversation whole, or every conversation whole; and a commit forgets what it covered.
    #[test]
    fn a_fan_out_partition_writes_what_changed_or_whole_and_forgets_it_once_committed() {
        const T: &str = r#""occurred_at":"2026-11-22T00:00:00Z""#;
        let created = |id: &str| {
            format!(
                r#"{{"type":"conversation.created","event_id":"{id}#0",{T},"conversation_id":"{id}","kind":"group","members":["a","b"]}}"#
            )
        };
        let msg = |id: &str, seq: u64, root: &str| {
            format!(
                r#"{{"type":"message.sent","event_id":"{id}#{seq}",{T},"conversation_id":"{id}","seq":{seq},"sender_id":"a","mentions":[]{root}}}"#
            )
        };
        let mut p = FanOutPartition::new(0, 3, 0, FanOut::with_diffusion(Diffusion::OFF), Vec::new());
        let first = [created("x"), msg("x", 1, ""), msg("x", 2, r#","thread_root":1"#), created("y"), msg("y", 1, "")];
        let (deltas, _) = p.apply(&events(&first.iter().map(String::as_str).collect::<Vec<_>>()));
        assert!(deltas.iter().any(|d| d.user_id == "b" && &*d.conversation_id == "x"));
        let redis = p.redis_writes(Write::Changes);
        let mut writes = sent(&redis);
        writes.sort_by(|a, b| a.conversation_id.cmp(&b.conversation_id));
        assert_eq!(
            writes.iter().map(|w| (w.conversation_id.as_str(), w.new)).collect::<Vec<_>>(),
            [("x", true), ("y", true)]
        );
        assert_eq!(writes[0].replies, [(2, 1)], "the reply sent since the last write");
        let commit = p.take_commit(redis, false);
        assert_eq!(commit.changes.states.len(), 2);
        assert_eq!(commit.offsets, [(Input::ConversationEvents, 0)]);
        assert_eq!((commit.stage, commit.partition, commit.generation), (Stage::FanOut, 0, 3));
        p.committed();
        assert!(!p.has_redis_writes(), "nothing changed and nothing shared");

        p.next = 6;
        p.apply(&events(&[msg("x", 3, r#","thread_root":1"#).as_str()]));
        let changes = p.redis_writes(Write::Changes);
        let only_x: Vec<_> =
            sent(&changes).iter().map(|w| (w.conversation_id.clone(), w.new, w.replies.clone())).collect();
        assert_eq!(only_x, [("x".to_owned(), false, vec![(3, 1)])], "only x, not new, with its new reply");
        p.apply(&events(&[msg("x", 4, "").as_str()]));
        let whole = p.redis_writes(Write::ChangedWhole);
        assert_eq!(sent(&whole).iter().map(|w| w.replies.clone()).collect::<Vec<_>>(), [vec![(2, 1), (3, 1)]]);
        let all = p.redis_writes(Write::All);
        assert_eq!(sent(&all).len(), 2, "every conversation");
        assert!(Write::All.marks() && Write::ChangedWhole.marks() && !Write::Changes.marks());
        assert_eq!(p.take_commit(all, true).offsets, [(Input::ConversationEvents, 6)]);
    }

    /// A read-diffused conversation's replies reach a fold partition once, in a delta for every member: the root's
    /// author counts them at once, a member without a stake only when it follows the thread, and after a restart
    /// from the partition's checkpoint too, whose row of replies carries those no member's row was rewritten with.
    #[test]
    fn replies_for_every_member_reach_those_with_a_stake_and_survive_a_restart_in_their_own_row() {
        const T: &str = r#""occurred_at":"2026-11-22T00:00:00Z""#;
        let reply = |seq: u64| {
            format!(
                r#"{{"type":"message.sent","event_id":"m{seq}",{T},"conversation_id":"x","seq":{seq},"sender_id":"b","mentions":[],"thread_root":1}}"#
            )
        };
        let first = [
            format!(
                r#"{{"type":"conversation.created","event_id":"c",{T},"conversation_id":"x","kind":"group","members":["a","b","c"]}}"#
            ),
            format!(
                r#"{{"type":"message.sent","event_id":"m1",{T},"conversation_id":"x","seq":1,"sender_id":"a","mentions":[]}}"#
            ),
            reply(2),
        ];
        let mut fanout =
            FanOutPartition::new(0, 1, 0, FanOut::with_diffusion(Diffusion::from_threshold(2)), Vec::new());
        let mut fold = FoldPartition::new(0, 1, FoldNext::default(), Fold::new(), Fence::default());
        let (deltas, _) = fanout.apply(&events(&first.iter().map(String::as_str).collect::<Vec<_>>()));
        fold.apply_deltas(&deltas);
        let mut states: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut commit = |fold: &mut FoldPartition| {
            let changes = fold.take_commit(RedisWrites::Nothing, false).changes;
            fold.committed(Vec::new());
            states.extend(changes.states.iter().map(|(id, s)| (id.clone(), s.clone().unwrap())));
            changes
        };
        commit(&mut fold);
        let (deltas, _) = fanout.apply(&events(&[reply(3).as_str()]));
        assert_eq!(deltas.iter().filter(|d| d.is_for_members()).count(), 1, "{deltas:?}");
        assert!(deltas.iter().all(|d| d.user_id != "c"), "c has no delta of its own: {deltas:?}");
        fold.apply_deltas(&deltas);
        let threads = |fold: &Fold, user: &str| fold.view(user, &crate::core::broadcast::NoLists).threads;
        assert_eq!(threads(&fold.fold, "a")["x"][&1].unread, 2, "the root's author follows its thread");
        assert!(threads(&fold.fold, "c").is_empty(), "c has no stake");
        let changes = commit(&mut fold);
        assert!(changes.states.iter().all(|(user, _)| user != "c") && changes.replies.len() == 1, "{changes:?}");
        // A reply in another chunk of seqs: only that chunk's row is written.
        let (far, _) = fanout.apply(&events(&[reply(crate::core::threads::CHUNK + 7).as_str()]));
        fold.apply_deltas(&far);
        let far = commit(&mut fold).replies;
        assert_eq!(far.iter().map(|(key, _)| key.clone()).collect::<Vec<_>>(), [("x".to_owned(), 1)]);
        let row = |(id, state): (&String, &Vec<u8>)| crate::checkpoint::store::StateRow {
            id: id.clone(),
            partition: 0,
            state: state.clone(),
        };
        let reply_row = |((id, chunk), state): &((String, u64), Option<Vec<u8>>)| crate::checkpoint::store::ReplyRow {
            partition: 0,
            conversation_id: id.clone(),
            chunk: *chunk as i64,
            state: state.clone().unwrap(),
        };
        let follow = decode(
            br#"{"type":"thread.followed","event_id":"f",
            "occurred_at":"2026-11-22T00:00:01Z","user_id":"c","conversation_id":"x","thread_root":1,"followed":true}"#,
        )
        .unwrap();
        let Event::User(follow) = follow else { panic!("{follow:?}") };
        let replies: Vec<_> = changes.replies.iter().chain(&far).map(reply_row).collect();
        // Without the reply rows, c counts none: a user's row leaves the replies of a conversation with reply rows
        // to those rows, written in the same commit.
        for (replies, expected) in [(replies, 3), (Vec::new(), 0)] {
            let users = states.iter().map(row).collect();
            let mut restored = crate::state::load::fold_from_rows(users, Vec::new(), replies).unwrap();
            restored.apply_user_event(&follow);
            assert_eq!(threads(&restored, "c").get("x").map_or(0, |t| t[&1].unread), expected);
        }
    }
}
