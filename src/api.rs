//! The read API (axum), served from the Redis projection.
//!
//! | route | answer |
//! |---|---|
//! | `GET /v1/users/{user_id}/unread` | the contract's reader shape; zeros for an unknown user |
//! | `GET /v1/users/{user_id}/conversations/{conversation_id}/unread` | `{user_id, conversation_id, member, unread, mentions, muted}` |
//! | `GET /healthz` | 200 while the process runs |
//! | `GET /readyz` | 200 when Redis answers and every running stage has partitions; 503 otherwise |
//! | `GET /metrics` | Prometheus text |
//!
//! Every answer comes from the namespace the live pointer names ([`crate::namespace`]); the
//! `x-unread-namespace` header of each user answer says which, and `/readyz` reports it too.
//!
//! Ids are percent-encoded path segments, decoded as UTF-8 and checked against the contract's id rule, so every
//! valid id is reachable (`/` as `%2F`, `%` as `%25`, spaces, braces, 256 bytes). Errors are JSON:
//! `{"error": {"code": "...", "message": "..."}}` — 400 `invalid_path` / `invalid_id`, 404 `not_found`,
//! 503 `unavailable` (Redis down: retry later), 500 `malformed` (a stored hash does not decode: a bug to report).

use std::sync::Arc;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::json;

use crate::checkpoint::Stage;
use crate::core::contract::validate_id;
use crate::namespace::LiveProjection;
use crate::projection::ProjectionError;
use crate::service::group::Assignment;
use crate::service::metrics::Metrics;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The live namespace's projection, following the live pointer.
    pub live: Arc<LiveProjection>,
    /// The running stages' assignments (empty when this process runs the API alone).
    pub assignments: Vec<(Stage, Arc<Assignment>)>,
    /// The service's metrics, rendered at `/metrics`.
    pub metrics: Arc<Metrics>,
}

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
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({"error": {"code": self.code, "message": self.message}}))).into_response()
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", r.body_text())
    }
}

impl From<ProjectionError> for ApiError {
    fn from(e: ProjectionError) -> Self {
        match &e {
            ProjectionError::Redis { .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", e.to_string())
            }
            ProjectionError::Malformed(_) => {
                tracing::error!(error = %e, "the projection holds a malformed hash");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "malformed", e.to_string())
            }
        }
    }
}

fn check_id(name: &str, id: &str) -> Result<(), ApiError> {
    validate_id(id).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_id", format!("{name} {e}")))
}

/// Whether every `%` of a raw path starts a two-hex-digit escape (axum's decoding passes bad ones through as is).
fn escapes_are_valid(path: &str) -> bool {
    let b = path.as_bytes();
    b.iter().enumerate().filter(|(_, c)| **c == b'%').all(|(i, _)| {
        b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
    })
}

async fn reject_bad_escapes(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if escapes_are_valid(req.uri().path()) {
        next.run(req).await
    } else {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_path", "invalid percent-encoding in the path").into_response()
    }
}

/// The API's routes.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/users/{user_id}/unread", get(user_unread))
        .route("/v1/users/{user_id}/conversations/{conversation_id}/unread", get(conversation_unread))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .layer(axum::middleware::from_fn(reject_bad_escapes))
        .with_state(state)
}

async fn user_unread(
    State(s): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(user_id) = path?;
    check_id("user_id", &user_id)?;
    let (namespace, projection) = s.live.current();
    Ok(([(NAMESPACE_HEADER, namespace)], Json(projection.read(&user_id).await?)).into_response())
}

#[derive(Serialize)]
struct ConversationAnswer {
    user_id: String,
    conversation_id: String,
    member: bool,
    unread: u64,
    mentions: u64,
    muted: bool,
}

async fn conversation_unread(
    State(s): State<ApiState>,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path((user_id, conversation_id)) = path?;
    check_id("user_id", &user_id)?;
    check_id("conversation_id", &conversation_id)?;
    let (namespace, projection) = s.live.current();
    let c = projection.read_conversation(&user_id, &conversation_id).await?;
    let answer = ConversationAnswer {
        member: c.is_some(),
        unread: c.map_or(0, |c| c.unread),
        mentions: c.map_or(0, |c| c.mentions),
        muted: c.is_some_and(|c| c.muted),
        user_id,
        conversation_id,
    };
    Ok(([(NAMESPACE_HEADER, namespace)], Json(answer)).into_response())
}

async fn metrics(State(s): State<ApiState>) -> Response {
    ([(axum::http::header::CONTENT_TYPE, crate::service::metrics::CONTENT_TYPE)], s.metrics.render()).into_response()
}

async fn readyz(State(s): State<ApiState>) -> Response {
    let (namespace, projection) = s.live.current();
    let redis = projection.ping().await.map_err(|e| e.to_string());
    let stages: Vec<_> = s.assignments.iter().map(|(stage, a)| (stage.as_str(), a.partitions().len())).collect();
    let ready = redis.is_ok() && stages.iter().all(|(_, n)| *n > 0);
    let body = json!({
        "ready": ready,
        "redis": redis.err().unwrap_or_else(|| "ok".into()),
        "namespace": namespace,
        "assigned_partitions": stages.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
    });
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
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
