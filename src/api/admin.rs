//! The admin address (`--admin-listen`, default `127.0.0.1:9090`): liveness, readiness and metrics, served by every
//! `unread run` process whatever its roles, apart from the public read API, so that a firewall or a NetworkPolicy
//! can open the API to clients and keep these to the cluster's probes and Prometheus.
//!
//! | route | answer |
//! |---|---|
//! | `GET /healthz` | 200 `{"status": "ok"}` while the process runs |
//! | `GET /readyz` | 200 `{ready, redis, namespace, assigned_partitions}` when Redis answers and every running stage has partitions; 503, the same shape, otherwise |
//! | `GET /metrics` | OpenMetrics text ([`crate::metrics`]) |
//!
//! No token is needed; anything else answers 404 `not_found`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::ApiError;
use crate::checkpoint::Stage;
use crate::metrics::{Assignment, Metrics};
use crate::push::Hub;
use crate::read::Reader;

/// What the admin routes read.
pub struct AdminState {
    /// The read model: `/readyz` pings the live namespace's Redis and names the namespace; `/metrics` samples
    /// whether its Redis breaker is open.
    pub reader: Arc<Reader>,
    /// The running stages' assignments: `/readyz` wants partitions for each (none running: Redis alone decides).
    pub assignments: Vec<(Stage, Arc<Assignment>)>,
    /// The process's metrics, rendered at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The push hub, whose open and dropped sockets `/metrics` samples; `None` in a process without the `api` role.
    pub hub: Option<Arc<Hub>>,
}

/// The admin routes over `state`.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .with_state(Arc::new(state))
}

/// Liveness: 200 while the process runs.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// The process's metrics, OpenMetrics text, with the read API's gauges sampled now.
async fn metrics(State(s): State<Arc<AdminState>>) -> Response {
    if let Some(hub) = &s.hub {
        let (sockets, dropped) = hub.socket_counts();
        s.metrics.api_state(s.reader.breaker_open(), sockets, dropped);
    }
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], s.metrics.render()).into_response()
}

/// Readiness: 200 when Redis answers and every running stage has partitions; 503 with the same shape otherwise.
async fn readyz(State(s): State<Arc<AdminState>>) -> Response {
    let at = s.reader.at();
    let (namespace, redis) = (at.namespace, at.projection.ping().await.map_err(|e| e.to_string()));
    let stages: Vec<_> = s.assignments.iter().map(|(stage, a)| (stage.as_str(), a.partitions().len())).collect();
    let ready = redis.is_ok() && stages.iter().all(|(_, n)| *n > 0);
    let body = json!({
        "ready": ready,
        "redis": redis.err().unwrap_or_else(|| "ok".into()),
        "namespace": namespace,
        "assigned_partitions": stages.into_iter().collect::<BTreeMap<_, _>>(),
    });
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}
