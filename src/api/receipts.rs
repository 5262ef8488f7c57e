//! `GET /v1/conversations/{conversation_id}/messages/{seq}/receipts` (contract v3, "Read receipts"): how many of a
//! message's recipients have read it, "read by 17 of 20", for any group size.
//!
//! Answered from the conversation's receipts keys in Redis ([`crate::projection::receipt_keys`]): two counts over
//! sorted sets of the members' join heads and cursors and one lookup of the sender, O(log members), one round trip.
//! A read ack moves one cursor there (the fold's write of its user); nothing is stored per (message, reader).

use std::sync::Arc;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;

use super::openapi::ReadErrors;
use super::{check_id, ApiError, ApiState, NAMESPACE_HEADER};
use crate::auth::Access;
use crate::core::contract::{ReceiptView, MAX_SEQ};
use crate::projection::redis::{Receipts, MAX_LISTED};

/// The query of a receipts read.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReceiptsQuery {
    /// Also name the readers (`readers`, sorted): conversations of at most 256 members.
    pub list: Option<bool>,
}

/// A message's read receipts: of its recipients (the current members but its sender who joined before it), how
/// many have read it. For a current member's token or a service token.
#[utoipa::path(get, path = "/v1/conversations/{conversation_id}/messages/{seq}/receipts", tag = "reads",
    security(("bearer" = [])),
    params(("conversation_id" = String, Path, description = "The conversation, percent-encoded (CONTRACT.md id rule)"),
        ("seq" = u64, Path, minimum = 1, maximum = 9_007_199_254_740_992_u64, description = "The message's seq"),
        ReceiptsQuery),
    responses(
        (status = 200, description = "`{\"conversation_id\", \"seq\", \"read\", \"recipients\"}`, and `readers` with \
            `?list=true`", body = ReceiptView,
            headers(("x-unread-namespace" = String, description = "The live namespace answered from"))),
        (status = 404, description = "`not_found`: the seq was never sent, was a duplicate or was recalled",
            body = super::openapi::ErrorBody),
        ReadErrors))]
pub async fn receipts(
    State(s): State<Arc<ApiState>>,
    Extension(access): Extension<Access>,
    query: Result<Query<ReceiptsQuery>, QueryRejection>,
    path: Result<Path<(String, u64)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (Path((conversation_id, seq)), Query(query)) = (path?, query?);
    check_id("conversation_id", &conversation_id)?;
    if !(1..=MAX_SEQ).contains(&seq) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_path",
            format!("seq must be 1 to 2^53, not {seq}"),
        ));
    }
    let requester = match &access {
        Access::User(user) => Some(user.as_str()),
        Access::Service(_) => None,
    };
    let at = s.reader.at();
    // Expired under --projection-ttl: refilled from the checkpoint and read again by the reader.
    let receipts = s.reader.receipts(&at, &conversation_id, seq, requester, query.list.unwrap_or(false)).await?;
    let (read, recipients, readers) = match receipts {
        Receipts::Cold => {
            let message = "the receipts expired again while being refilled; try again";
            return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message));
        }
        Receipts::Found { read, recipients, readers } => (read, recipients, readers),
        Receipts::NotMember => {
            let message = "only a current member of the conversation, or a service, may read its receipts";
            return Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", message));
        }
        Receipts::NotSent => {
            let message = format!("message {seq} was never sent, was a duplicate or was recalled");
            return Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", message));
        }
        Receipts::TooManyToList(n) => {
            let message = format!("readers are named for conversations of at most {MAX_LISTED} members, not {n}");
            return Err(ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", message));
        }
    };
    let body = ReceiptView { conversation_id, seq, read, recipients, readers };
    Ok(([(NAMESPACE_HEADER, at.namespace)], Json(body)).into_response())
}
