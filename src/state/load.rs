//! Loading checkpointed state: one partition's under a fresh lease (what a stage's task starts from), or a whole
//! namespace's from checkpoint rows (replay), and the shared lists and indexes that views built from the
//! checkpoint combine with each user's state.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::offsets::{FoldNext, Input, Offsets};
use super::{StateError, StateResult};
use crate::checkpoint::store::{Acquired, CheckpointStore, MemberRow, NoteRow, ReplyRow, StateRow, TimedStateRow};
use crate::checkpoint::Stage;
use crate::core::broadcast::SharedLists;
use crate::core::delta::Fence;
use crate::core::fanout::{ConversationState, FanOut};
use crate::core::fold::Fold;
use crate::core::hybrid::Diffusion;
use crate::core::notifications::{Note, NoteBook};
use crate::partitioner::Placement;
use crate::state::codec;
use crate::state::commit::FanOutKey;
use crate::state::partition::{FanOutPartition, FoldPartition};
use crate::topology::Topics;

/// A fan-out restored from checkpoint rows.
pub struct RestoredFanOut {
    /// Its conversations (with their members) and broadcast lists.
    pub fanout: FanOut,
    /// The conversations whose rows (versions 1 to 5) still hold their members, and those members: the next
    /// checkpoint that covers them writes the conversation's row without its members and the members' own rows,
    /// in one transaction. Until then a load takes the members from the old row (and from member rows, if any).
    pub rewrite: Vec<FanOutKey>,
}

/// A partition's lease, taken: what loading its state requires, so that the state is always read under it.
///
/// The lease comes first: from then on the previous owner cannot commit, so the offset and the state read next
/// are one checkpoint, whichever order (or connections) they are read in. (Read the other way round, a commit in
/// between gave a state newer than its offset: re-processing a leave and a rejoin on it moved the member's join
/// head forward and lost its unread.)
///
/// The store's [`Acquired`]: the generation taken and, for a fan-out, the previous owner to fence, if any.
pub type Lease = Acquired;

/// Takes `stage`'s partition `p` lease as `owner` (bumps its generation), writing with Kafka's
/// `transactional_id` (a fan-out's producer; `None` for the fold).
///
/// Errors: PostgreSQL failing.
pub async fn lease(
    store: &CheckpointStore,
    stage: Stage,
    p: i32,
    owner: &str,
    transactional_id: Option<&str>,
) -> StateResult<Lease> {
    Ok(store.acquire_as(stage, p, owner, transactional_id).await?)
}

/// Longest [`lease_if_held`] waits for the previous incarnation's drain of a partition: 2 s, what a SIGTERM's
/// drain is allowed (issue 23).
pub const DRAIN_WAIT: Duration = Duration::from_secs(2);
/// How often [`lease_if_held`] looks again meanwhile: 10 ms.
const DRAIN_POLL: Duration = Duration::from_millis(10);

/// Takes `stage`'s partition `p` lease as `owner` only if an owner named `{prefix}…` holds it now (a static
/// member's previous incarnation): `None` when another process took it since. `transactional_id` as in
/// [`lease`].
///
/// While that owner drains the partition (its lease marked draining at its SIGTERM and not yet released by the
/// task's clean stop), waits for the drain, looking every [`DRAIN_POLL`], up to [`DRAIN_WAIT`]. Taking the lease
/// before would fence the drain's last checkpoint, and the fan-out's producer initialized while the old one's
/// transaction is open meets `CONCURRENT_TRANSACTIONS` until the coordinator has aborted it. A previous
/// incarnation that crashed left no mark: nothing to wait for.
///
/// Errors: PostgreSQL failing.
pub async fn lease_if_held(
    store: &CheckpointStore,
    stage: Stage,
    p: i32,
    prefix: &str,
    owner: &str,
    transactional_id: Option<&str>,
) -> StateResult<Option<Lease>> {
    let (started, mut waited) = (Instant::now(), false);
    loop {
        let waited_out = started.elapsed() >= DRAIN_WAIT;
        if let Some(acquired) = store.acquire_held(stage, p, prefix, owner, waited_out, transactional_id).await? {
            if waited {
                let ms = started.elapsed().as_millis() as u64;
                tracing::info!(%stage, partition = p, ms, waited_out, "lease taken after the previous incarnation's drain");
            }
            return Ok(Some(acquired));
        }
        if waited_out {
            return Ok(None);
        }
        if !store.draining(stage, p, prefix).await? {
            // Not (or no longer) draining: the drain may have ended since the try above, so one more.
            return Ok(store.acquire_held(stage, p, prefix, owner, false, transactional_id).await?);
        }
        tokio::time::sleep(DRAIN_POLL).await;
        waited = true;
    }
}

/// Loads fan-out partition `p`'s offset and state under `lease` (its four queries at once, on the pool's
/// connections).
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn fanout_partition(
    store: &CheckpointStore,
    topics: &Topics,
    p: i32,
    lease: Lease,
    diffusion: Diffusion,
) -> StateResult<FanOutPartition> {
    let topic = Input::ConversationEvents.topic(topics);
    let (next, rows, members, lists) = tokio::try_join!(
        store.offset(Stage::FanOut, topic, p),
        store.states(Stage::FanOut, Some(p)),
        store.members(Some(p)),
        store.lists(Some(p)),
    )?;
    let RestoredFanOut { fanout, rewrite } = fanout_from_rows(rows, members, lists, diffusion)?;
    Ok(FanOutPartition::new(p, lease.generation, next.unwrap_or(0), fanout, rewrite))
}

/// Loads fold partition `p`'s offsets, users and fence under `lease` (its queries at once).
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn fold_partition(
    store: &CheckpointStore,
    topics: &Topics,
    p: i32,
    lease: Lease,
) -> StateResult<FoldPartition> {
    let (next, rows, notes, fences, replies) = tokio::try_join!(
        FoldNext::load(store, topics, p),
        store.states(Stage::Fold, Some(p)),
        store.notes(Some(p)),
        store.fences(p),
        store.replies(Some(p)),
    )?;
    let (fold, fence) = (fold_from_rows(rows, notes, replies)?, Fence::from_rows(fences));
    Ok(FoldPartition::new(p, lease.generation, next, fold, fence))
}

/// Every conversation and list of the namespace's fan-out, one restored fan-out per partition of `placement` (a
/// resumed replay).
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn whole_fanout(
    store: &CheckpointStore,
    diffusion: Diffusion,
    placement: Placement,
) -> StateResult<Vec<RestoredFanOut>> {
    let (rows, members) = (store.states(Stage::FanOut, None).await?, store.members(None).await?);
    fanouts_from_rows(rows, members, store.lists(None).await?, diffusion, placement)
}

/// Every user of the namespace's fold, one fold per partition of `placement` (a resumed replay).
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn whole_fold(store: &CheckpointStore, placement: Placement) -> StateResult<Vec<Fold>> {
    let (users, notes, replies) = (store.states(Stage::Fold, None), store.notes(None), store.replies(None));
    let (users, notes, replies) = tokio::try_join!(users, notes, replies)?;
    folds_from_rows(users, notes, replies, placement)
}

/// Both stages' checkpointed offsets of a namespace (a resumed replay).
///
/// Errors: PostgreSQL failing.
pub async fn all_offsets(store: &CheckpointStore, topics: &Topics) -> StateResult<Offsets> {
    let mut rows = store.offsets(Stage::FanOut).await?;
    rows.extend(store.offsets(Stage::Fold).await?);
    Ok(Offsets::from_rows(topics, rows))
}

/// A fan-out from checkpoint rows of conversations, their members and broadcast lists.
///
/// Errors: a corrupt row; a member row whose conversation has no row, or who joined above its head.
pub fn fanout_from_rows(
    conversations: Vec<StateRow>,
    members: Vec<MemberRow>,
    lists: Vec<StateRow>,
    diffusion: Diffusion,
) -> StateResult<RestoredFanOut> {
    let mut by_conversation: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for m in members {
        by_conversation.entry(m.conversation_id).or_default().push((m.user_id, m.joined_head as u64));
    }
    let (mut fanout, mut rewrite) = (FanOut::with_diffusion(diffusion), Vec::new());
    for row in conversations {
        let (state, inline) = conversation_from_rows(&row, by_conversation.remove(&row.id).unwrap_or_default())?;
        if inline {
            rewrite.push(FanOutKey::Conversation(row.id.clone()));
            rewrite.extend(state.members.keys().map(|u| FanOutKey::Member(row.id.clone(), u.clone())));
        }
        fanout.restore(row.id, state);
    }
    if let Some(id) = by_conversation.into_keys().next() {
        let orphan = codec::CheckpointError::Inconsistent("member rows without their conversation's row".into());
        return Err(StateError::corrupt(&id)(orphan));
    }
    for row in lists {
        let state = codec::decode_list(&row.state).map_err(StateError::corrupt(&row.id))?;
        fanout.restore_list(row.id, state);
    }
    Ok(RestoredFanOut { fanout, rewrite })
}

/// One conversation's checkpointed fan-out state with its row (partition, bytes, commit time), its member rows read
/// at the same time; `None` when the checkpoint has no state for it. For `inspect` and the refill of receipts.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn conversation(
    store: &CheckpointStore,
    conversation_id: &str,
) -> StateResult<Option<(TimedStateRow, ConversationState)>> {
    let (row, members) =
        tokio::try_join!(store.state_row(Stage::FanOut, conversation_id), store.members_of(conversation_id))?;
    let Some(row) = row else { return Ok(None) };
    let members = members.into_iter().map(|m| (m.user_id, m.joined_head as u64)).collect();
    let (state, _) = conversation_from_rows(&row.row, members)?;
    Ok(Some((row, state)))
}

/// One conversation from its checkpoint row and its member rows ((user, join head)), checked; and whether the row
/// held its members itself (versions 1 to 5: the next checkpoint covering it moves them to rows of their own).
///
/// Errors: a corrupt row, or a member who joined above the head.
pub fn conversation_from_rows(row: &StateRow, members: Vec<(String, u64)>) -> StateResult<(ConversationState, bool)> {
    let mut state = codec::decode_conversation(&row.state).map_err(StateError::corrupt(&row.id))?;
    let inline = !state.members.is_empty();
    match inline {
        true => state.members.extend(members),
        false => state.members = members.into_iter().collect(), // sorted and built in bulk
    }
    codec::check_conversation(&state).map_err(StateError::corrupt(&row.id))?;
    Ok((state, inline))
}

/// A fold from checkpoint rows of users, their remembered notifications and the partition's replies of
/// read-diffused conversations.
///
/// Errors: a corrupt row.
pub fn fold_from_rows(users: Vec<StateRow>, notes: Vec<NoteRow>, replies: Vec<ReplyRow>) -> StateResult<Fold> {
    let mut by_user = notes_by_user(notes)?;
    let mut fold = Fold::new();
    for row in users {
        let mut state = codec::decode_user(&row.state).map_err(StateError::corrupt(&row.id))?;
        state.set_notes(NoteBook::restore(by_user.remove(&row.id).unwrap_or_default()));
        fold.restore(row.id, state);
    }
    for row in replies {
        let id = format!("{}/{}", row.conversation_id, row.chunk);
        let kept = codec::decode_replies(&row.state).map_err(StateError::corrupt(&id))?;
        fold.restore_replies(&row.conversation_id, kept);
    }
    Ok(fold)
}

/// [`fanout_from_rows`] split by partition: the rows of each conversation (with its members) and list go to the
/// partition `placement` puts its id in. Returns one restored fan-out per partition (replay).
///
/// Errors: as [`fanout_from_rows`].
pub fn fanouts_from_rows(
    conversations: Vec<StateRow>,
    members: Vec<MemberRow>,
    lists: Vec<StateRow>,
    diffusion: Diffusion,
    placement: Placement,
) -> StateResult<Vec<RestoredFanOut>> {
    let n = placement.partitions as usize;
    let (mut c, mut m, mut l) = (vec![Vec::new(); n], vec![Vec::new(); n], vec![Vec::new(); n]);
    conversations.into_iter().for_each(|r| c[placement.of(r.id.as_bytes()) as usize].push(r));
    members.into_iter().for_each(|r| m[placement.of(r.conversation_id.as_bytes()) as usize].push(r));
    lists.into_iter().for_each(|r| l[placement.of(r.id.as_bytes()) as usize].push(r));
    let parts = c.into_iter().zip(m).zip(l);
    parts.map(|((c, m), l)| fanout_from_rows(c, m, l, diffusion)).collect()
}

/// [`fold_from_rows`] split by partition: each user's row and notes go to the partition `placement` puts the user
/// in, and each row of replies to the partition that wrote it (a replay reads the source's topics, so both have
/// the same partitions). Returns one fold per partition (replay).
///
/// Errors: a corrupt row.
pub fn folds_from_rows(
    users: Vec<StateRow>,
    notes: Vec<NoteRow>,
    replies: Vec<ReplyRow>,
    placement: Placement,
) -> StateResult<Vec<Fold>> {
    let n = placement.partitions as usize;
    let (mut u, mut t, mut r) = (vec![Vec::new(); n], vec![Vec::new(); n], vec![Vec::new(); n]);
    users.into_iter().for_each(|row| u[placement.of(row.id.as_bytes()) as usize].push(row));
    notes.into_iter().for_each(|row| t[placement.of(row.user_id.as_bytes()) as usize].push(row));
    replies.into_iter().for_each(|row| r[row.partition.rem_euclid(n as i32) as usize].push(row));
    u.into_iter().zip(t).zip(r).map(|((u, t), r)| fold_from_rows(u, t, r)).collect()
}

/// Remembered notifications' rows decoded and grouped by user.
///
/// Errors: a corrupt row.
pub fn notes_by_user(notes: Vec<NoteRow>) -> StateResult<HashMap<String, Vec<(String, Note)>>> {
    let mut by_user: HashMap<String, Vec<(String, Note)>> = HashMap::new();
    for row in notes {
        let id = format!("{}/{}", row.user_id, row.notification_id);
        let note = codec::decode_note(&row.state).map_err(StateError::corrupt(&id))?;
        by_user.entry(row.user_id).or_default().push((row.notification_id, note));
    }
    Ok(by_user)
}

/// Every broadcast list of the checkpoint, and the index of every read-diffused conversation among
/// `conversations` (all conversations for `None`): what views built from the checkpoint combine with each user's
/// state.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn shared_lists(store: &CheckpointStore, conversations: Option<&[String]>) -> StateResult<SharedLists> {
    let mut shared = SharedLists::default();
    for row in store.lists(None).await? {
        let state = codec::decode_list(&row.state).map_err(StateError::corrupt(&row.id))?;
        shared.lists.insert(row.id, state);
    }
    let rows = match conversations {
        Some([]) => Vec::new(),
        Some(ids) => store.states_of(Stage::FanOut, ids).await?,
        None => store.states(Stage::FanOut, None).await?,
    };
    for row in rows {
        let state = codec::decode_conversation(&row.state).map_err(StateError::corrupt(&row.id))?;
        shared.indexes.extend(state.index.map(|index| (row.id, index)));
    }
    Ok(shared)
}
