//! `unread run`'s lifecycle: the parts started (stages, read API, admin address), then the wait for the shutdown
//! future or a part ending, then the drain.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tracing::info;

use crate::checkpoint::Stage;
use crate::config::Settings;
use crate::metrics::{Assignment, Metrics};
use crate::topology::Topics;

use super::context::{connect, owner_name, Shared};
use super::error::TaskError;
use super::options::{Role, RunOptions};
use super::topics::{stage_topics, stages};
use super::{fanout_stage, fold_stage, group, prepare};

/// Runs a sampled verify of the namespace every `every` for as long as the process runs, into the metrics.
fn spawn_verifier(settings: Settings, shared: &Shared, every: Duration, sample: usize, repair: Option<usize>) {
    let (store, projection, metrics) = (shared.store.clone(), shared.projection.clone(), shared.metrics.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let quiet = &mut |_, _| {};
            match crate::state::verify::verify(&settings.topics(), &store, &projection, (Some(sample), repair), quiet)
                .await
            {
                Ok(r) => {
                    metrics.verified(r.checked, r.differing.len(), r.ahead);
                    metrics.repaired(r.repaired);
                    if !r.differing.is_empty() {
                        tracing::warn!(differing = r.differing.len(), checked = r.checked, first = ?r.differing.first(), "background verify: Redis differs from the checkpoint");
                    }
                }
                Err(e) => {
                    metrics.verify_failed();
                    tracing::warn!(error = %format!("{e:#}"), "background verify failed");
                }
            }
        }
    });
}

/// Starts a stage's partition task with `run`, its end logged by [`logged`].
fn task_spawner<F, Fut>(shared: &Arc<Shared>, stage: Stage, run: F) -> group::SpawnTask
where
    F: Fn(Arc<Shared>, group::PartitionInput) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), TaskError>> + Send + 'static,
{
    let shared = shared.clone();
    Arc::new(move |input| {
        let (sh, p) = (shared.clone(), input.partition);
        let task = run(sh.clone(), input);
        tokio::spawn(async move { logged(stage, p, &sh.metrics, task.await) })
    })
}

/// Logs how a partition task ended (also when nobody awaits it any more: a revoked task ends on its own) and
/// counts fencings.
fn logged(stage: Stage, partition: i32, metrics: &Metrics, result: Result<(), TaskError>) -> Result<(), TaskError> {
    match &result {
        Ok(()) => tracing::debug!(%stage, partition, "task ended"),
        Err(e) if e.is_fenced() => {
            metrics.fenced(e.is_kafka_fenced());
            tracing::warn!(%stage, partition, error = %e, "task fenced: another task owns the partition now");
        }
        Err(e) => tracing::warn!(%stage, partition, error = %e, "task failed"),
    }
    result
}

/// The running parts of `unread run`, each a task of `tasks` that ends when `stop` turns true.
struct Parts {
    tasks: tokio::task::JoinSet<anyhow::Result<()>>,
    assignments: Vec<(Stage, Arc<Assignment>)>,
    stop: watch::Receiver<bool>,
}

impl Parts {
    /// Starts one stage: its group member ([`members`]) subscribes to the stage's topics ([`stage_topics`]) and
    /// its dispatcher runs one task per partition.
    ///
    /// Errors: the subscription fails.
    fn start_stage(
        &mut self,
        topics: &Topics,
        stage: Stage,
        member: group::Dispatcher,
        spawn: group::SpawnTask,
    ) -> anyhow::Result<()> {
        member.subscribe(&stage_topics(topics, stage).0)?;
        let dispatcher = member;
        self.assignments.push((stage, dispatcher.assignment.clone()));
        self.tasks.spawn(dispatcher.run(stage, spawn, self.stop.clone()));
        Ok(())
    }

    /// Starts the read API ([`crate::app`]) on its listener when given, following the live pointer, and the admin
    /// address ([`crate::api::admin`]) on `admin`, both bound at start.
    ///
    /// Errors: Redis unreachable, or the gateway's producer cannot be created.
    async fn start_http(
        &mut self,
        opts: &RunOptions,
        api: Option<(Option<Arc<crate::auth::Verifier>>, tokio::net::TcpListener)>,
        admin: tokio::net::TcpListener,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<()> {
        let s = &opts.settings;
        let api = match api {
            Some((auth, listener)) => {
                let producer = Some(crate::kafka::gateway_producer(&s.brokers)?);
                let (limits, metrics, stop) = (opts.limits.clone(), metrics.clone(), self.stop.clone());
                let deps = crate::app::ApiDeps { settings: s.clone(), auth, limits, metrics, producer, stop };
                Some((crate::app::build(deps).await?, listener))
            }
            None => None,
        };
        let state = crate::app::admin(s, api.as_ref().map(|(a, _)| a), self.assignments.clone(), metrics).await?;
        if let Some((api, listener)) = api {
            info!(addr = %listener.local_addr().context("the API's address")?, "read API listening");
            let stop = self.stop.clone();
            self.tasks.spawn(async move {
                crate::app::serve(listener, api, stop).await;
                Ok(())
            });
        }
        info!(addr = %admin.local_addr().context("the admin address")?, "admin address listening");
        let (limits, stop) = (opts.limits.clone(), self.stop.clone());
        self.tasks.spawn(async move {
            crate::app::serve_admin(admin, state, &limits, stop).await;
            Ok(())
        });
        Ok(())
    }
}

/// Runs until `shutdown` completes ([`crate::shutdown::signal`] for the command: SIGINT or SIGTERM), then stops
/// the stages cleanly (each task flushes and checkpoints) and the API drains.
///
/// Errors: a service unreachable at start, the API or admin address in use, or a part stopping unexpectedly.
pub async fn run(opts: RunOptions, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let s = &opts.settings;
    // Refuse before connecting anything or joining a group: no key, or the API's or the admin address taken.
    let api = match opts.roles.contains(&Role::Api) {
        true => Some((opts.verifier()?, crate::app::bind(opts.listen).await?)),
        false => None,
    };
    let admin = crate::app::bind_admin(opts.admin_listen).await?;
    let membership = crate::kafka::Membership {
        session_timeout: opts.session_timeout,
        instance_id: opts.group_instance_id.clone(),
        protocol: opts.group_protocol,
        client_id: Some(owner_name(opts.group_instance_id.as_deref())),
    };
    // Created while the services are checked, joined once all answered: their clients connect meanwhile.
    let members = members(&opts, &membership)?;
    let (shared, early) = connect(&opts).await?;
    if let (Some(early), Some(id)) = (early, &opts.group_instance_id) {
        start_prepared(&shared, early, id);
    }
    if opts.group_protocol == crate::kafka::GroupProtocol::Consumer && opts.group_instance_id.is_some() {
        // Measured with Kafka 4.1 and librdkafka 2.12 (docs/performance.md, "Rolling restart"): a restart kept the member's
        // partitions idle for the whole session timeout.
        tracing::warn!(
            "--group-protocol consumer with --group-instance-id: a restarted member's partitions may wait for the \
               broker's session timeout; prefer one of the two"
        );
    }
    if let Some(every) = opts.verify_every {
        let repair = opts.repair.then_some(opts.repair_limit);
        spawn_verifier(s.clone(), &shared, every, opts.verify_sample, repair);
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut parts = Parts { tasks: tokio::task::JoinSet::new(), assignments: Vec::new(), stop: stop_rx };
    for (stage, member) in members {
        let spawn = match stage {
            Stage::FanOut => task_spawner(&shared, stage, fanout_stage::run),
            Stage::Fold => task_spawner(&shared, stage, fold_stage::run),
        };
        parts.start_stage(&shared.topics, stage, member, spawn)?;
    }
    shared.metrics.set_assignments(parts.assignments.clone());
    parts.start_http(&opts, api, admin, shared.metrics.clone()).await?;
    wait_for_stop(parts.tasks, stop_tx, &shared, shutdown).await
}

/// The group members (`{group}.{stage}`) of the stages in `opts.roles`, created and not subscribed: nothing joins
/// a group before every service answered (issue 23: fail fast).
///
/// Errors: a client cannot be created.
fn members(
    opts: &RunOptions,
    membership: &crate::kafka::Membership,
) -> anyhow::Result<Vec<(Stage, group::Dispatcher)>> {
    let (s, topics) = (&opts.settings, opts.settings.topics());
    let member = |stage| group::member(&s.brokers, &s.stage_group(stage), stage_topics(&topics, stage).1, membership);
    stages(&opts.roles).into_iter().map(|stage| Ok((stage, member(stage)?))).collect()
}

/// Marks this process's leases draining at a clean stop, so that a restarted static member waits for each task's
/// last checkpoint and Kafka transaction ([`prepare`]); it runs beside the drain (the tasks' releases and the mark
/// may come in either order). Bounded by 1 s; a failure is only logged (that member then starts as it would after
/// a crash).
async fn mark_draining(shared: &Shared) {
    match tokio::time::timeout(Duration::from_secs(1), shared.store.mark_draining(&shared.owner)).await {
        Ok(Ok(n)) => tracing::debug!(leases = n, "leases marked draining"),
        Ok(Err(e)) => tracing::warn!(error = %e, "marking the leases draining"),
        Err(_) => tracing::warn!("marking the leases draining took over 1 s; stopping without"),
    }
}

/// Waits for `shutdown` or a part ending, then tells every part to stop and waits for them.
async fn wait_for_stop(
    mut tasks: tokio::task::JoinSet<anyhow::Result<()>>,
    stop: watch::Sender<bool>,
    shared: &Shared,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::select! {
        () = shutdown => {}
        Some(done) = tasks.join_next() => {
            let _ = stop.send(true);
            done.context("a stage panicked")??;
            anyhow::bail!("a stage stopped unexpectedly");
        }
    }
    let marking = mark_draining(shared); // beside the drain: a task's release may come first
    let _ = stop.send(true);
    marking.await;
    while let Some(done) = tasks.join_next().await {
        done.context("a stage panicked")??;
    }
    info!("stopped");
    Ok(())
}

/// Prepares the partitions `early` found held by the previous incarnation of static member `instance` (their
/// lease, state and, in the fan-out, producer, each task's first steps in their usual order, [`prepare`]), and
/// drops what no task took after [`prepare::PREPARED_FOR`]. Returns at once; a task assigned one of them waits for
/// its preparation.
fn start_prepared(shared: &Arc<Shared>, early: prepare::Early, instance: &str) {
    let held = shared.prepared.adopt(early);
    let prefix = format!("{instance}@");
    for &(stage, p) in &held {
        let (sh, prefix) = (shared.clone(), prefix.clone());
        match stage {
            Stage::FanOut => shared.prepared.prepare_fanout(p, fanout_stage::prepare(sh, p, prefix)),
            Stage::Fold => shared.prepared.prepare_fold(p, fold_stage::prepare(sh, p, prefix)),
        }
    }
    let shared = Arc::downgrade(shared);
    tokio::spawn(async move {
        tokio::time::sleep(prepare::PREPARED_FOR).await;
        if let Some(shared) = shared.upgrade() {
            shared.prepared.expire().await;
        }
    });
}
