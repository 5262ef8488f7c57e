//! Unread that expires (`CONTRACT.md` § v3, "Expiry"), as whole UTC days.
//!
//! A message whose `occurred_at` falls on UTC day D of a conversation with `unread_ttl_days` N expires at 00:00:00
//! UTC of day D + N. Every expiry instant is therefore a midnight, and "expired at instant T" is "D + N <= the UTC
//! day of T". Days are counted from the Unix epoch (1970-01-01 is day 0; earlier days are negative), so the state
//! keeps one small integer per group of messages (a per-day bucket, [`crate::core::fold::ConvState::expiry`]) and
//! a read at any instant compares integers: no state changes at midnight, and nothing is rewritten.

use std::cell::RefCell;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::core::seqset::SeqSet;

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

/// A user's expiry buckets in one conversation or thread: per UTC day, the seqs that stop counting at it, ascending
/// by day, no two buckets of one day.
///
/// Held in one sorted `Vec`: a conversation with a ttl holds one bucket per day of messages still unread, most often
/// one (16,503 of the 18,309 conversations with buckets at the end of the v4 full set), where a `BTreeMap` took a
/// node of eleven entries (about 530 bytes) for it. Messages come in day order, so a new bucket is most often the
/// last and costs no move; one added before others moves those after it (48 bytes each). Serialized as a map of day
/// to seqs, as that `BTreeMap` was.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Buckets(Vec<(i64, SeqSet)>);

impl Buckets {
    /// Whether there is no bucket.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The buckets, ascending by day: (day, seqs).
    pub fn iter(&self) -> impl Iterator<Item = (&i64, &SeqSet)> {
        self.into_iter()
    }

    /// The buckets expired at UTC day `today` (day at or before it; [`is_expired`]), ascending by day.
    pub fn expired_at(&self, today: i64) -> impl Iterator<Item = (&i64, &SeqSet)> {
        self.iter().take_while(move |(day, _)| is_expired(**day, today))
    }

    /// The buckets' seqs, ascending by day.
    pub fn values(&self) -> impl Iterator<Item = &SeqSet> {
        self.0.iter().map(|(_, seqs)| seqs)
    }

    /// The buckets' seqs, to change in place ([`Buckets::drop_empty`] after emptying some).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut SeqSet> {
        self.0.iter_mut().map(|(_, seqs)| seqs)
    }

    /// The bucket of `day`, added empty where it belongs when there is none.
    pub fn bucket(&mut self, day: i64) -> &mut SeqSet {
        let at = match self.0.binary_search_by_key(&day, |(d, _)| *d) {
            Ok(at) => at,
            Err(at) => {
                self.0.insert(at, (day, SeqSet::new()));
                at
            }
        };
        &mut self.0[at].1
    }

    /// Forgets the empty buckets.
    pub fn drop_empty(&mut self) {
        self.0.retain(|(_, seqs)| !seqs.is_empty());
    }

    /// Forgets every bucket.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// From (day, seqs) pairs in any order; of two buckets of one day the later is kept, as a `BTreeMap` keeps it.
impl FromIterator<(i64, SeqSet)> for Buckets {
    fn from_iter<I: IntoIterator<Item = (i64, SeqSet)>>(buckets: I) -> Self {
        let mut v: Vec<(i64, SeqSet)> = buckets.into_iter().collect();
        // Stable: of one day's buckets, the later stays last. `dedup_by` keeps the first of a run of equal days, which
        // takes the later one's seqs.
        v.sort_by_key(|(day, _)| *day);
        v.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(&mut later.1, &mut kept.1);
            }
            same
        });
        Buckets(v)
    }
}

impl<'a> IntoIterator for &'a Buckets {
    type Item = (&'a i64, &'a SeqSet);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (i64, SeqSet)>, fn(&'a (i64, SeqSet)) -> (&'a i64, &'a SeqSet)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(day, seqs)| (day, seqs))
    }
}

impl std::fmt::Debug for Buckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Buckets {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Buckets {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<i64, SeqSet>::deserialize(deserializer)?;
        Ok(map.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_stay_sorted_by_day_and_serialize_as_the_map_they_replace() {
        let mut b = Buckets::default();
        for (day, seq) in [(20, 5), (10, 1), (30, 9), (10, 2)] {
            b.bucket(day).insert(seq);
        }
        b.bucket(25);
        assert_eq!(b.iter().map(|(d, s)| (*d, s.len())).collect::<Vec<_>>(), [(10, 2), (20, 1), (25, 0), (30, 1)]);
        b.drop_empty();
        assert_eq!(b.expired_at(20).map(|(d, _)| *d).collect::<Vec<_>>(), [10, 20]);
        assert_eq!(b.expired_at(9).count(), 0);
        assert_eq!(b.expired_at(NEVER).count(), 0);
        let map: std::collections::BTreeMap<i64, SeqSet> = b.iter().map(|(d, s)| (*d, s.clone())).collect();
        let bytes = postcard::to_allocvec(&b).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&map).unwrap());
        assert_eq!(postcard::from_bytes::<Buckets>(&bytes).unwrap(), b);
        assert_eq!(serde_json::to_string(&b).unwrap(), serde_json::to_string(&map).unwrap());
        // Collected like a BTreeMap: sorted, the later of one day's buckets kept.
        let one = |seq| SeqSet::from_iter([seq]);
        let collected: Buckets = [(3, one(1)), (1, one(2)), (3, one(7))].into_iter().collect();
        assert_eq!(collected.iter().map(|(d, s)| (*d, s.min())).collect::<Vec<_>>(), [(1, Some(2)), (3, Some(7))]);
    }

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
