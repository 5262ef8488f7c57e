//! A user's notifications (`CONTRACT.md` § v2, "Notifications"): created by id in a category, read one by one or
//! all at once, seen, retracted, in any order the contract allows.
//!
//! State kept per user, and what bounds it:
//! - [`Summary`] (in the user's checkpoint row): per category the counts `unread` and `unseen`, and the user's
//!   notification clock (the position of each notification event in the user's partition). O(categories).
//! - [`NoteBook`] (one checkpoint row per notification, written only when that notification changes): every
//!   notification still **active** (unread or unseen), and the most recent [`MAX_DONE_NOTES`] **done** ones (read or
//!   retracted, or read/retracted before their creation arrived), which are kept only to recognise a late duplicate
//!   `notification.created` or a creation arriving after its read. Beyond that bound the oldest done notification is
//!   forgotten: a duplicate of it arriving after [`MAX_DONE_NOTES`] newer ones would count again (documented in
//!   `docs/semantics.md`).
//!
//! A mark (`notifications.read` / `.seen`) covers every notification created earlier in the user's partition: as
//! the fold applies a user's events in partition order, that is every notification created so far, i.e. the active
//! ones of the category, which are drained from per-category indexes: each notification enters and leaves each
//! index once, so a mark costs what it changes, not the user's history.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::core::contract::UserEvent;
use crate::core::Map;

/// Most done notifications remembered per user (the bound on a user's notification history): 4,096.
pub const MAX_DONE_NOTES: usize = 4096;

/// One category's counts (`CONTRACT.md` § v2: `unread(U, cat)`, `unseen(U, cat)`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CategoryCounts {
    /// Created, not read, not retracted.
    pub unread: u64,
    /// Created, not seen, not read, not retracted.
    pub unseen: u64,
}

/// The part of a user's notification state that lives in the user's own checkpoint row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Every category the user has a created notification in.
    pub categories: BTreeMap<String, CategoryCounts>,
    /// Notification events applied so far: the position of the next one in the user's partition.
    pub clock: u64,
}

impl Summary {
    /// (sum of unread, sum of unseen) over the categories.
    pub fn totals(&self) -> (u64, u64) {
        self.categories.values().fold((0, 0), |(r, s), c| (r + c.unread, s + c.unseen))
    }
}

/// One notification as remembered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// Its category, from its first `notification.created`; `None` while only a read or retraction arrived.
    pub category: Option<String>,
    /// The user's notification clock at its creation (or at the first event naming it, while not created).
    pub order: u64,
    /// Read (one by one, or by a `notifications.read` after its creation).
    pub read: bool,
    /// Seen (by a `notifications.seen` after its creation); read implies seen.
    pub seen: bool,
    /// Withdrawn by its source: never counts.
    pub retracted: bool,
}

impl Note {
    fn created(&self) -> bool {
        self.category.is_some()
    }

    fn counts_unread(&self) -> bool {
        self.created() && !self.read && !self.retracted
    }

    fn counts_unseen(&self) -> bool {
        self.counts_unread() && !self.seen
    }

    fn done(&self) -> bool {
        !self.counts_unread()
    }
}

/// A user's remembered notifications, with the indexes that make marks cost what they change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoteBook {
    notes: Map<String, Note>,
    /// category → order → id, of the notifications that count as unread / unseen.
    unread: BTreeMap<String, BTreeMap<u64, String>>,
    unseen: BTreeMap<String, BTreeMap<u64, String>>,
    /// order → id of the done notifications (eviction order).
    done: BTreeMap<u64, String>,
    /// Ids changed since [`NoteBook::take_dirty`].
    dirty: HashSet<String>,
}

impl NoteBook {
    /// The book of `notes` (e.g. loaded from a checkpoint), indexes rebuilt.
    pub fn restore(notes: impl IntoIterator<Item = (String, Note)>) -> Self {
        let mut book = NoteBook::default();
        for (id, note) in notes {
            book.index(&id, &note);
            book.notes.insert(id, note);
        }
        book
    }

    /// Every remembered notification.
    pub fn notes(&self) -> impl Iterator<Item = (&String, &Note)> {
        self.notes.iter()
    }

    /// One remembered notification.
    pub fn note(&self, id: &str) -> Option<&Note> {
        self.notes.get(id)
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }

    /// Marks every remembered notification changed (a replay seeded from another checkpoint writes them all).
    pub fn mark_all_dirty(&mut self) {
        self.dirty.extend(self.notes.keys().cloned());
    }

    /// The ids changed since the last call (a removed one is no longer in [`NoteBook::note`]).
    pub fn take_dirty(&mut self) -> Vec<String> {
        self.dirty.drain().collect()
    }

    fn index(&mut self, id: &str, note: &Note) {
        let (order, cat) = (note.order, note.category.clone().unwrap_or_default());
        if note.counts_unread() {
            self.unread.entry(cat.clone()).or_default().insert(order, id.to_owned());
        }
        if note.counts_unseen() {
            self.unseen.entry(cat).or_default().insert(order, id.to_owned());
        }
        if note.done() {
            self.done.insert(order, id.to_owned());
        }
    }

    fn unindex(&mut self, note: &Note) {
        let (order, cat) = (note.order, note.category.clone().unwrap_or_default());
        for index in [&mut self.unread, &mut self.unseen] {
            if let Some(m) = index.get_mut(&cat) {
                m.remove(&order);
                if m.is_empty() {
                    index.remove(&cat);
                }
            }
        }
        self.done.remove(&order);
    }

    /// Changes one note with `f` (created as `Note::default()` at `order` when absent and `create`), keeping the
    /// counts of `summary` and the indexes right.
    fn change(&mut self, summary: &mut Summary, id: &str, order: u64, create: bool, f: impl FnOnce(&mut Note)) {
        let before = match self.notes.get(id) {
            Some(n) => n.clone(),
            None if create => Note { order, ..Note::default() },
            None => return,
        };
        let mut after = before.clone();
        f(&mut after);
        if after == before && self.notes.contains_key(id) {
            return;
        }
        if let Some(cat) = &after.category {
            let c = summary.categories.entry(cat.clone()).or_default();
            c.unread = c.unread + u64::from(after.counts_unread()) - u64::from(before.counts_unread());
            c.unseen = c.unseen + u64::from(after.counts_unseen()) - u64::from(before.counts_unseen());
        }
        self.unindex(&before);
        self.index(id, &after);
        match self.notes.get_mut(id) {
            Some(n) => *n = after,
            None => drop(self.notes.insert(id.to_owned(), after)),
        }
        if !self.dirty.contains(id) {
            self.dirty.insert(id.to_owned());
        }
        self.evict();
    }

    fn evict(&mut self) {
        while self.done.len() > MAX_DONE_NOTES {
            let Some((_, id)) = self.done.pop_first() else { return };
            self.notes.remove(&id);
            self.dirty.insert(id);
        }
    }

    /// The ids a mark covers: the notifications counting as unseen (`seen` mark) or unread (`read` mark) in
    /// `category`, or in every category.
    fn covered(&self, category: Option<&str>, read: bool) -> Vec<String> {
        let index = if read { &self.unread } else { &self.unseen };
        match category {
            Some(c) => index.get(c).map(|m| m.values().cloned().collect()).unwrap_or_default(),
            None => index.values().flat_map(|m| m.values().cloned()).collect(),
        }
    }

    /// Applies one notification event of the user (others are ignored).
    pub fn apply(&mut self, summary: &mut Summary, event: &UserEvent) {
        let order = summary.clock + 1;
        match event {
            UserEvent::NotificationCreated(e) => self.change(summary, &e.notification_id, order, true, |n| {
                if n.category.is_none() {
                    n.category = Some(e.category.clone());
                    n.order = order;
                }
            }),
            UserEvent::NotificationRead(e) => self.change(summary, &e.notification_id, order, true, |n| {
                n.read = true;
                n.seen = true;
            }),
            UserEvent::NotificationRetracted(e) => {
                self.change(summary, &e.notification_id, order, true, |n| n.retracted = true)
            }
            UserEvent::NotificationsSeen(e) | UserEvent::NotificationsRead(e) => {
                let read = matches!(event, UserEvent::NotificationsRead(_));
                for id in self.covered(e.category.as_deref(), read) {
                    self.change(summary, &id, order, false, |n| {
                        n.seen = true;
                        n.read |= read;
                    });
                }
            }
            _ => return,
        }
        summary.clock = order;
    }

    /// The counts recomputed from the notes: for `check`, never on the hot path.
    pub fn recount(&self) -> BTreeMap<String, CategoryCounts> {
        let mut out: BTreeMap<String, CategoryCounts> = BTreeMap::new();
        for n in self.notes.values() {
            if let Some(cat) = &n.category {
                let c = out.entry(cat.clone()).or_default();
                c.unread += u64::from(n.counts_unread());
                c.unseen += u64::from(n.counts_unseen());
            }
        }
        out
    }
}
