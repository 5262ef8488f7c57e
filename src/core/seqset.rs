//! [`SeqSet`]: a set of message sequence numbers stored as sorted, disjoint, inclusive ranges.
//!
//! Unread messages of one conversation are almost always one run of consecutive seqs broken only by the user's own
//! messages, non-countable lines and recalls, so a user with 10,000 unread messages typically holds a handful of
//! ranges. The set keeps its cardinality, so counting is O(1); inserting or removing is O(log r + shifted ranges),
//! with appending above the maximum (the common case) O(1) amortized.

use serde::{Deserialize, Serialize};

/// A set of seqs (u64), as sorted, disjoint, non-adjacent inclusive ranges `(lo, hi)` plus the cached count.
///
/// Serializes as the list of ranges; deserializing checks the invariants and recomputes the count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(u64, u64)>", into = "Vec<(u64, u64)>")]
pub struct SeqSet {
    ranges: Vec<(u64, u64)>,
    len: u64,
}

/// A list of ranges that breaks [`SeqSet`]'s invariants (unsorted, overlapping, adjacent or reversed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ranges are not sorted, disjoint, non-adjacent and non-empty at index {index}")]
pub struct InvalidRanges {
    /// The first offending range.
    pub index: usize,
}

impl TryFrom<Vec<(u64, u64)>> for SeqSet {
    type Error = InvalidRanges;

    fn try_from(ranges: Vec<(u64, u64)>) -> Result<Self, InvalidRanges> {
        let mut len = 0u64;
        for (i, &(lo, hi)) in ranges.iter().enumerate() {
            let after_previous = i == 0 || ranges[i - 1].1.checked_add(1).is_some_and(|next| lo > next);
            if lo > hi || !after_previous {
                return Err(InvalidRanges { index: i });
            }
            len += hi - lo + 1;
        }
        Ok(Self { ranges, len })
    }
}

impl From<SeqSet> for Vec<(u64, u64)> {
    fn from(set: SeqSet) -> Self {
        set.ranges
    }
}

impl SeqSet {
    /// An empty set.
    pub const fn new() -> Self {
        Self { ranges: Vec::new(), len: 0 }
    }

    /// How many seqs the set holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the set holds no seq.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges, sorted, as inclusive `(lo, hi)` pairs.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// The largest seq, if any.
    pub fn max(&self) -> Option<u64> {
        self.ranges.last().map(|r| r.1)
    }

    /// Whether `seq` is in the set.
    pub fn contains(&self, seq: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.1 < seq);
        self.ranges.get(i).is_some_and(|r| r.0 <= seq)
    }

    /// Every seq in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.ranges.iter().flat_map(|&(lo, hi)| lo..=hi)
    }

    /// Removes every seq.
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.len = 0;
    }

    /// Adds one seq; returns whether it was new.
    pub fn insert(&mut self, seq: u64) -> bool {
        self.insert_range(seq, seq) == 1
    }

    /// Adds every seq in `lo..=hi` (nothing if `lo > hi`); returns how many were new.
    pub fn insert_range(&mut self, lo: u64, hi: u64) -> u64 {
        if lo > hi {
            return 0;
        }
        // Fast path: strictly above the last range and not adjacent to it, or extending it.
        match self.ranges.last_mut() {
            None => {
                self.ranges.push((lo, hi));
                self.len += hi - lo + 1;
                return hi - lo + 1;
            }
            Some(last) if lo > last.1 + 1 => {
                self.ranges.push((lo, hi));
                self.len += hi - lo + 1;
                return hi - lo + 1;
            }
            Some(last) if lo >= last.0 => {
                let added = hi.saturating_sub(last.1);
                last.1 = last.1.max(hi);
                self.len += added;
                return added;
            }
            Some(_) => {}
        }
        // General case: ranges[i..j] overlap or touch lo..=hi and merge with it.
        let i = self.ranges.partition_point(|r| r.1 + 1 < lo);
        let j = self.ranges.partition_point(|r| r.0 <= hi + 1);
        if i == j {
            self.ranges.insert(i, (lo, hi));
            self.len += hi - lo + 1;
            return hi - lo + 1;
        }
        let merged = (lo.min(self.ranges[i].0), hi.max(self.ranges[j - 1].1));
        let before: u64 = self.ranges[i..j].iter().map(|r| r.1 - r.0 + 1).sum();
        self.ranges.splice(i..j, [merged]);
        let added = (merged.1 - merged.0 + 1) - before;
        self.len += added;
        added
    }

    /// Removes one seq; returns whether it was present.
    pub fn remove(&mut self, seq: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.1 < seq);
        let Some(&(lo, hi)) = self.ranges.get(i) else { return false };
        if seq < lo {
            return false;
        }
        match (seq == lo, seq == hi) {
            (true, true) => {
                self.ranges.remove(i);
            }
            (true, false) => self.ranges[i].0 = seq + 1,
            (false, true) => self.ranges[i].1 = seq - 1,
            (false, false) => {
                self.ranges[i].1 = seq - 1;
                self.ranges.insert(i + 1, (seq + 1, hi));
            }
        }
        self.len -= 1;
        true
    }

    /// Removes every seq `<= cursor`; returns how many were removed.
    pub fn remove_through(&mut self, cursor: u64) -> u64 {
        let i = self.ranges.partition_point(|r| r.1 <= cursor);
        let mut removed: u64 = self.ranges[..i].iter().map(|r| r.1 - r.0 + 1).sum();
        self.ranges.drain(..i);
        if let Some(first) = self.ranges.first_mut() {
            if first.0 <= cursor {
                removed += cursor + 1 - first.0;
                first.0 = cursor + 1;
            }
        }
        self.len -= removed;
        removed
    }

    /// Moves every seq `<= cursor` into `into`, with no set in between; returns how many left `self`.
    pub fn move_through(&mut self, cursor: u64, into: &mut SeqSet) -> u64 {
        let end = self.ranges.partition_point(|r| r.0 <= cursor);
        for &(lo, hi) in &self.ranges[..end] {
            into.insert_range(lo, hi.min(cursor));
        }
        self.remove_through(cursor)
    }

    /// The seqs of `self` in `above + 1 ..= upto` (an empty set if `above >= upto`).
    pub fn slice(&self, above: u64, upto: u64) -> SeqSet {
        let mut out = SeqSet::new();
        if above >= upto {
            return out;
        }
        let start = self.ranges.partition_point(|r| r.1 <= above);
        for &(lo, hi) in &self.ranges[start..] {
            if lo > upto {
                break;
            }
            out.insert_range(lo.max(above + 1), hi.min(upto));
        }
        out
    }

    /// How many seqs are above `above`, without copying.
    pub fn count_above(&self, above: u64) -> u64 {
        let start = self.ranges.partition_point(|r| r.1 <= above);
        self.ranges[start..].iter().map(|&(lo, hi)| hi - lo.max(above + 1) + 1).sum()
    }

    /// The lowest seq above `above` in both `self` and `other`, `None` for none (a merge of the two range lists
    /// from there, stopping at the first overlap).
    pub fn first_in(&self, other: &SeqSet, above: u64) -> Option<u64> {
        let mut i = self.ranges.partition_point(|r| r.1 <= above);
        let mut j = other.ranges.partition_point(|r| r.1 <= above);
        while let (Some(&(a_lo, a_hi)), Some(&(b_lo, b_hi))) = (self.ranges.get(i), other.ranges.get(j)) {
            let lo = a_lo.max(b_lo).max(above + 1);
            if lo <= a_hi.min(b_hi) {
                return Some(lo);
            }
            if a_hi < b_hi {
                i += 1;
            } else {
                j += 1;
            }
        }
        None
    }

    /// The lowest seq above `above` in `self` and not in `other`, `None` for none (O(ranges of `self` above it ×
    /// log ranges of `other`)).
    pub fn first_not_in(&self, other: &SeqSet, above: u64) -> Option<u64> {
        let start = self.ranges.partition_point(|r| r.1 <= above);
        for &(lo, hi) in &self.ranges[start..] {
            let mut seq = lo.max(above + 1);
            let j = other.ranges.partition_point(|r| r.1 < seq);
            // Ranges are non-adjacent: past the one covering `seq`, the next seq is in none.
            if let Some(&(_, covered_to)) = other.ranges.get(j).filter(|r| r.0 <= seq) {
                seq = covered_to.saturating_add(1);
            }
            if seq <= hi {
                return Some(seq);
            }
        }
        None
    }

    /// The seqs in both `self` and `other`: a merge of the two range lists, O(ranges of both), except when one
    /// holds far fewer ranges than the other (a few new seqs against a long history), where each of its ranges is
    /// looked up in the other by binary search, O(ranges of the smaller × log ranges of the larger).
    pub fn intersection(&self, other: &SeqSet) -> SeqSet {
        let (small, large) = match self.ranges.len() <= other.ranges.len() {
            true => (&self.ranges, &other.ranges),
            false => (&other.ranges, &self.ranges),
        };
        let mut out = SeqSet::new();
        if large.len() <= 8 * small.len() {
            let (mut i, mut j) = (0, 0);
            while let (Some(&(a_lo, a_hi)), Some(&(b_lo, b_hi))) = (small.get(i), large.get(j)) {
                out.insert_range(a_lo.max(b_lo), a_hi.min(b_hi));
                if a_hi < b_hi {
                    i += 1;
                } else {
                    j += 1;
                }
            }
            return out;
        }
        let mut from = 0;
        for &(lo, hi) in small {
            from += large[from..].partition_point(|r| r.1 < lo);
            for &(l_lo, l_hi) in large[from..].iter().take_while(|r| r.0 <= hi) {
                out.insert_range(lo.max(l_lo), hi.min(l_hi));
                if l_hi > hi {
                    break; // it may overlap the next range of `small` too: the search resumes at it
                }
            }
        }
        out
    }

    /// Removes every seq of `other`; returns how many were removed.
    pub fn remove_all(&mut self, other: &SeqSet) -> u64 {
        let common = self.intersection(other);
        for &(lo, hi) in common.ranges() {
            self.remove_range(lo, hi);
        }
        common.len()
    }

    /// Removes every seq in `lo..=hi`, all of which must be present (one range of `self` holds them).
    fn remove_range(&mut self, lo: u64, hi: u64) {
        let i = self.ranges.partition_point(|r| r.1 < lo);
        let (r_lo, r_hi) = self.ranges[i];
        debug_assert!(r_lo <= lo && hi <= r_hi, "remove_range of seqs not present");
        match (lo == r_lo, hi == r_hi) {
            (true, true) => {
                self.ranges.remove(i);
            }
            (true, false) => self.ranges[i].0 = hi + 1,
            (false, true) => self.ranges[i].1 = lo - 1,
            (false, false) => {
                self.ranges[i].1 = lo - 1;
                self.ranges.insert(i + 1, (hi + 1, r_hi));
            }
        }
        self.len -= hi - lo + 1;
    }

    /// Adds every seq of `other` that is above `above`; returns how many were new.
    pub fn union_above(&mut self, other: &SeqSet, above: u64) -> u64 {
        let start = other.ranges.partition_point(|r| r.1 <= above);
        other.ranges[start..].iter().map(|&(lo, hi)| self.insert_range(lo.max(above + 1), hi)).sum()
    }
}

impl FromIterator<u64> for SeqSet {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut set = SeqSet::new();
        for seq in iter {
            set.insert(seq);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64),
        RemoveThrough(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..60, 0u64..8).prop_map(|(lo, n)| Op::Insert(lo, lo + n)),
            (0u64..70).prop_map(Op::Remove),
            (0u64..70).prop_map(Op::RemoveThrough),
        ]
    }

    proptest! {
        /// Every operation agrees with a BTreeSet, and the invariants (sorted, disjoint, non-adjacent, cached len)
        /// hold after each one.
        #[test]
        fn agrees_with_btreeset(ops in proptest::collection::vec(op(), 0..60)) {
            let mut set = SeqSet::new();
            let mut model = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(lo, hi) => {
                        let added = (lo..=hi).filter(|s| model.insert(*s)).count() as u64;
                        prop_assert_eq!(set.insert_range(lo, hi), added);
                    }
                    Op::Remove(s) => prop_assert_eq!(set.remove(s), model.remove(&s)),
                    Op::RemoveThrough(c) => {
                        let before = model.len();
                        model.retain(|s| *s > c);
                        prop_assert_eq!(set.remove_through(c), (before - model.len()) as u64);
                    }
                }
                prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(set.len(), model.len() as u64);
                let checked = SeqSet::try_from(set.ranges().to_vec());
                prop_assert_eq!(checked.as_ref(), Ok(&set));
            }
        }

        #[test]
        fn slice_intersection_and_union_above_agree_with_filters(a in proptest::collection::btree_set(0u64..80, 0..40),
                                                    b in proptest::collection::btree_set(0u64..80, 0..40),
                                                    above in 0u64..80, upto in 0u64..80) {
            let sa: SeqSet = a.iter().copied().collect();
            let sb: SeqSet = b.iter().copied().collect();
            let sliced: Vec<u64> = sa.slice(above, upto).iter().collect();
            prop_assert_eq!(sliced, a.iter().copied().filter(|s| *s > above && *s <= upto).collect::<Vec<_>>());
            let first_in = a.iter().copied().find(|s| *s > above && b.contains(s));
            prop_assert_eq!(sa.first_in(&sb, above), first_in);
            let first_not_in = a.iter().copied().find(|s| *s > above && !b.contains(s));
            prop_assert_eq!(sa.first_not_in(&sb, above), first_not_in);
            let both: Vec<u64> = a.intersection(&b).copied().collect();
            prop_assert_eq!(sa.intersection(&sb).iter().collect::<Vec<_>>(), both.clone());
            prop_assert_eq!(sb.intersection(&sa).iter().collect::<Vec<_>>(), both);
            let mut u = sa.clone();
            let added = u.union_above(&sb, above);
            let expect: BTreeSet<u64> = a.iter().copied().chain(b.iter().copied().filter(|s| *s > above)).collect();
            prop_assert_eq!(added, (expect.len() - a.len()) as u64);
            prop_assert_eq!(u.iter().collect::<Vec<_>>(), expect.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn rejects_broken_ranges_on_deserialize() {
        assert!(SeqSet::try_from(vec![(1, 3), (4, 5)]).is_err(), "adjacent");
        assert!(SeqSet::try_from(vec![(1, 3), (3, 5)]).is_err(), "overlapping");
        assert!(SeqSet::try_from(vec![(5, 6), (1, 2)]).is_err(), "unsorted");
        assert!(SeqSet::try_from(vec![(3, 2)]).is_err(), "reversed");
        assert_eq!(SeqSet::try_from(vec![(1, 3), (5, 5)]).map(|s| s.len()), Ok(4));
    }
}
