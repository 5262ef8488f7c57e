//! `unread watch --user ID`: follows a user's stream over a WebSocket and prints each message as one JSON line
//! (docs/api.md § Stream), for operators and scripts.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Arguments of `unread watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The user to follow.
    #[arg(long)]
    user: String,
    /// The API's base URL.
    #[arg(long, env = "UNREAD_API_URL", default_value = "http://127.0.0.1:8080")]
    api: String,
    /// The bearer token; without it, a user token is minted from the configured HS256 secret, and a fresh one is
    /// sent over the socket before it expires. A given token cannot be refreshed: when it expires, watch stops.
    #[arg(long, env = "UNREAD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// How long a minted token is valid, e.g. `1h`; a fresh one is sent when four fifths of it have passed.
    #[arg(long, default_value = "1h", value_parser = crate::config::parse_duration)]
    token_ttl: Duration,
    /// The version the caller already has (the first message is then empty when it is still current).
    #[arg(long)]
    since: Option<u64>,
    /// Exit after this many messages (default: follow until interrupted).
    #[arg(long)]
    count: Option<u64>,
    #[command(flatten)]
    auth: crate::auth::AuthOptions,
}

/// How a connection ended.
enum End {
    /// `--count` messages were printed.
    Done,
    /// The socket closed or failed: reconnect.
    Dropped,
    /// The server ended the stream for its token (`{"type":"closing","reason"}`).
    Token(String),
}

impl WatchArgs {
    /// Follows the stream, reconnecting with `since` (the last version printed) after a drop, every second.
    ///
    /// Errors: no token and no secret to mint one; a given `--token` that expired or was refused (a refused
    /// connection, 401 or 403, is reported and retried).
    pub fn run(self) -> anyhow::Result<ExitCode> {
        self.token()?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(self.follow())
    }

    /// The given token, or a fresh one minted for `--token-ttl`.
    fn token(&self) -> anyhow::Result<String> {
        match &self.token {
            Some(t) => Ok(t.clone()),
            None => crate::auth::mint(&self.auth, &self.user, false, self.token_ttl)
                .context("no --token given and none could be minted"),
        }
    }

    async fn follow(&self) -> anyhow::Result<ExitCode> {
        let (mut since, mut printed) = (self.since, 0u64);
        loop {
            match self.connect_once(&self.token()?, &mut since, &mut printed).await {
                Ok(End::Done) => return Ok(ExitCode::SUCCESS),
                Ok(End::Dropped) => eprintln!("unread watch: the stream closed; reconnecting"),
                Ok(End::Token(reason)) if self.token.is_some() => {
                    anyhow::bail!("the stream ended: {reason}; pass a fresh --token")
                }
                Ok(End::Token(reason)) => eprintln!("unread watch: the stream ended: {reason}; reconnecting"),
                Err(e) => eprintln!("unread watch: {e:#}; reconnecting"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// One connection: prints its messages (not the replies to refreshes), and, with a minted token, sends a fresh
    /// one every four fifths of `--token-ttl`.
    async fn connect_once(&self, token: &str, since: &mut Option<u64>, printed: &mut u64) -> anyhow::Result<End> {
        let mut request = stream_url(&self.api, &self.user, *since).into_client_request()?;
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse()?);
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await.context("connecting")?;
        let mut out = std::io::stdout().lock();
        let every = self.token_ttl.mul_f64(0.8).max(Duration::from_millis(100));
        let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            let message = tokio::select! {
                message = socket.next() => message,
                _ = refresh.tick(), if self.token.is_none() => {
                    let fresh = serde_json::json!({"type": "refresh", "token": self.token()?});
                    socket.send(Message::Text(fresh.to_string().into())).await?;
                    continue;
                }
            };
            let Some(message) = message else { return Ok(End::Dropped) };
            match message? {
                Message::Text(text) => {
                    let value: serde_json::Value = serde_json::from_str(&text)?;
                    match value["type"].as_str() {
                        Some("refreshed") => continue,
                        Some("closing") => return Ok(End::Token(value["reason"].as_str().unwrap_or("").to_owned())),
                        _ => {}
                    }
                    *since = value["version"].as_u64().or(*since);
                    writeln!(out, "{}", text.as_str())?;
                    out.flush()?;
                    *printed += 1;
                    if self.count.is_some_and(|c| *printed >= c) {
                        let _ = socket.close(None).await;
                        return Ok(End::Done);
                    }
                }
                Message::Ping(p) => socket.send(Message::Pong(p)).await?,
                Message::Close(_) => return Ok(End::Dropped),
                _ => {}
            }
        }
    }
}

/// `ws://…/v1/users/{id}/stream[?since=V]` for an `http://` base URL.
fn stream_url(api: &str, user: &str, since: Option<u64>) -> String {
    let base = api.trim_end_matches('/').replacen("http://", "ws://", 1).replacen("https://", "wss://", 1);
    let id: String = user
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let since = since.map(|v| format!("?since={v}")).unwrap_or_default();
    format!("{base}/v1/users/{id}/stream{since}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn stream_urls_encode_the_id() {
        assert_eq!(
            super::stream_url("http://h:1/", "[[a b]]/c", Some(7)),
            "ws://h:1/v1/users/%5B%5Ba%20b%5D%5D%2Fc/stream?since=7"
        );
    }
}
