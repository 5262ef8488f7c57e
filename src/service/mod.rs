//! `unread run`: the fan-out stage, the fold stage and the read API in one process (or any subset of them).
//!
//! The imperative shell around the pure core: consumer-group members ([`group`]) hand records of each assigned
//! partition to a task of its own ([`fanout_stage`], [`fold_stage`]), which owns that partition's state, writes the
//! Redis projection and checkpoints to PostgreSQL.

pub mod fanout_stage;
pub mod fold_stage;
pub mod group;
pub mod metrics;
pub mod records;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;
use tokio::sync::watch;
use tracing::info;

use crate::checkpoint::store::CheckpointStore;
use crate::config::Settings;
use crate::projection::redis::RedisProjection;
use crate::topology::Topics;
use metrics::Metrics;

/// When a partition task flushes (fold: Redis then PostgreSQL; fan-out: PostgreSQL): after `interval` with
/// anything pending, or as soon as `events` records are pending.
#[derive(Debug, Clone, Copy)]
pub struct FlushPolicy {
    pub interval: Duration,
    pub events: usize,
}

/// Options of `unread run`.
#[derive(Debug, Clone, Args)]
pub struct RunOptions {
    #[command(flatten)]
    pub settings: Settings,
    /// Which parts to run, comma-separated: fanout, fold, api.
    #[arg(long, env = "UNREAD_ROLES", value_delimiter = ',', default_value = "fanout,fold,api")]
    pub roles: Vec<Role>,
    /// Address of the read API.
    #[arg(long, env = "UNREAD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Flush a partition task's changes at least this often, in ms (also the read staleness bound).
    #[arg(long, env = "UNREAD_FLUSH_INTERVAL_MS", default_value_t = 200)]
    pub flush_interval_ms: u64,
    /// Flush a partition task as soon as this many records are pending.
    #[arg(long, env = "UNREAD_FLUSH_EVENTS", default_value_t = 20_000)]
    pub flush_events: usize,
    /// Run a sampled `unread verify` (Redis against the checkpoint) this often, e.g. `30s`, `5m`; results go to
    /// `/metrics` as `unread_verify_*`. Off when not given.
    #[arg(long, env = "UNREAD_VERIFY_EVERY", value_parser = parse_duration)]
    pub verify_every: Option<Duration>,
    /// Users each background verify samples.
    #[arg(long, env = "UNREAD_VERIFY_SAMPLE", default_value_t = 1000)]
    pub verify_sample: usize,
}

/// Parses a duration such as `500ms`, `30s`, `5m` or `1h`.
///
/// Errors: another shape, or zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("{s:?}: expected a number and a unit (ms, s, m, h)"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("{s:?}: unit must be ms, s, m or h")),
    };
    if d.is_zero() {
        return Err(format!("{s:?}: must be more than zero"));
    }
    Ok(d)
}

/// Runs a sampled verify of the namespace every `every` for as long as the process runs, into the metrics.
fn spawn_verifier(
    settings: Settings,
    store: CheckpointStore,
    projection: RedisProjection,
    metrics: Arc<Metrics>,
    every: Duration,
    sample: usize,
) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            match crate::ops::verify(&settings, &store, &projection, Some(sample), false).await {
                Ok(r) => {
                    metrics.verified(r.checked, r.differing.len(), r.ahead);
                    if !r.differing.is_empty() {
                        tracing::warn!(differing = r.differing.len(), checked = r.checked, first = ?r.differing.first(), "background verify: Redis differs from the checkpoint");
                    }
                }
                Err(e) => {
                    metrics.verify_failed();
                    tracing::warn!(error = %format!("{e:#}"), "background verify failed");
                }
            }
        }
    });
}

/// A part of `unread run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Fanout,
    Fold,
    Api,
}

/// What every partition task shares.
pub struct Shared {
    pub topics: Topics,
    pub store: CheckpointStore,
    pub projection: RedisProjection,
    pub producer: ProducerSlot,
    pub flush: FlushPolicy,
    pub metrics: Arc<Metrics>,
    /// This process, as named in partition leases: `{hostname or "host"}:{pid}`.
    pub owner: String,
}

/// An idempotent producer with the Java-compatible partitioner (murmur2), as the contract's producers use.
///
/// Errors: the client cannot be created.
pub fn producer(brokers: &str) -> anyhow::Result<FutureProducer> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5")
        // A delivery that cannot complete fails the task (which restarts from its checkpoint) after 30 s, rather
        // than stalling it for librdkafka's default 5 minutes, e.g. after a broker crash with records in flight.
        .set("message.timeout.ms", "30000")
        .set("queue.buffering.max.messages", "500000")
        .set("message.max.bytes", "16777216")
        .create()
        .context("creating the Kafka producer")
}

/// The service's producer, replaced as a whole when its deliveries fail: after a broker restart, librdkafka's
/// idempotent producer can stay unable to deliver (every message times out) until it is recreated
/// (confluentinc/librdkafka#3009; seen here in `service::kafka_broker_restarted_mid_flow_is_exact`).
pub struct ProducerSlot {
    brokers: String,
    current: std::sync::Mutex<(u64, FutureProducer)>,
}

impl ProducerSlot {
    /// A slot holding a new producer ([`producer`]).
    ///
    /// Errors: the client cannot be created.
    pub fn new(brokers: &str) -> anyhow::Result<Self> {
        Ok(Self { brokers: brokers.to_owned(), current: std::sync::Mutex::new((0, producer(brokers)?)) })
    }

    /// The current producer (a cheap handle) and its generation, to pass to [`ProducerSlot::replace`].
    pub fn get(&self) -> (u64, FutureProducer) {
        self.current.lock().expect("not poisoned").clone()
    }

    /// Replaces the producer of generation `failed` with a new one, unless another task already did. The old one is
    /// dropped off the async threads (dropping waits up to 500 ms for its queue).
    pub fn replace(&self, failed: u64) {
        let mut current = self.current.lock().expect("not poisoned");
        if current.0 != failed {
            return;
        }
        match producer(&self.brokers) {
            Ok(new) => {
                let old = std::mem::replace(&mut *current, (failed + 1, new));
                tracing::warn!(generation = failed + 1, "deliveries failed: replaced the Kafka producer");
                tokio::task::spawn_blocking(move || drop(old));
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "could not create a new Kafka producer"),
        }
    }
}

/// Runs `op` until it succeeds, waiting 100 ms, then twice as long each time up to 2 s, for at most 60 s; each
/// failure is logged and counted under `what`. A [`crate::checkpoint::store::Fenced`] error is returned at once.
///
/// Errors: the last error after 60 s, or a fencing.
pub async fn retry<T, F, Fut>(metrics: &Metrics, what: &'static str, mut op: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let started = std::time::Instant::now();
    let mut wait = Duration::from_millis(100);
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.downcast_ref::<crate::checkpoint::store::Fenced>().is_some() => return Err(e),
            Err(e) if started.elapsed() >= Duration::from_secs(60) => {
                return Err(e.context(format!("{what}: still failing after 60 s")))
            }
            Err(e) => {
                metrics.error(what);
                tracing::warn!(what, error = %format!("{e:#}"), retry_in_ms = wait.as_millis() as u64, "failed; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Starts a stage's partition task with `run`, its end logged by [`logged`].
fn task_spawner<F, Fut>(shared: &Arc<Shared>, stage: &'static str, run: F) -> group::SpawnTask
where
    F: Fn(Arc<Shared>, group::PartitionInput) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let shared = shared.clone();
    Arc::new(move |input| {
        let (sh, p) = (shared.clone(), input.partition);
        let task = run(sh.clone(), input);
        tokio::spawn(async move { logged(stage, p, &sh.metrics, task.await) })
    })
}

/// Logs how a partition task ended (also when nobody awaits it any more: a revoked task ends on its own) and
/// counts fencings.
fn logged(stage: &'static str, partition: i32, metrics: &Metrics, result: anyhow::Result<()>) -> anyhow::Result<()> {
    match &result {
        Ok(()) => tracing::debug!(stage, partition, "task ended"),
        Err(e) if e.downcast_ref::<crate::checkpoint::store::Fenced>().is_some() => {
            metrics.fenced();
            tracing::warn!(stage, partition, error = %e, "task fenced: another task owns the partition now");
        }
        Err(e) => tracing::warn!(stage, partition, error = %format!("{e:#}"), "task failed"),
    }
    result
}

/// Runs until SIGINT or SIGTERM, then stops the stages cleanly (each task flushes and checkpoints).
///
/// Errors: a service unreachable at start, or the API address in use.
pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    let s = &opts.settings;
    let store = CheckpointStore::connect(&s.database_url, &s.ns_db_schema(), 20).await?;
    store.migrate().await?;
    let projection = RedisProjection::connect(&s.redis_url, &s.ns_redis_prefix()).await?;
    let topics = s.topics();
    let metrics = Arc::new(Metrics::default());
    let shared = Arc::new(Shared {
        topics: topics.clone(),
        store,
        projection: projection.clone(),
        producer: ProducerSlot::new(&s.brokers)?,
        flush: FlushPolicy { interval: Duration::from_millis(opts.flush_interval_ms), events: opts.flush_events },
        metrics: metrics.clone(),
        owner: format!(
            "{}:{}",
            std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "host".into()),
            std::process::id()
        ),
    });
    if let Some(every) = opts.verify_every {
        spawn_verifier(s.clone(), shared.store.clone(), projection.clone(), metrics.clone(), every, opts.verify_sample);
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut stages = tokio::task::JoinSet::new();
    let mut assignments = Vec::new();

    let mut start_stage = |name: &'static str, topics: &[&str], spawn: group::SpawnTask| -> anyhow::Result<()> {
        let (_, dispatcher) = group::consumer(&s.brokers, &format!("{}.{name}", s.ns_group_id()), topics)?;
        assignments.push((name, dispatcher.assignment.clone()));
        stages.spawn(dispatcher.run(name, spawn, stop_rx.clone()));
        Ok(())
    };
    if opts.roles.contains(&Role::Fanout) {
        start_stage("fanout", &[&topics.conversation_events], task_spawner(&shared, "fanout", fanout_stage::run))?;
    }
    if opts.roles.contains(&Role::Fold) {
        let fold_topics = [topics.user_events.as_str(), topics.user_deltas.as_str()];
        start_stage("fold", &fold_topics, task_spawner(&shared, "fold", fold_stage::run))?;
    }
    metrics.set_assignments(assignments.clone());
    if opts.roles.contains(&Role::Api) {
        let live = crate::namespace::LiveProjection::connect(s).await?;
        live.follow();
        let state = crate::api::ApiState { live, assignments, metrics: metrics.clone() };
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .with_context(|| format!("binding the read API to {}", opts.listen))?;
        info!(addr = %opts.listen, "read API listening");
        let mut stop = stop_rx.clone();
        stages.spawn(async move {
            axum::serve(listener, crate::api::router(state))
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
                .context("read API")
        });
    }

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT: stopping"),
        _ = term.recv() => info!("SIGTERM: stopping"),
        Some(done) = stages.join_next() => {
            let _ = stop_tx.send(true);
            done.context("a stage panicked")??;
            anyhow::bail!("a stage stopped unexpectedly");
        }
    }
    let _ = stop_tx.send(true);
    while let Some(done) = stages.join_next().await {
        done.context("a stage panicked")??;
    }
    info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_producer_is_replaced_once_per_failed_generation() {
        let slot = ProducerSlot::new("127.0.0.1:1").unwrap(); // never contacted
        let (g0, _) = slot.get();
        slot.replace(g0);
        let (g1, _) = slot.get();
        assert_eq!(g1, g0 + 1);
        slot.replace(g0); // another task that saw the same failure: nothing to do
        assert_eq!(slot.get().0, g1);
        assert!(parse_duration("500ms").unwrap() == Duration::from_millis(500));
        assert!(parse_duration("2m").unwrap() == Duration::from_secs(120));
        assert!(parse_duration("0s").is_err() && parse_duration("5").is_err() && parse_duration("s").is_err());
    }
}
