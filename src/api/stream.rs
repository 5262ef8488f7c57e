//! `GET /v1/users/{user_id}/stream`: a user's counts pushed as they change ([`crate::push`]), over a WebSocket, or
//! as Server-Sent Events when the client accepts `text/event-stream`.
//!
//! Both carry the same JSON messages. The WebSocket is pinged every [`HEARTBEAT`]; SSE sends a comment line as
//! often, and each event's `id` is its version, so a browser's `EventSource` resumes with `Last-Event-ID` as if it
//! had passed `since`. A socket whose queue fills (a client not reading) is closed with code 1013 ("try again
//! later"); one that cannot take a message for [`SEND_TIMEOUT`] is closed too. On shutdown a WebSocket gets a close
//! frame (1001, "going away") and an SSE stream ends.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;

use super::openapi::ReadErrors;
use super::{authorized, ApiError, ApiState};
use crate::auth::Access;
use crate::push::Subscription;

/// How often an idle stream shows it is alive: 15 s.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Longest one message may take to be written to a WebSocket before the socket is dropped: 10 s.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// A WebSocket's read and write buffer, each way: 4,096 bytes (tungstenite's default is 128 KiB). Messages are a
/// few hundred bytes and a client sends nothing but control frames, so a socket costs kilobytes, not hundreds of
/// them. The load generators' clients use the same (`examples/midnight_load.rs`, `examples/push_load.rs`).
pub const SOCKET_BUFFER_BYTES: usize = 4096;

/// The query of a stream.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// The version the client last applied: the first message is then an empty `changes` when it is current, the
    /// whole state otherwise.
    pub since: Option<u64>,
    /// The bearer token, for clients that cannot set a header (browsers' `WebSocket` and `EventSource`).
    pub access_token: Option<String>,
}

/// A user's counts, pushed: the state, then what changes (docs/api.md § Stream).
#[utoipa::path(get, path = "/v1/users/{user_id}/stream", tag = "stream", security(("bearer" = [])),
    params(("user_id" = String, Path, description = "The user, percent-encoded"), StreamQuery),
    responses(
        (status = 101, description = "WebSocket (`Upgrade: websocket`): one JSON message per text frame"),
        (status = 200, description = "Server-Sent Events (`Accept: text/event-stream`): one JSON message per \
            event, its `id` the version", content_type = "text/event-stream"),
        (status = 406, description = "`not_a_stream`: neither a WebSocket upgrade nor `text/event-stream`",
            body = super::openapi::ErrorBody),
        ReadErrors))]
pub async fn stream(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    query: Result<Query<StreamQuery>, axum::extract::rejection::QueryRejection>,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let (Path(user_id), Query(query)) = (path?, query?);
    authorized(&access, &[("user_id", &user_id)])?;
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()?.parse().ok());
    let since = query.since.or(last_event_id);
    if let Ok(ws) = ws {
        let subscription = s.hub.subscribe(&user_id, since).await;
        let ws =
            ws.read_buffer_size(SOCKET_BUFFER_BYTES).write_buffer_size(SOCKET_BUFFER_BYTES).max_message_size(64 << 10);
        return Ok(ws.on_upgrade(move |socket| websocket(socket, subscription)));
    }
    let accepts = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !accepts.contains("text/event-stream") {
        let message = "ask for a WebSocket upgrade or Accept: text/event-stream";
        return Err(ApiError::new(StatusCode::NOT_ACCEPTABLE, "not_a_stream", message));
    }
    Ok(events(s.hub.subscribe(&user_id, since).await).into_response())
}

/// Writes the subscription's messages to the WebSocket, pings it, and closes it when the hub drops it, the client
/// goes, or the service stops.
async fn websocket(mut socket: WebSocket, mut sub: Subscription) {
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    let close = |code: u16, reason: &'static str| Message::Close(Some(CloseFrame { code, reason: reason.into() }));
    loop {
        let out = tokio::select! {
            message = sub.messages.recv() => match message {
                Some(text) => Message::Text(text.json.as_ref().into()),
                None => close(1013, "too slow: reconnect with since"),
            },
            _ = ping.tick() => Message::Ping(Default::default()),
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => continue,
            },
            _ = sub.stop.wait_for(|s| *s) => close(1001, "going away"),
        };
        let closing = matches!(out, Message::Close(_));
        let sent = tokio::time::timeout(SEND_TIMEOUT, socket.send(out)).await;
        if closing || !matches!(sent, Ok(Ok(()))) {
            return;
        }
    }
}

/// The subscription as Server-Sent Events, ending when the hub drops it or the service stops.
fn events(sub: Subscription) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let stream = futures::stream::unfold(sub, |mut sub| async move {
        let text = tokio::select! {
            text = sub.messages.recv() => text?,
            _ = sub.stop.wait_for(|s| *s) => return None,
        };
        Some((Ok(Event::default().id(text.version.to_string()).data(text.json.as_ref())), sub))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(HEARTBEAT))
}
