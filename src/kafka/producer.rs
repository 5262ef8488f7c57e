//! A Kafka producer whose deliveries are futures ([`AsyncProducer`]), in place of rdkafka's `FutureProducer`, whose
//! polling thread spins.
//!
//! rdkafka 0.39's `BaseProducer::poll(timeout)` serves events until `timeout` has passed, waiting each time for the
//! time left in whole milliseconds rounded down. Through the last partial millisecond it waits for 0 ms, again and
//! again: a busy loop. `FutureProducer`'s thread polls 100 ms at a time, so each producer spun through about 1% of
//! a core, idle or not: 0.55 of the 0.66 CPU-seconds an idle `unread run` took in 20 s (docs/performance.md, "A
//! producer's polling thread that does not spin"). rdkafka 0.40 rounds up (its #867); this machine's registry
//! offers 0.39 at most. Here the thread polls a second at a time, plus a margin that the wait's own lateness
//! covers: the spin happens at most once a second, for well under a millisecond.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, FromClientConfig};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedMessage, Timestamp, ToBytes};
use rdkafka::producer::future_producer::{Delivery, OwnedDeliveryResult};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, FutureRecord, ProducerContext};
use rdkafka::ClientContext;
use tokio::sync::oneshot;

/// How long one poll of the polling thread lasts: a second, and 50 µs that a wait's lateness usually exceeds.
const POLL: Duration = Duration::from_micros(1_000_050);

/// How long [`AsyncProducer::send`] waits before it tries again while the producer's queue is full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(100);

/// The client context of an [`AsyncProducer`]: librdkafka's logs and errors as rdkafka's default context reports
/// them; each delivery report resolves its record's [`DeliveryFuture`].
pub struct Deliveries;

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<oneshot::Sender<OwnedDeliveryResult>>;

    fn delivery(&self, result: &DeliveryResult<'_>, tx: Self::DeliveryOpaque) {
        let owned = match result {
            Ok(m) => Ok(Delivery { partition: m.partition(), offset: m.offset(), timestamp: m.timestamp() }),
            Err((e, m)) => Err((e.clone(), m.detach())),
        };
        let _ = tx.send(owned); // its caller may have stopped waiting
    }
}

/// The acknowledgement of one record sent with [`AsyncProducer::send_result`]: its partition and offset, or the
/// error and the record. `Err(RecvError)` if the producer dropped the record's report (it was destroyed).
pub type DeliveryFuture = oneshot::Receiver<OwnedDeliveryResult>;

/// A Kafka producer (idempotent or transactional, as configured) whose sends are futures, polled by a thread of its
/// own ([`POLL`]). Clones share one client. Every method of rdkafka's `Producer` trait (transactions, `flush`,
/// `client`) is its [`BaseProducer`]'s, through `Deref`.
///
/// Dropping the last clone stops the thread within a second, without waiting for it; the client is destroyed
/// then (its queue purged, as rdkafka does).
#[derive(Clone)]
pub struct AsyncProducer {
    inner: Arc<Polled>,
}

/// The producer and the flag that stops its polling thread when the last [`AsyncProducer`] goes.
struct Polled {
    producer: Arc<BaseProducer<Deliveries>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Polled {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl FromClientConfig for AsyncProducer {
    /// Creates the client and starts its polling thread.
    ///
    /// Errors: the configuration is invalid, or the thread cannot be started ([`KafkaError::ClientCreation`]).
    fn from_config(config: &ClientConfig) -> KafkaResult<Self> {
        let producer = Arc::new(config.create_with_context::<_, BaseProducer<Deliveries>>(Deliveries)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (polled, stopped) = (producer.clone(), stop.clone());
        std::thread::Builder::new()
            .name("producer polling".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    polled.poll(POLL);
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("starting the producer's polling thread: {e}")))?;
        Ok(Self { inner: Arc::new(Polled { producer, stop }) })
    }
}

impl Deref for AsyncProducer {
    type Target = BaseProducer<Deliveries>;

    fn deref(&self) -> &Self::Target {
        &self.inner.producer
    }
}

impl AsyncProducer {
    /// Sends `record` and waits for its acknowledgement. While the producer's queue is full it tries again every
    /// 100 ms, for up to `queue_timeout`.
    ///
    /// Errors: the record could not be queued (the queue stayed full, or it is invalid), or the broker did not
    /// acknowledge it; each with the record as an [`OwnedMessage`].
    pub async fn send<K, P>(&self, record: FutureRecord<'_, K, P>, queue_timeout: Duration) -> OwnedDeliveryResult
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let start = Instant::now();
        let mut record = record;
        loop {
            match self.send_result(record) {
                Ok(delivery) => match delivery.await {
                    Ok(result) => return result,
                    Err(_) => return Err((KafkaError::Canceled, empty_message())),
                },
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                    if start.elapsed() < queue_timeout =>
                {
                    record = r;
                    tokio::time::sleep(QUEUE_FULL_WAIT).await;
                }
                Err((e, r)) => return Err((e, owned(r))),
            }
        }
    }

    /// Queues `record` and returns the future of its acknowledgement, without waiting.
    ///
    /// Errors: the record could not be queued (its queue is full: `QueueFull`, or it is invalid), with the record.
    #[allow(clippy::result_large_err)] // the record goes back to the caller, as rdkafka's own `send_result` does
    pub fn send_result<'a, K, P>(
        &self,
        record: FutureRecord<'a, K, P>,
    ) -> Result<DeliveryFuture, (KafkaError, FutureRecord<'a, K, P>)>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let (tx, rx) = oneshot::channel();
        let FutureRecord { topic, partition, payload, key, timestamp, headers } = record;
        let base = BaseRecord { topic, partition, payload, key, timestamp, headers, delivery_opaque: Box::new(tx) };
        match self.inner.producer.send(base) {
            Ok(()) => Ok(rx),
            Err((e, b)) => {
                let back = FutureRecord {
                    topic: b.topic,
                    partition: b.partition,
                    payload: b.payload,
                    key: b.key,
                    timestamp: b.timestamp,
                    headers: b.headers,
                };
                Err((e, back))
            }
        }
    }
}

/// A record that was not queued, as the owned message a failed delivery carries.
fn owned<K: ToBytes + ?Sized, P: ToBytes + ?Sized>(r: FutureRecord<'_, K, P>) -> OwnedMessage {
    let timestamp = r.timestamp.map_or(Timestamp::NotAvailable, Timestamp::CreateTime);
    OwnedMessage::new(
        r.payload.map(|p| p.to_bytes().to_vec()),
        r.key.map(|k| k.to_bytes().to_vec()),
        r.topic.to_owned(),
        timestamp,
        r.partition.unwrap_or(-1),
        0,
        r.headers,
    )
}

/// The message of a delivery whose report never came (the client was destroyed first).
fn empty_message() -> OwnedMessage {
    OwnedMessage::new(None, None, String::new(), Timestamp::NotAvailable, -1, 0, None)
}
