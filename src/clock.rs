//! The service's clock for counts at an instant (contract v3, "Expiry"): reads answer at the server's time unless
//! they name another (`?now=`).
//!
//! Test aid: `UNREAD_CLOCK_OFFSET_SECONDS` (an integer, may be negative) moves this clock, read once per process,
//! so a test can put the service just before a midnight UTC without waiting for one. It changes what reads count
//! at, nothing that is stored. Leave it unset in production.

use std::sync::OnceLock;

/// The environment variable of the test aid: seconds added to the system clock.
pub const OFFSET_VAR: &str = "UNREAD_CLOCK_OFFSET_SECONDS";

/// The test offset, in seconds (0 when unset).
///
/// A process started with an offset that is not an integer exits at its first read with one clear line.
fn offset() -> i64 {
    static OFFSET: OnceLock<i64> = OnceLock::new();
    *OFFSET.get_or_init(|| match std::env::var(OFFSET_VAR) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!("unread: {OFFSET_VAR}={text:?} is not a whole number of seconds");
            std::process::exit(2)
        }),
        Err(_) => 0,
    })
}

/// Seconds since the epoch, now (plus the test offset, if set).
pub fn now_seconds() -> i64 {
    chrono::Utc::now().timestamp() + offset()
}

/// How long until the next midnight UTC of this clock, to the millisecond.
pub fn until_next_midnight() -> std::time::Duration {
    let now_ms = chrono::Utc::now().timestamp_millis() + offset() * 1000;
    let day_ms = crate::core::expiry::DAY_SECONDS * 1000;
    let next_ms = (now_ms.div_euclid(day_ms) + 1) * day_ms;
    std::time::Duration::from_millis(u64::try_from(next_ms - now_ms).unwrap_or(0))
}

/// The push version of the start of UTC day `day` (counts change then with no write): the microseconds of the
/// system clock at that midnight of this clock. Push versions are microseconds of Redis's clock
/// ([`crate::projection::changes_key`]), so a state read before that midnight has a lower version and every write
/// after it a higher one, on every instance (with the same offset).
pub fn day_version(day: i64) -> u64 {
    let seconds = day * crate::core::expiry::DAY_SECONDS - offset();
    u64::try_from(seconds).unwrap_or(0) * 1_000_000
}

/// The UTC day (days since the epoch) of [`now_seconds`].
pub fn today() -> i64 {
    crate::core::expiry::day_of(now_seconds())
}
