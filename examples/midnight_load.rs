//! The load of `scripts/bench-midnight`: N WebSocket clients, one per user, each of whose unread expires at the
//! same midnight UTC of the service's clock (contract v3). Measures, in one run, how long the hub takes to give
//! every socket its first state after connecting (the baseline: the same reads, asked for by the clients), and how
//! long after the midnight every socket has the expired counts (no event is produced: the hub's own timer).
//!
//! Usage: midnight_load API_URL USERS REAL_MIDNIGHT_UNIX_MS [FIRST]   (the API runs with --insecure-no-auth;
//! users are `u{FIRST}` … `u{FIRST+USERS-1}`, FIRST 0 by default, each with total_unread 1 before the midnight and
//! 0 after). Several processes, each with its share of the users and its own API instance, make a load larger
//! than one process's descriptors allow (`scripts/bench-midnight`); each ends with one `result` line that the
//! script sums.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use unread::api::stream::SOCKET_BUFFER_BYTES;

/// What the clients saw: when each had its first state (after the connect began), and how long after the midnight
/// each saw total_unread 0.
#[derive(Default)]
struct Seen {
    states: Mutex<Vec<Duration>>,
    expired: Mutex<Vec<Duration>>,
    wrong_before: Mutex<usize>,
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis()
}

/// One client: its first state must show 1 unread; then it waits for a change to 0.
async fn client(
    ws: String,
    user: String,
    started: Instant,
    midnight_ms: u128,
    seen: Arc<Seen>,
    connecting: tokio::sync::OwnedSemaphorePermit,
) {
    let url = format!("{ws}/v1/users/{user}/stream");
    // The server's buffer size: tungstenite's default 128 KiB each way made a client process of 9,000 sockets hold
    // 1.2 GiB, which the load generator paid for at the midnight.
    let config =
        WebSocketConfig::default().read_buffer_size(SOCKET_BUFFER_BYTES).write_buffer_size(SOCKET_BUFFER_BYTES);
    let connected = tokio_tungstenite::connect_async_with_config(url, Some(config), false).await;
    drop(connecting);
    let Ok((mut socket, _)) = connected else { return };
    while let Some(Ok(message)) = socket.next().await {
        let Message::Text(text) = message else { continue };
        let m: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        if m["type"] == "state" {
            seen.states.lock().unwrap().push(started.elapsed());
            if m["state"]["total_unread"] != 1 {
                *seen.wrong_before.lock().unwrap() += 1;
            }
        } else if m["totals"]["total_unread"] == 0 {
            let late = now_ms().saturating_sub(midnight_ms);
            seen.expired.lock().unwrap().push(Duration::from_millis(late as u64));
            return;
        }
    }
}

fn percentile(xs: &mut [Duration], p: f64) -> f64 {
    xs.sort_unstable();
    xs.get(((xs.len().max(1) - 1) as f64 * p).round() as usize).map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (api, users, midnight, first) = match &args[..] {
        [_, api, users, midnight] => (api, users, midnight, "0"),
        [_, api, users, midnight, first] => (api, users, midnight, first.as_str()),
        _ => panic!("usage: midnight_load API_URL USERS REAL_MIDNIGHT_UNIX_MS [FIRST]"),
    };
    let (n, midnight_ms): (usize, u128) = (users.parse().unwrap(), midnight.parse().unwrap());
    let first: usize = first.parse().unwrap();
    let ws = api.replacen("http://", "ws://", 1);
    let (seen, started) = (Arc::new(Seen::default()), Instant::now());
    let gate = Arc::new(tokio::sync::Semaphore::new(500)); // connects in flight
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = gate.clone().acquire_owned().await.unwrap();
        let (ws, seen) = (ws.clone(), seen.clone());
        tasks.push(tokio::spawn(client(ws, format!("u{}", first + i), started, midnight_ms, seen, permit)));
    }
    while seen.states.lock().unwrap().len() < n && started.elapsed() < Duration::from_secs(300) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut states = seen.states.lock().unwrap().clone();
    let connected = states.len();
    let all_states = states.iter().max().copied().unwrap_or_default();
    println!(
        "baseline: {connected} of {n} sockets had their first state {:.1} s after the first connect began (p50 {:.0} ms \
         after it)",
        all_states.as_secs_f64(),
        percentile(&mut states, 0.5)
    );
    let wait = midnight_ms.saturating_sub(now_ms());
    if wait == 0 {
        println!("the midnight passed before every socket was connected: the run measures nothing");
        std::process::exit(1);
    }
    println!("midnight in {:.1} s; waiting", wait as f64 / 1000.0);
    let deadline = Instant::now() + Duration::from_millis(wait as u64) + Duration::from_secs(60);
    while seen.expired.lock().unwrap().len() < connected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut expired = seen.expired.lock().unwrap().clone();
    let within = expired.iter().filter(|d| **d <= Duration::from_secs(5)).count();
    let (p50, p99) = (percentile(&mut expired, 0.5), percentile(&mut expired, 0.99));
    let max = expired.iter().max().copied().unwrap_or_default().as_secs_f64() * 1000.0;
    println!(
        "at midnight: {} of {connected} sockets got the expired counts; after the midnight p50 {p50:.0} ms, p99 \
         {p99:.0} ms, max {max:.0} ms; within 5 s: {within}",
        expired.len()
    );
    let wrong = *seen.wrong_before.lock().unwrap();
    println!("wrong counts before midnight: {wrong}");
    println!(
        "result sockets={n} connected={connected} expired={} within5s={within} max_ms={max:.0} first_states_s={:.1} \
         wrong={wrong}",
        expired.len(),
        all_states.as_secs_f64()
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).map_or("?", str::trim);
    println!("this client process's peak RSS: {peak}");
    let met = within == connected && connected == n;
    println!("target (every socket within 5 s of the midnight): {}", if met { "met" } else { "NOT met" });
    tasks.into_iter().for_each(|t| t.abort());
}
