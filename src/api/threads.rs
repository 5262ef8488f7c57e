//! The routes of contract v4's threads and reactions (`CONTRACT.md` § v4): the list of a user's followed threads
//! with unread, and the write gateway's routes to read a thread, follow or unfollow it, mark a conversation's
//! reactions seen. Each write publishes one user event as the other writes do ([`super::gateway`]: checked by the
//! decoder, keyed by `user_id`, deduplicated by `Idempotency-Key`, answered 202 with its id).

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;

use super::caps::ReadQuery;
use super::gateway::{optional_json, publish, seq, thread_read, unstamped, Accepted, Ids2};
use super::openapi::ReadErrors;
use super::{authorized, ApiError, ApiState, NAMESPACE_HEADER, SOURCE_HEADER};
use crate::auth::Access;
use crate::core::contract::{
    thread_page, After, ReactionsRead, ThreadFollowed, ThreadPage, UserEvent, MAX_SEQ, THREAD_PAGE,
};
use crate::read::Source;

/// The query of a threads list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ThreadsQuery {
    /// Threads per page, 1 to 1,000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// The `next` of the previous page (absent: the first page): `{root}:{conversation_id}`.
    #[param(pattern = r"^[0-9]{1,16}:[^\u0000-\u001f\u007f]{1,256}$")]
    pub after: Option<String>,
    /// The instant to count at (RFC 3339); default: the server's clock.
    #[param(value_type = Option<String>, format = DateTime)]
    pub now: Option<String>,
}

/// A user's followed threads with unread replies (`CONTRACT.md` § v4, "Threads"), paged: conversations by id, in
/// each the newest thread (highest root) first. Muted conversations' threads are listed, flagged `muted`.
#[utoipa::path(get, path = "/v1/users/{user_id}/threads", tag = "reads", security(("bearer" = [])),
    params(("user_id" = String, Path, description = "The user, percent-encoded (CONTRACT.md id rule)"), ThreadsQuery),
    responses(
        (status = 200, description = "One page; `next` is the `after` of the following page, null on the last",
            body = ThreadPage, headers(
            ("x-unread-source" = String, description = "`redis` or `checkpoint`"),
            ("x-unread-namespace" = String, description = "The live namespace answered from"))),
        ReadErrors))]
pub async fn list_threads(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    query: Result<Query<ThreadsQuery>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let (Path(user_id), Query(query)) = (path?, query?);
    authorized(&access, &[("user_id", &user_id)])?;
    let invalid = |message: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", message);
    let limit = query.limit.unwrap_or(THREAD_PAGE.0);
    if !(1..=THREAD_PAGE.1).contains(&limit) {
        return Err(invalid(format!("limit must be 1 to {}, not {limit}", THREAD_PAGE.1)));
    }
    let after = match query.after.as_deref().map(|a| After::parse(a).ok_or(a)) {
        Some(Err(text)) => return Err(invalid(format!("after must be a page's next, not {text:?}"))),
        Some(Ok(after)) => Some(after),
        None => None,
    };
    let today = ReadQuery { cap: None, now: query.now }.today()?;
    let at = s.reader.at();
    let (view, source) = s.reader.user(&at, &user_id, today).await?;
    let page = thread_page(&view, after.as_ref(), limit);
    let from = if source == Source::Redis { "redis" } else { "checkpoint" };
    Ok(([(NAMESPACE_HEADER, at.namespace), (SOURCE_HEADER, from.to_owned())], Json(page)).into_response())
}

/// The body of a thread read: `{"read_seq": N}`, the highest reply read (0 to 2^53), or `{}`: the whole thread.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct ThreadReadBody {
    /// The user has read every reply of the thread up to and including this seq. Absent: every reply sent so far
    /// (the conversation's newest seq, [`crate::read::Reader::thread_head`]).
    #[serde(default, deserialize_with = "seq")]
    #[schema(minimum = 0, maximum = 9_007_199_254_740_992_u64)]
    pub read_seq: Option<u64>,
}

/// The body of a follow: `{"followed": true|false}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct FollowBody {
    /// Follow (`true`) or unfollow (`false`) the thread.
    pub followed: bool,
}

/// The body of a reactions read: `{"read_seq": N}`, the highest `reaction_seq` seen (0 to 2^53), or `{}`: every
/// reaction so far.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct ReactionsReadBody {
    /// The user has seen every reaction of the conversation up to this `reaction_seq`. Absent: every reaction so
    /// far (the conversation's highest `reaction_seq`, [`crate::read::Reader::reaction_head`]).
    #[serde(default, deserialize_with = "seq")]
    #[schema(minimum = 0, maximum = 9_007_199_254_740_992_u64)]
    pub read_seq: Option<u64>,
}

type Ids3 = Result<Path<(String, String, u64)>, PathRejection>;

/// The path's user, conversation and thread root, checked (ids by the contract's rule, the root 1 to 2^53).
///
/// Errors: 400 `invalid_id` for a bad id or root, 403 when the token may not act for the user.
fn thread_path(access: &Access, path: Ids3) -> Result<(String, String, u64), ApiError> {
    let Path((user_id, conversation_id, thread_root)) = path?;
    authorized(access, &[("user_id", &user_id), ("conversation_id", &conversation_id)])?;
    if !(1..=MAX_SEQ).contains(&thread_root) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_id", "thread_root must be 1 to 2^53"));
    }
    Ok((user_id, conversation_id, thread_root))
}

/// Marks a thread read up to `read_seq`, by default whole: publishes a `thread.read` (`CONTRACT.md` § v4,
/// "Threads"); nothing when nothing was ever sent in the conversation.
#[utoipa::path(post, path = "/v1/users/{user_id}/conversations/{conversation_id}/threads/{thread_root}/read",
    tag = "writes", security(("bearer" = [])),
    params(("user_id" = String, Path), ("conversation_id" = String, Path),
        ("thread_root" = u64, Path, minimum = 1, maximum = 9_007_199_254_740_992_u64, description = "The thread's root seq"),
        ("Idempotency-Key" = Option<String>, Header, description = "Dedupes retries for 24 h")),
    request_body(content = Option<ThreadReadBody>, description = "Optional `{\"read_seq\"}`; absent: the whole thread"),
    responses((status = 202, description = "Published: the id of the event sent (the counts change once the fold has it)", body = Accepted), ReadErrors))]
pub async fn read_thread(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids3,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let (user_id, conversation_id, thread_root) = thread_path(&access, path)?;
    let ThreadReadBody { read_seq } = optional_json(&body)?;
    let read_seq = match read_seq {
        Some(read_seq) => Some(read_seq),
        None => s.reader.thread_head(&s.reader.at(), &user_id, &conversation_id, thread_root).await?,
    };
    let events = read_seq.map(|read_seq| thread_read(&user_id, conversation_id, thread_root, read_seq));
    publish(&s, &user_id, &headers, events.into_iter().collect()).await
}

/// Follows or unfollows a thread: publishes a `thread.followed` (`CONTRACT.md` § v4, "Threads").
#[utoipa::path(post, path = "/v1/users/{user_id}/conversations/{conversation_id}/threads/{thread_root}/follow",
    tag = "writes", security(("bearer" = [])),
    params(("user_id" = String, Path), ("conversation_id" = String, Path),
        ("thread_root" = u64, Path, minimum = 1, maximum = 9_007_199_254_740_992_u64, description = "The thread's root seq"),
        ("Idempotency-Key" = Option<String>, Header, description = "Dedupes retries for 24 h")),
    request_body = FollowBody,
    responses((status = 202, description = "Published: the id of the event sent (the counts change once the fold has it)", body = Accepted), ReadErrors))]
pub async fn follow_thread(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids3,
    headers: HeaderMap,
    body: Result<Json<FollowBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let (user_id, conversation_id, thread_root) = thread_path(&access, path)?;
    let Json(FollowBody { followed }) = body?;
    let (event_id, occurred_at) = unstamped();
    let event =
        ThreadFollowed { event_id, occurred_at, user_id: user_id.clone(), conversation_id, thread_root, followed };
    publish(&s, &user_id, &headers, vec![UserEvent::ThreadFollowed(event)]).await
}

/// Marks a conversation's reactions seen up to `read_seq`, by default every reaction so far: publishes a
/// `reactions.read` (`CONTRACT.md` § v4, "Reactions"); nothing when no reaction is known in the conversation.
#[utoipa::path(post, path = "/v1/users/{user_id}/conversations/{conversation_id}/reactions/read", tag = "writes",
    security(("bearer" = [])), params(("user_id" = String, Path), ("conversation_id" = String, Path),
        ("Idempotency-Key" = Option<String>, Header, description = "Dedupes retries for 24 h")),
    request_body(content = Option<ReactionsReadBody>, description = "Optional `{\"read_seq\"}`; absent: every reaction so far"),
    responses((status = 202, description = "Published: the id of the event sent (the counts change once the fold has it)", body = Accepted), ReadErrors))]
pub async fn read_reactions(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    path: Ids2,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let Path((user_id, conversation_id)) = path?;
    authorized(&access, &[("user_id", &user_id), ("conversation_id", &conversation_id)])?;
    let ReactionsReadBody { read_seq } = optional_json(&body)?;
    let read_seq = match read_seq {
        Some(read_seq) => Some(read_seq),
        None => s.reader.reaction_head(&s.reader.at(), &conversation_id).await?,
    };
    let Some(read_seq) = read_seq else { return publish(&s, &user_id, &headers, Vec::new()).await };
    let (event_id, occurred_at) = unstamped();
    let event = ReactionsRead { event_id, occurred_at, user_id: user_id.clone(), conversation_id, read_seq };
    publish(&s, &user_id, &headers, vec![UserEvent::ReactionsRead(event)]).await
}
