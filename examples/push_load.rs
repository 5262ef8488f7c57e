//! The load of `scripts/bench-push`: N WebSocket clients on the stream of the users of an expected-state file
//! (several clients per user, like devices), while `unread produce` sends an events file and probes mark
//! conversations muted and unmuted through the write gateway.
//!
//! Prints: connect time, the server's memory per connection (RSS after connecting minus before, over N), messages
//! received and messages/s over the produce and probe window (at least 10 s), produce-to-client latency p50/p99/max of the probes (from just before
//! the gateway POST to a client seeing the change), and how many clients end with a state different from what the
//! API answers for their user after the lag is zero.
//!
//! The probes cycle through [`PROBED`] users, toggling mute on a conversation of the rig's own,
//! [`PROBE_CONVERSATION`], which they join before the clients connect. A probe of a conversation of the set itself
//! could name one the user joins only later in the set: the mute is then kept, but shows (contract: `conversations`
//! lists the conversations U is a member of) only once the fan-out has delivered the join, so its latency would be the
//! join's, not the user event's.
//!
//! Usage: push_load API_URL SERVER_PID EXPECTED_JSONL EVENTS_FILE CLIENTS   (the API runs with --insecure-no-auth)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use unread::api::stream::SOCKET_BUFFER_BYTES;
use unread::core::changes::{apply, Changes};
use unread::core::contract::UserView;

/// A probe in flight: user → (muted value sent, when); the conversation is [`PROBE_CONVERSATION`].
type Probes = Mutex<HashMap<String, (bool, Instant)>>;

/// How many users the probes cycle through.
const PROBED: usize = 200;
/// The conversation the probed users join before the load, and whose mute the probes toggle.
const PROBE_CONVERSATION: &str = "push-load.probes";

#[derive(Default)]
struct Shared {
    probes: Probes,
    /// (when the probe was sent, how long until a client saw it), one per client
    latencies: Mutex<Vec<(Instant, Duration)>>,
    /// (when the probe was sent, how long its POST took to be answered 202: the gateway's produce)
    accepted: Mutex<Vec<(Instant, Duration)>>,
    messages: AtomicU64,
    views: Mutex<Vec<(String, UserView)>>,
}

fn encode(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix(" kB")?.parse().ok()).unwrap_or(0)
}

/// One client: applies messages until `done`, then hands its view over.
async fn client(
    ws: String,
    user: String,
    shared: Arc<Shared>,
    ready: tokio::sync::mpsc::Sender<()>,
    done: Arc<tokio::sync::Notify>,
) {
    // The server's buffer size, not tungstenite's default 128 KiB each way: 10,000 clients would hold gigabytes in
    // this one process while the service is measured.
    let config =
        WebSocketConfig::default().read_buffer_size(SOCKET_BUFFER_BYTES).write_buffer_size(SOCKET_BUFFER_BYTES);
    let url = format!("{ws}/v1/users/{}/stream", encode(&user));
    let (mut socket, _) =
        tokio_tungstenite::connect_async_with_config(url, Some(config), false).await.expect("connect");
    let (mut view, mut version) = (UserView::default(), 0u64);
    let mut first = Some(ready);
    let finished = done.notified();
    tokio::pin!(finished);
    loop {
        let message = tokio::select! {
            m = socket.next() => m,
            () = &mut finished => break,
        };
        let Some(Ok(Message::Text(text))) = message else { continue };
        let m: serde_json::Value = serde_json::from_str(&text).unwrap();
        let v = m["version"].as_u64().unwrap();
        if m["type"] == "state" {
            view = serde_json::from_value(m["state"].clone()).unwrap();
            version = v;
            if let Some(r) = first.take() {
                r.send(()).await.ok();
            }
        } else if v > version {
            let changes: Changes = serde_json::from_value(m).unwrap();
            apply(&mut view, &changes);
            version = v;
            shared.messages.fetch_add(1, Ordering::Relaxed);
            observe_probe(&shared, &user, &changes);
        }
    }
    shared.views.lock().unwrap().push((user, view));
}

fn observe_probe(shared: &Shared, user: &str, changes: &Changes) {
    let probes = shared.probes.lock().unwrap();
    let Some((muted, sent)) = probes.get(user) else { return };
    if changes.conversations.get(PROBE_CONVERSATION).is_some_and(|c| c.is_some_and(|c| c.muted == *muted)) {
        shared.latencies.lock().unwrap().push((*sent, sent.elapsed()));
    }
}

/// Makes the probed users members of [`PROBE_CONVERSATION`] (one `conversation.created` through `unread produce`)
/// and waits until it is folded.
async fn join_probed(unread: &str, members: &[String]) {
    let event = serde_json::json!({"type": "conversation.created", "event_id": "push-load.probes#1",
        "occurred_at": "2020-01-01T00:00:00Z", "conversation_id": PROBE_CONVERSATION, "kind": "group", "members": members});
    let file = std::env::temp_dir().join(format!("push_load_probes_{}.jsonl", std::process::id()));
    std::fs::write(&file, format!("{event}\n")).unwrap();
    for args in [vec!["produce", file.to_str().unwrap()], vec!["lag", "--wait", "1m"]] {
        let status = tokio::process::Command::new(unread)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(status.success(), "unread {} failed", args[0]);
    }
    std::fs::remove_file(file).ok();
}

/// Toggles mute on [`PROBE_CONVERSATION`] for one of `users` after another, every 50 ms after the last POST was
/// answered, until `stop`.
async fn probe(api: String, users: Vec<String>, shared: Arc<Shared>, stop: Arc<std::sync::atomic::AtomicBool>) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let user = &users[(i * 7919) % users.len()];
        i += 1;
        let muted = shared.probes.lock().unwrap().get(user).is_none_or(|p| !p.0);
        let sent = Instant::now();
        shared.probes.lock().unwrap().insert(user.clone(), (muted, sent));
        let path = format!("/v1/users/{}/conversations/{}/mute", encode(user), encode(PROBE_CONVERSATION));
        let (agent, url) = (agent.clone(), format!("{api}{path}"));
        let body = format!("{{\"muted\":{muted}}}");
        let posted =
            tokio::task::spawn_blocking(move || agent.post(&url).header("content-type", "application/json").send(body));
        if !matches!(posted.await, Ok(Ok(r)) if r.status().as_u16() == 202) {
            eprintln!("a probe was not accepted");
        }
        shared.accepted.lock().unwrap().push((sent, sent.elapsed()));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Prints the three probes seen last: when each was sent (after the produce began), how long its POST took, and
/// how long until its first client saw it.
fn slowest(seen: &[(Instant, Duration)], posts: &[(Instant, Duration)], t0: Instant) {
    let mut first: HashMap<Instant, Duration> = HashMap::new();
    for (sent, l) in seen {
        first.entry(*sent).and_modify(|f| *f = (*f).min(*l)).or_insert(*l);
    }
    let mut probes: Vec<(Instant, Duration)> = first.into_iter().collect();
    probes.sort_by_key(|(_, l)| std::cmp::Reverse(*l));
    for (sent, l) in probes.iter().take(3) {
        let post = posts.iter().find(|(s, _)| s == sent).map_or(f64::NAN, |(_, p)| p.as_secs_f64() * 1000.0);
        println!(
            "  a slowest probe: sent {:.0} ms after the produce began, POST answered in {post:.1} ms, first seen after {:.1} ms",
            sent.saturating_duration_since(t0).as_secs_f64() * 1000.0,
            l.as_secs_f64() * 1000.0
        );
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, api, pid, expected, events, clients] = &args[..] else {
        panic!("usage: push_load API_URL SERVER_PID EXPECTED_JSONL EVENTS_FILE CLIENTS")
    };
    let n: usize = clients.parse().unwrap();
    let users: Vec<UserView> =
        std::fs::read_to_string(expected).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ws = api.replacen("http://", "ws://", 1);
    let shared = Arc::new(Shared::default());
    let done = Arc::new(tokio::sync::Notify::new());
    let unread = std::env::var("UNREAD_BIN").unwrap_or_else(|_| "target/release/unread".into());
    let probed: Vec<String> = users.iter().take(PROBED).map(|u| u.user_id.clone()).collect();
    join_probed(&unread, &probed).await;
    let rss_before = rss_kib(pid);
    let (ready_tx, mut ready) = tokio::sync::mpsc::channel(n);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let user = users[i % users.len()].user_id.clone();
        tasks.push(tokio::spawn(client(ws.clone(), user, shared.clone(), ready_tx.clone(), done.clone())));
        if i % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(20)).await; // the accept queue
        }
    }
    for _ in 0..n {
        ready.recv().await;
    }
    let connected = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = rss_kib(pid);
    println!(
        "clients: {n} on {} users, all with their state after {:.2} s",
        users.len().min(n),
        connected.as_secs_f64()
    );
    println!(
        "server RSS: {} MiB before, {} MiB after: {:.1} KiB per connection",
        rss_before / 1024,
        rss_after / 1024,
        (rss_after.saturating_sub(rss_before)) as f64 / n as f64
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = tokio::spawn(probe(api.clone(), probed, shared.clone(), stop.clone()));
    let t0 = Instant::now();
    let status = tokio::process::Command::new(&unread)
        .args(["produce", events])
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(status.success(), "unread produce failed");
    let status = tokio::process::Command::new(&unread)
        .args(["lag", "--wait", "5m"])
        .stdout(std::process::Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(status.success(), "unread lag failed");
    let (lag_zero, produce_secs) = (Instant::now(), t0.elapsed().as_secs_f64());
    println!("dev set produced and folded (lag 0) in {produce_secs:.2} s; probing until 10 s have passed");
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(t0.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    prober.await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await; // the last probes' messages
    let messages = shared.messages.load(Ordering::Relaxed);
    done.notify_waiters();
    for t in tasks {
        t.await.unwrap();
    }
    report(api, &shared, messages, t0.elapsed().as_secs_f64() - 3.0, (t0, lag_zero)).await;
}

async fn report(api: &str, shared: &Shared, messages: u64, secs: f64, (t0, lag_zero): (Instant, Instant)) {
    let all = shared.latencies.lock().unwrap().clone();
    let posts = shared.accepted.lock().unwrap().clone();
    let sorted = |from: &[(Instant, Duration)], during: Option<bool>| {
        let mut l: Vec<Duration> =
            from.iter().filter(|(sent, _)| during.is_none_or(|d| (*sent < lag_zero) == d)).map(|(_, l)| *l).collect();
        l.sort();
        l
    };
    for (name, during) in [("sent while the dev set was produced", true), ("sent after", false)] {
        let (l, p) = (sorted(&all, Some(during)), sorted(&posts, Some(during)));
        println!(
            "  {name}: {} deliveries, p50 {:.1} ms, p99 {:.1} ms; their {} POSTs answered in p50 {:.1} ms, max {:.1} ms",
            l.len(),
            percentile(&l, 0.5),
            percentile(&l, 0.99),
            p.len(),
            percentile(&p, 0.5),
            percentile(&p, 1.0)
        );
    }
    slowest(&all, &posts, t0);
    let lat = sorted(&all, None);
    println!(
        "messages received: {messages} in {secs:.2} s (the produce and the probes): {:.0} messages/s",
        messages as f64 / secs
    );
    println!(
        "produce-to-client latency over {} probe deliveries: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0)
    );
    let views = std::mem::take(&mut *shared.views.lock().unwrap());
    let mut truth: HashMap<String, UserView> = HashMap::new();
    let mut missing = 0;
    for (user, view) in &views {
        if !truth.contains_key(user) {
            let url = format!("{api}/v1/users/{}/unread", encode(user));
            let body = tokio::task::spawn_blocking(move || {
                ureq::get(&url).call().unwrap().body_mut().read_to_string().unwrap()
            });
            truth.insert(user.clone(), serde_json::from_str(&body.await.unwrap()).unwrap());
        }
        if truth[user] != *view {
            missing += 1;
            if missing <= 3 {
                eprintln!("differs: {user:?}\n  client {view:?}\n  API    {:?}", truth[user]);
            }
        }
    }
    println!("clients whose last state differs from the API's: {missing} of {}", views.len());
}
