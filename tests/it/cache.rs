//! Issue 23, Redis as a bounded cache: with `--projection-ttl`, a user's hash expires after that long with no
//! write or read; every read route refills such a user from the checkpoint, exactly; the fold writes a user whose
//! hash expired (or was refilled) whole at its next change rather than patch a hash that is not there; `verify`
//! counts expired users as evicted, not as differing.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use unread::core::contract::UserView;
use unread::core::expiry::NEVER;
use unread::projection::redis::RedisProjection;

use crate::support::*;

/// The ttl of the test (the floor of 5 minutes is lifted by the test aid).
const TTL: &str = "4s";
const SHORT_TTL_OK: (&str, &str) = ("UNREAD_TEST_SHORT_PROJECTION_TTL", "1");

/// How many user hashes the namespace holds in Redis.
fn user_hashes(rt: &tokio::runtime::Runtime, ns: &Ns) -> usize {
    rt.block_on(async {
        let client = redis::Client::open(ns.redis_url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut keys: redis::AsyncIter<String> = conn.scan_match(format!("{}:u:*", ns.name)).await.unwrap();
        let mut n = 0;
        while futures::StreamExt::next(&mut keys).await.is_some() {
            n += 1;
        }
        n
    })
}

/// Waits until Redis holds none of the namespace's user hashes (all expired).
fn wait_until_evicted(rt: &tokio::runtime::Runtime, ns: &Ns) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while user_hashes(rt, ns) > 0 {
        assert!(Instant::now() < deadline, "user hashes still in Redis 60 s on");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Every user of `expected` through the batch route, in batches of 1,000.
fn batch(port: u16, expected: &[UserView]) -> Vec<UserView> {
    let mut got = Vec::new();
    for chunk in expected.chunks(1000) {
        let ids: Vec<&str> = chunk.iter().map(|v| v.user_id.as_str()).collect();
        let body = serde_json::json!({ "user_ids": ids });
        let (code, text) = http_post_as(port, "/v1/unread:batch", Some(&token("t", true)), &body).unwrap();
        assert_eq!(code, 200, "{text}");
        let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
        got.extend(parse_views(
            &answer["users"].as_array().unwrap().iter().map(|u| u.to_string()).collect::<Vec<_>>().join("\n"),
        ));
    }
    got
}

#[test]
fn with_a_projection_ttl_idle_users_leave_redis_and_come_back_exact_through_every_read_and_write() {
    let test = "with_a_projection_ttl_idle_users_leave_redis_and_come_back_exact_through_every_read_and_write";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "cache");
    let svc = ns.start_with_env(&["--projection-ttl", TTL], &[SHORT_TTL_OK]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    let (expected, rt) = (dev_expected(), tokio::runtime::Runtime::new().unwrap());
    let direct = rt.block_on(RedisProjection::connect(&ns.redis_url, &format!("{}:", ns.name))).unwrap();
    let key = format!("{}:u:{}", ns.name, expected[0].user_id);
    let pttl: i64 = rt.block_on(async {
        let mut conn = direct.connection();
        redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.unwrap()
    });
    assert!((1..=4000).contains(&pttl) || user_hashes(&rt, &ns) == 0, "a written hash expires: PTTL {pttl}");

    // Expired: the batch route refills every user from the checkpoint, exactly.
    wait_until_evicted(&rt, &ns);
    assert_eq!(batch(svc.port, &expected), expected, "the batch route after every hash expired");
    assert!(metric_sum(svc.port, "unread_reads_total{source=\"checkpoint\"}") >= expected.len() as f64);
    assert!(user_hashes(&rt, &ns) > expected.len() / 2, "the batch route wrote the users back");

    // A change to users whose hashes were refilled, then one to users whose hashes expired: each time the fold
    // writes them whole (a patch would apply to the refilled state, or build a hash of the changed fields alone).
    let last = "ubuntu.2016-12-19_20";
    let line = |seq: u64, sender: &str, mention: &str| {
        format!(
            r#"{{"type":"message.sent","event_id":"cache#{seq}","occurred_at":"2016-12-19T22:00:00Z","conversation_id":"{last}","seq":{seq},"sender_id":"{sender}","mentions":["{mention}"]}}"#
        ) + "\n"
    };
    let mut events = std::fs::read_to_string(dev_events()).unwrap();
    let mut before = expected.clone();
    for (round, extra) in
        [line(1187, "figure002", "mccallum1983"), line(1188, "mccallum1983", "zacky83")].into_iter().enumerate()
    {
        if round == 1 {
            wait_until_evicted(&rt, &ns);
        }
        events += &extra;
        let all = std::env::temp_dir().join(format!("{}-all.jsonl", ns.name));
        std::fs::write(&all, &events).unwrap();
        let after = parse_views(&ns.ok(&["fold", "--shape", "v2", "--input", all.to_str().unwrap()]));
        std::fs::remove_file(&all).ok();
        let whole_before = metric(svc.port, "unread_projection_whole_rewrites_total");
        produce_lines(&ns, "extra", extra);
        ns.ok(&["lag", "--wait", "2m"]);
        let changed: Vec<&UserView> = after.iter().filter(|v| !before.contains(v)).collect();
        assert!(changed.len() >= 10, "round {round}: {} users changed", changed.len());
        let in_redis: Vec<UserView> =
            changed.iter().filter_map(|v| rt.block_on(direct.read_existing(&v.user_id, NEVER)).unwrap()).collect();
        let n = (in_redis.len(), changed.len());
        assert!(n.0 * 2 >= n.1, "round {round}: {} of {} changed users in Redis", n.0, n.1);
        for got in &in_redis {
            let want = after.iter().find(|v| v.user_id == got.user_id);
            assert_eq!(Some(got), want, "round {round}: the fold's write of a changed user");
        }
        let whole = metric(svc.port, "unread_projection_whole_rewrites_total") - whole_before;
        assert!(whole >= n.1 as f64 / 2.0, "round {round}: {whole} patches refused, then written whole");
        before = after;
    }
    let after = before;

    // Expired again: the user and conversation routes refill, exactly; verify calls them evicted.
    wait_until_evicted(&rt, &ns);
    let cold = after.iter().find(|v| v.conversations.values().any(|c| c.unread > 0)).unwrap();
    let (cid, c) = cold.conversations.iter().find(|(_, c)| c.unread > 0).unwrap();
    let path = format!("/v1/users/{}/conversations/{}/unread", encode(&cold.user_id), encode(cid));
    let (code, body) = http_get(svc.port, &path).unwrap();
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((code, answer["unread"].as_u64(), answer["member"].as_bool()), (200, Some(c.unread), Some(true)));
    let mut verify = ns.cmd(&["verify", "--projection-ttl", TTL]);
    let out = verify.env(SHORT_TTL_OK.0, SHORT_TTL_OK.1).output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && report.contains("differing: 0") && report.contains("evicted"), "{report}");
    // A socket of a user with no hash: its first message is the refilled state, not zeros.
    let other = after.iter().find(|v| v.total_unread > 0 && v.user_id != cold.user_id).unwrap();
    let stream = crate::push::sse(svc.port, &other.user_id);
    let first = stream.next_message(Duration::from_secs(10)).expect("a first message");
    assert_eq!(first["type"], "state", "{first}");
    assert_eq!(serde_json::from_value::<UserView>(first["state"].clone()).unwrap(), *other, "{first}");
    drop(stream);
    assert_matches(svc.port, &after);
    svc.stop();
}

#[test]
fn a_projection_ttl_under_the_floor_is_refused_with_one_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_unread"))
        .args(["verify", "--projection-ttl", "30s"])
        .env_remove(SHORT_TTL_OK.0)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--projection-ttl 30s: at least 5m"), "{err}");
}
