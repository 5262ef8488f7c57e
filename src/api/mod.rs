//! The HTTP API (axum): reads served from the Redis projection, the stream ([`stream`]), the write gateway
//! ([`gateway`]), the web inbox ([`inbox`]); every route is in `docs/api.md` and `/openapi.json` ([`openapi`]).
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/users/{user_id}/unread` | the contract's reader shape; zeros for an unknown user |
//! | `GET /v1/users/{user_id}/conversations/{conversation_id}/unread` | `{user_id, conversation_id, member, unread, mentions, muted}` |
//! | `POST /v1/unread:batch` `{"user_ids": [...]}` | `{"users": [reader shape, ...]}` in the order asked (service tokens, at most 1,000 ids) |
//! | `GET /v1/users/{user_id}/stream` | the counts pushed as they change (WebSocket or SSE) |
//! | `POST /v1/users/{user_id}/…/read`, `…/mute`, … | the write gateway: 202 `{"event_ids"}` |
//! | `GET /`, `GET /inbox.js`, `GET /openapi.json`, `GET /stream.schema.json` | the web inbox, the OpenAPI document, the stream's messages as a JSON Schema |
//!
//! Liveness, readiness and metrics are on another address ([`admin`]).
//!
//! Every answer comes from the namespace the live pointer names ([`crate::namespace`]); the
//! `x-unread-namespace` header of each user answer says which, and `/readyz` reports it too.
//!
//! Ids are percent-encoded path segments, decoded as UTF-8 and checked against the contract's id rule, so every
//! valid id is reachable (`/` as `%2F`, `%` as `%25`, spaces, braces, 256 bytes). Errors are JSON:
//! `{"error": {"code": "...", "message": "..."}}` — 400 `invalid_path` / `invalid_id` / `invalid_body`, 401
//! `unauthorized` (no valid bearer token), 403 `forbidden` (the token may not act for that user: the same answer for
//! every other user, so ids cannot be probed), 404 `not_found`, 503 `unavailable` (Redis down: retry later), 500
//! `malformed` (a stored hash does not decode: a bug to report).
//!
//! The `/v1` routes need a bearer JWT ([`crate::auth`]); the inbox and `/openapi.json` do not. Every read
//! takes `?cap=N` ([`caps`]).

pub mod admin;
pub mod caps;
pub mod gateway;
pub mod inbox;
pub mod limits;
pub mod openapi;
pub mod receipts;
pub mod serve;
pub mod stream;
pub mod threads;

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::auth::{Access, AuthError, Verifier};
use caps::ReadQuery;
use limits::{LimitOptions, RateLimits};
use openapi::{ErrorBody, ErrorDetail, ReadErrors};

use crate::core::contract::{validate_id, UserView};
use crate::metrics::Metrics;
use crate::projection::ProjectionError;
use crate::read::{ReadError, Reader, Source};

/// What the handlers share (behind one `Arc`).
pub struct ApiState {
    /// Where every answer about users comes from: the live namespace, with degraded reads ([`crate::read`]).
    pub reader: Arc<Reader>,
    /// The service's metrics: each request is counted there ([`Metrics::http_request`]).
    pub metrics: Arc<Metrics>,
    /// The token verifier; `None` with `--insecure-no-auth` (every request may read every user).
    pub auth: Option<Arc<Verifier>>,
    /// Size and time limits ([`limits`]).
    pub limits: Arc<LimitOptions>,
    /// Per-token rate limits ([`limits`]).
    pub rates: Arc<RateLimits>,
    /// The push hub of this instance ([`crate::push`]).
    pub hub: Arc<crate::push::Hub>,
    /// The write gateway ([`gateway`]); `None`: writes answer 503.
    pub gateway: Option<Arc<gateway::Gateway>>,
}

/// The response header saying where an answer was read from: `redis` or `checkpoint`.
pub const SOURCE_HEADER: &str = "x-unread-source";

/// The response header naming the namespace an answer was read from.
pub const NAMESPACE_HEADER: &str = "x-unread-namespace";

/// An API error: status, stable code, readable message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(ErrorBody { error: ErrorDetail { code: self.code.to_owned(), message: self.message } });
        if self.status == StatusCode::UNAUTHORIZED {
            return (self.status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response();
        }
        (self.status, body).into_response()
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", e.to_string())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::new(r.status(), "too_large", r.body_text());
        }
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", r.body_text())
    }
}

/// The checks of every per-user route: each `(name, id)` valid (400 `invalid_id`), then the token may act for the
/// user, the first id (403 `forbidden`: the same for every user, naming none).
pub(crate) fn authorized(access: &Access, ids: &[(&str, &str)]) -> Result<(), ApiError> {
    for (name, id) in ids {
        check_id(name, id)?;
    }
    if !access.may_act_for(ids[0].1) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", "this token may not act for this user"));
    }
    Ok(())
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", r.body_text())
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Projection(e) => e.into(),
            ReadError::Unavailable(message) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message),
        }
    }
}

impl From<ProjectionError> for ApiError {
    fn from(e: ProjectionError) -> Self {
        match &e {
            ProjectionError::Redis { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string())
            }
            ProjectionError::Malformed(_)
            | ProjectionError::MalformedSent(_)
            | ProjectionError::UnexpectedReply { .. } => {
                tracing::error!(error = %e, "the projection holds or answered a malformed value");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "malformed", e.to_string())
            }
        }
    }
}

pub(crate) fn check_id(name: &str, id: &str) -> Result<(), ApiError> {
    // The id in the message is the caller's own input, never another user's data.
    validate_id(id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_id", format!("{name} {e}")))
}

/// Whether every `%` of a raw path starts a two-hex-digit escape (axum's decoding passes bad ones through as is).
fn escapes_are_valid(path: &str) -> bool {
    let b = path.as_bytes();
    b.iter().enumerate().filter(|(_, c)| **c == b'%').all(|(i, _)| {
        b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    })
}

/// The API's routes, each from its handler's `#[utoipa::path]` (so every served route is in `/openapi.json`), with
/// the limits of [`limits`] around them.
pub fn router(state: ApiState) -> Router {
    let state = Arc::new(state); // cloned per request by every extractor: one reference count, no copies
    let v1 = OpenApiRouter::new()
        .routes(routes!(user_unread))
        .routes(routes!(conversation_unread))
        .routes(routes!(receipts::receipts))
        .routes(routes!(batch_unread))
        .routes(routes!(stream::stream))
        .routes(routes!(gateway::read_conversation))
        .routes(routes!(gateway::mute_conversation))
        .routes(routes!(gateway::mark_unread))
        .routes(routes!(gateway::read_all))
        .routes(routes!(gateway::read_notification))
        .routes(routes!(gateway::notifications_seen))
        .routes(routes!(gateway::notifications_read))
        .routes(routes!(gateway::read_broadcast))
        .routes(routes!(gateway::read_feed))
        .routes(routes!(threads::list_threads))
        .routes(routes!(threads::read_thread))
        .routes(routes!(threads::follow_thread))
        .routes(routes!(threads::read_reactions))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), authenticate));
    let (router, doc) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(v1)
        .routes(routes!(openapi_json))
        .routes(routes!(stream_schema))
        .routes(routes!(inbox::page))
        .routes(routes!(inbox::script))
        .routes(routes!(inbox::client))
        .split_for_parts();
    let doc = Arc::new(openapi::constrain_parameters(doc.to_json().expect("the OpenAPI document serializes")));
    let limits = state.limits.clone();
    router
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(Extension(doc))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(limits, guard))
        .layer(axum::middleware::from_fn_with_state(state.metrics.clone(), track))
        .with_state(state)
}

/// Counts each request by its route pattern, method and status, with its latency ([`Metrics::http_request`]).
async fn track(State(metrics): State<Arc<crate::metrics::Metrics>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<axum::extract::MatchedPath>().map(|p| p.as_str().to_owned());
    let (method, started) = (req.method().clone(), std::time::Instant::now());
    let response = next.run(req).await;
    let route = route.as_deref().unwrap_or("unmatched");
    metrics.http_request(route, method.as_str(), response.status().as_u16(), started.elapsed());
    response
}

/// Refuses a request with invalid percent-escapes (400) or an oversized head (431), and bounds its time (408).
async fn guard(State(limits): State<Arc<LimitOptions>>, req: Request, next: Next) -> Response {
    if !escapes_are_valid(req.uri().path()) {
        return ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", "invalid percent-encoding in the path")
            .into_response();
    }
    let head = limits::head_bytes(&req);
    if head > limits.max_header_bytes {
        let message = format!("the request line and headers are {head} bytes: at most {}", limits.max_header_bytes);
        return ApiError::new(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "headers_too_large", message)
            .into_response();
    }
    match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!("the request took longer than {:?}", limits.request_timeout);
            ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout", message).into_response()
        }
    }
}

/// Verifies the bearer token of a `/v1` request, applies its rate limit, and hands its [`Access`] to the handler.
async fn authenticate(State(s): State<Arc<ApiState>>, mut req: Request, next: Next) -> Response {
    let grant = match &s.auth {
        None => Ok(None),
        Some(verifier) => {
            bearer(&req).or_else(|e| stream_token(&req).ok_or(e)).and_then(|t| verifier.grant(t)).map(Some)
        }
    };
    let (access, until) = match grant {
        Ok(None) => (Access::Service(String::new()), None),
        Ok(Some(grant)) => (grant.access, Some(grant.until)),
        Err(e) => return ApiError::from(e).into_response(),
    };
    if let Err(wait) = s.rates.check(&access) {
        s.metrics.rate_limited(if matches!(access, Access::Service(_)) { "service" } else { "user" });
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let message = format!("over this token's rate limit: retry in {seconds} s");
        let error = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message);
        return ([(header::RETRY_AFTER, seconds.to_string())], error).into_response();
    }
    req.extensions_mut().insert(access);
    req.extensions_mut().insert(stream::TokenUntil(until));
    next.run(req).await
}

/// The `access_token` query parameter of a stream request (browsers cannot set headers on a WebSocket or an
/// `EventSource`); `None` for any other route.
fn stream_token(req: &Request) -> Option<&str> {
    if !req.uri().path().ends_with("/stream") {
        return None;
    }
    let query = req.uri().query()?;
    query.split('&').find_map(|pair| pair.strip_prefix("access_token=")).filter(|t| !t.is_empty())
}

/// The token of an `Authorization: Bearer …` header.
fn bearer(req: &Request) -> Result<&str, AuthError> {
    let value = req.headers().get(header::AUTHORIZATION).ok_or(AuthError::Missing)?;
    let value = value.to_str().map_err(|_| AuthError::Invalid("the header is not text".into()))?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(AuthError::Missing);
    }
    Ok(token.trim())
}

/// A JSON answer with the namespace header, capped when asked.
fn answer(namespace: String, body: impl Serialize, query: &ReadQuery) -> Response {
    let Some(cap) = query.cap else { return ([(NAMESPACE_HEADER, namespace)], Json(body)).into_response() };
    let mut value = serde_json::to_value(body).expect("answers serialize");
    caps::apply(&mut value, cap);
    ([(NAMESPACE_HEADER, namespace)], Json(value)).into_response()
}

/// A user's answer with where it came from: `x-unread-source`, and `"stale": true` when Redis is down.
fn sourced(namespace: String, view: UserView, source: Source, query: &ReadQuery) -> Response {
    let mut response = if source == Source::Stale {
        let mut value = serde_json::to_value(view).expect("answers serialize");
        value["stale"] = true.into();
        answer(namespace, value, query)
    } else {
        answer(namespace, view, query)
    };
    let name = if source == Source::Redis { "redis" } else { "checkpoint" };
    response.headers_mut().insert(SOURCE_HEADER, header::HeaderValue::from_static(name));
    response
}

/// One user's counts: the contract's reader shape (zeros for a user with state nowhere).
#[utoipa::path(get, path = "/v1/users/{user_id}/unread", tag = "reads", security(("bearer" = [])),
    params(("user_id" = String, Path, description = "The user, percent-encoded (CONTRACT.md id rule)"), ReadQuery),
    responses(
        (status = 200, description = "The reader shape; `\"stale\": true` when read from the checkpoint while \
            Redis is down; `\"capped\": true` beside a count cut to `cap`", body = UserView, headers(
            ("x-unread-source" = String, description = "`redis` or `checkpoint`"),
            ("x-unread-namespace" = String, description = "The live namespace answered from"))),
        ReadErrors))]
async fn user_unread(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    query: Result<Query<ReadQuery>, QueryRejection>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let (Path(user_id), query) = (path?, caps::checked(query)?);
    authorized(&access, &[("user_id", &user_id)])?;
    let at = s.reader.at();
    let (view, source) = s.reader.user(&at, &user_id, query.today()?).await?;
    Ok(sourced(at.namespace, view, source, &query))
}

/// The body of `POST /v1/unread:batch`.
#[derive(Deserialize, utoipa::ToSchema)]
struct BatchRequest {
    /// The users to read, at most 1,000.
    user_ids: Vec<String>,
}

/// The answer of `POST /v1/unread:batch`.
#[derive(Serialize, utoipa::ToSchema)]
struct BatchAnswer {
    /// Each user's reader shape, in the order asked (zeros for a user with no hash).
    users: Vec<UserView>,
}

/// Most ids of one batch read.
pub const MAX_BATCH_IDS: usize = 1000;

/// Many users' counts in one pipelined Redis round trip (service tokens only).
#[utoipa::path(post, path = "/v1/unread:batch", tag = "reads", security(("bearer" = [])), params(ReadQuery),
    request_body = BatchRequest,
    responses(
        (status = 200, description = "Every user's reader shape, in the order asked", body = BatchAnswer,
            headers(("x-unread-namespace" = String, description = "The live namespace answered from"))),
        ReadErrors))]
async fn batch_unread(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    query: Result<Query<ReadQuery>, QueryRejection>,
    body: Result<Json<BatchRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let query = caps::checked(query)?;
    if !matches!(access, Access::Service(_)) {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", "the batch route needs a service token"));
    }
    let Json(BatchRequest { user_ids }) = body?;
    if user_ids.len() > MAX_BATCH_IDS {
        let message = format!("{} user_ids: at most {MAX_BATCH_IDS} per batch", user_ids.len());
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "too_many_ids", message));
    }
    for (i, id) in user_ids.iter().enumerate() {
        check_id(&format!("user_ids[{i}]"), id)?;
    }
    let at = s.reader.at();
    let users = s.reader.users(&at, &user_ids, query.today()?).await?;
    Ok(answer(at.namespace, BatchAnswer { users }, &query))
}

/// One conversation's counts for one user.
#[derive(Serialize, utoipa::ToSchema)]
struct ConversationAnswer {
    /// The user.
    user_id: String,
    /// The conversation.
    conversation_id: String,
    /// Whether the user is a member (all counts are 0 when not).
    member: bool,
    /// Unread messages.
    unread: u64,
    /// Unread messages that mention the user.
    mentions: u64,
    /// Whether the user muted the conversation.
    muted: bool,
    /// Whether the user marked the conversation unread (contract v3).
    marked_unread: bool,
    /// The lowest unread seq, `null` when nothing is unread (contract v4, "jump to the first unread").
    first_unread: Option<u64>,
    /// The user's messages here with a new reaction by someone else (contract v4).
    reactions: u64,
}

/// One conversation's counts for one user, from Redis.
#[utoipa::path(get, path = "/v1/users/{user_id}/conversations/{conversation_id}/unread", tag = "reads",
    security(("bearer" = [])),
    params(("user_id" = String, Path, description = "The user, percent-encoded (CONTRACT.md id rule)"),
        ("conversation_id" = String, Path, description = "The conversation, percent-encoded"), ReadQuery),
    responses(
        (status = 200, description = "The conversation's counts", body = ConversationAnswer,
            headers(("x-unread-namespace" = String, description = "The live namespace answered from"))),
        ReadErrors))]
async fn conversation_unread(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    query: Result<Query<ReadQuery>, QueryRejection>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (Path((user_id, conversation_id)), query) = (path?, caps::checked(query)?);
    authorized(&access, &[("user_id", &user_id), ("conversation_id", &conversation_id)])?;
    let at = s.reader.at();
    let c = s.reader.conversation(&at, &user_id, &conversation_id, query.today()?).await?;
    let answer = ConversationAnswer {
        member: c.is_some(),
        unread: c.map_or(0, |c| c.unread),
        mentions: c.map_or(0, |c| c.mentions),
        muted: c.is_some_and(|c| c.muted),
        marked_unread: c.is_some_and(|c| c.marked_unread),
        first_unread: c.and_then(|c| c.first_unread),
        reactions: c.map_or(0, |c| c.reactions),
        user_id,
        conversation_id,
    };
    Ok(self::answer(at.namespace, answer, &query))
}

/// The JSON Schema of every message of the stream (`schemas/stream.schema.json`): `state`, `changes`, `refreshed`,
/// `closing`, and the client's `refresh`.
#[utoipa::path(get, path = "/stream.schema.json", tag = "operations",
    responses((status = 200, description = "The stream's messages, a JSON Schema (2020-12)", content_type = "application/schema+json")))]
async fn stream_schema() -> Response {
    let schema = include_str!("../../schemas/stream.schema.json");
    ([(header::CONTENT_TYPE, "application/schema+json")], schema).into_response()
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json")))]
async fn openapi_json(Extension(doc): Extension<Arc<String>>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], doc.as_str().to_owned()).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_are_checked() {
        for ok in ["/v1/users/a%2Fb/unread", "/v1/users/%25/unread", "/plain", "/%e9%E9"] {
            assert!(super::escapes_are_valid(ok), "{ok}");
        }
        for bad in ["/v1/users/%ZZ/unread", "/a%", "/a%2", "/a%2g"] {
            assert!(!super::escapes_are_valid(bad), "{bad}");
        }
    }
}
