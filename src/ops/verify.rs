//! `unread verify [--against NS] [--sample N] [--repair]`: compare the Redis projection with the PostgreSQL
//! checkpoint, or with another namespace's projection, field by field.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::config::Settings;
use crate::core::contract::UserView;
use crate::kafka;
use crate::projection::redis::{RedisProjection, UserWrite};
use crate::projection::ProjectionVersion;
pub use crate::state::verify::{verify, view_differences, VerifyReport};

/// Keeps `n` ids chosen at random: ordered by a hash (murmur2) of the id salted with the clock.
fn take_sample(ids: &mut Vec<String>, n: usize) {
    let salt = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u32);
    ids.sort_by_cached_key(|id| kafka::partition_for_key(format!("{salt}{id}").as_bytes(), i32::MAX));
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
    let mut ids = checkpointed_users(live, other).await?;
    if let Some(n) = sample {
        take_sample(&mut ids, n);
    }
    let a = RedisProjection::connect(&live.redis_url, &live.ns_redis_prefix()).await?;
    let b = a.with_prefix(&other.ns_redis_prefix());
    let mut report = VerifyReport { checked: ids.len(), ..Default::default() };
    let names = (format!("namespace {}", other.namespace), format!("namespace {}", live.namespace));
    let mut repairs = Vec::new();
    for (id, (expected, cursors), got, version) in still_differing(&a, &b, ids).await? {
        report.differing.push((id.clone(), view_differences(&expected, &got, (&names.0, &names.1))));
        if repair {
            // At the version live holds: refused if its service wrote the user since (it moved on).
            // The trusted counts whole, read-diffused shares included, so without `r:` fields (which would point
            // at this namespace's indexes): the next write of the user by the live service restores them.
            // Contract v4's `d:` and `t:` fields are copied as stored: the reader shape does not say them whole.
            let mut write = UserWrite::replace(expected, cursors, BTreeMap::new(), version.unwrap_or_default());
            (write.details, write.threads) = b.detail_fields(&id).await?;
            repairs.push(write);
        }
    }
    if !repairs.is_empty() {
        report.repaired = a.write(&repairs).await?.written;
    }
    Ok(report)
}

/// The users either namespace has checkpointed, sorted, once each.
///
/// Errors: `other` holds no state; a store is unreachable.
async fn checkpointed_users(live: &Settings, other: &Settings) -> anyhow::Result<Vec<String>> {
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
    Ok(ids)
}

/// A user that differs between two projections: id, the trusted view with its cursors, the other view, and the
/// other's version.
type Difference = (String, (UserView, BTreeMap<String, u64>), UserView, Option<ProjectionVersion>);

/// Compares `ids` in `a` and `b` up to [`AGAINST_ROUNDS`] times, [`AGAINST_PAUSE`] apart, each round only those
/// that differed in the last; returns those that differ in the last round (`b`'s view trusted).
///
/// Errors: Redis unreachable, or a malformed hash.
async fn still_differing(
    a: &RedisProjection,
    b: &RedisProjection,
    ids: Vec<String>,
) -> anyhow::Result<Vec<Difference>> {
    let mut differing = ids;
    let mut last = Vec::new();
    for round in 0..AGAINST_ROUNDS {
        if round > 0 {
            tokio::time::sleep(AGAINST_PAUSE).await;
        }
        last.clear();
        for id in &differing {
            let version = a.version(id).await?;
            let (got, expected) = (a.read(id).await?, b.read_with_cursors(id).await?);
            if got != expected.0 {
                last.push((id.clone(), expected, got, version));
            }
        }
        differing = last.iter().map(|(id, ..)| id.clone()).collect();
        if differing.is_empty() {
            break;
        }
    }
    Ok(last)
}
