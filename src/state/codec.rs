//! Checkpoint rows: the bytes stored in PostgreSQL for a user's fold state, a conversation's fan-out state, a
//! broadcast list and a remembered notification (tables in `migrations/`).
//!
//! Each kind of row has its own row type here and its own version byte ([`USER_ROW`], [`CONVERSATION_ROW`],
//! [`LIST_ROW`], [`NOTE_ROW`]): one version byte, then the row in postcard (serde, varint integers). Postcard is
//! positional, so the row types, not the core's structs, are the format: a field reordered or added in the core
//! changes nothing here until a row type changes, and then that row's version goes up and the older row type stays
//! to decode what is stored. `tests/it/codec.rs` decodes rows written before the row types existed and re-encodes
//! them byte for byte.
//!
//! Versions so far (every kind started at the 3 of the one shared version byte it replaced):
//! - users: 1 (contract v1); 2 adds the feed flag per conversation, `feed_unread`, the broadcast cursors and the
//!   notification summary; 3 adds read diffusion (per conversation, the switch and the named mentions above it);
//!   4 adds contract v3 (per conversation, the mark with its "unread from" seq, the read history, the expiry
//!   buckets); 5 stores the totals as the table of counts in its order ([`Counts`]), so that a counter added to
//!   the table needs no new version; 6 adds contract v4 (per conversation, the seqs sent and naming the user, the
//!   threads, the reaction cursor and reacted messages, the team); 7 marks each conversation that awaits its first
//!   delta (only the user's own events made it), retained apart from the others;
//! - conversations: 1 and 2 (kind, head, members); 3 adds the read-diffusion index; 4 adds `unread_ttl_days`; 5
//!   the index's expiry; 6 leaves the members out; 7 adds contract v4 (team, replies' roots, recalled seqs,
//!   reaction head, live reactions);
//! - lists and notes: one layout, read under any of 1 to 3;
//! - a chunk of a fold partition's replies of one read-diffused conversation ([`REPLIES_ROW`]): 1.
//!
//! Range sets keep a user's row small whatever the unread count: a dev-set user averages tens of bytes. Decoding
//! checks the invariants (sorted disjoint ranges, mentions within unread, totals equal to the sums), so a corrupt
//! row is an error, never a wrong count.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::broadcast::ListState;
use crate::core::contract::ConversationKind;
use crate::core::counts::Counts;
use crate::core::fanout::ConversationState;
use crate::core::fold::{ConvState, Conversations, Mark, SharedReplies, Sums, UserState};
use crate::core::hybrid::ConvIndex;
use crate::core::notifications::{CategoryCounts, Note, Summary};
use crate::core::seqset::SeqSet;
use crate::core::threads::Pending;

/// The version byte of a user row written now.
pub const USER_ROW: u8 = 7;
/// The version byte of a conversation row written now: 7, version 6's (version 5's layout with its members left
/// out, empty: they have rows of their own, `fanout_members`, [`crate::checkpoint::store::MemberRow`]) and contract
/// v4's fields.
pub const CONVERSATION_ROW: u8 = 7;
/// The version byte of a broadcast list row written now.
pub const LIST_ROW: u8 = 3;
/// The version byte of a remembered notification's row written now.
pub const NOTE_ROW: u8 = 3;
/// The version byte of a row of a chunk of one conversation's replies in a fold partition ([`encode_replies`]).
pub const REPLIES_ROW: u8 = 1;

/// Why checkpoint bytes could not be turned back into state.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The bytes are empty or start with a version this build does not read for that kind of row.
    #[error("unsupported checkpoint row version {found:?} (this build reads 1 to {newest})")]
    Version {
        /// The first byte, if any.
        found: Option<u8>,
        /// The newest version of that kind of row.
        newest: u8,
    },
    /// The payload does not decode.
    #[error("corrupt checkpoint: {0}")]
    Corrupt(#[from] postcard::Error),
    /// The payload decodes but breaks an invariant.
    #[error("inconsistent checkpoint: {0}")]
    Inconsistent(String),
}

/// A range set in a row: its ranges.
type Ranges = Vec<(u64, u64)>;

fn ranges(set: &SeqSet) -> Ranges {
    set.runs().collect()
}

fn set(ranges: Ranges) -> Result<SeqSet, CheckpointError> {
    SeqSet::try_from(ranges).map_err(|e| CheckpointError::Inconsistent(e.to_string()))
}

/// The version byte, then the row in postcard.
fn encode<T: Serialize>(version: u8, row: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(version);
    // Serializing plain structs, maps and vectors into a Vec cannot fail.
    postcard::serialize_with_flavor(row, Bytes(out)).expect("postcard serializes a row")
}

/// postcard's output into a `Vec<u8>`, as its own `AllocVec` but with the bytes of a varint (at most 10) pushed one
/// by one: `AllocVec` copies each with `memcpy`, whose call cost more than the rest of encoding a user's row (a
/// profile of `encode_user`: 20% of its time in `memmove`).
struct Bytes(Vec<u8>);

impl postcard::ser_flavors::Flavor for Bytes {
    type Output = Vec<u8>;

    #[inline(always)]
    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if data.len() <= 16 {
            self.0.reserve(data.len());
            data.iter().for_each(|b| self.0.push(*b));
        } else {
            self.0.extend_from_slice(data);
        }
        Ok(())
    }

    #[inline(always)]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// The version byte and payload of a row whose kind reads versions 1 to `newest`.
fn split(bytes: &[u8], newest: u8) -> Result<(u8, &[u8]), CheckpointError> {
    match bytes.split_first() {
        Some((&v, payload)) if (1..=newest).contains(&v) => Ok((v, payload)),
        other => Err(CheckpointError::Version { found: other.map(|(v, _)| *v), newest }),
    }
}

mod rows;
use rows::*;

/// Encodes one user's fold state (its remembered notifications have rows of their own), with its pending replies
/// from `shared`, the fold's ([`crate::core::fold::Fold::shared_replies`]; an empty one for a state on its own).
pub fn encode_user(state: &UserState, shared: &SharedReplies) -> Vec<u8> {
    encode(USER_ROW, &UserRowV7Of::of(state, shared))
}

/// Decodes one user's fold state.
///
/// Errors: [`CheckpointError::Version`] for another format, [`CheckpointError::Corrupt`] for bytes that do not
/// decode, [`CheckpointError::Inconsistent`] for a state whose totals or sets break the fold's invariants.
pub fn decode_user(bytes: &[u8]) -> Result<UserState, CheckpointError> {
    let state = match split(bytes, USER_ROW)? {
        (1, payload) => postcard::from_bytes::<UserRowV1>(payload)?.into_state()?,
        (2, payload) => postcard::from_bytes::<UserRowV2>(payload)?.into_state()?,
        (3, payload) => postcard::from_bytes::<UserRowV3>(payload)?.into_state()?,
        (4, payload) => postcard::from_bytes::<UserRowV4>(payload)?.into_state()?,
        (5, payload) => postcard::from_bytes::<UserRowV5>(payload)?.into_state()?,
        (6, payload) => postcard::from_bytes::<UserRowV6>(payload)?.into_state()?,
        (_, payload) => postcard::from_bytes::<UserRowV7>(payload)?.into_state()?,
    };
    state.check_own().map_err(CheckpointError::Inconsistent)?;
    Ok(state)
}

/// Encodes one conversation's fan-out state without its members, which have rows of their own.
pub fn encode_conversation(state: &ConversationState) -> Vec<u8> {
    encode(CONVERSATION_ROW, &ConversationRowV7::from(state))
}

/// Decodes one conversation's fan-out state: with its members for rows of versions 1 to 5, without them from
/// version 6 on (their rows come from `fanout_members`).
///
/// Errors: as [`decode_user`]; a member who joined above the head, or an index above it, is inconsistent.
pub fn decode_conversation(bytes: &[u8]) -> Result<ConversationState, CheckpointError> {
    let state = match split(bytes, CONVERSATION_ROW)? {
        (1 | 2, payload) => postcard::from_bytes::<ConversationRowV2>(payload)?.into_state(),
        (3, payload) => postcard::from_bytes::<ConversationRowV3>(payload)?.into_state()?,
        (4, payload) => postcard::from_bytes::<ConversationRowV4>(payload)?.into_state()?,
        (5 | 6, payload) => postcard::from_bytes::<ConversationRowV5>(payload)?.into_state()?,
        (_, payload) => postcard::from_bytes::<ConversationRowV7>(payload)?.into_state()?,
    };
    check_conversation(&state)?;
    Ok(state)
}

/// A conversation's invariants: no index or member above its head, no expiry bucket outside its index.
///
/// Errors: [`CheckpointError::Inconsistent`] naming the broken one.
pub fn check_conversation(state: &ConversationState) -> Result<(), CheckpointError> {
    if state.index.as_ref().is_some_and(|i| i.live.max().is_some_and(|m| m > state.head) || i.since > state.head) {
        return Err(CheckpointError::Inconsistent(format!("an index above head {}", state.head)));
    }
    let buckets = state.index.iter().flat_map(|i| i.expiry.values().map(move |b| (i, b)));
    if buckets.into_iter().any(|(i, b)| b.is_empty() || b.intersection(&i.live).len() != b.len()) {
        return Err(CheckpointError::Inconsistent("an index expiry bucket empty or not within its live seqs".into()));
    }
    if let Some((user, at)) = state.members.iter().find(|(_, at)| **at > state.head) {
        return Err(CheckpointError::Inconsistent(format!(
            "member {user:?} joined at {at}, above head {}",
            state.head
        )));
    }
    Ok(())
}

/// Encodes one broadcast list's state (head and live seqs).
pub fn encode_list(state: &ListState) -> Vec<u8> {
    encode(LIST_ROW, &ListRowV1 { head: state.head, live: ranges(&state.live) })
}

/// Decodes one broadcast list's state.
///
/// Errors: [`CheckpointError::Version`] or [`CheckpointError::Corrupt`]; a live seq above the head is inconsistent.
pub fn decode_list(bytes: &[u8]) -> Result<ListState, CheckpointError> {
    let (_, payload) = split(bytes, LIST_ROW)?;
    let row: ListRowV1 = postcard::from_bytes(payload)?;
    let state = ListState { head: row.head, live: set(row.live)? };
    if state.live.max().is_some_and(|m| m > state.head) {
        return Err(CheckpointError::Inconsistent(format!("a live seq above head {}", state.head)));
    }
    Ok(state)
}

/// Encodes one remembered notification.
pub fn encode_note(note: &Note) -> Vec<u8> {
    encode(NOTE_ROW, &NoteRowV1::from(note))
}

/// Decodes one remembered notification.
///
/// Errors: [`CheckpointError::Version`] or [`CheckpointError::Corrupt`].
pub fn decode_note(bytes: &[u8]) -> Result<Note, CheckpointError> {
    let (_, payload) = split(bytes, NOTE_ROW)?;
    Ok(postcard::from_bytes::<NoteRowV1>(payload)?.into())
}

/// Encodes one checkpoint row of the replies a fold partition keeps of a read-diffused conversation: a chunk of
/// them ([`crate::core::threads::Replies::chunk`]), per reply, ascending by seq, (seq, root, expiry day, mentions
/// everyone).
pub fn encode_replies<'a>(replies: impl Iterator<Item = &'a Pending>) -> Vec<u8> {
    let row: Vec<(u64, u64, i64, bool)> = replies.map(|p| (p.seq, p.root, p.day, p.mention)).collect();
    encode(REPLIES_ROW, &row)
}

/// Decodes a row of [`encode_replies`].
///
/// Errors: [`CheckpointError::Version`] or [`CheckpointError::Corrupt`]; a root at or above its reply is
/// inconsistent.
pub fn decode_replies(bytes: &[u8]) -> Result<Vec<Pending>, CheckpointError> {
    let (_, payload) = split(bytes, REPLIES_ROW)?;
    let row: Vec<(u64, u64, i64, bool)> = postcard::from_bytes(payload)?;
    if let Some((seq, root, ..)) = row.iter().find(|(seq, root, ..)| root >= seq) {
        return Err(CheckpointError::Inconsistent(format!("reply {seq} in the thread of {root}")));
    }
    Ok(row.into_iter().map(|(seq, root, day, mention)| Pending { seq, root, day, mention }).collect())
}

#[cfg(test)]
mod tests;
