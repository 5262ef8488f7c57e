//! Exact with any producer (docs/producers.md): real clients of another language publish the dev set with their
//! own partitioners. confluent-kafka (librdkafka) at its defaults places keys by CRC32: exact with
//! `--partitioner crc32`, and loudly refused (dead-lettered `misrouted`, logged once with the fix) with the default
//! murmur2, every other user staying exact. Keyless and round-robin records are refused with their reasons, and
//! replay, rebuild and verify agree with the live service on such a log.

use std::collections::HashSet;
use std::process::Command;

use unread::core::contract::UserView;
use unread::kafka::Partitioner;

use crate::support::*;

/// The Python (a venv with confluent-kafka pinned) that `scripts/test` names in `UNREAD_PRODUCER_PYTHON`; `None`
/// (the test skips) outside it.
fn python() -> Option<String> {
    let python = std::env::var("UNREAD_PRODUCER_PYTHON").ok().filter(|v| !v.is_empty());
    if python.is_none() {
        let required = std::env::var("UNREAD_REQUIRE_STACK").as_deref() == Ok("1");
        assert!(!required, "scripts/test sets UNREAD_PRODUCER_PYTHON");
        println!("SKIPPED: no UNREAD_PRODUCER_PYTHON (scripts/test installs confluent-kafka)");
    }
    python
}

/// Runs a Python script of the repository with `args`; panics with its output unless it succeeds. Returns stdout.
fn run_python(python: &str, script: &str, args: &[&str]) -> String {
    let out = Command::new(python).arg(repo_path(script)).args(args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{script} {args:?} failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}

/// Writes `text` to a temporary file of the namespace; returns its path.
fn temp_file(ns: &Ns, name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("{}-{name}.jsonl", ns.name));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The dev set's lines, split into (conversation events, user events) by the topic each goes to.
fn dev_by_topic() -> (String, String) {
    let text = std::fs::read_to_string(dev_events()).unwrap();
    let (mut conv, mut user) = (String::new(), String::new());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let event = unread::core::contract::decode(line.as_bytes()).unwrap();
        let out = if event.stream() == unread::core::contract::Stream::User { &mut user } else { &mut conv };
        out.push_str(line);
        out.push('\n');
    }
    (conv, user)
}

/// The dead letters of the namespace, by kind.
fn dead_kinds(stack: &Stack, ns: &Ns) -> Vec<String> {
    let topics = unread::topology::Topics::new(&format!("{}.", ns.name));
    let dead = unread::dead_letter::read_all(&stack.brokers, &topics.dead_letter).unwrap();
    dead.into_iter().map(|d| d.kind).collect()
}

fn count(kinds: &[String], kind: &str) -> usize {
    kinds.iter().filter(|k| *k == kind).count()
}

/// How many lines of the service's log name a dead-lettered record of `kind`.
fn logged(ns: &Ns, port: u16, kind: &str) -> Vec<String> {
    let log = ns.log_of(port);
    let lines =
        log.lines().filter(|l| l.contains("a record was dead-lettered") && l.contains(&format!("kind=\"{kind}\"")));
    let lines = lines
        .chain(log.lines().filter(|l| l.contains("a record was dead-lettered") && l.contains(&format!("kind={kind}"))));
    lines.map(str::to_owned).collect()
}

/// The topics' partition count (topology/topics.toml).
const PARTITIONS: i32 = 8;

#[test]
fn confluent_kafka_at_its_defaults_is_exact_with_partitioner_crc32() {
    let Some(stack) = stack("confluent_kafka_at_its_defaults_is_exact_with_partitioner_crc32") else { return };
    let Some(python) = python() else { return };
    let ns = Ns::new(&stack, "ckcrc");
    let svc = ns.start_with_env(&[], &[("UNREAD_PARTITIONER", "crc32")]);
    let prefix = format!("{}.", ns.name);
    let out = run_python(&python, "examples/producers/publish_confluent.py", &[&stack.brokers, &prefix, &dev_events()]);
    assert!(out.starts_with("16194 events sent, 0 failed"), "{out}");
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    assert_eq!(dead_kinds(&stack, &ns), Vec::<String>::new(), "nothing refused");
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    svc.stop();
    ns.cleanup();
}

#[test]
fn the_java_client_at_its_defaults_is_exact_with_the_default_partitioner() {
    let Some(stack) = stack("the_java_client_at_its_defaults_is_exact_with_the_default_partitioner") else { return };
    let Some(libs) = std::env::var("UNREAD_KAFKA_LIBS").ok().filter(|v| !v.is_empty()) else {
        assert!(std::env::var("UNREAD_REQUIRE_STACK").as_deref() != Ok("1"), "scripts/test sets UNREAD_KAFKA_LIBS");
        println!("SKIPPED: no UNREAD_KAFKA_LIBS (the Kafka jars scripts/stack fetched)");
        return;
    };
    let ns = Ns::new(&stack, "javapub");
    let svc = ns.start(&[]);
    let prefix = format!("{}.", ns.name);
    let java = repo_path("examples/producers/JavaPublish.java");
    let out = Command::new("java")
        .args(["-cp", &format!("{libs}/*"), java.to_str().unwrap(), &stack.brokers, &prefix, &dev_events()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "JavaPublish failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("16194 events sent, 0 failed"), "{stdout}");
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    assert_eq!(dead_kinds(&stack, &ns), Vec::<String>::new(), "nothing refused");
    svc.stop();
    ns.cleanup();
}

/// The issue's case: conversation events from `unread produce` (murmur2), user events from a confluent-kafka
/// backend at its defaults (CRC32), the service at its default. Each user event CRC32 puts on another partition
/// than murmur2 is refused, never folded by the wrong task; the log names the first with the fix once.
#[test]
fn a_producer_on_another_partitioner_is_refused_loudly_and_the_rest_stays_exact() {
    let Some(stack) = stack("a_producer_on_another_partitioner_is_refused_loudly_and_the_rest_stays_exact") else {
        return;
    };
    let Some(python) = python() else { return };
    let ns = Ns::new(&stack, "ckmix");
    let (conv, user) = dev_by_topic();
    let svc = ns.start(&[]);
    produce_lines(&ns, "conv", conv.clone());
    let prefix = format!("{}.", ns.name);
    let users_file = temp_file(&ns, "users", &user);
    run_python(&python, "examples/producers/publish_confluent.py", &[&stack.brokers, &prefix, &users_file]);
    ns.ok(&["lag", "--wait", "120"]);

    // Expected: every conversation event, and the user events CRC32 happens to put where murmur2 does.
    let (mut kept, mut refused) = (conv, 0);
    for line in user.lines() {
        let event = unread::core::contract::decode(line.as_bytes()).unwrap();
        let key = event.routing_key().as_bytes();
        if Partitioner::Crc32.partition(key, PARTITIONS) == Partitioner::Murmur2.partition(key, PARTITIONS) {
            kept.push_str(line);
            kept.push('\n');
        } else {
            refused += 1;
        }
    }
    assert!(refused > 1000, "most user events are elsewhere: {refused}");
    let (expected, _) = fold_text(&kept, unread::core::hybrid::Diffusion::default(), 1000);
    assert_matches(svc.port, &expected);
    let kinds = dead_kinds(&stack, &ns);
    assert_eq!((count(&kinds, "misrouted"), kinds.len()), (refused, refused), "each refused once, as misrouted");
    let metrics = http_get(svc.admin, "/metrics").unwrap().1;
    assert!(
        metrics.contains(&format!(r#"unread_dead_letter_records_total{{kind="misrouted"}} {refused}"#)),
        "{metrics}"
    );
    let lines = logged(&ns, svc.port, "misrouted");
    assert_eq!(lines.len(), 1, "named once in the log: {lines:#?}");
    assert!(lines[0].contains("set --partitioner crc32"), "with the setting that fixes it: {}", lines[0]);
    svc.stop();
    ns.cleanup();
}

/// A small file of events that would change expected users' counts if folded: read acks far ahead for users with
/// unread messages, and leaves of members with unread messages (a conversation event).
fn damaging_events(expected: &[UserView], tag: &str) -> String {
    let meta = format!(r#""event_id":"{tag}","occurred_at":"2024-01-01T00:00:00Z""#);
    let mut out = String::new();
    let with_unread = expected.iter().filter_map(|v| {
        let (conv, _) = v.conversations.iter().find(|(_, c)| c.unread > 0)?;
        Some((v.user_id.clone(), conv.clone()))
    });
    for (i, (user, conv)) in with_unread.take(48).enumerate() {
        let line = if i % 3 == 2 {
            format!(r#"{{"type":"member.left",{meta},"conversation_id":{conv:?},"user_id":{user:?}}}"#)
        } else {
            format!(r#"{{"type":"read.ack",{meta},"user_id":{user:?},"conversation_id":{conv:?},"read_seq":9999999}}"#)
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[test]
fn keyless_and_round_robin_records_are_refused_and_replay_rebuild_and_verify_agree() {
    let Some(stack) = stack("keyless_and_round_robin_records_are_refused_and_replay_rebuild_and_verify_agree") else {
        return;
    };
    let Some(python) = python() else { return };
    let ns = Ns::new(&stack, "keyless");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &dev_events()]);
    let prefix = format!("{}.", ns.name);
    let dev = dev_expected();
    let keyless = temp_file(&ns, "keyless", &damaging_events(&dev, "keyless"));
    let sent =
        run_python(&python, "tests/it/producers/misbehaving.py", &[&stack.brokers, &prefix, &keyless, "keyless"]);
    let round_robin = damaging_events(&dev, "round-robin");
    let file = temp_file(&ns, "round-robin", &round_robin);
    let placed =
        run_python(&python, "tests/it/producers/misbehaving.py", &[&stack.brokers, &prefix, &file, "round-robin"]);
    ns.ok(&["lag", "--wait", "120"]);

    // The round-robin records that landed where murmur2 puts their key are in place, and folded.
    let mut events = std::fs::read_to_string(dev_events()).unwrap();
    let mut misrouted = 0;
    let placements: Vec<serde_json::Value> = placed.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(placements.len(), round_robin.lines().count());
    let mut seen = HashSet::new();
    for (line, at) in round_robin.lines().zip(&placements) {
        let key = at["key"].as_str().unwrap();
        let partition = at["partition"].as_i64().unwrap() as i32;
        seen.insert(partition);
        if Partitioner::Murmur2.partition(key.as_bytes(), PARTITIONS) == partition {
            events.push_str(line);
            events.push('\n');
        } else {
            misrouted += 1;
        }
    }
    assert!(seen.len() == PARTITIONS as usize && misrouted > 30, "spread: {seen:?}, {misrouted} misrouted");
    let (expected, _) = fold_text(&events, unread::core::hybrid::Diffusion::default(), 1000);
    let exact = |port| {
        let (n, bad) = mismatches(port, &expected);
        assert!(n > 1500 && bad.is_empty(), "{} of {n} users differ, e.g. {:#?}", bad.len(), &bad[..bad.len().min(5)]);
    };
    exact(svc.port);

    let kinds = dead_kinds(&stack, &ns);
    assert_eq!(count(&kinds, "missing_key"), sent.lines().count(), "every keyless record refused");
    assert_eq!(count(&kinds, "misrouted"), misrouted);
    assert_eq!(kinds.len(), sent.lines().count() + misrouted);
    // Once per input topic at most, each with what to change.
    let lines = logged(&ns, svc.port, "misrouted");
    assert!((1..=2).contains(&lines.len()) && lines.iter().all(|l| l.contains("docs/producers.md")), "{lines:#?}");

    // The same answers from the tools: verify, a replay from the log, and a rebuild of Redis from the checkpoint.
    assert!(ns.ok(&["verify"]).contains("differing: 0"));
    ns.ok(&["replay", "--from", "earliest", "--into", "r1"]);
    let out = ns.ok(&["verify", "--against", "r1"]);
    assert!(out.contains("differing: 0"), "{out}");
    svc.stop();
    ns.ok(&["projection", "rebuild"]);
    let svc = ns.start(&[]);
    exact(svc.port);
    svc.stop();
    ns.cleanup();
}
