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
    // Without a read_seq: every reaction so far, at the conversation's highest reaction_seq (Redis's `rh:`).
    let (code, body) = http_post_as(svc.port, &path, Some(&token("t", true)), &serde_json::json!({})).unwrap();
    assert_eq!(code, 202, "{body}");
    let v = wait_for_view(svc.port, &reacted.user_id, |v| v.conversations[rcid].reactions == 0);
    assert_eq!(v.total_reactions, reacted.total_reactions - reacted.conversations[rcid].reactions);
    // It read up to the head, not beyond: a reaction after it counts again.
    let head = reaction_head(&ns, rcid);
    let seq = sent_by(&reacted.user_id, rcid);
    let added = serde_json::json!({"type": "reaction.added", "event_id": "it-after-head", "conversation_id": rcid,
        "occurred_at": "2026-01-01T00:00:00Z", "reaction_seq": head + 1, "seq": seq, "user_id": "it-reactor",
        "reaction": "🎉"});
    produce_lines(&ns, "reaction-after-head", format!("{added}\n"));
    let v = wait_for_view(svc.port, &reacted.user_id, |v| v.conversations[rcid].reactions == 1);
    assert_eq!(v.total_reactions, reacted.total_reactions - reacted.conversations[rcid].reactions + 1);
    let max = serde_json::json!({"read_seq": 1u64 << 53});
    let bad_root = format!("/v1/users/{}/conversations/{}/threads/0/read", encode(&follower.user_id), encode(cid));
    let (code, _) = http_post_as(svc.port, &bad_root, Some(&token("t", true)), &max).unwrap();
    assert_eq!(code, 400, "a thread root is 1 to 2^53");
    read_all_reads_the_threads(svc.port, &expected);
    svc.stop();
}

/// Conversation `conversation_id`'s highest `reaction_seq` as the fan-out wrote it to Redis (`rh:{#id}`).
fn reaction_head(ns: &Ns, conversation_id: &str) -> u64 {
    let key = format!("{}:rh:{{#{conversation_id}}}", ns.name);
    let mut conn = redis::Client::open(ns.redis_url.as_str()).unwrap().get_connection().unwrap();
    let head: Option<u64> = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    head.unwrap_or_else(|| panic!("{key} holds the reaction head"))
}

/// A main-timeline message `user_id` sent in `conversation_id` in the v4 dev set.
fn sent_by(user_id: &str, conversation_id: &str) -> u64 {
    let events = std::fs::read_to_string(v4_dev_events()).unwrap();
    let sent = events.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find(|e| {
        e["type"] == "message.sent"
            && e["sender_id"] == user_id
            && e["conversation_id"] == conversation_id
            && e.get("thread_root").is_none()
    });
    sent.and_then(|e| e["seq"].as_u64()).expect("a message of the user's there")
}

/// Pages through a user's threads (`GET …/threads`), `limit` at a time: every thread of the view at the instant,
/// each once, conversations by id and in each the newest root first.
fn all_thread_pages(port: u16, user_id: &str, limit: usize, now: &str) -> Vec<(String, u64, u64, u64)> {
    let (mut after, mut seen) = (String::new(), Vec::new());
    loop {
        let path = format!("/v1/users/{}/threads?limit={limit}{after}{now}", encode(user_id));
        let (code, body) = http_get(port, &path).unwrap();
        assert_eq!(code, 200, "{path}: {body}");
        let page: serde_json::Value = serde_json::from_str(&body).unwrap();
        let threads = page["threads"].as_array().unwrap();
        assert!(threads.len() <= limit, "{body}");
        for t in threads {
            let (cid, root) = (t["conversation_id"].as_str().unwrap().to_owned(), t["root"].as_u64().unwrap());
            seen.push((cid, root, t["unread"].as_u64().unwrap(), t["mentions"].as_u64().unwrap()));
        }
        match page["next"].as_str() {
            Some(next) => after = format!("&after={}", encode(next)),
            None => return seen,
        }
    }
}

/// `GET …/threads` lists the expected threads of the users with the most, paged; bad queries are 400. Then
/// read-all (`POST …/read-all`) reads a user's threads too: `unread_threads` and `thread_mentions` go to 0.
fn read_all_reads_the_threads(port: u16, expected: &[UserView]) {
    let mut busiest: Vec<&UserView> =
        expected.iter().filter(|v| v.threads.values().map(|t| t.len()).sum::<usize>() > 2).collect();
    busiest.sort_by_key(|v| std::cmp::Reverse(v.threads.values().map(|t| t.len()).sum::<usize>()));
    assert!(busiest.len() >= 3, "users with several threads: {}", busiest.len());
    for v in busiest.iter().take(3) {
        let mut want: Vec<(String, u64, u64, u64)> = Vec::new();
        for (cid, threads) in &v.threads {
            want.extend(threads.iter().rev().map(|(root, t)| (cid.clone(), *root, t.unread, t.mentions)));
        }
        let now = V3_DEV_NOW.replacen('?', "&", 1);
        assert_eq!(all_thread_pages(port, &v.user_id, 2, &now), want, "{}", v.user_id);
        assert_eq!(all_thread_pages(port, &v.user_id, 1000, &now), want, "{}", v.user_id);
    }
    let base = format!("/v1/users/{}/threads", encode(&busiest[0].user_id));
    for bad in ["?limit=0", "?limit=1001", "?after=x"] {
        let (code, body) = http_get(port, &format!("{base}{bad}")).unwrap();
        assert_eq!(code, 400, "{bad}: {body}");
    }
    // Read-all at the server's clock: a user with followed threads unread now.
    let now_view = |user_id: &str| {
        let (_, body) = http_get(port, &format!("/v1/users/{}/unread", encode(user_id))).unwrap();
        serde_json::from_str::<UserView>(&body).unwrap()
    };
    let reader = busiest.iter().map(|v| now_view(&v.user_id)).find(|v| v.unread_threads > 0);
    let reader = reader.or_else(|| expected.iter().map(|v| now_view(&v.user_id)).find(|v| v.unread_threads > 0));
    let reader = reader.expect("a user with followed threads unread at the server's clock");
    let path = format!("/v1/users/{}/read-all", encode(&reader.user_id));
    let (code, body) = http_post_as(port, &path, Some(&token("t", true)), &serde_json::json!({})).unwrap();
    assert_eq!(code, 202, "{body}");
    let until = Instant::now() + Duration::from_secs(60);
    while now_view(&reader.user_id).unread_threads > 0 {
        assert!(Instant::now() < until, "read-all left threads unread: {:?}", now_view(&reader.user_id).threads);
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = now_view(&reader.user_id);
    let muted_mentions: u64 = (after.threads.iter())
        .filter(|(cid, _)| after.conversations.get(*cid).is_some_and(|c| c.muted))
        .flat_map(|(_, t)| t.values().map(|t| t.mentions))
        .sum();
    assert_eq!((after.total_unread, after.thread_mentions), (0, muted_mentions), "{:?}", after.threads);
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
    sigkill_mid_flow_then_replay_keeps_reply_rows(
        "v4_sigkill_mid_flow_then_replay_and_verify_against_is_exact_read_diffused",
        "v4kill",
        &["--read-diffusion-threshold", "20"],
    );
}

/// Write-diffused, the dev set's channels (64 members or more) send their replies once per fold partition too.
#[test]
fn v4_sigkill_mid_flow_then_replay_and_verify_against_is_exact_write_diffused() {
    sigkill_mid_flow_then_replay_keeps_reply_rows(
        "v4_sigkill_mid_flow_then_replay_and_verify_against_is_exact_write_diffused",
        "v4killw",
        &[],
    );
}

/// The v4 full set through the service, when `../shared/datasets/ubuntu-irc/` is next to this checkout (1,291,651
/// real events; the dev set's tests cover the same paths on 46,902): SIGKILLed while it folds, read-diffused from 64
/// members (about 190 of its 12,182 conversations reach that), started again; then every one of its 25,360 users at
/// the set's instant and every 10th of its 270,400 receipts over HTTP equal the files, and a replay and `verify
/// --against` it find nothing differing.
#[test]
fn v4_full_set_through_the_service_after_a_sigkill_read_diffused_when_present() {
    let name = "v4_full_set_through_the_service_after_a_sigkill_read_diffused_when_present";
    let (Some(events), Some(expected), Some(receipts)) = (
        shared_dataset("v4-events.jsonl.gz"),
        shared_dataset("v4-expected.jsonl.gz"),
        shared_dataset("v4-receipts.jsonl.gz"),
    ) else {
        println!("SKIPPED {name}: ../shared/datasets/ubuntu-irc/ is absent");
        return;
    };
    let Some(stack) = stack(name) else { return };
    let ns = Ns::new(&stack, "v4full");
    let expected = parse_views(&read_expected(expected.to_str().unwrap()));
    assert_eq!(expected.len(), 25_360);
    let now = "?now=2011-02-25T12:00:00Z";
    sigkill_mid_flow_then_replay(&ns, events.to_str().unwrap(), &expected, now, &["--read-diffusion-threshold", "64"]);
    let receipts = read_expected(receipts.to_str().unwrap());
    let receipts: Vec<serde_json::Value> = receipts.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(receipts.len(), 270_400);
    let api = ns.start(&["--roles", "api"]);
    crate::v3::assert_receipts(api.port, &receipts, 10);
    api.stop();
}

fn sigkill_mid_flow_then_replay_keeps_reply_rows(test: &str, ns: &str, flags: &[&str]) {
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, ns);
    sigkill_mid_flow_then_replay(&ns, &v4_dev_events(), &v4_dev_expected(), V3_DEV_NOW, flags);
    // The replies came once per fold partition, and each partition's checkpoint keeps them in rows of their own, a
    // chunk of seqs each.
    let rows = tokio::runtime::Runtime::new().unwrap().block_on(async {
        crate::support::migrated_store(&stack.database_url, &ns.name).await.replies(None).await.unwrap()
    });
    assert!(rows.len() > 3, "{} rows of replies", rows.len());
    for row in rows {
        let replies = unread::state::codec::decode_replies(&row.state).unwrap();
        assert!(!replies.is_empty(), "{}: an empty row", row.conversation_id);
        assert!(replies.iter().all(|r| r.seq / unread::core::threads::CHUNK == row.chunk as u64), "its chunk's");
    }
}

/// In a write-diffused conversation of [`unread::core::hybrid::DEFAULT_SHARED_FROM`] members or more, a batch's
/// replies and reactions go once, in a delta for every member, not in each member's delta; the fold gives them to
/// the members with a stake (the root's and the message's sender, the replier) and every count is what a delta per
/// member gives.
#[test]
fn a_large_conversations_replies_and_reactions_go_once_for_every_member_with_the_same_counts() {
    use unread::core::contract::{decode, Event};
    use unread::core::delta::DeltaOp;
    use unread::core::fanout::FanOut;
    use unread::core::hybrid::{Diffusion, DEFAULT_SHARED_FROM};
    let at = r#""occurred_at":"2024-01-01T00:00:00Z","conversation_id":"big""#;
    let members: Vec<String> = (0..DEFAULT_SHARED_FROM).map(|i| format!(r#""m-{i}""#)).collect();
    let lines = [
        format!(
            r#"{{"type":"conversation.created","event_id":"c",{at},"kind":"channel","members":[{}]}}"#,
            members.join(",")
        ),
        format!(r#"{{"type":"message.sent","event_id":"1",{at},"seq":1,"sender_id":"m-0","mentions":[]}}"#),
        format!(
            r#"{{"type":"message.sent","event_id":"2",{at},"seq":2,"sender_id":"m-1","mentions":[],"thread_root":1}}"#
        ),
        format!(
            r#"{{"type":"reaction.added","event_id":"3",{at},"reaction_seq":1,"seq":1,"user_id":"m-2","reaction":"+1"}}"#
        ),
    ];
    let events: Vec<_> = lines
        .iter()
        .map(|l| match decode(l.as_bytes()).unwrap() {
            Event::Conversation(c) => c,
            Event::User(u) => panic!("{u:?}"),
        })
        .collect();
    let threads_or_reactions = |op: &DeltaOp| {
        matches!(op, DeltaOp::Reactions { .. })
            || matches!(op, DeltaOp::Messages { threads, .. } if !threads.is_empty())
    };
    // The members joined in an earlier batch: in this one, m-9 has no marks.
    let mut fanout = FanOut::new();
    fanout.process_batch(&events[..1]);
    let (deltas, _) = fanout.process_batch(&events[1..]);
    let bystander = deltas.iter().find(|d| d.user_id == "m-9").expect("a member without marks");
    assert!(!bystander.ops.iter().any(threads_or_reactions), "{bystander:?}");
    let for_members: Vec<_> = deltas.iter().filter(|d| d.is_for_members()).collect();
    assert_eq!(for_members.len(), 1, "{deltas:?}");
    assert!(for_members[0].ops.iter().filter(|op| threads_or_reactions(op)).count() == 2, "{for_members:?}");
    let mut fanout = FanOut::with_diffusion(Diffusion::OFF.with_shared_from(usize::MAX));
    fanout.process_batch(&events[..1]);
    let (per_member, _) = fanout.process_batch(&events[1..]);
    assert!(per_member.iter().all(|d| !d.is_for_members()) && per_member.len() == DEFAULT_SHARED_FROM);
    assert!(per_member.iter().all(|d| d.ops.iter().filter(|op| threads_or_reactions(op)).count() == 2));
    let text = lines.join("\n");
    let (shared, _) = fold_text(&text, Diffusion::OFF, 1);
    let (apart, _) = fold_text(&text, Diffusion::OFF.with_shared_from(usize::MAX), 1);
    assert_same_views(&shared, &apart);
    let m0 = shared.iter().find(|v| v.user_id == "m-0").unwrap();
    assert_eq!((m0.unread_threads, m0.total_reactions), (1, 1), "the root's sender follows its thread: {m0:?}");
    let m9 = shared.iter().find(|v| v.user_id == "m-9").unwrap();
    assert_eq!((m9.unread_threads, m9.total_unread), (0, 1), "{m9:?}");
}
