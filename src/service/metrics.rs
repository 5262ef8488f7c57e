//! Counters of the running service, served at `GET /metrics` in Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::group::Assignment;

/// Upper bounds of the latency histograms' buckets, in seconds.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// A latency histogram in Prometheus' shape (cumulative buckets, sum, count).
#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.counts[i] += 1;
            }
        }
        self.sum += secs;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, stage: &str) {
        for (bound, n) in BUCKETS.iter().zip(self.counts) {
            let _ = writeln!(out, "{name}_bucket{{stage=\"{stage}\",le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{stage=\"{stage}\",le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{stage=\"{stage}\"}} {:.6}", self.sum);
        let _ = writeln!(out, "{name}_count{{stage=\"{stage}\"}} {}", self.count);
    }
}

/// The service's counters. Cheap to update from every task.
#[derive(Default)]
pub struct Metrics {
    /// stage → latency of one whole flush (fold: Redis + PostgreSQL; fan-out: acknowledgements + PostgreSQL)
    flush_seconds: Mutex<BTreeMap<&'static str, Histogram>>,
    /// stage → latency of the PostgreSQL checkpoint transaction alone
    checkpoint_seconds: Mutex<BTreeMap<&'static str, Histogram>>,
    /// (stage, topic, partition) → records behind the partition's end
    lag: Mutex<BTreeMap<(&'static str, String, i32), i64>>,
    processed: Mutex<BTreeMap<String, u64>>,
    dead_letters: Mutex<BTreeMap<&'static str, u64>>,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    redis_writes: AtomicU64,
    increments: AtomicU64,
    checkpoint_rows: AtomicU64,
    checkpoint_bytes: AtomicU64,
    checkpoints: AtomicU64,
    fenced: AtomicU64,
    checkpoint_micros: AtomicU64,
    assignments: Mutex<Vec<(&'static str, Arc<Assignment>)>>,
    /// The last background verify (`run --verify-every`): (checked, differing, ahead, unix time s); runs; failures.
    verify_last: Mutex<Option<(usize, usize, usize, u64)>>,
    verify_runs: AtomicU64,
    verify_failures: AtomicU64,
}

impl Metrics {
    /// `n` records of `topic` processed.
    pub fn processed(&self, topic: &str, n: usize) {
        if n > 0 {
            *self.processed.lock().expect("not poisoned").entry(topic.to_owned()).or_default() += n as u64;
        }
    }

    /// One record sent to the dead-letter topic.
    pub fn dead_letter(&self, kind: &'static str) {
        *self.dead_letters.lock().expect("not poisoned").entry(kind).or_default() += 1;
    }

    /// One failed attempt at `what` (`redis`, `postgres`, …), to be retried.
    pub fn error(&self, what: &'static str) {
        *self.errors.lock().expect("not poisoned").entry(what).or_default() += 1;
    }

    /// `n` users written to Redis.
    pub fn redis_writes(&self, n: usize) {
        self.redis_writes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `n` per-recipient increments (seqs that became unread for some user).
    pub fn increments(&self, n: u64) {
        self.increments.fetch_add(n, Ordering::Relaxed);
    }

    /// A checkpoint wrote `rows` entity rows of `bytes` encoded state in total.
    pub fn checkpoint_rows(&self, rows: usize, bytes: usize) {
        self.checkpoint_rows.fetch_add(rows as u64, Ordering::Relaxed);
        self.checkpoint_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A partition task was fenced (its lease was taken by another task).
    pub fn fenced(&self) {
        self.fenced.fetch_add(1, Ordering::Relaxed);
    }

    /// One checkpoint (or flush) that took `took`.
    pub fn checkpoint(&self, took: Duration) {
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.checkpoint_micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// A flush of `stage` took `flush` in all, of which `checkpoint` in the PostgreSQL transaction.
    pub fn flush_latency(&self, stage: &'static str, flush: Duration, checkpoint: Duration) {
        self.flush_seconds.lock().expect("not poisoned").entry(stage).or_default().observe(flush.as_secs_f64());
        let mut c = self.checkpoint_seconds.lock().expect("not poisoned");
        c.entry(stage).or_default().observe(checkpoint.as_secs_f64());
    }

    /// The lag of one input partition as its task last saw it (end offset minus its next offset).
    pub fn lag(&self, stage: &'static str, topic: &str, partition: i32, lag: i64) {
        self.lag.lock().expect("not poisoned").insert((stage, topic.to_owned(), partition), lag.max(0));
    }

    /// Forgets the lag of a partition no longer owned.
    pub fn forget_lag(&self, stage: &'static str, partition: i32) {
        self.lag.lock().expect("not poisoned").retain(|(s, _, p), _| !(*s == stage && *p == partition));
    }

    /// The stages' assignments, for the partition gauges.
    pub fn set_assignments(&self, a: Vec<(&'static str, Arc<Assignment>)>) {
        *self.assignments.lock().expect("not poisoned") = a;
    }

    /// A background verify compared `checked` users: `differing` differed, `ahead` were newer in Redis.
    pub fn verified(&self, checked: usize, differing: usize, ahead: usize) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        *self.verify_last.lock().expect("not poisoned") = Some((checked, differing, ahead, now));
        self.verify_runs.fetch_add(1, Ordering::Relaxed);
    }

    /// A background verify could not run (a store unreachable).
    pub fn verify_failed(&self) {
        self.verify_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text exposition of everything above.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# TYPE unread_events_processed_total counter\n");
        for (topic, n) in self.processed.lock().expect("not poisoned").iter() {
            let _ = writeln!(out, "unread_events_processed_total{{topic=\"{topic}\"}} {n}");
        }
        out.push_str("# TYPE unread_dead_letter_records_total counter\n");
        for (kind, n) in self.dead_letters.lock().expect("not poisoned").iter() {
            let _ = writeln!(out, "unread_dead_letter_records_total{{kind=\"{kind}\"}} {n}");
        }
        out.push_str("# TYPE unread_errors_total counter\n");
        for (what, n) in self.errors.lock().expect("not poisoned").iter() {
            let _ = writeln!(out, "unread_errors_total{{store=\"{what}\"}} {n}");
        }
        let _ = writeln!(out, "# TYPE unread_redis_user_writes_total counter");
        let _ = writeln!(out, "unread_redis_user_writes_total {}", self.redis_writes.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE unread_increments_total counter");
        let _ = writeln!(out, "unread_increments_total {}", self.increments.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE unread_checkpoint_rows_total counter");
        let _ = writeln!(out, "unread_checkpoint_rows_total {}", self.checkpoint_rows.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE unread_checkpoint_bytes_total counter");
        let _ = writeln!(out, "unread_checkpoint_bytes_total {}", self.checkpoint_bytes.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE unread_fenced_tasks_total counter");
        let _ = writeln!(out, "unread_fenced_tasks_total {}", self.fenced.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE unread_checkpoints_total counter");
        let _ = writeln!(out, "unread_checkpoints_total {}", self.checkpoints.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE unread_checkpoint_seconds_total counter");
        let _ = writeln!(
            out,
            "unread_checkpoint_seconds_total {:.6}",
            self.checkpoint_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        out.push_str("# TYPE unread_flush_seconds histogram\n");
        for (stage, h) in self.flush_seconds.lock().expect("not poisoned").iter() {
            h.render(&mut out, "unread_flush_seconds", stage);
        }
        out.push_str("# TYPE unread_checkpoint_transaction_seconds histogram\n");
        for (stage, h) in self.checkpoint_seconds.lock().expect("not poisoned").iter() {
            h.render(&mut out, "unread_checkpoint_transaction_seconds", stage);
        }
        out.push_str("# TYPE unread_partition_lag gauge\n");
        for ((stage, topic, p), lag) in self.lag.lock().expect("not poisoned").iter() {
            let _ =
                writeln!(out, "unread_partition_lag{{stage=\"{stage}\",topic=\"{topic}\",partition=\"{p}\"}} {lag}");
        }
        out.push_str("# TYPE unread_assigned_partitions gauge\n# TYPE unread_rebalances_total counter\n");
        for (stage, a) in self.assignments.lock().expect("not poisoned").iter() {
            let _ = writeln!(out, "unread_assigned_partitions{{stage=\"{stage}\"}} {}", a.partitions().len());
            let _ =
                writeln!(out, "unread_rebalances_total{{stage=\"{stage}\"}} {}", a.rebalances.load(Ordering::Relaxed));
        }
        let _ = writeln!(out, "# TYPE unread_verify_runs_total counter");
        let _ = writeln!(out, "unread_verify_runs_total {}", self.verify_runs.load(Ordering::Relaxed));
        let _ = writeln!(out, "# TYPE unread_verify_failures_total counter");
        let _ = writeln!(out, "unread_verify_failures_total {}", self.verify_failures.load(Ordering::Relaxed));
        if let Some((checked, differing, ahead, at)) = *self.verify_last.lock().expect("not poisoned") {
            out.push_str("# TYPE unread_verify_checked_users gauge\n# TYPE unread_verify_differing_users gauge\n");
            out.push_str(
                "# TYPE unread_verify_ahead_users gauge\n# TYPE unread_verify_last_run_timestamp_seconds gauge\n",
            );
            let _ = writeln!(out, "unread_verify_checked_users {checked}");
            let _ = writeln!(out, "unread_verify_differing_users {differing}");
            let _ = writeln!(out, "unread_verify_ahead_users {ahead}");
            let _ = writeln!(out, "unread_verify_last_run_timestamp_seconds {at}");
        }
        out
    }
}
