//! The one table of a user's counts ([`Counts`]): every total of the reader shape (`CONTRACT.md` § "The state a
//! reader sees"), declared once, row by row. Everything that holds, sends, stores or checks the totals goes
//! through this table: the fold's sums ([`crate::core::totals::Sums`]), the reader shape's fields
//! ([`Counts::of`], [`Counts::set_in`], which the compiler holds to [`UserView`]'s field names), the push stream's
//! changes, the Redis `_totals` value ([`Counts::encode`], [`Counts::decode`], with its format version), `unread
//! verify`'s comparison and the API's display caps ([`Counts::NAMES`]).
//!
//! Adding a counter: one row below (its doc, and the Redis format that first holds it: [`Counts::FORMAT`] + 1),
//! the field of the same name in [`UserView`] (where the contract places it), and its rule: in
//! [`crate::core::totals::Sums::of_member`] for what a member conversation adds, or where the view is built
//! (`docs/architecture.md`, "Add a counter").

use serde::{Deserialize, Serialize};

use crate::core::contract::UserView;

/// Declares [`Counts`] from its rows: `doc, name, since` (the Redis totals format that first holds it).
macro_rules! counts {
    ($( $(#[doc = $doc:literal])* $name:ident since $since:literal; )*) => {
        /// A user's totals, one field per row of the table (`CONTRACT.md` § "The state a reader sees"). Serializes
        /// as an object in the table's order: the push stream's `totals`.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
        pub struct Counts {
            $( $(#[doc = $doc])* pub $name: u64, )*
        }

        impl Counts {
            /// Every counter's name, in the table's order: its field in the reader shape.
            pub const NAMES: [&'static str; LEN] = [$(stringify!($name)),*];
            /// The Redis totals format that first holds each counter ([`Counts::encode`]).
            const SINCE: [u8; LEN] = [$($since),*];

            /// The values, in the table's order.
            pub fn values(&self) -> [u64; LEN] {
                [$(self.$name),*]
            }

            /// The counts from values in the table's order; counters past the end of `values` are 0.
            ///
            /// Errors (`None`): more values than counters.
            pub fn from_values(values: &[u64]) -> Option<Self> {
                if values.len() > LEN {
                    return None;
                }
                let mut it = values.iter().copied();
                Some(Self { $($name: it.next().unwrap_or(0)),* })
            }

            /// The totals of a reader shape.
            pub fn of(view: &UserView) -> Self {
                Self { $($name: view.$name),* }
            }

            /// Writes these totals into a reader shape.
            pub fn set_in(&self, view: &mut UserView) {
                $(view.$name = self.$name;)*
            }

            /// Replaces a part `before` of these totals with `after` (each counter: `+ after - before`).
            pub fn replace(&mut self, before: &Self, after: &Self) {
                $(self.$name = self.$name + after.$name - before.$name;)*
            }
        }

        /// How many counters the table has.
        const LEN: usize = [$(stringify!($name)),*].len();
    };
}

counts! {
    /// Sum of `unread` over member, unmuted, non-feed conversations.
    total_unread since 1;
    /// Sum of `mentions` over member non-feed conversations, muted ones included.
    total_mentions since 1;
    /// Member, unmuted, non-feed conversations with `unread > 0` or marked unread (v3).
    unread_conversations since 1;
    /// Sum of `unread` over member, unmuted feed conversations: the feed's "N new posts" (v2).
    feed_unread since 2;
    /// Sum of `unread` over the notification categories (v2).
    total_notifications_unread since 2;
    /// Sum of `unseen` over the notification categories (v2).
    total_notifications_unseen since 2;
    /// Followed threads with unread replies in member, unmuted, non-feed conversations (v4).
    unread_threads since 3;
    /// Sum of `mentions` over the followed threads of member non-feed conversations, muted ones included (v4).
    thread_mentions since 3;
    /// Messages of the user, in member non-feed conversations, with a new reaction by someone else (v4).
    total_reactions since 3;
}

impl Counts {
    /// The Redis totals format written now: the largest `since` of the table.
    pub const FORMAT: u8 = {
        let (mut i, mut max) = (0, 0);
        while i < LEN {
            if Self::SINCE[i] > max {
                max = Self::SINCE[i];
            }
            i += 1;
        }
        max
    };

    /// The Redis `_totals` value: `v{FORMAT}` and the values in the table's order, space-separated
    /// (`"v3 3 1 1 0 0 0 0 0 0"`).
    pub fn encode(&self) -> String {
        let mut out = format!("v{}", Self::FORMAT);
        for v in self.values() {
            out.push(' ');
            out.push_str(&v.to_string());
        }
        out
    }

    /// Decodes a `_totals` value: `v{k}` then exactly the counters of format k (those with `since ≤ k`, which come
    /// first in the table), or, as builds before the version wrote it, three numbers (format 1) or six (format 2).
    /// Counters the value's format does not hold are 0.
    ///
    /// Errors (`None`): not numbers, a format this build does not know, or another number of values.
    pub fn decode(value: &str) -> Option<Self> {
        let (format, numbers) = match value.strip_prefix('v') {
            Some(rest) => {
                let (format, numbers) = rest.split_once(' ').unwrap_or((rest, ""));
                (Some(format.parse::<u8>().ok()?), numbers)
            }
            None => (None, value),
        };
        let values: Vec<u64> =
            numbers.split(' ').filter(|n| !n.is_empty()).map(|n| n.parse().ok()).collect::<Option<_>>()?;
        let format = match format {
            Some(f) => f,
            None => (1..=Self::FORMAT).find(|&f| Self::held_by(f) == values.len())?,
        };
        ((1..=Self::FORMAT).contains(&format) && values.len() == Self::held_by(format)).then_some(())?;
        Self::from_values(&values)
    }

    /// How many counters format `format` holds.
    fn held_by(format: u8) -> usize {
        Self::SINCE.iter().filter(|&&since| since <= format).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_total_of_the_reader_shape_in_its_order() {
        let view = serde_json::to_value(UserView::default()).unwrap();
        let totals: Vec<&str> =
            view.as_object().unwrap().keys().map(String::as_str).filter(|k| Counts::NAMES.contains(k)).collect();
        assert_eq!(totals.len(), Counts::NAMES.len());
        // Each counter is a number of the reader shape, and a later format only appends counters.
        for (name, since) in Counts::NAMES.iter().zip(Counts::SINCE) {
            assert!(view[name].is_u64(), "{name}");
            assert!((1..=Counts::FORMAT).contains(&since));
        }
        assert!(Counts::SINCE.windows(2).all(|w| w[0] <= w[1]), "rows are in the order of their formats");
    }

    #[test]
    fn the_redis_value_round_trips_and_reads_every_earlier_format() {
        let c = Counts::from_values(&[3, 1, 1, 7, 4, 2]).unwrap();
        assert_eq!(c.encode(), "v3 3 1 1 7 4 2 0 0 0");
        assert_eq!(Counts::decode(&c.encode()), Some(c));
        assert_eq!(Counts::decode("v2 3 1 1 7 4 2"), Some(c), "a value of the format before v4's counters");
        let v4 = Counts::from_values(&[3, 1, 1, 7, 4, 2, 5, 6, 8]).unwrap();
        assert_eq!(Counts::decode(&v4.encode()), Some(v4));
        assert_eq!((v4.unread_threads, v4.thread_mentions, v4.total_reactions), (5, 6, 8));
        // Builds before the version: six numbers, and a v1 build's three.
        assert_eq!(Counts::decode("3 1 1 7 4 2"), Some(c));
        assert_eq!(Counts::decode("1 2 3"), Counts::from_values(&[1, 2, 3]));
        assert_eq!(Counts::decode("v1 1 2 3"), Counts::from_values(&[1, 2, 3]));
        for bad in [
            "",
            "1 2",
            "1 2 3 4",
            "v2 1 2 3",
            "v3 1 2 3 4 5 6",
            "v9 1 2 3 4 5 6",
            "v0",
            "x y z",
            "v2 1 2 3 4 5 -6",
            "v 1 2 3",
        ] {
            assert_eq!(Counts::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_view_is_read_and_written_field_by_field() {
        let mut view =
            UserView { total_unread: 5, feed_unread: 2, total_notifications_unseen: 1, ..UserView::default() };
        let c = Counts::of(&view);
        assert_eq!(c.values(), [5, 0, 0, 2, 0, 1, 0, 0, 0]);
        let mut more = c;
        more.replace(&Counts::default(), &Counts { total_mentions: 4, ..Counts::default() });
        more.set_in(&mut view);
        assert_eq!((view.total_unread, view.total_mentions, view.feed_unread), (5, 4, 2));
    }
}
