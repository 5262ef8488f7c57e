//! Namespaces as wholes ([`crate::config`] derives their names): which one the read API serves, `unread promote`
//! and `unread drop`.
//!
//! The **live pointer** is one Redis key, `{base prefix}live`, holding the name of the namespace the read API
//! serves (absent: `default`). Every API instance follows it ([`LiveProjection::follow`], every
//! [`FOLLOW_INTERVAL`]), so `unread promote NAME` is one `SET`: requests already running finish on the namespace
//! they started on, later ones read the new one, and both stay complete throughout, so none fails. Writers are not
//! redirected: the stages of `unread run --namespace NAME` write the namespace they were started with.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::consumer::Consumer;
use tracing::{info, warn};

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::config::{check_namespace, Settings, DEFAULT_NAMESPACE};
use crate::kafka;
use crate::projection::redis::RedisProjection;

/// How often an API instance re-reads the live pointer: 200 ms.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

/// How long `promote --drop-old` waits after the switch before deleting the old namespace: every API instance has
/// re-read the pointer several times by then (5 × [`FOLLOW_INTERVAL`]).
pub const SWITCH_GRACE: Duration = Duration::from_secs(1);

/// The namespace the read API serves: the live pointer's value, `default` when unset.
///
/// Errors: Redis unreachable.
pub async fn live_namespace(settings: &Settings) -> anyhow::Result<String> {
    let projection = RedisProjection::connect(&settings.redis_url, &settings.redis_prefix).await?;
    read_pointer(&projection, &settings.live_pointer_key()).await
}

async fn read_pointer(projection: &RedisProjection, key: &str) -> anyhow::Result<String> {
    let mut conn = projection.connection();
    let live: Option<String> =
        redis::cmd("GET").arg(key).query_async(&mut conn).await.context("reading the live pointer")?;
    Ok(live.unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()))
}

/// The read API's view of the projection: the live namespace's, switched when the pointer changes.
pub struct LiveProjection {
    settings: Settings,
    current: RwLock<(String, RedisProjection)>,
}

impl LiveProjection {
    /// Connects and reads the pointer once.
    ///
    /// Errors: Redis unreachable.
    pub async fn connect(settings: &Settings) -> anyhow::Result<Arc<Self>> {
        let ttl = settings.checked_projection_ttl()?;
        let base = RedisProjection::connect(&settings.redis_url, &settings.redis_prefix).await?.with_ttl(ttl);
        let name = read_pointer(&base, &settings.live_pointer_key()).await?;
        let projection = base.with_prefix(&settings.in_namespace(&name)?.ns_redis_prefix());
        info!(namespace = %name, "read API serves namespace");
        Ok(Arc::new(Self { settings: settings.clone(), current: RwLock::new((name, projection)) }))
    }

    /// The namespace served now and its projection.
    pub fn current(&self) -> (String, RedisProjection) {
        self.current.read().expect("not poisoned").clone()
    }

    /// Re-reads the pointer and switches when it names another (valid) namespace. Returns the namespace served.
    ///
    /// Errors: Redis unreachable (the current namespace stays).
    pub async fn refresh(&self) -> anyhow::Result<String> {
        let (name, projection) = self.current();
        let live = read_pointer(&projection, &self.settings.live_pointer_key()).await?;
        if live != name {
            let ns = self.settings.in_namespace(&live).context("the live pointer names an invalid namespace")?;
            *self.current.write().expect("not poisoned") =
                (live.clone(), projection.with_prefix(&ns.ns_redis_prefix()));
            info!(from = %name, to = %live, "read API switched namespace");
        }
        Ok(live)
    }

    /// Follows the pointer every [`FOLLOW_INTERVAL`] until the process ends.
    pub fn follow(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(FOLLOW_INTERVAL).await;
                match me.refresh().await {
                    // Logged once per outage, not every 200 ms.
                    Err(e) if !failing => {
                        failing = true;
                        warn!(error = %format!("{e:#}"), "reading the live pointer failed; still serving the same namespace");
                    }
                    Err(_) => {}
                    Ok(_) if failing => {
                        failing = false;
                        info!("reading the live pointer works again");
                    }
                    Ok(_) => {}
                }
            }
        });
    }
}

/// The consumer groups of a namespace's stages.
fn groups(ns: &Settings) -> [String; 2] {
    Stage::ALL.map(|stage| ns.stage_group(stage))
}

/// The namespace's consumer groups that have members now (a service is running in it).
///
/// Errors: Kafka unreachable.
pub async fn active_groups(ns: &Settings) -> anyhow::Result<Vec<String>> {
    let brokers = ns.brokers.clone();
    let names = groups(ns);
    tokio::task::spawn_blocking(move || {
        let c = kafka::metadata_client(&brokers)?;
        let mut active = Vec::new();
        for g in names {
            let list = c.fetch_group_list(Some(&g), kafka::QUERY_TIMEOUT).with_context(|| format!("group {g}"))?;
            if list.groups().iter().any(|x| !x.members().is_empty()) {
                active.push(g);
            }
        }
        Ok(active)
    })
    .await
    .context("listing consumer groups")?
}

/// What `unread promote` did.
#[derive(Debug)]
pub struct PromoteReport {
    /// The namespace promoted.
    pub namespace: String,
    /// The namespace served before.
    pub previous: String,
    /// Whether a service writes the promoted namespace (its consumer groups have members).
    pub writer_running: bool,
    /// What `--drop-old` deleted.
    pub dropped: Option<DropReport>,
}

impl fmt::Display for PromoteReport {
    /// What happened, one line each: the switch, a warning when no service writes the namespace, the drop.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, previous) = (&self.namespace, &self.previous);
        if previous == name {
            write!(f, "namespace {name} is already live")?;
        } else {
            write!(f, "promoted {name} (was {previous}): read API instances switch within 0.2 s")?;
        }
        if !self.writer_running {
            write!(
                f,
                "\nwarning: no service runs in namespace {name}: readers see its state as of its last write; \
                 start `unread run --namespace {name}`"
            )?;
        }
        if let Some(d) = &self.dropped {
            write!(f, "\n{d}")?;
        }
        Ok(())
    }
}

/// `unread promote NAME`: makes `name` the namespace every read API instance serves, atomically (one `SET` of the
/// live pointer), then with `drop_old` waits [`SWITCH_GRACE`] and drops the previous one.
///
/// Errors: the namespace holds no state or an unfinished replay, or (unless `force`) a replay from a timestamp,
/// whose counts are partial; with `drop_old`, a service still runs in the
/// previous namespace (checked before switching, so nothing changes then); a store unreachable.
pub async fn promote(settings: &Settings, name: &str, drop_old: bool, force: bool) -> anyhow::Result<PromoteReport> {
    let target = settings.in_namespace(name)?;
    check_promotable(&target, force).await?;
    let base = RedisProjection::connect(&settings.redis_url, &settings.redis_prefix).await?;
    let previous = read_pointer(&base, &settings.live_pointer_key()).await?;
    let mut report =
        PromoteReport { namespace: name.to_owned(), previous: previous.clone(), writer_running: false, dropped: None };
    report.writer_running = !active_groups(&target).await?.is_empty();
    if previous == name {
        return Ok(report);
    }
    let old = settings.in_namespace(&previous)?;
    if drop_old {
        let active = active_groups(&old).await?;
        if !active.is_empty() {
            bail!(
                "a service still runs in namespace {previous:?} (groups {active:?} have members): stop it, or promote \
                 without --drop-old and drop it later with `unread drop {previous}`"
            );
        }
    }
    let mut conn = base.connection();
    redis::cmd("SET")
        .arg(settings.live_pointer_key())
        .arg(name)
        .query_async::<()>(&mut conn)
        .await
        .context("setting the live pointer")?;
    info!(from = %previous, to = %name, "promoted");
    if drop_old {
        tokio::time::sleep(SWITCH_GRACE).await;
        report.dropped = Some(drop(settings, &previous).await?);
    }
    Ok(report)
}

/// Refuses a namespace with no state, an unfinished replay, or (unless `force`) a replay from a timestamp.
async fn check_promotable(target: &Settings, force: bool) -> anyhow::Result<()> {
    let name = &target.namespace;
    let store = CheckpointStore::connect(&target.database_url, &target.ns_db_schema(), 2).await?;
    store.migrate().await?;
    if store.is_empty().await? {
        bail!("namespace {name:?} holds no state: fill it with `unread replay --into {name}` first");
    }
    if let Some(r) = store.replay_status().await? {
        if r.finished_at.is_none() {
            bail!("namespace {name:?} holds an unfinished replay: run it again to resume it, then promote");
        }
        if r.from != "earliest" && r.from != "checkpoint" && !force {
            bail!(
                "namespace {name:?} was replayed from {}: its counts ignore everything before that time; \
                 promote it anyway with --force",
                r.from
            );
        }
    }
    Ok(())
}

/// What `unread drop` deleted.
#[derive(Debug)]
pub struct DropReport {
    /// The namespace dropped.
    pub namespace: String,
    /// Redis keys deleted.
    pub redis_keys: usize,
    /// The PostgreSQL schema dropped.
    pub schema: String,
    /// The consumer groups deleted.
    pub groups: Vec<String>,
    /// The delta topic deleted.
    pub delta_topic: String,
}

impl fmt::Display for DropReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { namespace, redis_keys, schema, groups, delta_topic } = self;
        write!(
            f,
            "dropped {namespace}: {redis_keys} Redis keys, schema {schema}, groups {groups:?}, topic {delta_topic}"
        )
    }
}

/// `unread drop NAME`: deletes a namespace: its Redis keys, its PostgreSQL schema, its consumer groups and its delta
/// topic (`unread topics create --namespace NAME` makes a new one). The input topics are shared and stay.
///
/// Errors: `name` is the live namespace; a service runs in it; a store unreachable.
pub async fn drop(settings: &Settings, name: &str) -> anyhow::Result<DropReport> {
    check_namespace(name)?;
    let base = RedisProjection::connect(&settings.redis_url, &settings.redis_prefix).await?;
    if read_pointer(&base, &settings.live_pointer_key()).await? == name {
        bail!("namespace {name:?} is the live one (the read API serves it): promote another first");
    }
    let ns = settings.in_namespace(name)?;
    let active = active_groups(&ns).await?;
    if !active.is_empty() {
        bail!("a service runs in namespace {name:?} (groups {active:?} have members): stop it first");
    }
    let prefix = ns.ns_redis_prefix();
    let mut redis_keys = 0;
    // Users, markers, the lists' and indexes' keys (`SharedKeys`), the version counter: not `{prefix}*`, which for
    // the default namespace would take every other namespace's keys too.
    let kinds = ["u:*", "partition:*", "[lx]:{#*", "[lx][agv]:{#*", "changes"];
    for pattern in kinds.map(|k| format!("{prefix}{k}")) {
        redis_keys += delete_matching(&base, &pattern).await?;
    }
    let schema = ns.ns_db_schema();
    crate::checkpoint::store::drop_schema(&ns.database_url, &schema).await.context("dropping the schema")?;
    let admin = kafka::admin(&ns.brokers)?;
    let opts = kafka::admin_options();
    let group_names = groups(&ns);
    let refs: Vec<&str> = group_names.iter().map(String::as_str).collect();
    let _ = admin.delete_groups(&refs, &opts).await; // a group that never existed is fine
    let delta_topic = ns.topics().user_deltas;
    let _ = admin.delete_topics(&[&delta_topic], &opts).await;
    Ok(DropReport { namespace: name.to_owned(), redis_keys, schema, groups: group_names.to_vec(), delta_topic })
}

/// Deletes the keys matching `pattern` (a Redis glob; SCAN and UNLINK in batches of 1,000, so Redis is never
/// blocked long), on every master of a cluster. Returns how many were deleted.
///
/// Errors: Redis unreachable.
pub async fn delete_matching(projection: &RedisProjection, pattern: &str) -> anyhow::Result<usize> {
    let mut n = 0;
    for master in projection.masters().await? {
        let client = crate::projection::conn::client(master.as_str()).context("a master's URL")?;
        let mut conn = client.get_multiplexed_async_connection().await.context("connecting to a master")?;
        n += delete_on_node(&mut conn, pattern).await?;
    }
    Ok(n)
}

/// [`delete_matching`] on one server (one master of a cluster: its keys, one UNLINK each, since a cluster refuses
/// a multi-key command across slots).
async fn delete_on_node(conn: &mut redis::aio::MultiplexedConnection, pattern: &str) -> anyhow::Result<usize> {
    let (mut cursor, mut n) = (0u64, 0);
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .context("scanning Redis keys")?;
        if !keys.is_empty() {
            n += keys.len();
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("UNLINK").arg(key).ignore();
            }
            pipe.query_async::<()>(conn).await.context("deleting Redis keys")?;
        }
        if next == 0 {
            return Ok(n);
        }
        cursor = next;
    }
}
