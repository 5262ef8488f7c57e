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
//! The previous incarnation may still be draining when the new one starts (a restart that does not wait for the
//! old process's exit): the lease is then taken once the old task stopped cleanly, or after
//! [`crate::state::load::DRAIN_WAIT`] ([`crate::state::load::lease_if_held`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::{fanout_stage, fold_stage, Shared, TaskError};
use crate::checkpoint::Stage;

/// How long a prepared partition waits for its task before it is dropped: 30 s.
pub const PREPARED_FOR: Duration = Duration::from_secs(30);

/// What each stage prepared, by partition, and whether the leases have been read.
pub struct Preparations {
    /// The fan-out's: state and producer.
    fanout: Prepared<fanout_stage::Started>,
    /// The fold's: state.
    fold: Prepared<crate::state::load::FoldPartition>,
    /// `true` once every preparation is registered (at once when nothing is prepared): a task waits for it
    /// before it looks for its own.
    listed: watch::Sender<bool>,
}

impl Default for Preparations {
    fn default() -> Self {
        Self { fanout: Prepared::default(), fold: Prepared::default(), listed: watch::Sender::new(true) }
    }
}

impl Preparations {
    /// What was prepared for fan-out partition `p` ([`Prepared::take`]).
    pub async fn fanout(&self, p: i32) -> Option<fanout_stage::Started> {
        self.listed.subscribe().wait_for(|listed| *listed).await.ok()?;
        self.fanout.take(Stage::FanOut, p).await
    }

    /// What was prepared for fold partition `p` ([`Prepared::take`]).
    pub async fn fold(&self, p: i32) -> Option<crate::state::load::FoldPartition> {
        self.listed.subscribe().wait_for(|listed| *listed).await.ok()?;
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

    /// Drops what no task took, off the async threads (dropping a producer waits for its queue).
    async fn expire(&self) {
        let left: Vec<_> = self.tasks.lock().expect("not poisoned").drain().map(|(_, task)| task).collect();
        for task in left {
            if let Ok(Ok(Some(prepared))) = task.await {
                tokio::task::spawn_blocking(move || drop(prepared));
            }
        }
    }
}

/// Prepares, for `stages`, the partitions whose lease the previous incarnation of static member
/// `instance` holds still, and drops what no task took after [`PREPARED_FOR`]. Returns at once: the leases are
/// read beside the group's join, and a task waits until they are. A failure to read them is logged, and the tasks
/// start as usual.
pub fn start(shared: &Arc<Shared>, stages: &[Stage], instance: &str) {
    shared.prepared.listed.send_replace(false);
    let (sh, prefix, stages) = (shared.clone(), format!("{instance}@"), stages.to_vec());
    tokio::spawn(async move {
        {
            // The tasks wait for the list: it is complete however this ends, a panic included.
            let _listed = Listed(&sh.prepared.listed);
            list(&sh, &stages, &prefix).await;
        }
        let shared = Arc::downgrade(&sh);
        drop(sh);
        tokio::time::sleep(PREPARED_FOR).await;
        if let Some(shared) = shared.upgrade() {
            shared.prepared.fanout.expire().await;
            shared.prepared.fold.expire().await;
        }
    });
}

/// Reads the leases owners named `{prefix}…` hold and starts preparing those of `stages` (the stages that run here).
async fn list(sh: &Arc<Shared>, stages: &[Stage], prefix: &str) {
    let held = match sh.store.leases_held(prefix).await {
        Ok(held) => held,
        Err(e) => return warn!(error = %e, "reading the leases held before the restart; going on"),
    };
    let held: Vec<_> = held.into_iter().filter(|(stage, _)| stages.contains(stage)).collect();
    for &(stage, p) in &held {
        let (sh2, prefix) = (sh.clone(), prefix.to_owned());
        match stage {
            Stage::FanOut => sh.prepared.fanout.insert(p, fanout_stage::prepare(sh2, p, prefix)),
            Stage::Fold => sh.prepared.fold.insert(p, fold_stage::prepare(sh2, p, prefix)),
        }
    }
    if !held.is_empty() {
        info!(partitions = ?held, "preparing the partitions held before the restart");
    }
}

/// Marks the list of preparations complete when dropped.
struct Listed<'a>(&'a watch::Sender<bool>);

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}
