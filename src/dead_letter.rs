//! `unread dead-letter list|replay`: inspect the records that failed decoding or the contract, and re-publish them
//! to their source topics (after the producer fixed them, or after a bug fix).
//!
//! Records are in `unread.dead-letter` unchanged (key, value, original headers), with headers
//! `unread.source.topic`, `unread.source.partition`, `unread.source.offset`, `unread.error.kind` and
//! `unread.error.reason` (written by [`crate::service::records::dead_letter`]).

use std::fmt;
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

use crate::kafka::producer::AsyncProducer;
use crate::kafka::{self, headers};

/// One dead-lettered record.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// Its offset in the dead-letter topic (partition, offset).
    pub position: (i32, i64),
    /// The topic it was read from.
    pub source_topic: String,
    /// Its partition there.
    pub source_partition: String,
    /// Its offset there.
    pub source_offset: String,
    /// The error's stable kind.
    pub kind: String,
    /// The error's readable reason.
    pub reason: String,
    /// The record as dead-lettered (key, value, headers).
    pub record: OwnedMessage,
}

impl fmt::Display for DeadLetter {
    /// `partition:offset from topic[partition]@offset kind: reason`, then the key and a value preview indented.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, o) = self.position;
        writeln!(
            f,
            "{p}:{o} from {}[{}]@{} {}: {}",
            self.source_topic, self.source_partition, self.source_offset, self.kind, self.reason
        )?;
        writeln!(f, "    key {}", preview(self.record.key()))?;
        write!(f, "    value {}", preview(self.record.payload()))
    }
}

impl DeadLetter {
    /// `unread dead-letter list --output json`, one object per record: `{"position": {"partition", "offset"},
    /// "source": {"topic", "partition", "offset"}, "kind", "reason", "key", "value"}`; key and value as text
    /// (invalid UTF-8 replaced), `null` when absent.
    pub fn to_json(&self) -> serde_json::Value {
        let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
        let (partition, offset) = self.position;
        serde_json::json!({
            "position": {"partition": partition, "offset": offset},
            "source": {"topic": self.source_topic, "partition": self.source_partition.parse::<i64>().ok(),
                "offset": self.source_offset.parse::<i64>().ok()},
            "kind": self.kind, "reason": self.reason,
            "key": text(self.record.key()), "value": text(self.record.payload()),
        })
    }
}

fn header(m: &OwnedMessage, name: &str) -> String {
    m.headers()
        .and_then(|h| h.iter().find(|h| h.key == name).and_then(|h| h.value))
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default()
}

/// Reads the whole dead-letter topic, oldest first (every partition up to its end at the time of the call, or to
/// the end a `read_committed` reader reaches: the fan-out writes its dead letters in transactions, so commit markers
/// can end a partition).
///
/// Errors: Kafka unreachable or the topic missing.
pub fn read_all(brokers: &str, topic: &str) -> anyhow::Result<Vec<DeadLetter>> {
    let consumer: BaseConsumer<kafka::EofContext> = kafka::eof_reader(brokers, "unread-dead-letter-reader")
        .create_with_context(kafka::EofContext)
        .context("creating the dead-letter reader")?;
    let n = kafka::partition_count(&consumer, topic)?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = std::collections::HashMap::new();
    for (p, (low, high)) in kafka::watermarks(&consumer, topic, n)?.into_iter().enumerate() {
        let p = p as i32;
        if high > low {
            tpl.add_partition_offset(topic, p, Offset::Offset(low))?;
            ends.insert(p, high);
        }
    }
    let mut out = Vec::new();
    if ends.is_empty() {
        return Ok(out);
    }
    consumer.assign(&tpl).context("assigning the dead-letter topic")?;
    while !ends.is_empty() {
        match consumer.poll(Duration::from_secs(10)) {
            None => anyhow::bail!("no dead-letter record within 10 s while {} partitions are unread", ends.len()),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                ends.remove(&p);
            }
            Some(Err(e)) => return Err(e).context("reading the dead-letter topic"),
            Some(Ok(m)) => {
                let m = m.detach();
                if ends.get(&m.partition()).is_some_and(|end| m.offset() + 1 >= *end) {
                    ends.remove(&m.partition());
                }
                out.push(DeadLetter {
                    position: (m.partition(), m.offset()),
                    source_topic: header(&m, headers::SOURCE_TOPIC),
                    source_partition: header(&m, headers::SOURCE_PARTITION),
                    source_offset: header(&m, headers::SOURCE_OFFSET),
                    kind: header(&m, headers::ERROR_KIND),
                    reason: header(&m, headers::ERROR_REASON),
                    record: m,
                });
            }
        }
    }
    out.sort_by_key(|d| d.position);
    Ok(out)
}

/// Re-publishes records to their source topics with their key, value and original headers (the `unread.*`
/// headers dropped). Returns how many were sent.
///
/// Errors: a record has no source topic, or a send fails.
pub async fn replay(brokers: &str, records: &[DeadLetter]) -> anyhow::Result<usize> {
    let producer: AsyncProducer = kafka::producer_config(brokers).create().context("creating the Kafka producer")?;
    for d in records {
        anyhow::ensure!(!d.source_topic.is_empty(), "dead-letter record {:?} has no source topic", d.position);
        let mut kept = OwnedHeaders::new();
        if let Some(h) = d.record.headers() {
            for h in h.iter().filter(|h| !h.key.starts_with(headers::PREFIX)) {
                kept = kept.insert(Header { key: h.key, value: h.value });
            }
        }
        let mut out: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&d.source_topic).headers(kept);
        if let Some(k) = d.record.key() {
            out = out.key(k);
        }
        if let Some(v) = d.record.payload() {
            out = out.payload(v);
        }
        producer.send(out, Duration::from_secs(30)).await.map_err(|(e, _)| e).context("re-publishing a dead letter")?;
    }
    Ok(records.len())
}

/// A short, printable preview of a value: up to 80 characters, escapes for what is not printable.
pub fn preview(value: Option<&[u8]>) -> String {
    match value {
        None => "(no value)".into(),
        Some(v) => {
            let text = String::from_utf8_lossy(&v[..v.len().min(80)]);
            let mut s: String = text.chars().flat_map(char::escape_default).take(100).collect();
            if v.len() > 80 {
                s.push_str(&format!("… ({} bytes)", v.len()));
            }
            s
        }
    }
}
