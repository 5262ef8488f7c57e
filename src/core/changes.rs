//! What changed between two states of one user, as the push stream sends it (`docs/api.md` § Stream): new values,
//! never increments, so a message applied twice, or an old one applied late and then the newer one again, leaves
//! the client with the right counts.
//!
//! Pure: [`changes`] compares two reader shapes ([`UserView`]) and says which conversations, broadcast lists,
//! notification categories and totals differ, with their new values (`null` for one that left the state).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::contract::{BroadcastView, ConversationView, NotificationView, TeamView, ThreadView, UserView};
use super::counts::Counts;

/// The parts of a user's state that changed, with their new values; `None` in a map: that entry left the state
/// (a conversation left, a list or a category gone).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Changes {
    /// Every total of the table ([`Counts`]), when any of them changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub totals: Option<Counts>,
    /// Conversations whose counts or mute changed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub conversations: BTreeMap<String, Option<ConversationView>>,
    /// Broadcast lists whose counts changed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub broadcasts: BTreeMap<String, Option<BroadcastView>>,
    /// Notification categories whose counts changed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub notifications: BTreeMap<String, Option<NotificationView>>,
    /// v4: conversations whose followed threads with unread changed: all of them, by root (`None`: none left).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub threads: BTreeMap<String, Option<BTreeMap<u64, ThreadView>>>,
    /// v4: teams whose counts changed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub teams: BTreeMap<String, Option<TeamView>>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.totals.is_none()
            && self.conversations.is_empty()
            && self.broadcasts.is_empty()
            && self.notifications.is_empty()
            && self.threads.is_empty()
            && self.teams.is_empty()
    }
}

/// The entries of `new` that differ from `old` (new values), and `None` for those `new` no longer has.
fn diff<V: PartialEq + Clone>(old: &BTreeMap<String, V>, new: &BTreeMap<String, V>) -> BTreeMap<String, Option<V>> {
    let changed = new.iter().filter(|(k, v)| old.get(*k) != Some(v)).map(|(k, v)| (k.clone(), Some(v.clone())));
    let gone = old.keys().filter(|k| !new.contains_key(*k)).map(|k| (k.clone(), None));
    changed.chain(gone).collect()
}

/// One message of the push stream (`docs/api.md` § Stream), serialized with its `type`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Message<'a> {
    /// The whole state: on connect, or when the client's `since` is not current.
    State {
        /// The state's push version.
        version: u64,
        /// The reader shape.
        state: &'a UserView,
    },
    /// What changed since the previous message (nothing, when sent on connect to a client already current).
    Changes {
        /// The new push version.
        version: u64,
        /// The new values.
        #[serde(flatten)]
        changes: &'a Changes,
    },
}

/// What changed from `old` to `new` (empty when nothing did).
pub fn changes(old: &UserView, new: &UserView) -> Changes {
    let totals = Counts::of(new);
    Changes {
        totals: (totals != Counts::of(old)).then_some(totals),
        conversations: diff(&old.conversations, &new.conversations),
        broadcasts: diff(&old.broadcasts, &new.broadcasts),
        notifications: diff(&old.notifications, &new.notifications),
        threads: diff(&old.threads, &new.threads),
        teams: diff(&old.teams, &new.teams),
    }
}

/// Applies `changes` to `view` (what a client does with a message): the inverse of [`changes`].
pub fn apply(view: &mut UserView, changes: &Changes) {
    fn merge<V: Clone>(into: &mut BTreeMap<String, V>, from: &BTreeMap<String, Option<V>>) {
        for (k, v) in from {
            match v {
                Some(v) => into.insert(k.clone(), v.clone()),
                None => into.remove(k),
            };
        }
    }
    if let Some(t) = changes.totals {
        t.set_in(view);
    }
    merge(&mut view.conversations, &changes.conversations);
    merge(&mut view.broadcasts, &changes.broadcasts);
    merge(&mut view.notifications, &changes.notifications);
    merge(&mut view.threads, &changes.threads);
    merge(&mut view.teams, &changes.teams);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(conversations: &[(&str, u64)], categories: &[(&str, u64)]) -> UserView {
        let conversations: BTreeMap<_, _> = conversations
            .iter()
            .map(|(c, n)| (c.to_string(), ConversationView { unread: *n, ..Default::default() }))
            .collect();
        let total_unread = conversations.values().map(|c| c.unread).sum();
        let notifications =
            categories.iter().map(|(c, n)| (c.to_string(), NotificationView { unread: *n, unseen: *n })).collect();
        UserView { user_id: "u".into(), total_unread, conversations, notifications, ..UserView::default() }
    }

    #[test]
    fn only_what_changed_with_new_values_and_null_for_what_left() {
        let old = view(&[("a", 1), ("b", 2)], &[("like", 3)]);
        let new = view(&[("a", 1), ("c", 4)], &[("like", 0)]);
        let c = changes(&old, &new);
        assert_eq!(c.totals.unwrap().total_unread, 5);
        assert_eq!(c.conversations.keys().collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(c.conversations["b"], None);
        assert_eq!(c.conversations["c"].unwrap().unread, 4);
        assert_eq!(c.notifications["like"].unwrap().unread, 0);
        assert!(changes(&new, &new).is_empty());
        let json = serde_json::to_value(&c).unwrap();
        assert!(json.get("broadcasts").is_none(), "unchanged sections are left out: {json}");
    }

    #[test]
    fn applying_changes_once_or_twice_gives_the_new_state() {
        let old = view(&[("a", 1), ("b", 2)], &[("like", 3)]);
        let mut new = view(&[("c", 4)], &[("like", 1), ("follow", 2)]);
        // v4: a thread, a team and a v4 total change too.
        new.threads.insert("c".into(), [(7, ThreadView { unread: 2, mentions: 1 })].into());
        new.teams.insert("acme".into(), TeamView { unread: 4, mentions: 0, unread_conversations: 1 });
        (new.unread_threads, new.thread_mentions) = (1, 1);
        let c = changes(&old, &new);
        let mut client = old.clone();
        apply(&mut client, &c);
        assert_eq!(client, new);
        apply(&mut client, &c);
        assert_eq!(client, new, "a duplicate message changes nothing");
    }
}
