//! Contract v3 through the real service (Kafka, Redis, PostgreSQL): the bundled v3 dev set (ttls, marks "from
//! here", unmarks) end to end over HTTP at the set's instant (`?now=`), after a SIGKILL, after Redis lost
//! everything, replayed into a namespace.

use unread::core::contract::UserView;

use crate::support::*;

#[test]
fn v3_dev_set_end_to_end_at_its_instant_then_redis_lost_and_rebuilt_is_exact() {
    let Some(stack) = stack("v3_dev_set_end_to_end_at_its_instant_then_redis_lost_and_rebuilt_is_exact") else {
        return;
    };
    let ns = Ns::new(&stack, "v3e2e");
    let expected = v3_dev_expected();
    let svc = ns.start(&[]);
    ns.ok(&["produce", &v3_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches_at(svc.port, &expected, V3_DEV_NOW);
    // The instant matters: at the server's clock (years later) every message of a conversation with a ttl has
    // expired, and a conversation-level read agrees with the user's read at the same instant.
    let (marked, (expiring, ttl_cid)) = pick_marked_and_expiring(&expected);
    let (_, now_body) = http_get(svc.port, &format!("/v1/users/{}/unread", encode(&expiring.user_id))).unwrap();
    let now: UserView = serde_json::from_str(&now_body).unwrap();
    let unread_now = now.conversations.get(ttl_cid).map_or(0, |c| c.unread);
    assert_eq!(unread_now, 0, "{} in {ttl_cid} at the server's clock: {now_body}", expiring.user_id);
    let (cid, c) = marked.conversations.iter().find(|(_, c)| c.marked_unread).unwrap();
    let path = format!("/v1/users/{}/conversations/{}/unread{V3_DEV_NOW}", encode(&marked.user_id), encode(cid));
    let (_, body) = http_get(svc.port, &path).unwrap();
    assert!(body.contains(&format!(r#""unread":{},"mentions":{}"#, c.unread, c.mentions)), "{body}");
    let (code, body) = http_get(svc.port, "/v1/users/x/unread?now=yesterday").unwrap();
    assert!(code == 400 && body.contains("invalid_query"), "{code} {body}");
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    // verify compares at the service's clock too: an expiry field changed behind its back (its messages would never
    // expire) is found, and repaired.
    let key = format!("{}:u:{}", ns.name, expiring.user_id);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut conn =
            redis::Client::open(ns.redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let field = format!("e:{ttl_cid}");
        let _: i64 =
            redis::cmd("HSET").arg(&key).arg(field).arg("0 0 0 99999999:1:0").query_async(&mut conn).await.unwrap();
    });
    let out = ns.ok(&["verify", "--repair"]);
    assert!(out.contains("differing: 1") && out.contains("redis now"), "{out}");
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    let receipts = v3_dev_receipts();
    assert_receipts(svc.port, &receipts, 1);
    receipts_authorization_and_errors(svc.port, &receipts);
    svc.stop();
    let sample: Vec<&UserView> = expected.iter().step_by(97).collect();
    lose_redis_then_rebuild_at(&ns, &expected, &sample, V3_DEV_NOW);
    // The receipts come back with the rebuild too (the fold's memberships and own seqs, the fan-out's sent seqs).
    let api = ns.start(&["--roles", "api"]);
    assert_receipts(api.port, &receipts, 13);
    api.stop();
}

/// The bundled v3 dev set's receipts (14,056 messages), as JSON values.
pub(crate) fn v3_dev_receipts() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/v3-dev-receipts.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The bundled v4 dev set's receipts (14,056 messages, 4,827 of them replies, read by thread cursor), as JSON
/// values.
pub(crate) fn v4_dev_receipts() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/v4-dev-receipts.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Every `step`-th receipt over HTTP (service token) equals the file's.
pub(crate) fn assert_receipts(port: u16, receipts: &[serde_json::Value], step: usize) {
    let mut bad = Vec::new();
    for r in receipts.iter().step_by(step) {
        let (cid, seq) = (r["conversation_id"].as_str().unwrap(), r["seq"].as_u64().unwrap());
        let (code, body) =
            http_get(port, &format!("/v1/conversations/{}/messages/{seq}/receipts", encode(cid))).unwrap();
        let got: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if code != 200 || &got != r {
            bad.push(format!("{cid} {seq}: HTTP {code} {body}, expected {r}"));
        }
    }
    assert!(bad.is_empty(), "{} receipts differ, e.g. {:#?}", bad.len(), &bad[..bad.len().min(3)]);
}

/// A member's token reads, a non-member's is refused (403), no token is 401, a seq never sent or recalled is
/// 404, `?list=true` names as many readers as `read` says.
fn receipts_authorization_and_errors(port: u16, receipts: &[serde_json::Value]) {
    let r = receipts.iter().find(|r| r["read"].as_u64() > Some(1)).expect("a receipt with readers");
    let (cid, seq) = (r["conversation_id"].as_str().unwrap(), r["seq"].as_u64().unwrap());
    let path = |seq: u64| format!("/v1/conversations/{}/messages/{seq}/receipts", encode(cid));
    let (code, body) = http_get(port, &format!("{}?list=true", path(seq))).unwrap();
    let got: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (code, got["readers"].as_array().map(Vec::len)),
        (200, r["read"].as_u64().map(|n| n as usize)),
        "{body}"
    );
    let reader = got["readers"][0].as_str().unwrap();
    let (code, body) = http_get_as(port, &path(seq), Some(&token(reader, false))).unwrap();
    assert_eq!((code, serde_json::from_str::<serde_json::Value>(&body).unwrap()), (200, r.clone()));
    let (code, body) = http_get_as(port, &path(seq), Some(&token("not-a-member-anywhere", false))).unwrap();
    assert!(code == 403 && body.contains("forbidden"), "{code} {body}");
    assert_eq!(http_get_as(port, &path(seq), None).unwrap().0, 401);
    let (code, body) = http_get(port, &path(1 << 40)).unwrap();
    assert!(code == 404 && body.contains("not_found"), "never sent: {code} {body}");
    let (recalled_in, recalled) = recalled_seq();
    let recalled_path = format!("/v1/conversations/{}/messages/{recalled}/receipts", encode(&recalled_in));
    let (code, body) = http_get(port, &recalled_path).unwrap();
    assert!(code == 404 && body.contains("not_found"), "recalled {recalled_in} {recalled}: {code} {body}");
    let (code, _) = http_get(port, &path(0)).unwrap();
    assert_eq!(code, 400, "seq 0");
}

/// A (conversation, seq) the v3 dev set sends and then recalls.
fn recalled_seq() -> (String, u64) {
    let events = std::fs::read_to_string(v3_dev_events()).unwrap();
    let recall = events.lines().find(|l| l.contains(r#""type":"message.recalled""#)).expect("a recall");
    let recall: serde_json::Value = serde_json::from_str(recall).unwrap();
    (recall["conversation_id"].as_str().unwrap().to_owned(), recall["seq"].as_u64().unwrap())
}

/// A user with a conversation marked unread, and a user with unread in a conversation with a ttl at the set's
/// instant (all expired years later), with that conversation.
fn pick_marked_and_expiring(expected: &[UserView]) -> (&UserView, (&UserView, &String)) {
    let marked = expected.iter().find(|v| v.conversations.values().any(|c| c.marked_unread && c.unread > 0));
    let events = std::fs::read_to_string(v3_dev_events()).unwrap();
    let with_ttl: Vec<String> = events
        .lines()
        .filter(|l| l.contains("unread_ttl_days"))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["conversation_id"].as_str().map(Into::into))
        .collect();
    let expiring = expected.iter().find_map(|v| {
        v.conversations.iter().find(|(id, c)| c.unread > 0 && with_ttl.contains(id)).map(|(id, _)| (v, id))
    });
    (marked.expect("a marked conversation"), expiring.expect("unexpired unread with a ttl"))
}

/// With conversations of 20 members or more read-diffused (and back below 10), so that v3 goes through the
/// indexes too: their expiry buckets in Redis, the read script's shares at an instant, and replay.
#[test]
fn v3_sigkill_mid_flow_then_replay_and_verify_against_is_exact() {
    let Some(stack) = stack("v3_sigkill_mid_flow_then_replay_and_verify_against_is_exact") else { return };
    let (ns, flags) = (Ns::new(&stack, "v3kill"), ["--read-diffusion-threshold", "20"]);
    sigkill_mid_flow_then_replay(&ns, &v3_dev_events(), &v3_dev_expected(), V3_DEV_NOW, &flags);
}

/// The midnight push (issue 22): a connected user whose unread expires at midnight UTC gets the new counts at that
/// instant, with no event. The service's clock is moved (`UNREAD_CLOCK_OFFSET_SECONDS`, a test aid) so that its
/// midnight comes 80 s after the start: the hub reads the user ahead (60 s before) and sends at the midnight.
#[test]
fn the_stream_pushes_expiry_at_midnight_with_no_event() {
    let Some(stack) = stack("the_stream_pushes_expiry_at_midnight_with_no_event") else { return };
    let ns = Ns::new(&stack, "v3midnight");
    let midnight = unread::core::expiry::seconds_of("2030-01-03T00:00:00Z").unwrap();
    let offset = midnight - 80 - chrono::Utc::now().timestamp();
    let path = std::env::temp_dir().join(format!("{}-events.jsonl", ns.name));
    let at = r#""occurred_at":"2030-01-01T12:00:00Z","conversation_id":"ttl""#;
    let events = [
        format!(
            r#"{{"type":"conversation.created","event_id":"c",{at},"kind":"group","members":["m","s"],"unread_ttl_days":2}}"#
        ),
        format!(r#"{{"type":"message.sent","event_id":"s1",{at},"seq":1,"sender_id":"s","mentions":["m"]}}"#),
    ];
    std::fs::write(&path, events.join("\n") + "\n").unwrap();
    let svc = ns.start_with_env(&[], &[(unread::clock::OFFSET_VAR, &offset.to_string())]);
    ns.ok(&["produce", path.to_str().unwrap()]);
    ns.ok(&["lag", "--wait", "1m"]);
    let before_midnight = chrono::Utc::now().timestamp() + offset < midnight - 61;
    assert!(before_midnight, "the service took too long to start: the test proves nothing");
    let follower = crate::push::sse(svc.port, "m");
    let first = follower.next_message(std::time::Duration::from_secs(10)).expect("the state");
    assert_eq!(first["state"]["total_unread"], 1, "{first}");
    assert_eq!(first["state"]["total_mentions"], 1, "{first}");
    let change = follower.next_message(std::time::Duration::from_secs(100)).expect("a change at midnight");
    let pushed_at = chrono::Utc::now().timestamp() + offset;
    assert!(pushed_at >= midnight && pushed_at <= midnight + 5, "pushed at {pushed_at}, midnight is {midnight}");
    assert_eq!((change["type"].as_str(), &change["totals"]["total_unread"]), (Some("changes"), &0.into()), "{change}");
    let (_, body) = http_get(svc.port, "/v1/users/m/unread?now=2030-01-02T23:59:59Z").unwrap();
    assert!(body.contains(r#""total_unread":1"#), "a second before midnight: {body}");
    svc.stop();
    std::fs::remove_file(path).ok();
}
