//! A transactional producer's lifecycle: created and connected ([`connected_producer`], which fences nothing) and
//! initialized ([`initialized`], which fences every earlier producer of its transactional id); a fenced producer's
//! error told apart ([`fenced_or`]). Dropping one never blocks: its client is destroyed (its queue purged, a
//! transaction of its own still open aborted) on its polling thread ([`AsyncProducer`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use tracing::debug;

use crate::kafka::producer::AsyncProducer;
use crate::service::error::{is_fenced_code, TaskError};

/// `error`, or the producer's fatal error when Kafka fenced it: once a successor initializes the partition's
/// transactional id, the old producer's sends and commit fail with a fatal error whose cause only the client
/// keeps (`rd_kafka_fatal_error`).
pub fn fenced_or(producer: &AsyncProducer, error: TaskError) -> TaskError {
    match producer.client().fatal_error() {
        Some((code, reason)) if is_fenced_code(code) => {
            debug!(%reason, "the transactional producer was fenced");
            TaskError::kafka("producing to Kafka")(KafkaError::MessageProduction(code))
        }
        _ => error,
    }
}

/// Creates the transactional producer of transactional id `id` (partition p's `{group}.fanout.{p}`, or the
/// instance's shared one), [`connected_producer`], then [`initialized`].
///
/// Errors: as those two.
pub async fn transactional_producer(brokers: &str, id: &str) -> Result<AsyncProducer, TaskError> {
    initialized(connected_producer(brokers.to_owned(), id.to_owned(), Arc::default()).await?).await
}

/// Creates the transactional producer of transactional id `id` and fetches the cluster's metadata with it, up to
/// 5 s or until `abandoned` is set (looked at every 250 ms); a failure is left to the initialization. Until
/// [`initialized`] it fences nothing: librdkafka asks for a producer id only in `init_transactions`. Blocking calls
/// run off the async threads.
///
/// Errors: the client cannot be created.
pub async fn connected_producer(
    brokers: String,
    id: String,
    abandoned: Arc<AtomicBool>,
) -> Result<AsyncProducer, TaskError> {
    let producer = crate::kafka::transactional_producer(&brokers, &id)
        .map_err(TaskError::kafka("creating the transactional producer"))?;
    let fetch = producer.clone();
    // The cluster's metadata first (every topic: one topic's did not do): without it, init took 505–543 ms for
    // about half the producers, librdkafka retrying its coordinator lookup after 500 ms; with it 54–96 ms for all
    // 60 measured (docs/performance.md, "A restart's fan-out producers").
    let _ = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !abandoned.load(Ordering::Relaxed) && Instant::now() < deadline {
            if fetch.client().fetch_metadata(None, Duration::from_millis(250)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50)); // a refusal may come at once
        }
    })
    .await;
    Ok(producer)
}

/// Initializes a transactional producer (up to 60 s, `init_in_slices`), which fences every earlier producer of
/// its id and aborts their open transaction.
///
/// Errors: the initialization fails (the broker is unreachable, say); the producer is then dropped.
pub async fn initialized(producer: AsyncProducer) -> Result<AsyncProducer, TaskError> {
    let init = producer.clone();
    let result = tokio::task::spawn_blocking(move || init_in_slices(&init, Duration::from_secs(60)))
        .await
        .unwrap_or(Err(KafkaError::Canceled)); // the runtime shut down under it
    match result {
        Ok(()) => Ok(producer),
        Err(e) => {
            drop(producer);
            Err(TaskError::kafka("initializing transactions")(e))
        }
    }
}

/// The first slice [`init_in_slices`] gives `init_transactions`: 25 ms, doubling after each to at most
/// [`INIT_SLICE_MAX`].
const INIT_SLICE: Duration = Duration::from_millis(25);
/// The longest slice [`init_in_slices`] gives `init_transactions`: 500 ms.
const INIT_SLICE_MAX: Duration = Duration::from_millis(500);

/// `producer.init_transactions`, called again after each retriable error (its slice of time ran out, or the
/// transaction coordinator answered `CONCURRENT_TRANSACTIONS`) until `limit`; the slices grow from
/// [`INIT_SLICE`] to [`INIT_SLICE_MAX`].
///
/// Why: when the partition's previous producer died with a transaction open (a SIGKILLed instance), the
/// coordinator answers the first InitProducerId with `CONCURRENT_TRANSACTIONS` while it aborts that transaction,
/// and librdkafka asks again only after a fixed 500 ms (`rd_kafka_idemp_pid_timer_restart`). A call of
/// `init_transactions` that resumes the initialization asks again at once (`rd_kafka_idemp_start(rk,
/// immediate)`), so the successor starts within a slice of the abort's end (docs/performance.md, "A SIGKILL's
/// pause"). A call that resumes while a request is in flight adds none.
///
/// Errors: a non-retriable error, or a retriable one once `limit` has passed.
fn init_in_slices(producer: &AsyncProducer, limit: Duration) -> Result<(), KafkaError> {
    let deadline = Instant::now() + limit;
    let mut slice = INIT_SLICE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match producer.init_transactions(slice.min(left)) {
            Err(KafkaError::Transaction(e)) if e.is_retriable() && Instant::now() < deadline => {
                slice = (slice * 2).min(INIT_SLICE_MAX);
            }
            done => return done,
        }
    }
}

/// `call` on the producer off the async threads (commits and aborts block); `Canceled` when the runtime shut down
/// under it.
pub async fn blocking(
    producer: AsyncProducer,
    call: impl FnOnce(&AsyncProducer) -> rdkafka::error::KafkaResult<()> + Send + 'static,
) -> rdkafka::error::KafkaResult<()> {
    tokio::task::spawn_blocking(move || call(&producer)).await.unwrap_or(Err(KafkaError::Canceled))
}
