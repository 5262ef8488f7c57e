//! The per-recipient update that the fan-out emits and the fold applies: the payload of the internal topic
//! `unread.user-deltas`, partitioned by `user_id`.
//!
//! One [`Delta`] says what one batch of a conversation's events means for one user, as an ordered list of
//! [`DeltaOp`]s. Messages are coalesced: a run of messages during which the user's membership did not change is one
//! [`DeltaOp::Messages`] carrying seqs as ranges, however many messages it holds.
//!
//! A record holds one delta (a JSON object, keyed by its user) or several (a JSON array, no key), all of users of
//! the record's partition: [`pack`] and [`unpack`].
//!
//! Applying a delta is idempotent, and so is applying again any suffix of the deltas of one conversation already
//! applied (what a fan-out that restarts from its checkpoint produces): see `docs/semantics.md`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::seqset::SeqSet;

/// What one batch of conversation `conversation_id`'s events means for user `user_id`, in order.
///
/// A delta with no user (`user_id` empty, [`Delta::is_for_members`]) is for every member of the conversation a fold
/// holds: the replies of a read-diffused conversation ([`crate::core::fanout`]), sent once to each partition of
/// the delta topic instead of once per member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The recipient, also the record key on `unread.user-deltas`.
    pub user_id: String,
    /// The conversation the ops are about: shared by every delta of one batch of the conversation (one id for
    /// its members' deltas, not a copy each).
    pub conversation_id: Arc<str>,
    /// In order; empty only in a delta that just says the conversation became a feed.
    pub ops: Vec<DeltaOp>,
    /// The conversation is a feed (`CONTRACT.md` § v2, "Kind"): its counts go to `feed_unread`. Absent (false) on
    /// the wire for other kinds, so v1 deltas are unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub feed: bool,
    /// Where the delta came from, for the fold's fence against zombie deltas: set by the fan-out's shell when it
    /// produces the delta, `None` in the core. On the wire `"source": [partition, generation]`; absent in deltas of
    /// releases before it, which carried it in the record header [`crate::kafka::headers::DELTA_SOURCE`] (the fold
    /// still reads that header when the field is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<DeltaSource>,
    /// v4: the conversation's team (`CONTRACT.md` § v4, "Teams"), on every delta of a conversation that has one.
    /// Absent on the wire otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<Arc<str>>,
}

impl Delta {
    /// Whether this delta is for every member a fold holds of its conversation, not for one user: a read-diffused
    /// conversation's replies (`user_id` empty; [`crate::core::fold::Fold::apply_for_members`]).
    pub fn is_for_members(&self) -> bool {
        self.user_id.is_empty()
    }
}

/// v4: what a run of messages holds of one thread for one user (`CONTRACT.md` § v4, "Threads").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadRun {
    /// The thread's countable, not recalled replies of others in the run: candidates for the thread's unread.
    #[serde(default, skip_serializing_if = "SeqSet::is_empty")]
    pub unread: SeqSet,
    /// The seqs of `unread` that mention the user (by name or `mention_all`).
    #[serde(default, skip_serializing_if = "SeqSet::is_empty")]
    pub mentions: SeqSet,
    /// The highest reply the user sent in the thread in the run, 0 for none: it moves the thread's cursor, and
    /// the user follows the thread.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub read_to: u64,
}

/// v4: the reactions of one message after a batch (`CONTRACT.md` § v4, "Reactions"): of its live, counted
/// reactions, the highest `reaction_seq` (`top`, 0 for none) and who made it (`by`), and the highest of anyone
/// else (`other`, 0 for none). The message's sender U counts it when the highest of someone other than U, `top`
/// or, when U made it, `other`, is above U's reaction cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReactionSummary {
    /// The message reacted to.
    pub seq: u64,
    /// The highest `reaction_seq` of its live reactions, 0 for none.
    pub top: u64,
    /// Who made the reaction `top` is of.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// The highest `reaction_seq` of a live reaction by someone other than `by`, 0 for none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub other: u64,
}

impl ReactionSummary {
    /// The highest `reaction_seq` of a live reaction by someone other than `user` (0 for none).
    pub fn by_others_than(&self, user: &str) -> u64 {
        if self.by == user {
            self.other
        } else {
            self.top
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One step of a [`Delta`]. Seqs are the conversation's message seqs (1..=2^53).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeltaOp {
    /// The user became a member when the conversation's head was `head`: nothing at or below it is ever unread
    /// for this membership (`CONTRACT.md` § Semantics, "head(C) when U last joined").
    Joined {
        /// The conversation's head at the join.
        head: u64,
        /// v4: the conversation's highest `reaction_seq` at the join: no reaction at or below it is new for this
        /// membership (`CONTRACT.md` § v4, "Reactions"). Absent (0) on the wire when none.
        #[serde(default, skip_serializing_if = "is_zero")]
        reactions: u64,
    },
    /// The user stopped being a member: the conversation leaves the user's counts.
    Left,
    /// A run of messages sent while the user's membership did not change.
    Messages {
        /// The countable, not recalled messages of others in the run: candidates for unread. The fold keeps those
        /// above the user's cursor as unread and those at or below it (read, for instance by the user's own later
        /// message) as the read history that "unread from here" counts again (`CONTRACT.md` § v3).
        unread: SeqSet,
        /// The seqs of `unread` that mention the user (by name or `mention_all`); in a read-diffused conversation,
        /// where `unread` is empty, the seqs of its index that mention the user by name.
        mentions: SeqSet,
        /// The highest seq the user sent in the run, 0 for none: sending means having read everything before
        /// (`CONTRACT.md` § Semantics, "every seq that U sent in C"). Sent even to a non-member sender.
        read_to: u64,
        /// v3, conversations with `unread_ttl_days`: the seqs of `unread` grouped by the UTC day on which they
        /// expire ([`crate::core::expiry`]), ascending by day. Absent (empty) on the wire otherwise, so v2 deltas are
        /// unchanged.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        expiry: Vec<(i64, SeqSet)>,
        /// v3: every seq the user sent in the run while a member (countable or not): the messages whose
        /// receipts leave the user out while that membership lasts ([`crate::core::receipts`]). Absent (empty)
        /// on the wire when none.
        #[serde(default, skip_serializing_if = "SeqSet::is_empty")]
        own: SeqSet,
        /// v4: per thread root, the run's replies in that thread (`unread`, `mentions` and `read_to` above are
        /// the main timeline's only: a reply never counts in its conversation). Absent (empty) on the wire when
        /// none.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        threads: std::collections::BTreeMap<u64, ThreadRun>,
    },
    /// v4: seqs that name the user (in `mentions`, countable or not, recalled or not), and the roots of the threads
    /// whose replies among them name the user: naming makes the user follow a thread (`CONTRACT.md` § v4).
    /// Sent to members and non-members alike.
    Named {
        /// The seqs naming the user.
        seqs: SeqSet,
        /// The roots of the threads of the replies among `seqs`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        threads: Vec<u64>,
    },
    /// v4: messages whose reactions changed in the batch; every member hears them (read-diffused, in the delta for
    /// every member, which the fold gives each message's sender), and each message's sender keeps those of its own
    /// messages. Comes last in a delta.
    Reactions {
        /// One per message, ascending by seq.
        summaries: Vec<ReactionSummary>,
    },
    /// These seqs were recalled: they stop counting. Comes first in a delta and covers every recall of the batch,
    /// also of messages sent in it (which the batch's Messages ops already leave out), so that a delta produced
    /// before a fan-out crash, with another batching, cannot keep a recalled message unread. (A read-diffused
    /// conversation's recalls of seqs in its index change only the index.)
    Recalled {
        /// The recalled seqs.
        seqs: SeqSet,
    },
    /// The conversation became read-diffused when its head was `since` (`crate::core::hybrid`): seqs above it
    /// count from the conversation's index, combined at read time; the user keeps only those at or below it. Also
    /// follows `Joined` for a member who joins a read-diffused conversation.
    ReadDiffusion {
        /// The head at the switch.
        since: u64,
    },
    /// v3: the conversation's first `conversation.created` came after some of its messages and gave a ttl: these
    /// seqs (those the user holds) expire on these UTC days.
    Expiry {
        /// (expiry day, seqs), ascending by day.
        expiry: Vec<(i64, SeqSet)>,
    },
    /// The conversation went back to write diffusion: its index's seqs become the user's own unread (above the
    /// user's cursor) and its index is dropped.
    WriteDiffusion {
        /// The index's live seqs.
        unread: SeqSet,
        /// The index's seqs that mention everyone (the user's named mentions are already in the user's state).
        mentions: SeqSet,
        /// v3: the index's seqs by the UTC day they expire, ascending by day (absent on the wire when none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        expiry: Vec<(i64, SeqSet)>,
    },
}

/// Where a delta came from: the fan-out partition that produced it and that task's lease generation. Carried in
/// the delta as [`Delta::source`], `[partition, generation]` on the wire; deltas of earlier releases carried it in
/// the record header [`crate::kafka::headers::DELTA_SOURCE`] as `"{partition} {generation}"` ([`DeltaSource::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(i32, i64)", into = "(i32, i64)")]
pub struct DeltaSource {
    /// The fan-out partition (of `unread.conversation-events`).
    pub partition: i32,
    /// The producing task's lease generation of that partition.
    pub generation: i64,
}

impl From<(i32, i64)> for DeltaSource {
    fn from((partition, generation): (i32, i64)) -> Self {
        Self { partition, generation }
    }
}

impl From<DeltaSource> for (i32, i64) {
    fn from(s: DeltaSource) -> Self {
        (s.partition, s.generation)
    }
}

impl DeltaSource {
    /// Parses the header value of a delta of an earlier release, `"{partition} {generation}"`; `None` when it is
    /// not two numbers.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let (p, g) = std::str::from_utf8(value).ok()?.split_once(' ')?;
        Some(Self { partition: p.parse().ok()?, generation: g.parse().ok()? })
    }
}

/// The fold's fence against **zombie deltas** (`docs/guarantees.md`): per fan-out partition, the newest lease
/// generation seen in one partition of `unread.user-deltas`. A delta from an older generation than one already seen
/// from the same fan-out partition was produced by a task whose partition had moved (paused, then resumed) after
/// its successor started producing: it is dropped. Nothing is lost by dropping it: the successor re-processes
/// every event since the old task's last checkpoint, so each effect of the late delta reaches the fold again, in
/// order. A late delta that arrives before any of the successor's is an ordinary repeated suffix, applied
/// idempotently. The fence is checkpointed with the fold's offsets (one transaction), so a restarted fold task
/// drops exactly what it dropped before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    newest: std::collections::BTreeMap<i32, i64>,
    changed: bool,
}

impl Fence {
    /// A fence from its checkpoint rows: (fan-out partition, newest generation seen).
    pub fn from_rows(rows: impl IntoIterator<Item = (i32, i64)>) -> Self {
        Self { newest: rows.into_iter().collect(), changed: false }
    }

    /// Whether a delta from `source` may be applied (its generation is not older than the newest seen from its
    /// partition); remembers its generation.
    pub fn admit(&mut self, source: DeltaSource) -> bool {
        let newest = self.newest.entry(source.partition).or_insert(i64::MIN);
        if source.generation < *newest {
            return false;
        }
        self.changed |= source.generation > *newest;
        *newest = source.generation;
        true
    }

    /// The rows that changed since the last call (all of them once changed: a handful), to checkpoint.
    pub fn take_changed(&mut self) -> Vec<(i32, i64)> {
        if !std::mem::take(&mut self.changed) {
            return Vec::new();
        }
        self.newest.iter().map(|(p, g)| (*p, *g)).collect()
    }
}

/// One record of `unread.user-deltas` as [`pack`] makes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaRecord {
    /// The partition of its users (`partition_of` their id).
    pub partition: i32,
    /// The user of a record of one delta; `None` for a record of several.
    pub key: Option<String>,
    /// JSON: a [`Delta`] object, or an array of them.
    pub payload: Vec<u8>,
}

/// Packs a batch's deltas into records: per partition (`partition_of(user_id)`), in order, JSON arrays of
/// consecutive deltas up to `max_bytes` each. A record that would hold one delta holds it alone, as an object keyed
/// by its user: the form of releases before records of several, which `max_bytes` 0 gives for every delta (during
/// a rolling upgrade from such a release, whose fold reads no other; docs/operations.md, "Upgrading"). A delta
/// bigger than `max_bytes` goes alone too.
///
/// Why: a delta per record cost a record's overhead in the producer, the broker and the fold's consumer for every
/// delta, at least a delta per joiner when a million join one feed (docs/performance.md, "Deltas packed per
/// partition"). The order of one user's deltas, which the fold needs, is kept: they are in one partition, in
/// order within a record and across records. A delta for every member ([`Delta::is_for_members`]) goes to each of
/// the topic's `partitions`, after the deltas before it.
pub fn pack(
    deltas: &[Delta],
    partition_of: impl Fn(&str) -> i32,
    partitions: i32,
    max_bytes: usize,
) -> Vec<DeltaRecord> {
    let mut open: Vec<(i32, Vec<&Delta>, Vec<u8>)> = Vec::new(); // partition, its deltas, their array so far
    let mut records = Vec::new();
    for d in deltas {
        let json = serde_json::to_vec(d).expect("deltas serialize");
        let targets = match d.is_for_members() {
            true => 0..partitions,
            false => partition_of(&d.user_id)..partition_of(&d.user_id) + 1,
        };
        for partition in targets {
            let i = open.iter().position(|(p, ..)| *p == partition).unwrap_or_else(|| {
                open.push((partition, Vec::new(), Vec::new()));
                open.len() - 1
            });
            let (_, members, array) = &mut open[i];
            if !members.is_empty() && array.len() + 1 + json.len() + 1 > max_bytes {
                records.push(close(partition, std::mem::take(members), std::mem::take(array)));
            }
            array.push(if members.is_empty() { b'[' } else { b',' });
            array.extend_from_slice(&json);
            members.push(d);
        }
    }
    records.extend(open.into_iter().map(|(p, members, array)| close(p, members, array)));
    records
}

/// The record of `members`, whose JSON array without its closing bracket is `array`: the lone delta's own object
/// when there is one, keyed by its user (none for a delta for every member).
fn close(partition: i32, members: Vec<&Delta>, mut array: Vec<u8>) -> DeltaRecord {
    if let [only] = members[..] {
        array.remove(0);
        let key = (!only.is_for_members()).then(|| only.user_id.clone());
        return DeltaRecord { partition, key, payload: array };
    }
    array.push(b']');
    DeltaRecord { partition, key: None, payload: array }
}

/// Whether a record's payload is of several deltas (a JSON array: its first byte after whitespace is `[`), not one.
pub fn is_packed(payload: &[u8]) -> bool {
    payload.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// The deltas of a record's payload: one for a JSON object, each of a JSON array ([`is_packed`]), in order.
///
/// Errors: the payload is neither (serde_json's message).
pub fn unpack(payload: &[u8]) -> Result<Vec<Delta>, serde_json::Error> {
    match is_packed(payload) {
        true => serde_json::from_slice(payload),
        false => serde_json::from_slice(payload).map(|d| vec![d]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(user: &str) -> Delta {
        let ops = vec![DeltaOp::Joined { head: 3, reactions: 0 }, DeltaOp::ReadDiffusion { since: 3 }];
        Delta { user_id: user.into(), conversation_id: "feed".into(), ops, feed: true, source: None, team: None }
    }

    #[test]
    fn packed_deltas_keep_each_partitions_order_and_unpack_to_the_batch() {
        let batch: Vec<Delta> = (0..10).map(|i| joined(&format!("u{i}"))).collect();
        let partition_of = |user: &str| i32::from(user.as_bytes()[1] % 3);
        let records = pack(&batch, partition_of, 3, 1 << 20);
        assert_eq!(records.len(), 3, "one record per partition: {records:?}");
        for r in &records {
            assert_eq!(r.key, None, "several deltas: no key");
            let deltas = unpack(&r.payload).unwrap();
            assert!(deltas.iter().all(|d| partition_of(&d.user_id) == r.partition));
            let expected: Vec<&Delta> = batch.iter().filter(|d| partition_of(&d.user_id) == r.partition).collect();
            assert_eq!(deltas.iter().collect::<Vec<_>>(), expected, "in the batch's order");
        }
    }

    #[test]
    fn a_delta_for_every_member_goes_to_every_partition_after_the_deltas_before_it() {
        let mut batch: Vec<Delta> = (0..4).map(|i| joined(&format!("u{i}"))).collect();
        batch.push(Delta { user_id: String::new(), ..joined("") });
        let partition_of = |user: &str| i32::from(user.as_bytes()[1] % 2);
        let records = pack(&batch, partition_of, 3, 1 << 20);
        assert_eq!(records.iter().map(|r| r.partition).collect::<Vec<_>>(), [0, 1, 2]);
        for r in &records {
            let deltas = unpack(&r.payload).unwrap();
            assert!(deltas.last().unwrap().is_for_members(), "last in partition {}", r.partition);
        }
        assert_eq!(records[2].key, None, "a lone delta for every member has no key");
        assert_eq!(unpack(&records[0].payload).unwrap().len(), 3);
    }

    #[test]
    fn a_record_stays_under_its_bound_and_a_lone_delta_is_an_object_keyed_by_its_user() {
        let batch: Vec<Delta> = (0..7).map(|i| joined(&format!("u{i}"))).collect();
        let one = serde_json::to_vec(&batch[0]).unwrap().len();
        let records = pack(&batch, |_| 0, 1, 3 * one + 4); // three deltas, two commas, two brackets
        let sizes: Vec<usize> = records.iter().map(|r| unpack(&r.payload).unwrap().len()).collect();
        assert_eq!(sizes, vec![3, 3, 1]);
        assert!(records.iter().all(|r| r.payload.len() <= 3 * one + 4));
        let last = &records[2];
        assert_eq!((last.key.as_deref(), last.payload[0]), (Some("u6"), b'{'), "the form of a delta per record");
        assert_eq!(unpack(&last.payload).unwrap(), vec![batch[6].clone()]);
        let singles = pack(&batch, |_| 0, 1, 0);
        assert_eq!(singles.len(), 7, "max_bytes 0: a delta per record");
        for (r, d) in singles.iter().zip(&batch) {
            assert_eq!(
                (r.key.as_deref(), serde_json::from_slice::<Delta>(&r.payload).unwrap()),
                (Some(&*d.user_id), d.clone())
            );
        }
        assert!(unpack(b"[1]").is_err() && unpack(b"{}").is_err());
    }

    #[test]
    fn the_fence_drops_an_older_generation_once_a_newer_one_was_seen_per_partition() {
        let mut fence = Fence::default();
        let src = |partition, generation| DeltaSource { partition, generation };
        assert!(fence.admit(src(0, 3)) && fence.admit(src(0, 3)), "the same generation, again");
        assert_eq!(fence.take_changed(), vec![(0, 3)]);
        assert!(fence.take_changed().is_empty(), "nothing new");
        assert!(fence.admit(src(1, 1)), "another partition's generations are its own");
        assert!(fence.admit(src(0, 4)) && !fence.admit(src(0, 3)), "the zombie's late delta");
        let mut restored = Fence::from_rows(fence.take_changed());
        assert!(!restored.admit(src(0, 3)) && restored.admit(src(1, 1)));
        assert_eq!(DeltaSource::parse(b"7 12"), Some(src(7, 12)));
        assert_eq!(DeltaSource::parse(b"7"), None);
    }

    #[test]
    fn a_delta_carries_its_source_as_a_pair_and_one_without_it_reads_as_before() {
        let mut d = Delta {
            user_id: "u".into(),
            conversation_id: "c".into(),
            ops: vec![DeltaOp::Left],
            feed: false,
            source: None,
            team: None,
        };
        let without = serde_json::to_string(&d).unwrap();
        assert_eq!(without, r#"{"user_id":"u","conversation_id":"c","ops":["Left"]}"#, "as deltas were before");
        d.source = Some(DeltaSource { partition: 3, generation: 17 });
        let with = serde_json::to_string(&d).unwrap();
        assert_eq!(with, r#"{"user_id":"u","conversation_id":"c","ops":["Left"],"source":[3,17]}"#);
        assert_eq!(serde_json::from_str::<Delta>(&with).unwrap(), d);
        assert_eq!(serde_json::from_str::<Delta>(&without).unwrap().source, None);
    }
}
