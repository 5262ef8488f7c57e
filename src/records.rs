//! From a Kafka record to a contract event or delta: decoding plus the checks only a record can fail (its key, its
//! topic, its partition), shared by the stages (`crate::service`, which dead-letters what fails) and the replay.

use std::time::Duration;

use rdkafka::message::Message;

use crate::core::contract::{decode, ConversationEvent, DecodeError, Event, Stream, UserEvent};
use crate::core::delta::Delta;
use crate::kafka::{Partitioner, Placement};

/// Why a record was not processed. [`RecordError::kind`] names it in dead-letter headers and metrics.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The value breaks the contract.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The record has no value.
    #[error("record has no value")]
    NoValue,
    /// The record has no key.
    #[error("record has no key; the contract requires the {expected}")]
    MissingKey {
        /// The field the key must equal.
        expected: &'static str,
    },
    /// The key is not the event's routing id.
    #[error("record key {key:?} is not the event's {field} {id:?}")]
    KeyMismatch {
        /// The record's key.
        key: String,
        /// The field the key must equal.
        field: &'static str,
        /// That field's value.
        id: String,
    },
    /// A user event on the conversation topic or the other way round.
    #[error("a {type_name} event does not belong on this topic")]
    WrongTopic {
        /// The event's type.
        type_name: &'static str,
    },
    /// A delta on the internal topic that does not decode (a bug or a foreign producer).
    #[error("invalid delta: {0}")]
    BadDelta(String),
    /// An input record on a partition other than the one the configured partitioner (`--partitioner`) picks for
    /// its key: folded, its user's events and deltas would be split between two tasks.
    #[error(
        "record with key {key:?} is in partition {partition}, but {partitioner} puts that key in partition {expected}"
    )]
    Misrouted {
        /// The record's key.
        key: String,
        /// The record's partition.
        partition: i32,
        /// The partition the configured partitioner picks.
        expected: i32,
        /// The configured partitioner.
        partitioner: Partitioner,
        /// The partitioners that would put the key where it is (none: the producer does not partition by key).
        fitting: Vec<Partitioner>,
    },
    /// A delta, in a record of several, whose user's partition is not the record's (a bug, a foreign producer, or
    /// a topic whose partitions changed under the service).
    #[error("a delta for user {user:?} is in partition {partition}, not in its user's, {expected}")]
    WrongPartition {
        /// The delta's user.
        user: String,
        /// The record's partition.
        partition: i32,
        /// The user's partition.
        expected: i32,
    },
}

impl RecordError {
    /// Short stable name: the decoder's kind, or `no_value`, `missing_key`, `key_mismatch`, `misrouted`,
    /// `wrong_topic`, `bad_delta`, `wrong_partition`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Decode(e) => e.kind(),
            Self::NoValue => "no_value",
            Self::MissingKey { .. } => "missing_key",
            Self::KeyMismatch { .. } => "key_mismatch",
            Self::Misrouted { .. } => "misrouted",
            Self::WrongTopic { .. } => "wrong_topic",
            Self::BadDelta(_) => "bad_delta",
            Self::WrongPartition { .. } => "wrong_partition",
        }
    }

    /// What a producer or operator changes so that records like this one are folded: for the kinds a producer's
    /// settings cause (`missing_key`, `key_mismatch`, `misrouted`); `None` for the others, whose reason says it.
    pub fn fix(&self) -> Option<String> {
        let guide = "docs/producers.md";
        match self {
            Self::MissingKey { expected } => Some(format!(
                "key every record with its event's {expected}; a keyless record may land anywhere ({guide})"
            )),
            Self::KeyMismatch { field, .. } => Some(format!("key every record with its event's {field} ({guide})")),
            Self::Misrouted { partitioner, fitting, .. } => Some(match fitting.as_slice() {
                [] => format!(
                    "the producer does not place records by key (round-robin, random or sticky?): give it a key \
                     partitioner, {partitioner} as configured ({guide})"
                ),
                [one, ..] => format!(
                    "the producer looks like it uses {one}: set --partitioner {one} (UNREAD_PARTITIONER) on every \
                     unread instance and command if all producers do, or set the producer's partitioner to \
                     {partitioner} ({guide})"
                ),
            }),
            _ => None,
        }
    }
}

/// Decodes an input record expected on the `stream` topic and checks that its key is the event's routing id and
/// that it sits where `placement` puts that key ([`RecordError::Misrouted`] otherwise).
pub fn event(record: &impl Message, stream: Stream, placement: Placement) -> Result<Event, RecordError> {
    let value = record.payload().ok_or(RecordError::NoValue)?;
    let event = decode(value)?;
    if event.stream() != stream {
        return Err(RecordError::WrongTopic { type_name: event.type_name() });
    }
    let field = event.routing_field();
    let key = record.key().ok_or(RecordError::MissingKey { expected: field })?;
    if key != event.routing_key().as_bytes() {
        return Err(RecordError::KeyMismatch {
            key: String::from_utf8_lossy(key).into_owned(),
            field,
            id: event.routing_key().to_owned(),
        });
    }
    let (partition, expected) = (record.partition(), placement.of(key));
    if partition != expected {
        return Err(RecordError::Misrouted {
            key: String::from_utf8_lossy(key).into_owned(),
            partition,
            expected,
            partitioner: placement.partitioner,
            fitting: placement.fitting(key, partition),
        });
    }
    Ok(event)
}

/// [`event`] of a record of `unread.user-events`: a user event, or [`RecordError::WrongTopic`].
pub fn user_event(record: &impl Message, placement: Placement) -> Result<UserEvent, RecordError> {
    match event(record, Stream::User, placement)? {
        Event::User(e) => Ok(e),
        Event::Conversation(e) => Err(RecordError::WrongTopic { type_name: Event::Conversation(e).type_name() }),
    }
}

/// [`event`] of a record of `unread.conversation-events`: a conversation or broadcast event, or
/// [`RecordError::WrongTopic`].
pub fn conversation_event(record: &impl Message, placement: Placement) -> Result<ConversationEvent, RecordError> {
    match event(record, Stream::Conversation, placement)? {
        Event::Conversation(e) => Ok(e),
        Event::User(e) => Err(RecordError::WrongTopic { type_name: Event::User(e).type_name() }),
    }
}

/// How long ago, at `now`, a record was produced: `now` minus its Kafka timestamp (the producer's clock,
/// `CreateTime`); `None` when it has none or it is ahead of `now`.
pub fn age(record: &impl Message, now: std::time::SystemTime) -> Option<Duration> {
    let produced = u64::try_from(record.timestamp().to_millis()?).ok()?;
    now.duration_since(std::time::UNIX_EPOCH + Duration::from_millis(produced)).ok()
}

/// The fan-out partition and generation delta `d` (decoded from `record`) came from: its own
/// [`crate::core::delta::Delta::source`], or for a delta of an earlier release the record header
/// [`crate::kafka::headers::DELTA_SOURCE`]; `None` for a delta with neither (or a malformed header), which the fold
/// applies unfenced.
pub fn delta_source(record: &impl Message, d: &Delta) -> Option<crate::core::delta::DeltaSource> {
    use rdkafka::message::Headers;
    if d.source.is_some() {
        return d.source;
    }
    let headers = record.headers()?;
    let header = headers.iter().find(|h| h.key == crate::kafka::headers::DELTA_SOURCE)?;
    crate::core::delta::DeltaSource::parse(header.value?)
}

/// A record's deltas ([`deltas`]) split by the fold's fence ([`crate::core::delta::Fence`]): those it admits, in
/// order, and how many it drops (a zombie fan-out's, from an older lease generation of their partition). What the
/// fold task and the replay both apply.
///
/// Errors: as [`deltas`] (the record is refused whole).
pub fn admitted_deltas(
    record: &impl Message,
    partition_of: impl Fn(&str) -> i32,
    fence: &mut crate::core::delta::Fence,
) -> Result<(Vec<Delta>, usize), RecordError> {
    let all = deltas(record, partition_of)?;
    let before = all.len();
    let admitted: Vec<Delta> =
        all.into_iter().filter(|d| delta_source(record, d).is_none_or(|source| fence.admit(source))).collect();
    let dropped = before - admitted.len();
    Ok((admitted, dropped))
}

/// Decodes a record of `unread.user-deltas` ([`crate::core::delta::unpack`]): one delta (a JSON object, key = its
/// `user_id`) or several (a JSON array, each of a user whose partition, `partition_of` its id, is the record's), in
/// order. A delta for every member ([`Delta::is_for_members`]) belongs to every partition.
///
/// Errors: no value; a payload that is neither form, or an empty array ([`RecordError::BadDelta`]); a lone delta
/// whose key is not its user ([`RecordError::KeyMismatch`]); a delta of several whose user belongs to another
/// partition ([`RecordError::WrongPartition`]). A record that fails is refused whole: none of its deltas apply.
pub fn deltas(record: &impl Message, partition_of: impl Fn(&str) -> i32) -> Result<Vec<Delta>, RecordError> {
    let value = record.payload().ok_or(RecordError::NoValue)?;
    let deltas = crate::core::delta::unpack(value).map_err(|e| RecordError::BadDelta(e.to_string()))?;
    match &deltas[..] {
        [] => Err(RecordError::BadDelta("an empty array of deltas".into())),
        [one] if one.is_for_members() => Ok(deltas),
        [one] if !crate::core::delta::is_packed(value) => match record.key() == Some(one.user_id.as_bytes()) {
            true => Ok(deltas),
            false => Err(RecordError::KeyMismatch {
                key: String::from_utf8_lossy(record.key().unwrap_or_default()).into_owned(),
                field: "user_id",
                id: one.user_id.clone(),
            }),
        },
        several => {
            let partition = record.partition();
            let stray = several.iter().filter(|d| !d.is_for_members()).find_map(|d| {
                let expected = partition_of(&d.user_id);
                (expected != partition).then(|| (d.user_id.clone(), expected))
            });
            match stray {
                Some((user, expected)) => Err(RecordError::WrongPartition { user, partition, expected }),
                None => Ok(deltas),
            }
        }
    }
}
