//! The service end to end against the real Kafka, Redis and PostgreSQL ([`crate::support::stack`]). Each test uses
//! its own namespace ([`crate::support::namespace::Ns`]: topic prefix, consumer group, database schema, Redis key
//! prefix), removed when it ends, so tests run in parallel and leave nothing behind.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::*;

/// Deletes the Redis keys under `prefix` with the library's own code; returns how many.
async fn delete_redis_prefix(url: &str, prefix: &str) -> usize {
    let redis = unread::projection::redis::RedisProjection::connect(url, "").await.unwrap();
    unread::namespace::delete_matching(&redis, &format!("{prefix}*")).await.unwrap()
}

#[test]
fn dev_set_end_to_end_is_exact_over_http() {
    let Some(stack) = stack("dev_set_end_to_end_is_exact_over_http") else { return };
    let ns = Ns::new(&stack, "e2e");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    // An unknown user is the zero state; a conversation answer agrees with the user's.
    let (code, body) = http_get(svc.port, "/v1/users/nobody%20here/unread").unwrap();
    assert_eq!(
        (code, body.as_str()),
        (
            200,
            r#"{"user_id":"nobody here","total_unread":0,"total_mentions":0,"unread_conversations":0,"conversations":{},"feed_unread":0,"broadcasts":{},"notifications":{},"total_notifications_unread":0,"total_notifications_unseen":0,"threads":{},"unread_threads":0,"thread_mentions":0,"total_reactions":0,"teams":{}}"#
        )
    );
    let (code, body) =
        http_get(svc.port, "/v1/users/%5B%5Bmandrix%5D%5D/conversations/ubuntu.2011-05-29_19/unread").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains(r#""member":true,"unread":169,"mentions":0,"muted":false"#), "{body}");
    // `unread inspect` shows the checkpointed state behind those counts.
    let user: serde_json::Value = serde_json::from_str(&ns.ok(&["inspect", "user", "[[mandrix]]"])).unwrap();
    let conv = &user["state"]["conversations"]["ubuntu.2011-05-29_19"];
    let unread: u64 =
        conv["unread"].as_array().unwrap().iter().map(|r| r[1].as_u64().unwrap() - r[0].as_u64().unwrap() + 1).sum();
    assert_eq!(unread, 169, "{user}");
    assert!(conv["joined_at"].as_u64().is_some(), "{user}");
    assert_eq!(user["projection"]["total_unread"], 169);
    assert!(
        user["lease_generation"].as_i64().unwrap() >= 1 && user["checkpointed_at"].as_str().unwrap().ends_with('Z')
    );
    let c: serde_json::Value =
        serde_json::from_str(&ns.ok(&["inspect", "conversation", "ubuntu.2011-05-29_19"])).unwrap();
    assert!(c["state"]["head"].as_u64().unwrap() > 169 && c["state"]["members"]["[[mandrix]]"].is_u64(), "{c}");
    let missing = ns.cmd(&["inspect", "user", "nobody here"]).output().unwrap();
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("no checkpointed state"));
    let metrics = http_get(svc.admin, "/metrics").unwrap().1;
    for family in [
        "unread_events_processed_total{topic=",
        r#"unread_flush_seconds_bucket{le="+Inf",stage="fold"}"#,
        r#"unread_flush_seconds_count{stage="fanout"}"#,
        r#"unread_checkpoint_transaction_seconds_count{stage="fold"}"#,
        r#"unread_partition_lag{stage="fold",topic="#,
        r#"unread_assigned_partitions{stage="fold"} 8"#,
        "unread_rebalances_total{stage=",
        r#"unread_consumer_pauses_total{stage="fanout"}"#,
        "unread_increments_total ",
    ] {
        assert!(metrics.contains(family), "/metrics lacks {family}:\n{metrics}");
    }
    svc.stop();
    ns.cleanup();
}

#[test]
fn sigkill_in_the_middle_then_restart_is_exact() {
    let Some(stack) = stack("sigkill_in_the_middle_then_restart_is_exact") else { return };
    let ns = Ns::new(&stack, "kill");
    // Three copies of the dev set, for more to process before the kill. The copies are not mere duplicates: the
    // second replays each conversation's history, so leaves and rejoins take effect again at the new head. The
    // expected state is the in-process pipeline's over the same three copies (the pipeline equals the reference
    // model on both datasets and on this input).
    let mut pipeline = unread::pipeline::Pipeline::new();
    produce_dev_copies(&ns, &mut pipeline, 3);
    let expected = pipeline.views();
    assert_ne!(expected, dev_expected(), "three copies differ from one (rejoins)");
    let initial = ns.total_lag();
    assert!(initial >= 3 * 16_194, "lag {initial}");
    let svc = ns.start(&["--flush-events", "2000"]);
    let at_kill = wait_for_progress(&ns, initial);
    svc.kill();
    assert!(at_kill > 0, "the service had already finished when killed; the test proves nothing");
    let svc = ns.start(&["--flush-interval-ms", "100"]); // the old spelling still works
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(svc.port, &expected);
    // The killed process wrote with its own shared producer, another id than its successor's: the successor
    // fenced it (aborting its open transaction) on taking the leases it left unreleased.
    let log = ns.log_of(svc.port);
    assert!(log.contains("the previous owner's producer is fenced"), "no fencing of the killed producer:\n{log}");
    svc.stop();
    ns.cleanup();
}

/// One transactional producer and one transaction for all of an instance's fan-out tasks (the default), for a
/// static member: SIGKILLed with deltas in flight and restarted with the same instance id, whose producer's
/// transactional id is the same (its initialization fences the previous incarnation and aborts its open
/// transaction, with no fencing of its own), ends exact. `--shared-producer`, the default now, is still accepted.
#[test]
fn shared_producer_sigkill_then_restart_is_exact() {
    let Some(stack) = stack("shared_producer_sigkill_then_restart_is_exact") else { return };
    let ns = Ns::new(&stack, "shared");
    let mut pipeline = unread::pipeline::Pipeline::new();
    produce_dev_copies(&ns, &mut pipeline, 3);
    let expected = pipeline.views();
    let initial = ns.total_lag();
    let flags = ["--shared-producer", "--group-instance-id", "it-shared", "--session-timeout", "6s"];
    let svc = ns.start(&[&flags[..], &["--flush-events", "2000"]].concat());
    let at_kill = wait_for_progress(&ns, initial);
    svc.kill();
    assert!(at_kill > 0, "the service had already finished when killed; the test proves nothing");
    let svc = ns.start(&flags);
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(svc.port, &expected);
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    let log = ns.log_of(svc.port);
    assert!(!log.contains("the previous owner's producer is fenced"), "its own id needs no fencing:\n{log}");
    svc.stop();
    ns.cleanup();
}

/// The instance's shared producer fenced under it while it runs (here by the test, as a successor does when it
/// takes a partition the instance left unreleased while cut off from its group): the tasks whose deltas meet the
/// fencing fail, start again after 1 s, the first creates a new producer under the same id, and the counts stay
/// exact.
#[test]
fn a_fenced_shared_producer_is_created_again_and_the_counts_stay_exact() {
    use rdkafka::producer::Producer;
    let Some(stack) = stack("a_fenced_shared_producer_is_created_again_and_the_counts_stay_exact") else { return };
    let ns = Ns::new(&stack, "refence");
    let svc = ns.start(&["--group-instance-id", "it-refence"]);
    let mut pipeline = unread::pipeline::Pipeline::new();
    produce_dev_copies(&ns, &mut pipeline, 1);
    ns.ok(&["lag", "--wait", "120"]);
    let id = format!("{}.fanout.it-refence", ns.name);
    let fencer = unread::kafka::transactional_producer(&stack.brokers, &id).unwrap();
    fencer.init_transactions(Duration::from_secs(30)).unwrap();
    drop(fencer);
    produce_dev_copies(&ns, &mut pipeline, 1);
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(svc.port, &pipeline.views());
    let log = ns.log_of(svc.port);
    assert!(log.contains("the shared producer was fenced; initializing a new one"), "no new producer:\n{log}");
    svc.stop();
    ns.cleanup();
}

#[test]
fn projection_lost_then_rebuilt_from_checkpoint_is_exact() {
    let Some(stack) = stack("projection_lost_then_rebuilt_from_checkpoint_is_exact") else { return };
    let ns = Ns::new(&stack, "rebuild");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "120"]);
    svc.stop(); // the API alone keeps serving from Redis
    let api = ns.start(&["--roles", "api"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let deleted = rt.block_on(delete_redis_prefix(&stack.redis_url, &format!("{}:", ns.name)));
    assert!(deleted >= 1565, "deleted {deleted} keys");
    // Meanwhile the API answers every user from the checkpoint (and refills the hash), never zeros.
    assert_exact(api.port);
    let deleted = rt.block_on(delete_redis_prefix(&stack.redis_url, &format!("{}:", ns.name)));
    assert!(deleted >= 1565, "deleted {deleted} refilled keys");
    let out = ns.ok(&["projection", "rebuild"]);
    assert!(out.contains("refused") && !out.contains(" 0 users written"), "{out}");
    assert_exact(api.port);
    // Rebuilding again from the same checkpoint changes nothing and is not refused (same version).
    ns.ok(&["projection", "rebuild"]);
    assert_exact(api.port);
    api.stop();
    ns.cleanup();
}

#[test]
fn user_events_produced_before_the_conversation_events_is_exact() {
    let Some(stack) = stack("user_events_produced_before_the_conversation_events_is_exact") else { return };
    let ns = Ns::new(&stack, "order");
    let all = std::fs::read_to_string(dev_events()).unwrap();
    let (user, conv): (Vec<&str>, Vec<&str>) =
        all.lines().partition(|l| l.contains(r#""type":"read.ack""#) || l.contains(r#""type":"conversation.muted""#));
    let dir = std::env::temp_dir();
    let (user_file, conv_file) =
        (dir.join(format!("{}-user.jsonl", ns.name)), dir.join(format!("{}-conv.jsonl", ns.name)));
    std::fs::write(&user_file, user.join("\n") + "\n").unwrap();
    std::fs::write(&conv_file, conv.join("\n") + "\n").unwrap();
    let svc = ns.start(&[]);
    ns.ok(&["produce", user_file.to_str().unwrap()]);
    ns.ok(&["lag", "--wait", "120"]); // every ack and mute folded before any message exists
    ns.ok(&["produce", conv_file.to_str().unwrap()]);
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    svc.stop();
    std::fs::remove_file(user_file).ok();
    std::fs::remove_file(conv_file).ok();
    ns.cleanup();
}

#[test]
fn a_service_whose_topics_do_not_exist_stops_at_once_naming_them() {
    let Some(stack) = stack("a_service_whose_topics_do_not_exist_stops_at_once_naming_them") else { return };
    let ns = Ns::new(&stack, "notopics");
    let started = Instant::now();
    let out = ns
        .cmd(&["run", "--roles", "fold", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env("UNREAD_TOPIC_PREFIX", format!("{}.missing.", ns.name))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(!out.status.success(), "{stderr}");
    let topics = format!("{0}.missing.unread.user-events, {0}.missing.unread.user-deltas", ns.name);
    assert!(last.starts_with("unread: ") && last.contains(&topics) && last.contains("unread topics create"), "{last}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
}

#[test]
fn api_reaches_every_id_and_rejects_bad_ones_with_json() {
    let Some(stack) = stack("api_reaches_every_id_and_rejects_bad_ones_with_json") else { return };
    let ns = Ns::new(&stack, "api");
    let long = "é".repeat(128); // 256 bytes
    let conv = format!("a/b %c {{d}} {long}");
    let conv = &conv[..conv.char_indices().take_while(|(i, _)| *i < 200).last().map_or(0, |(i, c)| i + c.len_utf8())];
    let users = ["a/b", "100%", "x y", "{brace}", &long];
    let mut lines = vec![format!(
        r#"{{"type":"conversation.created","event_id":"c","occurred_at":"2024-01-01T00:00:00Z","conversation_id":{},"kind":"group","members":{}}}"#,
        serde_json::to_string(conv).unwrap(),
        serde_json::to_string(&users).unwrap()
    )];
    lines.push(format!(
        r#"{{"type":"message.sent","event_id":"m","occurred_at":"2024-01-01T00:00:00Z","conversation_id":{},"seq":1,"sender_id":"z","mentions":["a/b"]}}"#,
        serde_json::to_string(conv).unwrap()
    ));
    let file = std::env::temp_dir().join(format!("{}-ids.jsonl", ns.name));
    std::fs::write(&file, lines.join("\n")).unwrap();
    let svc = ns.start(&[]);
    ns.ok(&["produce", file.to_str().unwrap()]);
    ns.ok(&["lag", "--wait", "60"]);
    for u in users {
        let (code, body) = http_get(svc.port, &format!("/v1/users/{}/unread", encode(u))).unwrap();
        assert_eq!(code, 200, "{u}: {body}");
        let v: unread::core::contract::UserView = serde_json::from_str(&body).unwrap();
        assert_eq!((v.user_id.as_str(), v.total_unread, v.conversations[conv].unread), (u, 1, 1), "{body}");
        let path = format!("/v1/users/{}/conversations/{}/unread", encode(u), encode(conv));
        let (code, body) = http_get(svc.port, &path).unwrap();
        assert!(code == 200 && body.contains(r#""member":true,"unread":1"#), "{u}: {code} {body}");
    }
    for (path, code, error) in [
        (format!("/v1/users/{}/unread", "x".repeat(257)), 400, "invalid_id"),
        ("/v1/users/a%00b/unread".to_string(), 400, "invalid_id"),
        ("/v1/users/%ZZ/unread".to_string(), 400, "invalid_path"),
        ("/v1/users/%FF%FE/unread".to_string(), 400, "invalid_path"),
        ("/v1/nothing".to_string(), 404, "not_found"),
    ] {
        let (got, body) = http_get(svc.port, &path).unwrap();
        assert_eq!(got, code, "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{path}: not JSON: {body}"));
        assert_eq!(v["error"]["code"], error, "{path}: {body}");
    }
    // A hash that does not decode is a 500 (a bug to report), not a 503 (an outage to wait out).
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut conn =
            redis::Client::open(stack.redis_url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let key = format!("{}:u:broken", ns.name);
        redis::cmd("HSET").arg(key).arg("_totals").arg("x y z").query_async::<()>(&mut conn).await.unwrap();
    });
    let (code, body) = http_get(svc.port, "/v1/users/broken/unread").unwrap();
    assert_eq!(code, 500, "{body}");
    assert!(body.contains(r#""code":"malformed""#), "{body}");
    svc.stop();
    std::fs::remove_file(file).ok();
    ns.cleanup();
}

#[test]
fn projection_guard_refuses_older_generations_and_dominated_positions() {
    use unread::core::contract::{ConversationView, UserView};
    use unread::projection::redis::{RedisProjection, UserWrite};
    let Some(stack) = stack("projection_guard_refuses_older_generations_and_dominated_positions") else { return };
    let prefix = format!("it_guard_{}:", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let p = RedisProjection::connect(&stack.redis_url, &prefix).await.unwrap();
        let view = |unread: u64| {
            let mut v = UserView { user_id: "u/1".into(), total_unread: unread, ..Default::default() };
            v.conversations.insert("c".into(), ConversationView { unread, ..Default::default() });
            v
        };
        let write = |unread: u64, version: &str| {
            UserWrite::replace(view(unread), Default::default(), Default::default(), version.parse().unwrap())
        };
        assert_eq!(p.write(&[write(5, "1 100 500")]).await.unwrap().counts(), (1, 0));
        assert_eq!(p.write(&[write(9, "1 150 480")]).await.unwrap().counts(), (1, 0), "not dominated: accepted");
        assert_eq!(p.write(&[write(1, "1 150 470")]).await.unwrap().counts(), (0, 1), "dominated: refused");
        assert_eq!(p.write(&[write(1, "1 90 400")]).await.unwrap().counts(), (0, 1), "dominated: refused");
        assert_eq!(p.write(&[write(9, "1 150 480")]).await.unwrap().counts(), (1, 0), "equal: accepted (idempotent)");
        assert_eq!(p.write(&[write(7, "2 10 10")]).await.unwrap().counts(), (1, 0), "newer generation: accepted");
        assert_eq!(
            p.write(&[write(1, "1 999 999")]).await.unwrap().counts(),
            (0, 1),
            "older generation (a zombie): refused"
        );
        assert_eq!(p.read("u/1").await.unwrap(), view(7));
        assert_eq!(p.version("u/1").await.unwrap().map(|v| v.to_string()).as_deref(), Some("2 10 10"));
        delete_redis_prefix(&stack.redis_url, &prefix).await;
    });
}

/// The write script sets a user's fields in chunks (the first with the version and totals, then 256 arguments
/// to a call): a user of 300 conversations, far more than one chunk holds, reads back whole, and a second write
/// with fewer conversations leaves exactly those.
#[test]
fn a_user_of_300_conversations_is_written_and_read_back_whole() {
    use unread::core::contract::{ConversationView, UserView};
    use unread::projection::redis::{RedisProjection, UserWrite};
    let Some(stack) = stack("a_user_of_300_conversations_is_written_and_read_back_whole") else { return };
    let prefix = format!("it_wide_{}:", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let p = RedisProjection::connect(&stack.redis_url, &prefix).await.unwrap();
        let view = |conversations: u64| {
            let mut v = UserView { user_id: "wide".into(), ..Default::default() };
            for c in 0..conversations {
                let (unread, mentions) = (c % 5, c % 2);
                v.conversations.insert(
                    format!("c{c}"),
                    ConversationView { unread, mentions, muted: c % 7 == 0, ..Default::default() },
                );
                if c % 7 != 0 {
                    v.total_unread += unread;
                    v.total_mentions += mentions;
                    v.unread_conversations += u64::from(unread > 0);
                }
            }
            v
        };
        let write = |conversations: u64, version: &str| {
            UserWrite::replace(view(conversations), Default::default(), Default::default(), version.parse().unwrap())
        };
        assert_eq!(p.write(&[write(300, "1 1 1")]).await.unwrap().counts(), (1, 0));
        assert_eq!(p.read("wide").await.unwrap(), view(300));
        assert_eq!(p.write(&[write(130, "1 2 2")]).await.unwrap().counts(), (1, 0));
        assert_eq!(p.read("wide").await.unwrap(), view(130));
        delete_redis_prefix(&stack.redis_url, &prefix).await;
    });
}

/// One call of the write script carries many users (`USERS_PER_CALL`): each is guarded on its own, and the users
/// written are announced in one change message per call, a line each, with one push version.
#[test]
fn one_write_call_guards_each_user_and_announces_those_written_once() {
    use futures::StreamExt;
    use unread::core::contract::{ConversationView, UserView};
    use unread::projection::redis::{RedisProjection, UserWrite, USERS_PER_CALL};
    let Some(stack) = stack("one_write_call_guards_each_user_and_announces_those_written_once") else { return };
    let prefix = format!("it_many_{}:", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let p = RedisProjection::connect(&stack.redis_url, &prefix).await.unwrap();
        let mut sub = redis::Client::open(stack.redis_url.as_str()).unwrap().get_async_pubsub().await.unwrap();
        sub.subscribe(unread::projection::changes_key(&prefix)).await.unwrap();
        let view = |user: usize, unread: u64| {
            let mut v = UserView { user_id: format!("u {user}"), total_unread: unread, ..Default::default() };
            let c = ConversationView { unread, ..Default::default() };
            v.conversations.insert(format!("c{}", user % 7), c);
            v
        };
        let write = |user: usize, unread: u64, version: &str| {
            UserWrite::replace(view(user, unread), Default::default(), Default::default(), version.parse().unwrap())
        };
        let users = 2 * USERS_PER_CALL + 7; // three calls
        let first: Vec<UserWrite> = (0..users).map(|u| write(u, u as u64, "1 100 100")).collect();
        assert_eq!(p.write(&first).await.unwrap().counts(), (users, 0));
        // Every third user's write is dominated (refused); the others move forward.
        let second: Vec<UserWrite> = (0..users)
            .map(|u| if u % 3 == 0 { write(u, 999, "1 90 90") } else { write(u, u as u64 + 1, "1 101 100") })
            .collect();
        let refused = users.div_ceil(3);
        assert_eq!(p.write(&second).await.unwrap().counts(), (users - refused, refused));
        for u in 0..users {
            let expected = view(u, if u % 3 == 0 { u as u64 } else { u as u64 + 1 });
            assert_eq!(p.read(&format!("u {u}")).await.unwrap(), expected, "user {u}");
        }
        // The announcements: one message per call that wrote anyone, a line per user written.
        let mut messages = sub.on_message();
        let mut announced = Vec::new();
        for _ in 0..6 {
            let m = tokio::time::timeout(Duration::from_secs(5), messages.next()).await.unwrap().unwrap();
            let payload: String = m.get_payload().unwrap();
            let lines: Vec<(String, String)> = payload
                .split('\n')
                .map(|l| l.split_once(' ').map(|(v, k)| (v.to_owned(), k.to_owned())).unwrap())
                .collect();
            assert!(lines.iter().all(|(v, _)| *v == lines[0].0), "one version per call: {payload}");
            announced.push(lines.into_iter().map(|(_, k)| k).collect::<Vec<_>>());
        }
        let key = |u: usize| unread::projection::user_key(&prefix, &format!("u {u}"));
        assert_eq!(announced[0], (0..USERS_PER_CALL).map(key).collect::<Vec<_>>());
        assert_eq!(announced[2].len(), 7);
        let second_round: Vec<String> = announced[3..].concat();
        assert_eq!(second_round, (0..users).filter(|u| u % 3 != 0).map(key).collect::<Vec<_>>());
        delete_redis_prefix(&stack.redis_url, &prefix).await;
    });
}

#[test]
fn a_checkpoint_from_an_older_lease_generation_is_fenced() {
    use unread::checkpoint::store::{Fenced, StoreError};
    use unread::checkpoint::Stage;
    let Some(stack) = stack("a_checkpoint_from_an_older_lease_generation_is_fenced") else { return };
    let schema = format!("it_fence_{}", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = migrated_store(&stack.database_url, &schema).await;
        let old = store.acquire(Stage::Fold, 3, "a").await.unwrap();
        let row = |v: u8| unread::checkpoint::store::Changes::states(vec![("u".to_string(), Some(vec![v]))]);
        store.commit(Stage::Fold, 3, old, &row(1), &[("t", 10)]).await.unwrap();
        let new = store.acquire(Stage::Fold, 3, "b").await.unwrap();
        assert_eq!(new, old + 1);
        let err = store.commit(Stage::Fold, 3, old, &row(2), &[("t", 5)]).await.unwrap_err();
        let fenced = Fenced { stage: Stage::Fold, partition: 3, ours: old, current: new };
        assert!(matches!(&err, StoreError::Fenced(f) if *f == fenced), "{err}");
        assert!(!err.is_transient(), "a fencing is never retried");
        assert_eq!(store.offset(Stage::Fold, "t", 3).await.unwrap(), Some(10), "the fenced commit wrote nothing");
        assert_eq!(store.states(Stage::Fold, Some(3)).await.unwrap()[0].state, vec![1]);
        store.commit(Stage::Fold, 3, new, &row(3), &[("t", 20)]).await.unwrap();
        assert!(
            store.check_lease(Stage::Fold, 3, old).await.is_err()
                && store.check_lease(Stage::Fold, 3, new).await.is_ok()
        );
        let pool = sqlx::PgPool::connect(&stack.database_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE"))).execute(&pool).await.unwrap();
    });
}

#[test]
fn two_instances_one_killed_one_paused_then_resumed_stay_exact() {
    let Some(stack) = stack("two_instances_one_killed_one_paused_then_resumed_stay_exact") else { return };
    let ns = Ns::new(&stack, "fence");
    let mut pipeline = unread::pipeline::Pipeline::new();
    produce_dev_copies(&ns, &mut pipeline, 2);
    let expected = pipeline.views();
    // Round 1: two members share the partitions; one is SIGKILLed once work has begun, the other takes over.
    let initial = ns.total_lag();
    let a = ns.start(&["--flush-events", "1000"]);
    let b = ns.start(&["--flush-events", "1000"]);
    wait_for_progress(&ns, initial);
    ns.wait_for_log(a.port, "fan-out task started", 60); // a holds fan-out leases, which must be fenced
    let (a_port, a_pid) = (a.port, a.child.id());
    a.kill();
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(b.port, &expected);
    // Round 2: a new member joins, gets half the partitions, is paused (SIGSTOP) with uncommitted work, its
    // partitions move back to b after the session timeout, more traffic arrives, then it resumes (SIGCONT):
    // its late writes are fenced in PostgreSQL and Redis.
    let c = ns.start(&["--flush-events", "1000", "--flush-interval", "2s"]);
    // Rebalanced: c owns some fan-out partitions, whose leases it will not release. Under load the rebalance can
    // take longer than a fixed sleep, and a c without them would leave b nothing of c's to fence.
    ns.wait_for_log(c.port, "fan-out task started", 60);
    produce_dev_copies(&ns, &mut pipeline, 1);
    let expected = pipeline.views();
    std::thread::sleep(Duration::from_millis(300));
    signal(c.child.id(), Signal::SIGSTOP);
    ns.ok(&["lag", "--wait", "120"]); // b took over c's partitions after the session timeout and caught up
    assert_matches(b.port, &expected);
    signal(c.child.id(), Signal::SIGCONT);
    std::thread::sleep(Duration::from_secs(5)); // c notices, tries to flush, is fenced, loses its partitions
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(b.port, &expected);
    let metrics = http_get(c.admin, "/metrics").unwrap().1;
    let fenced: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("unread_fenced_tasks_total "))
        .and_then(|n| n.parse().ok())
        .expect("metric present");
    assert!(fenced >= 1, "the resumed instance's late checkpoints were fenced:\n{metrics}");
    // c was out of the group when b took its leases unreleased: b fenced c's producer. a's, killed in round 1, was
    // fenced by whichever of b and c first took a's partitions after a's session expired.
    let fenced_by = |by: u16, pid: u32| {
        let needle = format!(":{pid} ");
        ns.log_of(by).lines().any(|l| l.contains("the previous owner's producer is fenced") && l.contains(&needle))
    };
    let logs = || format!("a:\n{}\nb:\n{}\nc:\n{}", ns.log_of(a_port), ns.log_of(b.port), ns.log_of(c.port));
    assert!(fenced_by(b.port, c.child.id()), "b did not fence c's producer:\n{}", logs());
    assert!(fenced_by(b.port, a_pid) || fenced_by(c.port, a_pid), "nobody fenced a's producer:\n{}", logs());
    c.stop();
    b.stop();
    ns.cleanup();
}

/// (topic, key, value, the error kind it must be dead-lettered with)
type PoisonRecord<'a> = (&'a str, Option<&'a str>, Option<Vec<u8>>, &'a str);

#[test]
fn poison_records_go_to_the_dead_letter_topic_and_valid_traffic_stays_exact() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let Some(stack) = stack("poison_records_go_to_the_dead_letter_topic_and_valid_traffic_stays_exact") else { return };
    let ns = Ns::new(&stack, "poison");
    let topics = unread::topology::Topics::new(&format!("{}.", ns.name));
    let (conv, user) = ("ubuntu.2004-11-15_03", "epod");
    let meta = r#""event_id":"p","occurred_at":"2024-01-01T00:00:00Z""#;
    let sent = |body: &str| format!(r#"{{"type":"message.sent",{meta},"conversation_id":"{conv}",{body}}}"#);
    let ack =
        |body: &str| format!(r#"{{"type":"read.ack",{meta},"user_id":"{user}","conversation_id":"{conv}",{body}}}"#);
    let c = topics.conversation_events.as_str();
    let u = topics.user_events.as_str();
    let d = topics.user_deltas.as_str();
    // Deltas that would take the conversation from its members' counts if applied; `other` is a member whose
    // partition (of 8, topology/topics.toml) is not epod's, so a record of both belongs to no partition.
    let left = |member: &str| format!(r#"{{"user_id":"{member}","conversation_id":"{conv}","ops":["Left"]}}"#);
    let partition = |member: &str| unread::kafka::partition_for_key(member.as_bytes(), 8);
    let other = ["jief", "hrdwrbob", "the_one", "bob2", "ogra"].into_iter().find(|m| partition(m) != partition(user));
    let strays = format!("[{},{}]", left(user), left(other.unwrap()));
    let big = format!(
        r#"{{"type":"member.joined",{meta},"conversation_id":"{conv}","user_id":"x","pad":"{}"}}"#,
        "x".repeat(10 << 20)
    );
    let bad_utf8 = [sent(r#""seq":999999,"sender_id":"a"#).as_bytes(), &[0xff, 0xfe], b"\"}"].concat();
    // (topic, key, value, expected kind); every value is keyed to a real conversation or user of the dev set, so a
    // record applied by mistake would change an expected user's counts.
    let cases: Vec<PoisonRecord> = vec![
        (c, Some(conv), Some(br#"{"type":"message.sent","event_id":"x"#.to_vec()), "invalid_json"),
        (c, Some(conv), Some(format!("{} xyz", sent(r#""seq":999999,"sender_id":"a""#)).into_bytes()), "invalid_json"),
        (c, Some(conv), Some(b"   ".to_vec()), "invalid_json"),
        (c, Some(conv), Some(sent(r#""seq":"999999","sender_id":"a""#).into_bytes()), "wrong_type"),
        (c, Some(conv), Some(sent(r#""seq":999999,"sender_id":null"#).into_bytes()), "wrong_type"),
        (c, Some(conv), Some(sent(r#""seq":1.5,"sender_id":"a""#).into_bytes()), "wrong_type"),
        (c, Some(conv), Some(sent(r#""seq":999999,"sender_id":"a","mentions":"epod""#).into_bytes()), "wrong_type"),
        (c, Some(conv), Some(sent(r#""seq":999999,"sender_id":"a","mention_all":"yes""#).into_bytes()), "wrong_type"),
        (c, Some(conv), Some(sent(r#""seq":999999,"sender_id":"a","countable":null"#).into_bytes()), "wrong_type"),
        (c, Some(conv), Some(sent(r#""seq":999999,"sender_id":"a""#).replace("message.sent", "message.edited").into_bytes()), "unknown_type"),
        (c, Some(conv), Some(sent(r#""seq":999999,"sender_id":"a""#).replace(r#""event_id":"p","#, "").into_bytes()), "missing_field"),
        (c, Some(conv), Some(b"{}".to_vec()), "missing_field"),
        (c, Some(conv), Some(big.into_bytes()), "too_large"),
        (c, Some(conv), Some(bad_utf8), "invalid_utf8"),
        (c, Some(conv), Some(format!(r#"{{"type":"member.joined",{meta},"conversation_id":"{conv}","user_id":"a\u0000b"}}"#).into_bytes()), "invalid_id"),
        (c, Some(conv), Some(format!(r#"{{"type":"member.left",{meta},"conversation_id":"{conv}","user_id":"epod\u0007"}}"#).into_bytes()), "invalid_id"),
        (c, Some(conv), Some(sent(&format!(r#""seq":999999,"sender_id":"{}""#, "s".repeat(257))).into_bytes()), "invalid_id"),
        (c, Some(conv), Some(format!(r#"{{"type":"member.left",{meta},"conversation_id":"","user_id":"epod"}}"#).into_bytes()), "invalid_id"),
        (c, Some(conv), Some(sent(r#""seq":0,"sender_id":"a""#).into_bytes()), "out_of_range"),
        (c, Some(conv), Some(sent(r#""seq":-1,"sender_id":"a""#).into_bytes()), "out_of_range"),
        (c, Some(conv), Some(sent(r#""seq":9007199254740993,"sender_id":"a""#).into_bytes()), "out_of_range"),
        (c, Some(conv), Some(sent(r#""seq":18446744073709551616,"sender_id":"a""#).into_bytes()), "out_of_range"),
        (c, Some(conv), Some(sent(r#""seq":999999,"seq":999998,"sender_id":"a""#).into_bytes()), "duplicate_field"),
        (c, Some("not-the-conversation"), Some(sent(r#""seq":999999,"sender_id":"a""#).into_bytes()), "key_mismatch"),
        (c, None, Some(sent(r#""seq":999999,"sender_id":"a""#).into_bytes()), "missing_key"),
        (c, Some(conv), Some(b"[1,2]".to_vec()), "not_an_object"),
        (c, Some(user), Some(ack(r#""read_seq":999999"#).into_bytes()), "wrong_topic"),
        (c, Some(conv), None, "no_value"),
        (c, Some(conv), Some(format!(r#"{{"type":"conversation.created",{meta},"conversation_id":"{conv}","kind":"forum","members":["epod"]}}"#).into_bytes()), "invalid_value"),
        (c, Some(conv), Some(sent(r#""seq":999999,"sender_id":"a""#).replace("2024-01-01T00:00:00Z", "yesterday").into_bytes()), "invalid_value"),
        (u, Some(user), Some(ack(r#""read_seq":9007199254740993"#).into_bytes()), "out_of_range"),
        (u, Some(user), Some(ack(r#""read_seq":-5"#).into_bytes()), "out_of_range"),
        (u, Some(user), Some(ack(r#""read_seq":1,"read_seq":999999"#).into_bytes()), "duplicate_field"),
        (u, Some("someone-else"), Some(ack(r#""read_seq":999999"#).into_bytes()), "key_mismatch"),
        (u, Some(user), Some(format!(r#"{{"type":"conversation.muted",{meta},"user_id":"{user}","conversation_id":"{conv}"}}"#).into_bytes()), "missing_field"),
        (u, Some(user), Some(format!(r#"{{"type":"conversation.muted",{meta},"user_id":"{user}","conversation_id":"{conv}","muted":"true"}}"#).into_bytes()), "wrong_type"),
        (u, Some(conv), Some(sent(r#""seq":999999,"sender_id":"a""#).into_bytes()), "wrong_topic"),
        (u, Some(user), Some(ack(r#""read_seq":999999"#).replace(r#""type":"read.ack""#, r#""type":7"#).into_bytes()), "wrong_type"),
        // Contract v2's types are dead-lettered the same way.
        (c, Some("system"), Some(format!(r#"{{"type":"broadcast.published",{meta},"broadcast_id":"system","seq":0}}"#).into_bytes()), "out_of_range"),
        (c, Some(user), Some(format!(r#"{{"type":"broadcast.read",{meta},"user_id":"{user}","broadcast_id":"system","read_seq":9}}"#).into_bytes()), "wrong_topic"),
        (u, Some(user), Some(format!(r#"{{"type":"notification.created",{meta},"user_id":"{user}","notification_id":"n1"}}"#).into_bytes()), "missing_field"),
        (u, Some(user), Some(format!(r#"{{"type":"notifications.read",{meta},"user_id":"{user}","category":""}}"#).into_bytes()), "invalid_id"),
        // Contract v3's bad values (issue 22): a ttl of 0, above 3650 or not an integer; from_seq with marked false, or 0.
        (c, Some(conv), Some(format!(r#"{{"type":"conversation.created",{meta},"conversation_id":"{conv}","kind":"group","unread_ttl_days":0}}"#).into_bytes()), "out_of_range"),
        (c, Some(conv), Some(format!(r#"{{"type":"conversation.created",{meta},"conversation_id":"{conv}","kind":"group","unread_ttl_days":3651}}"#).into_bytes()), "out_of_range"),
        (c, Some(conv), Some(format!(r#"{{"type":"conversation.created",{meta},"conversation_id":"{conv}","kind":"group","unread_ttl_days":7.5}}"#).into_bytes()), "wrong_type"),
        (u, Some(user), Some(format!(r#"{{"type":"conversation.marked_unread",{meta},"user_id":"{user}","conversation_id":"{conv}","marked":false,"from_seq":3}}"#).into_bytes()), "invalid_value"),
        (u, Some(user), Some(format!(r#"{{"type":"conversation.marked_unread",{meta},"user_id":"{user}","conversation_id":"{conv}","marked":true,"from_seq":0}}"#).into_bytes()), "out_of_range"),
        (u, Some(user), Some(format!(r#"{{"type":"conversation.marked_unread",{meta},"user_id":"{user}","conversation_id":"{conv}"}}"#).into_bytes()), "missing_field"),
        // Records of the internal delta topic (a bug or a foreign producer): refused whole, none of their deltas
        // applied.
        (d, None, Some(strays.into_bytes()), "wrong_partition"),
        (d, Some(user), Some(b"[]".to_vec()), "bad_delta"),
        (d, Some(user), Some(left(user).replace("Left", "Vanished").into_bytes()), "bad_delta"),
    ];
    assert!(cases.len() >= 30);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let producer: FutureProducer = unread::kafka::producer_config(&stack.brokers).create().unwrap();
    let send_half = |half: usize| {
        rt.block_on(async {
            for (topic, key, value, _) in cases.iter().skip(half).step_by(2) {
                let mut r: FutureRecord<'_, str, [u8]> = FutureRecord::to(topic);
                if let Some(k) = key {
                    r = r.key(k);
                }
                if let Some(v) = value {
                    r = r.payload(v);
                }
                producer.send(r, Duration::from_secs(30)).await.map_err(|(e, _)| e).unwrap();
            }
        })
    };
    let svc = ns.start(&[]);
    send_half(0);
    ns.ok(&["produce", &dev_events()]);
    send_half(1);
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);

    let dead = unread::dead_letter::read_all(&stack.brokers, &topics.dead_letter).unwrap();
    let mut got: Vec<&str> = dead.iter().map(|d| d.kind.as_str()).collect();
    let mut want: Vec<&str> = cases.iter().map(|c| c.3).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "every bad record is dead-lettered once, with the right kind");
    for kept in &dead {
        assert!([c, u, d].contains(&kept.source_topic.as_str()), "{kept:?}");
        assert!(!kept.reason.is_empty() && kept.source_offset.parse::<i64>().is_ok(), "{kept:?}");
    }
    let big = dead.iter().find(|d| d.kind == "too_large").unwrap();
    assert!(rdkafka::Message::payload(&big.record).unwrap().len() > 10 << 20, "kept unchanged");
    let metrics = http_get(svc.admin, "/metrics").unwrap().1;
    assert!(metrics.contains(r#"unread_dead_letter_records_total{kind="key_mismatch"} 2"#), "{metrics}");

    // `dead-letter list` shows them; `replay --kind` re-publishes the kind, which (still invalid) comes back.
    let listed = ns.ok(&["dead-letter", "list", "--limit", "5", "--kind", "key_mismatch"]);
    assert_eq!(listed.lines().filter(|l| l.contains("key_mismatch:")).count(), 2, "{listed}");
    let listed = ns.ok(&["dead-letter", "list", "--kind", "key_mismatch", "--output", "json"]);
    let records: Vec<serde_json::Value> = listed.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.len(), 2, "{listed}");
    for r in &records {
        assert!(r["kind"] == "key_mismatch" && r["source"]["offset"].is_i64() && r["value"].is_string(), "{r}");
    }
    let out = ns.ok(&["dead-letter", "replay", "--kind", "missing_key"]);
    assert!(out.starts_with("1 dead-letter records re-published"), "{out}");
    ns.ok(&["lag", "--wait", "60"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while unread::dead_letter::read_all(&stack.brokers, &topics.dead_letter).unwrap().len() < cases.len() + 1 {
        assert!(Instant::now() < deadline, "replayed record did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_exact(svc.port);
    svc.stop();
    ns.cleanup();
}

#[test]
fn sigkill_at_five_points_in_one_run_stays_exact() {
    let Some(stack) = stack("sigkill_at_five_points_in_one_run_stays_exact") else { return };
    let ns = Ns::new(&stack, "kill5");
    let mut pipeline = unread::pipeline::Pipeline::new();
    // Sixteen copies: with four, a service that packs its deltas (2026-11-27) could finish the input after two kills
    // (a clean-clone CI run); with sixteen, two local runs had five kills and 110,000-120,000 records still to go.
    produce_dev_copies(&ns, &mut pipeline, 16);
    let expected = pipeline.views();
    // Kill points spread over the run: each time some progress was checkpointed, at a random delay after start.
    let mut rng = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64 | 1;
    let mut kills = 0;
    let mut lag = ns.total_lag();
    while kills < 5 && lag > 0 {
        let svc = ns.start(&["--flush-events", "500"]);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(50 + rng % 250));
        wait_for_progress(&ns, lag);
        svc.kill();
        kills += 1;
        lag = ns.total_lag();
    }
    assert!(kills >= 3, "only {kills} kills happened before the end; the test proves little");
    let svc = ns.start(&[]);
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(svc.port, &expected);
    svc.stop();
    ns.cleanup();
}

#[test]
fn redis_down_for_10_s_then_back_empty_is_detected_and_exact() {
    let Some(stack) = stack("redis_down_for_10_s_then_back_empty_is_detected_and_exact") else { return };
    let port = free_port();
    let redis = PrivateRedis::start(port);
    let ns = Ns::with(&stack, "redisdown", &format!("redis://127.0.0.1:{port}"), &stack.database_url);
    let svc = ns.start(&["--flush-events", "1000"]);
    ns.ok(&["produce", &dev_events()]);
    std::thread::sleep(Duration::from_millis(200));
    redis.stop();
    std::thread::sleep(Duration::from_secs(10));
    assert!(svc.alive(), "the service survived the Redis outage");
    let rss = svc.rss_mib();
    assert!(rss < 1024, "memory stayed bounded: {rss} MiB");
    let _redis = PrivateRedis::start(port); // back, and empty: the fold tasks must notice and rewrite everything
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    let metrics = http_get(svc.admin, "/metrics").unwrap().1;
    assert!(metrics.contains(r#"unread_errors_total{store="redis"}"#), "the outage was seen: {metrics}");
    svc.stop();
    ns.cleanup();
}

#[test]
fn postgres_down_for_10_s_pauses_checkpoints_then_is_exact() {
    let Some(stack) = stack("postgres_down_for_10_s_pauses_checkpoints_then_is_exact") else { return };
    let pg = PrivatePg::create();
    let ns = Ns::with(&stack, "pgdown", &stack.redis_url, &pg.url());
    let svc = ns.start(&["--flush-events", "1000"]);
    ns.ok(&["produce", &dev_events()]);
    std::thread::sleep(Duration::from_millis(200));
    pg.stop();
    std::thread::sleep(Duration::from_secs(10));
    assert!(svc.alive(), "the service survived the PostgreSQL outage");
    let rss = svc.rss_mib();
    assert!(rss < 1024, "memory stayed bounded: {rss} MiB");
    pg.start();
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    let metrics = http_get(svc.admin, "/metrics").unwrap().1;
    assert!(metrics.contains(r#"unread_errors_total{store="postgres"}"#), "the outage was seen: {metrics}");
    svc.stop();
    ns.cleanup();
}

#[test]
fn read_api_under_30_s_of_load_during_ingest_has_no_errors() {
    let Some(stack) = stack("read_api_under_30_s_of_load_during_ingest_has_no_errors") else { return };
    let ns = Ns::new(&stack, "load");
    let svc = ns.start(&[]);
    // wrk, from a second process, cycles through real users (and one unknown user) for 30 s.
    let users = ["%5B%5Bmandrix%5D%5D", "epod", "%7Ctrey%7C", "tweaked", "nobody%20at%20all"];
    let script = std::env::temp_dir().join(format!("{}.lua", ns.name));
    let paths: Vec<String> = users.iter().map(|u| format!("\"/v1/users/{u}/unread\"")).collect();
    std::fs::write(
        &script,
        format!(
            "wrk.headers[\"Authorization\"] = \"Bearer {}\"\nlocal p = {{{}}}\nlocal i = 0\nrequest = function()\n  i = i % #p + 1\n  return wrk.format(\"GET\", p[i])\nend\n",
            token("load-test", true),
            paths.join(",")
        ),
    )
    .unwrap();
    let wrk = Command::new("wrk")
        .args(["-t2", "-c8", "-d30s", "-s"])
        .arg(&script)
        .arg(format!("http://127.0.0.1:{}", svc.port))
        .stdout(Stdio::piped())
        .spawn()
        .expect("wrk (installed by scripts/stack up)");
    std::thread::sleep(Duration::from_millis(500));
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "120"]);
    let out = wrk.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}");
    let requests: u64 = report
        .lines()
        .find_map(|l| l.trim().split_once(" requests in ").map(|(n, _)| n.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no request count in {report}"));
    assert!(requests > 1000, "{report}");
    assert!(!report.contains("Non-2xx") && !report.contains("Socket errors"), "{report}");
    assert_exact(svc.port);
    std::fs::remove_file(script).ok();
    svc.stop();
    ns.cleanup();
}

#[test]
fn kafka_broker_restarted_mid_flow_is_exact() {
    let Some(stack) = stack("kafka_broker_restarted_mid_flow_is_exact") else { return };
    let mut kafka = PrivateKafka::create();
    kafka.start();
    let private = Stack {
        brokers: format!("127.0.0.1:{}", kafka.port),
        redis_url: stack.redis_url.clone(),
        database_url: stack.database_url.clone(),
        client_env: Vec::new(),
    };
    let ns = Ns::new(&private, "kafkarestart");
    let svc = ns.start(&["--flush-events", "1000"]);
    ns.ok(&["produce", &dev_events()]);
    std::thread::sleep(Duration::from_millis(300));
    kafka.stop();
    std::thread::sleep(Duration::from_secs(3));
    assert!(svc.alive(), "the service survived the broker stop");
    let port = svc.port;
    let during = std::thread::spawn(move || post_mute(port, "gateway-restart")); // in flight across the restart
    std::thread::sleep(Duration::from_secs(1));
    kafka.start();
    ns.ok(&["lag", "--wait", "180"]);
    assert_exact(svc.port);
    let during = during.join().unwrap();
    assert!(during == 202 || during == 503, "a write during the outage: accepted late or refused, not {during}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut after = post_mute(svc.port, "gateway-restart");
    while after != 202 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        after = post_mute(svc.port, "gateway-restart");
    }
    assert_eq!(after, 202, "the write gateway takes writes again after the broker came back");
    svc.stop();
    ns.cleanup();
}

/// A mute through the write gateway on `port`, with `user`'s token: the status (0: no answer within 40 s). Not
/// `http_post_as`: its agent gives up after 10 s, and a POST sent while the broker is down may wait for its delivery
/// up to the gateway producer's 30 s (`message.timeout.ms`) before it is answered.
fn post_mute(port: u16, user: &str) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(40)))
        .build()
        .into();
    agent
        .post(&format!("http://127.0.0.1:{port}/v1/users/{user}/conversations/restart/mute"))
        .header("authorization", &format!("Bearer {}", token(user, false)))
        .header("content-type", "application/json")
        .send(r#"{"muted":true}"#)
        .map_or(0, |r| r.status().as_u16())
}

#[test]
fn verify_finds_a_changed_count_and_a_deleted_user_and_repair_fixes_both() {
    let Some(stack) = stack("verify_finds_a_changed_count_and_a_deleted_user_and_repair_fixes_both") else { return };
    let ns = Ns::new(&stack, "verify");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "120"]);
    svc.stop(); // Redis and the checkpoint now hold the same final state
    let out = ns.ok(&["verify"]);
    assert!(out.contains("differing: 0"), "{out}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = redis::Client::open(stack.redis_url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let key = |u: &str| format!("{}:u:{u}", ns.name);
        redis::cmd("HSET")
            .arg(key("[[mandrix]]"))
            .arg("c:ubuntu.2011-05-29_19")
            .arg("7 0 0")
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
        redis::cmd("DEL").arg(key("epod")).query_async::<()>(&mut conn).await.unwrap();
    });
    let out = ns.cmd(&["verify"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "verify exits 1 when Redis differs: {text}");
    assert!(text.contains("differing: 2") && text.contains("[[mandrix]]") && text.contains("epod"), "{text}");
    assert!(text.contains("unread: 169") && text.contains("unread: 7"), "field by field: {text}");
    // The same for scripts: one JSON document, every difference.
    let out = ns.cmd(&["verify", "--output", "json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (out.status.code(), &json["clean"], json["differing"].as_array().unwrap().len()),
        (Some(1), &false.into(), 2)
    );
    let users: Vec<&str> = json["differing"].as_array().unwrap().iter().map(|d| d["user"].as_str().unwrap()).collect();
    assert!(users.contains(&"[[mandrix]]") && users.contains(&"epod"), "{json}");
    // Could not compare (Redis unreachable): 2, not the 1 of "differs".
    let out = ns.cmd(&["verify"]).env("UNREAD_REDIS_URL", "redis://127.0.0.1:1").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("could not compare"), "{stderr}");
    let out = ns.ok(&["verify", "--repair"]);
    assert!(out.contains("differing: 2") && out.contains("repaired: 2"), "{out}");
    let out = ns.ok(&["verify", "--sample", "200"]);
    assert!(out.contains("users checked: 200") && out.contains("differing: 0"), "{out}");
    let api = ns.start(&["--roles", "api"]);
    assert_exact(api.port);
    api.stop();
    ns.cleanup();
}

/// Issue 12: the race that let a fenced fan-out produce one late batch, closed by Kafka transactions. Instance `a`
/// sleeps 4 s between its lease check and each produce (fault injection); `b` joins meanwhile and takes half of the
/// partitions: new lease generations, and the same transactional ids, which fences `a`'s producers. `a` wakes and
/// tries to produce its late batches. Kafka refuses them (`a`'s tasks end fenced by Kafka: the race happened), the
/// delta log as the folds read it (`read_committed`) holds no record of an older generation after a newer one of
/// the same fan-out partition, the folds' own fence finds nothing to drop, and the counts are exact. With
/// `--producer-per-partition`; the default's case is the next test.
#[test]
fn zombie_deltas_from_a_fenced_fan_out_are_never_folded() {
    let Some(stack) = stack("zombie_deltas_from_a_fenced_fan_out_are_never_folded") else { return };
    let ns = Ns::new(&stack, "zombie");
    ns.ok(&["produce", &dev_events()]);
    let a = ns.start_with_env(&["--producer-per-partition"], &[("UNREAD_FAULT_PRODUCE_DELAY", "4s")]);
    std::thread::sleep(Duration::from_secs(2)); // a has checked its leases and sleeps before producing
    let b = ns.start(&["--producer-per-partition"]);
    ns.ok(&["lag", "--wait", "3m"]);
    assert_matches(b.port, &dev_expected());
    let refused = metric(a.admin, "unread_kafka_fenced_tasks_total");
    assert!(refused >= 1.0, "the race did not happen: Kafka fenced no fan-out task of the zombie");
    let stale = stale_deltas_in_log(&stack.brokers, &format!("{}.unread.user-deltas", ns.name));
    assert_eq!(stale, 0, "zombie deltas reached the delta log the folds read");
    let dropped = metric(a.admin, "unread_zombie_deltas_total") + metric(b.admin, "unread_zombie_deltas_total");
    assert_eq!(dropped, 0.0, "the folds' fence had zombie deltas to drop");
    println!("{refused} zombie fan-out tasks fenced by Kafka; 0 zombie deltas in the log");
    a.stop();
    b.stop();
    ns.cleanup();
}

/// The same race with one producer per instance (the default): the zombie is a live member of the group, whose
/// producer (the instance's, writing for the partitions it keeps too) its successor does not fence, so its late
/// batches reach the delta log behind their successors' deltas; the fold's fence drops those (what it drops is at
/// least what the log holds as stale), and the counts are exact.
#[test]
fn zombie_deltas_with_a_shared_producer_are_dropped_by_the_fold() {
    let Some(stack) = stack("zombie_deltas_with_a_shared_producer_are_dropped_by_the_fold") else { return };
    let ns = Ns::new(&stack, "zombieshared");
    ns.ok(&["produce", &dev_events()]);
    let member = |id| ["--group-instance-id", id];
    let a = ns.start_with_env(&member("zombie-a"), &[("UNREAD_FAULT_PRODUCE_DELAY", "4s")]);
    std::thread::sleep(Duration::from_secs(2)); // a has checked its leases and sleeps before producing
    let b = ns.start(&member("zombie-b"));
    ns.ok(&["lag", "--wait", "3m"]);
    assert_matches(b.port, &dev_expected());
    let fenced = metric(a.admin, "unread_fenced_tasks_total");
    assert!(fenced >= 1.0, "the race did not happen: no task of the sleeper was fenced");
    let stale = stale_deltas_in_log(&stack.brokers, &format!("{}.unread.user-deltas", ns.name));
    let dropped = metric(a.admin, "unread_zombie_deltas_total") + metric(b.admin, "unread_zombie_deltas_total");
    assert!(dropped >= stale as f64, "{stale} stale deltas in the log, {dropped} dropped by the folds");
    println!("{stale} zombie deltas in the log, {dropped} dropped by the folds' fence");
    a.stop();
    b.stop();
    ns.cleanup();
}

/// The deltas whose fan-out generation is older than one already seen from the same fan-out partition in
/// their delta partition (what the fold's fence drops), read from the start of `topic` as the folds read it
/// (`read_committed`) up to each partition's end.
fn stale_deltas_in_log(brokers: &str, topic: &str) -> usize {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let consumer: BaseConsumer = unread::kafka::eof_reader(brokers, "zombie-scan").create().unwrap();
    let partitions = unread::kafka::partition_count(&consumer, topic).unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut fences = vec![unread::core::delta::Fence::default(); partitions as usize];
    let (mut stale, mut ended) = (0, std::collections::HashSet::new());
    while ended.len() < partitions as usize {
        let msg = match consumer.poll(Duration::from_secs(10)) {
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
                continue;
            }
            Some(Ok(msg)) => msg,
            other => panic!("reading {topic}: {other:?}"),
        };
        for delta in unread::core::delta::unpack(msg.payload().unwrap()).unwrap() {
            let source = delta.source.expect("every delta has its source");
            stale += usize::from(!fences[msg.partition() as usize].admit(source));
        }
    }
    stale
}
