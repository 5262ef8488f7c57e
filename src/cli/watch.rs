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
    /// The bearer token; without it, a user token is minted from the configured HS256 secret.
    #[arg(long, env = "UNREAD_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The version the caller already has (the first message is then empty when it is still current).
    #[arg(long)]
    since: Option<u64>,
    /// Exit after this many messages (default: follow until interrupted).
    #[arg(long)]
    count: Option<u64>,
    #[command(flatten)]
    auth: crate::auth::AuthOptions,
}

impl WatchArgs {
    /// Follows the stream, reconnecting with `since` (the last version printed) after a drop, every second.
    ///
    /// Errors: no token and no secret to mint one; a refused connection (401, 403) is reported and retried.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let token = match &self.token {
            Some(t) => t.clone(),
            None => crate::auth::mint(&self.auth, &self.user, false, Duration::from_secs(24 * 3600))
                .context("no --token given and none could be minted")?,
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(self.follow(&token))
    }

    async fn follow(&self, token: &str) -> anyhow::Result<ExitCode> {
        let (mut since, mut printed) = (self.since, 0u64);
        loop {
            match self.connect_once(token, &mut since, &mut printed).await {
                Ok(true) => return Ok(ExitCode::SUCCESS),
                Ok(false) => eprintln!("unread watch: the stream closed; reconnecting"),
                Err(e) => eprintln!("unread watch: {e:#}; reconnecting"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// One connection: prints its messages; `Ok(true)` once `--count` messages were printed.
    async fn connect_once(&self, token: &str, since: &mut Option<u64>, printed: &mut u64) -> anyhow::Result<bool> {
        let mut request = stream_url(&self.api, &self.user, *since).into_client_request()?;
        request.headers_mut().insert("authorization", format!("Bearer {token}").parse()?);
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await.context("connecting")?;
        let mut out = std::io::stdout().lock();
        while let Some(message) = socket.next().await {
            match message? {
                Message::Text(text) => {
                    let version = serde_json::from_str::<serde_json::Value>(&text)?["version"].as_u64();
                    *since = version.or(*since);
                    writeln!(out, "{}", text.as_str())?;
                    out.flush()?;
                    *printed += 1;
                    if self.count.is_some_and(|c| *printed >= c) {
                        let _ = socket.close(None).await;
                        return Ok(true);
                    }
                }
                Message::Ping(p) => socket.send(Message::Pong(p)).await?,
                Message::Close(_) => return Ok(false),
                _ => {}
            }
        }
        Ok(false)
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
