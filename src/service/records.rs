//! The dead-letter topic for every record that fails ([`crate::records`], re-exported here for the stages).

use std::time::Duration;

use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::FutureRecord;

use super::error::TaskError;
use crate::kafka::headers as names;
use crate::kafka::producer::AsyncProducer;
pub use crate::records::*;

/// Logs the first refusal of each kind on each topic in this process, with its reason and [`RecordError::fix`];
/// later ones are only counted (`unread_dead_letter_records_total{kind}`), so a misconfigured producer fills
/// neither the log nor the disk.
fn log_first(record: &OwnedMessage, error: &RecordError) {
    use std::collections::HashSet;
    use std::sync::{LazyLock, Mutex};
    static SEEN: LazyLock<Mutex<HashSet<(String, &'static str)>>> = LazyLock::new(Mutex::default);
    let first = SEEN.lock().map(|mut seen| seen.insert((record.topic().to_owned(), error.kind())));
    if first.unwrap_or(false) {
        let (topic, partition, offset) = (record.topic(), record.partition(), record.offset());
        let fix = error.fix().unwrap_or_default();
        tracing::error!(topic, partition, offset, kind = error.kind(), reason = %error, fix,
            "a record was dead-lettered; later ones of this kind are only counted");
    }
}

/// Writes a failed record to the dead-letter topic unchanged (key, value, original headers), with headers
/// `unread.source.topic`, `unread.source.partition`, `unread.source.offset`, `unread.error.kind`,
/// `unread.error.reason`, and waits for the broker's acknowledgement. The first of each kind on each topic is
/// logged ([`log_first`]).
///
/// Errors: [`TaskError::Kafka`] when the dead-letter write fails; the caller must not move its offset past the
/// record then.
pub async fn dead_letter(
    producer: &AsyncProducer,
    topic: &str,
    record: &OwnedMessage,
    error: &RecordError,
) -> Result<(), TaskError> {
    log_first(record, error);
    let (partition, offset) = (record.partition().to_string(), record.offset().to_string());
    let reason = error.to_string();
    let mut headers = OwnedHeaders::new();
    if let Some(original) = record.headers() {
        use rdkafka::message::Headers;
        for h in original.iter() {
            headers = headers.insert(Header { key: h.key, value: h.value });
        }
    }
    let headers = headers
        .insert(Header { key: names::SOURCE_TOPIC, value: Some(record.topic()) })
        .insert(Header { key: names::SOURCE_PARTITION, value: Some(&partition) })
        .insert(Header { key: names::SOURCE_OFFSET, value: Some(&offset) })
        .insert(Header { key: names::ERROR_KIND, value: Some(error.kind()) })
        .insert(Header { key: names::ERROR_REASON, value: Some(&reason) });
    let mut out: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(headers);
    if let Some(k) = record.key() {
        out = out.key(k);
    }
    if let Some(v) = record.payload() {
        out = out.payload(v);
    }
    producer.send(out, Duration::from_secs(30)).await.map_err(|(e, _)| TaskError::kafka("writing a dead letter")(e))?;
    Ok(())
}
