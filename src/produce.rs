//! `unread produce FILE`: validate JSON Lines of events against the contract and publish each to its topic, keyed
//! as the contract says, with an idempotent producer and the input's partitioner (`--partitioner`, murmur2 by default).

use std::fmt;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use crate::core::contract::{decode, Stream};
use crate::kafka;
use crate::pipeline::open_input;
use crate::topology::Topics;

/// Counts deliveries as the broker acknowledges them.
#[derive(Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
}

struct Ctx(Arc<Deliveries>);

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.0.ok.fetch_add(1, Ordering::Relaxed),
            Err((e, _)) => {
                tracing::error!(error = %e, "delivery failed");
                self.0.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// What a produce run did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProduceReport {
    /// Events sent to `unread.conversation-events`.
    pub conversation_events: u64,
    /// Events sent to `unread.user-events`.
    pub user_events: u64,
    /// Invalid lines, not sent.
    pub invalid: u64,
    /// Deliveries the broker did not acknowledge.
    pub failed: u64,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl fmt::Display for ProduceReport {
    /// One line: events sent per topic, invalid, failed, time and events/s.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self;
        let sent = r.conversation_events + r.user_events;
        write!(
            f,
            "unread produce: {sent} events sent ({} conversation, {} user), {} invalid not sent, {} failed, \
             {:.2} s, {:.0} events/s",
            r.conversation_events,
            r.user_events,
            r.invalid,
            r.failed,
            r.seconds,
            sent as f64 / r.seconds.max(1e-9)
        )
    }
}

/// Publishes every valid line of `path` (JSON Lines, `.gz`, or `-`); invalid lines are reported on stderr with
/// their line number and not sent. The record value is the line as read; the key its routing id.
///
/// Errors: the input cannot be read or the producer cannot be created. Invalid lines and failed deliveries are
/// counted in the report, not errors: the caller decides the exit status.
pub fn produce(brokers: &str, topic_prefix: &str, path: &str) -> anyhow::Result<ProduceReport> {
    let topics = Topics::new(topic_prefix);
    let deliveries = Arc::new(Deliveries::default());
    let producer: ThreadedProducer<Ctx> = kafka::bulk_producer_config(brokers)
        .create_with_context(Ctx(deliveries.clone()))
        .context("creating the Kafka producer")?;
    let started = Instant::now();
    let bar = progress_bar();
    let mut report = ProduceReport::default();
    let mut input = open_input(path)?;
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        if std::io::BufRead::read_until(&mut input, b'\n', &mut line)
            .with_context(|| format!("reading line {}", n + 1))?
            == 0
        {
            break;
        }
        n += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let event = match decode(text) {
            Ok(e) => e,
            Err(e) => {
                bar.suspend(|| eprintln!("unread produce: {path}:{n}: {e} (not sent)"));
                report.invalid += 1;
                continue;
            }
        };
        let topic = match event.stream() {
            Stream::Conversation => {
                report.conversation_events += 1;
                &topics.conversation_events
            }
            Stream::User => {
                report.user_events += 1;
                &topics.user_events
            }
        };
        let mut record = BaseRecord::to(topic).key(event.routing_key()).payload(text);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e).context("enqueueing a record"),
            }
        }
        if n.is_multiple_of(5000) {
            let sent = report.conversation_events + report.user_events;
            bar.set_message(format!("{sent} events, {:.0}/s", sent as f64 / started.elapsed().as_secs_f64()));
        }
    }
    producer.flush(Duration::from_secs(120)).context("waiting for the broker to acknowledge every record")?;
    bar.finish_and_clear();
    report.failed = deliveries.failed.load(Ordering::Relaxed);
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn progress_bar() -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
