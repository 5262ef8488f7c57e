//! Degraded reads: when Redis lacks a user's hash, or is down, the read API answers from the PostgreSQL checkpoint
//! instead of zeros or a 503.
//!
//! - **Missing hash** (Redis answers, the user has no hash: lost, or expired under `--projection-ttl`): the user's
//!   checkpointed state is read, answered with `x-unread-source: checkpoint`, and written back to Redis at its
//!   checkpoint version, marked as a refill (the version guard refuses it wherever the service wrote newer state
//!   meanwhile; the fold writes a refilled user whole rather than patch it). Only a user with state in neither
//!   answers zeros.
//! - **Redis down**: a [`Breaker`] opens after [`FAILURES_TO_OPEN`] failed reads in a row (each bounded by
//!   [`REDIS_TIMEOUT`]); while it is open, reads skip Redis entirely (no per-request timeout) and come from the
//!   checkpoint, marked `x-unread-source: checkpoint` and `"stale": true`. After [`OPEN_FOR`] one read tries Redis
//!   again (half-open): success closes the breaker and answers come from Redis again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::checkpoint::store::CheckpointStore;
use crate::config::Settings;
use crate::core::contract::UserView;
use crate::core::fold::UserState;
use crate::projection::redis::RedisProjection;
use crate::state::user::UserCheckpoint;

/// Longest a Redis read may take before it counts as failed: 250 ms.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(250);
/// Failed Redis reads in a row that open the breaker: 3.
pub const FAILURES_TO_OPEN: u32 = 3;
/// How long the breaker stays open before one read tries Redis again: 2 s.
pub const OPEN_FOR: Duration = Duration::from_secs(2);

/// A circuit breaker around Redis reads.
#[derive(Debug, Default)]
pub struct Breaker {
    failures: AtomicU32,
    open_until: Mutex<Option<Instant>>,
}

impl Breaker {
    /// Whether a read should try Redis: the breaker is closed, or its open time passed (one probe).
    pub fn allows(&self) -> bool {
        let mut open = self.open_until.lock().expect("not poisoned");
        match *open {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                *open = Some(Instant::now() + OPEN_FOR); // one probe per open period
                true
            }
            None => true,
        }
    }

    /// A Redis read succeeded: close.
    pub fn success(&self) {
        self.failures.store(0, Ordering::Relaxed);
        *self.open_until.lock().expect("not poisoned") = None;
    }

    /// A Redis read failed: open after [`FAILURES_TO_OPEN`] in a row.
    pub fn failure(&self) {
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 >= FAILURES_TO_OPEN {
            *self.open_until.lock().expect("not poisoned") = Some(Instant::now() + OPEN_FOR);
        }
    }

    /// Whether the breaker is open now.
    pub fn is_open(&self) -> bool {
        self.open_until.lock().expect("not poisoned").is_some_and(|until| Instant::now() < until)
    }
}

/// The checkpoint side of the read API: one store per namespace served, connected on first use.
pub struct Fallback {
    settings: Settings,
    stores: tokio::sync::Mutex<HashMap<String, CheckpointStore>>,
    /// The breaker around Redis reads.
    pub breaker: Breaker,
}

impl Fallback {
    /// A fallback over the settings' PostgreSQL (no connection yet).
    pub fn new(settings: Settings) -> Self {
        Self { settings, stores: tokio::sync::Mutex::new(HashMap::new()), breaker: Breaker::default() }
    }

    async fn store(&self, namespace: &str) -> anyhow::Result<CheckpointStore> {
        let mut stores = self.stores.lock().await;
        if let Some(s) = stores.get(namespace) {
            return Ok(s.clone());
        }
        let ns = self.settings.in_namespace(namespace)?;
        let store = CheckpointStore::connect(&ns.database_url, &ns.ns_db_schema(), 4).await?;
        stores.insert(namespace.to_owned(), store.clone());
        Ok(store)
    }

    /// The user's checkpointed state ([`crate::state::user`]) with the store it came from; `None` when the
    /// checkpoint has no state for the user.
    async fn checkpointed(
        &self,
        namespace: &str,
        user_id: &str,
    ) -> anyhow::Result<Option<(CheckpointStore, UserCheckpoint)>> {
        let store = self.store(namespace).await?;
        let topics = self.settings.in_namespace(namespace)?.topics();
        let user = crate::state::user::user(&store, &topics, user_id).await?;
        Ok(user.map(|(user, _)| (store, user)))
    }

    /// The user's checkpointed state in `namespace`, or `None` when it has none.
    ///
    /// Errors: PostgreSQL unreachable, or a corrupt row.
    pub async fn state(&self, namespace: &str, user_id: &str) -> anyhow::Result<Option<UserState>> {
        Ok(crate::state::user::user_state(&self.store(namespace).await?, user_id).await?)
    }

    /// The user's counts at UTC day `today` from the checkpoint of `namespace` (broadcast counts from the
    /// checkpointed lists), or `None` when it has no state for the user.
    ///
    /// Errors: PostgreSQL unreachable, or a corrupt row.
    pub async fn read(&self, namespace: &str, user_id: &str, today: i64) -> anyhow::Result<Option<UserView>> {
        Ok(crate::state::user::user_view(&self.store(namespace).await?, user_id, today).await?)
    }

    /// [`Fallback::read`], then writes the user back to Redis at the checkpoint's version, marked as a refill so
    /// that the fold writes the user whole rather than patch it (refused where Redis holds newer state). A failed
    /// refill is only logged: the answer stands.
    ///
    /// Errors: as [`Fallback::read`].
    pub async fn read_and_refill(
        &self,
        namespace: &str,
        user_id: &str,
        projection: &RedisProjection,
        today: i64,
    ) -> anyhow::Result<Option<UserView>> {
        let Some((store, user)) = self.checkpointed(namespace, user_id).await? else { return Ok(None) };
        let view = user.view_from(&store, today).await?;
        let mut write = user.write();
        write.refill = true;
        if let Err(e) = projection.write(&[write]).await {
            tracing::warn!(error = %e, "refilling a user's hash from the checkpoint failed");
        }
        Ok(Some(view))
    }

    /// Refills the expired receipts keys of `conversation_id` (`--projection-ttl`) from the checkpoint of
    /// `namespace` ([`crate::state::user::receipts`]), keeping what was written to them since they expired.
    /// Returns false when another refill came first.
    ///
    /// Errors: PostgreSQL unreachable or a corrupt row; Redis failing.
    pub async fn refill_receipts(
        &self,
        namespace: &str,
        conversation_id: &str,
        projection: &RedisProjection,
    ) -> anyhow::Result<bool> {
        let refill = crate::state::user::receipts(&self.store(namespace).await?, conversation_id).await?;
        Ok(projection.refill_receipts(conversation_id, &refill).await?)
    }

    /// v4: conversation `conversation_id`'s highest `reaction_seq` in the checkpoint of `namespace`, `None` when it
    /// has no state or no reaction.
    ///
    /// Errors: PostgreSQL unreachable, or a corrupt row.
    pub async fn reaction_head(&self, namespace: &str, conversation_id: &str) -> anyhow::Result<Option<u64>> {
        let state = crate::state::load::conversation(&self.store(namespace).await?, conversation_id).await?;
        Ok(state.map(|(_, c)| c.reaction_head).filter(|&head| head > 0))
    }

    /// Refills `users` (who have no hash) from the checkpoint of `namespace`, as [`Fallback::read_and_refill`]
    /// does for one. Returns the users with checkpointed state (written back unless Redis held newer state).
    ///
    /// Errors: PostgreSQL unreachable, or a corrupt row.
    pub async fn refill(
        &self,
        namespace: &str,
        projection: &RedisProjection,
        users: &[String],
        today: i64,
    ) -> anyhow::Result<Vec<String>> {
        let mut refilled = Vec::new();
        for user in users {
            if self.read_and_refill(namespace, user, projection, today).await?.is_some() {
                refilled.push(user.clone());
            }
        }
        Ok(refilled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_opens_after_failures_and_probes_after_its_open_time() {
        let b = Breaker::default();
        assert!(b.allows());
        for _ in 0..FAILURES_TO_OPEN {
            b.failure();
        }
        assert!(b.is_open() && !b.allows(), "open: reads skip Redis");
        *b.open_until.lock().unwrap() = Some(Instant::now()); // the open time passed
        assert!(b.allows(), "one probe");
        assert!(!b.allows(), "only one probe per open period");
        b.success();
        assert!(!b.is_open() && b.allows(), "closed again");
    }
}
