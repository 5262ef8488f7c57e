//! The topics each stage reads and writes, checked against the broker's metadata before anything joins a group
//! (issue 23: fail fast).

use std::collections::HashMap;

use crate::checkpoint::Stage;
use crate::topology::Topics;

use super::options::Role;

/// The topics a stage's member subscribes to, and the one whose records its tasks take first: the fold takes user
/// events first, so a read ack does not wait behind a backlog of deltas (its state is order-proof across the two).
pub fn stage_topics(topics: &Topics, stage: Stage) -> (Vec<&str>, Option<&str>) {
    match stage {
        Stage::FanOut => (vec![&topics.conversation_events], None),
        Stage::Fold => (vec![&topics.user_events, &topics.user_deltas], Some(&topics.user_events)),
    }
}

/// Fails when a topic the `stages` subscribe to, or the fan-out's output `unread.user-deltas`, is not in the
/// broker's metadata (`counts`): a consumer subscribed to a missing topic would wait, never ready, until its next
/// metadata refresh (5 minutes) and then get nothing, and the fan-out packs its deltas by that topic's partitions,
/// so the process stops at once instead, before joining any group (issue 23: fail fast).
///
/// Errors: names the missing topics and the command that creates them.
pub fn missing_topics(topics: &Topics, stages: &[Stage], counts: &HashMap<String, i32>) -> anyhow::Result<()> {
    let mut missing: Vec<&str> = stages.iter().flat_map(|&s| stage_topics(topics, s).0).collect();
    if stages.contains(&Stage::FanOut) && !missing.contains(&topics.user_deltas.as_str()) {
        missing.push(&topics.user_deltas); // the fan-out writes it, and packs its records by its partitions
    }
    missing.retain(|t| !counts.contains_key(*t));
    match missing.len() {
        0 => Ok(()),
        1 => anyhow::bail!("topic {} does not exist; create it with `unread topics create`", missing[0]),
        _ => anyhow::bail!("topics {} do not exist; create them with `unread topics create`", missing.join(", ")),
    }
}

/// The stages among `roles` (the API is none), fan-out first.
pub fn stages(roles: &[Role]) -> Vec<Stage> {
    let stages = [(Role::Fanout, Stage::FanOut), (Role::Fold, Stage::Fold)];
    stages.into_iter().filter(|(role, _)| roles.contains(role)).map(|(_, stage)| stage).collect()
}

/// The partition counts of `unread.conversation-events` and `unread.user-deltas` (0 for one that is absent), from
/// the broker's metadata. A blocking call.
///
/// Errors: Kafka does not answer; a topic the `stages` need is missing ([`missing_topics`]); `unread.user-events`
/// and `unread.user-deltas` have different partition counts (a user's events and deltas would not meet in one task).
pub fn partitions_of(brokers: &str, topics: &Topics, stages: &[Stage]) -> anyhow::Result<(i32, i32)> {
    let counts = crate::kafka::partition_counts(brokers)?;
    missing_topics(topics, stages, &counts)?;
    let count = |topic: &str| counts.get(topic).copied().unwrap_or(0);
    let (users, deltas) = (count(&topics.user_events), count(&topics.user_deltas));
    if users > 0 && deltas > 0 && users != deltas {
        anyhow::bail!(
            "{} has {users} partitions and {} {deltas}: they must be co-partitioned (the same count)",
            topics.user_events,
            topics.user_deltas
        );
    }
    Ok((count(&topics.conversation_events), deltas))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_topics_names_each_topic_a_stage_reads_or_writes_and_the_command() {
        let topics = Topics::new("t.");
        let mut counts: HashMap<String, i32> = [(topics.conversation_events.clone(), 8)].into_iter().collect();
        let err = missing_topics(&topics, &[Stage::FanOut], &counts).unwrap_err().to_string();
        assert_eq!(err, "topic t.unread.user-deltas does not exist; create it with `unread topics create`");
        let err = missing_topics(&topics, &[Stage::FanOut, Stage::Fold], &counts).unwrap_err().to_string();
        assert_eq!(
            err,
            "topics t.unread.user-events, t.unread.user-deltas do not exist; create them with `unread topics create`"
        );
        counts.insert(topics.user_events.clone(), 8);
        let err = missing_topics(&topics, &[Stage::Fold], &counts).unwrap_err().to_string();
        assert_eq!(err, "topic t.unread.user-deltas does not exist; create it with `unread topics create`");
        counts.insert(topics.user_deltas.clone(), 8);
        assert!(missing_topics(&topics, &[Stage::FanOut, Stage::Fold], &counts).is_ok());
        assert!(missing_topics(&topics, &[], &HashMap::new()).is_ok());
    }
}
