//! Every Kafka client unread creates, configured in one place: consumers (group members and readers outside any
//! group), producers, the admin client, plus the broker queries (partition counts, watermarks), Kafka's murmur2
//! partitioner and the names of the headers unread writes. Other modules never build a `ClientConfig` themselves,
//! so a setting (a timeout, a size limit) is changed here once for every client that needs it.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::ClientConfig;

use producer::AsyncProducer;

pub mod producer;

pub use crate::partitioner::{Partitioner, Placement};

/// How long a metadata or watermark query waits for the broker: 10 s.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest record unread produces or accepts from its own topics: 16 MiB (16,777,216 bytes).
pub const MAX_MESSAGE_BYTES: &str = "16777216";

/// Names of the headers unread adds to a dead-lettered record (`docs/operations.md` § Dead letters).
pub mod headers {
    /// The topic the record was read from.
    pub const SOURCE_TOPIC: &str = "unread.source.topic";
    /// Its partition, as decimal text.
    pub const SOURCE_PARTITION: &str = "unread.source.partition";
    /// Its offset, as decimal text.
    pub const SOURCE_OFFSET: &str = "unread.source.offset";
    /// The error's stable kind (`invalid_json`, `key_mismatch`, …).
    pub const ERROR_KIND: &str = "unread.error.kind";
    /// The error's readable reason.
    pub const ERROR_REASON: &str = "unread.error.reason";
    /// The prefix of every header above: `dead-letter replay` drops them when re-publishing.
    pub const PREFIX: &str = "unread.";
    /// On a delta of a release before the source moved into the delta itself ([`crate::core::delta::Delta::source`]):
    /// the fan-out partition and lease generation that produced it ([`crate::core::delta::DeltaSource`]), for the
    /// fold's fence against zombie deltas. Read, never written: the fold falls back to it for such deltas.
    pub const DELTA_SOURCE: &str = "unread.delta.source";
}

/// The settings every client shares: the bootstrap servers (comma-separated `host:port`), then the properties
/// passed through ([`crate::clients`]: `--kafka-config`, `--kafka-config-file`; security, SASL, TLS files). The
/// callers' own settings come after, so a property unread's correctness depends on (isolation level, idempotence,
/// transactions, offsets) cannot be changed from outside.
pub fn base(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    for p in &crate::clients::get().kafka {
        c.set(&p.key, &p.value);
    }
    c
}

/// How a stage's consumer belongs to its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// A member that stops heart-beating is out after this long (`unread run --session-timeout`).
    pub session_timeout: Duration,
    /// Static membership (`unread run --group-instance-id`): the member's `group.instance.id`, stable across
    /// restarts (a StatefulSet pod's name). A member that stops and comes back within the session timeout gets
    /// its partitions back with no rebalance; `None`: dynamic membership.
    pub instance_id: Option<String>,
    /// The consumer group protocol (`unread run --group-protocol`).
    pub protocol: GroupProtocol,
    /// The consumer's `client.id`: the process's name in partition leases (`host:pid`, `{instance}@host:pid`),
    /// which a successor that takes a lease the process did not release looks for among the group's members
    /// before it fences the process's producer. `None`: librdkafka's default.
    pub client_id: Option<String>,
}

/// Which consumer group protocol a stage's consumer speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupProtocol {
    /// The classic protocol: the client-side range assignor, eager rebalances (every partition revoked, then
    /// assigned again), the session timeout of `--session-timeout`.
    #[default]
    Classic,
    /// KIP-848 (`group.protocol=consumer`, Kafka 4.0+): the broker assigns with its `range` assignor (topics with
    /// equal partition counts stay co-partitioned) and reconciles incrementally: a member that joins or leaves
    /// moves only the partitions that change owner. Session timeout and heartbeat interval are the broker's
    /// (`group.consumer.session.timeout.ms`, `group.consumer.heartbeat.interval.ms`); `--session-timeout` is
    /// not used.
    Consumer,
}

/// A consumer-group member of `group` for the service's stages: offsets are stored only after a checkpoint
/// (`enable.auto.offset.store=false`, committed in the background as a progress hint), the **range** assignor
/// co-partitions topics with equal partition counts, and a member that stops heart-beating is out after the
/// session timeout (default 10 s; heartbeats every second, or a tenth of a shorter timeout: a survivor learns of a
/// rebalance at its next heartbeat). The broker bounds it
/// (`group.min.session.timeout.ms`: 1 s on `scripts/stack`'s broker, 6 s on Kafka's defaults). With an instance
/// id the member is static ([`Membership`]). With [`GroupProtocol::Consumer`] (KIP-848) the broker's `range`
/// assignor does the co-partitioning and the broker's group settings the timing.
pub fn group_member(brokers: &str, group: &str, m: &Membership) -> ClientConfig {
    let mut c = consumer(brokers, group);
    let session = m.session_timeout.as_millis().max(1);
    // The committed offsets are a hint the tasks store after each checkpoint; committed every 200 ms rather than
    // librdkafka's 5 s, a task that takes over a partition (a restart: the old member's last commit may come after
    // the new one read them) skips at most that much of the records its checkpoint covers.
    c.set("enable.auto.commit", "true").set("auto.commit.interval.ms", "200").set("auto.offset.reset", "earliest");
    // Each assigned partition has a queue of its own (`service::group`), and these bounds apply to each: 4 MiB
    // fetched ahead per partition (64 MiB over the fold's 16 queues), fetched again 10 ms after its task made room
    // rather than librdkafka's 1 s. A fetch still brings up to librdkafka's 50 MB over all partitions (1 MiB
    // each), which it would otherwise lower to one queue's 4 MiB: in a burst, the fold's user events then waited
    // behind a fetch of deltas (`scripts/bench-push`, docs/performance.md "A queue per partition").
    c.set("queued.max.messages.kbytes", "4096").set("fetch.queue.backoff.ms", "10").set("fetch.max.bytes", "52428800");
    match m.protocol {
        GroupProtocol::Classic => c
            .set("partition.assignment.strategy", "range")
            .set("session.timeout.ms", session.to_string())
            .set("heartbeat.interval.ms", (session / 10).clamp(1, 1000).to_string()),
        GroupProtocol::Consumer => c.set("group.protocol", "consumer").set("group.remote.assignor", "range"),
    };
    if let Some(id) = &m.instance_id {
        c.set("group.instance.id", id);
    }
    if let Some(id) = &m.client_id {
        c.set("client.id", id);
    }
    c
}

/// What every consumer shares: its `group.id`, offsets stored only by unread itself, fetches answered within
/// 50 ms, a 64 MiB local queue (a group member's is per partition and smaller: [`group_member`]), and
/// `isolation.level=read_committed` set explicitly (librdkafka's default, but the fencing of zombie fan-outs
/// depends on it: a reader that saw uncommitted or aborted deltas would fold them; docs/operations.md § Fencing).
fn consumer(brokers: &str, group: &str) -> ClientConfig {
    let mut c = base(brokers);
    c.set("group.id", group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.offset.store", "false")
        .set("fetch.wait.max.ms", "50")
        .set("queued.max.messages.kbytes", "65536");
    c
}

/// A consumer outside any consumer group, which assigns itself partitions and commits nothing (replay, the
/// dead-letter tools). `name` only labels it on the broker (`group.id`, never joined).
pub fn reader(brokers: &str, name: &str) -> ClientConfig {
    let mut c = consumer(brokers, name);
    c.set("enable.auto.commit", "false")
        // When the local queue is full, fetch again after 10 ms, not librdkafka's default 1 s: a reader that
        // decodes more slowly than the broker sends would otherwise sit idle for whole seconds.
        .set("fetch.queue.backoff.ms", "10");
    c
}

/// The settings of every producer: idempotent (no duplicates from internal retries) with the input's partitioner
/// ([`Partitioner::configured`], murmur2 by default), so that a user event unread itself publishes (the write
/// gateway, `unread produce`) lands where the other producers put its user.
pub fn producer_config(brokers: &str) -> ClientConfig {
    let mut c = base(brokers);
    c.set("enable.idempotence", "true")
        .set("partitioner", Partitioner::configured().librdkafka_name())
        .set("message.max.bytes", MAX_MESSAGE_BYTES);
    c
}

/// The service's producers of deltas and dead letters: linger 5 ms, and a delivery that cannot complete fails
/// after 30 s (the task restarts from its checkpoint) rather than librdkafka's default 5 minutes.
fn service_producer_config(brokers: &str) -> ClientConfig {
    let mut c = producer_config(brokers);
    c.set("linger.ms", "5").set("message.timeout.ms", "30000").set("queue.buffering.max.messages", "500000");
    c
}

/// The fold's producer of dead letters (lingers 5 ms; a delivery fails after 30 s).
///
/// Errors: the client cannot be created (a setting is invalid).
pub fn service_producer(brokers: &str) -> anyhow::Result<AsyncProducer> {
    service_producer_config(brokers).create().context("creating the Kafka producer")
}

/// The write gateway's producer of user events: [`service_producer`]'s settings, but it sends at once (linger 0 ms)
/// instead of waiting 5 ms for more records. A gateway answers a POST when its record is acknowledged, so a linger
/// adds to every answer and to a read ack's way to the badge; records that arrive while a request is in flight
/// still share the next one. Measured (docs/performance.md, "The gateway sends at once"): a probe through an idle
/// gateway reaches its user's sockets in p50 2 ms instead of 7, and 64 clients POST 10,400/s instead of 7,700–8,300.
///
/// Errors: the client cannot be created (a setting is invalid).
pub fn gateway_producer(brokers: &str) -> anyhow::Result<AsyncProducer> {
    service_producer_config(brokers).set("linger.ms", "0").create().context("creating the gateway's Kafka producer")
}

/// The transactional producer of one fan-out partition task ([`service_producer`]'s settings plus
/// `transactional.id`). The caller must `init_transactions` before its first transaction: that fences every
/// earlier producer with the same id (a zombie) and aborts its open transaction (docs/operations.md § Fencing).
/// A transaction the producer leaves open is aborted by the broker after 30 s (`transaction.timeout.ms`), or at
/// once when a successor initializes the same id.
///
/// Errors: the client cannot be created (a setting is invalid).
pub fn transactional_producer(brokers: &str, transactional_id: &str) -> KafkaResult<AsyncProducer> {
    service_producer_config(brokers)
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", "30000")
        .create()
}

/// The service's producer, replaced as a whole when its deliveries fail: after a broker restart, librdkafka's
/// idempotent producer can stay unable to deliver (every message times out) until it is recreated
/// (confluentinc/librdkafka#3009; seen here in `service::kafka_broker_restarted_mid_flow_is_exact`).
pub struct ProducerSlot {
    brokers: String,
    current: std::sync::Mutex<(u64, AsyncProducer)>,
}

impl ProducerSlot {
    /// A slot holding a new producer ([`service_producer`]).
    ///
    /// Errors: the client cannot be created.
    pub fn new(brokers: &str) -> anyhow::Result<Self> {
        Ok(Self { brokers: brokers.to_owned(), current: std::sync::Mutex::new((0, service_producer(brokers)?)) })
    }

    /// The current producer (a cheap handle) and its generation, to pass to [`ProducerSlot::replace`].
    pub fn get(&self) -> (u64, AsyncProducer) {
        self.current.lock().expect("not poisoned").clone()
    }

    /// Replaces the producer of generation `failed` with a new one, unless another task already did. The old one is
    /// dropped; its client goes on its polling thread ([`AsyncProducer`]).
    pub fn replace(&self, failed: u64) {
        let mut current = self.current.lock().expect("not poisoned");
        if current.0 != failed {
            return;
        }
        match service_producer(&self.brokers) {
            Ok(new) => {
                *current = (failed + 1, new);
                tracing::warn!(generation = failed + 1, "deliveries failed: replaced the Kafka producer");
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "could not create a new Kafka producer"),
        }
    }
}

/// The bulk producer of `unread produce`: lingers 10 ms in batches of up to 10,000 records, queues up to 1,000,000.
pub fn bulk_producer_config(brokers: &str) -> ClientConfig {
    let mut c = producer_config(brokers);
    c.set("linger.ms", "10").set("batch.num.messages", "10000").set("queue.buffering.max.messages", "1000000");
    c
}

/// A [`reader`] that reports reaching the end of each partition it reads (`enable.partition.eof`): the end a
/// `read_committed` consumer sees, past transaction markers and aborted records.
pub fn eof_reader(brokers: &str, name: &str) -> ClientConfig {
    let mut c = reader(brokers, name);
    c.set("enable.partition.eof", "true");
    c
}

/// For each `(partition, from)` of `topic`, the offset of the first record at or after `from` that a
/// `read_committed` consumer gets, or `None` when it gets none before the partition's end (only transaction
/// markers, aborted records or records of open transactions lie there). Offsets are not contiguous on a
/// transactional topic, so this is how a reader tells "the records in between are invisible" from "the records in
/// between were skipped" ([`crate::service::group::PartitionInput::accept`]) and a real lag from a trailing
/// commit marker ([`crate::ops::lag`]). A blocking call: one short-lived consumer ([`VisibilityProbe`]), one fetch
/// per partition.
///
/// Errors: the client cannot be created, the read fails, or some partition gives no answer within `timeout`.
pub fn first_visible(
    brokers: &str,
    topic: &str,
    from: &[(i32, i64)],
    timeout: Duration,
) -> anyhow::Result<HashMap<i32, Option<i64>>> {
    VisibilityProbe::new(brokers)?.first_visible(topic, from, timeout)
}

/// The reader behind [`first_visible`], kept by a caller that asks again and again (`unread lag --wait`), so that
/// each question costs a fetch on an open connection, not a new client (which took up to 100 ms more to close).
///
/// Its fetches wait at most 5 ms for records (`fetch.wait.max.ms`): an answer ends with a fetch at a partition's
/// end, which the broker holds until that wait passes. With librdkafka's default a question took 54–76 ms on an
/// open connection; with 5 ms, 6–11 ms. They take at most 64 KiB a partition (`fetch.message.max.bytes`; the
/// broker still sends a larger first batch whole): a question needs one record, and with librdkafka's 1 MiB each
/// question asked during a catch-up fetched megabytes it then dropped.
pub struct VisibilityProbe {
    consumer: BaseConsumer<EofContext>,
}

impl VisibilityProbe {
    /// A probe reading `brokers` (not connected until its first question).
    ///
    /// Errors: the client cannot be created (its configuration).
    pub fn new(brokers: &str) -> anyhow::Result<Self> {
        let mut config = eof_reader(brokers, "unread-visibility-probe");
        config.set("fetch.wait.max.ms", "5").set("fetch.message.max.bytes", "65536");
        Ok(Self { consumer: config.create_with_context(EofContext)? })
    }

    /// [`first_visible`] with this probe's reader. The reader is assigned exactly `from` while it asks, and nothing
    /// after: an assigned reader goes on fetching ahead until it is unassigned, in the 25 ms between two polls of
    /// `unread lag --wait` (which, asking again at every poll, read the delta topic up to seven times over in a
    /// catch-up: `docs/performance.md`, "The lag probe's reads"). What it fetched for an earlier question is
    /// dropped, and a record below a partition's `from` is never an answer.
    ///
    /// Errors: the read fails, or some partition gives no answer within `timeout`.
    pub fn first_visible(
        &self,
        topic: &str,
        from: &[(i32, i64)],
        timeout: Duration,
    ) -> anyhow::Result<HashMap<i32, Option<i64>>> {
        self.release(topic)?;
        let found = self.ask(topic, from, timeout);
        let released = self.release(topic);
        let found = found?;
        released?;
        Ok(found)
    }

    /// Lets go of every partition and drops what was fetched for them.
    fn release(&self, topic: &str) -> anyhow::Result<()> {
        self.consumer.unassign().with_context(|| format!("unassigning the visibility probe from {topic}"))?;
        while self.consumer.poll(Duration::ZERO).is_some() {}
        Ok(())
    }

    /// How many partitions the reader is assigned now: 0 between questions.
    ///
    /// Errors: librdkafka cannot tell (the client is closing).
    pub fn assigned(&self) -> anyhow::Result<usize> {
        Ok(self.consumer.assignment().context("the visibility probe's assignment")?.count())
    }

    /// Assigns `from` and reads until each partition gave its first record at or after its offset, or its end.
    fn ask(&self, topic: &str, from: &[(i32, i64)], timeout: Duration) -> anyhow::Result<HashMap<i32, Option<i64>>> {
        let consumer = &self.consumer;
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (p, offset) in from {
            tpl.add_partition_offset(topic, *p, rdkafka::Offset::Offset(*offset))?;
        }
        consumer.assign(&tpl).with_context(|| format!("assigning {topic} to the visibility probe"))?;
        let start: HashMap<i32, i64> = from.iter().copied().collect();
        let mut found = HashMap::new();
        let deadline = std::time::Instant::now() + timeout;
        while found.len() < from.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            anyhow::ensure!(
                !left.is_zero(),
                "{topic}: no answer for {} of {} partitions",
                from.len() - found.len(),
                from.len()
            );
            match consumer.poll(left) {
                None => {}
                Some(Ok(m)) => {
                    let (p, offset) = (rdkafka::Message::partition(&m), rdkafka::Message::offset(&m));
                    if start.get(&p).is_some_and(|from| offset >= *from) {
                        found.entry(p).or_insert(Some(offset));
                    }
                }
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                    found.entry(p).or_insert(None);
                }
                Some(Err(e)) => return Err(e).with_context(|| format!("probing {topic}")),
            }
        }
        Ok(found)
    }
}

/// A client for metadata and watermark queries only.
///
/// Errors: the client cannot be created.
pub fn metadata_client(brokers: &str) -> anyhow::Result<BaseConsumer> {
    base(brokers).create().context("creating a Kafka metadata client")
}

/// The admin client (topics and consumer groups).
///
/// Errors: the client cannot be created.
pub fn admin(brokers: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    base(brokers).create().context("creating the Kafka admin client")
}

/// Admin options with a 30 s operation timeout.
pub fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))
}

/// The context of the readers that ask for each partition's end ([`eof_reader`]): librdkafka's errors are logged
/// as by default, but for the ends of partitions, which such a reader asks for and which are not errors.
#[derive(Debug, Default, Clone, Copy)]
pub struct EofContext;

impl ClientContext for EofContext {
    fn error(&self, error: KafkaError, reason: &str) {
        let end = matches!(error, KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF));
        if !end {
            tracing::error!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for EofContext {}

/// A client context that keeps librdkafka's last error (a refused SASL authentication, a TLS handshake that
/// failed, …), so that a query that fails can say why rather than "broker transport failure".
#[derive(Debug, Default)]
pub struct LastError(std::sync::Mutex<Option<(KafkaError, String)>>);

impl LastError {
    /// The last error librdkafka reported, with its reason, if any.
    pub fn get(&self) -> Option<(KafkaError, String)> {
        self.0.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

impl ClientContext for LastError {
    fn error(&self, error: KafkaError, reason: &str) {
        if let Ok(mut last) = self.0.lock() {
            *last = Some((error, reason.to_owned()));
        }
    }
}

impl ConsumerContext for LastError {}

/// Every topic's partition count, from the broker's metadata: the first query of most commands, so the one whose
/// error says why Kafka refused (wrong credentials, plaintext against a TLS listener: [`LastError`]).
///
/// Errors: the broker does not answer within [`QUERY_TIMEOUT`], with librdkafka's last error.
pub fn partition_counts(brokers: &str) -> anyhow::Result<HashMap<String, i32>> {
    let client: BaseConsumer<LastError> =
        base(brokers).create_with_context(LastError::default()).context("creating a Kafka metadata client")?;
    let deadline = std::time::Instant::now() + QUERY_TIMEOUT;
    // Tries every second: a refusal that waiting cannot mend (authentication, TLS) ends it at once.
    let md = loop {
        match client.fetch_metadata(None, Duration::from_secs(1)) {
            Ok(md) => break md,
            Err(e) => {
                // The error events wait in the client's queue until it is polled.
                let _ = client.poll(Duration::from_millis(100));
                let why = client.context().get();
                let code = why.as_ref().and_then(|(error, _)| error.rdkafka_error_code());
                let refused = matches!(code, Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL));
                if refused || std::time::Instant::now() >= deadline {
                    let why =
                        why.map(|(error, reason)| format!(" (librdkafka: {error}: {reason})")).unwrap_or_default();
                    anyhow::bail!("Kafka at {brokers}: {e}{why}");
                }
            }
        }
    };
    Ok(md.topics().iter().map(|t| (t.name().to_owned(), t.partitions().len() as i32)).collect())
}

/// Waits until the broker's metadata shows each of `topics` (name, partition count) with that many partitions, each
/// with a leader. A topic's creation is acknowledged before every broker's metadata cache has it; a consumer that
/// subscribes in that gap is told the topic does not exist and looks again only at its next metadata refresh
/// (`topic.metadata.refresh.interval.ms`, 5 minutes), so `unread topics create` returns only when they are usable.
///
/// Errors: they are not all visible within [`QUERY_TIMEOUT`] (naming those that are not), or the broker does not
/// answer.
pub fn await_topics(brokers: &str, topics: &[(String, i32)]) -> anyhow::Result<()> {
    let client: BaseConsumer = base(brokers).create().context("creating a Kafka metadata client")?;
    let deadline = std::time::Instant::now() + QUERY_TIMEOUT;
    loop {
        let md = client.fetch_metadata(None, QUERY_TIMEOUT).with_context(|| format!("Kafka at {brokers}"))?;
        let ready = |(name, n): &&(String, i32)| {
            md.topics().iter().any(|t| {
                t.name() == name
                    && t.error().is_none()
                    && t.partitions().len() as i32 == *n
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            })
        };
        let missing: Vec<&str> = topics.iter().filter(|t| !ready(t)).map(|(name, _)| name.as_str()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            anyhow::bail!("topics created but not in the metadata of {brokers} after 10 s: {}", missing.join(", "));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The partition count of one topic (0 when it does not exist).
///
/// Errors: the broker does not answer within [`QUERY_TIMEOUT`].
pub fn partition_count<C: ConsumerContext>(client: &BaseConsumer<C>, topic: &str) -> anyhow::Result<i32> {
    let md = client.fetch_metadata(Some(topic), QUERY_TIMEOUT).with_context(|| format!("metadata of {topic}"))?;
    Ok(md.topics().first().map_or(0, |t| t.partitions().len() as i32))
}

/// The (low, high) watermarks of partitions `0..n` of `topic`: the log start and the end (next offset to be
/// written) of each.
///
/// Errors: the broker does not answer within [`QUERY_TIMEOUT`].
pub fn watermarks<C: ConsumerContext>(
    client: &impl Consumer<C>,
    topic: &str,
    n: i32,
) -> anyhow::Result<Vec<(i64, i64)>> {
    (0..n).map(|p| watermark(client, topic, p)).collect()
}

/// The (low, high) watermarks of partition `p` of `topic` ([`watermarks`] of one partition).
///
/// Errors: the broker does not answer within [`QUERY_TIMEOUT`].
pub fn watermark<C: ConsumerContext>(client: &impl Consumer<C>, topic: &str, p: i32) -> anyhow::Result<(i64, i64)> {
    client.fetch_watermarks(topic, p, QUERY_TIMEOUT).with_context(|| format!("watermarks of {topic}[{p}]"))
}

impl Partitioner {
    /// The process's setting (`--partitioner`, [`crate::clients::init`]); murmur2 before it.
    pub fn configured() -> Self {
        crate::clients::get().partitioner
    }
}

/// The partition (0..`partitions`) Kafka's default partitioner picks for a key: the Java client's murmur2
/// (`(murmur2(key) & 0x7fffffff) % partitions`), [`Partitioner::Murmur2`]. For a hash that only needs to be
/// stable (a sample's order), not the producers' placement, which is [`Partitioner::partition`].
///
/// Panics when `partitions` is not positive.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    Partitioner::Murmur2.partition(key, partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_producer_is_replaced_once_per_failed_generation() {
        let slot = ProducerSlot::new("127.0.0.1:1").unwrap(); // never contacted
        let (g0, _) = slot.get();
        slot.replace(g0);
        let (g1, _) = slot.get();
        assert_eq!(g1, g0 + 1);
        slot.replace(g0); // another task that saw the same failure: nothing to do
        assert_eq!(slot.get().0, g1);
    }
}
