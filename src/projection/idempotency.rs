//! The write gateway's idempotency keys in Redis ([`IdempotencyKeys`]): the first request with a key claims it for
//! the event ids it publishes; a retry with the same key finds those ids and publishes nothing.
//!
//! Key: `{base prefix}idem:{len(user_id)}:{user_id}:{key}` (the user's id length first, so that no user's keys
//! read as another's), value: the JSON array of event ids, kept [`IDEMPOTENCY_TTL`]. Under the base prefix, not a
//! namespace's: a retry after a promote still finds its key.

use std::time::Duration;

use super::redis::RedisProjection;
use super::ProjectionError;

/// How long an idempotency key is remembered: 24 h.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// The idempotency keys under one base prefix.
#[derive(Debug, Clone)]
pub struct IdempotencyKeys {
    prefix: String,
}

impl IdempotencyKeys {
    /// The keys under `prefix` (the base Redis prefix).
    pub fn new(prefix: &str) -> Self {
        Self { prefix: prefix.to_owned() }
    }

    fn key(&self, user_id: &str, key: &str) -> String {
        format!("{}idem:{}:{user_id}:{key}", self.prefix, user_id.len())
    }

    /// Claims `key` of `user_id` for the event ids `ids`: `None` when this is the first request with it (the ids
    /// are kept for [`IDEMPOTENCY_TTL`]), else the ids of the first.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis fails.
    pub async fn claim(
        &self,
        redis: &RedisProjection,
        user_id: &str,
        key: &str,
        ids: &[String],
    ) -> Result<Option<Vec<String>>, ProjectionError> {
        let (mut conn, k) = (redis.connection(), self.key(user_id, key));
        let failed = |doing| move |source| ProjectionError::Redis { doing, source };
        let value = serde_json::to_string(ids).expect("JSON");
        let set: Option<String> = redis::cmd("SET")
            .arg(&k)
            .arg(&value)
            .arg("NX")
            .arg("EX")
            .arg(IDEMPOTENCY_TTL.as_secs())
            .query_async(&mut conn)
            .await
            .map_err(failed("claiming an idempotency key"))?;
        if set.is_some() {
            return Ok(None);
        }
        let first: Option<String> =
            redis::cmd("GET").arg(&k).query_async(&mut conn).await.map_err(failed("reading an idempotency key"))?;
        Ok(Some(first.and_then(|f| serde_json::from_str(&f).ok()).unwrap_or_default()))
    }

    /// Forgets `key` of `user_id` (its publish failed: a retry with it must publish). A failure is ignored: the key
    /// then expires.
    pub async fn forget(&self, redis: &RedisProjection, user_id: &str, key: &str) {
        let _: Result<i64, _> =
            redis::cmd("DEL").arg(self.key(user_id, key)).query_async(&mut redis.connection()).await;
    }
}
