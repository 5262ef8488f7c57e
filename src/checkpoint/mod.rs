//! Checkpoint encoding: the bytes stored in PostgreSQL for one user's fold state or one conversation's fan-out
//! state (tables in `migrations/`), the [`Stage`] a checkpoint belongs to, and the transactional [`store`].
//!
//! Format: one version byte ([`FORMAT_VERSION`]) followed by the state in postcard (serde, varint integers).
//! Version 2 (contract v2) adds to a user's row the feed flag per conversation, `feed_unread`, the broadcast cursors
//! and the notification summary; version 3 adds read diffusion (`crate::core::hybrid`): per conversation of a user,
//! the switch and the named mentions above it, and per conversation of the fan-out, its index. Rows of versions 1
//! and 2 still decode (as users and conversations without those). A user's remembered
//! notifications ([`encode_note`]) and the broadcast lists ([`encode_list`]) have rows of their own.
//! Range sets make a user's state small whatever the unread count: a dev-set user averages tens of bytes.
//! Decoding checks the invariants (sorted disjoint ranges, mentions within unread, totals equal to the sums), so
//! a corrupt row is an error, never a wrong count.

pub mod store;

use std::fmt;

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::core::broadcast::ListState;
use crate::core::contract::ConversationKind;
use crate::core::fanout::ConversationState;
use crate::core::fold::{ConvState, Totals, UserState};
use crate::core::notifications::{Note, Summary};
use crate::core::seqset::SeqSet;

/// A stage of the pipeline: which checkpoint tables, leases, consumer group and metrics a partition task uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// The fan-out: partitions of `unread.conversation-events`, conversations' state.
    FanOut,
    /// The fold: partitions of `unread.user-events` and `unread.user-deltas`, users' state.
    Fold,
}

impl Stage {
    /// Both stages, fan-out first.
    pub const ALL: [Stage; 2] = [Stage::FanOut, Stage::Fold];

    /// The stage's name in tables, group ids, metrics labels and logs: `fanout` or `fold`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::FanOut => "fanout",
            Stage::Fold => "fold",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The version byte of the current encoding.
pub const FORMAT_VERSION: u8 = 3;

/// Why checkpoint bytes could not be turned back into state.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The bytes are empty or start with a version this build does not read.
    #[error("unsupported checkpoint format version {found:?} (this build reads 1 to {FORMAT_VERSION})")]
    Version {
        /// The first byte, if any.
        found: Option<u8>,
    },
    /// The payload does not decode.
    #[error("corrupt checkpoint: {0}")]
    Corrupt(#[from] postcard::Error),
    /// The payload decodes but breaks an invariant.
    #[error("inconsistent checkpoint: {0}")]
    Inconsistent(String),
}

fn encode<T: serde::Serialize>(state: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    // Serializing plain structs, maps and vectors into a Vec cannot fail.
    out.extend(postcard::to_allocvec(state).expect("postcard serializes in-memory state"));
    out
}

fn decode<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, CheckpointError> {
    match bytes.split_first() {
        Some((&v, payload)) if (1..=FORMAT_VERSION).contains(&v) => Ok(postcard::from_bytes(payload)?),
        other => Err(CheckpointError::Version { found: other.map(|(v, _)| *v) }),
    }
}

/// A user's row as version 1 wrote it (postcard is positional: the same fields in the same order).
#[derive(Deserialize)]
struct UserStateV1 {
    conversations: BTreeMap<String, ConvStateV1>,
    totals: TotalsV1,
    clock: u64,
    detached: usize,
}

#[derive(Deserialize)]
struct ConvStateV1 {
    floor: u64,
    joined_at: Option<u64>,
    muted: bool,
    unread: SeqSet,
    mentions: SeqSet,
    touched: u64,
}

#[derive(Deserialize)]
struct TotalsV1 {
    total_unread: u64,
    total_mentions: u64,
    unread_conversations: u64,
    memberships: u64,
}

/// A user's row as version 2 wrote it: version 3 added two fields to each conversation.
#[derive(Deserialize)]
struct UserStateV2 {
    conversations: BTreeMap<String, ConvStateV2>,
    totals: Totals,
    clock: u64,
    detached: usize,
    broadcasts: BTreeMap<String, u64>,
    notifications: Summary,
}

/// Version 1's fields, then the feed flag (postcard writes a nested struct's fields in line, so this is the same
/// bytes as the seven fields flat).
#[derive(Deserialize)]
struct ConvStateV2 {
    v1: ConvStateV1,
    feed: bool,
}

impl From<ConvStateV1> for ConvState {
    fn from(c: ConvStateV1) -> Self {
        let ConvStateV1 { floor, joined_at, muted, unread, mentions, touched } = c;
        ConvState { floor, joined_at, muted, unread, mentions, touched, ..ConvState::default() }
    }
}

impl From<ConvStateV2> for ConvState {
    fn from(c: ConvStateV2) -> Self {
        ConvState { feed: c.feed, ..c.v1.into() }
    }
}

impl From<UserStateV2> for UserState {
    fn from(v2: UserStateV2) -> Self {
        let conversations = v2.conversations.into_iter().map(|(id, c)| (id, c.into())).collect();
        UserState::from_parts(conversations, v2.totals, v2.clock, v2.detached)
            .with_v2_parts(v2.broadcasts, v2.notifications)
    }
}

/// A conversation's row as versions 1 and 2 wrote it (without an index).
#[derive(Deserialize)]
struct ConversationStateV2 {
    kind: Option<ConversationKind>,
    head: u64,
    members: BTreeMap<String, u64>,
}

impl From<UserStateV1> for UserState {
    fn from(v1: UserStateV1) -> Self {
        let conversations = v1.conversations.into_iter().map(|(id, c)| (id, c.into())).collect();
        let t = v1.totals;
        let totals = Totals {
            total_unread: t.total_unread,
            total_mentions: t.total_mentions,
            unread_conversations: t.unread_conversations,
            memberships: t.memberships,
            feed_unread: 0,
        };
        UserState::from_parts(conversations, totals, v1.clock, v1.detached)
    }
}

/// Encodes one user's fold state.
pub fn encode_user(state: &UserState) -> Vec<u8> {
    encode(state)
}

/// Decodes one user's fold state.
///
/// Errors: [`CheckpointError::Version`] for another format, [`CheckpointError::Corrupt`] for bytes that do not
/// decode, [`CheckpointError::Inconsistent`] for a state whose totals or sets break the fold's invariants.
pub fn decode_user(bytes: &[u8]) -> Result<UserState, CheckpointError> {
    let state: UserState = match bytes.split_first() {
        Some((1, payload)) => postcard::from_bytes::<UserStateV1>(payload)?.into(),
        Some((2, payload)) => postcard::from_bytes::<UserStateV2>(payload)?.into(),
        _ => decode(bytes)?,
    };
    state.check_own().map_err(CheckpointError::Inconsistent)?;
    Ok(state)
}

/// Encodes one broadcast list's state (head and live seqs).
pub fn encode_list(state: &ListState) -> Vec<u8> {
    encode(state)
}

/// Decodes one broadcast list's state.
///
/// Errors: [`CheckpointError::Version`] or [`CheckpointError::Corrupt`]; a live seq above the head is inconsistent.
pub fn decode_list(bytes: &[u8]) -> Result<ListState, CheckpointError> {
    let state: ListState = decode(bytes)?;
    if state.live.max().is_some_and(|m| m > state.head) {
        return Err(CheckpointError::Inconsistent(format!("a live seq above head {}", state.head)));
    }
    Ok(state)
}

/// Encodes one remembered notification.
pub fn encode_note(note: &Note) -> Vec<u8> {
    encode(note)
}

/// Decodes one remembered notification.
///
/// Errors: [`CheckpointError::Version`] or [`CheckpointError::Corrupt`].
pub fn decode_note(bytes: &[u8]) -> Result<Note, CheckpointError> {
    decode(bytes)
}

/// Encodes one conversation's fan-out state.
pub fn encode_conversation(state: &ConversationState) -> Vec<u8> {
    encode(state)
}

/// Decodes one conversation's fan-out state.
///
/// Errors: as [`decode_user`]; a member who joined above the head is inconsistent.
pub fn decode_conversation(bytes: &[u8]) -> Result<ConversationState, CheckpointError> {
    let state: ConversationState = match bytes.split_first() {
        Some((1 | 2, payload)) => {
            let v2: ConversationStateV2 = postcard::from_bytes(payload)?;
            ConversationState { kind: v2.kind, head: v2.head, members: v2.members, index: None }
        }
        _ => decode(bytes)?,
    };
    if state.index.as_ref().is_some_and(|i| i.live.max().is_some_and(|m| m > state.head) || i.since > state.head) {
        return Err(CheckpointError::Inconsistent(format!("an index above head {}", state.head)));
    }
    if let Some((user, at)) = state.members.iter().find(|(_, at)| **at > state.head) {
        return Err(CheckpointError::Inconsistent(format!(
            "member {user:?} joined at {at}, above head {}",
            state.head
        )));
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::contract::{ConversationEvent, MemberJoined, MessageSent, ReadAck, UserEvent};
    use crate::core::fanout::FanOut;
    use crate::core::fold::Fold;

    fn sample() -> (FanOut, Fold) {
        let meta = || ("e".to_owned(), "2024-01-01T00:00:00Z".to_owned());
        let mut events = vec![ConversationEvent::Joined(MemberJoined {
            event_id: meta().0,
            occurred_at: meta().1,
            conversation_id: "c {1}".into(),
            user_id: "a/b".into(),
        })];
        for seq in 1..=500 {
            events.push(ConversationEvent::Sent(MessageSent {
                event_id: meta().0,
                occurred_at: meta().1,
                conversation_id: "c {1}".into(),
                seq,
                sender_id: "z".into(),
                mentions: if seq % 100 == 0 { vec!["a/b".into()] } else { vec![] },
                mention_all: false,
                countable: seq % 7 != 0,
            }));
        }
        let mut fanout = FanOut::new();
        let mut fold = Fold::new();
        for d in fanout.process_batch(&events).0 {
            fold.apply_delta(&d);
        }
        fold.apply_user_event(&UserEvent::ReadAck(ReadAck {
            event_id: meta().0,
            occurred_at: meta().1,
            user_id: "a/b".into(),
            conversation_id: "elsewhere".into(),
            read_seq: 9,
        }));
        (fanout, fold)
    }

    #[test]
    fn a_version_1_user_row_still_loads() {
        let (_, fold) = sample();
        let user = fold.user("a/b").unwrap();
        // The v1 layout: conversations without `feed`, totals without `feed_unread`, nothing after `detached`.
        type ConvV1 = (u64, Option<u64>, bool, SeqSet, SeqSet, u64);
        let convs: BTreeMap<String, ConvV1> = user
            .conversations()
            .iter()
            .map(|(id, c)| {
                (id.clone(), (c.floor, c.joined_at, c.muted, c.unread.clone(), c.mentions.clone(), c.touched))
            })
            .collect();
        let t = user.totals();
        let v1 = (convs, (t.total_unread, t.total_mentions, t.unread_conversations, t.memberships), 501u64, 1usize);
        let mut bytes = vec![1u8];
        bytes.extend(postcard::to_allocvec(&v1).unwrap());
        let loaded = decode_user(&bytes).unwrap();
        assert_eq!(
            loaded.view("a/b", &crate::core::broadcast::NoLists),
            user.view("a/b", &crate::core::broadcast::NoLists)
        );
        assert_eq!(loaded.totals(), user.totals());
    }

    #[test]
    fn version_2_user_and_conversation_rows_still_load() {
        let (fanout, fold) = sample();
        let user = fold.user("a/b").unwrap();
        // The v2 layout: conversations without `read_from` and `named`, written flat.
        type ConvV2 = (u64, Option<u64>, bool, SeqSet, SeqSet, u64, bool);
        let convs: BTreeMap<String, ConvV2> = user
            .conversations()
            .iter()
            .map(|(id, c)| {
                let (unread, mentions) = (c.unread.clone(), c.mentions.clone());
                (id.clone(), (c.floor, c.joined_at, c.muted, unread, mentions, c.touched, c.feed))
            })
            .collect();
        let detached = user.conversations().values().filter(|c| !c.is_member()).count();
        let v2 = (convs, user.totals(), 501u64, detached, user.broadcasts(), user.notification_summary());
        let mut bytes = vec![2u8];
        bytes.extend(postcard::to_allocvec(&v2).unwrap());
        let loaded = decode_user(&bytes).unwrap();
        assert_eq!(loaded.conversations(), user.conversations());
        assert_eq!((loaded.totals(), loaded.broadcasts()), (user.totals(), user.broadcasts()));
        let (id, conv) = fanout.conversations().next().unwrap();
        let mut bytes = vec![2u8];
        bytes.extend(postcard::to_allocvec(&(conv.kind, conv.head, &conv.members)).unwrap());
        assert_eq!(&decode_conversation(&bytes).unwrap(), conv, "{id}");
    }

    #[test]
    fn user_and_conversation_states_round_trip() {
        let (fanout, fold) = sample();
        let user = fold.user("a/b").unwrap();
        let bytes = encode_user(user);
        assert_eq!(bytes[0], FORMAT_VERSION);
        assert!(bytes.len() < 400, "500 messages with 71 gaps encode in {} bytes", bytes.len());
        assert_eq!(&decode_user(&bytes).unwrap(), user);
        let conv = fanout.conversation("c {1}").unwrap();
        assert_eq!(&decode_conversation(&encode_conversation(conv)).unwrap(), conv);
    }

    #[test]
    fn rejects_other_versions_truncation_and_inconsistency() {
        let (_, fold) = sample();
        let mut bytes = encode_user(fold.user("a/b").unwrap());
        assert!(matches!(decode_user(&[]), Err(CheckpointError::Version { found: None })));
        assert!(matches!(decode_user(&[9, 0]), Err(CheckpointError::Version { found: Some(9) })));
        assert!(matches!(decode_user(&bytes[..bytes.len() / 2]), Err(CheckpointError::Corrupt(_))));
        // Same layout as UserState (postcard is positional), with a total that no longer equals the sum.
        type Mirror = (
            BTreeMap<String, ConvState>,
            Totals,
            u64,
            usize,
            BTreeMap<String, u64>,
            crate::core::notifications::Summary,
        );
        let mut mirror: Mirror = postcard::from_bytes(&bytes[1..]).unwrap();
        mirror.1.total_unread += 1;
        bytes.truncate(1);
        bytes.extend(postcard::to_allocvec(&mirror).unwrap());
        let err = decode_user(&bytes).unwrap_err();
        assert!(matches!(&err, CheckpointError::Inconsistent(m) if m.contains("totals")), "{err}");
    }
}
