//! `GET /v1/users/{user_id}/stream`: a user's counts pushed as they change ([`crate::push`]), over a WebSocket, or
//! as Server-Sent Events when the client accepts `text/event-stream`.
//!
//! Both carry the same JSON messages. The WebSocket is pinged every [`HEARTBEAT`]; SSE sends a comment line as
//! often, and each event's `id` is its version, so a browser's `EventSource` resumes with `Last-Event-ID` as if it
//! had passed `since`. A socket whose queue fills (a client not reading) is closed with code 1013 ("try again
//! later"); one that cannot take a message for [`SEND_TIMEOUT`] is closed too. On shutdown a WebSocket gets a close
//! frame (1001, "going away") and an SSE stream ends.
//!
//! A stream lasts no longer than its token ([`TokenUntil`]: `exp` plus `--auth-leeway`): then it sends
//! `{"type":"closing","reason":"token_expired"}` and ends (a WebSocket with close code 4001). A WebSocket client
//! extends it by sending `{"type":"refresh","token":"<JWT>"}` before then: answered `{"type":"refreshed","until"}`,
//! or, for a token that does not verify or may not read the user, closed (4001 `token_invalid`, 4003 `forbidden`).

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
    params(("user_id" = String, Path, description = "The user, percent-encoded"), StreamQuery,
        ("Accept" = String, Header, pattern = "^text/event-stream$",
            description = "`text/event-stream` for Server-Sent Events; a WebSocket client sends an upgrade instead \
            (`Connection: Upgrade`, `Upgrade: websocket`), which OpenAPI cannot describe. Neither: 406")),
    responses(
        (status = 101, description = "WebSocket (`Upgrade: websocket`): one JSON message per text frame; at the \
            token's `exp` plus the leeway a last `{\"type\":\"closing\",\"reason\":\"token_expired\"}` and close \
            code 4001, unless the client sent `{\"type\":\"refresh\",\"token\"}` before (docs/api.md § Stream)"),
        (status = 200, description = "Server-Sent Events (`Accept: text/event-stream`): one JSON message per \
            event, its `id` the version; ends after a last `closing` message when the token expires",
            content_type = "text/event-stream"),
        (status = 406, description = "`not_a_stream`: neither a WebSocket upgrade nor `text/event-stream`",
            body = super::openapi::ErrorBody),
        ReadErrors))]
pub async fn stream(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    Extension(until): Extension<TokenUntil>,
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
        let session = Session { user_id, verifier: s.auth.clone(), until };
        return Ok(ws.on_upgrade(move |socket| websocket(socket, subscription, session)));
    }
    let accepts = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !accepts.contains("text/event-stream") {
        let message = "ask for a WebSocket upgrade or Accept: text/event-stream";
        return Err(ApiError::new(StatusCode::NOT_ACCEPTABLE, "not_a_stream", message));
    }
    Ok(events(s.hub.subscribe(&user_id, since).await, until).into_response())
}

/// Until when a request's token is accepted, in seconds since the Unix epoch: its `exp` plus the leeway
/// (`--auth-leeway`); `None` without authorization (`--insecure-no-auth`), where a stream lasts as long as its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenUntil(pub Option<u64>);

impl TokenUntil {
    /// The instant a stream under this token ends: far in the future for `None`.
    fn deadline(self) -> tokio::time::Instant {
        let Some(until) = self.0 else { return tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86_400) };
        let at = std::time::UNIX_EPOCH + Duration::from_secs(until);
        let left = at.duration_since(std::time::SystemTime::now()).unwrap_or_default();
        tokio::time::Instant::now() + left
    }
}

/// Why the server ends a stream on account of its token: the last message it sends, `{"type": "closing",
/// "reason"}`, then, on a WebSocket, a close frame with the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// The token expired (plus the leeway) and no fresh one came over the socket: 4001. The client gets a fresh
    /// token and reconnects with `since`.
    Expired,
    /// A refresh sent a token that does not verify: 4001.
    Invalid,
    /// A refresh sent a valid token that may not read this user: 4003.
    Forbidden,
}

impl Ending {
    /// The last message: `{"type":"closing","reason":…}`.
    fn json(self) -> &'static str {
        match self {
            Ending::Expired => r#"{"type":"closing","reason":"token_expired"}"#,
            Ending::Invalid => r#"{"type":"closing","reason":"token_invalid"}"#,
            Ending::Forbidden => r#"{"type":"closing","reason":"forbidden"}"#,
        }
    }

    /// The WebSocket close frame's code (4000–4999: the application's) and reason.
    fn close(self) -> Message {
        let (code, reason) = match self {
            Ending::Expired => (4001, "token expired: refresh it and reconnect with since"),
            Ending::Invalid => (4001, "the refreshed token is not valid"),
            Ending::Forbidden => (4003, "the refreshed token may not read this user"),
        };
        Message::Close(Some(CloseFrame { code, reason: reason.into() }))
    }
}

/// What a WebSocket client may send: `{"type": "refresh", "token": "<JWT>"}`, a fresh token before the one the
/// socket was opened with expires. Anything else is ignored.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ClientMessage {
    /// A fresh token for the same user (or a service token).
    Refresh {
        /// The JWT.
        token: String,
    },
}

/// The token side of one WebSocket: whose counts it streams, the verifier, and until when.
struct Session {
    user_id: String,
    verifier: Option<Arc<crate::auth::Verifier>>,
    until: TokenUntil,
}

impl Session {
    /// Handles a client's text frame: `None` for anything but a refresh; for a refresh, the reply
    /// (`{"type":"refreshed","until":…}`, the stream now lasting until then) or why the stream ends.
    fn refresh(&mut self, text: &str) -> Option<Result<String, Ending>> {
        let ClientMessage::Refresh { token } = serde_json::from_str(text).ok()?;
        let Some(verifier) = &self.verifier else { return Some(Ok(r#"{"type":"refreshed","until":null}"#.into())) };
        Some(match verifier.grant(&token) {
            Err(_) => Err(Ending::Invalid),
            Ok(grant) if !grant.access.may_act_for(&self.user_id) => Err(Ending::Forbidden),
            Ok(grant) => {
                self.until = TokenUntil(Some(grant.until));
                Ok(format!(r#"{{"type":"refreshed","until":{}}}"#, grant.until))
            }
        })
    }
}

/// Writes the subscription's messages to the WebSocket, pings it, takes refreshed tokens, and closes it when the
/// hub drops it, the client goes, its token expires ([`Ending`]) or the service stops.
async fn websocket(mut socket: WebSocket, mut sub: Subscription, mut session: Session) {
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    let close = |code: u16, reason: &'static str| Message::Close(Some(CloseFrame { code, reason: reason.into() }));
    let ending = |e: Ending| vec![Message::Text(e.json().into()), e.close()];
    loop {
        let expiry = session.until.deadline();
        let out = tokio::select! {
            message = sub.messages.recv() => match message {
                Some(text) => vec![Message::Text(text.json.as_ref().into())],
                None => vec![close(1013, "too slow: reconnect with since")],
            },
            _ = ping.tick() => vec![Message::Ping(Default::default())],
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(Message::Text(text))) => match session.refresh(&text) {
                    None => continue,
                    Some(Ok(reply)) => vec![Message::Text(reply.into())],
                    Some(Err(e)) => ending(e),
                },
                Some(Ok(_)) => continue,
            },
            _ = tokio::time::sleep_until(expiry) => ending(Ending::Expired),
            _ = sub.stop.wait_for(|s| *s) => vec![close(1001, "going away")],
        };
        for frame in out {
            let closing = matches!(frame, Message::Close(_));
            let sent = tokio::time::timeout(SEND_TIMEOUT, socket.send(frame)).await;
            if closing || !matches!(sent, Ok(Ok(()))) {
                return;
            }
        }
    }
}

/// The subscription as Server-Sent Events, ending when the hub drops it, the service stops, or the token expires
/// (after a last `{"type":"closing","reason":"token_expired"}` event: SSE cannot take a fresh token, so the client
/// reconnects with one, and `Last-Event-ID` or `since`).
fn events(sub: Subscription, until: TokenUntil) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let deadline = until.deadline();
    let stream = futures::stream::unfold(Some(sub), move |sub| async move {
        let mut sub = sub?;
        let text = tokio::select! {
            text = sub.messages.recv() => Some(text?),
            _ = sub.stop.wait_for(|s| *s) => return None,
            _ = tokio::time::sleep_until(deadline) => None,
        };
        match text {
            Some(text) => Some((Ok(Event::default().id(text.version.to_string()).data(text.json.as_ref())), Some(sub))),
            None => Some((Ok(Event::default().data(Ending::Expired.json())), None)),
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(HEARTBEAT))
}
