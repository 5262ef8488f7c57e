//! A static member's restart, prepared while it rejoins (issue 23's rolling restart).
//!
//! A member with `--group-instance-id` names itself `{instance}@…` in the partition leases. When it starts again,
//! the leases its previous incarnation still holds are the partitions the group gives back to a member restarted
//! within the session timeout. So before it joins, it starts those partitions' tasks' first steps: the lease,
//! taken only if still held by `{instance}@…` ([`crate::state::load::lease_if_held`]), then the state loaded
//! under it and, in the fan-out, the transactional producer initialized. A task assigned such a partition takes
//! what was prepared ([`Prepared::take`]) instead of doing the same after the assignment. That is the order of a
//! task's own start, only earlier: the lease still comes before the load, and the producer's initialization
//! still fences every earlier producer of the partition. A partition another process took since has another
//! owner and is left alone; what no task takes within [`PREPARED_FOR`] is dropped.
//!
//! The leases are read as soon as PostgreSQL answers, beside the Kafka and Redis checks ([`early`]), and the
//! fan-out partitions' producers start connecting then: creating one and fetching the cluster's metadata fences
//! nothing (only its initialization does, after the lease), and under load it is the longest step of a start.
//!
//! The previous incarnation may still be draining when the new one starts (a restart that does not wait for the
//! old process's exit): the lease is then taken once the old task stopped cleanly, or after
//! [`crate::state::load::DRAIN_WAIT`] ([`crate::state::load::lease_if_held`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::error::TaskError;
use super::tx::producer::connected_producer;
use super::tx::TxProducer;
use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::Stage;
use crate::kafka::producer::AsyncProducer;

/// How long a prepared partition waits for its task before it is dropped: 30 s.
pub const PREPARED_FOR: Duration = Duration::from_secs(30);

/// A fan-out task's start: its state loaded under its lease, its transactional producer initialized, and how long
/// the lease, the producer's connection, the load and the producer's initialization took (ms). Made by the task
/// itself, or before the assignment by a restarted static member.
pub struct FanOutStart {
    /// The partition's state, under its lease.
    pub loaded: crate::state::partition::FanOutPartition,
    /// Its transactional producer, initialized.
    pub producer: TxProducer,
    /// How long the lease, the connection, the load and the initialization took (ms).
    pub ms: [u64; 4],
}

/// What each stage prepared, by partition.
pub struct Preparations {
    /// The fan-out's: state and producer.
    fanout: Prepared<FanOutStart>,
    /// The fold's: state.
    fold: Prepared<crate::state::partition::FoldPartition>,
    /// The fan-out partitions' producers, connecting since PostgreSQL answered ([`Early`]).
    producers: Mutex<HashMap<i32, Connecting>>,
}

/// A transactional producer being created and connected ([`connected_producer`]).
type Connecting = JoinHandle<Result<AsyncProducer, TaskError>>;

impl Default for Preparations {
    fn default() -> Self {
        let (fanout, fold, producers) = (Prepared::default(), Prepared::default(), Mutex::default());
        Self { fanout, fold, producers }
    }
}

impl Preparations {
    /// What was prepared for fan-out partition `p` ([`Prepared::take`]).
    pub async fn fanout(&self, p: i32) -> Option<FanOutStart> {
        self.fanout.take(Stage::FanOut, p).await
    }

    /// Starts preparing fan-out partition `p` with `work` (`None`: the lease had another owner).
    pub fn prepare_fanout(
        &self,
        p: i32,
        work: impl Future<Output = Result<Option<FanOutStart>, TaskError>> + Send + 'static,
    ) {
        self.fanout.insert(p, work);
    }

    /// Starts preparing fold partition `p` with `work` (`None`: the lease had another owner).
    pub fn prepare_fold(
        &self,
        p: i32,
        work: impl Future<Output = Result<Option<crate::state::partition::FoldPartition>, TaskError>> + Send + 'static,
    ) {
        self.fold.insert(p, work);
    }

    /// Adopts the producers `early` started connecting, as the tasks' now; returns what else it found: the
    /// partitions held before the restart.
    pub fn adopt(&self, early: Early) -> Vec<(Stage, i32)> {
        let Early { held, producers, abandoned } = early;
        abandoned.disarm(); // the producers are the tasks' now
        *self.producers.lock().expect("not poisoned") = producers;
        held
    }

    /// Drops what no task took (state, off the async threads; producers).
    pub async fn expire(&self) {
        self.fanout.expire().await;
        self.fold.expire().await;
        let left: Vec<_> = self.producers.lock().expect("not poisoned").drain().collect();
        for (_, connecting) in left {
            let _ = connecting.await; // waits for the connection under way, then drops the producer
        }
    }

    /// Fan-out partition `p`'s producer, connecting since the start ([`Early`]), if it is one of those.
    pub fn producer(&self, p: i32) -> Option<Connecting> {
        self.producers.lock().expect("not poisoned").remove(&p)
    }

    /// What was prepared for fold partition `p` ([`Prepared::take`]).
    pub async fn fold(&self, p: i32) -> Option<crate::state::partition::FoldPartition> {
        self.fold.take(Stage::Fold, p).await
    }
}

/// One stage's preparations, by partition: each a task returning the prepared start, or `None` when the lease
/// had another owner.
struct Prepared<T> {
    tasks: Mutex<HashMap<i32, Preparing<T>>>,
}

/// A partition's preparation under way: its prepared start, or `None` when the lease had another owner.
type Preparing<T> = JoinHandle<Result<Option<T>, TaskError>>;

impl<T> Default for Prepared<T> {
    fn default() -> Self {
        Self { tasks: Mutex::new(HashMap::new()) }
    }
}

impl<T: Send + 'static> Prepared<T> {
    /// Starts preparing partition `p` with `work`.
    fn insert(&self, p: i32, work: impl Future<Output = Result<Option<T>, TaskError>> + Send + 'static) {
        self.tasks.lock().expect("not poisoned").insert(p, tokio::spawn(work));
    }

    /// What was prepared for partition `p` of `stage`, waiting for it if it is still under way. `None` when nothing
    /// was, the lease had another owner, or the preparation failed (logged): the task starts as usual.
    async fn take(&self, stage: Stage, p: i32) -> Option<T> {
        let task = self.tasks.lock().expect("not poisoned").remove(&p)?;
        match task.await {
            Ok(Ok(prepared)) => prepared,
            Ok(Err(e)) => {
                warn!(%stage, partition = p, error = %e, "the prepared start failed; starting again");
                None
            }
            Err(_) => None,
        }
    }

    /// Drops what no task took, off the async threads (a partition's state can be large to free).
    async fn expire(&self) {
        let left: Vec<_> = self.tasks.lock().expect("not poisoned").drain().map(|(_, task)| task).collect();
        for task in left {
            if let Ok(Ok(Some(prepared))) = task.await {
                tokio::task::spawn_blocking(move || drop(prepared));
            }
        }
    }
}

/// What a restarted static member learns and starts as soon as PostgreSQL answers, beside the Kafka and Redis
/// checks: the partitions its previous incarnation still holds and, for the fan-out's, their transactional
/// producers connecting (created, the cluster's metadata fetched: they fence nothing before their initialization,
/// which follows the lease). Dropped unused (the start failed), it stops the connections within 250 ms.
pub struct Early {
    held: Vec<(Stage, i32)>,
    producers: HashMap<i32, Connecting>,
    abandoned: Abandon,
}

/// Reads the leases whose owner is named `{instance}@…`, keeps those of `stages` (the stages that run here), and
/// for the fan-out's starts connecting their producers (`producers`: the brokers and the transactional ids'
/// prefix; `None` unless `--producer-per-partition`: the one producer is the instance's). A failure to read the leases is
/// logged, and nothing is prepared.
pub async fn early(
    store: &CheckpointStore,
    stages: &[Stage],
    instance: &str,
    producers: Option<(&str, &str)>,
) -> Early {
    let abandoned = Abandon(Some(Arc::default()));
    let held = match store.leases_held(&format!("{instance}@")).await {
        Ok(held) => held.into_iter().filter(|(stage, _)| stages.contains(stage)).collect(),
        Err(e) => {
            warn!(error = %e, "reading the leases held before the restart; going on");
            Vec::new()
        }
    };
    let mut connecting = HashMap::new();
    if let Some((brokers, prefix)) = producers {
        for p in held.iter().filter(|(stage, _)| *stage == Stage::FanOut).map(|&(_, p)| p) {
            let (brokers, id, stop) = (brokers.to_owned(), format!("{prefix}.{p}"), abandoned.flag());
            connecting.insert(p, tokio::spawn(connected_producer(brokers, id, stop)));
        }
    }
    if !held.is_empty() {
        info!(partitions = ?held, "preparing the partitions held before the restart");
    }
    Early { held, producers: connecting, abandoned }
}

/// Sets its flag when dropped, unless disarmed: the early producers' connections stop.
struct Abandon(Option<Arc<AtomicBool>>);

impl Abandon {
    /// The flag it sets.
    fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone().unwrap_or_default()
    }

    /// Leaves the flag unset for good.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(flag) = &self.0 {
            flag.store(true, Ordering::Relaxed);
        }
    }
}
