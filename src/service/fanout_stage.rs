//! The fan-out stage: one task per partition of `unread.conversation-events`.
//!
//! A task loads its conversations and next offset from the checkpoint, then repeats: take a batch of records,
//! decode them (bad ones go to the dead-letter topic), run [`FanOut::process_batch`], produce the deltas to
//! `unread.user-deltas` keyed by user without waiting, and every flush interval (or flush events) wait for every
//! acknowledgement still outstanding, then checkpoint the changed conversations with the next offset in one
//! transaction. Deltas are acknowledged before the checkpoint that covers their input commits, so a crash can
//! repeat deltas but never lose one; the fold applies a repeated suffix idempotently (docs/semantics.md).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use tracing::{debug, info};

use super::group::{PartitionInput, Verdict};
use super::{records, Shared};
use crate::checkpoint::{self, store::Stage};
use crate::contract::{Event, Stream};
use crate::fanout::FanOut;
use crate::pipeline::MAX_BATCH;

/// Runs the task of one partition until its input closes (then it checkpoints and returns).
///
/// Errors: PostgreSQL or Kafka failing; the dispatcher restarts the task from its checkpoint. When a delivery
/// failed, the shared producer is replaced first ([`super::ProducerSlot`]), so the restarted task gets a new one.
pub async fn run(shared: Arc<Shared>, input: PartitionInput) -> anyhow::Result<()> {
    let (generation, producer) = shared.producer.get();
    let result = run_with(&shared, input, &producer).await;
    if let Err(e) = &result {
        if e.chain().any(|c| matches!(c.downcast_ref::<KafkaError>(), Some(KafkaError::MessageProduction(_)))) {
            shared.producer.replace(generation);
        }
    }
    result
}

async fn run_with(shared: &Arc<Shared>, mut input: PartitionInput, producer: &FutureProducer) -> anyhow::Result<()> {
    let p = input.partition;
    let topic = shared.topics.conversation_events.clone();
    let mut next = shared.store.offset(Stage::FanOut, &topic, p).await?.unwrap_or(0);
    let generation = shared.store.acquire(Stage::FanOut, p, &shared.owner).await?;
    let mut fanout = FanOut::new();
    for (id, _, bytes) in shared.store.states(Stage::FanOut, Some(p)).await? {
        let state = checkpoint::decode_conversation(&bytes).with_context(|| format!("conversation {id:?}"))?;
        fanout.restore(id, state);
    }
    info!(partition = p, generation, next, "fan-out task started");
    input.rewind(&topic, next).await;
    let mut dirty: HashSet<String> = HashSet::new();
    let mut in_flight: Vec<DeliveryFuture> = Vec::new();
    let (mut pending, mut last_checkpoint) = (0usize, Instant::now());
    loop {
        let Some(batch) = input.next_batch(MAX_BATCH, shared.flush.interval).await else {
            let done = checkpoint(shared, &mut input, generation, &fanout, &mut dirty, &mut in_flight, next).await;
            shared.metrics.forget_lag("fanout", p);
            return done;
        };
        let mut events = Vec::with_capacity(batch.len());
        for record in &batch {
            match input.accept(record, next) {
                Verdict::Skip | Verdict::Gap => continue,
                Verdict::Process => {}
            }
            match records::event(record, Stream::Conversation) {
                Ok(Event::Conversation(e)) => events.push(e),
                Ok(Event::User(_)) => unreachable!("records::event checks the stream"),
                Err(e) => {
                    shared.metrics.dead_letter(e.kind());
                    records::dead_letter(producer, &shared.topics.dead_letter, record, &e).await?;
                }
            }
            next = record.offset() + 1;
            pending += 1;
        }
        shared.metrics.processed(&topic, events.len());
        if !events.is_empty() {
            // A task whose partition moved must not add deltas to the stream of its successor.
            super::retry(&shared.metrics, "postgres", || shared.store.check_lease(Stage::FanOut, p, generation))
                .await?;
            let (deltas, _) = fanout.process_batch(&events);
            dirty.extend(events.iter().map(|e| e.conversation_id().to_owned()));
            produce(producer, &shared.topics.user_deltas, &deltas, &mut in_flight).await?;
        }
        if pending >= shared.flush.events || (pending > 0 && last_checkpoint.elapsed() >= shared.flush.interval) {
            checkpoint(shared, &mut input, generation, &fanout, &mut dirty, &mut in_flight, next).await?;
            (pending, last_checkpoint) = (0, Instant::now());
        }
    }
}

/// Enqueues deltas keyed by user; their acknowledgements join `in_flight`. Waits only while the producer's queue
/// is full.
async fn produce(
    producer: &FutureProducer,
    topic: &str,
    deltas: &[crate::delta::Delta],
    in_flight: &mut Vec<DeliveryFuture>,
) -> anyhow::Result<()> {
    for d in deltas {
        let payload = serde_json::to_vec(d).expect("deltas serialize");
        let mut record = FutureRecord::to(topic).key(d.user_id.as_bytes()).payload(&payload);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => break in_flight.push(delivery),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(e).context("producing a delta"),
            }
        }
    }
    Ok(())
}

/// Waits for every outstanding delta acknowledgement.
async fn acknowledged(in_flight: &mut Vec<DeliveryFuture>) -> anyhow::Result<()> {
    for result in futures::future::join_all(in_flight.drain(..)).await {
        match result {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => return Err(e).context("producing a delta"),
            Err(_) => anyhow::bail!("producing a delta: the producer dropped the delivery"),
        }
    }
    Ok(())
}

async fn checkpoint(
    shared: &Shared,
    input: &mut PartitionInput,
    generation: i64,
    fanout: &FanOut,
    dirty: &mut HashSet<String>,
    in_flight: &mut Vec<DeliveryFuture>,
    next: i64,
) -> anyhow::Result<()> {
    let started = Instant::now();
    acknowledged(in_flight).await?;
    let changed: Vec<(String, Option<Vec<u8>>)> = dirty
        .iter()
        .filter_map(|id| fanout.conversation(id).map(|c| (id.clone(), Some(checkpoint::encode_conversation(c)))))
        .collect();
    let topic = shared.topics.conversation_events.as_str();
    let offsets = [(topic, next)];
    let commit_started = Instant::now();
    super::retry(&shared.metrics, "postgres", || {
        shared.store.commit(Stage::FanOut, input.partition, generation, &changed, &offsets)
    })
    .await?;
    shared.metrics.flush_latency("fanout", started.elapsed(), commit_started.elapsed());
    if let Some(lag) = input.lag(topic, next) {
        shared.metrics.lag("fanout", topic, input.partition, lag);
    }
    let bytes = changed.iter().map(|(_, s)| s.as_ref().map_or(0, Vec::len)).sum();
    shared.metrics.checkpoint_rows(changed.len(), bytes);
    dirty.clear();
    input.store_offsets(&[(topic, next)]);
    shared.metrics.checkpoint(started.elapsed());
    debug!(partition = input.partition, next, conversations = changed.len(), "fan-out checkpoint");
    Ok(())
}
