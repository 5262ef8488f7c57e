//! One test's private namespace on the stack: its own topic prefix, consumer groups, database schema and Redis
//! key prefix, so tests run in parallel; removed on `Drop`, so a failing test leaves nothing behind. Also the
//! `unread run` processes a test starts.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::http::http_get;
use super::stack::Stack;

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Sends `signal` to process `pid` (ignoring a process already gone).
pub fn signal(pid: u32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid as i32), signal);
}

/// One test's private namespace (on the shared stack, or on private Redis/PostgreSQL instances).
pub struct Ns<'s> {
    stack: &'s Stack,
    /// The name every prefix, group and schema derives from: `it_{test}_{pid}_{nanos}`.
    pub name: String,
    /// The Redis (one server's URL, or a cluster's seed URLs) the namespace's services use.
    pub redis_url: String,
    database_url: String,
}

impl<'s> Ns<'s> {
    /// A namespace on the stack, with its topics created.
    pub fn new(stack: &'s Stack, test: &str) -> Self {
        Self::with(stack, test, &stack.redis_url, &stack.database_url)
    }

    /// A namespace on the stack's Kafka with another Redis and PostgreSQL, with its topics created.
    pub fn with(stack: &'s Stack, test: &str, redis_url: &str, database_url: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let name = format!("it_{test}_{}_{nanos}", std::process::id());
        let ns = Self { stack, name, redis_url: redis_url.to_owned(), database_url: database_url.to_owned() };
        ns.ok(&["topics", "create"]);
        ns
    }

    /// The `unread` binary with this namespace's settings in its environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_unread"));
        c.args(args)
            .env("UNREAD_BROKERS", &self.stack.brokers)
            .env("UNREAD_REDIS_URL", &self.redis_url)
            .env("UNREAD_DATABASE_URL", &self.database_url)
            .env("UNREAD_DB_SCHEMA", &self.name)
            .env("UNREAD_TOPIC_PREFIX", format!("{}.", self.name))
            .env("UNREAD_GROUP_ID", &self.name)
            .env("UNREAD_REDIS_PREFIX", format!("{}:", self.name))
            .env("UNREAD_AUTH_HS256_SECRET", super::http::TEST_SECRET)
            .env("UNREAD_LOG", "info,rdkafka=warn,sqlx=warn")
            .envs(self.stack.client_env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Runs a subcommand to completion; panics with its output unless it succeeds. Returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args).output().unwrap();
        assert!(
            out.status.success(),
            "unread {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The total lag `unread lag` reports.
    pub fn total_lag(&self) -> i64 {
        let out = self.ok(&["lag", "--output", "json"]);
        let report: serde_json::Value = serde_json::from_str(&out).expect("lag --output json prints JSON");
        let rows = report["rows"].as_array().expect("a row per input partition");
        let sum: i64 = rows.iter().map(|r| r["lag"].as_i64().unwrap()).sum();
        assert_eq!(report["total"].as_i64(), Some(sum), "the total is the rows' sum: {report}");
        sum
    }

    /// Starts `unread run` on a free port (flushing every 100 ms unless `extra` says otherwise) and waits until
    /// it is ready (at most 60 s). Its log goes to the temp dir.
    pub fn start(&self, extra: &[&str]) -> Service {
        self.start_with_env(extra, &[])
    }

    /// [`Ns::start`] with more environment variables (fault injection). [`free_port`] can lose a race: another
    /// process may take the port (an outgoing connection's ephemeral port, say) before the service binds it; the
    /// service then exits at once, and this starts it again on another port (three tries). Any other exit, or no
    /// readiness within 60 s, panics with the end of the service's log.
    pub fn start_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Service {
        for _ in 0..3 {
            match self.try_start(None, extra, env) {
                Ok(svc) => return svc,
                Err(log) if log.contains("Address already in use") => eprintln!("port taken, starting again: {log}"),
                Err(log) => panic!("service not ready: {log}"),
            }
        }
        panic!("service not ready: its port was taken three times")
    }

    /// [`Ns::start`] with its read API on `port` (a restart where clients wait for it). Panics when the service
    /// does not get ready.
    pub fn start_at(&self, port: u16, extra: &[&str]) -> Service {
        self.try_start(Some(port), extra, &[]).unwrap_or_else(|log| panic!("service not ready on {port}: {log}"))
    }

    /// One try of [`Ns::start_with_env`]: the ready service, or why not (with the end of its log).
    fn try_start(&self, port: Option<u16>, extra: &[&str], env: &[(&str, &str)]) -> Result<Service, String> {
        let (port, admin) = (port.unwrap_or_else(free_port), free_port());
        let (listen, admin_listen) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
        let mut args = vec!["run", "--listen", &listen, "--admin-listen", &admin_listen];
        if !extra.iter().any(|a| a.starts_with("--flush-interval")) {
            args.extend(["--flush-interval", "100ms"]);
        }
        args.extend_from_slice(extra);
        let path = std::env::temp_dir().join(format!("{}-{port}.log", self.name));
        let log = std::fs::File::create(&path).unwrap();
        let mut cmd = self.cmd(&args);
        cmd.envs(env.iter().copied());
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
        let mut svc = Service { child, port, admin };
        let tail = || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            format!("{} ends:\n{}", path.display(), lines[lines.len().saturating_sub(20)..].join("\n"))
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while http_get(admin, "/readyz").map(|(s, _)| s) != Some(200) {
            if let Some(status) = svc.child.try_wait().unwrap() {
                return Err(format!("it exited ({status}); {}", tail()));
            }
            if Instant::now() > deadline {
                return Err(format!("not ready within 60 s; {}", tail()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(svc)
    }

    /// What the service on `port` logged so far (its stderr).
    pub fn log_of(&self, port: u16) -> String {
        std::fs::read_to_string(std::env::temp_dir().join(format!("{}-{port}.log", self.name))).unwrap_or_default()
    }

    /// Waits until the service on `port` has logged `needle` (up to `secs` s); panics with its log if not.
    pub fn wait_for_log(&self, port: u16, needle: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !self.log_of(port).contains(needle) {
            assert!(Instant::now() < deadline, "no \"{needle}\" within {secs} s:\n{}", self.log_of(port));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Removes the namespace now (as `Drop` would).
    pub fn cleanup(self) {}

    /// Deletes every topic, schema and Redis key of this namespace, those of its replayed namespaces included,
    /// with the library's own deletion code. Best effort: a failure is printed, never a panic (this runs in
    /// `Drop`, also while a failed test unwinds).
    fn remove_all(&self) -> anyhow::Result<()> {
        let rt = tokio::runtime::Runtime::new()?;
        rt.block_on(async {
            let prefix = format!("{}.", self.name);
            let counts = unread::kafka::partition_counts(&self.stack.brokers)?;
            let topics: Vec<&str> = counts.keys().filter(|t| t.starts_with(&prefix)).map(String::as_str).collect();
            let admin = unread::kafka::admin(&self.stack.brokers)?;
            admin.delete_topics(&topics, &unread::kafka::admin_options()).await?;
            let pool = sqlx::PgPool::connect(&self.database_url).await?;
            let schemas: Vec<String> = sqlx::query_scalar(
                "SELECT nspname::text FROM pg_namespace WHERE nspname = $1 OR nspname LIKE $1 || '\\_ns\\_%'",
            )
            .bind(&self.name)
            .fetch_all(&pool)
            .await?;
            for schema in schemas {
                unread::checkpoint::store::drop_schema(&self.database_url, &schema).await?;
            }
            let redis = unread::projection::redis::RedisProjection::connect(&self.redis_url, "").await?;
            unread::namespace::delete_matching(&redis, &format!("{}:*", self.name)).await?;
            Ok(())
        })
    }
}

impl Drop for Ns<'_> {
    fn drop(&mut self) {
        if !self.stack.client_env.is_empty() {
            return; // the TLS stack: the test process's clients cannot reach it (see `Stack::client_env`)
        }
        if let Err(e) = self.remove_all() {
            eprintln!("cleaning up namespace {}: {e:#}", self.name);
        }
    }
}

/// An `unread run` process; SIGKILLed on `Drop` unless stopped.
pub struct Service {
    /// The process.
    pub child: Child,
    /// Its read API's port.
    pub port: u16,
    /// Its admin address's port (`/healthz`, `/readyz`, `/metrics`).
    pub admin: u16,
}

impl Service {
    /// SIGKILL, and wait for the exit.
    pub fn kill(mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// SIGTERM (a clean stop: every task flushes), SIGKILL after 40 s.
    pub fn stop(mut self) {
        signal(self.child.id(), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(40);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                self.child.kill().ok();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the process still runs (not exited, not a zombie).
    pub fn alive(&self) -> bool {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        !status.is_empty() && !status.contains("zombie")
    }

    /// Its resident memory, in MiB.
    pub fn rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().split_whitespace().next().unwrap();
        kib.parse::<u64>().unwrap() / 1024
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// Waits (at most 120 s) until the total lag is below `from`, i.e. some work was checkpointed; returns the lag.
pub fn wait_for_progress(ns: &Ns, from: i64) -> i64 {
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
