//! The soak (issue 12): sustained production and reads for `UNREAD_SOAK_MINUTES` minutes (2 in `scripts/test`;
//! `scripts/soak --minutes N` for longer) on a private broker, Redis and PostgreSQL, while a fault schedule runs in
//! a loop: an instance SIGKILLed (and started again), Redis restarted empty, PostgreSQL restarted, the broker
//! restarted, an instance added then removed. Then every user is checked exactly against the in-process pipeline
//! (itself exact against the reference) over the same events, at the v3 dev set's instant (contract v3: expiry,
//! marks).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use unread::core::contract::UserView;

use crate::support::*;

/// The v3 dev set's copy `k`: its conversations, broadcast lists and notifications renamed (`~k`), the users
/// kept, so each copy adds new counts to the same users.
fn copy_of(text: &str, k: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.lines() {
        let mut e: serde_json::Value = serde_json::from_str(line).unwrap();
        for field in ["conversation_id", "broadcast_id", "notification_id"] {
            if let Some(id) = e[field].as_str() {
                e[field] = format!("{id}~{k}").into();
            }
        }
        out.push_str(&e.to_string());
        out.push('\n');
    }
    out
}

/// Reads random users from `port` until `stop`; returns (reads, non-200 answers, max latency).
fn reader(port: u16, users: Vec<String>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64, Duration)> {
    std::thread::spawn(move || {
        let (mut reads, mut errors, mut max, mut i) = (0, 0, Duration::ZERO, 7usize);
        while !stop.load(Ordering::Relaxed) {
            i = (i * 31 + 17) % users.len();
            let started = Instant::now();
            let code = http_get(port, &format!("/v1/users/{}/unread", encode(&users[i]))).map(|(c, _)| c);
            max = max.max(started.elapsed());
            (reads, errors) = (reads + 1, errors + u64::from(code != Some(200)));
        }
        (reads, errors, max)
    })
}

/// One fault of the schedule, by turn.
struct Faults<'a> {
    ns: &'a Ns<'a>,
    kafka: PrivateKafka,
    redis: Option<PrivateRedis>,
    redis_port: u16,
    pg: &'a PrivatePg,
    killable: Option<Service>,
    survived: Vec<&'static str>,
}

impl Faults<'_> {
    fn run(&mut self, turn: usize) {
        let name = match turn % 5 {
            0 => {
                self.killable.take().expect("running").kill();
                self.killable = Some(self.ns.start(&["--session-timeout", "3s"]));
                "SIGKILL of an instance, then restarted"
            }
            1 => {
                self.redis.take().expect("running").stop();
                std::thread::sleep(Duration::from_secs(3));
                self.redis = Some(PrivateRedis::start(self.redis_port));
                "Redis restarted empty"
            }
            2 => {
                self.pg.stop();
                std::thread::sleep(Duration::from_secs(3));
                self.pg.start();
                "PostgreSQL restarted"
            }
            3 => {
                self.kafka.stop();
                std::thread::sleep(Duration::from_secs(3));
                self.kafka.start();
                "Kafka broker restarted"
            }
            _ => {
                let added = self.ns.start(&["--session-timeout", "3s"]);
                std::thread::sleep(Duration::from_secs(5));
                added.stop();
                "an instance added, then removed"
            }
        };
        self.survived.push(name);
    }
}

/// "2 × a, 1 × b" for the faults in the order they first ran.
fn tally(faults: &[&str]) -> String {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for f in faults {
        match kinds.iter_mut().find(|(k, _)| k == f) {
            Some((_, n)) => *n += 1,
            None => kinds.push((f, 1)),
        }
    }
    kinds.iter().map(|(k, n)| format!("{n} × {k}")).collect::<Vec<_>>().join(", ")
}

#[test]
fn soak_under_a_fault_schedule_is_exact() {
    let Some(stack) = stack("soak_under_a_fault_schedule_is_exact") else { return };
    let minutes: f64 = std::env::var("UNREAD_SOAK_MINUTES").ok().and_then(|m| m.parse().ok()).unwrap_or(2.0);
    let mut kafka = PrivateKafka::create();
    kafka.start();
    let (redis_port, pg) = (free_port(), PrivatePg::create());
    let redis = PrivateRedis::start(redis_port);
    let private = Stack {
        brokers: format!("127.0.0.1:{}", kafka.port),
        redis_url: format!("redis://127.0.0.1:{redis_port}"),
        database_url: pg.url(),
        client_env: Vec::new(),
    };
    let _ = &stack;
    let ns = Ns::new(&private, "soak");
    let steady = ns.start(&["--session-timeout", "3s"]);
    let killable = ns.start(&["--session-timeout", "3s"]);
    let text = std::fs::read_to_string(v3_dev_events()).unwrap();
    let mut pipeline = unread::pipeline::Pipeline::new();
    let users: Vec<String> = v3_dev_expected().into_iter().map(|v| v.user_id).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = reader(steady.port, users, stop.clone());
    let events = AtomicU64::new(0);
    let mut faults =
        Faults { ns: &ns, kafka, redis: Some(redis), redis_port, pg: &pg, killable: Some(killable), survived: vec![] };
    let (started, end) = (Instant::now(), Duration::from_secs_f64(minutes * 60.0));
    let mut copy = 0;
    while started.elapsed() < end {
        let copy_text = copy_of(&text, copy);
        let path = std::env::temp_dir().join(format!("{}-copy.jsonl", ns.name));
        std::fs::write(&path, &copy_text).unwrap();
        ns.ok(&["produce", path.to_str().unwrap()]);
        unread::pipeline::for_each_batch(copy_text.as_bytes(), 1000, |e| panic!("{e}"), |b| pipeline.process_batch(b))
            .unwrap();
        events.fetch_add(copy_text.lines().count() as u64, Ordering::Relaxed);
        faults.run(copy);
        copy += 1;
        std::thread::sleep(Duration::from_secs(4));
    }
    ns.ok(&["lag", "--wait", "5m"]);
    stop.store(true, Ordering::Relaxed);
    let (n_reads, read_errors, max_read) = reads.join().unwrap();
    let instant = unread::core::expiry::seconds_of(&V3_DEV_NOW["?now=".len()..]).expect("RFC 3339");
    let expected: Vec<UserView> = pipeline.views_at(instant);
    let (checked, bad) = mismatches_at(steady.port, &expected, V3_DEV_NOW);
    println!(
        "soak {minutes} min: {} faults survived ({}), {} events in {copy} copies, {checked} users checked, {} \
         mismatches; {n_reads} reads during the soak, {read_errors} not 200, max read latency {:.0} ms",
        faults.survived.len(),
        tally(&faults.survived),
        events.load(Ordering::Relaxed),
        bad.len(),
        max_read.as_secs_f64() * 1000.0
    );
    if !bad.is_empty() {
        let user = bad[0].split(':').next().unwrap().to_owned();
        println!(
            "DEBUG verify: {}",
            ns.cmd(&["verify"]).output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
        );
        println!(
            "DEBUG inspect: {}",
            ns.cmd(&["inspect", "user", &user])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        );
        let e = expected.iter().find(|v| v.user_id == user).unwrap();
        println!("DEBUG expected: {}", serde_json::to_string(e).unwrap());
        println!("DEBUG logs in {:?} named {}-*.log", std::env::temp_dir(), ns.name);
    }
    assert!(bad.is_empty(), "{} of {checked} users differ, e.g. {:#?}", bad.len(), &bad[..bad.len().min(5)]);
    assert!(faults.survived.len() >= 5, "the schedule ran every fault once: {:?}", faults.survived);
    let Faults { kafka, redis, killable, .. } = faults;
    killable.expect("running").stop();
    steady.stop();
    ns.cleanup(); // while the private broker still runs
    drop((kafka, redis));
}
