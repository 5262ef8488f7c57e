//! The load of `scripts/bench-diffusion`: one huge conversation, its members joined first (not timed), then its
//! messages; reports the time to ingest the messages (first produced → lag zero, every count in Redis and
//! PostgreSQL), the bytes Redis received and the PostgreSQL WAL written meanwhile, and the read latency of the API
//! for random members afterwards.
//!
//! - `channel`: a channel, its messages from member 0; member 1's `unread` ends at the number of messages.
//! - `feed`: a feed (`conversation.created` kind `feed`) whose members are followers, its posts from the author
//!   (member 0); member 1's `feed_unread` ends at the number of posts.
//! - `threads`: a channel whose one thread (a root from member 0) is followed by the first `DIFFUSION_FOLLOWERS`
//!   members after member 1 (300 by default; member 0 follows as the root's author); its messages are replies
//!   in that thread from member 1. Member 2's unread in the thread ends at the number of replies. Also reports
//!   the records written to `unread.user-deltas` per reply.
//!
//! Usage: diffusion API_URL BROKERS TOPIC_PREFIX KIND MEMBERS MESSAGES UNREAD_BIN
//! (the API runs with --insecure-no-auth; the environment holds the service's settings, for `unread lag`).

use std::process::Command;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use rdkafka::producer::{FutureProducer, FutureRecord};

const CONVERSATION: &str = "huge";
const READS: usize = 5000;

fn event(kind: &str) -> serde_json::Value {
    serde_json::json!({"type": kind, "event_id": "b", "occurred_at": "2026-01-01T00:00:00Z",
        "conversation_id": CONVERSATION})
}

/// Produces the events keyed by the conversation (by user for a user event), in order, with up to 10,000 in
/// flight.
async fn produce(producer: &FutureProducer, topic: &str, events: impl Iterator<Item = serde_json::Value>) {
    let mut in_flight = FuturesUnordered::new();
    for e in events {
        let payload = e.to_string();
        let key = if topic.ends_with("user-events") { e["user_id"].as_str().unwrap() } else { CONVERSATION };
        let mut record = FutureRecord::to(topic).key(key).payload(&payload);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => break in_flight.push(delivery),
                Err((_, back)) => {
                    record = back; // the local queue is full: wait for some acknowledgements
                    in_flight.next().await.expect("in flight").expect("delivered").expect("produce");
                }
            }
        }
        while in_flight.len() >= 10_000 {
            in_flight.next().await.expect("in flight").expect("delivered").expect("produce");
        }
    }
    while let Some(r) = in_flight.next().await {
        r.expect("delivered").expect("produce");
    }
}

/// Runs `unread lag --wait 30m` (the settings come from the environment).
fn wait_for_zero_lag(bin: &str) {
    let out = Command::new(bin).args(["lag", "--wait", "30m"]).output().expect("unread lag");
    assert!(out.status.success(), "unread lag: {}", String::from_utf8_lossy(&out.stderr));
}

/// (bytes Redis received, summed over a cluster's masters, bytes of PostgreSQL WAL) so far.
async fn written(masters: &[String], pg: &sqlx::PgPool) -> (u64, u64) {
    let mut net = 0;
    for url in masters {
        let mut redis = redis::Client::open(url.as_str()).unwrap().get_multiplexed_async_connection().await.unwrap();
        let info: String = redis::cmd("INFO").arg("stats").query_async(&mut redis).await.expect("INFO");
        let n = info.lines().find_map(|l| l.strip_prefix("total_net_input_bytes:")).expect("total_net_input_bytes");
        net += n.trim().parse::<u64>().expect("a number");
    }
    let wal: i64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
        .fetch_one(pg)
        .await
        .expect("WAL position");
    (net, wal as u64)
}

/// Member 1's count of the conversation (member 2's of the thread), over HTTP.
fn probe(agent: &ureq::Agent, api: &str, kind: &str) -> u64 {
    let who = if kind == "threads" { 2 } else { 1 };
    let body = agent
        .get(&format!("{api}/v1/users/m-{who}/unread"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok());
    let v: serde_json::Value = serde_json::from_str(&body.unwrap_or_default()).unwrap_or_default();
    match kind {
        "feed" => v["feed_unread"].as_u64().unwrap_or(0),
        "threads" => v["threads"][CONVERSATION]["1"]["unread"].as_u64().unwrap_or(0),
        _ => v["conversations"][CONVERSATION]["unread"].as_u64().unwrap_or(0),
    }
}

/// Records in `unread.user-deltas` so far, over its partitions.
fn delta_records(brokers: &str, prefix: &str) -> i64 {
    let topic = format!("{prefix}unread.user-deltas");
    let client = unread::kafka::metadata_client(brokers).expect("a metadata client");
    let n = unread::kafka::partition_count(&client, &topic).expect("the delta topic");
    unread::kafka::watermarks(&client, &topic, n).expect("watermarks").iter().map(|(low, high)| high - low).sum()
}

/// `threads`: the root (member 0's message 1) and the follows of the thread, then the replies of member 1.
async fn thread_setup(
    producer: &FutureProducer,
    prefix: &str,
    members: u64,
) -> impl Iterator<Item = serde_json::Value> {
    let followers: u64 = std::env::var("DIFFUSION_FOLLOWERS").map_or(300, |n| n.parse().expect("a number"));
    let mut root = event("message.sent");
    (root["seq"], root["sender_id"], root["mentions"]) = (1.into(), "m-0".into(), serde_json::json!([]));
    produce(producer, &format!("{prefix}unread.conversation-events"), std::iter::once(root)).await;
    let follows = (2..2 + followers.min(members - 2)).map(|i| {
        let mut e = event("thread.followed");
        (e["user_id"], e["thread_root"], e["followed"]) = (format!("m-{i}").into(), 1.into(), true.into());
        e
    });
    produce(producer, &format!("{prefix}unread.user-events"), follows).await;
    (2..).map(|seq: u64| {
        let mut e = event("message.sent");
        (e["seq"], e["sender_id"], e["mentions"], e["thread_root"]) =
            (seq.into(), "m-1".into(), serde_json::json!([]), 1.into());
        e
    })
}

/// (p50, p99, max) in ms of `READS` reads of random members, one at a time over one connection.
fn read_latency(agent: &ureq::Agent, api: &str, members: u64) -> (f64, f64, f64) {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut took: Vec<f64> = (0..READS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let started = Instant::now();
            let mut r = agent.get(&format!("{api}/v1/users/m-{}/unread", x % members)).call().expect("read");
            r.body_mut().read_to_string().expect("body");
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() as f64 * q) as usize).min(took.len() - 1)];
    (at(0.5), at(0.99), took[took.len() - 1])
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, api, brokers, prefix, kind, members, messages, bin] = &args[..] else {
        panic!("usage: diffusion API_URL BROKERS TOPIC_PREFIX KIND MEMBERS MESSAGES UNREAD_BIN");
    };
    let (members, messages): (u64, u64) = (members.parse().unwrap(), messages.parse().unwrap());
    let topic = format!("{prefix}unread.conversation-events");
    let producer: FutureProducer = unread::kafka::producer_config(brokers).create().expect("producer");
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let mut created = event("conversation.created");
    (created["kind"], created["members"]) =
        ((if kind == "feed" { "feed" } else { "channel" }).into(), serde_json::json!([]));
    let joins = (0..members).map(|i| {
        let mut e = event("member.joined");
        e["user_id"] = format!("m-{i}").into();
        e
    });
    let started = Instant::now();
    produce(&producer, &topic, std::iter::once(created).chain(joins)).await;
    wait_for_zero_lag(bin);
    eprintln!("setup: {members} members joined in {:.1} s", started.elapsed().as_secs_f64());
    // The benchmark's hook to measure the joins apart (the CPU of every process while they were folded).
    if let Ok(hook) = std::env::var("DIFFUSION_AFTER_JOINS") {
        let status =
            std::process::Command::new("sh").arg("-c").arg(&hook).status().expect("running DIFFUSION_AFTER_JOINS");
        assert!(status.success(), "DIFFUSION_AFTER_JOINS failed: {status}");
    }
    let redis_url = std::env::var("UNREAD_REDIS_URL").expect("UNREAD_REDIS_URL");
    let projection = unread::projection::redis::RedisProjection::connect(&redis_url, "").await.unwrap();
    let masters = projection.masters().await.unwrap();
    let pg = sqlx::PgPool::connect(&std::env::var("UNREAD_DATABASE_URL").expect("UNREAD_DATABASE_URL")).await.unwrap();
    let sends: Box<dyn Iterator<Item = serde_json::Value>> = match kind.as_str() {
        "threads" => {
            let replies = thread_setup(&producer, prefix, members).await;
            wait_for_zero_lag(bin);
            Box::new(replies.take(messages as usize))
        }
        _ => Box::new((1..=messages).map(|seq| {
            let mut e = event("message.sent");
            (e["seq"], e["sender_id"], e["mentions"]) = (seq.into(), "m-0".into(), serde_json::json!([]));
            e
        })),
    };
    let (before, records_before) = (written(&masters, &pg).await, delta_records(brokers, prefix));
    let started = Instant::now();
    produce(&producer, &topic, sends).await;
    while probe(&agent, api, kind) < messages {
        std::thread::sleep(Duration::from_millis(20));
    }
    let visible = started.elapsed().as_secs_f64();
    wait_for_zero_lag(bin);
    let ingest = started.elapsed().as_secs_f64();
    let (after, records) = (written(&masters, &pg).await, delta_records(brokers, prefix) - records_before);
    assert_eq!(probe(&agent, api, kind), messages, "exact at lag 0");
    if kind == "threads" {
        let last = agent.get(&format!("{api}/v1/users/m-{}/unread", members - 1)).call();
        let body = last.expect("a read").body_mut().read_to_string().expect("a body");
        assert!(body.contains(r#""threads":{}"#), "the last member follows no thread: {body}");
    }
    let (p50, p99, max) = read_latency(&agent, api, members);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let who = if kind == "threads" { 2 } else { 1 };
    println!(
        "{kind}: {members} members, {messages} messages: visible to member {who} in {visible:.2} s, ingested (lag 0) \
         in {ingest:.2} s; Redis received {:.2} MiB, PostgreSQL WAL {:.2} MiB, {:.3} delta records per message; \
         read p50 {p50:.2} ms p99 {p99:.2} ms max {max:.2} ms ({READS} reads)",
        mib(after.0 - before.0),
        mib(after.1 - before.1),
        records as f64 / messages as f64
    );
}
