//! `unread inspect user ID`, `unread inspect conversation ID`: the checkpointed state as JSON, for support and
//! debugging.

use anyhow::Context;

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::config::Settings;
use crate::projection::redis::RedisProjection;
use crate::state::load;

/// The user's checkpointed fold state (cursors, unread ranges, mentions, membership, mutes, totals), its
/// partition's checkpointed offsets, lease generation and checkpoint time (RFC 3339, UTC), and what Redis serves
/// with its version. `None` when the user has no checkpointed state.
///
/// Errors: a store is unreachable or the row is corrupt.
pub async fn inspect_user(
    settings: &Settings,
    store: &CheckpointStore,
    projection: &RedisProjection,
    user_id: &str,
) -> anyhow::Result<Option<serde_json::Value>> {
    let topics = settings.topics();
    let Some((user, at)) = crate::state::user::user(store, &topics, user_id).await? else { return Ok(None) };
    let v = user.version;
    Ok(Some(serde_json::json!({
        "user_id": user_id,
        "partition": user.partition,
        "checkpointed_at": at,
        "checkpoint_offsets": {
            topics.user_events.as_str(): v.user_events,
            topics.user_deltas.as_str(): v.user_deltas,
        },
        "lease_generation": v.generation,
        "checkpoint_bytes": user.bytes,
        "state": user.state,
        "projection": projection.read(user_id).await?,
        "projection_version": projection.version(user_id).await?.map(|v| v.to_string()),
    })))
}

/// The conversation's checkpointed fan-out state (kind, head, members with the head at which each joined), its
/// partition's checkpointed offset, lease generation and checkpoint time. `None` when the conversation has no
/// checkpointed state.
///
/// Errors: PostgreSQL unreachable or the row is corrupt.
pub async fn inspect_conversation(
    settings: &Settings,
    store: &CheckpointStore,
    conversation_id: &str,
) -> anyhow::Result<Option<serde_json::Value>> {
    let conversation = load::conversation(store, conversation_id).await;
    let Some((row, state)) = conversation.with_context(|| format!("checkpoint of {conversation_id:?}"))? else {
        return Ok(None);
    };
    let (partition, bytes) = (row.row.partition, &row.row.state);
    let topic = settings.topics().conversation_events;
    let offsets = store.offsets(Stage::FanOut).await?;
    Ok(Some(serde_json::json!({
        "conversation_id": conversation_id,
        "partition": partition,
        "checkpointed_at": row.updated_at,
        "checkpoint_offset": offsets.get(&(topic.clone(), partition)),
        "lease_generation": store.generation(Stage::FanOut, partition).await?,
        "checkpoint_bytes": bytes.len(),
        "state": state,
    })))
}
