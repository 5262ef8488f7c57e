//! The web inbox at `/`: plain HTML, CSS and JavaScript embedded in the binary (no build step), showing one
//! user's badge, conversations, feed, notification categories and broadcast dots live from the stream, and
//! marking them read through the write gateway when clicked.

use axum::http::header;
use axum::response::{IntoResponse, Response};

/// The page.
const PAGE: &str = include_str!("inbox/index.html");
/// Its script.
const SCRIPT: &str = include_str!("inbox/inbox.js");
/// Scripts, styles and connections from this origin only (the page's one `<style>` is inline).
const POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:";

/// The inbox page.
#[utoipa::path(get, path = "/", tag = "inbox",
    responses((status = 200, description = "The web inbox (HTML)", content_type = "text/html")))]
pub async fn page() -> Response {
    let headers = [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CONTENT_SECURITY_POLICY, POLICY)];
    (headers, PAGE).into_response()
}

/// The inbox's script.
#[utoipa::path(get, path = "/inbox.js", tag = "inbox",
    responses((status = 200, description = "The web inbox's script", content_type = "text/javascript")))]
pub async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}
