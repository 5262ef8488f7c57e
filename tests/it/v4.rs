//! Contract v4 through the service (issue 46): threads, reactions, teams and the first unread of the v4 dev set
//! over HTTP at the set's instant, after Redis is lost and rebuilt, after SIGKILLs and replayed, read-diffused;
//! and the write gateway's thread and reaction routes.

use std::time::{Duration, Instant};

use unread::core::contract::UserView;

use crate::support::*;

#[test]
fn v4_dev_set_end_to_end_at_its_instant_then_redis_lost_and_rebuilt_then_thread_writes() {
    let Some(stack) = stack("v4_dev_set_end_to_end_at_its_instant_then_redis_lost_and_rebuilt_then_thread_writes")
    else {
        return;
    };
    let ns = Ns::new(&stack, "v4e2e");
    let expected = v4_dev_expected();
    let svc = ns.start(&[]);
    ns.ok(&["produce", &v4_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    assert_matches_at(svc.port, &expected, V3_DEV_NOW);
    // Receipts of replies count thread cursors; every other message's the conversation's.
    let receipts = crate::v3::v4_dev_receipts();
    crate::v3::assert_receipts(svc.port, &receipts, 1);
    assert_reply_readers_listed(svc.port, &receipts);
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    // The conversation route answers the conversation's first unread and reactions as the user's read does.
    let reacted = expected.iter().find(|v| v.total_reactions > 0).expect("a user with reactions");
    let (cid, c) = reacted.conversations.iter().find(|(_, c)| c.reactions > 0 && c.first_unread.is_some()).unwrap();
    let path = format!("/v1/users/{}/conversations/{}/unread{V3_DEV_NOW}", encode(&reacted.user_id), encode(cid));
    let (code, body) = http_get(svc.port, &path).unwrap();
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (code, answer["first_unread"].as_u64(), answer["reactions"].as_u64()),
        (200, c.first_unread, Some(c.reactions)),
        "{body}"
    );
    svc.stop();
    let sample: Vec<&UserView> = expected.iter().step_by(97).collect();
    lose_redis_then_rebuild_at(&ns, &expected, &sample, V3_DEV_NOW);
    let api = ns.start(&["--roles", "api"]);
    crate::v3::assert_receipts(api.port, &receipts, 5);
    api.stop();
    // The gateway: unfollowing a thread takes it out of the user's threads and totals; marking a conversation's
    // reactions seen zeroes its reactions.
    let svc = ns.start(&[]);
    let follower = expected.iter().find(|v| v.unread_threads > 0).expect("a user with a followed thread");
    let (cid, threads) = follower.threads.iter().next().unwrap();
    let root = *threads.keys().next().unwrap();
    let path = format!("/v1/users/{}/conversations/{}/threads/{root}/follow", encode(&follower.user_id), encode(cid));
    let (code, body) = http_post_as(svc.port, &path, Some(&token("t", true)), &serde_json::json!({"followed": false}))
        .expect("the API answers");
    assert_eq!(code, 202, "{body}");
    let gone = |v: &UserView| v.threads.get(cid).is_none_or(|t| !t.contains_key(&root));
    let v = wait_for_view(svc.port, &follower.user_id, gone);
    assert_eq!(v.unread_threads, follower.unread_threads - u64::from(!follower.conversations[cid].muted));
    let reacted = expected.iter().find(|v| v.total_reactions > 0).expect("a user with reactions");
    let (rcid, _) = reacted.conversations.iter().find(|(_, c)| c.reactions > 0).unwrap();
    let path = format!("/v1/users/{}/conversations/{}/reactions/read", encode(&reacted.user_id), encode(rcid));
    let max = serde_json::json!({"read_seq": 1u64 << 53});
    let (code, body) = http_post_as(svc.port, &path, Some(&token("t", true)), &max).expect("the API answers");
    assert_eq!(code, 202, "{body}");
    let v = wait_for_view(svc.port, &reacted.user_id, |v| v.conversations[rcid].reactions == 0);
    assert_eq!(v.total_reactions, reacted.total_reactions - reacted.conversations[rcid].reactions);
    let (code, _) = http_post_as(svc.port, &path, Some(&token("t", true)), &serde_json::json!({})).unwrap();
    assert_eq!(code, 400, "read_seq is required");
    let bad_root = format!("/v1/users/{}/conversations/{}/threads/0/read", encode(&follower.user_id), encode(cid));
    let (code, _) = http_post_as(svc.port, &bad_root, Some(&token("t", true)), &max).unwrap();
    assert_eq!(code, 400, "a thread root is 1 to 2^53");
    svc.stop();
}

/// `?list=true` on messages sent with a `thread_root` (replies, but for a root never sent) names as many readers as
/// `read` counts.
fn assert_reply_readers_listed(port: u16, receipts: &[serde_json::Value]) {
    let events = std::fs::read_to_string(v4_dev_events()).unwrap();
    let replies: std::collections::HashSet<(String, u64)> = events
        .lines()
        .filter(|l| l.contains("thread_root"))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "message.sent")
        .map(|e| (e["conversation_id"].as_str().unwrap().to_owned(), e["seq"].as_u64().unwrap()))
        .collect();
    let is_reply = |r: &&serde_json::Value| {
        replies.contains(&(r["conversation_id"].as_str().unwrap().to_owned(), r["seq"].as_u64().unwrap()))
    };
    let read: Vec<&serde_json::Value> = (receipts.iter().filter(is_reply))
        .filter(|r| r["read"].as_u64() > Some(0) && r["recipients"].as_u64() < Some(200))
        .collect();
    let mut checked = 0;
    for r in read.iter().step_by(53) {
        let (cid, seq) = (r["conversation_id"].as_str().unwrap(), r["seq"].as_u64().unwrap());
        let path = format!("/v1/conversations/{}/messages/{seq}/receipts?list=true", encode(cid));
        let (code, body) = http_get(port, &path).unwrap();
        let got: serde_json::Value = serde_json::from_str(&body).unwrap();
        let named = got["readers"].as_array().map(Vec::len);
        assert_eq!((code, named), (200, r["read"].as_u64().map(|n| n as usize)), "{cid} {seq}: {body}");
        checked += 1;
    }
    assert!(checked > 10, "{checked} receipts listed");
}

/// The user's view at the set's instant, once `done` holds (at most 60 s).
fn wait_for_view(port: u16, user_id: &str, done: impl Fn(&UserView) -> bool) -> UserView {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = http_get(port, &format!("/v1/users/{}/unread{V3_DEV_NOW}", encode(user_id))).unwrap();
        let view: UserView = serde_json::from_str(&body).unwrap();
        if done(&view) {
            return view;
        }
        assert!(Instant::now() < until, "not done within 60 s: {body}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGKILLed while folding the v4 dev set read-diffused from 20 members (threads and reactions go to every member,
/// the index's first unread comes from the read script), then replayed and verified against.
#[test]
fn v4_sigkill_mid_flow_then_replay_and_verify_against_is_exact_read_diffused() {
    let Some(stack) = stack("v4_sigkill_mid_flow_then_replay_and_verify_against_is_exact_read_diffused") else {
        return;
    };
    let (ns, flags) = (Ns::new(&stack, "v4kill"), ["--read-diffusion-threshold", "20"]);
    sigkill_mid_flow_then_replay(&ns, &v4_dev_events(), &v4_dev_expected(), V3_DEV_NOW, &flags);
}
