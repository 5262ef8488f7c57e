//! Unread that expires (`CONTRACT.md` § v3, "Expiry"), as whole UTC days.
//!
//! A message whose `occurred_at` falls on UTC day D of a conversation with `unread_ttl_days` N expires at 00:00:00
//! UTC of day D + N. Every expiry instant is therefore a midnight, and "expired at instant T" is "D + N <= the UTC
//! day of T". Days are counted from the Unix epoch (1970-01-01 is day 0; earlier days are negative), so the state
//! keeps one small integer per group of messages (a per-day bucket, [`crate::core::fold::ConvState::expiry`]) and
//! a read at any instant compares integers: no state changes at midnight, and nothing is rewritten.

use std::cell::RefCell;

/// Seconds in a UTC day (no leap seconds, as in RFC 3339 and Unix time).
pub const DAY_SECONDS: i64 = 86_400;

/// The UTC day of an instant given in seconds since the epoch (negative before 1970).
pub fn day_of(seconds: i64) -> i64 {
    seconds.div_euclid(DAY_SECONDS)
}

/// Seconds since the epoch of an RFC 3339 time, `None` if it does not parse (the decoder has refused those).
///
/// Remembers the last text parsed on this thread and its answer: events come in runs of one `occurred_at` (the full
/// v3 set's 1,172,702 events hold 43,910 runs), and the fold and the fan-out each ask for every event's.
pub fn seconds_of(rfc3339: &str) -> Option<i64> {
    thread_local!(static LAST: RefCell<(String, Option<i64>)> = const { RefCell::new((String::new(), None)) });
    LAST.with_borrow_mut(|(text, seconds)| {
        if text != rfc3339 {
            *seconds = chrono::DateTime::parse_from_rfc3339(rfc3339).ok().map(|t| t.timestamp());
            text.clear();
            text.push_str(rfc3339);
        }
        *seconds
    })
}

/// The day a message sent at `occurred_at` stops counting in a conversation with `ttl_days`: its UTC day plus
/// `ttl_days`. `None` when `occurred_at` does not parse.
pub fn expiry_day(occurred_at: &str, ttl_days: u64) -> Option<i64> {
    // ttl_days is at most 3,650 (the decoder's bound), so the cast cannot wrap.
    seconds_of(occurred_at).map(|s| day_of(s) + ttl_days as i64)
}

/// Whether a message expiring on `expiry_day` has expired at UTC day `today`.
pub fn is_expired(expiry_day: i64, today: i64) -> bool {
    expiry_day <= today
}

/// The day before any expiry: reading at it shows the counts with nothing expired.
pub const NEVER: i64 = i64::MIN;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_expires_at_the_midnight_ttl_days_after_its_day() {
        let day = expiry_day("2009-03-01T23:59:59Z", 3).unwrap();
        let at = |t: &str| day_of(seconds_of(t).unwrap());
        assert!(!is_expired(day, at("2009-03-03T23:59:59Z")));
        assert!(is_expired(day, at("2009-03-04T00:00:00Z")));
        assert!(is_expired(day, at("2009-03-04T00:00:01Z")));
        // An offset moves the instant, not the rule: 01:00+02:00 is 23:00 UTC the day before.
        assert_eq!(expiry_day("2009-03-02T01:00:00+02:00", 1), expiry_day("2009-03-01T12:00:00Z", 1));
        assert_eq!(day_of(-1), -1);
    }
}
