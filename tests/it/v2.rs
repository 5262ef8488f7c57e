//! Contract v2 through the real service (Kafka, Redis, PostgreSQL): feeds, broadcast lists and notifications on
//! the bundled v2 dev set, end to end over HTTP, after a SIGKILL, after Redis lost everything, replayed into a
//! namespace; and a broadcast to 100,000 readers, which writes nothing per reader.

use std::time::Duration;

use unread::core::contract::UserView;

use crate::support::*;

#[test]
fn v2_dev_set_end_to_end_then_redis_lost_and_rebuilt_is_exact() {
    let Some(stack) = stack("v2_dev_set_end_to_end_then_redis_lost_and_rebuilt_is_exact") else { return };
    let ns = Ns::new(&stack, "v2e2e");
    let expected = v2_dev_expected();
    let svc = ns.start(&[]);
    ns.ok(&["produce", &v2_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches(svc.port, &expected);
    // The v2 fields are always present, even for a user with no state.
    let (code, body) = http_get(svc.port, "/v1/users/nobody/unread").unwrap();
    assert_eq!(code, 200);
    for field in
        [r#""feed_unread":0"#, r#""broadcasts":{}"#, r#""notifications":{}"#, r#""total_notifications_unseen":0"#]
    {
        assert!(body.contains(field), "{field} in {body}");
    }
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    svc.stop();
    // Redis loses everything (users and broadcast lists): answered from the checkpoint, lists included, never
    // zeros; rebuilt from the checkpoint, exact again.
    let sample: Vec<&UserView> = expected.iter().step_by(97).collect();
    lose_redis_then_rebuild(&ns, &expected, &sample);
}

#[test]
fn v2_sigkill_mid_flow_then_replay_and_verify_against_is_exact() {
    let Some(stack) = stack("v2_sigkill_mid_flow_then_replay_and_verify_against_is_exact") else { return };
    sigkill_mid_flow_then_replay(&Ns::new(&stack, "v2kill"), &v2_dev_events(), &v2_dev_expected(), "", &[]);
}

/// One JSON line per event.
fn lines(events: impl Iterator<Item = serde_json::Value>) -> String {
    events.map(|e| e.to_string() + "\n").collect()
}

#[test]
fn a_broadcast_to_100000_readers_writes_nothing_per_reader() {
    let Some(stack) = stack("a_broadcast_to_100000_readers_writes_nothing_per_reader") else { return };
    let ns = Ns::new(&stack, "v2fanin");
    let meta = |t: &str| serde_json::json!({"type": t, "event_id": "e", "occurred_at": "2024-01-01T00:00:00Z"});
    let reads = (0..100_000).map(|i| {
        let mut e = meta("broadcast.read");
        e["user_id"] = format!("reader-{i}").into();
        (e["broadcast_id"], e["read_seq"]) = ("system".into(), 0.into());
        e
    });
    let dir = std::env::temp_dir();
    let (subscribe, publish) = (dir.join(format!("{}-sub.jsonl", ns.name)), dir.join(format!("{}-pub.jsonl", ns.name)));
    std::fs::write(&subscribe, lines(reads)).unwrap();
    let mut p = meta("broadcast.published");
    (p["broadcast_id"], p["seq"]) = ("system".into(), 1.into());
    std::fs::write(&publish, lines(std::iter::once(p))).unwrap();
    let svc = ns.start(&[]);
    ns.ok(&["produce", subscribe.to_str().unwrap()]);
    ns.ok(&["lag", "--wait", "2m"]);
    // Lag zero is read from PostgreSQL: give the tasks a moment to count their last checkpoint.
    let settled = || {
        let mut last = (-1.0, -1.0);
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let writes = metric(svc.admin, "unread_redis_user_writes_total");
            let now = (writes, metric(svc.admin, "unread_checkpoint_rows_total"));
            if now == last {
                return now;
            }
            last = now;
        }
    };
    let (writes, rows) = settled();
    assert!(writes >= 100_000.0, "every reader was written once when subscribing: {writes}");
    ns.ok(&["produce", publish.to_str().unwrap()]);
    ns.ok(&["lag", "--wait", "1m"]);
    let (after_writes, after_rows) = settled();
    assert_eq!(after_writes, writes, "the publication wrote no user");
    let new_rows = after_rows - rows;
    assert!(new_rows <= 1.0, "the publication checkpointed the list alone, not the readers: {new_rows} rows");
    for reader in ["reader-0", "reader-54321", "reader-99999"] {
        let (_, body) = http_get(svc.port, &format!("/v1/users/{reader}/unread")).unwrap();
        assert!(body.contains(r#""broadcasts":{"system":{"unread":1,"dot":true}}"#), "{reader}: {body}");
    }
    svc.stop();
    std::fs::remove_file(subscribe).ok();
    std::fs::remove_file(publish).ok();
}
