//! Issue 23, rolling restarts: with static membership (`--group-instance-id`, a StatefulSet pod's name in the
//! chart) an instance stopped and started again within the session timeout gets its own partitions back, the other
//! instance sees no rebalance at all, and the counts stay exact.

use std::time::{Duration, Instant};

use crate::support::*;

/// The rebalance events an instance has seen, both stages.
fn rebalances(port: u16) -> f64 {
    metric_sum(port, "unread_rebalances_total")
}

/// Waits until an instance's rebalance count holds still for 3 s (at most 60 s): its group has settled.
fn settled(port: u16) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = rebalances(port);
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let now = rebalances(port);
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
    let before = settled(b.port);
    assert!(before > 0.0, "b saw its own assignment");
    a.stop();
    let a = ns.start(&flags("a"));
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches(a.port, &dev_expected());
    assert_eq!(settled(b.port), before, "b saw a rebalance while a restarted");
    a.stop();
    b.stop();
}
