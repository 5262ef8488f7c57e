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
        (name = "operations", description = "This document and the stream's JSON Schema; no token needed. Health, readiness and metrics are on the admin address (`--admin-listen`), not in this document")
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
    /// `invalid_path`, `invalid_id`, `invalid_query`, `invalid_body`, `too_many_ids`, `invalid_header`, `unauthorized`, `forbidden`,
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
    /// `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
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

/// The id rule as a JSON Schema pattern (ECMA regex): no control character.
pub const ID_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]+$";

/// The rules the handlers enforce on parameters, written into the document `doc` (its JSON) in one place, so that
/// a request the document allows is one the API accepts and the other way round:
/// - every path parameter named `*_id`, the batch's `user_ids` and a notification mark's `category`: the contract's id rule (CONTRACT.md § Ids), 1 to 256 characters without
///   control characters (U+0000–U+001F, U+007F–U+009F); the rule counts 256 bytes of UTF-8, which the schema
///   cannot say, so the description does;
/// - `Idempotency-Key`: 1 to 256 visible ASCII characters, spaces inside only (what an HTTP header value carries);
/// - the batch's `user_ids`: at most [`super::MAX_BATCH_IDS`];
/// - a mark-unread body: no `from_seq` with `"marked": false`;
/// - every gateway write's 202 links to the read of the same user (`ReadUser`), for clients and for Schemathesis'
///   stateful phase.
///
/// Returns the document unchanged when it is not JSON (never: it is serialized just before).
pub fn constrain_parameters(doc: String) -> String {
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(&doc) else { return doc };
    let id_rule = |schema: &mut serde_json::Value| {
        let rule = [("minLength", 1.into()), ("maxLength", 256.into()), ("pattern", ID_PATTERN.into())];
        schema.as_object_mut().into_iter().for_each(|o| o.extend(rule.clone().map(|(k, v)| (k.to_owned(), v))));
    };
    let key = serde_json::json!({"type": "string", "minLength": 1, "maxLength": 256,
        "pattern": "^[!-~]([ -~]*[!-~])?$"});
    let operations = value["paths"].as_object_mut().into_iter().flat_map(|p| p.values_mut());
    let parameters = operations.flat_map(|o| o.as_object_mut().into_iter().flat_map(|o| o.values_mut()));
    let lists = parameters.filter_map(|op| op.get_mut("parameters").and_then(serde_json::Value::as_array_mut));
    for parameter in lists.flatten() {
        let (name, place) = (parameter["name"].as_str().unwrap_or(""), parameter["in"].as_str().unwrap_or(""));
        match (place, name) {
            ("path", n) if n.ends_with("_id") => {
                parameter["schema"] = serde_json::json!({"type": "string"});
                id_rule(&mut parameter["schema"]);
            }
            ("header", "Idempotency-Key") => parameter["schema"] = key.clone(),
            _ => {}
        }
    }
    link_writes_to_reads(&mut value);
    if let Some(ids) = value.pointer_mut("/components/schemas/BatchRequest/properties/user_ids") {
        id_rule(&mut ids["items"]);
        ids["maxItems"] = serde_json::json!(super::MAX_BATCH_IDS);
    }
    if let Some(category) = value.pointer_mut("/components/schemas/CategoryBody/properties/category") {
        id_rule(category);
    }
    if let Some(mark) = value.pointer_mut("/components/schemas/MarkUnreadBody").and_then(|m| m.as_object_mut()) {
        // `from_seq` only with `marked` true or absent (CONTRACT.md § v3), which the struct cannot say.
        let properties = serde_json::json!({"marked": {"const": false}, "from_seq": {"type": "integer"}});
        let rule = serde_json::json!({"required": ["marked", "from_seq"], "properties": properties});
        mark.insert("not".to_owned(), rule);
    }
    serde_json::to_string(&value).unwrap_or(doc)
}

/// Adds to the 202 of every `POST /v1/users/{user_id}/…` (the write gateway) an OpenAPI link to the read of the same
/// user (`user_unread`), where the write's effect shows once the fold has the event.
fn link_writes_to_reads(doc: &mut serde_json::Value) {
    let link = serde_json::json!({"ReadUser": {"operationId": "user_unread",
        "parameters": {"user_id": "$request.path.user_id"},
        "description": "The user's counts, which show the write once the fold has its events"}});
    let Some(paths) = doc["paths"].as_object_mut() else { return };
    for (_, item) in paths.iter_mut().filter(|(p, _)| p.starts_with("/v1/users/{user_id}/")) {
        if let Some(accepted) = item.pointer_mut("/post/responses/202").and_then(serde_json::Value::as_object_mut) {
            accepted.insert("links".to_owned(), link.clone());
        }
    }
}
