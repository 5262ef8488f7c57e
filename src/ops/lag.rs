//! `unread lag [--wait DURATION]`: per input partition of both stages, the end offset, the checkpointed offset and
//! the lag.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::config::Settings;
use crate::kafka;

/// Lag of one input partition of one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// The stage reading the partition.
    pub stage: Stage,
    /// The input topic.
    pub topic: String,
    /// The partition number.
    pub partition: i32,
    /// The partition's end (high watermark).
    pub end: i64,
    /// The stage's checkpointed next offset (the log start when never checkpointed).
    pub checkpointed: i64,
    /// Whether no record between the checkpoint and the end reaches a `read_committed` consumer (only transaction
    /// markers or aborted records lie there, as after the fan-out's last commit on the delta topic).
    pub only_invisible: bool,
}

impl PartitionLag {
    /// Offsets not yet checkpointed (transaction markers among them), or 0 when none of them holds a visible record.
    pub fn lag(&self) -> i64 {
        if self.only_invisible {
            return 0;
        }
        (self.end - self.checkpointed).max(0)
    }
}

/// Every input partition's lag ([`lag`]): fan-out's first, then the fold's.
#[derive(Debug, Clone, Default)]
pub struct LagReport {
    /// One row per input partition.
    pub rows: Vec<PartitionLag>,
}

impl LagReport {
    /// The sum of every partition's lag.
    pub fn total(&self) -> i64 {
        self.rows.iter().map(PartitionLag::lag).sum()
    }

    /// `unread lag --output json`: `{"rows": [{"stage", "topic", "partition", "end", "checkpoint", "lag"}],
    /// "total"}`, offsets as numbers.
    pub fn to_json(&self) -> serde_json::Value {
        let row = |r: &PartitionLag| {
            serde_json::json!({"stage": r.stage.as_str(), "topic": r.topic, "partition": r.partition, "end": r.end,
                "checkpoint": r.checkpointed, "lag": r.lag()})
        };
        serde_json::json!({"rows": self.rows.iter().map(row).collect::<Vec<_>>(), "total": self.total()})
    }
}

impl fmt::Display for LagReport {
    /// A table (stage, topic, partition, end, checkpoint, lag) and a last line `total lag: N`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<7} {:<40} {:>9} {:>12} {:>12} {:>9}",
            "stage", "topic", "partition", "end", "checkpoint", "lag"
        )?;
        for r in &self.rows {
            let (stage, topic, p, end, at, lag) =
                (r.stage.as_str(), &r.topic, r.partition, r.end, r.checkpointed, r.lag());
            writeln!(f, "{stage:<7} {topic:<40} {p:>9} {end:>12} {at:>12} {lag:>9}")?;
        }
        write!(f, "total lag: {}", self.total())
    }
}

/// The lag of every input partition: the fan-out's conversation events, then the fold's user events and deltas.
/// Zero everywhere means everything produced so far is folded and flushed to Redis and PostgreSQL (the fold
/// writes Redis before it checkpoints, and the fan-out produces deltas before it checkpoints; conversation
/// events are read first so that the deltas they caused are already counted).
///
/// Errors: Kafka or PostgreSQL unreachable.
pub async fn lag(settings: &Settings, store: &CheckpointStore) -> anyhow::Result<LagReport> {
    Clients::new(settings)?.lag(settings, store, Scan::Whole).await
}

/// How far a poll of [`Clients::lag`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Every partition, for the table.
    Whole,
    /// Up to the first partition of a non-transactional topic that shows lag, whose report then ends there: all
    /// [`wait_for_zero_lag`] needs to poll again. During a catch-up that is one watermark query per poll, instead
    /// of two per partition of three topics and a fetch from every delta partition behind its checkpoint.
    UntilLag,
}

/// The Kafka clients of a lag query, kept across the polls of [`wait_for_zero_lag`]: the metadata client and the
/// visibility probe (made at its first use), each connected once.
struct Clients {
    metadata: BaseConsumer,
    visibility: Option<kafka::VisibilityProbe>,
    /// The probe's answers that found a visible record: (partition, checkpointed offset) → its offset. A record once
    /// visible stays so, so a partition whose checkpoint has not moved since is not asked again.
    visible: HashMap<(i32, i64), i64>,
}

impl Clients {
    fn new(settings: &Settings) -> anyhow::Result<Self> {
        Ok(Self { metadata: kafka::metadata_client(&settings.brokers)?, visibility: None, visible: HashMap::new() })
    }

    /// [`lag`] with these clients, of every partition or only `until` the first that shows lag ([`Scan`]).
    async fn lag(&mut self, settings: &Settings, store: &CheckpointStore, until: Scan) -> anyhow::Result<LagReport> {
        let (topics, client) = (settings.topics(), &self.metadata);
        let mut rows = Vec::new();
        for (stage, names) in [
            (Stage::FanOut, vec![&topics.conversation_events]),
            (Stage::Fold, vec![&topics.user_events, &topics.user_deltas]),
        ] {
            let done = store.offsets(stage).await?;
            for topic in names {
                for partition in 0..kafka::partition_count(client, topic)? {
                    let (low, end) = kafka::watermark(client, topic, partition)?;
                    let checkpointed = done.get(&(topic.clone(), partition)).copied().unwrap_or(0).max(low);
                    let (topic, only_invisible) = (topic.clone(), false);
                    // Only the delta topic's lag can be transaction markers alone, which the probe below tells.
                    let lags = until == Scan::UntilLag && topic != topics.user_deltas && checkpointed < end;
                    rows.push(PartitionLag { stage, topic, partition, end, checkpointed, only_invisible });
                    if lags {
                        return Ok(LagReport { rows });
                    }
                }
            }
        }
        self.mark_only_invisible(&settings.brokers, &topics.user_deltas, &mut rows);
        Ok(LagReport { rows })
    }

    /// Marks the rows of the transactional `topic` behind whose checkpoint no record is visible
    /// ([`kafka::VisibilityProbe`]). A failed probe marks nothing: the lag then counts every offset.
    fn mark_only_invisible(&mut self, brokers: &str, topic: &str, rows: &mut [PartitionLag]) {
        let under: Vec<(i32, i64)> = rows
            .iter()
            .filter(|r| r.topic == topic && r.checkpointed < r.end)
            .map(|r| (r.partition, r.checkpointed))
            .collect();
        // An answer is kept while its partition's checkpoint stays where it was asked (and so below the end).
        self.visible.retain(|at, _| under.contains(at));
        let behind: Vec<(i32, i64)> = under.into_iter().filter(|at| !self.visible.contains_key(at)).collect();
        if behind.is_empty() {
            return;
        }
        let probe = match self.visibility.take() {
            Some(probe) => Ok(probe),
            None => kafka::VisibilityProbe::new(brokers),
        };
        // A probe that failed is not kept: the next poll asks with a new one.
        let first = probe.and_then(|probe| {
            let first = probe.first_visible(topic, &behind, Duration::from_secs(5))?;
            self.visibility = Some(probe);
            Ok(first)
        });
        match first {
            Ok(first) => {
                for (p, from) in behind {
                    if let Some(Some(at)) = first.get(&p) {
                        self.visible.insert((p, from), *at);
                    }
                }
                for r in rows.iter_mut().filter(|r| r.topic == topic) {
                    r.only_invisible = first.get(&r.partition).is_some_and(Option::is_none);
                }
            }
            Err(e) => tracing::debug!(error = %format!("{e:#}"), "probing {topic} for visible records failed"),
        }
    }
}

/// Waits until every partition's lag is zero, polling every [`WAIT_POLL`] with the same Kafka clients, for at most
/// `timeout`. A failed poll (a broker still electing leaders after a restart, say) is tried again.
///
/// Errors: the clients cannot be created (their configuration); the timeout passes, with the remaining lag table
/// or the last poll's error.
pub async fn wait_for_zero_lag(
    settings: &Settings,
    store: &CheckpointStore,
    timeout: Duration,
) -> anyhow::Result<LagReport> {
    let (started, mut clients) = (Instant::now(), Clients::new(settings)?);
    let answer = loop {
        let polled = clients.lag(settings, store, Scan::UntilLag).await;
        if polled.as_ref().is_ok_and(|report| report.total() == 0) {
            break polled;
        }
        if started.elapsed() >= timeout {
            let waited = humantime::format_duration(timeout);
            // The whole table, for the error.
            break match clients.lag(settings, store, Scan::Whole).await {
                Ok(report) => Err(anyhow::anyhow!("lag is still {} after {waited}:\n{report}", report.total())),
                Err(e) => Err(e.context(format!("lag unknown after {waited}"))),
            };
        }
        tokio::time::sleep(WAIT_POLL).await;
    };
    // Closing the clients took up to 100 ms (librdkafka's teardown of a reader with an assignment): not the caller's
    // wait.
    std::thread::spawn(move || drop(clients));
    answer
}

/// The pause between two polls of [`wait_for_zero_lag`]. A poll that reads the whole table on open connections
/// takes 13–28 ms here during a catch-up (a metadata and two watermark requests per partition, one query of
/// PostgreSQL, a fetch of 6–11 ms when the delta topic ends in transaction markers), so `unread lag --wait`
/// returns 31–66 ms after the last checkpoint (five catch-ups of `scripts/bench-e2e`); with new clients per poll,
/// 100 ms between polls and the clients closed before returning, it took 171–173 ms. While a partition shows lag a
/// poll ends there ([`Scan::UntilLag`]), so polling this often costs the broker little: in a v1 catch-up, 181–273
/// fetches and about 550 offset queries instead of 522–546 and 2,000–2,150 when every poll read every partition
/// and probed the delta topic. A delta partition is probed again only once its checkpoint moved ([`Clients`]):
/// 149–160 fetches in all, and the delta topic read about once (docs/performance.md, "The lag probe's reads").
pub const WAIT_POLL: Duration = Duration::from_millis(25);
