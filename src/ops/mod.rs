//! Operator tools over a namespace's stores, one module each: [`lag`] (`unread lag`), [`rebuild`]
//! (`unread projection rebuild`), [`inspect`] (`unread inspect`) and [`verify`] (`unread verify`, also run in the
//! background by `unread run --verify-every`). Each returns a report that formats itself ([`std::fmt::Display`]).

pub mod inspect;
pub mod lag;
pub mod rebuild;
pub mod verify;

use std::collections::HashMap;

use anyhow::Context;

use crate::checkpoint::store::{CheckpointStore, StoreResult};
use crate::checkpoint::{self, Stage};
use crate::core::broadcast::SharedLists;
use crate::projection::ProjectionVersion;
use crate::service::fold_stage::{self, Next};
use crate::topology::Topics;

/// Each fold partition's checkpoint as a projection version: lease generation and both checkpointed offsets.
pub struct CheckpointVersions {
    user_events: String,
    user_deltas: String,
    offsets: HashMap<(String, i32), i64>,
    generations: HashMap<i32, i64>,
}

impl CheckpointVersions {
    /// Reads every fold partition's offsets and lease generation.
    ///
    /// Errors: PostgreSQL failing.
    pub async fn load(topics: &Topics, store: &CheckpointStore) -> StoreResult<Self> {
        Ok(Self {
            user_events: topics.user_events.clone(),
            user_deltas: topics.user_deltas.clone(),
            offsets: store.offsets(Stage::Fold).await?,
            generations: store.generations(Stage::Fold).await?,
        })
    }

    /// The version of partition `p`'s checkpoint (0s where nothing was checkpointed).
    pub fn of(&self, p: i32) -> ProjectionVersion {
        let offset = |t: &String| self.offsets.get(&(t.clone(), p)).copied().unwrap_or(0);
        let next = Next { user_events: offset(&self.user_events), user_deltas: offset(&self.user_deltas) };
        fold_stage::version(self.generations.get(&p).copied().unwrap_or(0), next)
    }
}

/// Every broadcast list of the checkpoint, and the index of every read-diffused conversation among
/// `conversations` (all conversations for `None`): what views built from the checkpoint combine with each user's
/// state.
///
/// Errors: PostgreSQL failing, or a corrupt row.
pub async fn load_shared(store: &CheckpointStore, conversations: Option<&[String]>) -> anyhow::Result<SharedLists> {
    let mut shared = SharedLists::default();
    for row in store.lists(None).await? {
        let state = checkpoint::decode_list(&row.state).with_context(|| format!("checkpoint of list {:?}", row.id))?;
        shared.lists.insert(row.id, state);
    }
    let rows = match conversations {
        Some([]) => Vec::new(),
        Some(ids) => store.states_of(Stage::FanOut, ids).await?,
        None => store.states(Stage::FanOut, None).await?,
    };
    for row in rows {
        let state = checkpoint::decode_conversation(&row.state)
            .with_context(|| format!("checkpoint of conversation {:?}", row.id))?;
        shared.indexes.extend(state.index.map(|index| (row.id, index)));
    }
    Ok(shared)
}
