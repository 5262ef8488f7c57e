//! The event contract (`CONTRACT.md` § Events) as Rust types, and the decoder that turns a Kafka record value into
//! one of them.
//!
//! Every event type has its own struct; [`ConversationEvent`] groups the nine types published to
//! `unread.conversation-events` (record key = `conversation_id`, or `broadcast_id` for the two broadcast types) and
//! [`UserEvent`] the twelve published to `unread.user-events` (record key = `user_id`), `CONTRACT.md` v4. [`decode`] is the only way in from bytes: it enforces every rule
//! of the contract and names the offending field in its [`DecodeError`]. Serializing an [`Event`] with serde gives
//! the contract's JSON again (field `type` first), which `unread produce` and the tests use.

mod decode;
mod ids;
mod thread_page;
mod view;

pub use decode::{decode, DecodeError};
pub use ids::{validate_id, IdError};
pub use thread_page::{thread_page, After, ThreadItem, ThreadPage, THREAD_PAGE};
pub use view::{BroadcastView, ConversationView, NotificationView, ReceiptView, TeamView, ThreadView, UserView};

use serde::{Deserialize, Serialize};

/// Largest record value the decoder accepts: 64 KiB (65,536 bytes).
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Largest identifier, in bytes of UTF-8 (`CONTRACT.md` § Events: ids are 1–256 bytes).
pub const MAX_ID_BYTES: usize = 256;
/// Largest `seq` or `read_seq`: 2^53, the largest integer every JSON implementation represents exactly.
pub const MAX_SEQ: u64 = 1 << 53;
/// Largest `unread_ttl_days`: 3,650 days, about ten years (`CONTRACT.md` § Events, v3).
pub const MAX_TTL_DAYS: u64 = 3650;
/// Largest `reaction`, in bytes of UTF-8 (`CONTRACT.md` § Events, v4).
pub const MAX_REACTION_BYTES: usize = 64;

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
    /// One author's timeline: posts are messages, followers are members (`CONTRACT.md` § v2, "Kind").
    Feed,
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
    /// v3: unread expires this many days (1..=3,650) after the UTC day a message was sent (`CONTRACT.md` § v3,
    /// "Expiry"); `None`: never. Only the first `conversation.created` of a conversation decides it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unread_ttl_days: Option<u64>,
    /// v4: the team (workspace, server) the conversation belongs to, an id (`CONTRACT.md` § v4, "Teams"); only
    /// the first `conversation.created` of a conversation decides it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
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
    /// v4: the message is a reply in the thread of message `thread_root` (1 ≤ `thread_root` < `seq`), when that
    /// message was sent in the conversation before it (`CONTRACT.md` § v4, "Threads").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_root: Option<u64>,
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

/// `conversation.marked_unread` (v3): `user_id` marks `conversation_id` unread (`marked: true`, optionally "unread
/// from" message `from_seq`) or takes the mark away (`marked: false`) (`CONTRACT.md` § v3, "Marked unread").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConversationMarkedUnread {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The conversation.
    pub conversation_id: String,
    /// Set (`true`) or clear (`false`) the mark.
    pub marked: bool,
    /// "Unread from this message", 1..=2^53; only with `marked: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_seq: Option<u64>,
}

/// `broadcast.published`: publication `seq` of list `broadcast_id`, shared by every user (`CONTRACT.md` § v2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BroadcastPublished {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The list (the record key on `unread.conversation-events`; a namespace apart from conversations).
    pub broadcast_id: String,
    /// The publication's seq, 1..=2^53, strictly increasing per list (e.g. epoch seconds for a red dot).
    pub seq: u64,
    /// False for a publication that never counts; default true.
    pub countable: bool,
}

/// `broadcast.recalled`: publication `seq` of list `broadcast_id` no longer counts (only if already published).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BroadcastRecalled {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The list (the record key).
    pub broadcast_id: String,
    /// The publication's seq, 1..=2^53.
    pub seq: u64,
}

/// `broadcast.read`: `user_id` has seen every publication of `broadcast_id` up to `read_seq` (0..=2^53).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BroadcastRead {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The list.
    pub broadcast_id: String,
    /// The reader's cursor in the list.
    pub read_seq: u64,
}

/// `notification.created`: notification `notification_id` for recipient `user_id`, in `category`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotificationCreated {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The recipient (the record key on `unread.user-events`).
    pub user_id: String,
    /// Unique per recipient (1–256 bytes).
    pub notification_id: String,
    /// The category (an id: `like`, `comment`, `mention`, `follow`, `system`, …).
    pub category: String,
}

/// `notification.read` (mark one read) or `notification.retracted` (the source withdrew it), by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotificationMark {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The recipient (the record key on `unread.user-events`).
    pub user_id: String,
    /// The notification.
    pub notification_id: String,
}

/// `notifications.seen` (the user opened the list) or `notifications.read` (mark all read), of one category or all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotificationsMark {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The category; `None`: every category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
}

/// `reaction.added` or `reaction.removed` (v4): `user_id` added or withdrew `reaction` on message `seq`
/// (`CONTRACT.md` § v4, "Reactions").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reaction {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The conversation (the record key on `unread.conversation-events`).
    pub conversation_id: String,
    /// 1..=2^53, strictly increasing per conversation over both reaction types (its own counter, not `seq`): one
    /// not above the conversation's highest so far is a duplicate.
    pub reaction_seq: u64,
    /// The message reacted to, 1..=2^53.
    pub seq: u64,
    /// Who reacted.
    pub user_id: String,
    /// The reaction, 1–64 bytes (an emoji, `+1`), no control characters.
    pub reaction: String,
}

/// `thread.read` (v4): `user_id` has read every reply of the thread of root `thread_root` up to `read_seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadRead {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The conversation.
    pub conversation_id: String,
    /// The thread's root seq, 1..=2^53 (naming a reply or no root reads no thread).
    pub thread_root: u64,
    /// The reader's cursor in the thread, 0..=2^53.
    pub read_seq: u64,
}

/// `thread.followed` (v4): `user_id` follows (`true`) or unfollows (`false`) the thread of root `thread_root`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadFollowed {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The conversation.
    pub conversation_id: String,
    /// The thread's root seq, 1..=2^53.
    pub thread_root: u64,
    /// Follow or unfollow.
    pub followed: bool,
}

/// `reactions.read` (v4): `user_id` has seen every reaction of `conversation_id` up to `read_seq` (a
/// `reaction_seq`, 0..=2^53).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReactionsRead {
    /// Unique per event (1–256 bytes); producers' retries reuse it.
    pub event_id: String,
    /// RFC 3339 time at the producer (event time); informational, never ordering.
    pub occurred_at: String,
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// The conversation.
    pub conversation_id: String,
    /// The reader's reaction cursor.
    pub read_seq: u64,
}

/// An event of the conversation stream (topic `unread.conversation-events`, key `conversation_id`). Serializes
/// to the contract's JSON: `type` ([`EventType::name`]) first, then the event's own fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConversationEvent {
    /// `conversation.created`
    Created(ConversationCreated),
    /// `member.joined`
    Joined(MemberJoined),
    /// `member.left`
    Left(MemberLeft),
    /// `message.sent`
    Sent(MessageSent),
    /// `message.recalled`
    Recalled(MessageRecalled),
    /// `broadcast.published` (key `broadcast_id`)
    Published(BroadcastPublished),
    /// `broadcast.recalled` (key `broadcast_id`)
    Unpublished(BroadcastRecalled),
    /// `reaction.added` (v4)
    ReactionAdded(Reaction),
    /// `reaction.removed` (v4)
    ReactionRemoved(Reaction),
}

/// An event of the user stream (topic `unread.user-events`, key `user_id`). Serializes as
/// [`ConversationEvent`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserEvent {
    /// `read.ack`
    ReadAck(ReadAck),
    /// `conversation.muted`
    Muted(ConversationMuted),
    /// `conversation.marked_unread` (v3)
    MarkedUnread(ConversationMarkedUnread),
    /// `broadcast.read`
    BroadcastRead(BroadcastRead),
    /// `notification.created`
    NotificationCreated(NotificationCreated),
    /// `notification.read`
    NotificationRead(NotificationMark),
    /// `notification.retracted`
    NotificationRetracted(NotificationMark),
    /// `notifications.seen`
    NotificationsSeen(NotificationsMark),
    /// `notifications.read`
    NotificationsRead(NotificationsMark),
    /// `thread.read` (v4)
    ThreadRead(ThreadRead),
    /// `thread.followed` (v4)
    ThreadFollowed(ThreadFollowed),
    /// `reactions.read` (v4)
    ReactionsRead(ReactionsRead),
}

/// An event on the wire: `type` first, then the event's own fields.
#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    #[serde(rename = "type")]
    event_type: &'static str,
    #[serde(flatten)]
    fields: &'a T,
}

fn tagged<S: serde::Serializer, T: Serialize>(t: EventType, fields: &T, s: S) -> Result<S::Ok, S::Error> {
    Tagged { event_type: t.name(), fields }.serialize(s)
}

impl Serialize for ConversationEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.event_type();
        match self {
            Self::Created(e) => tagged(t, e, s),
            Self::Joined(e) => tagged(t, e, s),
            Self::Left(e) => tagged(t, e, s),
            Self::Sent(e) => tagged(t, e, s),
            Self::Recalled(e) => tagged(t, e, s),
            Self::Published(e) => tagged(t, e, s),
            Self::Unpublished(e) => tagged(t, e, s),
            Self::ReactionAdded(e) | Self::ReactionRemoved(e) => tagged(t, e, s),
        }
    }
}

impl Serialize for UserEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.event_type();
        match self {
            Self::ReadAck(e) => tagged(t, e, s),
            Self::Muted(e) => tagged(t, e, s),
            Self::MarkedUnread(e) => tagged(t, e, s),
            Self::BroadcastRead(e) => tagged(t, e, s),
            Self::NotificationCreated(e) => tagged(t, e, s),
            Self::NotificationRead(e) | Self::NotificationRetracted(e) => tagged(t, e, s),
            Self::NotificationsSeen(e) | Self::NotificationsRead(e) => tagged(t, e, s),
            Self::ThreadRead(e) => tagged(t, e, s),
            Self::ThreadFollowed(e) => tagged(t, e, s),
            Self::ReactionsRead(e) => tagged(t, e, s),
        }
    }
}

/// What a conversation-stream event is about: a conversation, or a broadcast list (a namespace of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target<'a> {
    /// A conversation (`conversation_id`).
    Conversation(&'a str),
    /// A broadcast list (`broadcast_id`).
    Broadcast(&'a str),
}

/// A conversation-stream event by what it addresses, typed: a conversation's own event, or a broadcast list's. The
/// fan-out handles the two apart ([`crate::core::fanout`], [`crate::core::broadcast`]), each over only its kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressed<'a> {
    /// An event of conversation `id`.
    Conversation(&'a str, ConversationOp<'a>),
    /// An event of broadcast list `id`.
    Broadcast(&'a str, BroadcastOp<'a>),
}

/// The events of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversationOp<'a> {
    /// `conversation.created`
    Created(&'a ConversationCreated),
    /// `member.joined`
    Joined(&'a MemberJoined),
    /// `member.left`
    Left(&'a MemberLeft),
    /// `message.sent`
    Sent(&'a MessageSent),
    /// `message.recalled`
    Recalled(&'a MessageRecalled),
    /// `reaction.added` (`true`) or `reaction.removed` (`false`), v4
    Reaction(&'a Reaction, bool),
}

/// The events of a broadcast list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BroadcastOp<'a> {
    /// `broadcast.published`
    Published(&'a BroadcastPublished),
    /// `broadcast.recalled`
    Recalled(&'a BroadcastRecalled),
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
    /// The event's type.
    pub fn event_type(&self) -> EventType {
        match self {
            Self::Created(_) => EventType::ConversationCreated,
            Self::Joined(_) => EventType::MemberJoined,
            Self::Left(_) => EventType::MemberLeft,
            Self::Sent(_) => EventType::MessageSent,
            Self::Recalled(_) => EventType::MessageRecalled,
            Self::Published(_) => EventType::BroadcastPublished,
            Self::Unpublished(_) => EventType::BroadcastRecalled,
            Self::ReactionAdded(_) => EventType::ReactionAdded,
            Self::ReactionRemoved(_) => EventType::ReactionRemoved,
        }
    }

    /// The event by what it addresses ([`Addressed`]).
    pub fn addressed(&self) -> Addressed<'_> {
        use Addressed::{Broadcast, Conversation};
        match self {
            Self::Created(e) => Conversation(&e.conversation_id, ConversationOp::Created(e)),
            Self::Joined(e) => Conversation(&e.conversation_id, ConversationOp::Joined(e)),
            Self::Left(e) => Conversation(&e.conversation_id, ConversationOp::Left(e)),
            Self::Sent(e) => Conversation(&e.conversation_id, ConversationOp::Sent(e)),
            Self::Recalled(e) => Conversation(&e.conversation_id, ConversationOp::Recalled(e)),
            Self::Published(e) => Broadcast(&e.broadcast_id, BroadcastOp::Published(e)),
            Self::Unpublished(e) => Broadcast(&e.broadcast_id, BroadcastOp::Recalled(e)),
            Self::ReactionAdded(e) => Conversation(&e.conversation_id, ConversationOp::Reaction(e, true)),
            Self::ReactionRemoved(e) => Conversation(&e.conversation_id, ConversationOp::Reaction(e, false)),
        }
    }

    /// The conversation or broadcast list this event belongs to.
    pub fn target(&self) -> Target<'_> {
        match self {
            Self::Created(e) => Target::Conversation(&e.conversation_id),
            Self::Joined(e) => Target::Conversation(&e.conversation_id),
            Self::Left(e) => Target::Conversation(&e.conversation_id),
            Self::Sent(e) => Target::Conversation(&e.conversation_id),
            Self::Recalled(e) => Target::Conversation(&e.conversation_id),
            Self::Published(e) => Target::Broadcast(&e.broadcast_id),
            Self::Unpublished(e) => Target::Broadcast(&e.broadcast_id),
            Self::ReactionAdded(e) | Self::ReactionRemoved(e) => Target::Conversation(&e.conversation_id),
        }
    }

    /// The record key: the `conversation_id`, or the `broadcast_id` of a broadcast event.
    pub fn key(&self) -> &str {
        match self.target() {
            Target::Conversation(id) | Target::Broadcast(id) => id,
        }
    }

    /// The name of the key's field: `conversation_id` or `broadcast_id`.
    pub fn key_field(&self) -> &'static str {
        match self.target() {
            Target::Conversation(_) => "conversation_id",
            Target::Broadcast(_) => "broadcast_id",
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
            Self::Published(e) => &e.event_id,
            Self::Unpublished(e) => &e.event_id,
            Self::ReactionAdded(e) | Self::ReactionRemoved(e) => &e.event_id,
        }
    }
}

impl ConversationEvent {
    /// The producer's `occurred_at` (RFC 3339, event time).
    pub fn occurred_at(&self) -> &str {
        match self {
            Self::Created(e) => &e.occurred_at,
            Self::Joined(e) => &e.occurred_at,
            Self::Left(e) => &e.occurred_at,
            Self::Sent(e) => &e.occurred_at,
            Self::Recalled(e) => &e.occurred_at,
            Self::Published(e) => &e.occurred_at,
            Self::Unpublished(e) => &e.occurred_at,
            Self::ReactionAdded(e) | Self::ReactionRemoved(e) => &e.occurred_at,
        }
    }
}

impl UserEvent {
    /// The producer's `occurred_at` (RFC 3339, event time).
    pub fn occurred_at(&self) -> &str {
        match self {
            Self::ReadAck(e) => &e.occurred_at,
            Self::Muted(e) => &e.occurred_at,
            Self::MarkedUnread(e) => &e.occurred_at,
            Self::BroadcastRead(e) => &e.occurred_at,
            Self::NotificationCreated(e) => &e.occurred_at,
            Self::NotificationRead(e) | Self::NotificationRetracted(e) => &e.occurred_at,
            Self::NotificationsSeen(e) | Self::NotificationsRead(e) => &e.occurred_at,
            Self::ThreadRead(e) => &e.occurred_at,
            Self::ThreadFollowed(e) => &e.occurred_at,
            Self::ReactionsRead(e) => &e.occurred_at,
        }
    }

    /// The event's type.
    pub fn event_type(&self) -> EventType {
        match self {
            Self::ReadAck(_) => EventType::ReadAck,
            Self::Muted(_) => EventType::ConversationMuted,
            Self::MarkedUnread(_) => EventType::ConversationMarkedUnread,
            Self::BroadcastRead(_) => EventType::BroadcastRead,
            Self::NotificationCreated(_) => EventType::NotificationCreated,
            Self::NotificationRead(_) => EventType::NotificationRead,
            Self::NotificationRetracted(_) => EventType::NotificationRetracted,
            Self::NotificationsSeen(_) => EventType::NotificationsSeen,
            Self::NotificationsRead(_) => EventType::NotificationsRead,
            Self::ThreadRead(_) => EventType::ThreadRead,
            Self::ThreadFollowed(_) => EventType::ThreadFollowed,
            Self::ReactionsRead(_) => EventType::ReactionsRead,
        }
    }

    /// Sets the producer's `event_id` and `occurred_at` (RFC 3339), as a producer such as the write gateway
    /// stamps an event when it publishes it.
    pub fn stamp(&mut self, event_id: String, occurred_at: String) {
        let (id, at) = match self {
            Self::ReadAck(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::Muted(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::MarkedUnread(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::BroadcastRead(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::NotificationCreated(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::NotificationRead(e) | Self::NotificationRetracted(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::NotificationsSeen(e) | Self::NotificationsRead(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::ThreadRead(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::ThreadFollowed(e) => (&mut e.event_id, &mut e.occurred_at),
            Self::ReactionsRead(e) => (&mut e.event_id, &mut e.occurred_at),
        };
        (*id, *at) = (event_id, occurred_at);
    }

    /// The user this event belongs to: the record key.
    pub fn user_id(&self) -> &str {
        match self {
            Self::ReadAck(e) => &e.user_id,
            Self::Muted(e) => &e.user_id,
            Self::MarkedUnread(e) => &e.user_id,
            Self::BroadcastRead(e) => &e.user_id,
            Self::NotificationCreated(e) => &e.user_id,
            Self::NotificationRead(e) | Self::NotificationRetracted(e) => &e.user_id,
            Self::NotificationsSeen(e) | Self::NotificationsRead(e) => &e.user_id,
            Self::ThreadRead(e) => &e.user_id,
            Self::ThreadFollowed(e) => &e.user_id,
            Self::ReactionsRead(e) => &e.user_id,
        }
    }

    /// The conversation the event is about, for `read.ack`, `conversation.muted`, `conversation.marked_unread`
    /// and v4's `thread.read`, `thread.followed` and `reactions.read`.
    pub fn conversation_id(&self) -> Option<&str> {
        match self {
            Self::ReadAck(e) => Some(&e.conversation_id),
            Self::Muted(e) => Some(&e.conversation_id),
            Self::MarkedUnread(e) => Some(&e.conversation_id),
            Self::ThreadRead(e) => Some(&e.conversation_id),
            Self::ThreadFollowed(e) => Some(&e.conversation_id),
            Self::ReactionsRead(e) => Some(&e.conversation_id),
            _ => None,
        }
    }

    /// The producer's unique id of this event.
    pub fn event_id(&self) -> &str {
        match self {
            Self::ReadAck(e) => &e.event_id,
            Self::Muted(e) => &e.event_id,
            Self::MarkedUnread(e) => &e.event_id,
            Self::BroadcastRead(e) => &e.event_id,
            Self::NotificationCreated(e) => &e.event_id,
            Self::NotificationRead(e) | Self::NotificationRetracted(e) => &e.event_id,
            Self::NotificationsSeen(e) | Self::NotificationsRead(e) => &e.event_id,
            Self::ThreadRead(e) => &e.event_id,
            Self::ThreadFollowed(e) => &e.event_id,
            Self::ReactionsRead(e) => &e.event_id,
        }
    }
}

impl Event {
    /// The producer's `occurred_at` (RFC 3339, event time).
    pub fn occurred_at(&self) -> &str {
        match self {
            Self::Conversation(e) => e.occurred_at(),
            Self::User(e) => e.occurred_at(),
        }
    }

    /// The topic the event is published to.
    pub fn stream(&self) -> Stream {
        match self {
            Self::Conversation(_) => Stream::Conversation,
            Self::User(_) => Stream::User,
        }
    }

    /// The record key the contract requires: `conversation_id` (or `broadcast_id`) for conversation-stream
    /// events, `user_id` for user events.
    pub fn routing_key(&self) -> &str {
        match self {
            Self::Conversation(e) => e.key(),
            Self::User(e) => e.user_id(),
        }
    }

    /// The name of the field the record key must equal.
    pub fn routing_field(&self) -> &'static str {
        match self {
            Self::Conversation(e) => e.key_field(),
            Self::User(_) => "user_id",
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
        self.event_type().name()
    }

    /// The event's type.
    pub fn event_type(&self) -> EventType {
        match self {
            Self::Conversation(e) => e.event_type(),
            Self::User(e) => e.event_type(),
        }
    }
}

/// The contract's event types (`CONTRACT.md` § Events), the one list of their names: the decoder matches on this
/// enum exhaustively, so a type listed here and not decoded does not compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `conversation.created`
    ConversationCreated,
    /// `member.joined`
    MemberJoined,
    /// `member.left`
    MemberLeft,
    /// `message.sent`
    MessageSent,
    /// `message.recalled`
    MessageRecalled,
    /// `broadcast.published`
    BroadcastPublished,
    /// `broadcast.recalled`
    BroadcastRecalled,
    /// `reaction.added` (v4)
    ReactionAdded,
    /// `reaction.removed` (v4)
    ReactionRemoved,
    /// `read.ack`
    ReadAck,
    /// `conversation.muted`
    ConversationMuted,
    /// `conversation.marked_unread` (v3)
    ConversationMarkedUnread,
    /// `broadcast.read`
    BroadcastRead,
    /// `notification.created`
    NotificationCreated,
    /// `notification.read`
    NotificationRead,
    /// `notification.retracted`
    NotificationRetracted,
    /// `notifications.seen`
    NotificationsSeen,
    /// `notifications.read`
    NotificationsRead,
    /// `thread.read` (v4)
    ThreadRead,
    /// `thread.followed` (v4)
    ThreadFollowed,
    /// `reactions.read` (v4)
    ReactionsRead,
}

impl EventType {
    /// Every type, in the order of `CONTRACT.md`.
    pub const ALL: [EventType; 21] = {
        use EventType::*;
        [
            ConversationCreated,
            MemberJoined,
            MemberLeft,
            MessageSent,
            MessageRecalled,
            BroadcastPublished,
            BroadcastRecalled,
            ReactionAdded,
            ReactionRemoved,
            ReadAck,
            ConversationMuted,
            ConversationMarkedUnread,
            BroadcastRead,
            NotificationCreated,
            NotificationRead,
            NotificationRetracted,
            NotificationsSeen,
            NotificationsRead,
            ThreadRead,
            ThreadFollowed,
            ReactionsRead,
        ]
    };

    /// The type's name on the wire, e.g. `"message.sent"`.
    pub const fn name(self) -> &'static str {
        use EventType::*;
        match self {
            ConversationCreated => "conversation.created",
            MemberJoined => "member.joined",
            MemberLeft => "member.left",
            MessageSent => "message.sent",
            MessageRecalled => "message.recalled",
            BroadcastPublished => "broadcast.published",
            BroadcastRecalled => "broadcast.recalled",
            ReactionAdded => "reaction.added",
            ReactionRemoved => "reaction.removed",
            ReadAck => "read.ack",
            ConversationMuted => "conversation.muted",
            ConversationMarkedUnread => "conversation.marked_unread",
            BroadcastRead => "broadcast.read",
            NotificationCreated => "notification.created",
            NotificationRead => "notification.read",
            NotificationRetracted => "notification.retracted",
            NotificationsSeen => "notifications.seen",
            NotificationsRead => "notifications.read",
            ThreadRead => "thread.read",
            ThreadFollowed => "thread.followed",
            ReactionsRead => "reactions.read",
        }
    }

    /// The type named `name`, if the contract has one.
    pub fn parse(name: &str) -> Option<EventType> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The topic events of this type are published to.
    pub const fn stream(self) -> Stream {
        use EventType::*;
        match self {
            ConversationCreated | MemberJoined | MemberLeft | MessageSent | MessageRecalled | BroadcastPublished
            | BroadcastRecalled | ReactionAdded | ReactionRemoved => Stream::Conversation,
            ReadAck
            | ConversationMuted
            | ConversationMarkedUnread
            | BroadcastRead
            | NotificationCreated
            | NotificationRead
            | NotificationRetracted
            | NotificationsSeen
            | NotificationsRead
            | ThreadRead
            | ThreadFollowed
            | ReactionsRead => Stream::User,
        }
    }
}

/// The names of the contract's event types, in the order of `CONTRACT.md`.
pub const EVENT_TYPES: [&str; 21] = {
    let mut names = [""; 21];
    let mut i = 0;
    while i < names.len() {
        names[i] = EventType::ALL[i].name();
        i += 1;
    }
    names
};
