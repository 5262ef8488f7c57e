//! The replay's state between checkpoints: one partition state per input partition of each stage
//! ([`crate::state::partition`], the types the service's tasks own), routed by the input producers' partitioner,
//! and the leases under which it checkpoints like the service does.

use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::read::PerStream;
use crate::checkpoint::store::{CheckpointStore, Snapshot};
use crate::checkpoint::Stage;
use crate::core::contract::{ConversationEvent, Stream, UserEvent};
use crate::core::delta::{Delta, Fence};
use crate::core::fanout::FanOut;
use crate::core::fold::Fold;
use crate::core::hybrid::Diffusion;
use crate::kafka::{self, Partitioner};
use crate::metrics::Metrics;
use crate::projection::redis::RedisProjection;
use crate::records;
use crate::state::commit::{commit, Home, RedisWrites};
use crate::state::load::{self, RestoredFanOut};
use crate::state::partition::{FanOutPartition, FoldPartition, Write};
use crate::state::{FoldNext, Input, Offsets};
use crate::topology::Topics;

/// The replay's state between checkpoints.
pub struct Replay {
    /// The target namespace's topics.
    pub topics: Topics,
    /// The target namespace's checkpoint store.
    pub store: CheckpointStore,
    /// The target namespace's projection.
    pub projection: RedisProjection,
    /// One fan-out partition's state per partition of `unread.conversation-events`, as the service's tasks own.
    fanouts: Vec<FanOutPartition>,
    /// One fold partition's state per partition of `unread.user-events`.
    folds: Vec<FoldPartition>,
    /// Partition counts of the input topics.
    pub partitions: PerStream<i32>,
    /// The input producers' partitioner: which partition's state holds a conversation or a user, as in the service.
    partitioner: Partitioner,
    /// Checkpoints written.
    pub checkpoints: u64,
    diffusion: Diffusion,
    /// Retries and checkpoint sizes, as the service counts them (not served).
    metrics: Metrics,
}

impl Replay {
    /// Takes the lease of every partition of both stages as `owner` and starts from empty state at offset 0.
    ///
    /// Errors: PostgreSQL failing.
    pub async fn new(
        topics: Topics,
        store: CheckpointStore,
        projection: RedisProjection,
        partitions: PerStream<i32>,
        owner: &str,
        diffusion: Diffusion,
    ) -> anyhow::Result<Self> {
        let mut fanouts = Vec::new();
        for p in 0..partitions.conversation {
            let generation = store.acquire(Stage::FanOut, p, owner).await?;
            fanouts.push(FanOutPartition::new(p, generation, 0, FanOut::with_diffusion(diffusion), Vec::new()));
        }
        let mut folds = Vec::new();
        for p in 0..partitions.user {
            let generation = store.acquire(Stage::Fold, p, owner).await?;
            folds.push(FoldPartition::new(p, generation, FoldNext::default(), Fold::new(), Fence::default()));
        }
        let (partitioner, checkpoints, metrics) = (Partitioner::configured(), 0, Metrics::default());
        Ok(Self { topics, store, projection, fanouts, folds, partitions, partitioner, checkpoints, diffusion, metrics })
    }

    /// The next offset of every input partition.
    pub fn next(&self) -> PerStream<Vec<i64>> {
        PerStream {
            conversation: self.fanouts.iter().map(|f| f.next).collect(),
            user: self.folds.iter().map(|f| f.next.user_events).collect(),
        }
    }

    /// Sets the next offset of input partition `p` of `stream`.
    pub fn set_next(&mut self, stream: Stream, p: usize, next: i64) {
        match stream {
            Stream::Conversation => self.fanouts[p].next = next,
            Stream::User => self.folds[p].next.user_events = next,
        }
    }

    /// How many users and conversations the replay holds.
    pub fn sizes(&self) -> (usize, usize) {
        let users = self.folds.iter().map(|f| f.fold.users().count()).sum();
        let conversations = self.fanouts.iter().map(|f| f.fanout().conversations().count()).sum();
        (users, conversations)
    }

    /// Folds one batch of records (both topics, each partition's order preserved): each conversation event by the
    /// fan-out partition its key is in, each delta and user event by the fold partition its user is in.
    pub fn process(&mut self, conv: Vec<ConversationEvent>, user: Vec<UserEvent>) {
        let (conversations, users) = (self.placement(Stream::Conversation), self.placement(Stream::User));
        let mut by_partition: Vec<Vec<ConversationEvent>> = (0..self.fanouts.len()).map(|_| Vec::new()).collect();
        for e in conv {
            by_partition[conversations.of(e.key().as_bytes()) as usize].push(e);
        }
        let mut deltas: Vec<Vec<Delta>> = (0..self.folds.len()).map(|_| Vec::new()).collect();
        for (fanout, events) in self.fanouts.iter_mut().zip(by_partition).filter(|(_, e)| !e.is_empty()) {
            for d in fanout.apply(&events).0 {
                match d.is_for_members() {
                    true => deltas.iter_mut().for_each(|to| to.push(d.clone())),
                    false => deltas[users.of(d.user_id.as_bytes()) as usize].push(d),
                }
            }
        }
        for (fold, deltas) in self.folds.iter_mut().zip(deltas) {
            fold.apply_deltas(&deltas);
        }
        for e in &user {
            self.folds[users.of(e.user_id().as_bytes()) as usize].apply_event(e);
        }
    }

    /// Where the input producers put the keys of `stream`: which partition's state holds a conversation or a
    /// user, as in the service.
    fn placement(&self, stream: Stream) -> kafka::Placement {
        kafka::Placement { partitioner: self.partitioner, partitions: self.partitions[stream] }
    }

    /// Checkpoints every partition of both stages through the service's commit protocol
    /// ([`crate::state::commit`]), each changed entity whole ([`Write::ChangedWhole`]): each fold partition (its
    /// changed users to Redis, its marker, then its transaction with its offsets), then each fan-out partition
    /// likewise with its lists and indexes.
    ///
    /// Errors: Redis or PostgreSQL failing (after retries), or another replay or service took a lease (fenced).
    pub async fn checkpoint(&mut self) -> anyhow::Result<()> {
        let Replay { topics, store, projection, metrics, folds, fanouts, .. } = self;
        let home = Home { topics, store, projection, metrics };
        for fold in folds.iter_mut() {
            let redis = RedisWrites::Users(fold.writes(Write::ChangedWhole));
            commit(home, &fold.take_commit(redis, true)).await?;
            fold.committed(Vec::new());
        }
        for fanout in fanouts.iter_mut() {
            let redis = fanout.redis_writes(Write::ChangedWhole);
            commit(home, &fanout.take_commit(redis, true)).await?;
            fanout.committed();
        }
        self.checkpoints += 1;
        Ok(())
    }

    /// Loads the namespace's own checkpoint (a resumed replay): every state and both stages' offsets.
    ///
    /// Errors: PostgreSQL failing or a corrupt row.
    pub async fn restore_own(&mut self) -> anyhow::Result<()> {
        let conversations = self.placement(Stream::Conversation);
        let restored = load::whole_fanout(&self.store, self.diffusion, conversations).await?;
        let folds = load::whole_fold(&self.store, self.placement(Stream::User)).await?;
        self.restore(restored, folds);
        let offsets = load::all_offsets(&self.store, &self.topics).await?;
        self.seek_to(&offsets);
        Ok(())
    }

    /// Puts restored states, one per partition, into the partitions (at their current offsets).
    fn restore(&mut self, fanouts: Vec<RestoredFanOut>, folds: Vec<Fold>) {
        for (part, restored) in self.fanouts.iter_mut().zip(fanouts) {
            let (p, generation, next) = (part.partition, part.generation, part.next);
            *part = FanOutPartition::new(p, generation, next, restored.fanout, restored.rewrite);
        }
        for (part, fold) in self.folds.iter_mut().zip(folds) {
            part.fold = fold;
        }
    }

    /// Sets the next offsets from checkpointed ones (a partition never checkpointed keeps its own).
    fn seek_to(&mut self, offsets: &Offsets) {
        for part in &mut self.fanouts {
            part.next = offsets.get(Input::ConversationEvents, part.partition).unwrap_or(part.next);
        }
        for part in &mut self.folds {
            part.next.user_events = offsets.get(Input::UserEvents, part.partition).unwrap_or(part.next.user_events);
        }
    }

    /// `--from checkpoint`: loads the source's checkpoint snapshot and offsets (every entity marked changed, so the
    /// first checkpoint writes them all), then applies the deltas its fold had not read yet (source delta topic,
    /// from the fold's offsets to the current end). Returns the deltas applied.
    ///
    /// `c` must be a [`kafka::eof_reader`]: the delta topic is read up to each partition's end as a
    /// `read_committed` reader sees it, past the commit markers that may end it.
    ///
    /// Errors: PostgreSQL or Kafka failing, or a corrupt row.
    pub async fn seed_from(
        &mut self,
        snap: Snapshot,
        source: &Topics,
        c: &StreamConsumer<crate::kafka::EofContext>,
    ) -> anyhow::Result<u64> {
        let (conversations, users) = (self.placement(Stream::Conversation), self.placement(Stream::User));
        let (rows, members, lists, d) = (snap.conversations, snap.members, snap.lists, self.diffusion);
        let fanouts = load::fanouts_from_rows(rows, members, lists, d, conversations)?;
        self.restore(fanouts, load::folds_from_rows(snap.users, snap.notes, snap.replies, users)?);
        // Every entity of the snapshot is written by the first checkpoint.
        self.fanouts.iter_mut().for_each(FanOutPartition::mark_all_changed);
        self.folds.iter_mut().for_each(FoldPartition::mark_all_changed);
        // A partition never checkpointed starts at 0, which check_retained requires to be retained.
        let mut rows = snap.fanout_offsets;
        rows.extend(snap.fold_offsets);
        let offsets = Offsets::from_rows(source, rows); // the source's topics name the snapshot's offsets
        self.seek_to(&offsets);
        self.apply_in_flight(&offsets, &snap.fences, &source.user_deltas, c).await
    }

    /// Applies the deltas in flight at the snapshot: produced by the source's fan-out (for events before its
    /// checkpoint, or after: those are produced again by this replay's fan-out, and the fold absorbs the
    /// repetition). Returns how many.
    async fn apply_in_flight(
        &mut self,
        offsets: &Offsets,
        fences: &[(i32, i32, i64)],
        topic: &str,
        c: &StreamConsumer<crate::kafka::EofContext>,
    ) -> anyhow::Result<u64> {
        let marks = kafka::watermarks(c, topic, self.partitions.user)?;
        let mut tpl = TopicPartitionList::new();
        let mut next = Vec::new();
        for (p, (low, high)) in marks.iter().enumerate() {
            let from = offsets.next(Input::UserDeltas, p as i32).max(*low);
            next.push(from);
            if from < *high {
                tpl.add_partition_offset(topic, p as i32, Offset::Offset(from))?;
            }
        }
        if tpl.count() == 0 {
            return Ok(0);
        }
        c.assign(&tpl).context("assigning the source's delta topic")?;
        let mut fence: Vec<Fence> = (0..self.partitions.user)
            .map(|p| Fence::from_rows(fences.iter().filter(|f| f.0 == p).map(|f| (f.1, f.2))))
            .collect();
        let mut applied = 0u64;
        while next.iter().zip(&marks).any(|(n, (_, high))| n < high) {
            let msg = match tokio::time::timeout(Duration::from_secs(30), c.recv()).await {
                Err(_) => anyhow::bail!("no delta records for 30 s"),
                Ok(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    next[p as usize] = next[p as usize].max(marks[p as usize].1);
                    continue;
                }
                Ok(msg) => msg.context("reading the source's delta topic")?,
            };
            let p = msg.partition() as usize;
            if msg.offset() < next[p] || msg.offset() >= marks[p].1 {
                continue;
            }
            next[p] = msg.offset() + 1;
            // The source's fold would have dropped a zombie delta: so does the replay, from the same fence.
            // A record the source's fold refused (dead-lettered) is skipped whole, as there.
            let users = self.placement(Stream::User);
            let admitted = records::admitted_deltas(&msg, |user| users.of(user.as_bytes()), &mut fence[p]);
            for d in admitted.map(|(deltas, _)| deltas).unwrap_or_default() {
                // A delta for every member is in each partition, once for the fold of that partition.
                let to = if d.is_for_members() { p } else { users.of(d.user_id.as_bytes()) as usize };
                self.folds[to].apply_deltas(std::slice::from_ref(&d));
                applied += 1;
            }
        }
        c.unassign().context("unassigning the source's delta topic")?;
        Ok(applied)
    }
}
