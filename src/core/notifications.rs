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

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::contract::UserEvent;
use crate::core::{Map, Set};

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

/// What of a [`Note`] its counts and indexes depend on. A category, once set, never changes, so two snapshots of one
/// note are equal exactly when the note is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    order: u64,
    created: bool,
    unread: bool,
    unseen: bool,
    done: bool,
    read: bool,
    seen: bool,
    retracted: bool,
}

impl Snapshot {
    fn of(n: &Note) -> Self {
        let (order, created, read, seen, retracted) = (n.order, n.created(), n.read, n.seen, n.retracted);
        Self {
            order,
            created,
            unread: n.counts_unread(),
            unseen: n.counts_unseen(),
            done: n.done(),
            read,
            seen,
            retracted,
        }
    }
}

/// category → order → id, of the notifications that count in one way (unread, or unseen).
type CategoryIndex = BTreeMap<String, BTreeMap<u64, Arc<str>>>;

/// A user's remembered notifications, with the indexes that make marks cost what they change.
///
/// Each id is stored once and shared (`Arc<str>`) by the indexes and the changed set: a notification costs one
/// allocation of its id, not one per index it is in (121,235 notifications of the v3 set took 59 MiB with a copy
/// per index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoteBook {
    notes: Map<Arc<str>, Note>,
    /// The notifications that count as unread / unseen.
    unread: CategoryIndex,
    unseen: CategoryIndex,
    /// order → id of the done notifications (eviction order).
    done: BTreeMap<u64, Arc<str>>,
    /// Ids changed since [`NoteBook::take_dirty`].
    dirty: Set<Arc<str>>,
}

impl NoteBook {
    /// The book of `notes` (e.g. loaded from a checkpoint), indexes rebuilt.
    pub fn restore<K: Into<Arc<str>>>(notes: impl IntoIterator<Item = (K, Note)>) -> Self {
        let mut book = NoteBook::default();
        for (id, note) in notes {
            let id: Arc<str> = id.into();
            let now = Snapshot::of(&note);
            book.reindex(note.category.as_deref(), None, now, &id);
            book.notes.insert(id, note);
        }
        book
    }

    /// Every remembered notification.
    pub fn notes(&self) -> impl Iterator<Item = (&str, &Note)> {
        self.notes.iter().map(|(id, n)| (&**id, n))
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
        self.dirty.drain().map(|id| id.to_string()).collect()
    }

    /// Moves a note of `category` from the indexes its `before` snapshot is in (none when `None`) to those `now` is
    /// in. A note without a category is only ever done.
    fn reindex(&mut self, category: Option<&str>, before: Option<Snapshot>, now: Snapshot, id: &Arc<str>) {
        // The order `before` had, if it was in the index `counted` says.
        let was_in = |counted: fn(&Snapshot) -> bool| before.filter(counted).map(|b| b.order);
        if let Some(cat) = category {
            for (index, counted) in
                [(&mut self.unread, (|s| s.unread) as fn(&Snapshot) -> bool), (&mut self.unseen, |s| s.unseen)]
            {
                if let Some(order) = was_in(counted) {
                    remove_indexed(index, cat, order);
                }
                if counted(&now) {
                    match index.get_mut(cat) {
                        Some(m) => drop(m.insert(now.order, id.clone())),
                        None => drop(index.insert(cat.to_owned(), BTreeMap::from([(now.order, id.clone())]))),
                    }
                }
            }
        }
        if let Some(order) = was_in(|s| s.done) {
            self.done.remove(&order);
        }
        if now.done {
            self.done.insert(now.order, id.clone());
        }
    }

    /// Changes one note with `f` (created as `Note::default()` at `order` when absent and `create`), keeping the
    /// counts of `summary` and the indexes right.
    fn change(&mut self, summary: &mut Summary, id: &str, order: u64, create: bool, f: impl FnOnce(&mut Note)) {
        let existed = self.notes.contains_key(id);
        if !existed && !create {
            return;
        }
        if !existed {
            self.notes.insert(Arc::from(id), Note { order, ..Note::default() });
        }
        let (key, note) = self.notes.get_key_value_mut(id).expect("present or just inserted");
        let before = Snapshot::of(note);
        f(note);
        let now = Snapshot::of(note);
        if existed && now == before {
            return;
        }
        let (key, category) = (key.clone(), note.category.clone());
        if let Some(cat) = category.as_deref() {
            let counts = match summary.categories.get_mut(cat) {
                Some(c) => c,
                None => summary.categories.entry(cat.to_owned()).or_default(),
            };
            counts.unread = counts.unread + u64::from(now.unread) - u64::from(before.unread);
            counts.unseen = counts.unseen + u64::from(now.unseen) - u64::from(before.unseen);
        }
        self.reindex(category.as_deref(), existed.then_some(before), now, &key);
        self.dirty.insert(key);
        self.evict();
    }

    fn evict(&mut self) {
        while self.done.len() > MAX_DONE_NOTES {
            let Some((_, id)) = self.done.pop_first() else { return };
            self.notes.remove(&*id);
            self.dirty.insert(id);
        }
    }

    /// The ids a mark covers: the notifications counting as unseen (`seen` mark) or unread (`read` mark) in
    /// `category`, or in every category.
    fn covered(&self, category: Option<&str>, read: bool) -> Vec<Arc<str>> {
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

/// Removes `order` from `category`'s map of `index`, and the map when it empties.
fn remove_indexed(index: &mut CategoryIndex, category: &str, order: u64) {
    if let Some(m) = index.get_mut(category) {
        m.remove(&order);
        if m.is_empty() {
            index.remove(category);
        }
    }
}
