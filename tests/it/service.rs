//! The service end to end against the real Kafka, Redis and PostgreSQL of `scripts/stack` (URLs from
//! `UNREAD_BROKERS`, `UNREAD_REDIS_URL`, `UNREAD_DATABASE_URL`, which `scripts/test` exports). Each test uses its own
//! topic prefix, consumer group, database schema and Redis key prefix, and removes them at the end, so tests run in
//! parallel and leave nothing behind. Without the variables the tests are skipped with a printed reason, unless
//! `UNREAD_REQUIRE_STACK=1` (set by `scripts/test`), where they fail.

use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use unread::core::contract::UserView;

use crate::support::{parse_views, repo_path};

pub(crate) struct Stack {
    pub(crate) brokers: String,
    pub(crate) redis_url: String,
    pub(crate) database_url: String,
}

pub(crate) fn stack(test: &str) -> Option<Stack> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (get("UNREAD_BROKERS"), get("UNREAD_REDIS_URL"), get("UNREAD_DATABASE_URL")) {
        (Some(brokers), Some(redis_url), Some(database_url)) => Some(Stack { brokers, redis_url, database_url }),
        _ if std::env::var("UNREAD_REQUIRE_STACK").as_deref() == Ok("1") => {
            panic!("{test}: UNREAD_BROKERS/UNREAD_REDIS_URL/UNREAD_DATABASE_URL are not set: run scripts/test")
        }
        _ => {
            println!("SKIPPED {test}: no stack (run `scripts/stack up` and `eval \"$(scripts/stack env)\"`, or scripts/test)");
            None
        }
    }
}

/// One test's private namespace on the shared stack (or on private Redis/PostgreSQL instances).
pub(crate) struct Ns<'s> {
    stack: &'s Stack,
    pub(crate) name: String,
    redis_url: String,
    database_url: String,
}

impl<'s> Ns<'s> {
    pub(crate) fn new(stack: &'s Stack, test: &str) -> Self {
        Self::with(stack, test, &stack.redis_url, &stack.database_url)
    }

    fn with(stack: &'s Stack, test: &str, redis_url: &str, database_url: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let name = format!("it_{test}_{}_{nanos}", std::process::id());
        let ns = Self { stack, name, redis_url: redis_url.to_owned(), database_url: database_url.to_owned() };
        ns.ok(&["topics", "create"]);
        ns
    }

    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_unread"));
        c.args(args)
            .env("UNREAD_BROKERS", &self.stack.brokers)
            .env("UNREAD_REDIS_URL", &self.redis_url)
            .env("UNREAD_DATABASE_URL", &self.database_url)
            .env("UNREAD_DB_SCHEMA", &self.name)
            .env("UNREAD_TOPIC_PREFIX", format!("{}.", self.name))
            .env("UNREAD_GROUP_ID", &self.name)
            .env("UNREAD_REDIS_PREFIX", format!("{}:", self.name))
            .env("UNREAD_LOG", "info,rdkafka=warn,sqlx=warn");
        c
    }

    /// Runs a subcommand to completion; panics with its output unless it succeeds. Returns stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success(),
            "unread {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn total_lag(&self) -> i64 {
        let out = self.ok(&["lag"]);
        let line = out.lines().find_map(|l| l.strip_prefix("total lag: ")).expect("lag prints a total");
        line.trim().parse().unwrap()
    }

    pub(crate) fn start(&self, extra: &[&str]) -> Service {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec!["run", "--listen", &listen];
        if !extra.contains(&"--flush-interval-ms") {
            args.extend(["--flush-interval-ms", "100"]);
        }
        args.extend_from_slice(extra);
        let log = std::fs::File::create(std::env::temp_dir().join(format!("{}-{port}.log", self.name))).unwrap();
        let child = self.cmd(&args).stdout(Stdio::null()).stderr(log).spawn().unwrap();
        let svc = Service { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(port, "/readyz").map(|(s, _)| s) != Some(200) {
            assert!(Instant::now() < deadline, "service not ready within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        svc
    }

    /// Deletes the topics, the schema and the Redis keys of this namespace.
    pub(crate) fn cleanup(self) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            use rdkafka::admin::{AdminClient, AdminOptions};
            let admin: AdminClient<rdkafka::client::DefaultClientContext> =
                rdkafka::ClientConfig::new().set("bootstrap.servers", &self.stack.brokers).create().unwrap();
            // Every topic and schema of the test, those of its replayed namespaces included.
            let counts = unread::topology::partition_counts(&self.stack.brokers).unwrap();
            let names: Vec<&str> =
                counts.keys().filter(|t| t.starts_with(&format!("{}.", self.name))).map(String::as_str).collect();
            admin.delete_topics(&names, &AdminOptions::new()).await.ok();
            let pool = sqlx::PgPool::connect(&self.database_url).await.unwrap();
            let schemas: Vec<(String,)> = sqlx::query_as(
                "SELECT nspname::text FROM pg_namespace WHERE nspname = $1 OR nspname LIKE $1 || '\\_ns\\_%'",
            )
            .bind(&self.name)
            .fetch_all(&pool)
            .await
            .unwrap();
            for (schema,) in schemas {
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")))
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            delete_redis_prefix(&self.redis_url, &format!("{}:", self.name)).await;
        });
    }
}

async fn delete_redis_prefix(url: &str, prefix: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg(format!("{prefix}*")).query_async(&mut conn).await.unwrap();
    for chunk in keys.chunks(1000) {
        redis::cmd("DEL").arg(chunk).query_async::<()>(&mut conn).await.unwrap();
    }
    keys.len()
}

pub(crate) struct Service {
    child: Child,
    pub(crate) port: u16,
}

impl Service {
    pub(crate) fn kill(mut self) {
        self.child.kill().ok(); // SIGKILL
        self.child.wait().ok();
    }

    pub(crate) fn stop(mut self) {
        unsafe_sigterm(self.child.id());
        let deadline = Instant::now() + Duration::from_secs(40);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                self.child.kill().ok();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// Waits (at most 120 s) until the total lag is below `from`, i.e. some work was checkpointed; returns the lag.
fn wait_for_progress(ns: &Ns, from: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let lag = ns.total_lag();
        if lag < from || lag == 0 {
            return lag;
        }
        assert!(Instant::now() < deadline, "no progress within 120 s (lag {lag})");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(crate) fn unsafe_sigterm(pid: u32) {
    Command::new("kill").arg("-TERM").arg(pid.to_string()).status().ok();
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A plain HTTP/1.1 GET on loopback: (status, body).
pub(crate) fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_full(port, path).map(|(code, _, body)| (code, body))
}

/// A plain HTTP/1.1 GET on loopback: (status, header lines lower-cased, body).
pub(crate) fn http_get_full(port: u16, path: &str) -> Option<(u16, Vec<String>, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut r = std::io::BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).ok()?;
    let code = status.split_whitespace().nth(1)?.parse().ok()?;
    let mut line = String::new();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).ok()?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        headers.push(line.trim_end().to_ascii_lowercase());
    }
    let mut body = String::new();
    std::io::Read::read_to_string(&mut r, &mut body).ok()?;
    Some((code, headers, body))
}

/// Percent-encodes a path segment (everything but unreserved characters).
pub(crate) fn encode(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn dev_expected() -> Vec<UserView> {
    parse_views(&std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/dev-expected.jsonl")).unwrap())
}

/// Asks the API for every expected user; returns how many were asked and the mismatches.
pub(crate) fn mismatches(port: u16, expected: &[UserView]) -> (usize, Vec<String>) {
    let mut bad = Vec::new();
    for e in expected {
        let (code, body) = http_get(port, &format!("/v1/users/{}/unread", encode(&e.user_id))).expect("API answers");
        let got: Option<unread::core::contract::UserView> = serde_json::from_str(&body).ok();
        if code != 200 || got.as_ref() != Some(e) {
            bad.push(format!("{}: HTTP {code} {body}", e.user_id));
        }
    }
    (expected.len(), bad)
}

pub(crate) fn assert_exact(port: u16) {
    assert_matches(port, &dev_expected());
}

pub(crate) fn assert_matches(port: u16, expected: &[UserView]) {
    let (n, bad) = mismatches(port, expected);
    assert!(n >= 1565, "{n} users expected");
    assert!(bad.is_empty(), "{} of {n} users differ, e.g. {:#?}", bad.len(), &bad[..bad.len().min(5)]);
}

/// Produces the dev set `copies` times and folds the same copies into `pipeline`, whose views are then the
/// expected state (copies are not mere duplicates: each replays leaves and rejoins at a new head).
pub(crate) fn produce_dev_copies(ns: &Ns, pipeline: &mut unread::pipeline::Pipeline, copies: usize) {
    for _ in 0..copies {
        ns.ok(&["produce", &dev_events()]);
        let input = unread::pipeline::open_input(&dev_events()).unwrap();
        unread::pipeline::for_each_batch(input, 1000, |e| panic!("{e}"), |b| pipeline.process_batch(b)).unwrap();
    }
}

pub(crate) fn dev_events() -> String {
    repo_path("tests/data/ubuntu-irc/dev-events.jsonl").to_str().unwrap().to_owned()
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
            r#"{"user_id":"nobody here","total_unread":0,"total_mentions":0,"unread_conversations":0,"conversations":{}}"#
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
    let metrics = http_get(svc.port, "/metrics").unwrap().1;
    for family in [
        "unread_events_processed_total{topic=",
        r#"unread_flush_seconds_bucket{stage="fold",le="+Inf"}"#,
        r#"unread_flush_seconds_count{stage="fanout"}"#,
        r#"unread_checkpoint_transaction_seconds_count{stage="fold"}"#,
        r#"unread_partition_lag{stage="fold",topic="#,
        r#"unread_assigned_partitions{stage="fold"} 8"#,
        "unread_rebalances_total{stage=",
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
    let svc = ns.start(&[]);
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(svc.port, &expected);
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
    let (_, bad) = mismatches(api.port, &dev_expected());
    assert!(bad.len() > 1000, "with Redis emptied, users read as zeros ({} differ)", bad.len());
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
            v.conversations.insert("c".into(), ConversationView { unread, mentions: 0, muted: false });
            v
        };
        let write = |unread: u64, version: &str| UserWrite::replace(view(unread), version.into());
        assert_eq!(p.write(&[write(5, "1 100 500")]).await.unwrap(), (1, 0));
        assert_eq!(p.write(&[write(9, "1 150 480")]).await.unwrap(), (1, 0), "not dominated: accepted");
        assert_eq!(p.write(&[write(1, "1 150 470")]).await.unwrap(), (0, 1), "dominated: refused");
        assert_eq!(p.write(&[write(1, "1 90 400")]).await.unwrap(), (0, 1), "dominated: refused");
        assert_eq!(p.write(&[write(9, "1 150 480")]).await.unwrap(), (1, 0), "equal: accepted (idempotent)");
        assert_eq!(p.write(&[write(7, "2 10 10")]).await.unwrap(), (1, 0), "newer generation: accepted");
        assert_eq!(p.write(&[write(1, "1 999 999")]).await.unwrap(), (0, 1), "older generation (a zombie): refused");
        assert_eq!(p.read("u/1").await.unwrap(), view(7));
        assert_eq!(p.version("u/1").await.unwrap().as_deref(), Some("2 10 10"));
        delete_redis_prefix(&stack.redis_url, &prefix).await;
    });
}

#[test]
fn a_checkpoint_from_an_older_lease_generation_is_fenced() {
    use unread::checkpoint::store::{CheckpointStore, Fenced, Stage};
    let Some(stack) = stack("a_checkpoint_from_an_older_lease_generation_is_fenced") else { return };
    let schema = format!("it_fence_{}", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = CheckpointStore::connect(&stack.database_url, &schema, 2).await.unwrap();
        store.migrate().await.unwrap();
        let old = store.acquire(Stage::Fold, 3, "a").await.unwrap();
        let row = |v: u8| vec![("u".to_string(), Some(vec![v]))];
        store.commit(Stage::Fold, 3, old, &row(1), &[("t", 10)]).await.unwrap();
        let new = store.acquire(Stage::Fold, 3, "b").await.unwrap();
        assert_eq!(new, old + 1);
        let err = store.commit(Stage::Fold, 3, old, &row(2), &[("t", 5)]).await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<Fenced>(),
            Some(&Fenced { stage: "fold", partition: 3, ours: old, current: new })
        );
        assert_eq!(store.offset(Stage::Fold, "t", 3).await.unwrap(), Some(10), "the fenced commit wrote nothing");
        assert_eq!(store.states(Stage::Fold, Some(3)).await.unwrap()[0].2, vec![1]);
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
    a.kill();
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(b.port, &expected);
    // Round 2: a new member joins, gets half the partitions, is paused (SIGSTOP) with uncommitted work, its
    // partitions move back to b after the session timeout, more traffic arrives, then it resumes (SIGCONT):
    // its late writes are fenced in PostgreSQL and Redis.
    let c = ns.start(&["--flush-events", "1000", "--flush-interval-ms", "2000"]);
    std::thread::sleep(Duration::from_secs(3)); // rebalanced: c owns some partitions
    produce_dev_copies(&ns, &mut pipeline, 1);
    let expected = pipeline.views();
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill").args(["-STOP", &c.child.id().to_string()]).status().unwrap();
    ns.ok(&["lag", "--wait", "120"]); // b took over c's partitions after the session timeout and caught up
    assert_matches(b.port, &expected);
    Command::new("kill").args(["-CONT", &c.child.id().to_string()]).status().unwrap();
    std::thread::sleep(Duration::from_secs(5)); // c notices, tries to flush, is fenced, loses its partitions
    ns.ok(&["lag", "--wait", "120"]);
    assert_matches(b.port, &expected);
    let metrics = http_get(c.port, "/metrics").unwrap().1;
    let fenced: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("unread_fenced_tasks_total "))
        .and_then(|n| n.parse().ok())
        .expect("metric present");
    assert!(fenced >= 1, "the resumed instance's late checkpoints were fenced:\n{metrics}");
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
    ];
    assert!(cases.len() >= 30);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &stack.brokers)
        .set("partitioner", "murmur2_random")
        .set("message.max.bytes", "16777216")
        .create()
        .unwrap();
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
    for d in &dead {
        assert!(d.source_topic == topics.conversation_events || d.source_topic == topics.user_events, "{d:?}");
        assert!(!d.reason.is_empty() && d.source_offset.parse::<i64>().is_ok(), "{d:?}");
    }
    let big = dead.iter().find(|d| d.kind == "too_large").unwrap();
    assert!(rdkafka::Message::payload(&big.record).unwrap().len() > 10 << 20, "kept unchanged");
    let metrics = http_get(svc.port, "/metrics").unwrap().1;
    assert!(metrics.contains(r#"unread_dead_letter_records_total{kind="key_mismatch"} 2"#), "{metrics}");

    // `dead-letter list` shows them; `replay --kind` re-publishes the kind, which (still invalid) comes back.
    let listed = ns.ok(&["dead-letter", "list", "--limit", "5", "--kind", "key_mismatch"]);
    assert_eq!(listed.lines().filter(|l| l.contains("key_mismatch:")).count(), 2, "{listed}");
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
    produce_dev_copies(&ns, &mut pipeline, 2);
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

fn wait_port(port: u16, open: bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() != open {
        assert!(Instant::now() < deadline, "port {port} did not become {}", if open { "open" } else { "closed" });
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Resident memory of a process, in MiB.
fn rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 1024
}

/// A Redis server of the test's own (from the package scripts/stack installs), with no persistence.
struct PrivateRedis {
    child: Child,
    port: u16,
}

impl PrivateRedis {
    fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (installed by scripts/stack up)");
        wait_port(port, true);
        Self { child, port }
    }

    fn stop(mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        wait_port(self.port, false);
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
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
    assert!(svc_alive(&svc), "the service survived the Redis outage");
    let rss = rss_mib(svc.child.id());
    assert!(rss < 1024, "memory stayed bounded: {rss} MiB");
    let _redis = PrivateRedis::start(port); // back, and empty: the fold tasks must notice and rewrite everything
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    let metrics = http_get(svc.port, "/metrics").unwrap().1;
    assert!(metrics.contains(r#"unread_errors_total{store="redis"}"#), "the outage was seen: {metrics}");
    svc.stop();
    ns.cleanup();
}

fn svc_alive(svc: &Service) -> bool {
    std::fs::metadata(format!("/proc/{}", svc.child.id())).is_ok()
        && !std::fs::read_to_string(format!("/proc/{}/status", svc.child.id())).unwrap_or_default().contains("zombie")
}

/// A PostgreSQL cluster of the test's own (from the package scripts/stack installs).
struct PrivatePg {
    dir: std::path::PathBuf,
    port: u16,
    bin: std::path::PathBuf,
}

impl PrivatePg {
    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let as_root = unsafe_is_root();
        let mut c = if as_root { Command::new("runuser") } else { Command::new(&exe) };
        if as_root {
            c.args(["-u", "postgres", "--"]).arg(&exe);
        }
        let out = c.args(args).output().unwrap();
        assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn create() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL installed by scripts/stack up")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .max()
            .unwrap();
        let dir = std::env::temp_dir().join(format!("unread-it-pg-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        if unsafe_is_root() {
            Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status().unwrap();
        }
        let pg = Self { dir, port: free_port(), bin };
        let data = pg.dir.join("data");
        pg.run("initdb", &["-D", data.to_str().unwrap(), "-U", "unread", "--auth=trust"]);
        pg.start();
        pg.run("createdb", &["-h", "127.0.0.1", "-p", &pg.port.to_string(), "-U", "unread", "unread"]);
        pg
    }

    fn start(&self) {
        let data = self.dir.join("data");
        let opts = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.display());
        let log = self.dir.join("log");
        self.run("pg_ctl", &["-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", &opts, "-w", "start"]);
    }

    fn stop(&self) {
        self.run("pg_ctl", &["-D", self.dir.join("data").to_str().unwrap(), "-m", "fast", "-w", "stop"]);
    }

    fn url(&self) -> String {
        format!("postgres://unread@127.0.0.1:{}/unread", self.port)
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let exe = self.bin.join("pg_ctl");
        let mut c = if unsafe_is_root() { Command::new("runuser") } else { Command::new(&exe) };
        if unsafe_is_root() {
            c.args(["-u", "postgres", "--"]).arg(&exe);
        }
        c.args(["-D", data.to_str().unwrap(), "-m", "immediate", "stop"]).output().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

fn unsafe_is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false)
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
    assert!(svc_alive(&svc), "the service survived the PostgreSQL outage");
    let rss = rss_mib(svc.child.id());
    assert!(rss < 1024, "memory stayed bounded: {rss} MiB");
    pg.start();
    ns.ok(&["lag", "--wait", "120"]);
    assert_exact(svc.port);
    let metrics = http_get(svc.port, "/metrics").unwrap().1;
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
        format!("local p = {{{}}}\nlocal i = 0\nrequest = function()\n  i = i % #p + 1\n  return wrk.format(\"GET\", p[i])\nend\n", paths.join(",")),
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

/// A Kafka broker of the test's own, run from the jars `scripts/stack up` fetched (`.stack/kafka/libs`).
struct PrivateKafka {
    dir: std::path::PathBuf,
    port: u16,
    child: Option<Child>,
}

impl PrivateKafka {
    fn create() -> Self {
        let dir = std::env::temp_dir().join(format!("unread-it-kafka-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let (port, ctl) = (free_port(), free_port());
        std::fs::write(
            dir.join("server.properties"),
            format!(
                "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{ctl}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{ctl}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
                 inter.broker.listener.name=PLAINTEXT\nlistener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
                 log.dirs={}\noffsets.topic.replication.factor=1\noffsets.topic.num.partitions=4\n\
                 transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
                 group.initial.rebalance.delay.ms=0\nauto.create.topics.enable=false\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let k = Self { dir, port, child: None };
        let out = k
            .java(&["kafka.tools.StorageTool", "format", "-t", "aGVsbG8td29ybGQtMTIzNA", "-c"])
            .arg(k.dir.join("server.properties"))
            .output()
            .unwrap();
        assert!(out.status.success(), "format: {}", String::from_utf8_lossy(&out.stderr));
        k
    }

    fn java(&self, args: &[&str]) -> Command {
        let libs = repo_path(".stack/kafka/libs");
        assert!(libs.exists(), "Kafka jars missing: run scripts/stack up");
        let mut c = Command::new("java");
        c.args(["-Xms128m", "-Xmx512m", "-cp"]).arg(format!("{}/*", libs.display())).args(args);
        c
    }

    fn start(&mut self) {
        let log = std::fs::File::create(self.dir.join("kafka.out")).unwrap();
        let child = self
            .java(&["kafka.Kafka"])
            .arg(self.dir.join("server.properties"))
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_port(self.port, true);
        // An open port is not yet a broker that answers metadata (the controller may still be electing).
        let deadline = Instant::now() + Duration::from_secs(60);
        while unread::topology::partition_counts(&format!("127.0.0.1:{}", self.port)).is_err() {
            assert!(Instant::now() < deadline, "private Kafka did not answer metadata within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            Command::new("kill").args(["-TERM", &c.id().to_string()]).status().ok();
            let deadline = Instant::now() + Duration::from_secs(30);
            while c.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            c.kill().ok();
            c.wait().ok();
        }
        wait_port(self.port, false);
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
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
    };
    let ns = Ns::new(&private, "kafkarestart");
    let svc = ns.start(&["--flush-events", "1000"]);
    ns.ok(&["produce", &dev_events()]);
    std::thread::sleep(Duration::from_millis(300));
    kafka.stop();
    std::thread::sleep(Duration::from_secs(3));
    assert!(svc_alive(&svc), "the service survived the broker stop");
    kafka.start();
    ns.ok(&["lag", "--wait", "180"]);
    assert_exact(svc.port);
    svc.stop();
    ns.cleanup();
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
    assert!(!out.status.success(), "verify must fail when Redis differs: {text}");
    assert!(text.contains("differing: 2") && text.contains("[[mandrix]]") && text.contains("epod"), "{text}");
    assert!(text.contains("unread: 169") && text.contains("unread: 7"), "field by field: {text}");
    let out = ns.ok(&["verify", "--repair"]);
    assert!(out.contains("differing: 2") && out.contains("repaired: 2"), "{out}");
    let out = ns.ok(&["verify", "--sample", "200"]);
    assert!(out.contains("users checked: 200") && out.contains("differing: 0"), "{out}");
    let api = ns.start(&["--roles", "api"]);
    assert_exact(api.port);
    api.stop();
    ns.cleanup();
}
