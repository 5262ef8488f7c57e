//! The topics (`topology/topics.toml`, compiled into the binary) and `unread topics create`.

use anyhow::{bail, Context};
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::types::RDKafkaErrorCode;
use serde::Deserialize;

use crate::kafka;

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
    /// The topic's base name (e.g. `unread.user-events`).
    pub name: String,
    /// What the topic is for: `input`, `internal` or `dead-letter`.
    pub role: String,
    /// What the record key is (e.g. `user_id`).
    pub key: String,
    /// The partition count.
    pub partitions: i32,
    /// Kafka's `cleanup.policy`.
    pub cleanup_policy: String,
    /// Kafka's `retention.ms`: how long records are kept, ms.
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
    /// `unread.conversation-events` under the prefix.
    pub conversation_events: String,
    /// `unread.user-events` under the prefix.
    pub user_events: String,
    /// `unread.user-deltas` (the namespace's own) under the prefix.
    pub user_deltas: String,
    /// `unread.dead-letter` under the prefix.
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

/// The topic `name` with the topology settings of `spec` and `partitions` partitions.
fn new_topic<'a>(name: &'a str, spec: &'a TopicSpec, partitions: i32, values: &'a [String; 2]) -> NewTopic<'a> {
    let t = NewTopic::new(name, partitions, TopicReplication::Fixed(1))
        .set("cleanup.policy", &spec.cleanup_policy)
        .set("retention.ms", &values[0]);
    match spec.max_message_bytes {
        Some(_) => t.set("max.message.bytes", &values[1]),
        None => t,
    }
}

/// Creates `topics` (name, spec, partitions) and returns one line per topic saying what happened, once the
/// broker's metadata shows them all ([`kafka::await_topics`]); a topic created concurrently by another process
/// counts as created.
///
/// Errors: the broker is unreachable, a creation fails, or the topics do not show in the metadata within 10 s.
async fn create_all(brokers: &str, topics: &[(String, &TopicSpec, i32)]) -> anyhow::Result<Vec<String>> {
    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let values: Vec<[String; 2]> = topics
        .iter()
        .map(|(_, s, _)| [s.retention_ms.to_string(), s.max_message_bytes.unwrap_or_default().to_string()])
        .collect();
    let new: Vec<NewTopic> =
        topics.iter().zip(&values).map(|((name, spec, n), v)| new_topic(name, spec, *n, v)).collect();
    let results =
        kafka::admin(brokers)?.create_topics(&new, &kafka::admin_options()).await.context("creating topics")?;
    let lines = results
        .into_iter()
        .map(|r| match r {
            Ok(name) => Ok(format!("{name}: created")),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => Ok(format!("{name}: created concurrently")),
            Err((name, e)) => bail!("creating {name}: {e}"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let created: Vec<(String, i32)> = topics.iter().map(|(name, _, n)| (name.clone(), *n)).collect();
    let brokers = brokers.to_owned();
    tokio::task::spawn_blocking(move || kafka::await_topics(&brokers, &created)).await??;
    Ok(lines)
}

/// Creates the topics of `names` (a namespace's, [`crate::config::Settings::topics`]) that do not exist, with the
/// topology's settings, and checks the partition count of those that do. Returns one line per topic saying what
/// happened.
///
/// Errors: the broker is unreachable, a creation fails, or an existing topic has another partition count.
pub async fn create(brokers: &str, names: &Topics, partitions: Option<i32>) -> anyhow::Result<Vec<String>> {
    let specs = topics(partitions)?;
    let existing = kafka::partition_counts(brokers)?;
    let mut report = Vec::new();
    let mut to_create = Vec::new();
    for spec in &specs {
        let name = names.name_of(&spec.name).with_context(|| format!("unknown topic {} in the topology", spec.name))?;
        match existing.get(name) {
            Some(&n) if n == spec.partitions => report.push(format!("{name}: exists with {n} partitions")),
            Some(&n) => bail!("{name} exists with {n} partitions, the topology says {}", spec.partitions),
            None => to_create.push((name.to_owned(), spec, spec.partitions)),
        }
    }
    report.extend(create_all(brokers, &to_create).await?);
    Ok(report)
}

/// Creates one topic named `name` with the settings of the topology's `base` topic and `partitions` partitions,
/// unless it exists with that count. Returns what happened, as [`create`] does.
///
/// Errors: `base` is not in the topology; the broker is unreachable; the creation fails; the topic exists with
/// another partition count.
pub async fn create_one(brokers: &str, base: &str, name: &str, partitions: i32) -> anyhow::Result<String> {
    let specs = topics(None)?;
    let spec = specs.iter().find(|t| t.name == base).with_context(|| format!("no topic {base}"))?;
    match kafka::partition_counts(brokers)?.get(name) {
        Some(&n) if n == partitions => return Ok(format!("{name}: exists with {n} partitions")),
        Some(&n) => bail!("{name} exists with {n} partitions, expected {partitions}"),
        None => {}
    }
    let mut lines = create_all(brokers, &[(name.to_owned(), spec, partitions)]).await?;
    lines.pop().with_context(|| format!("creating {name}: no answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_topology_is_co_partitioned() {
        let t = topics(None).unwrap();
        assert_eq!(t.len(), 4);
        assert!(topics(Some(3)).unwrap().iter().filter(|t| t.role != "dead-letter").all(|t| t.partitions == 3));
    }
}
