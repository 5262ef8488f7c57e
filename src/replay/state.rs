//! The replay's state between checkpoints: the pure fan-out and fold, which users and conversations changed, the
//! next offsets, and the leases under which it checkpoints like the service does.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::read::PerStream;
use crate::checkpoint::store::{CheckpointStore, Snapshot};
use crate::checkpoint::Stage;
use crate::core::broadcast::{ListId, ListState};
use crate::core::contract::{ConversationEvent, Stream, UserEvent};
use crate::core::delta::Fence;
use crate::core::fanout::FanOut;
use crate::core::fold::Fold;
use crate::core::hybrid::{ConvIndex, Diffusion};
use crate::kafka::{self, Partitioner};
use crate::metrics::Metrics;
use crate::projection::redis::{ListWrite, RedisProjection, UserWrite};
use crate::records;
use crate::state::commit::{
    all_members, commit, fanout_changes, fold_changes, sent_write, Commit, FanOutKey, Home, RedisWrites,
};
use crate::state::{load, FoldNext, Input, Offsets};
use crate::topology::Topics;

/// The replay's state between checkpoints.
pub struct Replay {
    /// The target namespace's topics.
    pub topics: Topics,
    /// The target namespace's checkpoint store.
    pub store: CheckpointStore,
    /// The target namespace's projection.
    pub projection: RedisProjection,
    /// The fan-out over every conversation.
    pub fanout: FanOut,
    /// The fold over every user.
    pub fold: Fold,
    /// Partition counts of the input topics.
    pub partitions: PerStream<i32>,
    /// The input producers' partitioner: which partition's checkpoint holds a conversation or a user, as in the
    /// service.
    partitioner: Partitioner,
    /// Lease generations per partition: of the fan-out (conversation partitions) and the fold (user partitions).
    pub generations: PerStream<Vec<i64>>,
    /// Next offsets per input partition.
    pub next: PerStream<Vec<i64>>,
    dirty_users: HashSet<String>,
    /// The conversations and lists changed since the last checkpoint.
    dirty_convs: HashSet<FanOutKey>,
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
        let mut generations = PerStream::<Vec<i64>>::default();
        for (stream, stage) in [(Stream::Conversation, Stage::FanOut), (Stream::User, Stage::Fold)] {
            for p in 0..partitions[stream] {
                generations[stream].push(store.acquire(stage, p, owner).await?);
            }
        }
        let next = partitions.clone().map(|n| vec![0; n as usize]);
        let (fanout, fold, checkpoints) = (FanOut::with_diffusion(diffusion), Fold::new(), 0);
        let (dirty_users, dirty_convs) = (HashSet::new(), HashSet::new());
        Ok(Self {
            topics,
            store,
            projection,
            fanout,
            fold,
            partitions,
            partitioner: Partitioner::configured(),
            generations,
            next,
            dirty_users,
            dirty_convs,
            checkpoints,
            diffusion,
            metrics: Metrics::default(),
        })
    }

    /// Folds one batch of records (both topics, each partition's order preserved).
    pub fn process(&mut self, conv: Vec<ConversationEvent>, user: Vec<UserEvent>) {
        let (deltas, _) = self.fanout.process_batch(&conv);
        self.dirty_convs.extend(conv.iter().flat_map(FanOutKey::of_event));
        for d in &deltas {
            self.dirty_users.insert(d.user_id.clone());
            self.fold.apply_delta(d);
        }
        for e in &user {
            self.dirty_users.insert(e.user_id().to_owned());
            self.fold.apply_user_event(e);
        }
    }

    /// Where the input producers put the keys of `stream`: which partition's checkpoint holds a conversation or a
    /// user, as in the service.
    fn placement(&self, stream: Stream) -> kafka::Placement {
        kafka::Placement { partitioner: self.partitioner, partitions: self.partitions[stream] }
    }

    /// Where the replay commits: the target namespace.
    fn home(&self) -> Home<'_> {
        Home { topics: &self.topics, store: &self.store, projection: &self.projection, metrics: &self.metrics }
    }

    /// Checkpoints every partition of both stages through the service's commit protocol
    /// ([`crate::state::commit`]): each fold partition (its changed users to Redis, its marker, then its
    /// transaction with its offsets), then each fan-out partition likewise with its lists and indexes.
    ///
    /// Errors: Redis or PostgreSQL failing (after retries), or another replay or service took a lease (fenced).
    pub async fn checkpoint(&mut self) -> anyhow::Result<()> {
        self.checkpoint_users().await?;
        // The replay writes changed lists and indexes whole (an index emptied when its conversation switched back).
        let touched: HashSet<ListId> = self.fanout.take_list_ops().into_iter().map(|(list, _)| list).collect();
        let mut by_partition: HashMap<i32, Vec<FanOutKey>> = HashMap::new();
        let conversations = self.placement(Stream::Conversation);
        for key in self.dirty_convs.drain() {
            let p = conversations.of(key.id().as_bytes());
            by_partition.entry(p).or_default().push(key);
        }
        for p in 0..self.partitions.conversation {
            let (generation, keys) = (self.generations.conversation[p as usize], by_partition.remove(&p));
            let keys = keys.unwrap_or_default();
            let lists = keys.iter().filter_map(|key| self.whole_list(key, &touched, generation)).collect();
            let offsets = vec![(Input::ConversationEvents, self.next.conversation[p as usize])];
            let changes = fanout_changes(&self.fanout, &keys);
            let sent = keys.iter().filter_map(|key| sent_write(&self.fanout, key, &HashSet::new())).collect();
            let (redis, mark, stage) = (RedisWrites::Lists(lists, sent), true, Stage::FanOut);
            commit(self.home(), &Commit { stage, partition: p, generation, redis, mark, changes, offsets }).await?;
        }
        self.checkpoints += 1;
        Ok(())
    }

    /// The whole write of a changed broadcast list, or of a changed conversation's index; `None` for a
    /// conversation whose index did not change.
    fn whole_list(&self, key: &FanOutKey, touched: &HashSet<ListId>, generation: i64) -> Option<ListWrite> {
        let (list, ops) = match key {
            FanOutKey::List(id) => (ListId::Broadcast(id.clone()), self.fanout.list(id).map(ListState::whole_ops)?),
            FanOutKey::Conversation(id) if touched.contains(&ListId::Index(id.clone())) => {
                let index = self.fanout.conversation(id).and_then(|c| c.index.as_ref());
                (ListId::Index(id.clone()), index.map(ConvIndex::whole_ops).unwrap_or_default())
            }
            FanOutKey::Conversation(_) | FanOutKey::Member(..) => return None,
        };
        Some(ListWrite { list, generation, ops, replace: true })
    }

    /// The fold's half of a checkpoint: each fold partition's changed users, marker and transaction.
    async fn checkpoint_users(&mut self) -> anyhow::Result<()> {
        let mut by_partition: HashMap<i32, Vec<String>> = HashMap::new();
        let users = self.placement(Stream::User);
        for user in self.dirty_users.drain() {
            let p = users.of(user.as_bytes());
            by_partition.entry(p).or_default().push(user);
        }
        for p in 0..self.partitions.user {
            let (generation, users) = (self.generations.user[p as usize], by_partition.remove(&p).unwrap_or_default());
            let next = FoldNext { user_events: self.next.user[p as usize], user_deltas: 0 };
            let version = next.version(generation);
            let writes = users.iter().map(|u| UserWrite::of_state(u, self.fold.user(u), version)).collect();
            for u in &users {
                // The writes are whole, own seqs included.
                self.fold.user_mut_existing(u).map(|s| s.take_own_changes());
            }
            let changes = fold_changes(&mut self.fold, &users);
            let (redis, mark, stage, offsets) = (RedisWrites::Users(writes), true, Stage::Fold, next.pairs().to_vec());
            commit(self.home(), &Commit { stage, partition: p, generation, redis, mark, changes, offsets }).await?;
        }
        Ok(())
    }

    /// Loads the namespace's own checkpoint (a resumed replay): every state and both stages' offsets.
    ///
    /// Errors: PostgreSQL failing or a corrupt row.
    pub async fn restore_own(&mut self) -> anyhow::Result<()> {
        let restored = load::whole_fanout(&self.store, self.diffusion).await?;
        (self.fanout, self.dirty_convs) = (restored.fanout, restored.rewrite.into_iter().collect());
        self.fold = load::whole_fold(&self.store).await?;
        let offsets = load::all_offsets(&self.store, &self.topics).await?;
        self.seek_to(&offsets);
        Ok(())
    }

    /// Sets the next offsets from checkpointed ones (a partition never checkpointed stays at 0).
    fn seek_to(&mut self, offsets: &Offsets) {
        for (p, next) in self.next.conversation.iter_mut().enumerate() {
            *next = offsets.get(Input::ConversationEvents, p as i32).unwrap_or(*next);
        }
        for (p, next) in self.next.user.iter_mut().enumerate() {
            *next = offsets.get(Input::UserEvents, p as i32).unwrap_or(*next);
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
        // Every entity of the snapshot is written by the first checkpoint.
        self.dirty_convs.extend(snap.conversations.iter().map(|r| FanOutKey::Conversation(r.id.clone())));
        self.dirty_convs.extend(snap.lists.iter().map(|r| FanOutKey::List(r.id.clone())));
        let users: Vec<String> = snap.users.iter().map(|r| r.id.clone()).collect();
        self.fanout = load::fanout_from_rows(snap.conversations, snap.members, snap.lists, self.diffusion)?.fanout;
        self.dirty_convs.extend(all_members(&self.fanout));
        self.fold = load::fold_from_rows(snap.users, snap.notes)?;
        for user in users {
            if let Some(state) = self.fold.user_mut_existing(&user) {
                state.notes_mut().mark_all_dirty();
            }
            self.dirty_users.insert(user);
        }
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
                self.dirty_users.insert(d.user_id.clone());
                self.fold.apply_delta(&d);
                applied += 1;
            }
        }
        c.unassign().context("unassigning the source's delta topic")?;
        Ok(applied)
    }
}
