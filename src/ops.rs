//! Operator tools over the running service's stores: `unread lag`, `unread projection rebuild`, `unread inspect`
//! and `unread verify`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

use crate::checkpoint::{self, store::CheckpointStore, store::Stage};
use crate::config::Settings;
use crate::contract::UserView;
use crate::projection::numbers;
use crate::projection::redis::{RedisProjection, UserWrite};
use crate::service::fold_stage;
use crate::topology::{partition_for_key, Topics};

/// Lag of one input partition of one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub stage: &'static str,
    pub topic: String,
    pub partition: i32,
    /// The partition's end (high watermark).
    pub end: i64,
    /// The stage's checkpointed next offset (the log start when never checkpointed).
    pub checkpointed: i64,
}

impl PartitionLag {
    /// Records not yet checkpointed.
    pub fn lag(&self) -> i64 {
        (self.end - self.checkpointed).max(0)
    }
}

/// The lag of every input partition: the fan-out's conversation events, then the fold's user events and deltas.
/// Zero everywhere means everything produced so far is folded and flushed to Redis and PostgreSQL (the fold
/// writes Redis before it checkpoints, and the fan-out produces deltas before it checkpoints; conversation
/// events are read first so that the deltas they caused are already counted).
///
/// Errors: Kafka or PostgreSQL unreachable.
pub async fn lag(settings: &Settings, store: &CheckpointStore) -> anyhow::Result<Vec<PartitionLag>> {
    let topics = settings.topics();
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", &settings.brokers).create()?;
    let mut out = Vec::new();
    for (stage, st, names) in [
        ("fanout", Stage::FanOut, vec![topics.conversation_events.clone()]),
        ("fold", Stage::Fold, vec![topics.user_events.clone(), topics.user_deltas.clone()]),
    ] {
        let done = store.offsets(st).await?;
        for topic in names {
            let md = consumer
                .fetch_metadata(Some(&topic), Duration::from_secs(10))
                .with_context(|| format!("metadata of {topic}"))?;
            let partitions = md.topics().first().map(|t| t.partitions().len()).unwrap_or(0) as i32;
            for p in 0..partitions {
                let (low, high) = consumer.fetch_watermarks(&topic, p, Duration::from_secs(10))?;
                let checkpointed = done.get(&(topic.clone(), p)).copied().unwrap_or(0).max(low);
                out.push(PartitionLag { stage, topic: topic.clone(), partition: p, end: high, checkpointed });
            }
        }
    }
    Ok(out)
}

/// Prints a lag table and the totals.
pub fn print_lag(rows: &[PartitionLag]) {
    println!("{:<7} {:<40} {:>9} {:>12} {:>12} {:>9}", "stage", "topic", "partition", "end", "checkpoint", "lag");
    for r in rows {
        println!(
            "{:<7} {:<40} {:>9} {:>12} {:>12} {:>9}",
            r.stage,
            r.topic,
            r.partition,
            r.end,
            r.checkpointed,
            r.lag()
        );
    }
    let total: i64 = rows.iter().map(PartitionLag::lag).sum();
    println!("total lag: {total}");
}

/// Waits until every partition's lag is zero, polling every 100 ms, for at most `timeout`.
///
/// Errors: the timeout passes (with the remaining lag), or a store is unreachable.
pub async fn wait_for_zero_lag(
    settings: &Settings,
    store: &CheckpointStore,
    timeout: Duration,
) -> anyhow::Result<Vec<PartitionLag>> {
    let started = Instant::now();
    loop {
        let rows = lag(settings, store).await?;
        let total: i64 = rows.iter().map(PartitionLag::lag).sum();
        if total == 0 {
            return Ok(rows);
        }
        if started.elapsed() >= timeout {
            print_lag(&rows);
            anyhow::bail!("lag is still {total} after {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each fold partition's checkpoint as a projection version: lease generation and both checkpointed offsets.
struct CheckpointVersions {
    user_events: String,
    user_deltas: String,
    offsets: HashMap<(String, i32), i64>,
    generations: HashMap<i32, i64>,
}

impl CheckpointVersions {
    async fn load(topics: &Topics, store: &CheckpointStore) -> anyhow::Result<Self> {
        Ok(Self {
            user_events: topics.user_events.clone(),
            user_deltas: topics.user_deltas.clone(),
            offsets: store.offsets(Stage::Fold).await?,
            generations: store.generations(Stage::Fold).await?,
        })
    }

    /// The version of partition `p`'s checkpoint (0s where nothing was checkpointed).
    fn of(&self, p: i32) -> String {
        let offset = |t: &String| self.offsets.get(&(t.clone(), p)).copied().unwrap_or(0);
        fold_stage::version(
            self.generations.get(&p).copied().unwrap_or(0),
            [offset(&self.user_events), offset(&self.user_deltas)],
        )
    }
}

/// Rewrites Redis from the PostgreSQL checkpoint: every user's whole hash, or only `users`', each at its
/// partition's current lease generation and checkpointed offsets, so the guard refuses it wherever Redis already
/// holds newer state. A requested
/// user with no checkpointed state gets the zero state. Returns (users written, users refused as older).
///
/// Errors: a store is unreachable or a checkpoint row is corrupt.
pub async fn rebuild_projection(
    settings: &Settings,
    store: &CheckpointStore,
    projection: &RedisProjection,
    users: &[String],
) -> anyhow::Result<(usize, usize)> {
    let topics = settings.topics();
    let versions = CheckpointVersions::load(&topics, store).await?;
    let version = |p: i32| versions.of(p);
    let rows = if users.is_empty() {
        store.states(Stage::Fold, None).await?
    } else {
        store.states_of(Stage::Fold, users).await?
    };
    let mut writes = Vec::with_capacity(rows.len());
    let mut found: HashMap<String, ()> = HashMap::new();
    for (id, p, bytes) in rows {
        let state = checkpoint::decode_user(&bytes).with_context(|| format!("checkpoint of user {id:?}"))?;
        writes.push(UserWrite::replace(state.view(&id), version(p)));
        found.insert(id, ());
    }
    let missing: Vec<&String> = users.iter().filter(|u| !found.contains_key(*u)).collect();
    if !missing.is_empty() {
        let partitions = crate::topology::partition_counts(&settings.brokers)?
            .get(&topics.user_events)
            .copied()
            .context("the user-events topic does not exist")?;
        for u in missing {
            let view = UserView { user_id: u.clone(), ..Default::default() };
            writes.push(UserWrite::replace(view, version(partition_for_key(u.as_bytes(), partitions))));
        }
    }
    Ok(projection.write(&writes).await?)
}

/// `unread inspect user ID`: the user's checkpointed fold state (cursors, unread ranges, mentions, membership,
/// mutes, totals), its partition's checkpointed offsets, lease generation and checkpoint time, and what Redis serves
/// with its version. `None` when the user has no checkpointed state.
///
/// Errors: a store is unreachable or the row is corrupt.
pub async fn inspect_user(
    settings: &Settings,
    store: &CheckpointStore,
    projection: &RedisProjection,
    user_id: &str,
) -> anyhow::Result<Option<serde_json::Value>> {
    let Some((partition, bytes, at)) = store.state_row(Stage::Fold, user_id).await? else { return Ok(None) };
    let state = checkpoint::decode_user(&bytes).with_context(|| format!("checkpoint of user {user_id:?}"))?;
    let topics = settings.topics();
    let offsets = store.offsets(Stage::Fold).await?;
    let offset = |t: &str| offsets.get(&(t.to_owned(), partition)).copied();
    Ok(Some(serde_json::json!({
        "user_id": user_id,
        "partition": partition,
        "checkpointed_at": at,
        "checkpoint_offsets": {
            topics.user_events.as_str(): offset(&topics.user_events),
            topics.user_deltas.as_str(): offset(&topics.user_deltas),
        },
        "lease_generation": store.generation(Stage::Fold, partition).await?,
        "checkpoint_bytes": bytes.len(),
        "state": state,
        "projection": projection.read(user_id).await?,
        "projection_version": projection.version(user_id).await?,
    })))
}

/// `unread inspect conversation ID`: the conversation's checkpointed fan-out state (kind, head, members with the
/// head at which each joined), its partition's checkpointed offset, lease generation and checkpoint time. `None`
/// when the conversation has no checkpointed state.
///
/// Errors: PostgreSQL unreachable or the row is corrupt.
pub async fn inspect_conversation(
    settings: &Settings,
    store: &CheckpointStore,
    conversation_id: &str,
) -> anyhow::Result<Option<serde_json::Value>> {
    let Some((partition, bytes, at)) = store.state_row(Stage::FanOut, conversation_id).await? else { return Ok(None) };
    let state =
        checkpoint::decode_conversation(&bytes).with_context(|| format!("checkpoint of {conversation_id:?}"))?;
    let topic = settings.topics().conversation_events;
    let offsets = store.offsets(Stage::FanOut).await?;
    Ok(Some(serde_json::json!({
        "conversation_id": conversation_id,
        "partition": partition,
        "checkpointed_at": at,
        "checkpoint_offset": offsets.get(&(topic.clone(), partition)),
        "lease_generation": store.generation(Stage::FanOut, partition).await?,
        "checkpoint_bytes": bytes.len(),
        "state": state,
    })))
}

/// What `unread verify` found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Users compared.
    pub checked: usize,
    /// Users whose Redis version is newer than the checkpoint's (the live service flushed since): not compared.
    pub ahead: usize,
    /// Users that differ: id and the differences, field by field.
    pub differing: Vec<(String, Vec<String>)>,
    /// Users rewritten from the checkpoint by `--repair`.
    pub repaired: usize,
}

/// Whether Redis's version is strictly newer than the checkpoint's: a newer generation, or the same one at a
/// position that dominates.
fn redis_is_ahead(redis: Option<&str>, checkpoint: &str) -> bool {
    match (redis.and_then(numbers::<i64>), numbers::<i64>(checkpoint)) {
        (Some([g, a, b]), Some([cg, ca, cb])) => g > cg || (g == cg && a >= ca && b >= cb && (a, b) != (ca, cb)),
        _ => false,
    }
}

/// The differences between two views of one user, field by field (`expected` is the trusted side); `names` are
/// the two sides' names in the messages, trusted first.
pub fn view_differences(expected: &UserView, got: &UserView, names: (&str, &str)) -> Vec<String> {
    let (en, gn) = names;
    let mut d = Vec::new();
    for (name, e, g) in [
        ("total_unread", expected.total_unread, got.total_unread),
        ("total_mentions", expected.total_mentions, got.total_mentions),
        ("unread_conversations", expected.unread_conversations, got.unread_conversations),
    ] {
        if e != g {
            d.push(format!("{name}: {en} {e}, {gn} {g}"));
        }
    }
    for (id, e) in &expected.conversations {
        match got.conversations.get(id) {
            None => d.push(format!("conversations[{id:?}]: {en} {e:?}, missing in {gn}")),
            Some(g) if g != e => d.push(format!("conversations[{id:?}]: {en} {e:?}, {gn} {g:?}")),
            Some(_) => {}
        }
    }
    for id in got.conversations.keys().filter(|id| !expected.conversations.contains_key(*id)) {
        d.push(format!("conversations[{id:?}]: not in {en}, present in {gn}"));
    }
    d
}

/// `unread verify`: compares the Redis projection with the PostgreSQL checkpoint for every checkpointed user, or
/// for `sample` of them chosen at random; with `repair`, rewrites each differing user from the checkpoint (the
/// trusted side) at the checkpoint's version, so the guard still refuses it wherever Redis is newer.
///
/// Errors: a store is unreachable or a checkpoint row is corrupt.
pub async fn verify(
    settings: &Settings,
    store: &CheckpointStore,
    projection: &RedisProjection,
    sample: Option<usize>,
    repair: bool,
) -> anyhow::Result<VerifyReport> {
    let topics = settings.topics();
    let versions = CheckpointVersions::load(&topics, store).await?;
    let version = |p: i32| versions.of(p);
    let rows = match sample {
        Some(n) => store.states_sample(Stage::Fold, n).await?,
        None => store.states(Stage::Fold, None).await?,
    };
    let mut report = VerifyReport::default();
    let mut repairs = Vec::new();
    for (id, p, bytes) in rows {
        let expected = checkpoint::decode_user(&bytes).with_context(|| format!("checkpoint of user {id:?}"))?.view(&id);
        let v = version(p);
        let got = projection.read(&id).await?;
        report.checked += 1;
        if got == expected {
            continue;
        }
        if redis_is_ahead(projection.version(&id).await?.as_deref(), &v) {
            report.ahead += 1;
            continue;
        }
        report.differing.push((id.clone(), view_differences(&expected, &got, ("checkpoint", "redis"))));
        if repair {
            repairs.push(UserWrite::replace(expected, v));
        }
    }
    if !repairs.is_empty() {
        report.repaired = projection.write(&repairs).await?.0;
    }
    Ok(report)
}

/// Keeps `n` ids chosen at random: ordered by a hash of the id salted with the clock.
fn take_sample(ids: &mut Vec<String>, n: usize) {
    let salt = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u32);
    ids.sort_by_cached_key(|id| crate::topology::murmur2(format!("{salt}{id}").as_bytes()));
    ids.truncate(n);
}

/// How many times `verify --against` compares a differing user before reporting it, and the pause between: a
/// user the two namespaces' services are still folding differs for a moment only.
const AGAINST_ROUNDS: usize = 3;
const AGAINST_PAUSE: Duration = Duration::from_secs(1);

/// `unread verify --against OTHER`: compares the Redis projection of `live` (its namespace) with that of `other`,
/// for every user either namespace has checkpointed (or `sample` of them). The replayed side `other` is trusted:
/// a user still differing after [`AGAINST_ROUNDS`] comparisons [`AGAINST_PAUSE`] apart is reported, and with
/// `repair` rewritten in `live` from `other`'s view at the version `live` holds (so a write the live service makes
/// meanwhile wins, and the user is not counted as repaired). The live service's own memory and checkpoint are not
/// changed: if they are wrong, promote the replayed namespace instead.
///
/// Errors: `other` holds no state; a store is unreachable.
pub async fn verify_against(
    live: &Settings,
    other: &Settings,
    sample: Option<usize>,
    repair: bool,
) -> anyhow::Result<VerifyReport> {
    let live_store = CheckpointStore::connect(&live.database_url, &live.ns_db_schema(), 2).await?;
    let other_store = CheckpointStore::connect(&other.database_url, &other.ns_db_schema(), 2).await?;
    live_store.migrate().await?;
    other_store.migrate().await?;
    if other_store.is_empty().await? {
        anyhow::bail!("namespace {:?} holds no state: nothing to verify against", other.namespace);
    }
    let mut ids = live_store.ids(Stage::Fold).await?;
    ids.extend(other_store.ids(Stage::Fold).await?);
    ids.sort_unstable();
    ids.dedup();
    if let Some(n) = sample {
        take_sample(&mut ids, n);
    }
    let a = RedisProjection::connect(&live.redis_url, &live.ns_redis_prefix()).await?;
    let b = a.with_prefix(&other.ns_redis_prefix());
    let mut report = VerifyReport { checked: ids.len(), ..Default::default() };
    let mut differing = ids;
    let names = (format!("namespace {}", other.namespace), format!("namespace {}", live.namespace));
    let mut last = Vec::new();
    for round in 0..AGAINST_ROUNDS {
        if round > 0 {
            tokio::time::sleep(AGAINST_PAUSE).await;
        }
        last.clear();
        for id in &differing {
            let version = a.version(id).await?;
            let (got, expected) = (a.read(id).await?, b.read(id).await?);
            if got != expected {
                last.push((id.clone(), expected, got, version));
            }
        }
        differing = last.iter().map(|(id, ..)| id.clone()).collect();
        if differing.is_empty() {
            break;
        }
    }
    let mut repairs = Vec::new();
    for (id, expected, got, version) in last {
        report.differing.push((id.clone(), view_differences(&expected, &got, (&names.0, &names.1))));
        if repair {
            // At the version live holds: refused if its service wrote the user since (it moved on).
            repairs.push(UserWrite::replace(expected, version.unwrap_or_else(|| "0 0 0".into())));
        }
    }
    if !repairs.is_empty() {
        report.repaired = a.write(&repairs).await?.0;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_ahead_means_a_newer_generation_or_a_dominating_position() {
        assert!(redis_is_ahead(Some("2 0 0"), "1 9 9"));
        assert!(redis_is_ahead(Some("1 10 9"), "1 9 9"));
        assert!(!redis_is_ahead(Some("1 9 9"), "1 9 9"), "equal is not ahead");
        assert!(!redis_is_ahead(Some("1 10 8"), "1 9 9"), "incomparable is not ahead");
        assert!(!redis_is_ahead(None, "1 9 9"));
        assert!(!redis_is_ahead(Some("garbage"), "1 9 9"));
    }
}
