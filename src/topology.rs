//! The topics (`topology/topics.toml`, compiled into the binary) and `unread topics create`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use serde::Deserialize;

/// The topology file, as shipped.
pub const TOPOLOGY_TOML: &str = include_str!("../topology/topics.toml");

/// Base name of the conversation input topic.
pub const CONVERSATION_EVENTS: &str = "unread.conversation-events";
/// Base name of the user input topic.
pub const USER_EVENTS: &str = "unread.user-events";
/// Base name of the internal delta topic.
pub const USER_DELTAS: &str = "unread.user-deltas";
/// Base name of the dead-letter topic.
pub const DEAD_LETTER: &str = "unread.dead-letter";

/// One topic of `topology/topics.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct TopicSpec {
    pub name: String,
    pub role: String,
    pub key: String,
    pub partitions: i32,
    pub cleanup_policy: String,
    pub retention_ms: i64,
    /// Largest record the topic accepts (Kafka's default is 1 MiB).
    #[serde(default)]
    pub max_message_bytes: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct File {
    topic: Vec<TopicSpec>,
}

/// The topics of the shipped topology, with `partitions` overriding every count when given.
///
/// Errors: the shipped file does not parse, or the user-side topics are not co-partitioned.
pub fn topics(partitions: Option<i32>) -> anyhow::Result<Vec<TopicSpec>> {
    let mut file: File = toml::from_str(TOPOLOGY_TOML).context("topology/topics.toml does not parse")?;
    if let Some(n) = partitions {
        for t in &mut file.topic {
            if t.role != "dead-letter" {
                t.partitions = n;
            }
        }
    }
    let count = |name: &str| file.topic.iter().find(|t| t.name == name).map(|t| t.partitions);
    if count(USER_EVENTS) != count(USER_DELTAS) {
        bail!("{USER_EVENTS} and {USER_DELTAS} must have the same partition count (co-partitioned)");
    }
    Ok(file.topic)
}

/// Topic names with a prefix applied.
#[derive(Debug, Clone)]
pub struct Topics {
    pub conversation_events: String,
    pub user_events: String,
    pub user_deltas: String,
    pub dead_letter: String,
}

impl Topics {
    /// The four topics under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            conversation_events: format!("{prefix}{CONVERSATION_EVENTS}"),
            user_events: format!("{prefix}{USER_EVENTS}"),
            user_deltas: format!("{prefix}{USER_DELTAS}"),
            dead_letter: format!("{prefix}{DEAD_LETTER}"),
        }
    }

    /// The actual name of the topic whose base name (as in `topology/topics.toml`) is `base`.
    pub fn name_of(&self, base: &str) -> Option<&str> {
        Some(match base {
            CONVERSATION_EVENTS => &self.conversation_events,
            USER_EVENTS => &self.user_events,
            USER_DELTAS => &self.user_deltas,
            DEAD_LETTER => &self.dead_letter,
            _ => return None,
        })
    }
}

/// Creates the topics of `names` (a namespace's, [`crate::config::Settings::topics`]) that do not exist, with the
/// topology's settings, and checks the partition count of those that do. Returns one line per topic saying what
/// happened.
///
/// Errors: the broker is unreachable, a creation fails, or an existing topic has another partition count.
pub async fn create(brokers: &str, names: &Topics, partitions: Option<i32>) -> anyhow::Result<Vec<String>> {
    let specs = topics(partitions)?;
    let existing = partition_counts(brokers)?;
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers).create().context("creating the Kafka admin client")?;
    let mut report = Vec::new();
    let mut to_create = Vec::new();
    for spec in &specs {
        let name = names.name_of(&spec.name).with_context(|| format!("unknown topic {} in the topology", spec.name))?;
        match existing.get(name) {
            Some(&n) if n == spec.partitions => report.push(format!("{name}: exists with {n} partitions")),
            Some(&n) => bail!("{name} exists with {n} partitions, the topology says {}", spec.partitions),
            None => to_create.push((name.to_owned(), spec)),
        }
    }
    let retention: Vec<String> = to_create.iter().map(|(_, s)| s.retention_ms.to_string()).collect();
    let max_bytes: Vec<Option<String>> =
        to_create.iter().map(|(_, s)| s.max_message_bytes.map(|b| b.to_string())).collect();
    let new: Vec<NewTopic> = to_create
        .iter()
        .zip(retention.iter().zip(&max_bytes))
        .map(|((name, s), (ret, max))| {
            let t = NewTopic::new(name, s.partitions, TopicReplication::Fixed(1))
                .set("cleanup.policy", &s.cleanup_policy)
                .set("retention.ms", ret);
            match max {
                Some(m) => t.set("max.message.bytes", m),
                None => t,
            }
        })
        .collect();
    if !new.is_empty() {
        let results = admin
            .create_topics(&new, &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))))
            .await
            .context("creating topics")?;
        for r in results {
            match r {
                Ok(name) => report.push(format!("{name}: created")),
                Err((name, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {
                    report.push(format!("{name}: created concurrently"))
                }
                Err((name, e)) => bail!("creating {name}: {e}"),
            }
        }
    }
    Ok(report)
}

/// Creates one topic named `name` with the settings of the topology's `base` topic and `partitions` partitions,
/// unless it exists with that count. Returns what happened, as [`create`] does.
///
/// Errors: `base` is not in the topology; the broker is unreachable; the creation fails; the topic exists with
/// another partition count.
pub async fn create_one(brokers: &str, base: &str, name: &str, partitions: i32) -> anyhow::Result<String> {
    let spec = topics(None)?.into_iter().find(|t| t.name == base).with_context(|| format!("no topic {base}"))?;
    match partition_counts(brokers)?.get(name) {
        Some(&n) if n == partitions => return Ok(format!("{name}: exists with {n} partitions")),
        Some(&n) => bail!("{name} exists with {n} partitions, expected {partitions}"),
        None => {}
    }
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers).create().context("creating the Kafka admin client")?;
    let retention = spec.retention_ms.to_string();
    let max = spec.max_message_bytes.map(|b| b.to_string());
    let mut t = NewTopic::new(name, partitions, TopicReplication::Fixed(1))
        .set("cleanup.policy", &spec.cleanup_policy)
        .set("retention.ms", &retention);
    if let Some(m) = &max {
        t = t.set("max.message.bytes", m);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    match admin.create_topics([&t], &opts).await.context("creating a topic")?.pop() {
        Some(Ok(_)) => Ok(format!("{name}: created")),
        Some(Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists))) => {
            Ok(format!("{name}: created concurrently"))
        }
        Some(Err((_, e))) => bail!("creating {name}: {e}"),
        None => bail!("creating {name}: no answer"),
    }
}

/// Every topic's partition count, from the broker's metadata.
///
/// Errors: the broker does not answer within 10 s.
pub fn partition_counts(brokers: &str) -> anyhow::Result<HashMap<String, i32>> {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    let md = consumer.fetch_metadata(None, Duration::from_secs(10)).with_context(|| format!("Kafka at {brokers}"))?;
    Ok(md.topics().iter().map(|t| (t.name().to_owned(), t.partitions().len() as i32)).collect())
}

/// Kafka's murmur2 hash of a key, as the Java client's default partitioner (and librdkafka's `murmur2_random`)
/// computes it.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h = SEED ^ len as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= u32::from(tail[2]) << 16;
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= u32::from(tail[1]) << 8;
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= u32::from(tail[0]);
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition the Java default partitioner (and `murmur2_random`) picks for a non-empty key.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions as u32) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Values from Kafka's own UtilsTest.testMurmur2 (as signed ints in Java).
        let cases: [(&[u8], i32); 3] =
            [(b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536)];
        for (key, java) in cases {
            assert_eq!(murmur2(key) as i32, java, "{:?}", std::str::from_utf8(key));
        }
    }

    #[test]
    fn shipped_topology_is_co_partitioned() {
        let t = topics(None).unwrap();
        assert_eq!(t.len(), 4);
        assert!(topics(Some(3)).unwrap().iter().filter(|t| t.role != "dead-letter").all(|t| t.partitions == 3));
    }
}
