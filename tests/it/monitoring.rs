//! Issue 23: the dashboard and the alert rules (`deploy/grafana/unread.json`, `deploy/prometheus/alerts.yml`) against
//! the real service: every metric they name is one a running instance serves, and a real Prometheus (Debian's)
//! scraping an instance sees UnreadRedisFailing fire once Redis stops. (promtool's parse and unit tests of the same
//! files are `scripts/check-monitoring`, run by `scripts/test`.)

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// The metric names (`unread_…`) a text names.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in text.match_indices("unread_") {
        let name: String =
            text[i..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
        names.insert(name);
    }
    names
}

/// The families `/metrics` declares (`# TYPE unread_x counter`).
fn families(metrics: &str) -> BTreeSet<String> {
    metrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next().map(str::to_owned)).collect()
}

/// Whether `name` is a sample name of one of `families` (a counter's `_total`, a histogram's `_bucket`, …).
fn served(name: &str, families: &BTreeSet<String>) -> bool {
    let stems = ["", "_total", "_bucket", "_sum", "_count", "_created"];
    stems.iter().any(|s| name.strip_suffix(s).is_some_and(|f| families.contains(f)))
}

#[test]
fn the_dashboard_and_the_alerts_name_only_metrics_the_service_serves() {
    let Some(stack) = stack("the_dashboard_and_the_alerts_name_only_metrics_the_service_serves") else { return };
    let ns = Ns::new(&stack, "monnames");
    let svc = ns.start(&[]);
    // Traffic, so that every stage has processed, flushed and checkpointed, and one record that goes to the
    // dead-letter topic: families with labels appear with their first event.
    ns.ok(&["produce", &dev_events()]);
    let topic = unread::topology::Topics::new(&format!("{}.", ns.name)).conversation_events;
    let producer: rdkafka::producer::FutureProducer = unread::kafka::producer_config(&stack.brokers).create().unwrap();
    let record = rdkafka::producer::FutureRecord::to(&topic).key("c").payload("{");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(producer.send(record, Duration::from_secs(10))).map_err(|(e, _)| e).unwrap();
    ns.ok(&["lag", "--wait", "2m"]);
    // One request to the API: the HTTP families appear with their first request (the admin address is not counted).
    assert_eq!(http_get(svc.port, "/openapi.json").unwrap().0, 200);
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = loop {
        let (code, metrics) = http_get(svc.admin, "/metrics").unwrap();
        assert_eq!(code, 200);
        if metrics.contains("unread_dead_letter_records_total{") || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let families = families(&metrics);
    let wanted = ["unread_reads", "unread_read_breaker_open", "unread_push_sockets", "unread_dead_letter_records"];
    for family in wanted {
        assert!(families.contains(family), "{family} not in /metrics");
    }
    for file in ["deploy/grafana/unread.json", "deploy/prometheus/alerts.yml"] {
        let text = std::fs::read_to_string(repo_path(file)).unwrap();
        let names = metric_names(&text);
        assert!(names.len() >= 10, "{file} names {} metrics", names.len());
        let unknown: Vec<&String> = names.iter().filter(|n| !served(n, &families)).collect();
        assert!(unknown.is_empty(), "{file} names metrics /metrics does not serve: {unknown:?}");
    }
    svc.stop();
}

/// A Prometheus server of the test's own, scraping one target every second and evaluating `rules` every second;
/// its data in a temporary directory.
struct PrivatePrometheus {
    child: Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl PrivatePrometheus {
    fn start(target: u16, rules: &str) -> Self {
        let (port, dir) = (free_port(), std::env::temp_dir().join(format!("unread-prom-{}", free_port())));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("alerts.yml"), rules).unwrap();
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{}]\nscrape_configs:\n  - \
             job_name: unread\n    static_configs: [{{targets: ['127.0.0.1:{target}']}}]\n",
            dir.join("alerts.yml").display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (Debian's package; scripts/check-monitoring installs it)");
        let p = Self { child, port, dir };
        p.wait_for("ready", |s| s.http_get("/-/ready").is_some_and(|(c, _)| c == 200));
        p
    }

    fn http_get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    /// The alerts in `state` (`pending`, `firing`) now, by name.
    fn alerts(&self, state: &str) -> BTreeSet<String> {
        let (_, body) = self.http_get("/api/v1/alerts").unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let alerts = v["data"]["alerts"].as_array().cloned().unwrap_or_default();
        let named = alerts.iter().filter(|a| a["state"] == state);
        named.filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_owned)).collect()
    }

    /// Waits up to 120 s for `done`; panics with `what` and Prometheus's log otherwise.
    fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !done(self) {
            let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "Prometheus: not {what} within 120 s; its log:\n{log}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for PrivatePrometheus {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

#[test]
fn a_real_prometheus_sees_unread_redis_failing_fire_when_redis_stops() {
    let Some(stack) = stack("a_real_prometheus_sees_unread_redis_failing_fire_when_redis_stops") else { return };
    let redis = PrivateRedis::start(free_port());
    let ns = Ns::with(&stack, "promalert", &format!("redis://127.0.0.1:{}", redis.port), &stack.database_url);
    let svc = ns.start(&[]);
    // The shipped rules, each firing as soon as its condition holds (their `for:` is for production).
    let rules = std::fs::read_to_string(repo_path("deploy/prometheus/alerts.yml")).unwrap();
    let rules: String =
        rules.lines().map(|l| if l.trim_start().starts_with("for:") { "" } else { l }).collect::<Vec<_>>().join("\n");
    let prom = PrivatePrometheus::start(svc.admin, &rules);
    let up = |p: &PrivatePrometheus| p.http_get("/api/v1/query?query=up").is_some_and(|(_, b)| b.contains(r#""1"]"#));
    prom.wait_for("scraping the instance", up);
    assert!(!prom.alerts("firing").contains("UnreadRedisFailing"), "firing before Redis stopped");
    redis.stop();
    // The fold now fails to write the users it folds, and retries.
    ns.ok(&["produce", &dev_events()]);
    prom.wait_for("firing UnreadRedisFailing", |p| p.alerts("firing").contains("UnreadRedisFailing"));
    drop(svc);
}
