//! Read diffusion (issue 12) through the real service: conversations switching both ways under churn, a SIGKILL in
//! the middle, Redis losing everything, a replay with read diffusion off; and a message to a 20,000-member channel,
//! which writes no member's hash, where a join or a leave checkpoints one member's row, not the member list.

use std::time::Duration;

use unread::core::contract::UserView;
use unread::core::hybrid::Diffusion;
use unread::pipeline::MAX_BATCH;

use crate::support::*;

#[test]
fn read_diffusion_switching_both_ways_survives_sigkill_redis_loss_and_replay() {
    let Some(stack) = stack("read_diffusion_switching_both_ways_survives_sigkill_redis_loss_and_replay") else {
        return;
    };
    let ns = Ns::new(&stack, "hyb");
    let events = churned_v2_dev_events();
    let (expected, _) = fold_text(&events, Diffusion::OFF, MAX_BATCH);
    let (_, switches) = fold_text(&events, Diffusion::from_threshold(5), MAX_BATCH);
    assert!(switches.to_read >= 20 && switches.to_write >= 20, "{switches:?}");
    let path = std::env::temp_dir().join(format!("{}-churn.jsonl", ns.name));
    std::fs::write(&path, &events).unwrap();
    ns.ok(&["produce", path.to_str().unwrap()]);
    let initial = ns.total_lag();
    let svc = ns.start(&["--read-diffusion-threshold", "5", "--flush-events", "2000"]);
    let at_kill = wait_for_progress(&ns, initial);
    svc.kill();
    assert!(at_kill > 0, "the service had already finished when killed; the test proves nothing");
    let svc = ns.start(&["--read-diffusion-threshold", "5"]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_exact_views(svc.port, &expected);
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    svc.stop();
    // Redis loses everything: answered from the checkpoint (indexes included), then rebuilt, exact again.
    let sample: Vec<&UserView> = expected.iter().filter(|e| e.total_unread > 0).step_by(53).collect();
    lose_redis_then_rebuild(&ns, &expected, &sample);
    // A replay with read diffusion off builds the same counts.
    let out = ns.cmd(&["replay", "--into", "hybw"]).env("UNREAD_READ_DIFFUSION_THRESHOLD", "0").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(ns.ok(&["verify", "--namespace", "hybw"]).contains("differing: 0"));
    let out = ns.ok(&["verify", "--against", "hybw"]);
    assert!(out.contains("differing: 0"), "{out}");
    std::fs::remove_file(path).ok();
}

/// Every expected user is served exactly (the churned set lists fewer users than the dev set).
fn assert_exact_views(port: u16, expected: &[UserView]) {
    let (n, bad) = mismatches(port, expected);
    assert!(n > 1000, "{n} users expected");
    assert!(bad.is_empty(), "{} of {n} users differ, e.g. {:#?}", bad.len(), &bad[..bad.len().min(5)]);
}

/// One JSON line per event.
fn lines(events: impl Iterator<Item = serde_json::Value>) -> String {
    events.map(|e| e.to_string() + "\n").collect()
}

fn event(t: &str) -> serde_json::Value {
    serde_json::json!({"type": t, "event_id": "e", "occurred_at": "2024-01-01T00:00:00Z", "conversation_id": "big"})
}

#[test]
fn messages_to_a_20000_member_channel_write_no_member() {
    let Some(stack) = stack("messages_to_a_20000_member_channel_write_no_member") else { return };
    let ns = Ns::new(&stack, "hybig");
    let joins = (0..20_000).map(|i| {
        let mut e = event("member.joined");
        e["user_id"] = format!("m-{i}").into();
        e
    });
    let messages = (1..=100u64).map(|seq| {
        let mut e = event("message.sent");
        (e["seq"], e["sender_id"]) = (seq.into(), "m-0".into());
        e["mentions"] = if seq == 50 { serde_json::json!(["m-7"]) } else { serde_json::json!([]) };
        e["mention_all"] = (seq == 60).into();
        e
    });
    let svc = ns.start(&[]); // the default threshold, 1,000 members
    produce_lines(&ns, "join", lines(joins));
    ns.ok(&["lag", "--wait", "2m"]);
    let settled = || settled_counters(svc.admin);
    let (writes, _) = settled();
    assert!(writes >= 20_000.0, "every member was written once when joining: {writes}");
    produce_lines(&ns, "send", lines(messages));
    ns.ok(&["lag", "--wait", "1m"]);
    let (after, _) = settled();
    // The sender's floor and m-7's named mention are per user; the rest is the index, written once.
    assert!(after - writes <= 4.0, "100 messages wrote {} user hashes, not one per member", after - writes);
    for (user, unread, mentions) in [("m-1", 100, 1), ("m-7", 100, 2), ("m-19999", 100, 1), ("m-0", 0, 0)] {
        let (_, body) = http_get(svc.port, &format!("/v1/users/{user}/unread")).unwrap();
        let view: unread::core::contract::UserView = serde_json::from_str(&body).unwrap();
        let c = &view.conversations["big"];
        assert_eq!(
            (c.unread, c.mentions, view.total_unread, view.total_mentions),
            (unread, mentions, unread, mentions)
        );
        assert_eq!(view.unread_conversations, u64::from(unread > 0), "{body}");
        let (_, body) = http_get(svc.port, &format!("/v1/users/{user}/conversations/big/unread")).unwrap();
        let one: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!((one["unread"].as_u64(), one["mentions"].as_u64()), (Some(unread), Some(mentions)), "{body}");
    }
    // A join and a leave write O(1) checkpoint bytes (issue 21): two member rows, the conversation's row without
    // its members and the two users' rows, not a row of 20,000 members (about 200 KB).
    let bytes_before = metric(svc.admin, "unread_checkpoint_bytes_total");
    let mut joined = event("member.joined");
    joined["user_id"] = "m-20000".into();
    let mut left = event("member.left");
    left["user_id"] = "m-5".into();
    produce_lines(&ns, "churn", lines([joined, left].into_iter()));
    ns.ok(&["lag", "--wait", "1m"]);
    settled();
    let written = metric(svc.admin, "unread_checkpoint_bytes_total") - bytes_before;
    assert!(written > 0.0 && written < 4096.0, "a join and a leave wrote {written} checkpoint bytes");
    let m5 = http_get(svc.port, "/v1/users/m-5/unread").unwrap().1;
    svc.stop();
    // Restarted, the fan-out loads the members from their rows: the new member counts the next message, the one
    // who left does not.
    let svc = ns.start(&[]);
    let mut e = event("message.sent");
    (e["seq"], e["sender_id"], e["mentions"]) = (101.into(), "m-0".into(), serde_json::json!([]));
    produce_lines(&ns, "after", lines(std::iter::once(e)));
    ns.ok(&["lag", "--wait", "1m"]);
    for (user, unread) in [("m-20000", 1), ("m-1", 101)] {
        let (_, body) = http_get(svc.port, &format!("/v1/users/{user}/unread")).unwrap();
        let view: unread::core::contract::UserView = serde_json::from_str(&body).unwrap();
        assert_eq!(view.conversations["big"].unread, unread, "{user}: {body}");
    }
    assert_eq!(http_get(svc.port, "/v1/users/m-5/unread").unwrap().1, m5, "m-5 left before message 101");
    svc.stop();
}

/// Redis user writes and checkpoint rows once they stop moving (lag zero is read from PostgreSQL: the tasks may
/// still be counting their last flush).
fn settled_counters(port: u16) -> (f64, f64) {
    let mut last = (-1.0, -1.0);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = (metric(port, "unread_redis_user_writes_total"), metric(port, "unread_checkpoint_rows_total"));
        if now == last {
            return now;
        }
        last = now;
    }
}

/// The read routes without a `read_seq` ack the newest message the user sees, also in a read-diffused
/// conversation, whose messages live in its index and not in the members' state: reading it, "mark all read" and
/// the feed's read clear them.
#[test]
fn the_read_routes_clear_a_read_diffused_conversation() {
    let Some(stack) = stack("the_read_routes_clear_a_read_diffused_conversation") else { return };
    let ns = Ns::new(&stack, "hybread");
    let svc = ns.start(&["--read-diffusion-threshold", "5"]);
    let mut events = Vec::new();
    for (conv, kind) in [("big", "channel"), ("big2", "channel"), ("news", "feed")] {
        let mut created = event("conversation.created");
        (created["conversation_id"], created["kind"], created["members"]) =
            (conv.into(), kind.into(), serde_json::json!([]));
        events.push(created);
        for i in 0..8 {
            let mut e = event("member.joined");
            (e["conversation_id"], e["user_id"]) = (conv.into(), format!("m-{i}").into());
            events.push(e);
        }
        for seq in 1..=3u64 {
            let mut e = event("message.sent");
            (e["conversation_id"], e["seq"], e["sender_id"]) = (conv.into(), seq.into(), "m-0".into());
            events.push(e);
        }
    }
    produce_lines(&ns, "msgs", lines(events.into_iter()));
    ns.ok(&["lag", "--wait", "1m"]);
    let view = |user: &str| -> UserView {
        serde_json::from_str(&http_get(svc.port, &format!("/v1/users/{user}/unread")).unwrap().1).unwrap()
    };
    let before = view("m-1");
    assert_eq!((before.total_unread, before.feed_unread), (6, 3), "{before:?}");
    let post = |user: &str, path: &str| {
        let (code, body) = http_post_as(svc.port, path, Some(&token(user, false)), &serde_json::json!({})).unwrap();
        assert_eq!(code, 202, "{path}: {body}");
    };
    post("m-1", "/v1/users/m-1/conversations/big/read");
    post("m-2", "/v1/users/m-2/read-all");
    post("m-3", "/v1/users/m-3/feed/read");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (one, two, three) = (view("m-1"), view("m-2"), view("m-3"));
        let got = (one.conversations["big"].unread, one.total_unread, two.total_unread, three.feed_unread);
        if got == (0, 3, 0, 0) && (two.feed_unread, three.total_unread) == (3, 6) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "after 20 s: {one:?} {two:?} {three:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Joined a moment ago: the membership is in Redis (the user's `r:` field) and not yet in the checkpoint;
    // reading all acks the index's head all the same. Checkpoints every 60 s or 25 records: the fan-out's 29
    // records commit (its commit writes the index to Redis), the folds' few deltas each wait.
    svc.stop();
    let svc = ns.start(&["--read-diffusion-threshold", "5", "--flush-interval", "60s", "--flush-events", "25"]);
    let view = |user: &str| -> UserView {
        serde_json::from_str(&http_get(svc.port, &format!("/v1/users/{user}/unread")).unwrap().1).unwrap()
    };
    let post = |user: &str, path: &str| {
        let (code, body) = http_post_as(svc.port, path, Some(&token(user, false)), &serde_json::json!({})).unwrap();
        assert_eq!(code, 202, "{path}: {body}");
    };
    let mut events = vec![event("conversation.created")];
    (events[0]["conversation_id"], events[0]["kind"], events[0]["members"]) =
        ("big3".into(), "channel".into(), serde_json::json!([]));
    for i in 0..8 {
        let mut e = event("member.joined");
        (e["conversation_id"], e["user_id"]) = ("big3".into(), format!("late-{i}").into());
        events.push(e);
    }
    for seq in 1..=20u64 {
        let mut e = event("message.sent");
        (e["conversation_id"], e["seq"], e["sender_id"]) = ("big3".into(), seq.into(), "late-0".into());
        events.push(e);
    }
    produce_lines(&ns, "late", lines(events.into_iter()));
    let unread = |user: &str| view(user).conversations.get("big3").map(|c| c.unread);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while unread("late-7") != Some(20) {
        assert!(std::time::Instant::now() < deadline, "late-7 sees {:?} after 20 s", unread("late-7"));
        std::thread::sleep(Duration::from_millis(100));
    }
    post("late-7", "/v1/users/late-7/read-all");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while unread("late-7") != Some(0) {
        assert!(std::time::Instant::now() < deadline, "late-7 still sees {:?} after 20 s", unread("late-7"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(unread("late-6"), Some(20), "another member's count is untouched");
    svc.stop();
}
