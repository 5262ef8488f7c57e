//! Issue 23, scheduled repair: `unread run --verify-every 1s --repair` rewrites a user whose Redis hash changed
//! behind the service's back, counts it in `/metrics`, and never writes over a hash newer than the checkpoint.

use std::time::{Duration, Instant};

use unread::core::contract::UserView;

use crate::support::*;

/// One user's counts over HTTP.
fn read(port: u16, user: &str) -> UserView {
    let (_, body) = http_get(port, &format!("/v1/users/{}/unread", encode(user))).unwrap();
    // In the dev set's expected shape (contract v1: no v4 field).
    unread::pipeline::Shape::V3.project(&serde_json::from_str(&body).unwrap())
}

#[test]
fn scheduled_repair_mends_a_user_changed_behind_its_back_and_never_overwrites_newer_state() {
    let test = "scheduled_repair_mends_a_user_changed_behind_its_back_and_never_overwrites_newer_state";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "repair");
    let svc = ns.start(&["--verify-every", "1s", "--verify-sample", "100000", "--repair", "--repair-limit", "10"]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    let expected = dev_expected();
    let mut with_unread = expected.iter().filter(|v| v.conversations.values().any(|c| c.unread > 0));
    let (mended, newer) = (with_unread.next().unwrap(), with_unread.next().unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let hset = |user: &str, field: &str, value: &str| {
        rt.block_on(async {
            let client = redis::Client::open(ns.redis_url.as_str()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let key = format!("{}:u:{user}", ns.name);
            let _: i64 = redis::cmd("HSET").arg(key).arg(field).arg(value).query_async(&mut conn).await.unwrap();
        })
    };
    let cid = |v: &UserView| v.conversations.iter().find(|(_, c)| c.unread > 0).unwrap().0.clone();
    // A value the fold never wrote, on both; the second hash also claims a version from a newer generation.
    hset(&mended.user_id, &format!("c:{}", cid(mended)), "999 0 0 0");
    hset(&newer.user_id, &format!("c:{}", cid(newer)), "999 0 0 0");
    hset(&newer.user_id, "_version", "999999 0 0");
    let deadline = Instant::now() + Duration::from_secs(60);
    while read(svc.port, &mended.user_id) != *mended {
        assert!(Instant::now() < deadline, "not repaired within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(metric(svc.admin, "unread_verify_repaired_users_total") >= 1.0);
    // Runs later, the newer hash is still as it was: reported ahead, never rewritten.
    let runs = metric(svc.admin, "unread_verify_runs_total");
    while metric(svc.admin, "unread_verify_runs_total") < runs + 3.0 {
        assert!(Instant::now() < deadline + Duration::from_secs(30), "the verifier stopped running");
        std::thread::sleep(Duration::from_millis(200));
    }
    let still = read(svc.port, &newer.user_id);
    assert_eq!(still.conversations[&cid(newer)].unread, 999, "a hash newer than the checkpoint was overwritten");
    assert!(metric(svc.admin, "unread_verify_ahead_users") >= 1.0);
    svc.stop();
}
