//! The replay's reader: one thread polls both input topics outside any consumer group, decodes the records and
//! hands them over in batches, while the replay's task folds and checkpoints.

use std::collections::HashMap;
use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;
use rdkafka::message::Message;

use crate::core::contract::{ConversationEvent, Event, Stream, UserEvent};
use crate::kafka::{Partitioner, Placement};
use crate::records;

/// Largest batch the reader hands over: 5,000 records.
const READ_BATCH: u64 = 5000;

/// One value per input topic: `unread.conversation-events` and `unread.user-events`, indexed by [`Stream`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerStream<T> {
    /// Of `unread.conversation-events`.
    pub conversation: T,
    /// Of `unread.user-events`.
    pub user: T,
}

impl<T> PerStream<T> {
    /// Both streams with their values, conversation first.
    pub fn iter(&self) -> [(Stream, &T); 2] {
        [(Stream::Conversation, &self.conversation), (Stream::User, &self.user)]
    }

    /// Applies `f` to each value.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerStream<U> {
        PerStream { conversation: f(self.conversation), user: f(self.user) }
    }
}

impl<T> Index<Stream> for PerStream<T> {
    type Output = T;
    fn index(&self, s: Stream) -> &T {
        match s {
            Stream::Conversation => &self.conversation,
            Stream::User => &self.user,
        }
    }
}

impl<T> IndexMut<Stream> for PerStream<T> {
    fn index_mut(&mut self, s: Stream) -> &mut T {
        match s {
            Stream::Conversation => &mut self.conversation,
            Stream::User => &mut self.user,
        }
    }
}

/// Records read and decoded by [`read_input`], in partition order.
#[derive(Default)]
pub struct ReadBatch {
    /// The valid conversation events.
    pub conv: Vec<ConversationEvent>,
    /// The valid user events.
    pub user: Vec<UserEvent>,
    /// Records read, the invalid ones included.
    pub records: u64,
    /// Records that fail the contract (skipped: the live service dead-lettered them).
    pub invalid: u64,
    /// (stream, partition, next offset) of the partitions this batch advanced.
    pub next: Vec<(Stream, usize, i64)>,
}

/// Where a replay starts and stops, per partition of each input topic.
#[derive(Debug, Clone)]
pub struct Positions {
    /// The next offset to read, per partition.
    pub next: PerStream<Vec<i64>>,
    /// The end to read up to (exclusive), per partition.
    pub end: PerStream<Vec<i64>>,
}

impl Positions {
    /// Records from each partition's next offset to its end, over every partition.
    pub fn remaining(&self) -> i64 {
        let left = |n: &Vec<i64>, e: &Vec<i64>| n.iter().zip(e).map(|(n, e)| (e - n).max(0)).sum::<i64>();
        left(&self.next.conversation, &self.end.conversation) + left(&self.next.user, &self.end.user)
    }
}

/// The reader thread: polls the assigned partitions, skips records outside [next, end), decodes the rest and sends
/// them in batches of at most [`READ_BATCH`] (or what 50 ms brought). Ends when every partition reached its end,
/// after a consumer error (sent on), or when the receiver is gone.
pub fn read_input(
    c: BaseConsumer,
    user_topic: String,
    partitioner: Partitioner,
    mut pos: Positions,
    tx: tokio::sync::mpsc::Sender<anyhow::Result<ReadBatch>>,
) {
    while pos.remaining() > 0 {
        let batch = match read_batch(&c, &user_topic, partitioner, &mut pos) {
            Ok(b) => b,
            Err(e) => {
                let _ = tx.blocking_send(Err(e.into()));
                return;
            }
        };
        if batch.records > 0 && tx.blocking_send(Ok(batch)).is_err() {
            return;
        }
    }
}

/// Polls for up to 50 ms or [`READ_BATCH`] records; a record the service would refuse (a bad event, or one on a
/// partition `partitioner` would not put it in) is counted invalid and not folded, as the service dead-letters it.
fn read_batch(
    c: &BaseConsumer,
    user_topic: &str,
    partitioner: Partitioner,
    pos: &mut Positions,
) -> Result<ReadBatch, rdkafka::error::KafkaError> {
    let mut batch = ReadBatch::default();
    let mut touched: HashMap<(Stream, usize), i64> = HashMap::new();
    let deadline = Instant::now() + Duration::from_millis(50);
    while batch.records < READ_BATCH && Instant::now() < deadline {
        let Some(msg) = c.poll(Duration::from_millis(20)).transpose()? else { continue };
        let p = msg.partition() as usize;
        let stream = if msg.topic() == user_topic { Stream::User } else { Stream::Conversation };
        if msg.offset() < pos.next[stream][p] || msg.offset() >= pos.end[stream][p] {
            continue; // before the resume point, or after the end this replay aims at
        }
        pos.next[stream][p] = msg.offset() + 1;
        touched.insert((stream, p), msg.offset() + 1);
        batch.records += 1;
        let placement = Placement { partitioner, partitions: pos.end[stream].len() as i32 };
        match records::event(&msg, stream, placement) {
            Ok(Event::Conversation(e)) => batch.conv.push(e),
            Ok(Event::User(e)) => batch.user.push(e),
            Err(_) => batch.invalid += 1,
        }
    }
    batch.next = touched.into_iter().map(|((s, p), n)| (s, p, n)).collect();
    Ok(batch)
}
