//! The service's clock for counts at an instant (contract v3, "Expiry"): reads answer at the server's time unless
//! they name another (`?now=`).
//!
//! Test aid: `UNREAD_CLOCK_OFFSET_SECONDS` (an integer, may be negative) moves this clock, read once per process,
//! so a test can put the service just before a midnight UTC without waiting for one. It changes what reads count
//! at, nothing that is stored. Leave it unset in production.

use std::sync::OnceLock;

/// The environment variable of the test aid: seconds added to the system clock.
pub const OFFSET_VAR: &str = "UNREAD_CLOCK_OFFSET_SECONDS";

/// Seconds since the epoch, now (plus the test offset, if set).
///
/// A process started with an offset that is not an integer exits at its first read with one clear line.
pub fn now_seconds() -> i64 {
    static OFFSET: OnceLock<i64> = OnceLock::new();
    let offset = *OFFSET.get_or_init(|| match std::env::var(OFFSET_VAR) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!("unread: {OFFSET_VAR}={text:?} is not a whole number of seconds");
            std::process::exit(2)
        }),
        Err(_) => 0,
    });
    chrono::Utc::now().timestamp() + offset
}

/// The UTC day (days since the epoch) of [`now_seconds`].
pub fn today() -> i64 {
    crate::core::expiry::day_of(now_seconds())
}
