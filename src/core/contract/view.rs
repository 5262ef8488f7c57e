//! The state a reader sees (`CONTRACT.md` § "The state a reader sees"): the JSON shape of
//! `GET /v1/users/{user_id}/unread` and of each line of `unread fold`'s output.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

// `utoipa::ToSchema` describes these shapes in the API's OpenAPI document (metadata only: no I/O here).

/// One user's counts. Serializes with fields in the contract's order and conversations sorted by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UserView {
    /// The user (the record key on `unread.user-events`).
    pub user_id: String,
    /// Sum of `unread` over unmuted member conversations.
    pub total_unread: u64,
    /// Sum of `mentions` over all member conversations.
    pub total_mentions: u64,
    /// Unmuted member conversations with `unread > 0` or marked unread (v3).
    pub unread_conversations: u64,
    /// Every non-feed conversation the user is a member of, including those with zero unread.
    pub conversations: BTreeMap<String, ConversationView>,
    /// Sum of `unread` over the unmuted feed conversations the user follows (v2).
    #[serde(default)]
    pub feed_unread: u64,
    /// Every broadcast list the user has read (v2).
    #[serde(default)]
    pub broadcasts: BTreeMap<String, BroadcastView>,
    /// Every category the user has a notification in (v2).
    #[serde(default)]
    pub notifications: BTreeMap<String, NotificationView>,
    /// Sum of `unread` over the categories (v2).
    #[serde(default)]
    pub total_notifications_unread: u64,
    /// Sum of `unseen` over the categories (v2).
    #[serde(default)]
    pub total_notifications_unseen: u64,
    /// v4: per conversation, the followed threads with unread replies, by their root's seq (a string on the wire).
    #[serde(default)]
    pub threads: BTreeMap<String, BTreeMap<u64, ThreadView>>,
    /// v4: followed threads with unread replies in unmuted conversations.
    #[serde(default)]
    pub unread_threads: u64,
    /// v4: sum of `mentions` over the followed threads, muted conversations included.
    #[serde(default)]
    pub thread_mentions: u64,
    /// v4: sum of `reactions` over the non-feed conversations, muted ones included.
    #[serde(default)]
    pub total_reactions: u64,
    /// v4: per team of the user's non-feed conversations, the chat totals over that team's conversations.
    #[serde(default)]
    pub teams: BTreeMap<String, TeamView>,
}

/// v4: one followed thread's counts for one user (`CONTRACT.md` § v4, "Threads").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ThreadView {
    /// Countable, not recalled, not expired replies of others above the user's thread cursor.
    pub unread: u64,
    /// Those of them that mention the user.
    pub mentions: u64,
}

/// v4: one team's counts for one user (`CONTRACT.md` § v4, "Teams"): the chat totals over its conversations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TeamView {
    /// Sum of `unread` over the team's unmuted conversations.
    pub unread: u64,
    /// Sum of `mentions` over all of the team's conversations.
    pub mentions: u64,
    /// The team's unmuted conversations with `unread > 0` or marked unread.
    pub unread_conversations: u64,
}

/// One broadcast list's counts for one user (`CONTRACT.md` § v2, "Broadcasts").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BroadcastView {
    /// Countable, not recalled publications above the user's cursor.
    pub unread: u64,
    /// `unread > 0`: the red dot.
    pub dot: bool,
}

/// One notification category's counts for one user (`CONTRACT.md` § v2, "Notifications").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NotificationView {
    /// Created, not read, not retracted.
    pub unread: u64,
    /// Created, not seen, not read, not retracted.
    pub unseen: u64,
}

/// One conversation's counts for one user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConversationView {
    /// Unread messages.
    pub unread: u64,
    /// Unread messages that mention the user.
    pub mentions: u64,
    /// Whether the conversation is muted for the user.
    pub muted: bool,
    /// Whether the user marked the conversation unread (v3, `CONTRACT.md` § v3, "Marked unread"); absent in v1
    /// and v2 files, read as false.
    #[serde(default)]
    pub marked_unread: bool,
    /// v4: the lowest seq counted in `unread`, `null` when `unread` is 0 ("jump to the first unread"; `CONTRACT.md`
    /// § v4, "First unread").
    #[serde(default)]
    pub first_unread: Option<u64>,
    /// v4: the user's messages here with a new reaction by someone else (§ v4, "Reactions").
    #[serde(default)]
    pub reactions: u64,
}

/// The read receipts of one message (`CONTRACT.md` § v3, "Read receipts"): of its `recipients` (the current members
/// other than its sender who joined before it was sent), how many have `read` it. The shape of
/// `GET /v1/conversations/{conversation_id}/messages/{seq}/receipts` and of a line of `unread fold --receipts`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReceiptView {
    /// The conversation.
    pub conversation_id: String,
    /// The message's seq.
    pub seq: u64,
    /// Recipients whose cursor is at or above `seq`.
    pub read: u64,
    /// Current members other than the sender whose latest join came before the message.
    pub recipients: u64,
    /// With `?list=true`: the readers' ids, sorted (conversations of at most 256 members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readers: Option<Vec<String>>,
}
