//! The event contract (`CONTRACT.md` § Events) as Rust types, and the decoder that turns a Kafka record value into
//! one of them.
//!
//! Every event type has its own struct; [`ConversationEvent`] groups the five types published to
//! `unread.conversation-events` (record key = `conversation_id`) and [`UserEvent`] the two published to
//! `unread.user-events` (record key = `user_id`). [`decode`] is the only way in from bytes: it enforces every rule
//! of the contract and names the offending field in its [`DecodeError`]. Serializing an [`Event`] with serde gives
//! the contract's JSON again (field `type` first), which `unread produce` and the tests use.

mod decode;
mod ids;
mod view;

pub use decode::{decode, DecodeError};
pub use ids::{validate_id, IdError};
pub use view::{ConversationView, UserView};

use serde::{Deserialize, Serialize};

/// Largest record value the decoder accepts: 64 KiB (65,536 bytes).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Largest identifier, in bytes of UTF-8 (`CONTRACT.md` § Events: ids are 1–256 bytes).
pub const MAX_ID_BYTES: usize = 256;
/// Largest `seq` or `read_seq`: 2^53, the largest integer every JSON implementation represents exactly.
pub const MAX_SEQ: u64 = 1 << 53;

/// A conversation's kind (`conversation.created`'s `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConversationKind {
    /// A conversation between two people.
    Direct,
    /// A small group conversation.
    Group,
    /// A large channel.
    Channel,
}

/// `conversation.created`: the conversation exists and `members` join it at its current head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationCreated {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// The conversation's kind.
    pub kind: ConversationKind,
    /// User ids; may be empty, duplicates are harmless.
    pub members: Vec<String>,
}

/// `member.joined`: `user_id` becomes a member at the conversation's current head (no-op for a member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberJoined {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
}

/// `member.left`: `user_id` stops being a member (no-op for a non-member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberLeft {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
}

/// `message.sent`: message `seq` (1..=2^53) in the conversation; a `seq` not above the head is a duplicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageSent {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// The message's sequence number in its conversation, 1..=2^53.
    pub seq: u64,
    /// Who sent it: never unread for the sender.
    pub sender_id: String,
    /// User ids mentioned by the message; default `[]`.
    pub mentions: Vec<String>,
    /// The message mentions every member; default false.
    pub mention_all: bool,
    /// False for notices, edits, system lines and bots: such a message is never unread; default true.
    pub countable: bool,
}

/// `message.recalled`: message `seq` no longer counts (only if it was already sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MessageRecalled {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// The message's sequence number in its conversation, 1..=2^53.
    pub seq: u64,
}

/// `read.ack`: `user_id` has read every message of `conversation_id` up to and including `read_seq` (0..=2^53).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadAck {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// The reader's cursor: every seq at or below it is read.
    pub read_seq: u64,
}

/// `conversation.muted`: `user_id` muted (`true`) or unmuted (`false`) `conversation_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationMuted {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// Whether the conversation is muted for the user.
    pub muted: bool,
}

/// An event of the conversation stream (topic `unread.conversation-events`, key `conversation_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum ConversationEvent {
    /// `conversation.created`
    #[serde(rename = "conversation.created")]
    Created(ConversationCreated),
    /// `member.joined`
    #[serde(rename = "member.joined")]
    Joined(MemberJoined),
    /// `member.left`
    #[serde(rename = "member.left")]
    Left(MemberLeft),
    /// `message.sent`
    #[serde(rename = "message.sent")]
    Sent(MessageSent),
    /// `message.recalled`
    #[serde(rename = "message.recalled")]
    Recalled(MessageRecalled),
}

/// An event of the user stream (topic `unread.user-events`, key `user_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum UserEvent {
    /// `read.ack`
    #[serde(rename = "read.ack")]
    ReadAck(ReadAck),
    /// `conversation.muted`
    #[serde(rename = "conversation.muted")]
    Muted(ConversationMuted),
}

/// Any event of the contract. Serializes to the contract's JSON (an object with `type` first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Event {
    /// An event of the conversation stream.
    Conversation(ConversationEvent),
    /// An event of the user stream.
    User(UserEvent),
}

/// Which input topic an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// `unread.conversation-events`, keyed by `conversation_id`.
    Conversation,
    /// `unread.user-events`, keyed by `user_id`.
    User,
}

impl ConversationEvent {
    /// The conversation this event belongs to: the record key.
    pub fn conversation_id(&self) -> &str {
        match self {
            Self::Created(e) => &e.conversation_id,
            Self::Joined(e) => &e.conversation_id,
            Self::Left(e) => &e.conversation_id,
            Self::Sent(e) => &e.conversation_id,
            Self::Recalled(e) => &e.conversation_id,
        }
    }

    /// The producer's unique id of this event.
    pub fn event_id(&self) -> &str {
        match self {
            Self::Created(e) => &e.event_id,
            Self::Joined(e) => &e.event_id,
            Self::Left(e) => &e.event_id,
            Self::Sent(e) => &e.event_id,
            Self::Recalled(e) => &e.event_id,
        }
    }
}

impl UserEvent {
    /// The user this event belongs to: the record key.
    pub fn user_id(&self) -> &str {
        match self {
            Self::ReadAck(e) => &e.user_id,
            Self::Muted(e) => &e.user_id,
        }
    }

    /// The conversation the event is about.
    pub fn conversation_id(&self) -> &str {
        match self {
            Self::ReadAck(e) => &e.conversation_id,
            Self::Muted(e) => &e.conversation_id,
        }
    }

    /// The producer's unique id of this event.
    pub fn event_id(&self) -> &str {
        match self {
            Self::ReadAck(e) => &e.event_id,
            Self::Muted(e) => &e.event_id,
        }
    }
}

impl Event {
    /// The topic the event is published to.
    pub fn stream(&self) -> Stream {
        match self {
            Self::Conversation(_) => Stream::Conversation,
            Self::User(_) => Stream::User,
        }
    }

    /// The record key the contract requires: `conversation_id` for conversation events, `user_id` for user events.
    pub fn routing_key(&self) -> &str {
        match self {
            Self::Conversation(e) => e.conversation_id(),
            Self::User(e) => e.user_id(),
        }
    }

    /// The producer's unique id of this event.
    pub fn event_id(&self) -> &str {
        match self {
            Self::Conversation(e) => e.event_id(),
            Self::User(e) => e.event_id(),
        }
    }

    /// The contract's name of the event's type, e.g. `"message.sent"`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Conversation(ConversationEvent::Created(_)) => "conversation.created",
            Self::Conversation(ConversationEvent::Joined(_)) => "member.joined",
            Self::Conversation(ConversationEvent::Left(_)) => "member.left",
            Self::Conversation(ConversationEvent::Sent(_)) => "message.sent",
            Self::Conversation(ConversationEvent::Recalled(_)) => "message.recalled",
            Self::User(UserEvent::ReadAck(_)) => "read.ack",
            Self::User(UserEvent::Muted(_)) => "conversation.muted",
        }
    }
}

/// The names of the contract's event types, in the order of `CONTRACT.md`.
pub const EVENT_TYPES: [&str; 7] = [
    "conversation.created",
    "member.joined",
    "member.left",
    "message.sent",
    "message.recalled",
    "read.ack",
    "conversation.muted",
];
