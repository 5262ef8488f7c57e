//! A user's sums over its conversations (`CONTRACT.md` § Semantics, "Per user"), and the rule of what one member
//! conversation adds to them: shared by the fold ([`crate::core::fold`]) and by the read-diffused share
//! ([`crate::core::hybrid`]), so that neither imports the other for it.

use serde::{Deserialize, Serialize};

use crate::core::counts::Counts;

/// What a user's member conversations add up to, kept incrementally by the fold: the counts of the table
/// ([`Counts`]) that conversations make (the notification totals stay 0 here: they come from the notification
/// summary), and how many conversations the user is a member of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sums {
    /// The conversations' part of the user's counts.
    pub counts: Counts,
    /// Conversations the user is a member of, feeds included.
    pub memberships: u64,
}

impl Sums {
    /// What one conversation the user is a member of adds, with `unread` and `mentions` (`CONTRACT.md`
    /// § Semantics, "Per user"): muted, its unread do not count (its mentions do); a feed's unread count in
    /// `feed_unread` only; it is an unread conversation when it shows unread or is `marked` unread (§ v3; the
    /// caller passes false for a feed, whose mark changes nothing).
    pub fn of_member(unread: u64, mentions: u64, muted: bool, feed: bool, marked: bool) -> Sums {
        let shown = if muted { 0 } else { unread };
        let counts = match feed {
            true => Counts { feed_unread: shown, ..Counts::default() },
            false => Counts {
                total_unread: shown,
                total_mentions: mentions,
                unread_conversations: u64::from(!muted && (shown > 0 || marked)),
                ..Counts::default()
            },
        };
        Sums { counts, memberships: 1 }
    }

    /// This member conversation's part with its v4 counters (`CONTRACT.md` § v4): `threads` = (followed threads
    /// with unread, the sum of their mentions), of which `unread_threads` leaves a muted conversation's out and
    /// `thread_mentions` keeps them; `reactions`, its messages with new reactions, counts muted or not. A feed's
    /// replies and reactions count nowhere: the caller does not call this for a feed.
    pub fn with_v4(mut self, (threads, thread_mentions): (u64, u64), muted: bool, reactions: u64) -> Sums {
        self.counts.unread_threads = if muted { 0 } else { threads };
        self.counts.thread_mentions = thread_mentions;
        self.counts.total_reactions = reactions;
        self
    }

    /// This member conversation's part with the v4 counters of `other`, its part before a change that left its
    /// threads, reactions, mute and membership as they were (a read ack, a mark): the same as [`Sums::with_v4`]
    /// with what it was given then.
    pub fn with_v4_of(mut self, other: Sums) -> Sums {
        self.counts.unread_threads = other.counts.unread_threads;
        self.counts.thread_mentions = other.counts.thread_mentions;
        self.counts.total_reactions = other.counts.total_reactions;
        self
    }

    /// Replaces, in the totals `view` shows, one member conversation's part `before` with `after` (a share added
    /// at read time, or what expired by then).
    pub fn replace_in(view: &mut crate::core::contract::UserView, before: Sums, after: Sums) {
        let mut counts = Counts::of(view);
        counts.replace(&before.counts, &after.counts);
        counts.set_in(view);
    }

    /// Replaces a conversation's part `before` with `after`.
    pub(crate) fn replace(&mut self, before: Sums, after: Sums) {
        self.counts.replace(&before.counts, &after.counts);
        self.memberships = self.memberships + after.memberships - before.memberships;
    }
}

/// v4: fills `view.teams` from its conversations as the view shows them, each conversation's team given by
/// `team_of` (`CONTRACT.md` § v4, "Teams": per team, the chat totals over its conversations by the rule of
/// [`Sums::of_member`]). The fold's views and the projection's reads both sum them here.
pub fn add_teams<'a>(view: &mut crate::core::contract::UserView, team_of: impl Fn(&str) -> Option<&'a str>) {
    view.teams.clear();
    for (id, c) in &view.conversations {
        let Some(team) = team_of(id) else { continue };
        let sums = Sums::of_member(c.unread, c.mentions, c.muted, false, c.marked_unread).counts;
        let entry = view.teams.entry(team.to_owned()).or_default();
        entry.unread += sums.total_unread;
        entry.mentions += sums.total_mentions;
        entry.unread_conversations += sums.unread_conversations;
    }
}
