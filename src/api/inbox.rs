//! The web inbox at `/`: plain HTML, CSS and JavaScript embedded in the binary, showing one user's badge,
//! conversations, threads, teams, feed, notification categories and broadcast dots live from the stream, and
//! marking them read through the write gateway when clicked. Its script is an ES module built on the TypeScript
//! client (`clients/typescript/`), whose built modules are served as they are at `/client/{file}` (no bundler).

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// The page.
const PAGE: &str = include_str!("inbox/index.html");
/// Its script.
const SCRIPT: &str = include_str!("inbox/inbox.js");
/// Scripts, styles and connections from this origin only (the page's one `<style>` is inline).
const POLICY: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self' ws: wss:";

/// The TypeScript client's built ES modules (`clients/typescript/dist/`, checked fresh by `scripts/check-typescript`)
/// that a browser loads: the entry point and what it imports.
const CLIENT: [(&str, &str); 6] = [
    ("index.js", include_str!("../../clients/typescript/dist/index.js")),
    ("backoff.js", include_str!("../../clients/typescript/dist/backoff.js")),
    ("counts.js", include_str!("../../clients/typescript/dist/counts.js")),
    ("gateway.js", include_str!("../../clients/typescript/dist/gateway.js")),
    ("transport.js", include_str!("../../clients/typescript/dist/transport.js")),
    ("watch.js", include_str!("../../clients/typescript/dist/watch.js")),
];

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

/// One module of the TypeScript client (`@unread/client`), for the inbox and for any page of this origin.
#[utoipa::path(get, path = "/client/{file}", tag = "inbox",
    params(("file" = String, Path, description = "`index.js` (the entry point) or a module it imports")),
    responses((status = 200, description = "An ES module", content_type = "text/javascript"),
        (status = 404, description = "No such module", body = super::openapi::ErrorBody)))]
pub async fn client(Path(file): Path<String>) -> Response {
    match CLIENT.iter().find(|(name, _)| *name == file) {
        Some((_, text)) => ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], *text).into_response(),
        None => super::ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no client module {file:?}"))
            .into_response(),
    }
}
