//! Where the services are. The integration tests run against the real Kafka, Redis and PostgreSQL: those of
//! `scripts/stack` (URLs from `UNREAD_BROKERS`, `UNREAD_REDIS_URL`, `UNREAD_DATABASE_URL`, which `scripts/test`
//! exports), or, built with `--features testcontainers` where a Docker engine answers, containers started once per
//! test run. Without either the tests skip with a printed reason, unless `UNREAD_REQUIRE_STACK=1` (set by
//! `scripts/test`), where they fail. Tests that stop a service mid-flow start private instances of their own
//! ([`PrivateRedis`], [`PrivatePg`], [`PrivateKafka`]) from the packages `scripts/stack` installs.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::fixtures::repo_path;
use super::namespace::{free_port, signal};

/// The services' addresses.
#[derive(Debug, Clone, Default)]
pub struct Stack {
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// Redis URL.
    pub redis_url: String,
    /// PostgreSQL URL.
    pub database_url: String,
    /// More environment for the `unread` processes (the TLS stack's client settings: `UNREAD_KAFKA_CONFIG_FILE`,
    /// `UNREAD_REDIS_CA_FILE`, …); empty for a plaintext stack. The test process's own clients have none, so a
    /// namespace on a stack with some is not cleaned up in-process.
    pub client_env: Vec<(String, String)>,
}

/// The stack for `test`, or `None` (with a printed reason) when there is none and none is required.
pub fn stack(test: &str) -> Option<Stack> {
    #[cfg(feature = "testcontainers")]
    if let Some(stack) = containers::stack() {
        return Some(stack);
    }
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (get("UNREAD_BROKERS"), get("UNREAD_REDIS_URL"), get("UNREAD_DATABASE_URL")) {
        (Some(brokers), Some(redis_url), Some(database_url)) => {
            Some(Stack { brokers, redis_url, database_url, client_env: Vec::new() })
        }
        _ if std::env::var("UNREAD_REQUIRE_STACK").as_deref() == Ok("1") => {
            panic!("{test}: UNREAD_BROKERS/UNREAD_REDIS_URL/UNREAD_DATABASE_URL are not set: run scripts/test")
        }
        _ => {
            println!("SKIPPED {test}: no stack (run `scripts/stack up` and `eval \"$(scripts/stack env)\"`, or scripts/test)");
            None
        }
    }
}

/// The testcontainers path: Kafka (KRaft, Apache's image), Redis and PostgreSQL in Docker, started on first use
/// and kept for the whole test run.
#[cfg(feature = "testcontainers")]
mod containers {
    use std::sync::OnceLock;

    use testcontainers_modules::kafka::apache::{Kafka, KAFKA_PORT};
    use testcontainers_modules::postgres::Postgres;
    use testcontainers_modules::redis::{Redis, REDIS_PORT};
    use testcontainers_modules::testcontainers::runners::SyncRunner;
    use testcontainers_modules::testcontainers::{Container, ImageExt};

    use super::Stack;

    struct Running {
        stack: Stack,
        _kafka: Container<Kafka>,
        _redis: Container<Redis>,
        _postgres: Container<Postgres>,
    }

    /// Whether a Docker engine answers.
    fn docker_answers() -> bool {
        std::process::Command::new("docker").arg("info").output().is_ok_and(|o| o.status.success())
    }

    fn start() -> Running {
        // The broker settings of scripts/stack and docker-compose.yml: no auto-creation, 8 partitions by default.
        let kafka = Kafka::default()
            .with_env_var("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
            .with_env_var("KAFKA_NUM_PARTITIONS", "8")
            .start()
            .expect("starting Kafka in Docker");
        let redis = Redis::default().start().expect("starting Redis in Docker");
        let postgres = Postgres::default().start().expect("starting PostgreSQL in Docker");
        let port = |p: Result<u16, _>| p.expect("a mapped port");
        let stack = Stack {
            brokers: format!("127.0.0.1:{}", port(kafka.get_host_port_ipv4(KAFKA_PORT))),
            redis_url: format!("redis://127.0.0.1:{}", port(redis.get_host_port_ipv4(REDIS_PORT))),
            database_url: format!(
                "postgres://postgres:postgres@127.0.0.1:{}/postgres",
                port(postgres.get_host_port_ipv4(5432))
            ),
            client_env: Vec::new(),
        };
        Running { stack, _kafka: kafka, _redis: redis, _postgres: postgres }
    }

    /// The containers' stack, when a Docker engine answers.
    pub fn stack() -> Option<Stack> {
        static RUNNING: OnceLock<Option<Running>> = OnceLock::new();
        RUNNING.get_or_init(|| docker_answers().then(start)).as_ref().map(|r| r.stack.clone())
    }
}

/// Waits (at most 60 s) until `port` on loopback accepts connections (`open`) or refuses them.
pub fn wait_port(port: u16, open: bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() != open {
        assert!(Instant::now() < deadline, "port {port} did not become {}", if open { "open" } else { "closed" });
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether this process runs as root (PostgreSQL's tools then run as the `postgres` user).
fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// A Redis server of the test's own (from the package scripts/stack installs), with no persistence.
pub struct PrivateRedis {
    child: Child,
    /// Its port on loopback.
    pub port: u16,
}

impl PrivateRedis {
    pub fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (installed by scripts/stack up)");
        wait_port(port, true);
        Self { child, port }
    }

    pub fn stop(mut self) {
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

/// A Redis Cluster of the test's own: 3 masters, no replicas (Debian's `redis-server` in cluster mode, joined with
/// `redis-cli --cluster create`), with no persistence; its files in a temporary directory.
pub struct PrivateRedisCluster {
    nodes: Vec<Child>,
    dir: std::path::PathBuf,
    /// The masters' ports on loopback.
    pub ports: Vec<u16>,
}

impl PrivateRedisCluster {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("unread-it-cluster-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<u16> = (0..3).map(|_| cluster_port()).collect();
        let nodes = ports.iter().map(|p| cluster_node(&dir, *p)).collect();
        ports.iter().for_each(|p| wait_port(*p, true));
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let create = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli (installed with redis-server by scripts/stack up)");
        assert!(create.status.success(), "{}", String::from_utf8_lossy(&create.stdout));
        let cluster = Self { nodes, dir, ports };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.ports.iter().all(|p| cluster_ok(*p)) {
            assert!(Instant::now() < deadline, "the cluster did not reach cluster_state:ok within 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        cluster
    }

    /// `UNREAD_REDIS_URL` for the cluster: the masters' URLs, comma-separated.
    pub fn url(&self) -> String {
        self.ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    /// One master's URL (a plain connection: commands on its own keys only).
    pub fn node_url(&self, i: usize) -> String {
        format!("redis://127.0.0.1:{}", self.ports[i])
    }
}

/// A free port whose cluster bus port (+10,000) is free too.
fn cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

fn cluster_node(dir: &std::path::Path, port: u16) -> Child {
    let conf = dir.join(format!("nodes-{port}.conf"));
    Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--cluster-enabled", "yes"])
        .args(["--cluster-config-file", conf.to_str().unwrap(), "--dir", dir.to_str().unwrap()])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (installed by scripts/stack up)")
}

fn cluster_ok(port: u16) -> bool {
    let out = Command::new("redis-cli").args(["-p", &port.to_string(), "cluster", "info"]).output();
    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
}

impl Drop for PrivateRedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill().ok();
            node.wait().ok();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// A PostgreSQL cluster of the test's own (from the package scripts/stack installs).
pub struct PrivatePg {
    dir: std::path::PathBuf,
    port: u16,
    bin: std::path::PathBuf,
}

impl PrivatePg {
    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let as_root = is_root();
        let mut c = if as_root { Command::new("runuser") } else { Command::new(&exe) };
        if as_root {
            c.args(["-u", "postgres", "--"]).arg(&exe);
        }
        let out = c.args(args).output().unwrap();
        assert!(out.status.success(), "{tool} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn create() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL installed by scripts/stack up")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .max()
            .unwrap();
        let dir = std::env::temp_dir().join(format!("unread-it-pg-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status().unwrap();
        }
        let pg = Self { dir, port: free_port(), bin };
        let data = pg.dir.join("data");
        pg.run("initdb", &["-D", data.to_str().unwrap(), "-U", "unread", "--auth=trust"]);
        pg.start();
        pg.run("createdb", &["-h", "127.0.0.1", "-p", &pg.port.to_string(), "-U", "unread", "unread"]);
        pg
    }

    pub fn start(&self) {
        let data = self.dir.join("data");
        let opts = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.display());
        let log = self.dir.join("log");
        self.run("pg_ctl", &["-D", data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", &opts, "-w", "start"]);
    }

    pub fn stop(&self) {
        self.run("pg_ctl", &["-D", self.dir.join("data").to_str().unwrap(), "-m", "fast", "-w", "stop"]);
    }

    pub fn url(&self) -> String {
        format!("postgres://unread@127.0.0.1:{}/unread", self.port)
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let exe = self.bin.join("pg_ctl");
        let mut c = if is_root() { Command::new("runuser") } else { Command::new(&exe) };
        if is_root() {
            c.args(["-u", "postgres", "--"]).arg(&exe);
        }
        c.args(["-D", data.to_str().unwrap(), "-m", "immediate", "stop"]).output().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// A Kafka broker of the test's own, run from the jars `scripts/stack up` fetched (`.stack/kafka/libs`).
pub struct PrivateKafka {
    dir: std::path::PathBuf,
    /// Its port on loopback.
    pub port: u16,
    child: Option<Child>,
}

impl PrivateKafka {
    pub fn create() -> Self {
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
                 group.initial.rebalance.delay.ms=0\ngroup.min.session.timeout.ms=1000\nauto.create.topics.enable=false\n",
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

    pub fn start(&mut self) {
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
        while unread::kafka::partition_counts(&format!("127.0.0.1:{}", self.port)).is_err() {
            assert!(Instant::now() < deadline, "private Kafka did not answer metadata within 60 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), Signal::SIGTERM);
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

/// The checkpoint store in `schema`, migrated (what `unread migrate` does): for a test
/// that talks to the store directly, or serves degraded reads from empty tables.
pub async fn migrated_store(database_url: &str, schema: &str) -> unread::checkpoint::store::CheckpointStore {
    let store = unread::checkpoint::store::CheckpointStore::connect(database_url, schema, 2).await.unwrap();
    store.migrate().await.expect("migrations apply");
    store
}
