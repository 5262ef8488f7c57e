//! The running service's metrics, served at `GET /metrics` in the OpenMetrics text format (which Prometheus
//! scrapes) by `prometheus-client`, every family with its `# HELP` line.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::checkpoint::Stage;

/// A shared view of a stage's consumer-group assignment, for readiness (`/readyz`) and the partition gauges: the
/// group member ([`crate::service::group`]) writes it at each rebalance, the API and the metrics read it.
#[derive(Debug, Default)]
pub struct Assignment {
    /// The partition numbers currently assigned.
    pub(crate) partitions: Mutex<HashSet<i32>>,
    /// Rebalance events seen (assignments and revocations).
    pub rebalances: std::sync::atomic::AtomicUsize,
    /// Times a partition's records waited for room in its task's full channel ([`crate::service::group`]'s feeds):
    /// a backlog. librdkafka stops fetching that partition meanwhile, once its queue holds its bound.
    pub pauses: std::sync::atomic::AtomicUsize,
}

impl Assignment {
    /// The partition numbers currently assigned.
    pub fn partitions(&self) -> HashSet<i32> {
        self.partitions.lock().expect("not poisoned").clone()
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the latency histograms' buckets, in seconds.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StageLabel {
    stage: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TopicLabel {
    topic: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabel {
    source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StoreLabel {
    store: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LagLabels {
    stage: &'static str,
    topic: String,
    partition: i32,
}

type LatencyFamily = Family<StageLabel, Histogram, fn() -> Histogram>;

/// Upper bounds of the live path's step histograms, in seconds: 0.5 ms doubling up to 8.192 s.
const STEP_BUCKETS: [f64; 15] =
    [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192];

/// One step of the live path of a message, from its producer to a socket: `unread_live_path_seconds{step}`
/// (docs/performance.md). Kafka timestamps are the producer's clock (`CreateTime`), the others this process's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// A conversation event's Kafka timestamp → the fan-out task took it from its partition.
    ProducedToFanOutRead,
    /// The fan-out took an event → the Kafka transaction holding its deltas committed (visible to
    /// `read_committed` readers).
    FanOutReadToCommitted,
    /// A delta's Kafka timestamp (when the fan-out produced it, inside its open transaction) → the fold took it:
    /// the wait for the transaction's commit is in this step too.
    DeltaToFoldRead,
    /// A user event's Kafka timestamp (read ack, mute, mark… from its producer or the write gateway) → the fold
    /// took it: the user's own actions, which skip the fan-out.
    UserEventToFoldRead,
    /// The fold took a record (delta or user event) → its users were written to Redis.
    FoldReadToRedis,
    /// A change was announced on the change channel → its user's new counts were queued to the sockets.
    RedisToPushed,
}

impl Step {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::ProducedToFanOutRead => "produced_to_fanout_read",
            Step::FanOutReadToCommitted => "fanout_read_to_committed",
            Step::DeltaToFoldRead => "delta_to_fold_read",
            Step::UserEventToFoldRead => "user_event_to_fold_read",
            Step::FoldReadToRedis => "fold_read_to_redis",
            Step::RedisToPushed => "redis_to_pushed",
        }
    }
}

/// A request's route (the matched path pattern, never the ids in it: bounded cardinality), method and status.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StepLabel {
    step: &'static str,
}

fn step_histogram() -> Histogram {
    Histogram::new(STEP_BUCKETS)
}

/// The service's metrics. Cheap to update from every task.
pub struct Metrics {
    registry: Registry,
    processed: Family<TopicLabel, Counter>,
    dead_letters: Family<KindLabel, Counter>,
    errors: Family<StoreLabel, Counter>,
    redis_writes: Counter,
    projection_whole: Counter,
    increments: Counter,
    checkpoint_rows: Counter,
    checkpoint_bytes: Counter,
    checkpoints: Counter,
    checkpoint_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    fenced: Counter,
    kafka_fenced: Counter,
    zombie_deltas: Counter,
    fanout_batch: Family<KindLabel, Counter>,
    flush_latency: LatencyFamily,
    transaction_latency: LatencyFamily,
    kafka_commit_latency: Histogram,
    live_path: Family<StepLabel, Histogram, fn() -> Histogram>,
    lag: Family<LagLabels, Gauge>,
    lag_labels: Mutex<HashSet<LagLabels>>,
    assigned: Family<StageLabel, Gauge>,
    rebalances: Family<StageLabel, Counter>,
    consumer_pauses: Family<StageLabel, Counter>,
    assignments: Mutex<Vec<(Stage, Arc<Assignment>)>>,
    verify_runs: Counter,
    verify_failures: Counter,
    verify_checked: Gauge,
    verify_differing: Gauge,
    verify_ahead: Gauge,
    verify_last_run: Gauge,
    /// The read API's answers by source (`redis`, `checkpoint`, `stale`).
    reads: Family<SourceLabel, Counter>,
    /// 1 while the breaker around Redis reads is open.
    breaker_open: Gauge,
    /// User reads that tried Redis and failed or timed out (each counts toward opening the breaker).
    read_redis_failures: Counter,
    /// Requests refused over a rate limit, by token kind (`user`, `service`).
    rate_limited: Family<KindLabel, Counter>,
    /// Stream sockets open on this instance.
    push_sockets: Gauge,
    /// Stream sockets the hub dropped (queue full: a slow client, which reconnects with `since`).
    push_dropped: Counter,
    /// Users the scheduled repair rewrote from the checkpoint.
    verify_repaired: Counter,
    /// HTTP requests answered, by route pattern, method and status.
    http_requests: Family<RequestLabels, Counter>,
    /// HTTP request latency (until the response's head), by route pattern.
    http_latency: Family<RouteLabel, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut m = Metrics {
            registry: Registry::with_prefix("unread"),
            processed: Family::default(),
            dead_letters: Family::default(),
            errors: Family::default(),
            redis_writes: Counter::default(),
            projection_whole: Counter::default(),
            increments: Counter::default(),
            checkpoint_rows: Counter::default(),
            checkpoint_bytes: Counter::default(),
            checkpoints: Counter::default(),
            checkpoint_seconds: Counter::default(),
            fenced: Counter::default(),
            kafka_fenced: Counter::default(),
            zombie_deltas: Counter::default(),
            fanout_batch: Family::default(),
            flush_latency: Family::new_with_constructor(latency_histogram),
            transaction_latency: Family::new_with_constructor(latency_histogram),
            kafka_commit_latency: latency_histogram(),
            live_path: Family::new_with_constructor(step_histogram),
            lag: Family::default(),
            lag_labels: Mutex::new(HashSet::new()),
            assigned: Family::default(),
            rebalances: Family::default(),
            consumer_pauses: Family::default(),
            assignments: Mutex::new(Vec::new()),
            verify_runs: Counter::default(),
            verify_failures: Counter::default(),
            verify_checked: Gauge::default(),
            verify_differing: Gauge::default(),
            verify_ahead: Gauge::default(),
            verify_last_run: Gauge::default(),
            reads: Family::default(),
            breaker_open: Gauge::default(),
            read_redis_failures: Counter::default(),
            rate_limited: Family::default(),
            push_sockets: Gauge::default(),
            push_dropped: Counter::default(),
            verify_repaired: Counter::default(),
            http_requests: Family::default(),
            http_latency: Family::new_with_constructor(latency_histogram),
        };
        m.register();
        m.zero_series();
        m
    }
}

impl Metrics {
    /// Registers every family under the `unread_` prefix with its help text.
    fn register(&mut self) {
        let r = &mut self.registry;
        r.register("events_processed", "Input records processed, by topic", self.processed.clone());
        r.register(
            "dead_letter_records",
            "Records sent to the dead-letter topic, by error kind",
            self.dead_letters.clone(),
        );
        r.register("errors", "Failed attempts at a store operation (retried), by store", self.errors.clone());
        r.register("redis_user_writes", "Users written to the Redis projection", self.redis_writes.clone());
        r.register(
            "projection_whole_rewrites",
            "Users whose patch found no hash to patch (expired: --projection-ttl; or refilled by a reader) and were \
             written whole",
            self.projection_whole.clone(),
        );
        r.register(
            "increments",
            "Per-recipient increments: seqs that became unread for some user",
            self.increments.clone(),
        );
        r.register("checkpoint_rows", "Entity rows written by checkpoints", self.checkpoint_rows.clone());
        r.register("checkpoint_bytes", "Bytes of encoded state written by checkpoints", self.checkpoint_bytes.clone());
        r.register(
            "checkpoints",
            "Checkpoints (fold flushes and fan-out checkpoints) completed",
            self.checkpoints.clone(),
        );
        r.register("checkpoint_seconds", "Seconds spent in checkpoints, in all", self.checkpoint_seconds.clone());
        r.register("fenced_tasks", "Partition tasks fenced because another task took their lease", self.fenced.clone());
        r.register(
            "kafka_fenced_tasks",
            "Fan-out tasks whose transactional producer Kafka fenced (a successor holds its transactional id)",
            self.kafka_fenced.clone(),
        );
        let zombie = self.zombie_deltas.clone();
        r.register(
            "zombie_deltas",
            "Deltas dropped by the fold's fence: from a fan-out task whose lease had moved",
            zombie,
        );
        let batch = self.fanout_batch.clone();
        r.register(
            "fanout_outcomes",
            "What the fan-out met besides deltas: duplicate_message (a seq at or below the head, ignored), \
             early_recall (a recall above the head, ignored), to_read and to_write (read-diffusion switches)",
            batch,
        );
        r.register("flush_seconds", "Latency of one whole flush, by stage", self.flush_latency.clone());
        let tx = self.transaction_latency.clone();
        r.register("checkpoint_transaction_seconds", "Latency of the PostgreSQL checkpoint transaction, by stage", tx);
        let kafka = self.kafka_commit_latency.clone();
        r.register("kafka_commit_seconds", "Latency of the fan-out's Kafka transaction commit", kafka);
        r.register(
            "live_path_seconds",
            "Latency of each step of a message's live path, from its producer to a socket, weighted by record \
             (docs/performance.md)",
            self.live_path.clone(),
        );
        r.register(
            "partition_lag",
            "Records behind the end of an input partition, as its task last saw",
            self.lag.clone(),
        );
        r.register("assigned_partitions", "Partitions assigned to this instance, by stage", self.assigned.clone());
        r.register("rebalances", "Rebalance events seen, by stage", self.rebalances.clone());
        r.register(
            "consumer_pauses",
            "Times a partition's records waited for room in its task's full channel, by stage (the consumer stops \
             fetching that partition meanwhile; nothing is fetched twice)",
            self.consumer_pauses.clone(),
        );
        self.register_verify();
        self.register_api();
    }

    /// Creates at 0 the series whose labels are known in advance, so that `/metrics` shows them before their first
    /// event and a rate over them is 0, not absent (alerts and dashboards see "no errors", not "no data").
    fn zero_series(&self) {
        for store in ["redis", "postgres"] {
            let _ = self.errors.get_or_create(&StoreLabel { store });
        }
        for source in ["redis", "checkpoint", "stale"] {
            let _ = self.reads.get_or_create(&SourceLabel { source });
        }
        for kind in ["user", "service"] {
            let _ = self.rate_limited.get_or_create(&KindLabel { kind });
        }
        for kind in ["duplicate_message", "early_recall", "to_read", "to_write"] {
            let _ = self.fanout_batch.get_or_create(&KindLabel { kind });
        }
    }

    /// The background verify's families (`--verify-every`, `--repair`).
    fn register_verify(&mut self) {
        let r = &mut self.registry;
        r.register("verify_runs", "Background verifies completed", self.verify_runs.clone());
        r.register("verify_failures", "Background verifies that could not run", self.verify_failures.clone());
        r.register("verify_checked_users", "Users the last background verify compared", self.verify_checked.clone());
        r.register(
            "verify_differing_users",
            "Users that differed in the last background verify",
            self.verify_differing.clone(),
        );
        r.register(
            "verify_ahead_users",
            "Users newer in Redis in the last background verify",
            self.verify_ahead.clone(),
        );
        let last = self.verify_last_run.clone();
        r.register("verify_last_run_timestamp_seconds", "Unix time of the last background verify", last);
        let repaired = self.verify_repaired.clone();
        r.register(
            "verify_repaired_users",
            "Users the scheduled repair (--repair) rewrote from the checkpoint",
            repaired,
        );
    }

    /// The read API's and the push hub's families.
    fn register_api(&mut self) {
        let r = &mut self.registry;
        let reads = self.reads.clone();
        r.register("reads", "User reads answered, by source: redis, checkpoint (refilled), stale (Redis down)", reads);
        r.register("read_breaker_open", "1 while the breaker around Redis reads is open", self.breaker_open.clone());
        let failures = self.read_redis_failures.clone();
        r.register("read_redis_failures", "User reads that tried Redis and failed or timed out", failures);
        let limited = self.rate_limited.clone();
        r.register("rate_limited", "Requests refused over a rate limit, by token kind (user, service)", limited);
        r.register(
            "push_sockets",
            "Stream sockets (WebSocket and SSE) open on this instance",
            self.push_sockets.clone(),
        );
        let dropped = self.push_dropped.clone();
        r.register("push_dropped_sockets", "Stream sockets dropped because their queue was full", dropped);
        let requests = self.http_requests.clone();
        r.register("http_requests", "HTTP requests answered, by route (its pattern), method and status", requests);
        let latency = self.http_latency.clone();
        r.register(
            "http_request_duration_seconds",
            "HTTP request latency until the response's head, by route",
            latency,
        );
    }

    /// One HTTP request answered: its route pattern (`/v1/users/{user_id}/unread`; `unmatched` for none), method,
    /// status and the time until the response's head.
    pub fn http_request(&self, route: &str, method: &str, status: u16, elapsed: std::time::Duration) {
        let (route, method) = (route.to_owned(), method.to_owned());
        self.http_latency.get_or_create(&RouteLabel { route: route.clone() }).observe(elapsed.as_secs_f64());
        self.http_requests.get_or_create(&RequestLabels { route, method, status }).inc();
    }

    /// One user read answered from `source` (`redis`, `checkpoint` or `stale`).
    pub fn read(&self, source: &'static str) {
        self.reads.get_or_create(&SourceLabel { source }).inc();
    }

    /// One user read that tried Redis and failed or timed out: none while the breaker is open, except its probe.
    pub fn read_redis_failure(&self) {
        self.read_redis_failures.inc();
    }

    /// One request refused over the rate limit of a `kind` token (`user` or `service`).
    pub fn rate_limited(&self, kind: &'static str) {
        self.rate_limited.get_or_create(&KindLabel { kind }).inc();
    }

    /// The read API's state when scraped: whether the Redis breaker is open, how many stream sockets are open, and
    /// how many the hub has dropped since it started (the counter catches up).
    pub fn api_state(&self, breaker_open: bool, sockets: usize, dropped: u64) {
        self.breaker_open.set(i64::from(breaker_open));
        self.push_sockets.set(sockets as i64);
        let counted = self.push_dropped.get();
        if dropped > counted {
            self.push_dropped.inc_by(dropped - counted);
        }
    }

    /// `n` records of `topic` processed; of `unread.user-deltas`, `n` deltas, however many records carried them.
    pub fn processed(&self, topic: &str, n: usize) {
        if n > 0 {
            self.processed.get_or_create(&TopicLabel { topic: topic.to_owned() }).inc_by(n as u64);
        }
    }

    /// One record sent to the dead-letter topic.
    pub fn dead_letter(&self, kind: &'static str) {
        self.dead_letters.get_or_create(&KindLabel { kind }).inc();
    }

    /// One failed attempt at `what` (`redis`, `postgres`, …), to be retried.
    pub fn error(&self, what: &'static str) {
        self.errors.get_or_create(&StoreLabel { store: what }).inc();
    }

    /// `n` users written to Redis.
    pub fn redis_writes(&self, n: usize) {
        self.redis_writes.inc_by(n as u64);
    }

    /// `n` users whose patch found no base and are written whole next ([`crate::state::commit::publish`]).
    pub fn projection_whole(&self, n: usize) {
        self.projection_whole.inc_by(n as u64);
    }

    /// `n` per-recipient increments (seqs that became unread for some user).
    pub fn increments(&self, n: u64) {
        self.increments.inc_by(n);
    }

    /// A checkpoint wrote `rows` entity rows of `bytes` encoded state in total.
    pub fn checkpoint_rows(&self, rows: usize, bytes: usize) {
        self.checkpoint_rows.inc_by(rows as u64);
        self.checkpoint_bytes.inc_by(bytes as u64);
    }

    /// The fold dropped a delta of an older fan-out generation ([`crate::core::delta::Fence`]).
    pub fn zombie_delta(&self) {
        self.zombie_deltas.inc();
    }

    /// A partition task was fenced: its lease was taken by another task, or (`by_kafka`) Kafka fenced its
    /// transactional producer.
    pub fn fenced(&self, by_kafka: bool) {
        self.fenced.inc();
        if by_kafka {
            self.kafka_fenced.inc();
        }
    }

    /// One checkpoint (or flush) that took `took`.
    pub fn checkpoint(&self, took: Duration) {
        self.checkpoints.inc();
        self.checkpoint_seconds.inc_by(took.as_secs_f64());
    }

    /// A flush of `stage` took `flush` in all, of which `checkpoint` in the PostgreSQL transaction.
    pub fn flush_latency(&self, stage: Stage, flush: Duration, checkpoint: Duration) {
        let label = StageLabel { stage: stage.as_str() };
        self.flush_latency.get_or_create(&label).observe(flush.as_secs_f64());
        self.transaction_latency.get_or_create(&label).observe(checkpoint.as_secs_f64());
    }

    /// What one fan-out batch met besides deltas ([`crate::core::fanout::BatchStats`]).
    pub fn fanout_batch(&self, stats: &crate::core::fanout::BatchStats) {
        for (kind, n) in [
            ("duplicate_message", stats.duplicate_messages),
            ("early_recall", stats.early_recalls),
            ("to_read", stats.to_read),
            ("to_write", stats.to_write),
        ] {
            if n > 0 {
                self.fanout_batch.get_or_create(&KindLabel { kind }).inc_by(n);
            }
        }
    }

    /// The fan-out committed its Kafka transaction in `took`.
    pub fn kafka_commit(&self, took: Duration) {
        self.kafka_commit_latency.observe(took.as_secs_f64());
    }

    /// `n` records took `took` through `step` of the live path (each counts once: percentiles are per record).
    pub fn live_path(&self, step: Step, took: Duration, n: usize) {
        self.live_path_each(step, std::iter::repeat_n(took, n));
    }

    /// Records took these times through `step` of the live path, one each.
    pub fn live_path_each(&self, step: Step, took: impl IntoIterator<Item = Duration>) {
        let histogram = self.live_path.get_or_create(&StepLabel { step: step.as_str() });
        for t in took {
            histogram.observe(t.as_secs_f64());
        }
    }

    /// The lag of one input partition as its task last saw it (end offset minus its next offset).
    pub fn lag(&self, stage: Stage, topic: &str, partition: i32, lag: i64) {
        let labels = LagLabels { stage: stage.as_str(), topic: topic.to_owned(), partition };
        self.lag.get_or_create(&labels).set(lag.max(0));
        self.lag_labels.lock().expect("not poisoned").insert(labels);
    }

    /// Forgets the lag of a partition no longer owned.
    pub fn forget_lag(&self, stage: Stage, partition: i32) {
        // A family cannot be iterated: the labels set are kept beside it.
        let mut set = self.lag_labels.lock().expect("not poisoned");
        set.retain(|l| {
            let keep = !(l.stage == stage.as_str() && l.partition == partition);
            if !keep {
                self.lag.remove(l);
            }
            keep
        });
    }

    /// The stages' assignments, for the partition gauges.
    pub fn set_assignments(&self, a: Vec<(Stage, Arc<Assignment>)>) {
        *self.assignments.lock().expect("not poisoned") = a;
    }

    /// A background verify compared `checked` users: `differing` differed, `ahead` were newer in Redis.
    pub fn verified(&self, checked: usize, differing: usize, ahead: usize) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.verify_checked.set(checked as i64);
        self.verify_differing.set(differing as i64);
        self.verify_ahead.set(ahead as i64);
        self.verify_last_run.set(now as i64);
        self.verify_runs.inc();
    }

    /// The scheduled repair rewrote `n` users.
    pub fn repaired(&self, n: usize) {
        self.verify_repaired.inc_by(n as u64);
    }

    /// A background verify could not run (a store unreachable).
    pub fn verify_failed(&self) {
        self.verify_failures.inc();
    }

    /// The OpenMetrics text of everything above ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        for (stage, a) in self.assignments.lock().expect("not poisoned").iter() {
            let label = StageLabel { stage: stage.as_str() };
            self.assigned.get_or_create(&label).set(a.partitions().len() as i64);
            for (seen, family) in [(&a.rebalances, &self.rebalances), (&a.pauses, &self.consumer_pauses)] {
                let (seen, counter) = (seen.load(Ordering::Relaxed) as u64, family.get_or_create(&label));
                counter.inc_by(seen.saturating_sub(counter.get()));
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_help_and_forgets_lag() {
        let m = Metrics::default();
        m.processed("t", 3);
        m.flush_latency(Stage::Fold, Duration::from_millis(3), Duration::from_millis(1));
        m.kafka_commit(Duration::from_millis(2));
        m.fanout_batch(&crate::core::fanout::BatchStats { duplicate_messages: 2, ..Default::default() });
        m.lag(Stage::Fold, "a", 1, 5);
        m.lag(Stage::Fold, "b", 1, 6);
        m.lag(Stage::FanOut, "c", 1, 7);
        let text = m.render();
        assert!(text.contains("# HELP unread_events_processed Input records processed"), "{text}");
        assert!(text.contains("unread_events_processed_total{topic=\"t\"} 3"), "{text}");
        assert!(text.contains("unread_flush_seconds_bucket{le=\"+Inf\",stage=\"fold\"} 1"), "{text}");
        assert!(text.contains("unread_fanout_outcomes_total{kind=\"duplicate_message\"} 2"), "{text}");
        assert!(text.contains("unread_kafka_commit_seconds_bucket{le=\"0.0025\"} 1"), "{text}");
        assert!(text.contains("unread_partition_lag{stage=\"fold\",topic=\"b\",partition=\"1\"} 6"), "{text}");
        m.forget_lag(Stage::Fold, 1);
        let text = m.render();
        assert!(!text.contains("topic=\"a\"") && !text.contains("topic=\"b\""), "{text}");
        assert!(text.contains("topic=\"c\""), "the other stage's lag stays: {text}");
    }
}
