//! The one commit protocol of partition state, used by both stages and by replay: Redis writes (version-guarded)
//! → the partition's marker (after a whole rewrite) → one PostgreSQL transaction with the changed rows and the
//! next offsets, under the partition's lease.
//!
//! Redis goes first so that a crash between the two leaves Redis ahead of the checkpoint, never behind: the task
//! restarted from the checkpoint rewrites those users, and the version guard refuses what would go backwards
//! (docs/guarantees.md). Whatever must precede the commit (the fan-out's delivery acks and Kafka commit) is the
//! caller's pre-commit step, done before [`commit`].

use std::time::{Duration, Instant};

use super::offsets::Input;
use super::retry::retry;
use super::StateResult;
use crate::checkpoint::store::{Changes, CheckpointStore};
use crate::checkpoint::Stage;
use crate::core::contract::{ConversationEvent, Target};
use crate::core::fanout::FanOut;
use crate::core::fold::Fold;
use crate::metrics::Metrics;
use crate::projection::redis::{ListWrite, RedisProjection, SentWrite, UserWrite, WriteOutcome};
use crate::projection::ProjectionError;
use crate::state::codec;
use crate::topology::Topics;

/// What partition state is committed to: a namespace's topics (for the offsets' names), its checkpoint store and
/// projection, and the metrics commits count into.
#[derive(Clone, Copy)]
pub struct Home<'a> {
    /// The namespace's topics.
    pub topics: &'a Topics,
    /// The namespace's checkpoint store.
    pub store: &'a CheckpointStore,
    /// The namespace's projection.
    pub projection: &'a RedisProjection,
    /// Where retries and commits are counted.
    pub metrics: &'a Metrics,
}

/// What a commit writes to Redis before its checkpoint.
#[derive(Debug, Default)]
pub enum RedisWrites {
    /// Nothing (a fan-out partition without lists or indexes).
    #[default]
    Nothing,
    /// Users' hashes (the fold).
    Users(Vec<UserWrite>),
    /// Broadcast lists and read-diffused conversations' indexes, and conversations' sent seqs (receipts, v3): the
    /// fan-out's.
    Lists(Vec<ListWrite>, Vec<SentWrite>),
}

/// One partition's commit.
#[derive(Debug)]
pub struct Commit {
    /// Whose partition.
    pub stage: Stage,
    /// The partition number.
    pub partition: i32,
    /// The lease generation the committing task holds.
    pub generation: i64,
    /// The Redis writes, applied first.
    pub redis: RedisWrites,
    /// Whether the writes rewrote the partition's whole projection: its marker is set after them.
    pub mark: bool,
    /// The changed rows of the checkpoint.
    pub changes: Changes,
    /// The next offsets of the partition's inputs.
    pub offsets: Vec<(Input, i64)>,
}

impl Commit {
    /// The next offsets as the store and the consumer name them: (topic, next offset).
    pub fn named_offsets<'t>(&self, topics: &'t Topics) -> Vec<(&'t str, i64)> {
        self.offsets.iter().map(|(input, next)| (input.topic(topics), *next)).collect()
    }
}

/// Commits `c`: [`publish`]es its Redis writes, then writes PostgreSQL, each retried while its failure is transient
/// (60 s at most).
///
/// Errors: Redis or PostgreSQL still failing after retries; [`crate::checkpoint::store::StoreError::Fenced`] when
/// another task took the lease (Redis may then hold writes the guard accepted: the successor's are newer and win).
pub async fn commit(home: Home<'_>, c: &Commit) -> StateResult<()> {
    publish(home, c.stage, c.partition, &c.redis, c.mark).await?;
    checkpoint(home, c).await?;
    Ok(())
}

/// The PostgreSQL half of a commit: its changed rows and next offsets in one transaction under the partition's
/// lease, retried while the failure is transient (60 s at most). Returns the time it took. Run after the commit's
/// [`publish`], so Redis is never behind the checkpoint.
///
/// Errors: PostgreSQL still failing after retries; [`crate::checkpoint::store::StoreError::Fenced`] when another
/// task took the lease.
pub async fn checkpoint(home: Home<'_>, c: &Commit) -> StateResult<Duration> {
    let offsets = c.named_offsets(home.topics);
    let started = Instant::now();
    retry(home.metrics, "postgres", || home.store.commit(c.stage, c.partition, c.generation, &c.changes, &offsets))
        .await?;
    let (rows, bytes) = c.changes.size();
    home.metrics.checkpoint_rows(rows, bytes);
    Ok(started.elapsed())
}

/// The key of what a fan-out checkpoint writes: a conversation's row, one of its members' rows, or a broadcast
/// list's.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FanOutKey {
    /// A conversation (`fanout_conversations`).
    Conversation(String),
    /// A member of a conversation, (conversation, user) (`fanout_members`): written when it joins or leaves.
    Member(String, String),
    /// A broadcast list (`fanout_lists`).
    List(String),
}

impl FanOutKey {
    /// The key of an event's target.
    pub fn of(target: Target<'_>) -> Self {
        match target {
            Target::Conversation(id) => FanOutKey::Conversation(id.to_owned()),
            Target::Broadcast(id) => FanOutKey::List(id.to_owned()),
        }
    }

    /// What an event may change: its target, and the members a creation, join or leave names.
    pub fn of_event(event: &ConversationEvent) -> impl Iterator<Item = FanOutKey> + '_ {
        let users: &[String] = match event {
            ConversationEvent::Created(e) => &e.members,
            ConversationEvent::Joined(e) => std::slice::from_ref(&e.user_id),
            ConversationEvent::Left(e) => std::slice::from_ref(&e.user_id),
            _ => &[],
        };
        let conversation = event.key();
        let members = users.iter().map(move |u| FanOutKey::Member(conversation.to_owned(), u.clone()));
        std::iter::once(Self::of(event.target())).chain(members)
    }

    /// The conversation or list id (a member's conversation).
    pub fn id(&self) -> &str {
        match self {
            FanOutKey::Conversation(id) | FanOutKey::Member(id, _) | FanOutKey::List(id) => id,
        }
    }
}

/// The keys of every member of every conversation of `fanout`: a checkpoint of them rewrites the member rows
/// whole (a replay seeded from a snapshot).
pub fn all_members(fanout: &FanOut) -> Vec<FanOutKey> {
    let each = fanout.conversations().flat_map(|(id, c)| c.members.keys().map(move |u| (id, u)));
    each.map(|(id, u)| FanOutKey::Member(id.clone(), u.clone())).collect()
}

/// The sent-seqs write (read receipts) of conversation `id`, marked new when it was first seen since the last commit
/// (in `created`: the write marks its receipts keys complete), with every reply when `whole` (a write into a
/// namespace that may have none), else none (the caller adds those sent since its last write).
pub fn sent_of(
    id: &str,
    c: &crate::core::fanout::ConversationState,
    created: &std::collections::HashSet<String>,
    whole: bool,
) -> SentWrite {
    let write = if whole { SentWrite::whole(id, c) } else { SentWrite::of(id, c) };
    SentWrite { new: created.contains(id), ..write }
}

/// What a fan-out checkpoint writes for the changed conversations, members and lists.
pub fn fanout_changes<'a>(fanout: &FanOut, dirty: impl IntoIterator<Item = &'a FanOutKey>) -> Changes {
    let mut changes = Changes::default();
    for key in dirty {
        match key {
            FanOutKey::List(id) => {
                changes.lists.extend(fanout.list(id).map(|l| (id.clone(), Some(codec::encode_list(l)))));
            }
            FanOutKey::Conversation(id) => {
                let c = fanout.conversation(id).map(codec::encode_conversation);
                changes.states.extend(c.map(|c| (id.clone(), Some(c))));
            }
            FanOutKey::Member(id, user) => {
                let joined = fanout.conversation(id).and_then(|c| c.members.get(user).copied());
                changes.members.push(((id.clone(), user.clone()), joined));
            }
        }
    }
    changes
}

/// What a fold checkpoint writes for `users`: each user's own row (deleted when nothing is kept), the remembered
/// notifications that changed since the last commit, and the chunks of replies that changed (both taken from the
/// fold; an empty chunk is deleted).
pub fn fold_changes<'a>(fold: &mut Fold, users: impl IntoIterator<Item = &'a String>) -> Changes {
    let mut changes = Changes::default();
    for user in users {
        changes.states.push((user.clone(), fold.user(user).map(|s| codec::encode_user(s, fold.shared_replies()))));
        let Some(state) = fold.user_mut_existing(user) else { continue };
        for id in state.notes_mut().take_dirty() {
            let note = state.notes().note(&id).map(codec::encode_note);
            changes.notes.push(((user.clone(), id), note));
        }
    }
    for (id, chunk) in fold.take_changed_replies() {
        let mut replies = fold.replies_of(&id).into_iter().flat_map(|r| r.chunk(chunk)).peekable();
        let row = replies.peek().is_some().then(|| codec::encode_replies(replies));
        changes.replies.push(((id, chunk), row));
    }
    changes
}

/// The Redis half of a commit, also run alone between commits to make changes visible sooner (the fold's
/// publish, [`crate::service::task`]): `redis`, then partition `p`'s marker when `mark` (the writes were whole).
/// Returns the users whose patch found no base (their hash expired, `--projection-ttl`, or a reader refilled it
/// from the checkpoint: [`crate::projection::redis::WRITE_TEMPLATE`]): the caller writes them whole next. Retried
/// while Redis fails (60 s at most).
///
/// Writes are version-guarded, so a publish ahead of the checkpoint is safe: a task restarted from an older
/// checkpoint re-derives the same states and the guard refuses what would go backwards (docs/guarantees.md).
///
/// Errors: Redis still failing after retries.
pub async fn publish(
    home: Home<'_>,
    stage: Stage,
    p: i32,
    redis: &RedisWrites,
    mark: bool,
) -> StateResult<Vec<String>> {
    let m = home.metrics;
    let outcome = retry(m, "redis", || async {
        let r = match redis {
            RedisWrites::Nothing => WriteOutcome::default(),
            RedisWrites::Users(w) => home.projection.write(w).await?,
            RedisWrites::Lists(w, sent) => {
                home.projection.write_sent(sent).await?;
                let (written, refused) = home.projection.write_lists(w).await?;
                WriteOutcome { written, refused, whole: Vec::new() }
            }
        };
        if mark {
            home.projection.set_marker(stage, p).await?;
        }
        Ok::<_, ProjectionError>(r)
    })
    .await?;
    if outcome.refused > 0 {
        let refused = outcome.refused;
        tracing::warn!(%stage, partition = p, refused, "projection refused older writes (another task is ahead)");
    }
    if matches!(redis, RedisWrites::Users(_)) {
        m.redis_writes(outcome.written);
        m.projection_whole(outcome.whole.len());
    }
    Ok(outcome.whole)
}
