//! The OpenAPI 3.1 document served at `GET /openapi.json`, generated (`utoipa`) from the handlers' `#[utoipa::path]`
//! attributes: the router is built from the same attributes ([`super::router`]), so a route cannot be served
//! without being documented.

use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// The document's fixed part: title, description, the bearer scheme and the shared schemas.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "unread",
        description = "Exact unread counts of a chat or social app (CONTRACT.md v2): the reader shape of a user, one \
            conversation, or up to 1,000 users at once. `/v1` routes need a bearer JWT (docs/api.md, Authorization).",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    modifiers(&BearerScheme),
    components(schemas(ErrorBody)),
    tags(
        (name = "reads", description = "Counts, from Redis or, degraded, from the PostgreSQL checkpoint"),
        (name = "writes", description = "The write gateway: publishes the contract's user events to Kafka"),
        (name = "stream", description = "Counts pushed as they change, over a WebSocket or Server-Sent Events"),
        (name = "inbox", description = "The web inbox: a page and its script, no token needed to load them"),
        (name = "operations", description = "Health, readiness, metrics and this document; no token needed")
    )
)]
pub struct ApiDoc;

/// Adds the `bearer` security scheme (a JWT) the `/v1` routes require.
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .bearer_format("JWT")
            .description(Some("HS256, RS256 or ES256; `sub` is the user; the service scope reads any user"))
            .build();
        api.components.get_or_insert_with(Default::default).add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// Every error's body: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// One error: a stable code to match on and a readable message.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `invalid_path`, `invalid_id`, `invalid_body`, `too_many_ids`, `invalid_header`, `unauthorized`, `forbidden`,
    /// `not_found`, `not_a_stream`, `too_large`, `headers_too_large`, `timeout`, `rate_limited`, `unavailable` or
    /// `malformed`.
    pub code: String,
    /// What went wrong, for people; it never holds another user's data.
    pub message: String,
}

/// The errors a `/v1` read may answer (each with an [`ErrorBody`]).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // a description for the document; the handlers answer `ApiError`
pub enum ReadErrors {
    /// `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_body`, `too_many_ids` or
    /// `invalid_header`.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// `forbidden`: the token may not read this user (the same answer for every other user).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// `timeout`: the request took longer than `--request-timeout`.
    #[response(status = 408)]
    Timeout(ErrorBody),
    /// `too_large`: the body is over `--max-body-bytes`.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds.
    #[response(status = 429, headers(("retry-after" = u64, description = "Seconds to wait")))]
    RateLimited(ErrorBody),
    /// `headers_too_large`: the request line and headers are over `--max-header-bytes`.
    #[response(status = 431)]
    HeadersTooLarge(ErrorBody),
    /// `malformed`: a stored hash does not decode (a bug to report).
    #[response(status = 500)]
    Malformed(ErrorBody),
    /// `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}
