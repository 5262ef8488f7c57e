//! The version a user's hash carries (`_version`): which fold task wrote it and how far that task had read.

use std::fmt;
use std::str::FromStr;

/// The lease generation of the fold task that wrote a user's state and the position that state reflects: the next
/// offsets of the task's `user-events` and `user-deltas` partitions. Stored as `"{generation} {user_events}
/// {user_deltas}"` ([`fmt::Display`], [`FromStr`]); the write script compares it in Lua
/// ([`super::redis::WRITE_TEMPLATE`]) and [`ProjectionVersion::is_newer_than`] in Rust, by the same rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProjectionVersion {
    /// The writing task's lease generation (`partition_leases.generation`).
    pub generation: i64,
    /// The next offset of its `user-events` partition.
    pub user_events: i64,
    /// The next offset of its `user-deltas` partition.
    pub user_deltas: i64,
}

impl ProjectionVersion {
    /// Whether this version is strictly newer than `other`: a newer generation, or the same generation at a
    /// position that dominates (at least as far in both offsets, and not equal). Two positions neither of which
    /// dominates the other are not newer either way.
    pub fn is_newer_than(&self, other: &ProjectionVersion) -> bool {
        let (a, b) = (self, other);
        a.generation > b.generation
            || (a.generation == b.generation
                && a.user_events >= b.user_events
                && a.user_deltas >= b.user_deltas
                && (a.user_events, a.user_deltas) != (b.user_events, b.user_deltas))
    }
}

impl fmt::Display for ProjectionVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.generation, self.user_events, self.user_deltas)
    }
}

/// A `_version` value that is not three non-negative numbers separated by single spaces.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed projection version {0:?}")]
pub struct BadVersion(pub String);

impl FromStr for ProjectionVersion {
    type Err = BadVersion;

    fn from_str(s: &str) -> Result<Self, BadVersion> {
        match super::numbers::<i64>(s) {
            Some([generation, user_events, user_deltas]) if generation.min(user_events).min(user_deltas) >= 0 => {
                Ok(Self { generation, user_events, user_deltas })
            }
            _ => Err(BadVersion(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> ProjectionVersion {
        s.parse().unwrap()
    }

    #[test]
    fn newer_means_a_newer_generation_or_a_dominating_position() {
        assert!(v("2 0 0").is_newer_than(&v("1 9 9")));
        assert!(v("1 10 9").is_newer_than(&v("1 9 9")));
        assert!(!v("1 9 9").is_newer_than(&v("1 9 9")), "equal is not newer");
        assert!(!v("1 10 8").is_newer_than(&v("1 9 9")), "incomparable is not newer");
        assert_eq!(v("3 4 5").to_string(), "3 4 5");
        for bad in ["garbage", "1 2", "1 2 3 4", "-1 0 0", ""] {
            assert!(bad.parse::<ProjectionVersion>().is_err(), "{bad}");
        }
    }
}
