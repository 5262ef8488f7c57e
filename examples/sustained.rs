//! The load of `scripts/bench-sustained`: messages produced at a fixed rate for a fixed time into synthetic
//! conversations, while one watcher per conversation follows its stream; reports produce-to-visible latency (a
//! message produced → the watcher's count including it, read from Redis and pushed), the service's lag, CPU and RSS
//! over time.
//!
//! Setup (not timed): `CONVERSATIONS` conversations of `MEMBERS` members each (`conversation.created`). Then
//! messages round-robin over the conversations, from member 0; member 1 of each conversation is the watcher and
//! never reads, so its `unread` after the k-th message of its conversation is k. A push with `unread` = n makes
//! every message up to the n-th visible: each gets its latency from its own produce time. Messages are enqueued in
//! the producer one after the other, so a conversation's seqs reach Kafka in order (one sent task per message, as
//! before 2026-11-25, let a later seq overtake an earlier one under load, which the contract then counts as a
//! duplicate: ~0.1% of the messages at 10,000/s and up were never visible, and left out of the percentiles).
//!
//! Usage: sustained API_URL ADMIN_URLS SERVER_PIDS BROKERS TOPIC RATE SECONDS   (the API runs with
//! --insecure-no-auth; ADMIN_URLS, each instance's admin address scraped for lag and steps, and SERVER_PIDS are
//! comma-separated, their CPU and RSS summed).
//!
//! Scale-out events (optional, environment): `SUSTAINED_JOIN_AT=S` with `SUSTAINED_JOIN_CMD` (a bash command that
//! starts one more instance in the background; `SUSTAINED_JOIN_NAME` names it in the report) runs it S seconds into
//! the load; `SUSTAINED_KILL_AT=S` with
//! `SUSTAINED_KILL_PID` SIGKILLs that instance then. For each, the report gives the latency of the messages
//! produced after it (until the next event, at most 15 s) and when its partitions were served again: the last
//! moment a message produced in that window with a latency over 1 s became visible, counted from the event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};

const CONVERSATIONS: usize = 200;
const MEMBERS: usize = 20;

/// conversation → produce time of its k-th message (index k - 1), and how many the watcher has seen.
#[derive(Default)]
struct Book {
    sent: HashMap<String, Vec<Instant>>,
    seen: HashMap<String, usize>,
    /// (produced at, latency) of every message seen.
    latencies: Vec<(Instant, Duration)>,
}

fn conversation(c: usize) -> String {
    format!("sustained-{c}")
}

fn member(c: usize, m: usize) -> String {
    format!("s{c}-{m}")
}

async fn send(producer: &FutureProducer, topic: &str, key: &str, event: serde_json::Value) {
    enqueue(producer, topic, key, event).await.await.expect("delivered").expect("produced");
}

/// Enqueues a record in the producer (waiting while its queue is full) and returns its delivery: records enqueued
/// one after the other keep their order in their partition (the producer is idempotent). A message of a
/// conversation must not overtake an earlier one: the contract counts a seq not above the head as a duplicate.
async fn enqueue(producer: &FutureProducer, topic: &str, key: &str, event: serde_json::Value) -> DeliveryFuture {
    let payload = event.to_string();
    let mut record = FutureRecord::to(topic).key(key).payload(&payload);
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return delivery,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((e, _)) => panic!("produce: {e}"),
        }
    }
}

/// One watcher: applies pushes and records when each message became visible.
async fn watcher(ws: String, c: usize, book: Arc<Mutex<Book>>) {
    let url = format!("{ws}/v1/users/{}/stream", member(c, 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.expect("connect");
    let id = conversation(c);
    while let Some(Ok(message)) = socket.next().await {
        let Ok(text) = message.into_text() else { continue };
        let m: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let unread = m["conversations"][&id]["unread"].as_u64().or(m["state"]["conversations"][&id]["unread"].as_u64());
        let Some(unread) = unread else { continue };
        let now = Instant::now();
        let mut book = book.lock().unwrap();
        let seen = book.seen.get(&id).copied().unwrap_or(0);
        let visible: Vec<(Instant, Duration)> = book
            .sent
            .get(&id)
            .map_or(Vec::new(), |s| s.iter().take(unread as usize).skip(seen).map(|t| (*t, now - *t)).collect());
        book.latencies.extend(visible);
        book.seen.insert(id.clone(), seen.max(unread as usize));
    }
}

/// (total lag, CPU seconds per instance, RSS KiB) of the service now: lag and RSS summed over the instances still
/// running (`admins`, their admin addresses, and `pids` comma-separated), CPU per pid (0 once gone).
fn sample(admins: &str, pids: &str) -> (i64, Vec<f64>, u64) {
    let (mut cpu, mut rss) = (Vec::new(), 0);
    for pid in pids.split(',') {
        let (c, r) = usage(pid);
        cpu.push(c);
        rss += r;
    }
    (admins.split(',').map(lag).sum(), cpu, rss)
}

/// One instance's metrics text, from its admin address; empty when it does not answer.
fn scrape(admin: &str) -> String {
    let metrics =
        ureq::get(&format!("{admin}/metrics")).call().ok().and_then(|mut r| r.body_mut().read_to_string().ok());
    metrics.unwrap_or_default()
}

/// One instance's lag (of the partitions it holds), from its metrics; 0 when it does not answer.
fn lag(admin: &str) -> i64 {
    scrape(admin)
        .lines()
        .filter(|l| l.starts_with("unread_partition_lag{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as i64
}

/// (CPU seconds, RSS KiB) of one process (0 when it is gone).
fn usage(pid: &str) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or_default().split(' ').collect();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix(" kB")?.parse().ok()).unwrap_or(0);
    (ticks / 100.0, rss)
}

fn ms(sorted: &[Duration], p: f64) -> f64 {
    sorted.get(((sorted.len().max(1) - 1) as f64 * p).round() as usize).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, api, admins, pid, brokers, topic, rate, seconds] = &args[..] else {
        panic!("usage: sustained API_URL ADMIN_URLS SERVER_PIDS BROKERS TOPIC RATE SECONDS")
    };
    let api = api.to_owned();
    let (rate, seconds): (u64, u64) = (rate.parse().unwrap(), seconds.parse().unwrap());
    let producer: FutureProducer = unread::kafka::producer_config(brokers).set("linger.ms", "5").create().unwrap();
    let occurred = "2026-11-22T00:00:00Z";
    for c in 0..CONVERSATIONS {
        let members: Vec<String> = (0..MEMBERS).map(|m| member(c, m)).collect();
        let event = serde_json::json!({"type": "conversation.created", "event_id": format!("sc-{c}"), "occurred_at": occurred,
            "conversation_id": conversation(c), "kind": "group", "members": members});
        send(&producer, topic, &conversation(c), event).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await; // the members are known before the watchers connect
    let book = Arc::new(Mutex::new(Book::default()));
    let ws = api.replacen("http://", "ws://", 1);
    for c in 0..CONVERSATIONS {
        tokio::spawn(watcher(ws.clone(), c, book.clone()));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let total = rate * seconds;
    let started = Instant::now();
    let events = scale_out_events(started);
    let mut samples = Vec::new();
    let mut next_sample = Instant::now();
    let mut seqs = vec![0u64; CONVERSATIONS];
    for i in 0..total {
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let c = (i as usize) % CONVERSATIONS;
        seqs[c] += 1;
        let id = conversation(c);
        let event = serde_json::json!({"type": "message.sent", "event_id": format!("sm-{i}"), "occurred_at": occurred,
            "conversation_id": id, "seq": seqs[c], "sender_id": member(c, 0)});
        book.lock().unwrap().sent.entry(id.clone()).or_default().push(Instant::now());
        let delivery = enqueue(&producer, topic, &id, event).await;
        tokio::spawn(async move { delivery.await.expect("delivered").expect("produced") });
        if Instant::now() >= next_sample {
            let (admins, pid) = (admins.clone(), pid.clone());
            samples
                .push((started.elapsed(), tokio::task::spawn_blocking(move || sample(&admins, &pid)).await.unwrap()));
            next_sample += Duration::from_secs(1);
        }
    }
    let produced_in = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await; // the last messages become visible
    let (a, p) = (admins.clone(), pid.clone());
    samples.push((started.elapsed(), tokio::task::spawn_blocking(move || sample(&a, &p)).await.unwrap()));
    report(&book, total, produced_in, &samples);
    let metrics: Vec<String> = admins.split(',').map(scrape).collect();
    report_steps(&book.lock().unwrap(), rate, &metrics, &samples);
    let events = events.await.unwrap();
    for (i, (name, at)) in events.iter().enumerate() {
        let until = events.get(i + 1).map_or(*at + Duration::from_secs(15), |(_, next)| *next);
        report_event(&book.lock().unwrap(), name, *at..until, started);
    }
    report_late(&book, total, started + produced_in).await;
}

/// Messages not visible 5 s after the load are left out of the percentiles above: waits up to 30 s more for
/// them and says how many there were and when the last became visible (or how many never did).
async fn report_late(book: &Mutex<Book>, total: u64, load_end: Instant) {
    let visible = || book.lock().unwrap().latencies.len() as u64;
    let late = total - visible();
    if late == 0 {
        return;
    }
    let mut last = load_end;
    while visible() < total && last.duration_since(load_end) < Duration::from_secs(35) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = Instant::now();
    }
    match total - visible() {
        0 => println!(
            "late: {late} messages were not visible 5 s after the load; all were {:.1} s after it",
            last.duration_since(load_end).as_secs_f64()
        ),
        missing => {
            println!("late: {late} messages were not visible 5 s after the load; {missing} still not 35 s after it")
        }
    }
}

/// Runs the scale-out events of the environment at their times; returns (name, when) of those that ran.
fn scale_out_events(started: Instant) -> tokio::task::JoinHandle<Vec<(String, Instant)>> {
    let var = |name: &str| std::env::var(name).ok();
    let mut plan: Vec<(f64, String, Vec<String>)> = Vec::new();
    if let (Some(at), Some(cmd)) = (var("SUSTAINED_JOIN_AT"), var("SUSTAINED_JOIN_CMD")) {
        let name = var("SUSTAINED_JOIN_NAME").unwrap_or_else(|| "an instance joined".into());
        // bash, not sh: a restart's command waits for the old API port to close through bash's /dev/tcp.
        plan.push((at.parse().unwrap(), name, vec!["bash".into(), "-c".into(), cmd]));
    }
    if let (Some(at), Some(pid)) = (var("SUSTAINED_KILL_AT"), var("SUSTAINED_KILL_PID")) {
        plan.push((at.parse().unwrap(), "an instance SIGKILLed".into(), vec!["kill".into(), "-9".into(), pid]));
    }
    plan.sort_by(|a, b| a.0.total_cmp(&b.0));
    tokio::spawn(async move {
        let mut done = Vec::new();
        for (at, name, cmd) in plan {
            tokio::time::sleep_until((started + Duration::from_secs_f64(at)).into()).await;
            let status = std::process::Command::new(&cmd[0]).args(&cmd[1..]).status().expect("event command");
            assert!(status.success(), "{name}: {cmd:?} failed");
            done.push((name, Instant::now()));
        }
        done
    })
}

/// The latency of the messages produced in `window` (from an event to the next, at most 15 s), and when they were
/// served again.
fn report_event(book: &Book, name: &str, window: std::ops::Range<Instant>, started: Instant) {
    let at = window.start;
    let sorted = |w: &std::ops::Range<Instant>| {
        let mut lat: Vec<Duration> = book.latencies.iter().filter(|(p, _)| w.contains(p)).map(|(_, l)| *l).collect();
        lat.sort();
        lat
    };
    let lat = sorted(&window);
    // The baseline: as many seconds of messages just before the event (from the load's start at most).
    let from = (at - (window.end - at)).max(started);
    let before = sorted(&(from..at));
    let served = book
        .latencies
        .iter()
        .filter(|(p, l)| window.contains(p) && *l > Duration::from_secs(1))
        .map(|(p, l)| (*p + *l).duration_since(at))
        .max()
        .unwrap_or_default();
    // The event's wall-clock time, to find it in the instances' logs.
    let wall = std::time::SystemTime::now() - at.elapsed();
    println!(
        "after {name} at {:.1} s ({} UTC): the next {:.0} s of messages: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; served \
         again (no message over 1 s) {:.1} s after it",
        at.duration_since(started).as_secs_f64(),
        humantime::format_rfc3339_millis(wall),
        (window.end - at).as_secs_f64(),
        ms(&lat, 0.5),
        ms(&lat, 0.99),
        ms(&lat, 1.0),
        served.as_secs_f64()
    );
    println!(
        "  baseline, the {:.0} s of messages before it: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        at.duration_since(from).as_secs_f64(),
        ms(&before, 0.5),
        ms(&before, 0.99),
        ms(&before, 1.0)
    );
}

/// One sample a second: (time into the load, (total lag, CPU seconds per instance, RSS KiB)).
type Sample = (Duration, (i64, Vec<f64>, u64));

fn report(book: &Mutex<Book>, total: u64, produced_in: Duration, samples: &[Sample]) {
    let book = book.lock().unwrap();
    let mut lat: Vec<Duration> = book.latencies.iter().map(|(_, l)| *l).collect();
    lat.sort();
    let achieved = total as f64 / produced_in.as_secs_f64();
    println!(
        "produced {total} messages in {:.1} s ({achieved:.0}/s); visible: {} of {total}",
        produced_in.as_secs_f64(),
        lat.len()
    );
    println!(
        "produce-to-visible latency: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(&lat, 0.5),
        ms(&lat, 0.99),
        ms(&lat, 1.0)
    );
    // Each instance's CPU time grows until it is killed: its largest sample minus its first.
    let cpu = match (samples.first(), samples.last()) {
        (Some((t0, (_, c0, _))), Some((t1, _))) if t1 > t0 => {
            let used: f64 =
                (0..c0.len()).map(|i| samples.iter().map(|(_, (_, c, _))| c[i]).fold(0.0, f64::max) - c0[i]).sum();
            used / (*t1 - *t0).as_secs_f64() * 100.0
        }
        _ => f64::NAN,
    };
    let lag: Vec<String> = samples.iter().map(|(_, (l, _, _))| l.to_string()).collect();
    println!("lag each second: {}", lag.join(" "));
    println!(
        "service CPU (the instances started first): {cpu:.0}% of one core; RSS max {} MiB",
        samples.iter().map(|(_, (_, _, r))| r).max().unwrap_or(&0) / 1024
    );
}

/// The steps of `unread_live_path_seconds`, in the order a message takes them.
const STEPS: [&str; 5] = [
    "produced_to_fanout_read",
    "fanout_read_to_committed",
    "delta_to_fold_read",
    "fold_read_to_redis",
    "redis_to_pushed",
];

/// A histogram summed over the instances: (upper bound in seconds, cumulative count), by bound. `family`: its
/// name; `label`: a label its lines must have (`step="…"`), or "".
fn buckets(metrics: &[String], family: &str, label: &str) -> Vec<(f64, f64)> {
    let start = format!("{family}_bucket{{");
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in metrics.iter().flat_map(|m| m.lines()) {
        if !line.starts_with(&start) || !line.contains(label) {
            continue;
        }
        let le = line.split("le=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("+Inf");
        let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::INFINITY) };
        let count: f64 = line.rsplit(' ').next().and_then(|c| c.parse().ok()).unwrap_or(0.0);
        match buckets.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += count,
            None => buckets.push((le, count)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// The `q` quantile of cumulative buckets in ms, interpolated linearly inside its bucket (as Prometheus'
/// `histogram_quantile`); NaN without observations.
fn quantile_ms(buckets: &[(f64, f64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0.0, |b| b.1);
    if total == 0.0 {
        return f64::NAN;
    }
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= q * total {
            let upper = if le.is_finite() { le } else { lower };
            let within = if count > below { (q * total - below) / (count - below) } else { 1.0 };
            return (lower + (upper - lower) * within) * 1e3;
        }
        (lower, below) = (le, count);
    }
    lower * 1e3
}

/// Sums a counter over the instances' metrics.
fn counter(metrics: &[String], name: &str) -> f64 {
    let sum = metrics.iter().flat_map(|m| m.lines()).filter(|l| l.split(' ').next() == Some(name));
    sum.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// Prints the live path's budget per step (p50/p99 from the instances' histograms), the CPU per per-recipient
/// update, and one `chart:` line that `scripts/bench-sustained` collects for its chart.
fn report_steps(book: &Book, rate: u64, metrics: &[String], samples: &[Sample]) {
    let mut lat: Vec<Duration> = book.latencies.iter().map(|(_, l)| *l).collect();
    lat.sort();
    let mut chart = format!("chart: rate={rate} produce_to_visible={:.2},{:.2}", ms(&lat, 0.5), ms(&lat, 0.99));
    println!("live path per step, p50 / p99 (ms, from /metrics):");
    for step in STEPS {
        let b = buckets(metrics, "unread_live_path_seconds", &format!("step=\"{step}\""));
        let (p50, p99) = (quantile_ms(&b, 0.5), quantile_ms(&b, 0.99));
        println!("  {step:<26} {p50:>9.1} / {p99:>9.1}   ({:.0} records)", b.last().map_or(0.0, |b| b.1));
        chart.push_str(&format!(" {step}={p50:.2},{p99:.2}"));
    }
    println!("what the tasks wait for, p50 / p99 (ms, from /metrics):");
    for (name, family, label) in [
        ("fan-out Kafka commit", "unread_kafka_commit_seconds", ""),
        ("fan-out commit", "unread_flush_seconds", "stage=\"fanout\""),
        ("fold commit", "unread_flush_seconds", "stage=\"fold\""),
        ("fold checkpoint transaction", "unread_checkpoint_transaction_seconds", "stage=\"fold\""),
    ] {
        let b = buckets(metrics, family, label);
        let (p50, p99) = (quantile_ms(&b, 0.5), quantile_ms(&b, 0.99));
        println!("  {name:<28} {p50:>7.1} / {p99:>7.1}   ({:.0} times)", b.last().map_or(0.0, |b| b.1));
    }
    let updates = counter(metrics, "unread_increments_total");
    let cpu: f64 = match (samples.first(), samples.last()) {
        (Some((_, (_, c0, _))), Some(_)) => {
            (0..c0.len()).map(|i| samples.iter().map(|(_, (_, c, _))| c[i]).fold(0.0, f64::max) - c0[i]).sum()
        }
        _ => f64::NAN,
    };
    let per_update = cpu / updates * 1e6;
    println!(
        "CPU per per-recipient update: {per_update:.2} µs ({cpu:.1} CPU-seconds, {updates:.0} updates, every instance)"
    );
    println!("{chart} cpu_us_per_update={per_update:.3}");
}
