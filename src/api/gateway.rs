//! The write gateway: a client marks things read with one call, and the API publishes the contract's user event to
//! `unread.user-events`, keyed by `user_id` (`CONTRACT.md` § Events), with the idempotent producer. It answers 202
//! `{"event_ids": [...]}` once the broker has the events; the counts change when the fold has folded them (the
//! stream shows it).
//!
//! An `Idempotency-Key` header (1–256 bytes) makes a retry safe: the first request with a key publishes and
//! remembers its answer for 24 h (in Redis, so every API instance sees it); a repeat answers the same event ids
//! with `idempotent-replayed: true` and publishes nothing. Each event is checked by the contract's own decoder
//! before it is sent, so the gateway cannot publish what the fold would dead-letter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use rdkafka::producer::FutureRecord;
use serde::{Deserialize, Serialize};

use super::openapi::ReadErrors;
use super::{authorized, check_id, ApiError, ApiState};
use crate::auth::Access;
use crate::core::broadcast::ListId;
use crate::core::contract::{
    BroadcastRead, ConversationMarkedUnread, ConversationMuted, NotificationMark, NotificationsMark, ReadAck,
    ThreadRead, UserEvent,
};
use crate::projection::idempotency::IdempotencyKeys;

/// What the gateway needs beside the read side.
pub struct Gateway {
    /// The idempotent producer.
    pub producer: crate::kafka::producer::AsyncProducer,
    /// The input topic of user events.
    pub user_events: String,
    /// The idempotency keys, under the base Redis prefix (keys outlive namespaces).
    pub keys: IdempotencyKeys,
    /// Random per process, so that event ids of two instances never collide.
    instance: u64,
    counter: AtomicU64,
}

impl Gateway {
    /// A gateway publishing to `user_events` with `producer`.
    pub fn new(producer: crate::kafka::producer::AsyncProducer, user_events: String, redis_prefix: String) -> Self {
        use std::hash::{BuildHasher, Hasher};
        let instance = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let keys = IdempotencyKeys::new(&redis_prefix);
        Self { producer, user_events, keys, instance, counter: AtomicU64::new(0) }
    }

    /// A new event id: `gw-{instance}-{time µs}-{counter}`, unique across instances and restarts.
    fn event_id(&self) -> String {
        let micros = chrono::Utc::now().timestamp_micros();
        format!("gw-{:016x}-{micros:x}-{:x}", self.instance, self.counter.fetch_add(1, Ordering::Relaxed))
    }
}

/// The answer of every write: the ids of the events published (several for `feed/read`, none when there was
/// nothing to mark).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Accepted {
    /// The events' `event_id`s, in the order published.
    pub event_ids: Vec<String>,
}

/// The optional body of a conversation read: `{"read_seq": N}`; absent: the newest message the user has
/// (`newest_unread`).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct ReadBody {
    /// The user has read every message up to and including this seq (0 to 2^53); absent: the newest unread
    /// message of the user's checkpointed state.
    #[serde(default, deserialize_with = "seq")]
    #[schema(minimum = 0, maximum = 9_007_199_254_740_992_u64)]
    pub read_seq: Option<u64>,
}

/// A seq in a request body: an integer from 0 to 2^53 (CONTRACT.md § Events), also when written with a zero
/// fraction (`7.0`), as JSON Schema's `integer` allows.
///
/// Errors: anything else (a fraction, a negative number, above 2^53, not a number): 400 `invalid_body`.
pub(super) fn seq<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use crate::core::contract::MAX_SEQ as MAX;
    use serde::de::Error;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else { return Ok(None) };
    let whole = n.as_f64().filter(|f| f.fract() == 0.0 && (0.0..=MAX as f64).contains(f)).map(|f| f as u64);
    match n.as_u64().or(whole) {
        Some(v) if v <= MAX => Ok(Some(v)),
        _ => Err(D::Error::custom(format!("a seq must be an integer from 0 to 2^53, not {n}"))),
    }
}

/// The optional body of a mark-unread (contract v3): `{}` or absent marks the conversation unread,
/// `{"from_seq": N}` marks it unread from message N on ("unread from here"), `{"marked": false}` takes the mark
/// away.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct MarkUnreadBody {
    /// Set (`true`, the default) or take away (`false`) the mark.
    pub marked: Option<bool>,
    /// Unread from this message on (1 to 2^53); only with `marked` true or absent.
    #[serde(default, deserialize_with = "seq")]
    #[schema(minimum = 1, maximum = 9_007_199_254_740_992_u64)]
    pub from_seq: Option<u64>,
}

/// The body of a mute: `{"muted": true|false}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct MuteBody {
    /// Whether the conversation is muted.
    pub muted: bool,
}

/// The optional body of the notification marks: `{"category": "like"}`; absent: every category.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct CategoryBody {
    /// The category marked (the contract's id rule); absent: every category.
    pub category: Option<String>,
}

/// The optional body of a broadcast read: `{"read_seq": N}`; absent: the list's head.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct BroadcastReadBody {
    /// The largest seq seen (0 to 2^53); absent: the list's current head.
    #[serde(default, deserialize_with = "seq")]
    #[schema(minimum = 0, maximum = 9_007_199_254_740_992_u64)]
    pub read_seq: Option<u64>,
}

/// Publishes `events` (their `event_id` and `occurred_at` filled in) keyed by `user_id`, deduplicated by the
/// request's `Idempotency-Key`, and answers 202 with their ids.
pub(super) async fn publish(
    s: &ApiState,
    user_id: &str,
    headers: &HeaderMap,
    mut events: Vec<UserEvent>,
) -> Result<Response, ApiError> {
    let gw = s.gateway.as_ref().ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "this instance has no Kafka producer")
    })?;
    let key = idempotency_key(headers)?;
    let ids: Vec<String> = events.iter_mut().map(|e| stamp(gw, e)).collect();
    let redis = s.reader.at().projection;
    let remembered = match &key {
        Some(key) => gw.keys.claim(&redis, user_id, key, &ids).await?,
        None => None,
    };
    if let Some(ids) = remembered {
        let answer = Json(Accepted { event_ids: ids });
        return Ok((StatusCode::ACCEPTED, [("idempotent-replayed", "true")], answer).into_response());
    }
    if let Err(e) = send_all(gw, user_id, &events).await {
        if let Some(key) = &key {
            gw.keys.forget(&redis, user_id, key).await; // a retry with the key must publish
        }
        return Err(e);
    }
    Ok((StatusCode::ACCEPTED, Json(Accepted { event_ids: ids })).into_response())
}

/// Sets `event_id` and `occurred_at`; returns the id.
fn stamp(gw: &Gateway, event: &mut UserEvent) -> String {
    let id = gw.event_id();
    event.stamp(id.clone(), chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    id
}

/// The id and time fields of an event not yet stamped ([`stamp`] sets them).
pub(super) fn unstamped() -> (String, String) {
    (String::new(), String::new())
}

/// Checks each event with the contract's decoder, sends them in order, and waits for the broker's acks.
async fn send_all(gw: &Gateway, user_id: &str, events: &[UserEvent]) -> Result<(), ApiError> {
    let payloads: Vec<Vec<u8>> = events.iter().map(|e| serde_json::to_vec(e).expect("JSON")).collect();
    for p in &payloads {
        crate::core::contract::decode(p)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?;
    }
    for p in &payloads {
        let record = FutureRecord::to(&gw.user_events).key(user_id).payload(p);
        gw.producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| {
            tracing::warn!(error = %e, "gateway: publishing an event failed");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "Kafka did not take the event: retry")
        })?;
    }
    Ok(())
}

/// The request's `Idempotency-Key`, if any: 1–256 visible ASCII characters and spaces (no tab), as the document
/// says.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else { return Ok(None) };
    let k = v.as_bytes();
    if k.is_empty() || k.len() > 256 || !k.iter().all(|b| (b' '..=b'~').contains(b)) {
        let message = "Idempotency-Key: 1-256 visible ASCII characters (spaces inside)";
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_header", message));
    }
    Ok(Some(String::from_utf8_lossy(k).into_owned()))
}

/// A body that may be empty (then `T::default()`), else JSON.
pub(super) fn optional_json<T: Default + serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let invalid = |e: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e);
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| invalid(e.to_string()))?;
    match value {
        // JSON `null` is the absent body too, as the document's optional (nullable) body says.
        serde_json::Value::Null => Ok(T::default()),
        // Only an object: serde would also take a struct from an array of its fields (Schemathesis found it).
        serde_json::Value::Object(_) => serde_json::from_value(value).map_err(|e| invalid(e.to_string())),
        other => Err(invalid(format!("the body must be a JSON object, not {other}"))),
    }
}

/// The `{user_id}` and `{conversation_id}` of a write route's path, or why they did not parse.
pub(super) type Ids2 = Result<Path<(String, String)>, PathRejection>;

/// Marks a conversation read up to `read_seq`, or up to the newest message the user has: publishes a `read.ack`
/// (nothing when there is nothing to mark).
#[utoipa::path(post, path = "/v1/users/{user_id}/conversations/{conversation_id}/read", tag = "writes",
    security(("bearer" = [])), params(("user_id" = String, Path), ("conversation_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Dedupes retries for 24 h")),
    request_body(content = Option<ReadBody>, description = "Optional `{\"read_seq\"}`; absent: the newest"),
    responses((status = 202, description = "Published: the ids of the events sent (the counts change once the fold has them)", body = Accepted), ReadErrors))]
pub async fn read_conversation(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids2,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let Path((user_id, conversation_id)) = path?;
    authorized(&access, &[("user_id", &user_id), ("conversation_id", &conversation_id)])?;
    let ReadBody { read_seq } = optional_json(&body)?;
    let read_seq = match read_seq {
        Some(seq) => Some(seq),
        // Acked at the cursor when the checkpoint shows nothing unread: a mark the checkpoint does not hold yet
        // (it trails Redis by a flush) is cleared all the same (§ v3: any later read ack clears it).
        None => (s.reader.newest_unread(&s.reader.at(), &user_id, true, |id, _, _| id == conversation_id))
            .await?
            .into_iter()
            .next()
            .map(|(_, n)| n),
    };
    let event = |read_seq| read_ack(&user_id, conversation_id.clone(), read_seq);
    publish(&s, &user_id, &headers, read_seq.into_iter().map(event).collect()).await
}

/// Marks a conversation unread, optionally from a message on, or takes the mark away: publishes a
/// `conversation.marked_unread` (`CONTRACT.md` § v3). The read route, or a read ack from anywhere, clears it.
#[utoipa::path(post, path = "/v1/users/{user_id}/conversations/{conversation_id}/mark-unread", tag = "writes",
    security(("bearer" = [])), params(("user_id" = String, Path), ("conversation_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Dedupes retries for 24 h")),
    request_body(content = Option<MarkUnreadBody>,
        description = "Optional `{\"from_seq\"}` (unread from here) or `{\"marked\": false}`; absent: mark"),
    responses((status = 202, description = "Published: the ids of the events sent (the counts change once the fold has them)", body = Accepted), ReadErrors))]
pub async fn mark_unread(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids2,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let Path((user_id, conversation_id)) = path?;
    authorized(&access, &[("user_id", &user_id), ("conversation_id", &conversation_id)])?;
    let MarkUnreadBody { marked, from_seq } = optional_json(&body)?;
    let marked = marked.unwrap_or(true);
    if from_seq == Some(0) || (from_seq.is_some() && !marked) {
        let message = "from_seq must be 1 to 2^53, and only with marked: true (unmarking clears the mark)";
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", message));
    }
    let (event_id, occurred_at) = unstamped();
    let user_id_ = user_id.clone();
    let event =
        ConversationMarkedUnread { event_id, occurred_at, user_id: user_id_, conversation_id, marked, from_seq };
    publish(&s, &user_id, &headers, vec![UserEvent::MarkedUnread(event)]).await
}

/// Marks every conversation read: a `read.ack` of each unmuted, non-feed conversation with unread messages (or
/// marked unread), at the newest message the user has (`newest_unread`, like the read route's default), and (v4)
/// a `thread.read` of each followed thread with unread in those conversations, at the conversation's newest seq
/// ([`crate::read::Reader::thread_heads`]). The feed stays apart (`/feed/read`).
#[utoipa::path(post, path = "/v1/users/{user_id}/read-all", tag = "writes", security(("bearer" = [])),
    params(("user_id" = String, Path), ("Idempotency-Key" = Option<String>, Header)),
    responses((status = 202, description = "One event id per conversation acked (none when nothing was unread)",
        body = Accepted), ReadErrors))]
pub async fn read_all(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let pick = |_: &str, feed: bool, muted: bool| !feed && !muted;
    let Path(user_id) = path?;
    authorized(&access, &[("user_id", &user_id)])?;
    let at = s.reader.at();
    let mut events = newest_acks(&s, &at, &user_id, pick).await?;
    let (view, _) = s.reader.user(&at, &user_id, crate::clock::today()).await?;
    let heads = s.reader.thread_heads(&at, &view, pick).await?;
    events.extend(heads.into_iter().map(|(cid, root, read_seq)| thread_read(&user_id, cid, root, read_seq)));
    publish(&s, &user_id, &headers, events).await
}

/// A `read.ack` of each conversation `pick` selects that has unread messages (or a mark, in the checkpoint or in
/// Redis), at the newest the user has: the body of `read-all` and `feed/read`.
///
/// Errors: as [`crate::read::Reader::newest_unread`].
async fn newest_acks(
    s: &ApiState,
    at: &crate::read::At,
    user_id: &str,
    pick: impl Fn(&str, bool, bool) -> bool,
) -> Result<Vec<UserEvent>, ApiError> {
    let newest = s.reader.newest_unread(at, user_id, false, pick).await?;
    Ok(newest.into_iter().map(|(id, seq)| read_ack(user_id, id, seq)).collect())
}

/// A `read.ack` of `conversation_id` up to `read_seq`, not yet stamped.
fn read_ack(user_id: &str, conversation_id: String, read_seq: u64) -> UserEvent {
    let (event_id, occurred_at) = unstamped();
    UserEvent::ReadAck(ReadAck { event_id, occurred_at, user_id: user_id.to_owned(), conversation_id, read_seq })
}

/// A `thread.read` of the thread of `thread_root` in `conversation_id` up to `read_seq`, not yet stamped.
pub(super) fn thread_read(user_id: &str, conversation_id: String, thread_root: u64, read_seq: u64) -> UserEvent {
    let (event_id, occurred_at) = unstamped();
    let user_id = user_id.to_owned();
    UserEvent::ThreadRead(ThreadRead { event_id, occurred_at, user_id, conversation_id, thread_root, read_seq })
}

/// Mutes or unmutes a conversation: publishes a `conversation.muted`.
#[utoipa::path(post, path = "/v1/users/{user_id}/conversations/{conversation_id}/mute", tag = "writes",
    security(("bearer" = [])), params(("user_id" = String, Path), ("conversation_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Dedupes retries for 24 h")),
    request_body = MuteBody, responses((status = 202, description = "Published: the ids of the events sent (the counts change once the fold has them)", body = Accepted), ReadErrors))]
pub async fn mute_conversation(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids2,
    headers: HeaderMap,
    body: Result<Json<MuteBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Path((user_id, conversation_id)) = path?;
    authorized(&access, &[("user_id", &user_id), ("conversation_id", &conversation_id)])?;
    let Json(MuteBody { muted }) = body?;
    let (event_id, occurred_at) = unstamped();
    let user_id_ = user_id.clone();
    let event = ConversationMuted { event_id, occurred_at, user_id: user_id_, conversation_id, muted };
    publish(&s, &user_id, &headers, vec![UserEvent::Muted(event)]).await
}

/// Marks one notification read: publishes a `notification.read`.
#[utoipa::path(post, path = "/v1/users/{user_id}/notifications/{notification_id}/read", tag = "writes",
    security(("bearer" = [])), params(("user_id" = String, Path), ("notification_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Dedupes retries for 24 h")),
    responses((status = 202, description = "Published: the ids of the events sent (the counts change once the fold has them)", body = Accepted), ReadErrors))]
pub async fn read_notification(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids2,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path((user_id, notification_id)) = path?;
    authorized(&access, &[("user_id", &user_id), ("notification_id", &notification_id)])?;
    let (event_id, occurred_at) = unstamped();
    let event = NotificationMark { event_id, occurred_at, user_id: user_id.clone(), notification_id };
    publish(&s, &user_id, &headers, vec![UserEvent::NotificationRead(event)]).await
}

/// A `notifications.seen` or `notifications.read` of one category (the body's `category`) or of all.
async fn mark_notifications(
    s: &ApiState,
    access: &Access,
    path: Result<Path<String>, PathRejection>,
    headers: &HeaderMap,
    body: &[u8],
    kind: fn(NotificationsMark) -> UserEvent,
) -> Result<Response, ApiError> {
    let Path(user_id) = path?;
    authorized(access, &[("user_id", &user_id)])?;
    let CategoryBody { category } = optional_json(body)?;
    if let Some(category) = &category {
        check_id("category", category)?;
    }
    let (event_id, occurred_at) = unstamped();
    let event = kind(NotificationsMark { event_id, occurred_at, user_id: user_id.clone(), category });
    publish(s, &user_id, headers, vec![event]).await
}

/// Marks every notification (of a category, or all) seen: publishes a `notifications.seen`.
#[utoipa::path(post, path = "/v1/users/{user_id}/notifications/seen", tag = "writes", security(("bearer" = [])),
    params(("user_id" = String, Path), ("Idempotency-Key" = Option<String>, Header)),
    request_body(content = Option<CategoryBody>, description = "Optional: `{\"category\"}`; absent: all"),
    responses((status = 202, description = "Published: the ids of the events sent (the counts change once the fold has them)", body = Accepted), ReadErrors))]
pub async fn notifications_seen(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    mark_notifications(&s, &access, path, &headers, &body, UserEvent::NotificationsSeen).await
}

/// Marks every notification (of a category, or all) read: publishes a `notifications.read`.
#[utoipa::path(post, path = "/v1/users/{user_id}/notifications/read", tag = "writes", security(("bearer" = [])),
    params(("user_id" = String, Path), ("Idempotency-Key" = Option<String>, Header)),
    request_body(content = Option<CategoryBody>, description = "Optional: `{\"category\"}`; absent: all"),
    responses((status = 202, description = "Published: the ids of the events sent (the counts change once the fold has them)", body = Accepted), ReadErrors))]
pub async fn notifications_read(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    mark_notifications(&s, &access, path, &headers, &body, UserEvent::NotificationsRead).await
}

/// Marks a broadcast list read up to `read_seq`, or its current head: publishes a `broadcast.read`.
#[utoipa::path(post, path = "/v1/users/{user_id}/broadcasts/{broadcast_id}/read", tag = "writes",
    security(("bearer" = [])), params(("user_id" = String, Path), ("broadcast_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header)),
    request_body(content = Option<BroadcastReadBody>, description = "Optional `{\"read_seq\"}`; absent: the head"),
    responses((status = 202, description = "Published: the ids of the events sent (the counts change once the fold has them)", body = Accepted), ReadErrors))]
pub async fn read_broadcast(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids2,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let Path((user_id, broadcast_id)) = path?;
    authorized(&access, &[("user_id", &user_id), ("broadcast_id", &broadcast_id)])?;
    let BroadcastReadBody { read_seq } = optional_json(&body)?;
    let read_seq = match read_seq {
        Some(seq) => seq,
        None => s.reader.at().projection.list_head(&ListId::Broadcast(broadcast_id.clone())).await?,
    };
    let (event_id, occurred_at) = unstamped();
    let event = BroadcastRead { event_id, occurred_at, user_id: user_id.clone(), broadcast_id, read_seq };
    publish(&s, &user_id, &headers, vec![UserEvent::BroadcastRead(event)]).await
}

/// Marks the feed seen: a `read.ack` of every followed timeline with unread posts, at the newest post the user
/// has (`newest_unread`: Redis's newest, or a read-diffused timeline's index head, when above the checkpoint's).
#[utoipa::path(post, path = "/v1/users/{user_id}/feed/read", tag = "writes", security(("bearer" = [])),
    params(("user_id" = String, Path), ("Idempotency-Key" = Option<String>, Header)),
    responses((status = 202, description = "One event id per timeline acked (none when nothing was unread)",
        body = Accepted), ReadErrors))]
pub async fn read_feed(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(user_id) = path?;
    authorized(&access, &[("user_id", &user_id)])?;
    let events = newest_acks(&s, &s.reader.at(), &user_id, |_, feed, _| feed).await?;
    publish(&s, &user_id, &headers, events).await
}
