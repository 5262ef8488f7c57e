//! [`SeqSet`]: a set of message sequence numbers, kept as sorted disjoint ranges or, when the ranges are many and
//! close together, as a bitmap.
//!
//! Unread messages of one conversation are one run of consecutive seqs broken by the user's own messages,
//! non-countable lines, recalls and (contract v4) replies, which count in their thread and not in the
//! conversation. Where replies are common the breaks are too: on the v4 Ubuntu IRC set a member's unread seqs
//! average one range per two or three seqs. Sixteen bytes per range then cost far more than one bit per seq, so a
//! set switches between two forms, whichever is smaller ([`SeqSet`]'s doc says when): the same sets took 152 MB
//! as ranges and about 11 MB in the smaller form of each (docs/performance.md).
//!
//! The set keeps its cardinality, so counting is O(1). As ranges, inserting or removing is O(log r + shifted
//! ranges), appending above the maximum (the common case) O(1) amortized; as a bitmap, O(words touched).

use serde::{Deserialize, Serialize};

/// A set of seqs (u64) plus its cached count, serialized as the list of its maximal inclusive ranges `(lo, hi)`,
/// sorted (deserializing checks them and recomputes the count).
///
/// Kept as ranges, or as a bitmap from a multiple of 64 when the ranges outnumber the bitmap's 64-bit words (16
/// bytes per range against 8 per word); back to ranges when the words exceed four times the ranges. The form is
/// invisible: equality, iteration and serialization see the seqs only.
#[derive(Clone, Default, Deserialize)]
#[serde(try_from = "Vec<(u64, u64)>")]
pub struct SeqSet {
    store: Store,
    len: u64,
}

#[derive(Clone)]
enum Store {
    /// Sorted, disjoint, non-adjacent, non-empty inclusive ranges.
    Runs(Vec<(u64, u64)>),
    /// Bit `i` of `words[k]` is seq `base + 64 k + i`; `base` is a multiple of 64; the first and last words are not
    /// zero (an empty set is `Runs`).
    Bits { base: u64, words: Vec<u64> },
}

impl Default for Store {
    fn default() -> Self {
        Store::Runs(Vec::new())
    }
}

/// Fewest ranges kept as a bitmap: below it, ranges are small whatever their spread.
const MIN_BITMAP_RUNS: usize = 4;

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
        let mut set = Self { store: Store::Runs(ranges), len };
        set.settle_runs();
        Ok(set)
    }
}

impl From<SeqSet> for Vec<(u64, u64)> {
    fn from(set: SeqSet) -> Self {
        match set.store {
            Store::Runs(ranges) => ranges,
            Store::Bits { .. } => set.runs().collect(),
        }
    }
}

/// As the list of its maximal ranges, written from either form without a copy.
impl Serialize for SeqSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let runs = match &self.store {
            Store::Runs(ranges) => ranges.len(),
            Store::Bits { words, .. } => count_runs(words),
        };
        let mut seq = serializer.serialize_seq(Some(runs))?;
        for run in self.runs() {
            seq.serialize_element(&run)?;
        }
        seq.end()
    }
}

impl PartialEq for SeqSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.runs().eq(other.runs())
    }
}

impl Eq for SeqSet {}

impl std::fmt::Debug for SeqSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.runs()).finish()
    }
}

/// The mask of bits `from..=to` of a word (`from <= to < 64`).
fn mask(from: u64, to: u64) -> u64 {
    (u64::MAX >> (63 - to)) & (u64::MAX << from)
}

/// The maximal ranges of a bitmap's set bits at or above seq `from`, ascending.
struct BitRuns<'a> {
    base: u64,
    words: &'a [u64],
    /// The next word to look at, and its bits not yet looked at.
    k: usize,
    word: u64,
}

impl<'a> BitRuns<'a> {
    fn new(base: u64, words: &'a [u64], from: u64) -> Self {
        if from <= base {
            return Self { base, words, k: 0, word: words.first().copied().unwrap_or(0) };
        }
        let k = ((from - base) / 64) as usize;
        let word = words.get(k).map_or(0, |w| w & (u64::MAX << ((from - base) % 64)));
        Self { base, words, k, word }
    }

    /// The position (bit index from `base`) of the next set bit, consuming nothing.
    fn next_one(&mut self) -> Option<u64> {
        while self.word == 0 {
            self.k += 1;
            self.word = *self.words.get(self.k)?;
        }
        Some(self.k as u64 * 64 + self.word.trailing_zeros() as u64)
    }
}

impl Iterator for BitRuns<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        let start = self.next_one()?; // a bit index from `base`, in word `self.k`
        let shift = start % 64;
        let ones = (!(self.word >> shift)).trailing_zeros() as u64; // the ones from `start` up, in this word
        let mut end = start + ones; // exclusive
        if shift + ones == 64 {
            let mut k = self.k;
            while let Some(&w) = self.words.get(k + 1) {
                k += 1;
                let ones = (!w).trailing_zeros() as u64;
                end = k as u64 * 64 + ones;
                if ones < 64 {
                    break;
                }
            }
        }
        self.k = (end / 64) as usize;
        self.word = self.words.get(self.k).map_or(0, |w| w & (u64::MAX << (end % 64)));
        Some((self.base + start, self.base + end - 1))
    }
}

/// The maximal ranges of a [`SeqSet`] from some seq on, ascending ([`SeqSet::runs`]).
pub struct Runs<'a>(RunsInner<'a>);

enum RunsInner<'a> {
    Ranges { from: u64, ranges: std::slice::Iter<'a, (u64, u64)> },
    Bits(BitRuns<'a>),
}

impl Iterator for Runs<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        match &mut self.0 {
            RunsInner::Ranges { from, ranges } => ranges.next().map(|&(lo, hi)| (lo.max(*from), hi)),
            RunsInner::Bits(bits) => bits.next(),
        }
    }
}

/// Calls `f(word, mask)` on each word holding bits `from..=to` (bit indexes), with the mask of those bits in it.
fn each_masked(words: &mut [u64], from: u64, to: u64, mut f: impl FnMut(&mut u64, u64)) {
    let (a, b) = ((from / 64) as usize, (to / 64) as usize);
    for (k, word) in words.iter_mut().enumerate().take(b + 1).skip(a) {
        f(word, mask(if k == a { from % 64 } else { 0 }, if k == b { to % 64 } else { 63 }));
    }
}

/// Sets bits `from..=to` (bit indexes); returns how many were clear.
fn set_bits(words: &mut [u64], from: u64, to: u64) -> u64 {
    let mut added = 0;
    each_masked(words, from, to, |word, m| {
        added += (m & !*word).count_ones() as u64;
        *word |= m;
    });
    added
}

/// Clears bits `from..=to` (bit indexes); returns how many were set.
fn clear_bits(words: &mut [u64], from: u64, to: u64) -> u64 {
    let mut removed = 0;
    each_masked(words, from, to, |word, m| {
        removed += (m & *word).count_ones() as u64;
        *word &= !m;
    });
    removed
}

/// How many maximal runs of ones the words hold.
fn count_runs(words: &[u64]) -> usize {
    let mut carry = 0; // the top bit of the previous word
    let mut runs = 0;
    for &w in words {
        runs += (w & !((w << 1) | carry)).count_ones() as usize;
        carry = w >> 63;
    }
    runs
}

/// Adds `lo..=hi` to sorted, disjoint, non-adjacent ranges; returns how many seqs were new.
fn ranges_insert(ranges: &mut Vec<(u64, u64)>, lo: u64, hi: u64) -> u64 {
    // Fast path: strictly above the last range and not adjacent to it, or extending it.
    match ranges.last_mut() {
        None => {
            ranges.push((lo, hi));
            return hi - lo + 1;
        }
        Some(last) if lo > last.1 + 1 => {
            ranges.push((lo, hi));
            return hi - lo + 1;
        }
        Some(last) if lo >= last.0 => {
            let added = hi.saturating_sub(last.1);
            last.1 = last.1.max(hi);
            return added;
        }
        Some(_) => {}
    }
    // General case: ranges[i..j] overlap or touch lo..=hi and merge with it.
    let i = ranges.partition_point(|r| r.1 + 1 < lo);
    let j = ranges.partition_point(|r| r.0 <= hi + 1);
    if i == j {
        ranges.insert(i, (lo, hi));
        return hi - lo + 1;
    }
    let merged = (lo.min(ranges[i].0), hi.max(ranges[j - 1].1));
    let before: u64 = ranges[i..j].iter().map(|r| r.1 - r.0 + 1).sum();
    ranges.splice(i..j, [merged]);
    (merged.1 - merged.0 + 1) - before
}

/// Removes `lo..=hi` from ranges, all of whose seqs must be present (one range holds them).
fn ranges_remove(ranges: &mut Vec<(u64, u64)>, lo: u64, hi: u64) {
    let i = ranges.partition_point(|r| r.1 < lo);
    let (r_lo, r_hi) = ranges[i];
    debug_assert!(r_lo <= lo && hi <= r_hi, "remove of seqs not present");
    match (lo == r_lo, hi == r_hi) {
        (true, true) => {
            ranges.remove(i);
        }
        (true, false) => ranges[i].0 = hi + 1,
        (false, true) => ranges[i].1 = lo - 1,
        (false, false) => {
            ranges[i].1 = lo - 1;
            ranges.insert(i + 1, (hi + 1, r_hi));
        }
    }
}

/// The seqs in two bitmaps `(base, words)`: the AND of the words they share.
fn bits_and((a_base, a): (u64, &[u64]), (b_base, b): (u64, &[u64])) -> SeqSet {
    let from = a_base.max(b_base);
    let to = (a_base + 64 * a.len() as u64).min(b_base + 64 * b.len() as u64); // exclusive
    if from >= to {
        return SeqSet::new();
    }
    let (i, j, n) = (((from - a_base) / 64) as usize, ((from - b_base) / 64) as usize, ((to - from) / 64) as usize);
    SeqSet::of_words(from, a[i..i + n].iter().zip(&b[j..j + n]).map(|(x, y)| x & y).collect())
}

/// The seqs in two range lists: a merge, or, when one has over 8 times the ranges of the other, a binary search
/// of each range of the smaller in the larger.
fn ranges_intersection(a: &[(u64, u64)], b: &[(u64, u64)]) -> SeqSet {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
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

impl SeqSet {
    /// An empty set.
    pub const fn new() -> Self {
        Self { store: Store::Runs(Vec::new()), len: 0 }
    }

    /// How many seqs the set holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the set holds no seq.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The maximal ranges, ascending, as inclusive `(lo, hi)` pairs.
    pub fn runs(&self) -> Runs<'_> {
        self.runs_from(0)
    }

    /// The maximal ranges of the seqs `>= from`, ascending (the first one cut at `from`).
    pub fn runs_from(&self, from: u64) -> Runs<'_> {
        Runs(match &self.store {
            Store::Runs(ranges) => {
                let i = ranges.partition_point(|r| r.1 < from);
                RunsInner::Ranges { from, ranges: ranges[i..].iter() }
            }
            Store::Bits { base, words } => RunsInner::Bits(BitRuns::new(*base, words, from)),
        })
    }

    /// The smallest seq, if any.
    pub fn min(&self) -> Option<u64> {
        match &self.store {
            Store::Runs(ranges) => ranges.first().map(|r| r.0),
            Store::Bits { base, words } => Some(base + words[0].trailing_zeros() as u64),
        }
    }

    /// The largest seq, if any.
    pub fn max(&self) -> Option<u64> {
        match &self.store {
            Store::Runs(ranges) => ranges.last().map(|r| r.1),
            Store::Bits { base, words } => {
                let last = words.len() as u64 - 1;
                Some(base + 64 * last + 63 - words[last as usize].leading_zeros() as u64)
            }
        }
    }

    /// Whether `seq` is in the set.
    pub fn contains(&self, seq: u64) -> bool {
        match &self.store {
            Store::Runs(ranges) => {
                let i = ranges.partition_point(|r| r.1 < seq);
                ranges.get(i).is_some_and(|r| r.0 <= seq)
            }
            Store::Bits { base, words } => {
                seq >= *base
                    && words.get(((seq - base) / 64) as usize).is_some_and(|w| w >> ((seq - base) % 64) & 1 == 1)
            }
        }
    }

    /// Every seq in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs().flat_map(|(lo, hi)| lo..=hi)
    }

    /// Removes every seq.
    pub fn clear(&mut self) {
        match &mut self.store {
            Store::Runs(ranges) => ranges.clear(),
            Store::Bits { .. } => self.store = Store::default(),
        }
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
        let added = match &mut self.store {
            Store::Runs(ranges) => {
                let before = ranges.len();
                let added = ranges_insert(ranges, lo, hi);
                if ranges.len() > before {
                    self.len += added;
                    self.settle_runs();
                    return added;
                }
                added
            }
            Store::Bits { .. } => return self.bits_insert(lo, hi),
        };
        self.len += added;
        added
    }

    /// [`SeqSet::insert_range`] on a bitmap: grows it to cover `lo..=hi`, unless ranges would be the smaller form
    /// then.
    fn bits_insert(&mut self, lo: u64, hi: u64) -> u64 {
        if !self.bits_cover(lo, hi, 1) {
            return self.insert_range(lo, hi);
        }
        let Store::Bits { base, words } = &mut self.store else { unreachable!("a bitmap") };
        let added = set_bits(words, lo - *base, hi - *base);
        self.len += added;
        added
    }

    /// Grows a bitmap to cover `lo..=hi`, to which up to `runs` ranges are about to be added; returns false, and
    /// leaves the set as ranges, when ranges would then be the smaller form (a long run, far from the others).
    fn bits_cover(&mut self, lo: u64, hi: u64, runs: u64) -> bool {
        let Store::Bits { base, words } = &mut self.store else { unreachable!("a bitmap") };
        let last = *base + 64 * words.len() as u64 - 1;
        let new_base = (*base).min(lo & !63);
        let span = (hi.max(last) - new_base) / 64 + 1; // words after the insert
        if span > 2 * words.len() as u64 + 64 && span > 4 * (count_runs(words) as u64 + runs) {
            self.become_ranges();
            return false;
        }
        let capacity = words.capacity();
        if new_base < *base {
            let k = ((*base - new_base) / 64) as usize;
            words.splice(0..0, std::iter::repeat_n(0, k));
            *base = new_base;
        }
        if span as usize > words.len() {
            words.resize(span as usize, 0);
        }
        if words.capacity() != capacity {
            // A bitmap that grew its allocation: back to ranges if its words exceed four times its ranges (a long
            // run appended, say). Counting the ranges takes O(words), once per doubling.
            if words.len() > 4 * (count_runs(words) + runs as usize) {
                self.become_ranges();
                return false;
            }
        }
        true
    }

    /// Removes one seq; returns whether it was present.
    pub fn remove(&mut self, seq: u64) -> bool {
        if !self.contains(seq) {
            return false;
        }
        self.remove_present(seq, seq);
        true
    }

    /// Removes `lo..=hi`, all of whose seqs are present.
    fn remove_present(&mut self, lo: u64, hi: u64) {
        self.len -= hi - lo + 1;
        match &mut self.store {
            Store::Runs(ranges) => {
                let before = ranges.len();
                ranges_remove(ranges, lo, hi);
                if ranges.len() > before {
                    self.settle_runs();
                }
            }
            Store::Bits { base, words } => {
                clear_bits(words, lo - *base, hi - *base);
                self.trim_bits();
            }
        }
    }

    /// Removes every seq `<= cursor`; returns how many were removed.
    pub fn remove_through(&mut self, cursor: u64) -> u64 {
        let removed = match &mut self.store {
            Store::Runs(ranges) => {
                let i = ranges.partition_point(|r| r.1 <= cursor);
                let mut removed: u64 = ranges[..i].iter().map(|r| r.1 - r.0 + 1).sum();
                ranges.drain(..i);
                if let Some(first) = ranges.first_mut().filter(|r| r.0 <= cursor) {
                    removed += cursor + 1 - first.0;
                    first.0 = cursor + 1;
                }
                removed
            }
            Store::Bits { base, words } => {
                if cursor < *base {
                    return 0;
                }
                let through = (cursor - *base).min(64 * words.len() as u64 - 1);
                clear_bits(words, 0, through)
            }
        };
        self.len -= removed;
        self.trim_bits();
        removed
    }

    /// Moves every seq `<= cursor` into `into`, with no set in between; returns how many left `self`.
    pub fn move_through(&mut self, cursor: u64, into: &mut SeqSet) -> u64 {
        for (lo, hi) in self.runs().take_while(|r| r.0 <= cursor) {
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
        match &self.store {
            Store::Runs(_) => {
                for (lo, hi) in self.runs_from(above + 1).take_while(|r| r.0 <= upto) {
                    out.insert_range(lo, hi.min(upto));
                }
            }
            Store::Bits { base, words } => {
                let last = base + 64 * words.len() as u64 - 1;
                let (from, to) = ((above + 1).max(*base), upto.min(last));
                if from > to {
                    return out;
                }
                let (a, b) = (((from - base) / 64) as usize, ((to - base) / 64) as usize);
                let mut cut = words[a..=b].to_vec();
                let cut_base = base + 64 * a as u64;
                let (f, t, end) = (from - cut_base, to - cut_base, 64 * cut.len() as u64 - 1);
                if f > 0 {
                    clear_bits(&mut cut, 0, f - 1);
                }
                if t < end {
                    clear_bits(&mut cut, t + 1, end);
                }
                out = SeqSet::of_words(cut_base, cut);
            }
        }
        out
    }

    /// The set of a bitmap's words from `base` (a multiple of 64), in its settled form.
    fn of_words(base: u64, words: Vec<u64>) -> SeqSet {
        let len = words.iter().map(|w| w.count_ones() as u64).sum();
        let mut set = SeqSet { store: Store::Bits { base, words }, len };
        set.trim_bits();
        set
    }

    /// How many seqs are above `above`, without copying.
    pub fn count_above(&self, above: u64) -> u64 {
        match &self.store {
            Store::Runs(ranges) => {
                let start = ranges.partition_point(|r| r.1 <= above);
                ranges[start..].iter().map(|&(lo, hi)| hi - lo.max(above + 1) + 1).sum()
            }
            Store::Bits { base, words } => {
                let end = 64 * words.len() as u64 - 1;
                match above.checked_sub(*base) {
                    None => self.len,
                    Some(a) if a >= end => 0,
                    Some(a) => {
                        let (k, bit) = ((a / 64) as usize, a % 64);
                        let first = if bit == 63 { 0 } else { words[k] >> (bit + 1) };
                        first.count_ones() as u64 + words[k + 1..].iter().map(|w| w.count_ones() as u64).sum::<u64>()
                    }
                }
            }
        }
    }

    /// The lowest seq above `above` in both `self` and `other`, `None` for none (a merge of the two sets' ranges
    /// from there, stopping at the first overlap).
    pub fn first_in(&self, other: &SeqSet, above: u64) -> Option<u64> {
        let (mut a, mut b) = (self.runs_from(above + 1), other.runs_from(above + 1));
        let (mut x, mut y) = (a.next()?, b.next()?);
        loop {
            let lo = x.0.max(y.0);
            if lo <= x.1.min(y.1) {
                return Some(lo);
            }
            if x.1 < y.1 {
                x = a.next()?;
            } else {
                y = b.next()?;
            }
        }
    }

    /// The lowest seq above `above` in `self` and not in `other`, `None` for none (O(ranges of `self` above it ×
    /// a lookup in `other`)).
    pub fn first_not_in(&self, other: &SeqSet, above: u64) -> Option<u64> {
        self.runs_from(above + 1).find_map(|(lo, hi)| Some(other.next_absent(lo)).filter(|seq| *seq <= hi))
    }

    /// The lowest seq `>= seq` not in the set.
    fn next_absent(&self, seq: u64) -> u64 {
        match &self.store {
            Store::Runs(ranges) => {
                let j = ranges.partition_point(|r| r.1 < seq);
                // Ranges are non-adjacent: past the one covering `seq`, the next seq is in none.
                ranges.get(j).filter(|r| r.0 <= seq).map_or(seq, |r| r.1.saturating_add(1))
            }
            Store::Bits { base, words } => {
                if seq < *base {
                    return seq;
                }
                let (mut k, bit) = (((seq - base) / 64) as usize, (seq - base) % 64);
                let Some(&first) = words.get(k) else { return seq };
                let mut clear = !first & (u64::MAX << bit);
                while clear == 0 {
                    k += 1;
                    match words.get(k) {
                        Some(w) => clear = !w,
                        None => return base + 64 * k as u64,
                    }
                }
                base + 64 * k as u64 + clear.trailing_zeros() as u64
            }
        }
    }

    /// The seqs in both `self` and `other`. Two bitmaps: a word-by-word AND. Two range lists: a merge, O(ranges of
    /// both), except when one holds far fewer ranges than the other (a few new seqs against a long history), where
    /// each of its ranges is looked up in the other by binary search. One of each: the ranges of the one with fewer
    /// pieces (ranges or words) are looked up in the other.
    pub fn intersection(&self, other: &SeqSet) -> SeqSet {
        match (&self.store, &other.store) {
            (Store::Bits { base: a_base, words: a }, Store::Bits { base: b_base, words: b }) => {
                bits_and((*a_base, a), (*b_base, b))
            }
            (Store::Runs(a), Store::Runs(b)) => ranges_intersection(a, b),
            _ => {
                let (few, many) = if self.pieces() <= other.pieces() { (self, other) } else { (other, self) };
                let mut out = SeqSet::new();
                for (lo, hi) in few.runs() {
                    for (a, b) in many.runs_from(lo).take_while(|r| r.0 <= hi) {
                        out.insert_range(a, b.min(hi));
                    }
                }
                out
            }
        }
    }

    /// How many ranges or bitmap words the set holds.
    fn pieces(&self) -> usize {
        match &self.store {
            Store::Runs(ranges) => ranges.len(),
            Store::Bits { words, .. } => words.len(),
        }
    }

    /// Removes every seq of `other`; returns how many were removed.
    pub fn remove_all(&mut self, other: &SeqSet) -> u64 {
        if self.is_empty() || other.is_empty() {
            return 0;
        }
        let common = self.intersection(other);
        for (lo, hi) in common.runs() {
            self.remove_present(lo, hi);
        }
        common.len()
    }

    /// Adds every seq of `other` that is above `above`; returns how many were new.
    ///
    /// Two bitmaps: a word-by-word OR; a bitmap into an empty set: its words, copied.
    pub fn union_above(&mut self, other: &SeqSet, above: u64) -> u64 {
        if let Store::Bits { base: from_base, words: from } = &other.store {
            let (Some((lo, _)), Some(hi)) = (other.runs_from(above + 1).next(), other.max()) else { return 0 };
            if self.is_empty() {
                *self = other.slice(above, hi);
                return self.len;
            }
            if matches!(self.store, Store::Bits { .. }) && self.bits_cover(lo, hi, other.pieces() as u64) {
                let Store::Bits { base, words } = &mut self.store else { unreachable!("a bitmap") };
                let (skip, shift) =
                    (((lo - from_base) / 64) as usize, (from_base + 64 * ((lo - from_base) / 64) - *base) / 64);
                let mut added = 0;
                for (k, &w) in from.iter().enumerate().skip(skip) {
                    let w = if k == skip { w & (u64::MAX << ((lo - from_base) % 64)) } else { w };
                    let target = &mut words[shift as usize + k - skip];
                    added += (w & !*target).count_ones() as u64;
                    *target |= w;
                }
                self.len += added;
                return added;
            }
        }
        other.runs_from(above + 1).map(|(lo, hi)| self.insert_range(lo, hi)).sum()
    }

    /// Ranges that outnumber the words of a bitmap of their span become that bitmap.
    fn settle_runs(&mut self) {
        let Store::Runs(ranges) = &self.store else { return };
        if ranges.len() < MIN_BITMAP_RUNS {
            return;
        }
        let (lo, hi) = (ranges[0].0, ranges[ranges.len() - 1].1);
        let span = hi / 64 - lo / 64 + 1;
        if ranges.len() as u64 <= span {
            return;
        }
        let base = lo & !63;
        let mut words = vec![0u64; span as usize];
        for &(lo, hi) in ranges {
            set_bits(&mut words, lo - base, hi - base);
        }
        self.store = Store::Bits { base, words };
    }

    /// Drops a bitmap's zero words at either end (an empty set becomes ranges), and turns it back into ranges when
    /// its words exceed four times its seqs (so four times its ranges, at least).
    fn trim_bits(&mut self) {
        let Store::Bits { base, words } = &mut self.store else { return };
        if self.len == 0 {
            self.store = Store::default();
            return;
        }
        while words.last() == Some(&0) {
            words.pop();
        }
        let zeros = words.iter().take_while(|w| **w == 0).count();
        if zeros > 0 {
            words.drain(..zeros);
            *base += 64 * zeros as u64;
        }
        if words.len() as u64 > 4 * self.len {
            self.become_ranges();
        }
    }

    /// The same seqs, as ranges.
    fn become_ranges(&mut self) {
        if let Store::Bits { .. } = self.store {
            self.store = Store::Runs(self.runs().collect());
        }
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
                let checked = SeqSet::try_from(set.runs().collect::<Vec<_>>());
                check_invariants(&set);
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

    /// The invariants of either form, and the cached count.
    fn check_invariants(set: &SeqSet) {
        match &set.store {
            Store::Runs(ranges) => {
                for (i, r) in ranges.iter().enumerate() {
                    assert!(r.0 <= r.1 && (i == 0 || ranges[i - 1].1 + 1 < r.0), "ranges {ranges:?}");
                }
            }
            Store::Bits { base, words } => {
                assert_eq!(base % 64, 0);
                assert!(words.first().is_some_and(|w| *w != 0) && words.last().is_some_and(|w| *w != 0), "{words:?}");
            }
        }
        assert_eq!(set.len, set.runs().map(|(lo, hi)| hi - lo + 1).sum::<u64>());
        let runs: Vec<_> = set.runs().collect();
        assert!(runs.windows(2).all(|w| w[0].1 + 1 < w[1].0), "maximal runs {runs:?}");
    }

    /// A set of seqs below 1,000 in bursts: long runs, scattered seqs, or seqs every other one (the form a bitmap
    /// takes), built by inserts so that its form is the one a fold would reach.
    fn spread() -> impl Strategy<Value = BTreeSet<u64>> {
        let burst = prop_oneof![
            (0u64..1000, 1u64..200).prop_map(|(lo, n)| (lo..lo + n).collect::<Vec<_>>()),
            (0u64..1000, 1u64..150).prop_map(|(lo, n)| (lo..lo + 2 * n).step_by(2).collect::<Vec<_>>()),
            proptest::collection::vec(0u64..1000, 0..20),
        ];
        proptest::collection::vec(burst, 0..5).prop_map(|bursts| bursts.into_iter().flatten().collect())
    }

    fn of(model: &BTreeSet<u64>) -> SeqSet {
        model.iter().copied().collect()
    }

    proptest! {
        /// Every operation agrees with a BTreeSet whatever the two sets' forms, over several bitmap words.
        #[test]
        fn both_forms_agree_with_btreesets(a in spread(), b in spread(), x in 0u64..1100, y in 0u64..1100,
                                           lo in 0u64..1100, n in 0u64..300) {
            let (sa, sb) = (of(&a), of(&b));
            check_invariants(&sa);
            check_invariants(&sb);
            prop_assert_eq!(sa.len(), a.len() as u64);
            prop_assert_eq!(sa.iter().collect::<Vec<_>>(), a.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!((sa.min(), sa.max()), (a.first().copied(), a.last().copied()));
            prop_assert_eq!(sa.contains(x), a.contains(&x));
            prop_assert_eq!(sa.count_above(x), a.iter().filter(|s| **s > x).count() as u64);
            let runs_from: Vec<u64> = sa.runs_from(x).flat_map(|(lo, hi)| lo..=hi).collect();
            prop_assert_eq!(runs_from, a.iter().copied().filter(|s| *s >= x).collect::<Vec<_>>());
            let sliced = sa.slice(x, y);
            check_invariants(&sliced);
            prop_assert_eq!(sliced.iter().collect::<Vec<_>>(), a.iter().copied().filter(|s| *s > x && *s <= y).collect::<Vec<_>>());
            prop_assert_eq!(sa.first_in(&sb, x), a.iter().copied().find(|s| *s > x && b.contains(s)));
            prop_assert_eq!(sa.first_not_in(&sb, x), a.iter().copied().find(|s| *s > x && !b.contains(s)));
            let both = sa.intersection(&sb);
            check_invariants(&both);
            prop_assert_eq!(both.iter().collect::<Vec<_>>(), a.intersection(&b).copied().collect::<Vec<_>>());
            prop_assert_eq!(&sb.intersection(&sa), &both);

            let mut removed = sa.clone();
            prop_assert_eq!(removed.remove_all(&sb), both.len());
            check_invariants(&removed);
            prop_assert_eq!(removed.iter().collect::<Vec<_>>(), a.difference(&b).copied().collect::<Vec<_>>());

            let mut united = sa.clone();
            let expect: BTreeSet<u64> = a.iter().copied().chain(b.iter().copied().filter(|s| *s > x)).collect();
            prop_assert_eq!(united.union_above(&sb, x), (expect.len() - a.len()) as u64);
            check_invariants(&united);
            prop_assert_eq!(united.iter().collect::<Vec<_>>(), expect.into_iter().collect::<Vec<_>>());

            let (mut moved, mut into) = (sa.clone(), sb.clone());
            prop_assert_eq!(moved.move_through(x, &mut into), a.iter().filter(|s| **s <= x).count() as u64);
            check_invariants(&moved);
            check_invariants(&into);
            let expect: BTreeSet<u64> = b.iter().copied().chain(a.iter().copied().filter(|s| *s <= x)).collect();
            prop_assert_eq!(into.iter().collect::<Vec<_>>(), expect.into_iter().collect::<Vec<_>>());
            prop_assert_eq!(moved.iter().collect::<Vec<_>>(), a.iter().copied().filter(|s| *s > x).collect::<Vec<_>>());

            let mut grown = sa.clone();
            let new = (lo..lo + n).filter(|s| !a.contains(s)).count() as u64;
            prop_assert_eq!(grown.insert_range(lo, lo + n - 1.min(n)), if n == 0 { u64::from(!a.contains(&lo)) } else { new });
            check_invariants(&grown);
            let had = grown.contains(x);
            prop_assert_eq!(grown.remove(x), had);
            prop_assert!(!grown.contains(x));
            check_invariants(&grown);
            prop_assert_eq!(serde_json::to_string(&sa).unwrap(), serde_json::to_string(&Vec::from(sa.clone())).unwrap());
            prop_assert_eq!(postcard::to_allocvec(&sa).unwrap(), postcard::to_allocvec(&Vec::from(sa.clone())).unwrap());
            let back = SeqSet::try_from(Vec::from(sa.clone()));
            prop_assert_eq!(back.as_ref(), Ok(&sa));
        }
    }

    #[test]
    fn a_fragmented_set_becomes_a_bitmap_and_a_long_run_makes_it_ranges_again() {
        let mut set: SeqSet = (0..200).step_by(2).collect();
        assert!(matches!(set.store, Store::Bits { .. }), "100 ranges over 4 words");
        set.insert_range(300, 1_000_000);
        assert!(matches!(set.store, Store::Runs(_)), "a run of a million seqs is one range");
        assert_eq!(set.len(), 100 + 1_000_000 - 300 + 1);
        set.remove_through(299);
        assert_eq!(set.runs().collect::<Vec<_>>(), [(300, 1_000_000)]);
        let mut sparse: SeqSet = (0..20).map(|i| i * 1_000_000_000).collect();
        sparse.insert(7);
        assert!(matches!(sparse.store, Store::Runs(_)), "ranges far apart stay ranges");
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
