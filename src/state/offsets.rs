//! Offsets, typed: which input of which stage ([`Input`]), and the next offset of each of its partitions as a
//! checkpoint holds it ([`Offsets`]). Topic names appear only where a store or a client wants them
//! ([`Input::topic`]); the rest of the code speaks of inputs.

use std::collections::HashMap;

use crate::checkpoint::store::{CheckpointStore, StoreResult};
use crate::checkpoint::Stage;
use crate::projection::ProjectionVersion;
use crate::topology::Topics;

/// An input topic of a stage (CONTRACT.md, "Topics"; `topology/topics.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Input {
    /// `unread.conversation-events`, the fan-out's input.
    ConversationEvents,
    /// `unread.user-events`, the fold's input from producers.
    UserEvents,
    /// `unread.user-deltas`, the fold's input from the fan-out.
    UserDeltas,
}

impl Input {
    /// The topic's name in a namespace.
    pub fn topic(self, topics: &Topics) -> &str {
        match self {
            Input::ConversationEvents => &topics.conversation_events,
            Input::UserEvents => &topics.user_events,
            Input::UserDeltas => &topics.user_deltas,
        }
    }

    /// The input whose topic is `name` in a namespace, if any.
    pub fn from_topic(topics: &Topics, name: &str) -> Option<Input> {
        [Input::ConversationEvents, Input::UserEvents, Input::UserDeltas].into_iter().find(|i| i.topic(topics) == name)
    }
}

/// The next offsets of a fold task's two input partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FoldNext {
    /// Of `unread.user-events`.
    pub user_events: i64,
    /// Of `unread.user-deltas`.
    pub user_deltas: i64,
}

impl FoldNext {
    /// The projection version of a fold partition's state at these offsets under lease `generation`: what the
    /// Redis write script compares (docs/guarantees.md).
    pub fn version(self, generation: i64) -> ProjectionVersion {
        ProjectionVersion { generation, user_events: self.user_events, user_deltas: self.user_deltas }
    }

    /// Fold partition `p`'s checkpointed next offsets (0 where nothing was checkpointed).
    ///
    /// Errors: PostgreSQL failing.
    pub async fn load(store: &CheckpointStore, topics: &Topics, p: i32) -> StoreResult<Self> {
        let offset = |input: Input| store.offset(Stage::Fold, input.topic(topics), p);
        Ok(Self {
            user_events: offset(Input::UserEvents).await?.unwrap_or(0),
            user_deltas: offset(Input::UserDeltas).await?.unwrap_or(0),
        })
    }

    /// As the pairs a checkpoint stores.
    pub fn pairs(self) -> [(Input, i64); 2] {
        [(Input::UserEvents, self.user_events), (Input::UserDeltas, self.user_deltas)]
    }
}

/// Checkpointed next offsets: (input, partition) → next offset. A partition never checkpointed has none
/// ([`Offsets::next`] answers 0 for it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offsets(HashMap<(Input, i32), i64>);

impl Offsets {
    /// Reads the offsets `stage` checkpointed for every partition.
    ///
    /// Errors: PostgreSQL failing.
    pub async fn load(store: &CheckpointStore, topics: &Topics, stage: Stage) -> StoreResult<Self> {
        Ok(Self::from_rows(topics, store.offsets(stage).await?))
    }

    /// From the store's rows, (topic, partition) → next offset; rows of topics that are no input are left out.
    pub fn from_rows(topics: &Topics, rows: HashMap<(String, i32), i64>) -> Self {
        let typed = rows.into_iter().filter_map(|((t, p), o)| Some(((Input::from_topic(topics, &t)?, p), o)));
        Self(typed.collect())
    }

    /// The checkpointed next offset of `input`'s partition `p`, if it was ever checkpointed.
    pub fn get(&self, input: Input, p: i32) -> Option<i64> {
        self.0.get(&(input, p)).copied()
    }

    /// The next offset of `input`'s partition `p`: 0 where nothing was checkpointed.
    pub fn next(&self, input: Input, p: i32) -> i64 {
        self.get(input, p).unwrap_or(0)
    }

    /// Both next offsets of fold partition `p`.
    pub fn fold(&self, p: i32) -> FoldNext {
        FoldNext { user_events: self.next(Input::UserEvents, p), user_deltas: self.next(Input::UserDeltas, p) }
    }
}

/// Each fold partition's checkpoint as a projection version: lease generation and both checkpointed offsets.
#[derive(Debug, Clone, Default)]
pub struct CheckpointVersions {
    offsets: Offsets,
    generations: HashMap<i32, i64>,
}

impl CheckpointVersions {
    /// Reads every fold partition's offsets and lease generation.
    ///
    /// Errors: PostgreSQL failing.
    pub async fn load(topics: &Topics, store: &CheckpointStore) -> StoreResult<Self> {
        Ok(Self {
            offsets: Offsets::load(store, topics, Stage::Fold).await?,
            generations: store.generations(Stage::Fold).await?,
        })
    }

    /// The version of fold partition `p`'s checkpoint (0s where nothing was checkpointed).
    pub fn of(&self, p: i32) -> ProjectionVersion {
        self.offsets.fold(p).version(self.generations.get(&p).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_typed_by_input_and_leave_other_topics_out() {
        let topics = Topics::new("");
        let rows = HashMap::from([
            ((topics.user_events.clone(), 1), 5),
            ((topics.user_deltas.clone(), 1), 9),
            ((topics.conversation_events.clone(), 0), 3),
            (("elsewhere".to_owned(), 1), 77),
        ]);
        let o = Offsets::from_rows(&topics, rows);
        assert_eq!(o.fold(1), FoldNext { user_events: 5, user_deltas: 9 });
        assert_eq!(o.fold(2), FoldNext::default(), "never checkpointed: 0s");
        assert_eq!(o.get(Input::ConversationEvents, 0), Some(3));
        assert_eq!(o.get(Input::UserDeltas, 1), Some(9));
        for input in [Input::ConversationEvents, Input::UserEvents, Input::UserDeltas] {
            assert_eq!(Input::from_topic(&topics, input.topic(&topics)), Some(input));
        }
    }
}
