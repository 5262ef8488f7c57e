//! The Redis projection compared with the PostgreSQL checkpoint, user by user (`unread verify`, and the
//! background verify of `unread run --verify-every`), with the report both print.

use std::collections::BTreeMap;
use std::fmt;

use super::load::shared_lists;
use super::user::{users, Which};
use super::StateResult;
use crate::checkpoint::store::CheckpointStore;
use crate::core::contract::UserView;
use crate::core::counts::Counts;
use crate::projection::redis::RedisProjection;
use crate::topology::Topics;

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
    /// Users with no hash where hashes expire (`--projection-ttl`): evicted, not compared (a read refills them).
    pub evicted: usize,
}

impl VerifyReport {
    /// Whether nothing differs, or `repair` rewrote every user that did.
    pub fn clean(&self, repair: bool) -> bool {
        self.differing.is_empty() || (repair && self.repaired == self.differing.len())
    }

    /// `unread verify --output json`: `{"checked", "ahead", "differing": [{"user", "differences"}], "repaired",
    /// "evicted", "clean"}`, every differing user with every difference.
    pub fn to_json(&self, clean: bool) -> serde_json::Value {
        let differing: Vec<serde_json::Value> = (self.differing.iter())
            .map(|(user, differences)| serde_json::json!({"user": user, "differences": differences}))
            .collect();
        serde_json::json!({"checked": self.checked, "ahead": self.ahead, "differing": differing,
            "repaired": self.repaired, "evicted": self.evicted, "clean": clean})
    }
}

impl fmt::Display for VerifyReport {
    /// The first 10 differing users with their first 5 differences, then a summary line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (user, diffs) in self.differing.iter().take(10) {
            writeln!(f, "user {user:?} differs:")?;
            for d in diffs.iter().take(5) {
                writeln!(f, "    {d}")?;
            }
        }
        let (checked, differing, ahead, repaired) = (self.checked, self.differing.len(), self.ahead, self.repaired);
        write!(f, "users checked: {checked}, differing: {differing}, ahead in redis (not compared): {ahead}, repaired: {repaired}")?;
        match self.evicted {
            0 => Ok(()),
            n => write!(f, ", evicted (no hash, --projection-ttl; not compared): {n}"),
        }
    }
}

/// The differences between two views of one user, field by field (`expected` is the trusted side); `names` are
/// the two sides' names in the messages, trusted first.
pub fn view_differences(expected: &UserView, got: &UserView, names: (&str, &str)) -> Vec<String> {
    let (en, gn) = names;
    let (e, g) = (expected, got);
    let mut d = Vec::new();
    let (et, gt) = (Counts::of(e).values(), Counts::of(g).values());
    for ((name, e), g) in Counts::NAMES.iter().zip(et).zip(gt) {
        if e != g {
            d.push(format!("{name}: {en} {e}, {gn} {g}"));
        }
    }
    map_differences("conversations", &e.conversations, &g.conversations, names, &mut d);
    map_differences("broadcasts", &e.broadcasts, &g.broadcasts, names, &mut d);
    map_differences("notifications", &e.notifications, &g.notifications, names, &mut d);
    d
}

/// The differences between two maps of a view, entry by entry.
fn map_differences<V: PartialEq + fmt::Debug>(
    what: &str,
    expected: &BTreeMap<String, V>,
    got: &BTreeMap<String, V>,
    (en, gn): (&str, &str),
    d: &mut Vec<String>,
) {
    for (id, e) in expected {
        match got.get(id) {
            None => d.push(format!("{what}[{id:?}]: {en} {e:?}, missing in {gn}")),
            Some(g) if g != e => d.push(format!("{what}[{id:?}]: {en} {e:?}, {gn} {g:?}")),
            Some(_) => {}
        }
    }
    for id in got.keys().filter(|id| !expected.contains_key(*id)) {
        d.push(format!("{what}[{id:?}]: not in {en}, present in {gn}"));
    }
}

/// `unread verify`: compares the Redis projection with the PostgreSQL checkpoint for every checkpointed user, or
/// for `sample` of them chosen at random, as stored and at the service's clock (so the expiry fields are compared
/// too, contract v3); with `repair` = `Some(n)`, rewrites the first `n` differing users from the checkpoint (the
/// trusted side) at the checkpoint's version, so the guard still refuses it wherever Redis is newer (`unread run
/// --verify-every … --repair` bounds `n` per run; `unread verify --repair` has no bound).
///
/// `progress(done, total)` is called after each user compared (`unread verify`'s bar; the background verify passes
/// a no-op).
///
/// Errors: a store is unreachable or a checkpoint row is corrupt.
pub async fn verify(
    topics: &Topics,
    store: &CheckpointStore,
    projection: &RedisProjection,
    (sample, repair): (Option<usize>, Option<usize>),
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> StateResult<VerifyReport> {
    let lists = shared_lists(store, None).await?;
    let which = sample.map_or(Which::All, Which::Sample);
    let mut report = VerifyReport::default();
    let mut repairs = Vec::new();
    let today = crate::clock::today();
    // Verifying is not a use: its reads must not keep expiring hashes alive.
    let reader = projection.clone().with_ttl(None);
    let users = users(store, topics, which).await?;
    let total = users.len();
    for (done, user) in users.into_iter().enumerate() {
        progress(done, total);
        let zero = || UserView { user_id: user.user_id.clone(), ..Default::default() };
        let Some(got_now) = reader.read_existing(&user.user_id, today).await?.or_else(|| {
            (!projection.expires()).then(zero) // no hash: lost (a difference), or evicted where hashes expire
        }) else {
            report.evicted += 1;
            continue;
        };
        let (expected, got) = (user.view(&lists), reader.read(&user.user_id).await?);
        let expected_now = user.state.view_at(&user.user_id, &lists, today);
        report.checked += 1;
        if got == expected && got_now == expected_now {
            continue;
        }
        if projection.version(&user.user_id).await?.is_some_and(|redis| redis.is_newer_than(&user.version)) {
            report.ahead += 1;
            continue;
        }
        let differences = match got == expected {
            false => view_differences(&expected, &got, ("checkpoint", "redis")),
            true => view_differences(&expected_now, &got_now, ("checkpoint now", "redis now")),
        };
        report.differing.push((user.user_id.clone(), differences));
        if repair.is_some_and(|n| repairs.len() < n) {
            repairs.push(user.write());
        }
    }
    if !repairs.is_empty() {
        report.repaired = projection.write(&repairs).await?.written;
    }
    Ok(report)
}
