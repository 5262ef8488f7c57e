//! The API's limits: request body and header sizes, slow clients, and a rate limit per token.
//!
//! | limit | flag (env) | default | answer |
//! |---|---|---|---|
//! | request body | `--max-body-bytes` (`UNREAD_MAX_BODY_BYTES`) | 1 MiB (a batch of 1,000 longest ids fits) | 413 `too_large` |
//! | request line and headers | `--max-header-bytes` (`UNREAD_MAX_HEADER_BYTES`) | 16 KiB | 431 `headers_too_large` |
//! | reading the request head | `--header-read-timeout` (`UNREAD_HEADER_READ_TIMEOUT`) | 10 s | the connection is closed |
//! | a whole request, body included | `--request-timeout` (`UNREAD_REQUEST_TIMEOUT`) | 30 s | 408 `timeout` |
//! | requests per user token | `--rate-limit` (`UNREAD_RATE_LIMIT`) | 50/s, bursts of 100 | 429 `rate_limited` + `retry-after` |
//! | requests per service token | `--service-rate-limit` (`UNREAD_SERVICE_RATE_LIMIT`) | unlimited (0) | 429 `rate_limited` + `retry-after` |
//!
//! A rate limit keys on the token's `sub` and kind ([`Access`]): every token of one user shares one budget, so
//! minting more tokens does not raise it. Its burst is two seconds' worth. `0` turns a rate limit off; with
//! `--insecure-no-auth` there is no token to key on and no rate limit.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::auth::Access;
use crate::config::parse_duration;

/// The limits' settings (`unread run`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "API limits")]
pub struct LimitOptions {
    /// Largest request body, bytes.
    #[arg(long, env = "UNREAD_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Largest request line plus headers, bytes.
    #[arg(long, env = "UNREAD_MAX_HEADER_BYTES", default_value_t = 16 << 10)]
    pub max_header_bytes: usize,
    /// Longest a client may take to send a request's line and headers, e.g. `10s`.
    #[arg(long, env = "UNREAD_HEADER_READ_TIMEOUT", value_parser = parse_duration, default_value = "10s")]
    pub header_read_timeout: Duration,
    /// Longest a request may take, reading its body included, e.g. `30s` (a stream's lifetime is not limited).
    #[arg(long, env = "UNREAD_REQUEST_TIMEOUT", value_parser = parse_duration, default_value = "30s")]
    pub request_timeout: Duration,
    /// Requests per second one user's tokens may make (bursts of twice as many); 0: unlimited.
    #[arg(long, env = "UNREAD_RATE_LIMIT", default_value_t = 50)]
    pub rate_limit: u32,
    /// Requests per second one service token's `sub` may make (bursts of twice as many); 0: unlimited.
    #[arg(long, env = "UNREAD_SERVICE_RATE_LIMIT", default_value_t = 0)]
    pub service_rate_limit: u32,
}

/// Checks between two sweeps of keys that have not been seen for a burst's time.
const SWEEP_EVERY: u64 = 10_000;

/// Per-token rate limits (GCRA, `governor`), one for user tokens and one for service tokens.
pub struct RateLimits {
    user: Option<DefaultKeyedRateLimiter<Access>>,
    service: Option<DefaultKeyedRateLimiter<Access>>,
    checks: AtomicU64,
}

fn limiter(per_second: u32) -> Option<DefaultKeyedRateLimiter<Access>> {
    let rate = NonZeroU32::new(per_second)?;
    let burst = rate.saturating_mul(NonZeroU32::new(2).expect("2 is not 0"));
    Some(DefaultKeyedRateLimiter::hashmap(Quota::per_second(rate).allow_burst(burst)))
}

impl RateLimits {
    /// The limits of `options` (a limiter only for a non-zero rate).
    pub fn new(options: &LimitOptions) -> Self {
        Self { user: limiter(options.rate_limit), service: limiter(options.service_rate_limit), checks: 0.into() }
    }

    /// Counts one request of `access`: `Ok`, or `Err(wait)` when over the limit, `wait` being when the next
    /// request would pass. An empty service `sub` (`--insecure-no-auth`) is never limited.
    pub fn check(&self, access: &Access) -> Result<(), Duration> {
        let limiter = match access {
            Access::User(_) => &self.user,
            Access::Service(sub) if sub.is_empty() => &None,
            Access::Service(_) => &self.service,
        };
        let Some(limiter) = limiter else { return Ok(()) };
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        limiter.check_key(access).map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

/// The size of a request's line and headers, bytes, as sent (names, values, separators).
pub fn head_bytes(req: &axum::extract::Request) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    line + req.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_gets_a_burst_then_waits_and_users_do_not_share_budgets() {
        let options = LimitOptions {
            max_body_bytes: 1 << 20,
            max_header_bytes: 16 << 10,
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            rate_limit: 5,
            service_rate_limit: 0,
        };
        let limits = RateLimits::new(&options);
        let alice = Access::User("alice".into());
        assert!((0..10).all(|_| limits.check(&alice).is_ok()), "a burst of twice the rate passes");
        let wait = limits.check(&alice).expect_err("the 11th request in a burst is limited");
        assert!(wait > Duration::ZERO && wait <= Duration::from_millis(200), "{wait:?}");
        assert!(limits.check(&Access::User("bob".into())).is_ok(), "bob has his own budget");
        assert!(limits.check(&Access::Service("backend".into())).is_ok(), "service tokens: unlimited by default");
        assert!((0..100).all(|_| limits.check(&Access::Service(String::new())).is_ok()));
    }
}
