//! The one retry policy of the shell: a transient store failure is retried with backoff, anything else (a
//! fencing, a malformed row) is returned at once.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use super::StateError;
use crate::checkpoint::store::StoreError;
use crate::metrics::Metrics;
use crate::projection::ProjectionError;

/// An error that may go away when the operation is tried again.
pub trait Transient: std::fmt::Display {
    /// Whether retrying may help.
    fn is_transient(&self) -> bool;
}

impl Transient for StoreError {
    fn is_transient(&self) -> bool {
        StoreError::is_transient(self)
    }
}

impl Transient for ProjectionError {
    fn is_transient(&self) -> bool {
        ProjectionError::is_transient(self)
    }
}

impl Transient for StateError {
    fn is_transient(&self) -> bool {
        match self {
            StateError::Store(e) => e.is_transient(),
            StateError::Projection(e) => e.is_transient(),
            StateError::Corrupt { .. } => false,
        }
    }
}

/// Runs `op` until it succeeds or fails for good: a transient failure ([`Transient`]) is logged, counted under
/// `what` and retried after 100 ms, then exponentially longer up to 2 s, with jitter, for at most 60 s of waiting
/// in all; any other failure (a fencing, a malformed row) is returned at once.
///
/// Errors: the last error, once it is not transient or 60 s of waiting passed.
pub async fn retry<T, E, F, Fut>(metrics: &Metrics, what: &'static str, op: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: Transient,
{
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(Duration::from_secs(60)));
    op.retry(backoff)
        .when(|e: &E| e.is_transient())
        .notify(|e: &E, wait: Duration| {
            metrics.error(what);
            tracing::warn!(what, error = %e, retry_in_ms = wait.as_millis() as u64, "failed; retrying");
        })
        .await
}
