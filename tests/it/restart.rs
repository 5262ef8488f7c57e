//! Issue 23, rolling restarts: with static membership (`--group-instance-id`, a StatefulSet pod's name in the
//! chart) an instance stopped and started again within the session timeout gets its own partitions back, the other
//! instance sees no rebalance at all, and the counts stay exact.

use std::time::{Duration, Instant};

use crate::support::*;

/// The rebalance events an instance has seen, both stages.
fn rebalances(admin: u16) -> f64 {
    metric_sum(admin, "unread_rebalances_total")
}

/// Waits until an instance's rebalance count holds still for 3 s (at most 60 s): its group has settled.
fn settled(admin: u16) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = rebalances(admin);
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = rebalances(admin);
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

#[test]
fn a_static_member_restarted_within_the_session_timeout_moves_no_partition_of_the_other() {
    let test = "a_static_member_restarted_within_the_session_timeout_moves_no_partition_of_the_other";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "static");
    let flags = |id| ["--group-instance-id", id, "--session-timeout", "30s"];
    let a = ns.start(&flags("a"));
    let b = ns.start(&flags("b"));
    let before = settled(b.admin);
    assert!(before > 0.0, "b saw its own assignment");
    a.stop();
    let a = ns.start(&flags("a"));
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches(a.port, &dev_expected());
    assert_eq!(settled(b.admin), before, "b saw a rebalance while a restarted");
    // The restarted a got its partitions back and found their starts (lease, state, fan-out producers) made while
    // it rejoined.
    let started = task_starts(&ns, a.port);
    assert!(started.iter().any(|l| l.contains("fan-out")) && started.iter().any(|l| l.contains("fold")));
    assert!(started.iter().all(|l| l.contains("prepared=true")), "a start not prepared:\n{}", started.join("\n"));
    // The stopped a cleared each lease's draining mark at its tasks' clean stop: no lease waited for a drain.
    let waited = log_lines(&ns, a.port, "previous incarnation's drain");
    assert!(waited.is_empty(), "a lease waited for a drain that had ended:\n{}", waited.join("\n"));
    a.stop();
    b.stop();
}

/// Under the classic protocol every rebalance is eager: each member's partitions are all revoked, then assigned
/// anew. A member keeps the tasks of those it gets back: when `b` joins, `a`'s tasks of the partitions `a` keeps
/// go on (each of `a`'s partitions started once in all), those that move to `b` stop, and the counts stay exact.
#[test]
fn an_eager_rebalance_keeps_the_tasks_of_the_partitions_that_stay() {
    let Some(stack) = stack("an_eager_rebalance_keeps_the_tasks_of_the_partitions_that_stay") else { return };
    let ns = Ns::new(&stack, "eager");
    let a = ns.start(&[]);
    until(a.admin, "a holds every partition", |n| n == 16.0);
    ns.ok(&["produce", &dev_events()]);
    let b = ns.start(&[]);
    until(b.admin, "b shares the partitions", |n| (1.0..16.0).contains(&n));
    until(a.admin, "a keeps the others", |n| n > 0.0 && n + held(b.admin) == 16.0);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches(a.port, &dev_expected());
    assert_matches(b.port, &dev_expected());
    let kept = held(a.admin);
    let went_on = log_lines(&ns, a.port, "its task goes on");
    assert_eq!(went_on.len() as f64, kept, "a keeps {kept} partitions:\n{}", went_on.join("\n"));
    let starts = task_starts(&ns, a.port);
    let mut seen = std::collections::HashSet::new();
    for line in &starts {
        let stage = if line.contains("fan-out task") { "fan-out" } else { "fold" };
        let partition = line.split_whitespace().find(|w| w.starts_with("partition=")).expect("partition field");
        assert!(
            seen.insert((stage, partition.to_owned())),
            "a started {stage} {partition} twice:\n{}",
            starts.join("\n")
        );
    }
    assert_eq!(seen.len(), 16, "a started each partition's task once:\n{}", starts.join("\n"));
    a.stop();
    b.stop();
}

/// The `fan-out task started` and `fold task started` lines of the instance on `port`, without their colours.
fn task_starts(ns: &Ns, port: u16) -> Vec<String> {
    log_lines(ns, port, " task started")
}

/// The lines of the instance on `port`'s log that contain `what`, without their colours.
fn log_lines(ns: &Ns, port: u16, what: &str) -> Vec<String> {
    let log = std::fs::read_to_string(std::env::temp_dir().join(format!("{}-{port}.log", ns.name))).unwrap();
    log.lines().filter(|l| l.contains(what)).map(plain).collect()
}

/// `line` without its ANSI colour sequences (`ESC [ … m`).
fn plain(line: &str) -> String {
    let mut parts = line.split('\x1b');
    let first = parts.next().unwrap_or_default().to_owned();
    parts.fold(first, |text, part| text + part.split_once('m').map_or(part, |(_, rest)| rest))
}

/// The partitions an instance holds now, both stages (8 + 8 on the test stack's topics).
fn held(admin: u16) -> f64 {
    metric_sum(admin, "unread_assigned_partitions")
}

/// Waits until `check` holds for the instance whose admin port is `admin` (at most 30 s).
fn until(admin: u16, what: &str, check: impl Fn(f64) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check(held(admin)) {
        assert!(Instant::now() < deadline, "{what}: holds {} partitions after 30 s", held(admin));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn with_the_consumer_protocol_a_member_leaving_and_coming_back_moves_only_its_partitions() {
    let test = "with_the_consumer_protocol_a_member_leaving_and_coming_back_moves_only_its_partitions";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "kip848");
    let flags = ["--group-protocol", "consumer"];
    let a = ns.start(&flags);
    let b = ns.start(&flags);
    until(b.admin, "b shares the partitions", |n| (1.0..16.0).contains(&n));
    until(a.admin, "a shares the partitions", |n| n > 0.0);
    a.stop();
    until(b.admin, "b takes a's partitions", |n| n == 16.0);
    ns.ok(&["produce", &dev_events()]);
    let a = ns.start(&flags);
    until(a.admin, "a gets partitions back", |n| n > 0.0);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches(a.port, &dev_expected());
    assert_matches(b.port, &dev_expected());
    let kept = held(b.admin);
    let log = std::fs::read_to_string(std::env::temp_dir().join(format!("{}-{}.log", ns.name, b.port))).unwrap();
    let revoked = log.lines().filter(|l| l.contains("partition revoked")).count();
    // Incremental: b gave up exactly what moved to a; eager rebalances would have revoked all it held, twice.
    assert_eq!(revoked as f64, 16.0 - kept, "b revoked {revoked} partitions and keeps {kept}:\n{log}");
    // KIP-848 groups run with a producer per partition (a successor could not tell a live owner from a dead one).
    assert!(!log.contains("shared transactional producer"), "a shared producer under KIP-848:\n{log}");
    a.stop();
    b.stop();
}

#[test]
fn a_lease_held_before_the_restart_is_taken_only_while_its_previous_incarnation_holds_it() {
    use unread::checkpoint::store::Unreleased;
    use unread::checkpoint::Stage;
    let test = "a_lease_held_before_the_restart_is_taken_only_while_its_previous_incarnation_holds_it";
    let Some(stack) = stack(test) else { return };
    let schema = format!("it_prepare_{}", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = migrated_store(&stack.database_url, &schema).await;
        for (stage, p, owner) in [
            (Stage::FanOut, 0, "a@h:1"),
            (Stage::FanOut, 1, "ab@h:1"),
            (Stage::Fold, 2, "a@h:1"),
            (Stage::Fold, 3, "b@h:2"),
        ] {
            store.acquire(stage, p, owner).await.unwrap();
        }
        // a's previous incarnation: not ab's, not b's.
        assert_eq!(store.leases_held("a@").await.unwrap(), vec![(Stage::FanOut, 0), (Stage::Fold, 2)]);
        // b takes fold partition 2 meanwhile: a's restart must leave it alone.
        let b = store.acquire(Stage::Fold, 2, "b@h:2").await.unwrap();
        assert_eq!(
            store.acquire_held(Stage::Fold, 2, "a@", "a@h:3", false, None).await.unwrap().map(|a| a.generation),
            None
        );
        assert!(store.check_lease(Stage::Fold, 2, b).await.is_ok(), "b's lease stays");
        // Fan-out partition 0 is still a's: taken, one generation up, and not again by the same process.
        let g = store.acquire_held(Stage::FanOut, 0, "a@", "a@h:3", false, None).await.unwrap().map(|a| a.generation);
        assert_eq!(g, Some(2));
        assert_eq!(
            store.acquire_held(Stage::FanOut, 0, "a@", "a@h:3", false, None).await.unwrap().map(|a| a.generation),
            None
        );
        assert_eq!(store.leases_held("a@").await.unwrap(), vec![(Stage::FanOut, 0)]);
        // A clean stop marks what its process holds draining; each task's clean end releases its own lease, only
        // at its generation, and a lease released before the mark is not marked; a lease taken again starts clear.
        assert_eq!(store.mark_draining("a@h:3").await.unwrap(), 1, "a@h:3 holds fan-out 0 alone");
        assert!(store.draining(Stage::FanOut, 0, "a@").await.unwrap());
        assert!(!store.draining(Stage::Fold, 3, "b@").await.unwrap(), "b's lease is not a's to mark");
        assert_eq!(
            store.acquire_held(Stage::FanOut, 0, "a@", "a@h:4", false, None).await.unwrap().map(|a| a.generation),
            None,
            "draining"
        );
        store.release(Stage::FanOut, 0, 1).await.unwrap(); // an older task of the partition
        assert!(store.draining(Stage::FanOut, 0, "a@").await.unwrap(), "still draining");
        store.release(Stage::FanOut, 0, 2).await.unwrap();
        assert!(!store.draining(Stage::FanOut, 0, "a@").await.unwrap(), "released");
        assert_eq!(store.mark_draining("a@h:3").await.unwrap(), 0, "released first, then the mark: not draining");
        assert_eq!(
            store.acquire_held(Stage::FanOut, 0, "a@", "a@h:4", false, None).await.unwrap().map(|a| a.generation),
            Some(3)
        );
        store.mark_draining("a@h:4").await.unwrap();
        assert_eq!(
            store.acquire_held(Stage::FanOut, 0, "a@", "a@h:5", true, None).await.unwrap().map(|a| a.generation),
            Some(4),
            "waited out"
        );
        assert!(!store.draining(Stage::FanOut, 0, "a@").await.unwrap(), "a new lease is not draining");
        // The wait a restart makes: over at once when nothing drains, up to the drain's end otherwise.
        let lease =
            |owner: &'static str| unread::state::load::lease_if_held(&store, Stage::FanOut, 0, "a@", owner, None);
        store.mark_draining("a@h:5").await.unwrap();
        let started = Instant::now();
        let (taken, _) = tokio::join!(lease("a@h:6"), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            store.release(Stage::FanOut, 0, 4).await.unwrap();
        });
        assert_eq!(taken.unwrap().map(|l| l.generation), Some(5), "taken after the drain");
        assert!(started.elapsed() >= Duration::from_millis(300), "not before the drain ended");
        // A lease names the transactional id its owner writes with; a successor learns it when the owner did not
        // release the lease and the id is not its own (then it fences that producer), and not otherwise.
        let unreleased = |owner: &str, id: &str| Some(Unreleased { owner: owner.into(), transactional_id: id.into() });
        let take = |owner: &'static str, id: &'static str| store.acquire_as(Stage::FanOut, 5, owner, Some(id));
        assert_eq!(take("x@h:1", "g.fanout.x").await.unwrap().unreleased, None, "a new lease");
        let y = take("y@h:2", "g.fanout.y").await.unwrap();
        assert_eq!(y.unreleased, unreleased("x@h:1", "g.fanout.x"), "x did not release it");
        store.release(Stage::FanOut, 5, y.generation).await.unwrap();
        assert_eq!(take("x@h:3", "g.fanout.x").await.unwrap().unreleased, None, "y released it");
        assert_eq!(take("x@h:4", "g.fanout.x").await.unwrap().unreleased, None, "x's own id: its init fences it");
        let held = store.acquire_held(Stage::FanOut, 5, "x@", "x@h:5", false, Some("g.fanout.x5")).await.unwrap();
        assert_eq!(held.unwrap().unreleased, unreleased("x@h:4", "g.fanout.x"), "a static member's id changed");
        let pool = sqlx::PgPool::connect(&stack.database_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE"))).execute(&pool).await.unwrap();
    });
}

/// The soak once left an instance's fan-out stuck for good: an abort of the shared transaction failed without
/// making the client fatal, librdkafka stayed in a transaction the instance counted as ended, and every restarted
/// task failed to begin one ("Operation not valid in state InTransaction"). Here the client is put in that state
/// (a transaction begun behind the shared transaction's back); the begin that fails marks the producer stale, the
/// next task's start replaces it (its initialization fences the old client), and transactions go on. Before the
/// fix the start got the same client back and the begin failed again.
#[test]
fn a_shared_producer_whose_transaction_state_was_lost_is_replaced_at_the_next_start() {
    use rdkafka::producer::Producer;
    use unread::service::tx::SharedTransaction;
    let test = "a_shared_producer_whose_transaction_state_was_lost_is_replaced_at_the_next_start";
    let Some(stack) = stack(test) else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let shared = SharedTransaction::new(format!("it_stale_{}.fanout.a", std::process::id()));
        let old = shared.producer(&stack.brokers).await.unwrap();
        old.begin_transaction().unwrap(); // behind its back, as a failed abort leaves it
        let refused = shared.open(None).await.err().expect("the client is already in a transaction");
        assert!(format!("{refused:?}").contains("InTransaction"), "{refused:?}");
        let new = shared.producer(&stack.brokers).await.unwrap();
        for _ in 0..2 {
            let open = shared.open(None).await.unwrap();
            let epoch = open.epoch;
            drop(open);
            shared.commit(epoch).await.unwrap();
        }
        assert!(new.client().fatal_error().is_none(), "the new client works");
        drop(old);
    });
}
