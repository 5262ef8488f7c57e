//! Issue 23, Redis as a bounded cache: with `--projection-ttl`, a user's hash expires after that long with no
//! write or read; every read route refills such a user from the checkpoint, exactly; the fold writes a user whose
//! hash expired (or was refilled) whole at its next change rather than patch a hash that is not there; `verify`
//! counts expired users as evicted, not as differing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use unread::core::contract::UserView;
use unread::core::expiry::NEVER;
use unread::core::seqset::SeqSet;
use unread::projection::redis::{ReceiptWrite, Receipts, ReceiptsRefill, RedisProjection, SentWrite, UserWrite};
use unread::projection::ProjectionVersion;

use crate::support::*;

/// The ttl of the test (the floor of 5 minutes is lifted by the test aid).
const TTL: &str = "4s";
const SHORT_TTL_OK: (&str, &str) = ("UNREAD_TEST_SHORT_PROJECTION_TTL", "1");

/// How many keys of `kind` (`u` for user hashes, a glob: `r?` for every receipts key) the namespace holds. `SCAN`
/// walks the whole keyspace: 10,000 keys a call, so that a Redis holding other namespaces (benchmarks leave
/// theirs) is walked in a few round trips, well within the test's ttl.
fn keys_of(rt: &tokio::runtime::Runtime, ns: &Ns, kind: &str) -> usize {
    rt.block_on(async {
        let client = redis::Client::open(ns.redis_url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let (pattern, mut cursor, mut n) = (format!("{}:{kind}:*", ns.name), 0u64, 0);
        loop {
            let scan = redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(10_000).clone();
            let (next, keys): (u64, Vec<String>) = scan.query_async(&mut conn).await.unwrap();
            (cursor, n) = (next, n + keys.len());
            if cursor == 0 {
                return n;
            }
        }
    })
}

/// How many user hashes the namespace holds in Redis.
fn user_hashes(rt: &tokio::runtime::Runtime, ns: &Ns) -> usize {
    keys_of(rt, ns, "u")
}

/// Waits until Redis holds none of the namespace's keys of `kind` (all expired).
fn wait_until_gone(rt: &tokio::runtime::Runtime, ns: &Ns, kind: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while keys_of(rt, ns, kind) > 0 {
        assert!(Instant::now() < deadline, "{kind} keys still in Redis 60 s on");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until Redis holds none of the namespace's user hashes (all expired).
fn wait_until_evicted(rt: &tokio::runtime::Runtime, ns: &Ns) {
    wait_until_gone(rt, ns, "u")
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
    // In the expected file's shape (its events are of contract v1: no v4 field).
    got.iter().map(|v| shape_of(expected).project(v)).collect()
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
    assert!(metric_sum(svc.admin, "unread_reads_total{source=\"checkpoint\"}") >= expected.len() as f64);
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
        let whole_before = metric(svc.admin, "unread_projection_whole_rewrites_total");
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
            let got = unread::pipeline::Shape::V3.project(got); // `after` is in the v2 shape
            assert_eq!(Some(&got), want, "round {round}: the fold's write of a changed user");
        }
        let whole = metric(svc.admin, "unread_projection_whole_rewrites_total") - whole_before;
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
    let state =
        unread::pipeline::Shape::V3.project(&serde_json::from_value::<UserView>(first["state"].clone()).unwrap());
    assert_eq!(state, *other, "{first}");
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

#[test]
fn with_a_projection_ttl_idle_receipts_leave_redis_and_every_receipt_comes_back_exact() {
    let test = "with_a_projection_ttl_idle_receipts_leave_redis_and_every_receipt_comes_back_exact";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "rcache");
    let svc = ns.start_with_env(&["--projection-ttl", TTL], &[SHORT_TTL_OK]);
    ns.ok(&["produce", &v4_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    // v4: replies' receipts come back too (the fan-out's roots, the members' thread floors).
    let receipts = crate::v3::v4_dev_receipts();
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert!(keys_of(&rt, &ns, "r?") > 0, "the fold and the fan-out wrote receipts");
    wait_until_gone(&rt, &ns, "r?");
    // Every message of the set, each conversation refilled from the checkpoint at its first read.
    let before = metric_sum(svc.admin, "unread_reads_total{source=\"checkpoint\"}");
    crate::v3::assert_receipts(svc.port, &receipts, 1);
    let conversations: std::collections::BTreeSet<&str> =
        receipts.iter().map(|r| r["conversation_id"].as_str().unwrap()).collect();
    let refills = metric_sum(svc.admin, "unread_reads_total{source=\"checkpoint\"}") - before;
    assert_eq!(refills, conversations.len() as f64, "one refill per conversation, then reads from Redis");
    // A read sets the keys' expiry again: the conversation read last is complete in Redis.
    let last = receipts.last().unwrap()["conversation_id"].as_str().unwrap();
    let key = format!("{}:rm:{{#{last}}}", ns.name);
    let complete: i64 = rt.block_on(async {
        let mut conn =
            redis::Client::open(ns.redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await.unwrap()
    });
    assert_eq!(complete, 1, "{key}");
    // A conversation new to the fan-out: its first write marks the keys complete, and nothing is noted.
    let new = [
        r#"{"type":"conversation.created","event_id":"n#0","occurred_at":"2016-12-20T00:00:00Z","conversation_id":"new","kind":"group","members":["x","y"]}"#,
        r#"{"type":"message.sent","event_id":"n#1","occurred_at":"2016-12-20T00:00:00Z","conversation_id":"new","seq":1,"sender_id":"x","mentions":[]}"#,
    ];
    produce_lines(&ns, "new", new.join("\n") + "\n");
    ns.ok(&["lag", "--wait", "2m"]);
    let (complete, noted) = rt.block_on(async {
        let mut conn =
            redis::Client::open(ns.redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let exists = |kind: &str| redis::cmd("EXISTS").arg(format!("{}:{kind}:{{#new}}", ns.name)).clone();
        let complete: i64 = exists("rm").query_async(&mut conn).await.unwrap();
        (complete, exists("rw").query_async::<i64>(&mut conn).await.unwrap())
    });
    assert_eq!((complete, noted), (1, 0), "a new conversation's receipts: complete, nothing noted");
    let before = metric_sum(svc.admin, "unread_reads_total{source=\"checkpoint\"}");
    let (code, body) = http_get(svc.port, "/v1/conversations/new/messages/1/receipts").unwrap();
    assert!(code == 200 && body.contains(r#""read":0,"recipients":1"#), "{code} {body}");
    assert_eq!(metric_sum(svc.admin, "unread_reads_total{source=\"checkpoint\"}"), before, "read without a refill");
    svc.stop();
}

#[test]
fn a_refill_of_expired_receipts_keeps_what_was_written_since_they_expired() {
    let test = "a_refill_of_expired_receipts_keeps_what_was_written_since_they_expired";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "rrefill");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ttl = Some(Duration::from_secs(60));
    let p = rt.block_on(RedisProjection::connect(&ns.redis_url, &format!("{}:", ns.name))).unwrap().with_ttl(ttl);
    let seqs = |s: &[u64]| s.iter().copied().collect::<SeqSet>();
    let write = |user: &str, member: Option<(u64, u64)>, added: &[u64], events: i64| {
        let version = ProjectionVersion { generation: 1, user_events: events, user_deltas: 0 };
        let mut w = UserWrite::of_state(user, None, version);
        let (conversation_id, own_added, own_removed) = ("g".to_owned(), seqs(added), SeqSet::new());
        // v4: c read thread 3 up to its reply 5.
        let floors = if user == "c" { vec![(3, 5)] } else { Vec::new() };
        let member_changed = true;
        w.receipts = vec![ReceiptWrite { conversation_id, member, member_changed, own_added, own_removed, floors }];
        w
    };
    let read = |seq: u64| rt.block_on(p.read_receipts("g", seq, None, true)).unwrap();
    // The keys expired; then, before any read: b read up to 3, d left, c sent 4 (the fan-out wrote 1-5, 5 a reply
    // in the thread of 3), c read that thread up to 5.
    let replies = vec![(5, 3)];
    let sent = [SentWrite { conversation_id: "g".into(), ranges: "1-5".into(), new: false, replies, reaction_head: 0 }];
    rt.block_on(p.write_sent(&sent)).unwrap();
    let writes = [write("b", Some((0, 3)), &[], 1), write("d", None, &[], 1), write("c", Some((0, 4)), &[4], 1)];
    assert_eq!(rt.block_on(p.write(&writes)).unwrap().counts(), (3, 0));
    assert_eq!(read(3), Receipts::Cold, "no read answers from keys that are not complete");
    // A refill from a checkpoint that is older for b, d, the sent seqs and seq 4, and a stray entry e that neither
    // the checkpoint nor a write since the expiry holds.
    let mut conn = p.connection();
    let key = format!("{}:rj:{{#g}}", ns.name);
    let _: i64 = rt.block_on(redis::cmd("ZADD").arg(&key).arg(0).arg("e").query_async(&mut conn)).unwrap();
    let (a, b, c, d) = (("a".into(), 0, 3), ("b".into(), 0, 1), ("c".into(), 0, 0), ("d".into(), 0, 2));
    let senders = vec![(1, "a".into()), (2, "b".into()), (3, "a".into())];
    let (floors, replies) = (vec![("b".into(), 3, 5), ("c".into(), 3, 2)], vec![(5, 3)]);
    let refill = ReceiptsRefill { sent: "1-3".into(), members: vec![a, b, c, d], senders, floors, replies };
    assert!(rt.block_on(p.refill_receipts("g", &refill)).unwrap(), "the first refill writes");
    assert!(!rt.block_on(p.refill_receipts("g", &ReceiptsRefill::default())).unwrap(), "a second one does not");
    // Seq 3 (sent by a): recipients b and c, who both read it (b: its write since the expiry, not the checkpoint's
    // cursor 1).
    let found = |read: u64, recipients: u64, readers: &[&str]| Receipts::Found {
        read,
        recipients,
        readers: Some(readers.iter().map(|r| r.to_string()).collect()),
    };
    assert_eq!(read(3), found(2, 2, &["b", "c"]), "d left and e is gone, b's cursor is its write's");
    assert_eq!(read(4), found(0, 2, &[]), "sent 1-5 and c's seq 4 are the writes', not the checkpoint's");
    // Reply 5 (no sender kept): read by thread floor, b's from the checkpoint and c's written since (the
    // checkpoint's lower one does not lower it); a's cursor in the conversation does not count.
    assert_eq!(read(5), found(2, 3, &["b", "c"]), "a reply's readers are its thread's");
    // Complete now: a write is not noted, and every key expires with the others.
    assert_eq!(rt.block_on(p.write(&[write("a", Some((0, 4)), &[], 2)])).unwrap().counts(), (1, 0));
    assert_eq!(read(4), found(1, 2, &["a"]));
    for kind in ["rm", "rl", "rj", "rc", "ro", "rr", "rf", "rx"] {
        let key = format!("{}:{kind}:{{#g}}", ns.name);
        let pttl: i64 = rt.block_on(redis::cmd("PTTL").arg(&key).query_async(&mut conn)).unwrap();
        assert!((1..=60_000).contains(&pttl), "{key}: PTTL {pttl}");
    }
    let written: i64 =
        rt.block_on(redis::cmd("EXISTS").arg(format!("{}:rw:{{#g}}", ns.name)).query_async(&mut conn)).unwrap();
    assert_eq!(written, 0, "the notes went with the refill");
}

/// One step of [`a_refill_of_expired_receipts_is_exact_under_any_interleaving`].
#[derive(Debug, Clone)]
enum ReceiptsStep {
    /// User `.0` joins (join head, cursor) or leaves (`None`).
    Member(usize, Option<(u64, u64)>),
    /// Seq `.0` sent by user `.1`, or no longer a member's (`None`: a recall, or its sender left).
    Own(u64, Option<usize>),
    /// The fan-out's sent seqs: `1-n` (`0`: none); marked new (honoured until the first expiry: the conversation
    /// began with the case).
    Sent(u64, bool),
    /// The checkpoint catches up with what was written.
    Checkpoint,
    /// The keys expire (the checkpoint held everything written before: the ttl's floor).
    Expire,
    /// A cold read starts a refill: it reads the checkpoint as it is now.
    RefillRead,
    /// That refill writes.
    RefillWrite,
}

/// Users of [`a_refill_of_expired_receipts_is_exact_under_any_interleaving`].
const USERS: [&str; 4] = ["a", "b {x}", "c", "d"];

/// A random [`ReceiptsStep`].
fn receipts_step() -> impl Strategy<Value = ReceiptsStep> {
    let entry = proptest::option::of((0u64..3, 0u64..6));
    prop_oneof![
        3 => (0usize..4, entry).prop_map(|(u, e)| ReceiptsStep::Member(u, e)),
        2 => (1u64..6, proptest::option::of(0usize..4)).prop_map(|(s, u)| ReceiptsStep::Own(s, u)),
        1 => (0u64..6, any::<bool>()).prop_map(|(n, new)| ReceiptsStep::Sent(n, new)),
        1 => Just(ReceiptsStep::Checkpoint),
        1 => Just(ReceiptsStep::Expire),
        1 => Just(ReceiptsStep::RefillRead),
        1 => Just(ReceiptsStep::RefillWrite),
    ]
}

/// What a conversation's receipts hold: members → (join head, cursor), seq → sender, sent seqs.
type ReceiptsModel = (BTreeMap<String, (u64, u64)>, BTreeMap<u64, String>, String);

/// Conversation `g`'s receipts keys under `prefix`: complete, written, sent, joins, cursors, senders.
fn g_keys(prefix: &str) -> [String; 6] {
    ["rm", "rw", "rl", "rj", "rc", "ro"].map(|kind| format!("{prefix}{kind}:{{#g}}"))
}

/// What conversation `g`'s receipts keys hold, when they are complete.
fn complete_receipts(rt: &tokio::runtime::Runtime, p: &RedisProjection) -> Option<ReceiptsModel> {
    let [rm, _, rl, rj, rc, ro] = g_keys(p.prefix());
    let mut conn = p.connection();
    let range = |k: &str| redis::cmd("ZRANGE").arg(k).arg(0).arg(-1).arg("WITHSCORES").clone();
    let (complete, joins, cursors, senders, sent) = rt.block_on(async {
        let complete: bool = redis::cmd("EXISTS").arg(&rm).query_async(&mut conn).await.unwrap();
        let joins: Vec<(String, u64)> = range(&rj).query_async(&mut conn).await.unwrap();
        let cursors: Vec<(String, u64)> = range(&rc).query_async(&mut conn).await.unwrap();
        let senders: Vec<(u64, String)> = redis::cmd("HGETALL").arg(&ro).query_async(&mut conn).await.unwrap();
        let sent: Option<String> = redis::cmd("GET").arg(&rl).query_async(&mut conn).await.unwrap();
        (complete, joins, cursors.into_iter().collect::<BTreeMap<_, _>>(), senders, sent)
    });
    let cursor = |u: &String| cursors.get(u).copied().unwrap_or(u64::MAX);
    let members = joins.into_iter().map(|(u, j)| (u.clone(), (j, cursor(&u)))).collect();
    complete.then(|| (members, senders.into_iter().collect(), sent.unwrap_or_default()))
}

/// Conversation `g`'s receipts keys expire (all six at once).
fn expire_receipts(rt: &tokio::runtime::Runtime, p: &RedisProjection) {
    let mut conn = p.connection();
    let _: i64 = rt.block_on(redis::cmd("DEL").arg(&g_keys(p.prefix())).query_async(&mut conn)).unwrap();
}

/// One user's receipts write in conversation `g` at a version above every earlier one: its membership (`None`:
/// unchanged), the seqs it sent and no longer sent.
fn receipts_write(user: &str, member: Option<Option<(u64, u64)>>, own: [&[u64]; 2], n: i64) -> UserWrite {
    let version = ProjectionVersion { generation: 1, user_events: n, user_deltas: 0 };
    let mut w = UserWrite::of_state(user, None, version);
    let (member_changed, member) = (member.is_some(), member.flatten());
    let [own_added, own_removed] = own.map(|seqs| seqs.iter().copied().collect::<SeqSet>());
    let conversation_id = "g".to_owned();
    let floors = Vec::new();
    w.receipts = vec![ReceiptWrite { conversation_id, member, member_changed, own_added, own_removed, floors }];
    w
}

/// Writes and expiries and refills of one conversation's receipts in any order (`--projection-ttl`): whenever the
/// keys are complete they hold exactly what was written last, item by item.
#[test]
fn a_refill_of_expired_receipts_is_exact_under_any_interleaving() {
    let test = "a_refill_of_expired_receipts_is_exact_under_any_interleaving";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "rprop");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ttl = Some(Duration::from_secs(600));
    let p = rt.block_on(RedisProjection::connect(&ns.redis_url, &format!("{}:", ns.name))).unwrap().with_ttl(ttl);
    let config = ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() };
    let events = std::cell::Cell::new(0);
    let write = |w: UserWrite| assert_eq!(rt.block_on(p.write(&[w])).unwrap().counts(), (1, 0));
    let next = || {
        events.set(events.get() + 1);
        events.get()
    };
    TestRunner::new(config)
        .run(&proptest::collection::vec(receipts_step(), 1..30), |steps| {
            expire_receipts(&rt, &p);
            let (mut truth, mut checkpoint, mut pending): (ReceiptsModel, ReceiptsModel, Option<ReceiptsModel>) =
                Default::default();
            let mut expired = false;
            for step in steps.iter().chain(&[ReceiptsStep::RefillRead, ReceiptsStep::RefillWrite]) {
                match step.clone() {
                    ReceiptsStep::Member(u, e) => {
                        let _ = match e {
                            Some(e) => truth.0.insert(USERS[u].to_owned(), e),
                            None => truth.0.remove(USERS[u]),
                        };
                        write(receipts_write(USERS[u], Some(e), [&[], &[]], next()));
                    }
                    ReceiptsStep::Own(seq, Some(u)) => {
                        truth.1.insert(seq, USERS[u].to_owned());
                        write(receipts_write(USERS[u], None, [&[seq], &[]], next()));
                    }
                    ReceiptsStep::Own(seq, None) => {
                        let sender = truth.1.remove(&seq).unwrap_or_else(|| USERS[0].to_owned());
                        write(receipts_write(&sender, None, [&[], &[seq]], next()));
                    }
                    ReceiptsStep::Sent(n, new) => {
                        truth.2 = if n == 0 { String::new() } else { format!("1-{n}") };
                        let (ranges, new) = (truth.2.clone(), new && !expired);
                        let sent = [SentWrite {
                            conversation_id: "g".into(),
                            ranges,
                            new,
                            replies: Vec::new(),
                            reaction_head: 0,
                        }];
                        rt.block_on(p.write_sent(&sent)).unwrap();
                    }
                    ReceiptsStep::Checkpoint => checkpoint = truth.clone(),
                    ReceiptsStep::Expire => {
                        expire_receipts(&rt, &p);
                        expired = true;
                        checkpoint = truth.clone(); // the ttl's floor: it held everything written before
                        pending = None; // a refill takes less than the ttl
                    }
                    ReceiptsStep::RefillRead => pending = Some(checkpoint.clone()),
                    ReceiptsStep::RefillWrite => {
                        if let Some((members, senders, sent)) = pending.take() {
                            let members = members.into_iter().map(|(u, (j, c))| (u, j, c)).collect();
                            let senders = senders.into_iter().collect();
                            let refill = ReceiptsRefill { sent, members, senders, ..Default::default() };
                            rt.block_on(p.refill_receipts("g", &refill)).unwrap();
                        }
                    }
                }
                if let Some(got) = complete_receipts(&rt, &p) {
                    prop_assert_eq!(&got, &truth, "complete keys after {:?}", step);
                }
            }
            prop_assert!(complete_receipts(&rt, &p).is_some(), "the last refill completed the keys");
            Ok(())
        })
        .unwrap();
}
