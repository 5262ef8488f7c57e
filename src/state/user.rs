//! One reader of users' checkpointed state: each user's decoded state with its fold partition and the projection
//! version of its checkpoint, from which a view (with the checkpoint's shared lists) and a Redis write follow. The
//! API's degraded reads, `verify`, `projection rebuild` and `inspect` all read users through here, and so does the
//! refill of a conversation's expired read receipts ([`receipts`]).

use chrono::{DateTime, Utc};

use super::load::shared_lists;
use super::offsets::CheckpointVersions;
use super::FoldNext;
use super::{StateError, StateResult};
use crate::checkpoint::store::{CheckpointStore, StateRow};
use crate::checkpoint::Stage;
use crate::core::broadcast::Lists;
use crate::core::contract::UserView;
use crate::core::fold::UserState;
use crate::projection::ranges_value;
use crate::projection::redis::{ReceiptsRefill, UserWrite};
use crate::projection::ProjectionVersion;
use crate::state::codec;
use crate::topology::Topics;

/// One user's checkpointed state.
#[derive(Debug, Clone)]
pub struct UserCheckpoint {
    /// The user.
    pub user_id: String,
    /// The fold partition whose task owns the user.
    pub partition: i32,
    /// The decoded state.
    pub state: UserState,
    /// The version of the checkpoint the state is part of: its partition's lease generation and both offsets.
    pub version: ProjectionVersion,
    /// Bytes of the encoded row.
    pub bytes: usize,
}

impl UserCheckpoint {
    fn decode(row: StateRow, version: ProjectionVersion) -> StateResult<Self> {
        let state = codec::decode_user(&row.state).map_err(StateError::corrupt(&row.id))?;
        let (user_id, partition, bytes) = (row.id, row.partition, row.state.len());
        Ok(Self { user_id, partition, state, version, bytes })
    }

    /// The user's counts, with broadcast and read-diffused counts from `lists`.
    pub fn view(&self, lists: &impl Lists) -> UserView {
        self.state.view(&self.user_id, lists)
    }

    /// The Redis write of the user's whole hash at the checkpoint's version: the version guard refuses it wherever
    /// Redis holds newer state.
    pub fn write(&self) -> UserWrite {
        UserWrite::of_state(&self.user_id, Some(&self.state), self.version)
    }

    /// [`UserCheckpoint::view`] at UTC day `today` with the checkpoint's lists and the indexes this user needs,
    /// read from `store`.
    ///
    /// Errors: PostgreSQL failing, or a corrupt list or conversation row.
    pub async fn view_from(&self, store: &CheckpointStore, today: i64) -> StateResult<UserView> {
        view_from(store, &self.user_id, &self.state, today).await
    }
}

/// A user's counts at UTC day `today` from its checkpointed `state`, with the checkpoint's lists and the indexes
/// of the read-diffused conversations the user is a member of, read from `store`.
///
/// Errors: PostgreSQL failing, or a corrupt list or conversation row.
async fn view_from(store: &CheckpointStore, user_id: &str, state: &UserState, today: i64) -> StateResult<UserView> {
    let indexed: Vec<String> = state.read_diffused().map(|(id, _)| id.to_owned()).collect();
    Ok(state.view_at(user_id, &shared_lists(store, Some(&indexed)).await?, today))
}

/// Which users [`users`] reads.
#[derive(Debug, Clone, Copy)]
pub enum Which<'a> {
    /// Every checkpointed user.
    All,
    /// `n` users chosen at random.
    Sample(usize),
    /// These users (those with no checkpointed state are left out).
    Of(&'a [String]),
}

/// The checkpointed state of `which` users, each at its partition's checkpoint version.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn users(store: &CheckpointStore, topics: &Topics, which: Which<'_>) -> StateResult<Vec<UserCheckpoint>> {
    let versions = CheckpointVersions::load(topics, store).await?;
    let rows = match which {
        Which::All => store.states(Stage::Fold, None).await?,
        Which::Sample(n) => store.states_sample(Stage::Fold, n).await?,
        Which::Of([]) => Vec::new(),
        Which::Of(ids) => store.states_of(Stage::Fold, ids).await?,
    };
    rows.into_iter()
        .map(|row| {
            let v = versions.of(row.partition);
            UserCheckpoint::decode(row, v)
        })
        .collect()
}

/// One user's checkpointed state and when the checkpoint that wrote it committed; `None` when the checkpoint has
/// no state for the user. Reads only the user's own partition's offsets and lease.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn user(
    store: &CheckpointStore,
    topics: &Topics,
    user_id: &str,
) -> StateResult<Option<(UserCheckpoint, DateTime<Utc>)>> {
    let Some(row) = store.state_row(Stage::Fold, user_id).await? else { return Ok(None) };
    let p = row.row.partition;
    let version = FoldNext::load(store, topics, p).await?.version(store.generation(Stage::Fold, p).await?);
    Ok(Some((UserCheckpoint::decode(row.row, version)?, row.updated_at)))
}

/// One user's checkpointed state alone, without its version (what a read needs when no write follows: no
/// offsets or lease are read); `None` when the checkpoint has no state for the user.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn user_state(store: &CheckpointStore, user_id: &str) -> StateResult<Option<UserState>> {
    let Some(row) = store.state_row(Stage::Fold, user_id).await? else { return Ok(None) };
    Ok(Some(codec::decode_user(&row.row.state).map_err(StateError::corrupt(user_id))?))
}

/// One user's counts at UTC day `today` from the checkpoint, with the checkpoint's lists and the indexes the user
/// needs; `None` when the checkpoint has no state for the user.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn user_view(store: &CheckpointStore, user_id: &str, today: i64) -> StateResult<Option<UserView>> {
    let Some(state) = user_state(store, user_id).await? else { return Ok(None) };
    Ok(Some(view_from(store, user_id, &state, today).await?))
}

/// What the checkpoint holds of `conversation_id`'s read receipts (contract v3), for a refill of its expired
/// receipts keys (`--projection-ttl`): the fan-out's sent seqs, and the entry and sent seqs of each member the
/// fan-out's checkpoint names, from that member's checkpointed state (v4: with its thread floors, and the fan-out's
/// replies). A conversation the checkpoint does not know
/// gives an empty refill. Reads one fold row per member: O(members).
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn receipts(store: &CheckpointStore, conversation_id: &str) -> StateResult<ReceiptsRefill> {
    let mut refill = ReceiptsRefill::default();
    let Some((_, conversation)) = super::load::conversation(store, conversation_id).await? else { return Ok(refill) };
    refill.sent = ranges_value(&conversation.sent);
    refill.replies = conversation.roots.iter().map(|(seq, root)| (*seq, *root)).collect();
    let ids: Vec<String> = conversation.members.into_keys().collect();
    if ids.is_empty() {
        return Ok(refill);
    }
    for row in store.states_of(Stage::Fold, &ids).await? {
        let state = codec::decode_user(&row.state).map_err(StateError::corrupt(&row.id))?;
        refill.add(&row.id, state.conversations().get(conversation_id).map(|c| &**c));
    }
    Ok(refill)
}
