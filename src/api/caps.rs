//! Display caps (`?cap=N` on every read): each count above the cap is answered as the cap, and the object holding
//! it gets `"capped": true` (the "99+" badge), so that clients stop re-implementing it. The totals are capped the
//! same way, in the top-level object.

use serde::Deserialize;
use serde_json::Value;

use crate::core::counts::Counts;

/// The count fields a cap applies to, in any object of an answer: every total of the table ([`Counts::NAMES`])
/// and the counts of a conversation, a category or a list.
fn is_count(field: &str) -> bool {
    Counts::NAMES.contains(&field) || ["unread", "mentions", "unseen"].contains(&field)
}

/// The largest `cap`: 2^53, the largest count JSON carries exactly (the contract's largest seq).
pub const MAX_CAP: u64 = crate::core::contract::MAX_SEQ;

/// The query of a read: `?cap=N` (1 to 2^53).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReadQuery {
    /// Answer each count above this value as the value, with `"capped": true` beside it (the "99+" badge).
    #[param(minimum = 1, maximum = 9_007_199_254_740_992_u64)]
    pub cap: Option<u64>,
    /// The instant to count at (RFC 3339, contract v3: unread that expires); default: the server's clock. For
    /// audits and tests.
    #[param(value_type = Option<String>, format = DateTime)]
    pub now: Option<String>,
}

impl ReadQuery {
    /// The UTC day to count at: that of `now`, or of the server's clock ([`crate::clock::now_seconds`]).
    ///
    /// Errors: 400 `invalid_query` when `now` is not an RFC 3339 time.
    pub fn today(&self) -> Result<i64, super::ApiError> {
        let seconds = match &self.now {
            None => crate::clock::now_seconds(),
            Some(text) => crate::core::expiry::seconds_of(text).ok_or_else(|| {
                let message = format!("now must be an RFC 3339 time, not {text:?}");
                super::ApiError::new(axum::http::StatusCode::BAD_REQUEST, "invalid_query", message)
            })?,
        };
        Ok(crate::core::expiry::day_of(seconds))
    }
}

/// The read query, or 400 `invalid_query` (JSON, as every error) when it does not parse or `cap` is outside 1 to
/// [`MAX_CAP`].
pub fn checked(
    query: Result<axum::extract::Query<ReadQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<ReadQuery, super::ApiError> {
    let query = query?.0;
    match query.cap {
        Some(cap) if !(1..=MAX_CAP).contains(&cap) => Err(super::ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "invalid_query",
            format!("cap must be 1 to {MAX_CAP}, not {cap}"),
        )),
        _ => {
            query.today()?;
            Ok(query)
        }
    }
}

/// Caps every count of `answer` (recursively) at `cap`; an object with a capped count gets `"capped": true`.
pub fn apply(answer: &mut Value, cap: u64) {
    match answer {
        Value::Object(fields) => {
            let mut capped = false;
            for (key, value) in fields.iter_mut() {
                match value {
                    Value::Number(n) if is_count(key) && n.as_u64().is_some_and(|n| n > cap) => {
                        *value = cap.into();
                        capped = true;
                    }
                    Value::Object(_) | Value::Array(_) => apply(value, cap),
                    _ => {}
                }
            }
            if capped {
                fields.insert("capped".to_owned(), Value::Bool(true));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| apply(v, cap)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn counts_above_the_cap_are_the_cap_with_a_capped_sibling() {
        let mut v = json!({"user_id": "u", "total_unread": 120, "total_mentions": 3,
            "conversations": {"a": {"unread": 100, "mentions": 2, "muted": false}, "b": {"unread": 5, "mentions": 0, "muted": true}},
            "broadcasts": {"s": {"unread": 99, "dot": true}}});
        super::apply(&mut v, 99);
        assert_eq!(
            v,
            json!({"user_id": "u", "total_unread": 99, "total_mentions": 3, "capped": true,
            "conversations": {"a": {"unread": 99, "mentions": 2, "muted": false, "capped": true}, "b": {"unread": 5, "mentions": 0, "muted": true}},
            "broadcasts": {"s": {"unread": 99, "dot": true}}})
        );
    }
}
