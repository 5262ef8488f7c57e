//! `unread projection rebuild [--user ID]...`: rewrite Redis from the PostgreSQL checkpoint, never over newer state.

use std::collections::HashSet;
use std::fmt;

use anyhow::Context;

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::config::Settings;
use crate::core::broadcast::ListId;
use crate::kafka;
use crate::projection::redis::{ListWrite, RedisProjection, SentWrite, UserWrite};
use crate::state::codec;
use crate::state::offsets::CheckpointVersions;
use crate::state::user::Which;

/// Users a rebuild writes to Redis in one call (its progress moves by as many).
const REBUILD_CHUNK: usize = 1000;

/// What a rebuild did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RebuildReport {
    /// Users written.
    pub written: usize,
    /// Users refused by the version guard (Redis already holds newer state).
    pub refused: usize,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl fmt::Display for RebuildReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { written, refused, seconds } = self;
        write!(
            f,
            "projection rebuilt: {written} users written, {refused} refused (Redis already newer), {seconds:.2} s"
        )
    }
}

/// Rewrites Redis from the PostgreSQL checkpoint: every user's whole hash, or only `users`', each at its
/// partition's current lease generation and checkpointed offsets, so the guard refuses it wherever Redis already
/// holds newer state. A requested user with no checkpointed state gets the zero state.
///
/// Errors: a store is unreachable or a checkpoint row is corrupt.
pub async fn rebuild_projection(
    settings: &Settings,
    store: &CheckpointStore,
    projection: &RedisProjection,
    users: &[String],
) -> anyhow::Result<RebuildReport> {
    let started = std::time::Instant::now();
    let topics = settings.topics();
    let versions = CheckpointVersions::load(&topics, store).await?;
    let which = if users.is_empty() { Which::All } else { Which::Of(users) };
    let checkpointed = crate::state::user::users(store, &topics, which).await?;
    let writes_of = checkpointed.iter().map(|u| (u.write(), u.user_id.clone()));
    let (mut writes, found): (Vec<UserWrite>, HashSet<String>) = writes_of.unzip();
    let missing: Vec<&String> = users.iter().filter(|u| !found.contains(*u)).collect();
    if !missing.is_empty() {
        let partitions = kafka::partition_counts(&settings.brokers)?
            .get(&topics.user_events)
            .copied()
            .context("the user-events topic does not exist")?;
        for u in missing {
            writes.push(UserWrite::of_state(
                u,
                None,
                versions.of(kafka::Partitioner::configured().partition(u.as_bytes(), partitions)),
            ));
        }
    }
    let (mut written, mut refused) = (0, 0);
    let mut progress = crate::progress::Progress::new(writes.len() as u64, ("rebuild", "users"));
    for (i, chunk) in writes.chunks(REBUILD_CHUNK).enumerate() {
        let (w, r) = projection.write(chunk).await?.counts();
        (written, refused) = (written + w, refused + r);
        progress.set(((i + 1) * REBUILD_CHUNK).min(writes.len()) as u64);
    }
    progress.finish();
    if users.is_empty() {
        rebuild_lists(store, projection).await?;
    }
    Ok(RebuildReport { written, refused, seconds: started.elapsed().as_secs_f64() })
}

/// Rewrites every broadcast list from the checkpoint, each at its fan-out partition's lease generation (refused
/// where a fan-out task of a newer generation wrote it).
///
/// Errors: a store unreachable or a corrupt row.
async fn rebuild_lists(store: &CheckpointStore, projection: &RedisProjection) -> anyhow::Result<()> {
    let generations = store.generations(Stage::FanOut).await?;
    let mut writes = Vec::new();
    for row in store.lists(None).await? {
        let state = codec::decode_list(&row.state).with_context(|| format!("checkpoint of list {:?}", row.id))?;
        let generation = generations.get(&row.partition).copied().unwrap_or(0);
        writes.push(ListWrite { list: ListId::Broadcast(row.id), generation, ops: state.whole_ops(), replace: true });
    }
    let mut sent = Vec::new();
    for row in store.states(Stage::FanOut, None).await? {
        let state = codec::decode_conversation(&row.state)
            .with_context(|| format!("checkpoint of conversation {:?}", row.id))?;
        let generation = generations.get(&row.partition).copied().unwrap_or(0);
        sent.push(SentWrite::whole(&row.id, &state));
        if let Some(index) = state.index {
            writes.push(ListWrite { list: ListId::Index(row.id), generation, ops: index.whole_ops(), replace: true });
        }
    }
    projection.write_lists(&writes).await?;
    projection.write_sent(&sent).await?;
    Ok(())
}
