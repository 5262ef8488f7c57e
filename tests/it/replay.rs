//! Replay tooling end to end against the real Kafka, Redis and PostgreSQL (issue 5): `unread replay` into a
//! namespace while the service runs, `verify --against`, `promote` under read load, `drop`, resuming an
//! interrupted replay, and the refusal of `--from earliest` on a truncated log. Same conventions as
//! [`crate::service`]: each test has its own namespace, removed when it ends.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::*;

/// Runs a subcommand and returns (success, stdout + stderr).
fn run(ns: &Ns, args: &[&str]) -> (bool, String) {
    let out = ns.cmd(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The namespace the API at `port` answered a user request from.
fn served_namespace(port: u16) -> String {
    let (code, headers, body) = http_get_full(port, "/v1/users/epod/unread").expect("API answers");
    assert_eq!(code, 200, "{body}");
    headers.iter().find_map(|h| h.strip_prefix("x-unread-namespace: ")).expect("namespace header").to_owned()
}

#[test]
fn replay_of_the_dev_set_while_live_runs_equals_live_and_expected_and_verify_against_repairs() {
    let Some(stack) = stack("replay_of_the_dev_set_while_live_runs_equals_live_and_expected") else { return };
    let ns = Ns::new(&stack, "replay");
    let svc = ns.start(&["--verify-every", "500ms", "--verify-sample", "300"]);
    ns.ok(&["produce", &dev_events()]);
    // The replay runs while the live service is still folding the same records.
    let out = ns.ok(&["replay", "--from", "earliest", "--into", "r1"]);
    assert!(out.contains("replay into r1: 16194 records") && out.contains("complete"), "{out}");
    ns.ok(&["lag", "--wait", "120"]);

    let out = ns.ok(&["verify", "--against", "r1"]);
    assert!(out.contains("differing: 0"), "{out}");
    let checked: usize = out.split("users checked: ").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    assert!(checked >= 1565, "{out}");
    let out = ns.ok(&["verify", "--namespace", "r1"]);
    assert!(out.contains("differing: 0"), "the replay's Redis equals its checkpoint: {out}");

    // A count changed by hand in the live projection: found against the replay, and repaired from it.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = redis::Client::open(stack.redis_url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let key = format!("{}:u:[[mandrix]]", ns.name);
        redis::cmd("HSET")
            .arg(key)
            .arg("c:ubuntu.2011-05-29_19")
            .arg("7 0 0")
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    });
    let (ok, out) = run(&ns, &["verify", "--against", "r1"]);
    assert!(!ok && out.contains("differing: 1") && out.contains("[[mandrix]]"), "{out}");
    assert!(out.contains("namespace r1 169") || out.contains("unread: 169"), "field by field: {out}");
    let out = ns.ok(&["verify", "--against", "r1", "--repair"]);
    assert!(out.contains("repaired: 1"), "{out}");
    assert!(ns.ok(&["verify", "--against", "r1"]).contains("differing: 0"));
    assert_exact(svc.port);

    // The replayed namespace itself equals the expected file, served through the API once promoted.
    assert_eq!(served_namespace(svc.port), "default");
    ns.ok(&["promote", "r1"]);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(served_namespace(svc.port), "r1");
    assert_exact(svc.port);
    let (_, ready) = http_get(svc.admin, "/readyz").unwrap();
    assert!(ready.contains(r#""namespace":"r1""#), "{ready}");

    // The background verify ran and exported its result.
    let (_, metrics) = http_get(svc.admin, "/metrics").unwrap();
    let runs = metrics.lines().find_map(|l| l.strip_prefix("unread_verify_runs_total ")).unwrap();
    assert!(runs.parse::<u64>().unwrap() >= 1, "{metrics}");
    assert!(metrics.contains("unread_verify_differing_users 0\n"), "{metrics}");

    // Refusals: into the live namespace, into the namespace the service writes; a resumed replay adds nothing.
    let (ok, out) = run(&ns, &["replay", "--into", "r1"]);
    assert!(!ok && out.contains("live one"), "{out}");
    let (ok, out) = run(&ns, &["replay", "--into", "default", "--namespace", "r1"]);
    assert!(!ok && out.contains("written by `unread run`"), "{out}");
    let (ok, out) = run(&ns, &["drop", "r1"]);
    assert!(!ok && out.contains("live one"), "{out}");
    svc.stop();
    ns.cleanup();
}

#[test]
fn promote_under_read_load_fails_no_request_and_drop_old_waits_for_the_old_service() {
    let Some(stack) = stack("promote_under_read_load_fails_no_request") else { return };
    let ns = Ns::new(&stack, "promote");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "120"]);
    ns.ok(&["replay", "--into", "r2"]);
    let api = ns.start(&["--roles", "api"]);

    // --drop-old is refused before anything switches while the old namespace's service runs.
    let (ok, out) = run(&ns, &["promote", "r2", "--drop-old"]);
    assert!(!ok && out.contains("still runs in namespace \"default\""), "{out}");
    assert_eq!(served_namespace(api.port), "default");

    // Four readers hammer the API-only instance; the promotion happens in the middle.
    let expected = Arc::new(dev_expected());
    let stop = Arc::new(AtomicBool::new(false));
    let (requests, failures) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let seen = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let (expected, stop, requests, failures, seen) =
                (expected.clone(), stop.clone(), requests.clone(), failures.clone(), seen.clone());
            let port = api.port;
            std::thread::spawn(move || {
                let mut k = i;
                while !stop.load(Ordering::Relaxed) {
                    let e = &expected[k % expected.len()];
                    k += 7;
                    let got = http_get_full(port, &format!("/v1/users/{}/unread", encode(&e.user_id)));
                    requests.fetch_add(1, Ordering::Relaxed);
                    match got {
                        Some((200, headers, body)) => {
                            let view: Option<unread::core::contract::UserView> = serde_json::from_str(&body).ok();
                            // In the dev set's expected shape (contract v1: no v4 field).
                            let view = view.map(|v| unread::pipeline::Shape::V3.project(&v));
                            if view.as_ref() != Some(e) {
                                failures.lock().unwrap().push(format!("{}: {body}", e.user_id));
                            }
                            if let Some(n) = headers.iter().find_map(|h| h.strip_prefix("x-unread-namespace: ")) {
                                seen.lock().unwrap().insert(n.to_owned());
                            }
                        }
                        other => failures.lock().unwrap().push(format!("{}: {other:?}", e.user_id)),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let before = requests.load(Ordering::Relaxed);
    let out = ns.ok(&["promote", "r2"]);
    assert!(out.contains("promoted r2 (was default)"), "{out}");
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let total = requests.load(Ordering::Relaxed);
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "{} of {total} requests failed, e.g. {:?}", failures.len(), &failures[..1]);
    assert!(before > 50 && total - before > 50, "load before ({before}) and after ({}) the switch", total - before);
    assert_eq!(*seen.lock().unwrap(), ["default".to_owned(), "r2".to_owned()].into(), "readers switched");
    assert_eq!(served_namespace(api.port), "r2");

    // With the old service stopped, the old namespace can go; the promoted one still serves exactly.
    svc.stop();
    let out = ns.ok(&["drop", "default"]);
    assert!(out.contains("dropped default") && !out.contains(" 0 Redis keys"), "{out}");
    assert_exact(api.port);
    api.stop();
    ns.cleanup();
}

#[test]
fn replay_interrupted_twice_then_resumed_is_exact() {
    let Some(stack) = stack("replay_interrupted_twice_then_resumed_is_exact") else { return };
    let ns = Ns::new(&stack, "resume");
    let mut pipeline = unread::pipeline::Pipeline::new();
    produce_dev_copies(&ns, &mut pipeline, 3);
    let expected = pipeline.views();
    let args = ["replay", "--into", "r3", "--max-rate", "8000", "--checkpoint-every", "200ms"];

    // SIGTERM: checkpoints, says so, exits 130.
    let child = ns.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    signal(child.id(), Signal::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{text}");
    assert!(text.contains("interrupted") && !text.contains("(resumed)"), "{text}");

    // SIGKILL: no last checkpoint; the next run resumes from the one before.
    let mut child = ns.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    let (ok, out) = run(&ns, &["promote", "r3"]);
    assert!(!ok && out.contains("unfinished replay"), "an unfinished replay is not promoted: {out}");

    let started = Instant::now();
    let out = ns.ok(&["replay", "--into", "r3"]);
    assert!(out.contains("(resumed)") && out.contains("complete"), "{out}");
    let records: u64 = out.split("records").next().unwrap().rsplit(' ').nth(1).unwrap().parse().unwrap();
    assert!(records > 0 && records < 3 * 16194, "resumed from a checkpoint, not from the start: {out}");
    println!("resumed replay took {:.2} s", started.elapsed().as_secs_f64());

    // A replay that died during its first checkpoint (not seeded) starts afresh instead of resuming half a start.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let pool = sqlx::PgPool::connect(&stack.database_url).await.unwrap();
        let sql = format!("UPDATE \"{}_ns_r3\".replays SET seeded = false", ns.name);
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
    });
    let out = ns.ok(&["replay", "--into", "r3"]);
    assert!(out.contains("replay into r3: 48582 records") && out.contains("complete"), "{out}");

    ns.ok(&["promote", "r3"]);
    let api = ns.start(&["--roles", "api"]);
    assert_matches(api.port, &expected);
    assert!(ns.ok(&["verify", "--namespace", "r3"]).contains("differing: 0"));
    api.stop();
    ns.cleanup();
}

#[test]
fn replay_from_earliest_refuses_a_truncated_log_and_from_checkpoint_covers_it() {
    let Some(stack) = stack("replay_from_earliest_refuses_a_truncated_log") else { return };
    let ns = Ns::new(&stack, "retention");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "120"]);
    svc.stop();
    // Retention at work: the first records of one partition of each input topic are deleted.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use rdkafka::consumer::Consumer;
        let admin = unread::kafka::admin(&stack.brokers).unwrap();
        let consumer = unread::kafka::metadata_client(&stack.brokers).unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for t in ["unread.conversation-events", "unread.user-events"] {
            let topic = format!("{}.{t}", ns.name);
            let p = (0..8)
                .find(|p| consumer.fetch_watermarks(&topic, *p, Duration::from_secs(10)).unwrap().1 > 5)
                .expect("a partition with records");
            tpl.add_partition_offset(&topic, p, rdkafka::Offset::Offset(5)).unwrap();
        }
        admin.delete_records(&tpl, &unread::kafka::admin_options()).await.unwrap();
    });
    let (ok, out) = run(&ns, &["replay", "--from", "earliest", "--into", "r4"]);
    assert!(
        !ok && out.contains("starts at offset 5, but the replay must read it from offset 0")
            && out.contains("--from checkpoint"),
        "{out}"
    );
    assert!(run(&ns, &["verify", "--namespace", "r4"]).1.contains("users checked: 0"), "a refusal writes nothing");
    let out = ns.ok(&["replay", "--from", "checkpoint", "--into", "r4"]);
    assert!(out.contains("replay into r4: 0 records") && out.contains("complete"), "{out}");
    // More traffic after the checkpoint: a second replay run catches the namespace up.
    let mut pipeline = unread::pipeline::Pipeline::new();
    let first = unread::pipeline::open_input(&dev_events()).unwrap();
    unread::pipeline::for_each_batch(first, 1000, |e| panic!("{e}"), |b| pipeline.process_batch(b)).unwrap();
    produce_dev_copies(&ns, &mut pipeline, 1); // the expected state is that of two copies
    let out = ns.ok(&["replay", "--into", "r4"]);
    assert!(out.contains("(resumed)") && out.contains("16194 records"), "{out}");
    ns.ok(&["promote", "r4"]);
    let api = ns.start(&["--roles", "api"]);
    assert_matches(api.port, &pipeline.views());

    // A replay from a time: the records' Kafka timestamps are all after 2000, so it reads every retained record,
    // but from empty state (partial by definition), and promote wants --force for it.
    let out = ns.ok(&["replay", "--from", "2000-01-01T00:00:00Z", "--into", "r5"]);
    assert!(out.contains("complete"), "{out}");
    let (ok, out) = run(&ns, &["promote", "r5"]);
    assert!(!ok && out.contains("--force"), "{out}");
    api.stop();
    ns.cleanup();
}

#[test]
fn replay_from_checkpoint_applies_the_deltas_the_fold_had_not_read() {
    let Some(stack) = stack("replay_from_checkpoint_applies_the_deltas_the_fold_had_not_read") else { return };
    let ns = Ns::new(&stack, "inflight");
    // Only the fan-out runs: every delta it produces stays unread by any fold. Without the api role it serves no
    // read API, yet its admin address says it is ready (it holds partitions) and serves its metrics.
    let svc = ns.start(&["--roles", "fanout"]);
    assert!(http_get(svc.port, "/openapi.json").is_none(), "no read API without the api role");
    let (code, ready) = http_get(svc.admin, "/readyz").unwrap();
    assert!(code == 200 && ready.contains(r#""assigned_partitions":{"fanout":"#), "{ready}");
    assert!(http_get(svc.admin, "/metrics").unwrap().1.contains("unread_assigned_partitions"));
    ns.ok(&["produce", &dev_events()]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = ns.ok(&["lag"]);
        let fanout_lag: i64 = out
            .lines()
            .filter(|l| l.starts_with("fanout"))
            .map(|l| l.split_whitespace().last().unwrap().parse::<i64>().unwrap())
            .sum();
        if fanout_lag == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "fan-out lag still {fanout_lag}");
        std::thread::sleep(Duration::from_millis(100));
    }
    svc.stop();
    let (ok, out) = run(&ns, &["verify", "--against", "nothing"]);
    assert!(!ok && out.contains("holds no state"), "{out}");
    let out = ns.ok(&["replay", "--from", "checkpoint", "--into", "rc"]);
    let deltas: u64 = out.split(" in-flight deltas").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(deltas > 1000, "the fan-out's deltas were applied: {out}");
    // The conversation events are not read again (the fan-out's checkpoint covers them); the user events are.
    assert!(out.contains("replay into rc: 2651 records"), "{out}");
    ns.ok(&["promote", "rc"]);
    let api = ns.start(&["--roles", "api"]);
    assert_exact(api.port);
    api.stop();
    ns.cleanup();
}
