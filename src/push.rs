//! Push: the live counts of the users connected to this API instance, sent to their sockets as they change.
//!
//! Every write of a user's hash or of a broadcast list (by a fold or fan-out task on any instance) publishes its
//! key on the namespace's change channel ([`crate::projection::changes_key`], Redis pub/sub) and gives it a new
//! push version. The [`Hub`] subscribes to that channel; for a key of a user with a socket here, or of a list such a
//! user reads, it marks the user pending. A refresher reads the pending users from Redis (one pipelined round trip
//! a batch), compares each with what it last sent ([`crate::core::changes`]) and queues one message per socket:
//!
//! - on connect: `{"type": "state", "version", "state": <reader shape>}`, or, with `since` equal to the current
//!   version, `{"type": "changes", "version"}` with nothing in it: one message either way;
//! - after a change: `{"type": "changes", "version", "totals"?, "conversations"?, "broadcasts"?,
//!   "notifications"?}` with new values (`null`: gone).
//!
//! Versions come from Redis ([`crate::projection::push_version`]) and only grow, so every instance agrees on them
//! and a client drops a message whose version is not above the last it applied. Each socket has a queue of
//! [`QUEUE`] messages: a socket whose queue is full is dropped (its client reconnects with `since`), so a slow
//! client costs at most that. After a (re)subscription, and when the live namespace changes, every watched user is
//! read again, so a message lost while the subscription was down is made up for. A user with no hash (expired
//! under `--projection-ttl`) is refilled from the checkpoint by the hub's reader ([`crate::read::Reader::refill`]) and
//! read again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{mpsc, watch, Notify};

use crate::core::broadcast::ListId;
use crate::core::changes::{changes, Changes, Message};
use crate::core::contract::UserView;
use crate::metrics::{Metrics, Step};
use crate::projection::changes_key;
use crate::projection::redis::Versioned;
use crate::read::Reader;

/// Messages a socket may have queued before it is dropped as too slow: 64.
pub const QUEUE: usize = 64;
/// Users read from Redis in one round trip.
const BATCH: usize = 500;
/// How long before a midnight UTC the hub reads every watched user's counts of the coming day (contract v3:
/// expiry), so that at the midnight it only sends: 60 s.
pub const READ_AHEAD: Duration = Duration::from_secs(60);

/// One message, serialized once and shared by every socket of its user, with its version.
#[derive(Debug, Clone)]
pub struct Text {
    /// The message's version.
    pub version: u64,
    /// The message, JSON.
    pub json: Arc<str>,
}

/// What this instance knows of one watched user, and the user's sockets.
struct Watched {
    view: UserView,
    version: u64,
    /// The lists and indexes `view` depends on.
    follows: Vec<ListId>,
    sockets: Vec<Socket>,
}

struct Socket {
    id: u64,
    tx: mpsc::Sender<Text>,
    /// Whether it has had its first message.
    first: First,
}

/// Where a socket stands with its first message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    /// Not sent yet; `since`: the version the client already has, if any (then an empty changes message will do).
    Due { since: Option<u64> },
    /// Sent: the socket gets changes from now on.
    Sent,
}

/// The changes message [`deliver_prepared`] sends to live sockets.
enum Update {
    /// Made from the user's view now, if the read is newer.
    Compute,
    /// Made already (`None`: nothing changed).
    Made(Option<Text>),
}

#[derive(Default)]
struct Watchers {
    users: HashMap<String, Watched>,
    /// For each broadcast list (or read-diffused conversation's index), the watched users whose state holds it.
    lists: HashMap<ListId, HashSet<String>>,
    /// For each list, the newest version published for it: a read of a user older than that missed the change
    /// (the user was not yet known to read the list when it was published) and is read again.
    list_versions: HashMap<ListId, u64>,
    /// Sockets dropped since the hub started (queue full or closed).
    dropped: u64,
}

/// A user's counts of the coming day, read ahead of the midnight.
struct Prepared {
    /// The version of the view the changes were made against: still the user's at the midnight, or not sent.
    seen_at: u64,
    /// The counts, at the midnight's version.
    read: Versioned,
    /// The changes message (`None`: nothing changes for the user).
    message: Option<Text>,
}

/// The push hub of one API instance.
pub struct Hub {
    /// The read model: the live namespace, and refills of users with no hash.
    reader: Arc<Reader>,
    redis_url: String,
    watchers: Mutex<Watchers>,
    /// Users to read again, each with when it was first marked (for [`Step::RedisToPushed`]).
    pending: Mutex<HashMap<String, Instant>>,
    metrics: Arc<Metrics>,
    wake: Notify,
    /// Subscriptions made so far (which cluster node the next one uses).
    subscriptions: AtomicU64,
    next_id: AtomicU64,
    stop: watch::Receiver<bool>,
}

/// A socket's side of the hub: its messages, in order. Dropping it leaves the hub.
pub struct Subscription {
    hub: Arc<Hub>,
    user_id: String,
    id: u64,
    /// The messages; `None` once the hub dropped the socket (queue full).
    pub messages: mpsc::Receiver<Text>,
    /// Turns true when the service is stopping (sockets then close cleanly).
    pub stop: watch::Receiver<bool>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.leave(&self.user_id, self.id);
    }
}

impl Hub {
    /// A hub reading through `reader` (the live namespace; users with no hash refilled from the checkpoint when it
    /// has a fallback), subscribing with a connection of its own to `redis_url`; it runs until `stop` turns true and
    /// counts how long a change takes to reach the sockets in `metrics`.
    pub fn start(
        reader: Arc<Reader>,
        redis_url: &str,
        stop: watch::Receiver<bool>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        let hub = Arc::new(Self {
            reader,
            redis_url: redis_url.to_owned(),
            watchers: Mutex::default(),
            pending: Mutex::default(),
            metrics,
            wake: Notify::new(),
            next_id: AtomicU64::new(1),
            subscriptions: AtomicU64::new(0),
            stop,
        });
        tokio::spawn(hub.clone().listen());
        tokio::spawn(hub.clone().refresh_pending());
        tokio::spawn(hub.clone().midnights());
        hub
    }

    /// Watches `user_id` for a new socket: its first message (the state, or an empty `changes` when the client's
    /// `since` is current) is queued before this returns.
    pub async fn subscribe(self: &Arc<Self>, user_id: &str, since: Option<u64>) -> Subscription {
        let (tx, messages) = mpsc::channel(QUEUE);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut w = self.watchers.lock().expect("not poisoned");
            let watched = w.users.entry(user_id.to_owned()).or_insert_with(|| Watched {
                view: UserView { user_id: user_id.to_owned(), ..UserView::default() },
                version: 0,
                follows: Vec::new(),
                sockets: Vec::new(),
            });
            watched.sockets.push(Socket { id, tx, first: First::Due { since } });
        }
        if let Err(e) = self.refresh(vec![user_id.to_owned()]).await {
            tracing::warn!(error = %e, "reading a subscribed user; retried by the refresher");
            self.mark([user_id.to_owned()]);
        }
        Subscription { hub: self.clone(), user_id: user_id.to_owned(), id, messages, stop: self.stop.clone() }
    }

    /// The sockets open now, and how many the hub has dropped since it started (for `/metrics`).
    pub fn socket_counts(&self) -> (usize, u64) {
        let w = self.watchers.lock().expect("not poisoned");
        (w.users.values().map(|u| u.sockets.len()).sum(), w.dropped)
    }

    fn leave(&self, user_id: &str, id: u64) {
        let mut w = self.watchers.lock().expect("not poisoned");
        let Some(watched) = w.users.get_mut(user_id) else { return };
        watched.sockets.retain(|s| s.id != id);
        if watched.sockets.is_empty() {
            let gone = w.users.remove(user_id).expect("present");
            unindex(&mut w.lists, user_id, &gone.follows);
        }
    }

    /// Marks users to be read again by the refresher.
    fn mark(&self, users: impl IntoIterator<Item = String>) {
        let (mut pending, now) = (self.pending.lock().expect("not poisoned"), Instant::now());
        users.into_iter().for_each(|u| {
            pending.entry(u).or_insert(now);
        });
        drop(pending);
        self.wake.notify_one();
    }

    /// Reads `users` from Redis and sends each socket what it must get.
    ///
    /// Errors: Redis unreachable or a malformed hash.
    async fn refresh(&self, users: Vec<String>) -> anyhow::Result<()> {
        let at = self.reader.at();
        let today = crate::clock::today();
        let mut read = at.projection.read_many_versioned(&users, today).await?;
        if read.iter().any(|r| !r.present) {
            let missing: Vec<String> = read.iter().filter(|r| !r.present).map(|r| r.view.user_id.clone()).collect();
            let refilled: HashSet<String> = self.reader.refill(&at, &missing, today).await?.into_iter().collect();
            read.retain(|r| !refilled.contains(&r.view.user_id)); // read again, from their refilled hashes
            if !refilled.is_empty() {
                self.mark(refilled);
            }
        }
        // Counts change at midnight with no write (contract v3, expiry): a read since today's midnight is at least
        // that midnight's version, so clients take it as newer than anything read before.
        let midnight = crate::clock::day_version(today);
        read.iter_mut().for_each(|r| r.version = r.version.max(midnight));
        let stale: Vec<String> = {
            let mut w = self.watchers.lock().expect("not poisoned");
            read.into_iter().filter_map(|read| deliver(&mut w, read)).collect()
        };
        if !stale.is_empty() {
            self.mark(stale);
        }
        Ok(())
    }

    /// Reads the pending users, a batch at a time, whenever some are marked.
    async fn refresh_pending(self: Arc<Self>) {
        let mut stop = self.stop.clone();
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            loop {
                let (batch, marked): (Vec<String>, Vec<Instant>) = {
                    let mut pending = self.pending.lock().expect("not poisoned");
                    let users: Vec<String> = pending.keys().take(BATCH).cloned().collect();
                    users.into_iter().filter_map(|u| pending.remove_entry(&u)).unzip()
                };
                if batch.is_empty() {
                    break;
                }
                match self.refresh(batch.clone()).await {
                    Ok(()) => self.metrics.live_path_each(Step::RedisToPushed, marked.iter().map(Instant::elapsed)),
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "push: reading changed users; retrying in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        self.mark(batch);
                    }
                }
            }
        }
    }

    /// At every midnight UTC of the service's clock ([`crate::clock`]), gives every socket its user's counts of the
    /// new day: unread that expires (contract v3) changes counts with no event. The hub reads every watched user at
    /// the coming day [`READ_AHEAD`] before the midnight and sends at the instant what is still current; a user who
    /// changed meanwhile, or was not watched yet, is read again right after the midnight.
    async fn midnights(self: Arc<Self>) {
        let mut stop = self.stop.clone();
        loop {
            let midnight = tokio::time::Instant::now() + crate::clock::until_next_midnight();
            let day = crate::clock::today() + 1;
            tokio::select! {
                () = tokio::time::sleep_until(midnight.checked_sub(READ_AHEAD).unwrap_or(midnight)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let prepared = self.read_ahead(day).await;
            // A few milliseconds past midnight, so that the clock read by `refresh` is in the new day.
            tokio::select! {
                () = tokio::time::sleep_until(midnight + Duration::from_millis(5)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            self.send_midnight(prepared);
        }
    }

    /// Every watched user's counts at UTC `day`, with the version of the view they are compared with (as
    /// `refresh` stores it) and the changes message of that midnight, made now.
    async fn read_ahead(&self, day: i64) -> Vec<Prepared> {
        let users: Vec<String> = self.watchers.lock().expect("not poisoned").users.keys().cloned().collect();
        let (projection, floor, version) =
            (self.reader.at().projection, crate::clock::day_version(day - 1), crate::clock::day_version(day));
        let mut prepared = Vec::with_capacity(users.len());
        for batch in users.chunks(BATCH) {
            let reads = match projection.read_many_versioned(batch, day).await {
                Ok(reads) => reads,
                Err(e) => {
                    tracing::warn!(error = %e, "push: reading ahead of midnight; read after it instead");
                    continue;
                }
            };
            let w = self.watchers.lock().expect("not poisoned");
            for mut read in reads {
                let seen_at = read.version.max(floor);
                let Some(watched) = w.users.get(&read.view.user_id).filter(|u| u.version == seen_at) else { continue };
                read.version = read.version.max(version);
                let (v, diff) = (read.version, changes(&watched.view, &read.view));
                let message = (!diff.is_empty()).then(|| text(v, &Message::Changes { version: v, changes: &diff }));
                prepared.push(Prepared { seen_at, read, message });
            }
        }
        prepared
    }

    /// Sends the counts read ahead for `day` to the users who did not change since, as of that midnight's version;
    /// marks everyone else watched to be read again.
    fn send_midnight(&self, prepared: Vec<Prepared>) {
        let again: Vec<String> = {
            let mut w = self.watchers.lock().expect("not poisoned");
            let mut sent = HashSet::new();
            for Prepared { seen_at, read, message } in prepared {
                let user = read.view.user_id.clone();
                if w.users.get(&user).is_some_and(|watched| watched.version == seen_at)
                    && deliver_prepared(&mut w, read, Update::Made(message)).is_none()
                {
                    sent.insert(user);
                }
            }
            w.users.keys().filter(|u| !sent.contains(*u)).cloned().collect()
        };
        tracing::info!(again = again.len(), "push: midnight UTC, counts of the new day sent");
        self.mark(again);
    }

    /// Follows the change channel for as long as the service runs, resubscribing after a failure.
    async fn listen(self: Arc<Self>) {
        loop {
            if let Err(e) = self.listen_once().await {
                tracing::warn!(error = %format!("{e:#}"), "push: the change subscription failed; resubscribing in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            if *self.stop.borrow() {
                return;
            }
        }
    }

    /// One subscription to the live namespace's channel; ends when the namespace changes or the service stops.
    async fn listen_once(&self) -> anyhow::Result<()> {
        let prefix = self.reader.at().projection.prefix().to_owned();
        // On a cluster every node forwards every PUBLISH: one node's plain subscription sees them all, and after a
        // failure the next one is tried.
        let attempt = self.subscriptions.fetch_add(1, Ordering::Relaxed) as usize;
        let url = crate::projection::conn::pubsub_url(&self.redis_url, attempt);
        let mut pubsub = crate::projection::conn::client(url)?.get_async_pubsub().await?;
        pubsub.subscribe(changes_key(&prefix)).await?;
        let watched: Vec<String> = {
            let mut w = self.watchers.lock().expect("not poisoned");
            w.list_versions.clear(); // the new subscription's reads see at least what the old one announced
            w.users.keys().cloned().collect()
        };
        self.mark(watched); // whatever changed while not subscribed
        let users = format!("{prefix}{}", crate::projection::USER_KEY_PREFIX);
        let mut messages = pubsub.on_message();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut stop = self.stop.clone();
        loop {
            tokio::select! {
                message = messages.next() => {
                    let message = message.ok_or_else(|| anyhow::anyhow!("the subscription closed"))?;
                    // One line `"{version} {key}"` per key written (a write of several users is one message).
                    let payload = String::from_utf8_lossy(message.get_payload_bytes());
                    for (version, key) in payload.split('\n').filter_map(|line| line.split_once(' ')) {
                        self.on_key(version.parse().unwrap_or(0), key, &prefix, &users);
                    }
                }
                _ = tick.tick() => if self.reader.at().projection.prefix() != prefix { return Ok(()) },
                _ = stop.wait_for(|s| *s) => return Ok(()),
            }
        }
    }

    /// A key published on the change channel with its version: marks its user, or the watched readers of its
    /// list or index (and remembers the list's version). `users`: the key prefix of users' hashes.
    fn on_key(&self, version: u64, key: &str, prefix: &str, users: &str) {
        let list = crate::projection::shared_of_key(prefix, key);
        let marked: Vec<String> = {
            let mut w = self.watchers.lock().expect("not poisoned");
            if let Some(user) = key.strip_prefix(users) {
                w.users.contains_key(user).then(|| user.to_owned()).into_iter().collect()
            } else if let Some(list) = list {
                let readers = w.lists.get(&list).map(|readers| readers.iter().cloned().collect()).unwrap_or_default();
                let known = w.list_versions.entry(list).or_default();
                *known = (*known).max(version);
                readers
            } else {
                Vec::new()
            }
        };
        if !marked.is_empty() {
            self.mark(marked);
        }
    }
}

/// Sends a user's new state where it must go: the changes to the sockets that have the old one (when the version
/// is newer), the first message to new sockets. A socket whose queue is full or closed is dropped. Returns the
/// user when the read missed a change of one of its lists (a newer list version was published): read it again.
fn deliver(w: &mut Watchers, read: Versioned) -> Option<String> {
    deliver_prepared(w, read, Update::Compute)
}

/// [`deliver`] with the changes message made already ([`Update::Made`]) against the view the user still has, or
/// to be made now ([`Update::Compute`]).
fn deliver_prepared(w: &mut Watchers, read: Versioned, prepared: Update) -> Option<String> {
    let Versioned { view, version, follows, .. } = read;
    let user_id = view.user_id.clone();
    let stale = follows.iter().any(|l| w.list_versions.get(l).is_some_and(|v| *v > version));
    let watched = w.users.get_mut(&user_id)?;
    let mut update = None;
    if version > watched.version {
        update = match prepared {
            Update::Made(message) => message,
            Update::Compute => {
                let diff = changes(&watched.view, &view);
                (!diff.is_empty()).then(|| text(version, &Message::Changes { version, changes: &diff }))
            }
        };
        watched.view = view;
        watched.version = version;
        let old = std::mem::replace(&mut watched.follows, follows);
        unindex(&mut w.lists, &user_id, &old);
        index(&mut w.lists, &user_id, &w.users[&user_id].follows);
    }
    let watched = w.users.get_mut(&user_id).expect("present");
    let (version, empty, view) = (watched.version, Changes::default(), &watched.view);
    let mut dropped = 0;
    watched.sockets.retain_mut(|s| {
        let message = match std::mem::replace(&mut s.first, First::Sent) {
            First::Due { since } if since == Some(version) => {
                text(version, &Message::Changes { version, changes: &empty })
            }
            First::Due { .. } => text(version, &Message::State { version, state: view }),
            First::Sent => match &update {
                Some(u) => u.clone(),
                None => return true,
            },
        };
        let sent = s.tx.try_send(message).is_ok();
        if !sent {
            tracing::info!("push: a socket's queue is full or closed: dropping it");
            dropped += 1;
        }
        sent
    });
    w.dropped += dropped;
    stale.then_some(user_id)
}

fn text(version: u64, message: &Message<'_>) -> Text {
    Text { version, json: serde_json::to_string(message).expect("messages serialize").into() }
}

/// Adds `user_id` to the readers of every list in `follows`.
fn index(lists: &mut HashMap<ListId, HashSet<String>>, user_id: &str, follows: &[ListId]) {
    for list in follows {
        lists.entry(list.clone()).or_default().insert(user_id.to_owned());
    }
}

/// Removes `user_id` from the readers of every list in `follows`.
fn unindex(lists: &mut HashMap<ListId, HashSet<String>>, user_id: &str, follows: &[ListId]) {
    for list in follows {
        if let Some(readers) = lists.get_mut(list) {
            readers.remove(user_id);
            if readers.is_empty() {
                lists.remove(list);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watchers(first: First) -> (Watchers, mpsc::Receiver<Text>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut w = Watchers::default();
        let view = UserView { user_id: "u".into(), ..UserView::default() };
        w.users.insert(
            "u".into(),
            Watched { view, version: 0, follows: Vec::new(), sockets: vec![Socket { id: 1, tx, first }] },
        );
        (w, rx)
    }

    fn read(view: UserView, version: u64) -> Versioned {
        let follows = view.broadcasts.keys().map(|id| ListId::Broadcast(id.clone())).collect();
        Versioned { view, version, follows, present: true }
    }

    fn counts(unread: u64) -> UserView {
        UserView { user_id: "u".into(), total_unread: unread, ..UserView::default() }
    }

    #[test]
    fn a_socket_that_does_not_read_is_dropped_once_its_queue_is_full() {
        let (mut w, mut rx) = watchers(First::Sent);
        for v in 1..=(QUEUE as u64 + 10) {
            assert_eq!(deliver(&mut w, read(counts(v), v)), None);
        }
        assert!(w.users["u"].sockets.is_empty(), "dropped");
        let mut queued = 0;
        while rx.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, QUEUE, "what it holds is bounded by the queue");
    }

    #[test]
    fn a_read_older_than_a_published_list_version_is_read_again() {
        let (mut w, _rx) = watchers(First::Sent);
        w.list_versions.insert(ListId::Broadcast("dot".into()), 20);
        let mut view = counts(1);
        view.broadcasts.insert("dot".into(), unread_view(0));
        assert_eq!(deliver(&mut w, read(view.clone(), 10)), Some("u".into()), "the read missed the list's change");
        view.broadcasts.insert("dot".into(), unread_view(1));
        assert_eq!(deliver(&mut w, read(view, 20)), None);
    }

    fn unread_view(unread: u64) -> crate::core::contract::BroadcastView {
        crate::core::contract::BroadcastView { unread, dot: unread > 0 }
    }

    #[test]
    fn a_new_socket_gets_the_state_or_an_empty_message_and_old_versions_send_nothing() {
        let (mut w, mut rx) = watchers(First::Due { since: None });
        deliver(&mut w, read(counts(3), 10));
        let first = rx.try_recv().unwrap();
        assert!(first.json.starts_with(r#"{"type":"state","version":10,"#), "{}", first.json);
        deliver(&mut w, read(counts(1), 9));
        assert!(rx.try_recv().is_err(), "an older version changes nothing");
        deliver(&mut w, read(counts(3), 11));
        assert!(rx.try_recv().is_err(), "a newer version with the same counts sends nothing");
        deliver(&mut w, read(counts(4), 12));
        assert_eq!(
            &*rx.try_recv().unwrap().json,
            r#"{"type":"changes","version":12,"totals":{"total_unread":4,"total_mentions":0,"unread_conversations":0,"feed_unread":0,"total_notifications_unread":0,"total_notifications_unseen":0,"unread_threads":0,"thread_mentions":0,"total_reactions":0}}"#
        );
        let (tx, mut current) = mpsc::channel(QUEUE);
        w.users.get_mut("u").unwrap().sockets.push(Socket { id: 2, tx, first: First::Due { since: Some(12) } });
        deliver(&mut w, read(counts(4), 12));
        assert_eq!(&*current.try_recv().unwrap().json, r#"{"type":"changes","version":12}"#);
    }
}
