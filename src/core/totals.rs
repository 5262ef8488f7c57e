//! A user's totals over its conversations (`CONTRACT.md` § Semantics, "Per user"), and the rule of what one
//! member conversation adds to them: shared by the fold ([`crate::core::fold`]) and by the read-diffused share
//! ([`crate::core::hybrid`]), so that neither imports the other for it.

use serde::{Deserialize, Serialize};

/// A user's totals (`CONTRACT.md` § Semantics, "Per user").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Sum of `unread` over member, unmuted conversations.
    pub total_unread: u64,
    /// Sum of `mentions` over member conversations, muted ones included.
    pub total_mentions: u64,
    /// Member, unmuted, non-feed conversations with `unread > 0` or marked unread (v3).
    pub unread_conversations: u64,
    /// Conversations the user is a member of, feeds included.
    pub memberships: u64,
    /// Sum of `unread` over member, unmuted feed conversations (`CONTRACT.md` § v2).
    pub feed_unread: u64,
}

impl Totals {
    /// What one conversation the user is a member of adds, with `unread` and `mentions` (`CONTRACT.md`
    /// § Semantics, "Per user"): muted, its unread do not count (its mentions do); a feed's unread count in
    /// `feed_unread` only; it is an unread conversation when it shows unread or is `marked` unread (§ v3; the
    /// caller passes false for a feed, whose mark changes nothing).
    pub fn of_member(unread: u64, mentions: u64, muted: bool, feed: bool, marked: bool) -> Totals {
        let shown = if muted { 0 } else { unread };
        if feed {
            return Totals { feed_unread: shown, memberships: 1, ..Totals::default() };
        }
        Totals {
            total_unread: shown,
            total_mentions: mentions,
            unread_conversations: u64::from(!muted && (shown > 0 || marked)),
            memberships: 1,
            feed_unread: 0,
        }
    }

    /// Replaces, in the totals `view` shows, one member conversation's part `before` with `after` (a share added
    /// at read time, or what expired by then).
    pub fn replace_in(view: &mut crate::core::contract::UserView, before: Totals, after: Totals) {
        let mut totals = Totals {
            total_unread: view.total_unread,
            total_mentions: view.total_mentions,
            unread_conversations: view.unread_conversations,
            memberships: 0,
            feed_unread: view.feed_unread,
        };
        totals.replace(before, after);
        (view.total_unread, view.total_mentions) = (totals.total_unread, totals.total_mentions);
        (view.unread_conversations, view.feed_unread) = (totals.unread_conversations, totals.feed_unread);
    }

    /// Replaces a conversation's part `before` with `after`.
    pub(crate) fn replace(&mut self, before: Totals, after: Totals) {
        self.total_unread = self.total_unread + after.total_unread - before.total_unread;
        self.total_mentions = self.total_mentions + after.total_mentions - before.total_mentions;
        self.unread_conversations =
            self.unread_conversations + after.unread_conversations - before.unread_conversations;
        self.memberships = self.memberships + after.memberships - before.memberships;
        self.feed_unread = self.feed_unread + after.feed_unread - before.feed_unread;
    }
}
