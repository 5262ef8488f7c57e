//! Fencing a previous owner's transactional producer ([`fence`]), once per owner however many of its partitions
//! this instance takes ([`Fences`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::Producer;
use tracing::info;

use super::producer::transactional_producer;
use crate::checkpoint::store::Unreleased;
use crate::kafka::producer::AsyncProducer;
use crate::service::error::TaskError;

/// The previous owners' transactional ids this instance fenced, each with when its last fencing began: tasks that
/// take several partitions of one crashed owner at once fence its producer once.
pub struct Fences {
    /// The Kafka bootstrap servers.
    brokers: String,
    /// The fan-out's consumer group, `{group}.fanout`: whose members are alive.
    group: String,
    fenced: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Instant>>>>>,
}

impl Fences {
    /// No fencing yet, of the producers of the fan-out group `group`'s previous owners on `brokers`.
    pub fn new(brokers: &str, group: &str) -> Self {
        Self { brokers: brokers.to_owned(), group: group.to_owned(), fenced: Default::default() }
    }
}

/// Fences the producer of partition `p`'s previous owner, which did not release the lease this task took at
/// `leased` and wrote with another transactional id (the instance's shared producer: its successor's is another):
/// initializes a producer of that id ([`transactional_producer`]) and drops it. Kafka then refuses every later
/// send and commit of the old producer and aborts its open transaction, whose deltas would otherwise hold back the
/// fold's last stable offset until the transaction timed out. A fencing of that id that began after `leased`
/// (another task's, for another partition of the same owner) is enough.
///
/// An owner still a member of the fan-out's consumer group is alive and gave the partition up in a rebalance
/// (`live_member`): it is not fenced, since that would abort the transaction of every partition it keeps. Its
/// last deltas then repeat what this task produces from the same checkpoint, or come after them and are dropped
/// by the fold's fence (docs/operations.md, "Fencing").
///
/// `client`: any producer of this process, whose connection describes the group.
///
/// Errors: as [`transactional_producer`].
pub async fn fence(
    fences: &Fences,
    client: AsyncProducer,
    p: i32,
    previous: &Unreleased,
    leased: Instant,
) -> Result<(), TaskError> {
    let id = previous.transactional_id.as_str();
    let slot = fences.fenced.lock().unwrap_or_else(|e| e.into_inner()).entry(id.to_owned()).or_default().clone();
    let mut last = slot.lock().await;
    if last.is_some_and(|began| began >= leased) {
        return Ok(()); // fenced since this lease was taken: no need to ask the group either
    }
    if live_member(client, &fences.group, &previous.owner).await {
        info!(partition = p, owner = %previous.owner, "the previous owner is a live member: not fenced");
        return Ok(());
    }
    let began = Instant::now();
    drop(transactional_producer(&fences.brokers, id).await?);
    *last = Some(began);
    let ms = began.elapsed().as_millis() as u64;
    info!(partition = p, transactional_id = %id, ms, "the previous owner's producer is fenced");
    Ok(())
}

/// Whether `owner` is a member of the fan-out's consumer group now: its consumer's `client.id` is the owner's
/// name ([`crate::kafka::Membership::client_id`]). Asked of the group coordinator with the classic protocol's
/// DescribeGroups (up to 2 s); a group it cannot describe (an error) counts as no member. KIP-848 groups, which
/// that request cannot describe, run with a producer per partition ([`crate::service::RunOptions::one_producer`]).
async fn live_member(client: AsyncProducer, group: &str, owner: &str) -> bool {
    let (group, owner) = (group.to_owned(), owner.to_owned());
    let ask = move || {
        let groups = client.client().fetch_group_list(Some(&group), Duration::from_secs(2)).ok()?;
        let found = groups.groups().iter().any(|g| g.members().iter().any(|m| m.client_id() == owner));
        Some(found)
    };
    tokio::task::spawn_blocking(ask).await.ok().flatten().unwrap_or(false)
}
