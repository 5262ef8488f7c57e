//! The Redis projection: how a user's counts map onto one Redis hash (this module, pure), the version each hash
//! carries ([`version`]) and the version-guarded writer and reader ([`redis`]).
//!
//! Key: `{prefix}u:{user_id}` — the id is the whole rest of the key, taken byte for byte, so every id the contract
//! allows (spaces, braces, colons, slashes, percent signs) maps to exactly one key. One key per user means every
//! atomic write touches one key, so the layout also works on Redis Cluster whatever `{…}` an id holds.
//!
//! Fields of the hash:
//! - [`TOTALS_FIELD`] → `"v{format} {total_unread} {total_mentions} {unread_conversations} {feed_unread}
//!   {total_notifications_unread} {total_notifications_unseen}"`: the table of counts in its order
//!   ([`Counts::encode`]); earlier builds wrote the numbers without the version, six of them or, a v1 build, three;
//! - [`CONVERSATION_PREFIX`]`{conversation_id}` → `"{unread} {mentions} {muted as 0|1} {marked as 0|1}
//!   {newest}"`, one per member non-feed conversation (a conversation left is deleted from the hash); `{newest}`
//!   is the newest unread seq the user's state holds (0: none), what a read of the conversation acks
//!   ([`newest_unread_of`]; a v2 build wrote the first three numbers, a v3 build before it the first four);
//! - [`NOTIFICATION_PREFIX`]`{category}` → `"{unread} {unseen}"`, one per category;
//! - [`CURSOR_PREFIX`]`{broadcast_id}` → the user's cursor in the list; the list itself is stored once, as the
//!   sorted set [`list_key`] of its live seqs (hash-tagged: [`SharedKeys`]), and the read script counts the seqs above each cursor
//!   ([`redis::READ_TEMPLATE`]): a publication writes that one key, never a user's hash;
//! - [`INDEX_PREFIX`]`{conversation_id}` → `"{lo} {muted as 0|1} {feed as 0|1} {named mention seqs…}"`, one per
//!   read-diffused conversation the user is a member of ([`crate::core::hybrid`]): the conversation's index is
//!   stored once, as two sorted sets ([`shared_keys`]: its live seqs and those that mention everyone), and the read
//!   script adds the index's seqs above `lo` (and the live named mentions) to the conversation's own part, which
//!   its `c:` field and the totals hold; a message sent in such a conversation writes the index, never a member's
//!   hash;
//! - [`EXPIRY_PREFIX`]`{conversation_id}` → `"{feed} {muted} {marked} {day}:{unread}:{mentions} …"`, one per
//!   member conversation with unread that expires (contract v3, [`crate::core::expiry`]): per UTC day on which some
//!   of the counts stored (in `c:` and the totals) expire, how many. A read at instant T subtracts the buckets of
//!   days up to T's ([`decode_view`]), so counts are exact at any instant and nothing is written at midnight;
//! - [`details::DETAIL_PREFIX`]`{conversation_id}` and [`details::THREADS_PREFIX`]`{conversation_id}` (contract
//!   v4): a member non-feed conversation's reactions, first unread and team, and its followed threads with unread
//!   ([`details`]); a read applies them after expiry, as it does the `e:` fields;
//! - [`VERSION_FIELD`] → a [`ProjectionVersion`], `"{g} {a} {b}"`: the writing fold task's lease generation and
//!   the position (next offsets of its user-events and user-deltas partitions) the state reflects; a write whose
//!   version the stored one is newer than is refused, so an older write never overwrites a newer one (see
//!   [`redis::WRITE_TEMPLATE`]).
//!
//! - [`REFILLED_FIELD`] → `"1"` on a hash a reader refilled from the checkpoint (no patch builds on it).
//!
//! With `--projection-ttl` ([`redis::RedisProjection::with_ttl`]) a user's hash expires that long after its last
//! write or read; readers refill it from the checkpoint, and the writer writes a user whole when its patch finds
//! no hash (or a refilled one) to patch.
//!
//! Readers get everything from one script call, which Redis runs atomically (on a Redis Cluster: the hash, then
//! each list's share, [`conn`]), and writers replace a user's changed fields and totals in one script, so totals
//! always agree with the conversations.

pub mod conn;
pub mod details;
pub mod idempotency;
pub mod redis;
pub mod version;

pub use version::ProjectionVersion;

use std::collections::BTreeMap;

use crate::core::broadcast::ListId;
use crate::core::contract::{BroadcastView, ConversationView, NotificationView, UserView};
use crate::core::counts::Counts;
use crate::core::fold::{ConvState, Sums};
use crate::core::hybrid::IndexShare;

/// What a user's hash key is made of after the namespace's prefix: `{prefix}u:{user_id}` ([`user_key`]).
pub const USER_KEY_PREFIX: &str = "u:";
/// The field holding the user's totals.
pub const TOTALS_FIELD: &str = "_totals";
/// The field holding the version guard.
pub const VERSION_FIELD: &str = "_version";
/// The prefix of a conversation's field.
pub const CONVERSATION_PREFIX: &str = "c:";
/// The prefix of a notification category's field.
pub const NOTIFICATION_PREFIX: &str = "n:";
/// The prefix of a broadcast cursor's field.
pub const CURSOR_PREFIX: &str = "b:";
/// The prefix of a broadcast count in what the read script returns (computed, never stored).
pub const COUNT_PREFIX: &str = "B:";
/// The field marking a hash that a reader refilled from the checkpoint (`"1"`): a patch is not applied to it, since
/// the checkpoint may be older than the writer's last write; the writer writes the user whole instead, which
/// deletes the mark ([`redis::WRITE_TEMPLATE`]).
pub const REFILLED_FIELD: &str = "_refilled";
/// The field holding the user hash's push version (set by every write).
pub const PUSH_VERSION_FIELD: &str = "_pv";
/// The prefix of a list's push version in what the read script returns.
pub const LIST_VERSION_PREFIX: &str = "V:";
/// The prefix of a conversation's expiry buckets (v3).
pub const EXPIRY_PREFIX: &str = "e:";
/// The prefix of a read-diffused conversation's field (the user's cursor in its index).
pub const INDEX_PREFIX: &str = "r:";
/// The prefix of an index's share, `"{unread} {mentions}"`, in what the read script returns (computed).
pub const INDEX_COUNT_PREFIX: &str = "R:";
/// The prefix of an index's push version in what the read script returns.
pub const INDEX_VERSION_PREFIX: &str = "X:";

/// A hash that does not decode into a user's counts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("projection of user {user_id:?}: field {field:?} {reason}")]
pub struct MalformedHash {
    /// The user whose hash it is.
    pub user_id: String,
    /// The offending field.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Why reading or writing the projection failed.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    /// Redis unreachable or a command failed; `doing` says what the projection was doing. Transient.
    #[error("Redis, {doing}: {source}")]
    Redis {
        /// What the projection was doing, e.g. `writing users`.
        doing: &'static str,
        /// The client's error.
        #[source]
        source: ::redis::RedisError,
    },
    /// A stored hash does not decode: a bug or a foreign writer, not an outage.
    #[error(transparent)]
    Malformed(#[from] MalformedHash),
    /// A conversation's sent seqs (receipts, v3) do not decode: a bug or a foreign writer, not an outage.
    #[error(transparent)]
    MalformedSent(#[from] redis::MalformedRanges),
    /// A script answered in another shape than it promises (say, fewer results than the users it was given): a
    /// bug or a foreign script under the same SHA1, not an outage.
    #[error("Redis, {doing}: unexpected reply: {reason}")]
    UnexpectedReply {
        /// What the projection was doing.
        doing: &'static str,
        /// What was wrong with the reply.
        reason: String,
    },
}

impl ProjectionError {
    /// Whether retrying may help (Redis failed), as opposed to a malformed hash.
    pub fn is_transient(&self) -> bool {
        matches!(self, ProjectionError::Redis { .. })
    }
}

/// The Redis key of a user's hash.
pub fn user_key(prefix: &str, user_id: &str) -> String {
    format!("{prefix}{USER_KEY_PREFIX}{user_id}")
}

/// The Redis key of a broadcast list's live seqs (a sorted set, score = member = seq): [`SharedKeys::live`].
pub fn list_key(prefix: &str, broadcast_id: &str) -> String {
    shared_keys(prefix, &ListId::Broadcast(broadcast_id.to_owned())).live
}

/// The Redis keys of what is stored once: a broadcast list's or a read-diffused conversation's index.
///
/// Each key ends in the hash tag `{#id}`, so the four keys of one list or index share a cluster slot and the list
/// script, which writes them together, is slot-safe on Redis Cluster; different lists spread over the slots. (The
/// `#` keeps the tag non-empty for an empty id; an id holding `}` is cut there, the same way in all four keys.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedKeys {
    /// The sorted set of live seqs (score = member = seq): `{prefix}l:{#id}` or `{prefix}x:{#id}`.
    pub live: String,
    /// The sorted set of the live seqs that mention everyone: `{prefix}xa:{#id}` (`{prefix}la:{#id}`, always
    /// empty, for a list).
    pub mention_all: String,
    /// The guard: the lease generation of the fan-out task that last wrote it (`lg:` / `xg:`).
    pub guard: String,
    /// The push version (`lv:` / `xv:`).
    pub version: String,
    /// v3: the index's expiry buckets, a hash UTC day → the bucket's seqs as ranges (`xe:`; `le:`, never written,
    /// for a list).
    pub expiry: String,
}

/// The keys of a list or an index.
pub fn shared_keys(prefix: &str, id: &ListId) -> SharedKeys {
    let (kind, id) = match id {
        ListId::Broadcast(id) => ('l', id),
        ListId::Index(id) => ('x', id),
    };
    let [live, mention_all, guard, version, expiry] = shared_key_prefixes(prefix, kind);
    SharedKeys {
        live: format!("{live}{id}}}"),
        mention_all: format!("{mention_all}{id}}}"),
        guard: format!("{guard}{id}}}"),
        version: format!("{version}{id}}}"),
        expiry: format!("{expiry}{id}}}"),
    }
}

/// What a shared key is made of before the id and the closing `}`: for kind `l` (list) or `x` (index), the
/// prefixes of its live, mention-all, guard, version and expiry keys (`{prefix}l:{#`, …), which the read script
/// completes.
pub fn shared_key_prefixes(prefix: &str, kind: char) -> [String; 5] {
    ["", "a", "g", "v", "e"].map(|role| format!("{prefix}{kind}{role}:{{#"))
}

/// The list or index whose live seqs `key` holds (a key published on the change channel), if it is one.
pub fn shared_of_key(prefix: &str, key: &str) -> Option<ListId> {
    let rest = key.strip_prefix(prefix)?;
    let (kind, id) = rest.split_once(":{#")?;
    let id = id.strip_suffix('}')?.to_owned();
    match kind {
        "l" => Some(ListId::Broadcast(id)),
        "x" => Some(ListId::Index(id)),
        _ => None,
    }
}

/// The `r:` field's value of a read-diffused conversation the user is a member of: `"{lo} {muted} {feed}
/// {named…}"` and, when the user sent seqs above `lo` (only with a mark "unread from here"), `" o {own…}"`
/// ([`crate::core::hybrid::ShareQuery`]; the read script computes the share from it).
pub fn index_value(c: &ConvState) -> String {
    let lo = c.index_from().unwrap_or_default();
    let mut value = format!("{lo} {} {}", u8::from(c.muted), u8::from(c.feed));
    for seq in c.named.slice(lo, u64::MAX).iter() {
        value.push_str(&format!(" {seq}"));
    }
    let own = c.own.slice(lo, u64::MAX);
    if !own.is_empty() {
        value.push_str(" o");
        own.iter().for_each(|seq| value.push_str(&format!(" {seq}")));
    }
    value
}

/// The `r:` fields of a user's `conversations` (all of them, or those a patch names): one per read-diffused
/// conversation the user is a member of.
pub fn index_fields<'a>(conversations: impl IntoIterator<Item = (&'a str, &'a ConvState)>) -> BTreeMap<String, String> {
    let read_diffused = conversations.into_iter().filter(|(_, c)| c.index_from().is_some());
    read_diffused.map(|(id, c)| (id.to_owned(), index_value(c))).collect()
}

/// The Redis keys of a conversation's read receipts (contract v3, [`crate::core::receipts`]), all hash-tagged
/// `{#id}` so that one query's keys share a cluster slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptKeys {
    /// String: the sent, not recalled seqs as ranges, `"lo-hi lo-hi …"` (written by the fan-out).
    pub sent: String,
    /// Sorted set: current member → head at their latest join (written by the fold).
    pub joins: String,
    /// Sorted set: current member → cursor (written by the fold: a read ack moves one score).
    pub cursors: String,
    /// Hash: seq → sender, for the seqs whose sender is still in the membership it sent them in (the fold).
    pub senders: String,
    /// String, with `--projection-ttl` only: present while the other keys are complete (a refill from the
    /// checkpoint set it; they expire together, [`redis::receipts`]).
    pub complete: String,
    /// Hash, with `--projection-ttl` only: what was written while `complete` was missing (fields `j:{user}`,
    /// `s:{seq}`, `f:{root}:{user}`, `_sent`), which a refill leaves as written.
    pub written: String,
    /// v4, hash: reply seq → its thread's root (written by the fan-out; a reply's root never changes).
    pub roots: String,
    /// v4, hash: `{root}:{user}` → the user's cursor floor in that thread, as [`thread_entry`] pads it (the
    /// fold). Kept across leaving, as the floor is; the joins say who is a member.
    pub floors: String,
    /// v4, sorted set, every score 0: one [`thread_entry`] per (thread, user) of `floors`, so that the users whose
    /// floor in a thread reached a seq are one range by lex, O(log n + readers).
    pub threads: String,
}

impl ReceiptKeys {
    /// The nine keys in the order the receipts scripts take them: complete, written, sent, joins, cursors,
    /// senders, roots, floors, threads.
    pub fn all(&self) -> [&str; 9] {
        [
            &self.complete,
            &self.written,
            &self.sent,
            &self.joins,
            &self.cursors,
            &self.senders,
            &self.roots,
            &self.floors,
            &self.threads,
        ]
    }
}

/// The receipts keys of `conversation_id`: `{prefix}rl:{#id}`, `rj:`, `rc:`, `ro:`, `rm:`, `rw:`, and v4's `rr:`,
/// `rf:`, `rx:`.
pub fn receipt_keys(prefix: &str, conversation_id: &str) -> ReceiptKeys {
    let key = |kind: &str| receipt_key(prefix, kind, conversation_id);
    let (complete, written) = (key("rm"), key("rw"));
    let (roots, floors, threads) = (key("rr"), key("rf"), key("rx"));
    ReceiptKeys {
        sent: key("rl"),
        joins: key("rj"),
        cursors: key("rc"),
        senders: key("ro"),
        complete,
        written,
        roots,
        floors,
        threads,
    }
}

/// A seq padded to 16 digits (2^53 has 16), so that entries sort by lex as by number.
pub fn padded(seq: u64) -> String {
    format!("{seq:016}")
}

/// The `threads` entry of a user's floor in a thread ([`ReceiptKeys::threads`]): `"{root}:{floor}:{user}"`, root
/// and floor [`padded`].
pub fn thread_entry(root: u64, floor: u64, user: &str) -> String {
    format!("{}:{}:{user}", padded(root), padded(floor))
}

/// One receipts key of `conversation_id`, `{prefix}{kind}:{#id}` (`kind` one of those of [`receipt_keys`]), for a
/// caller that writes only some of them: the fold's publish writes one or two per changed conversation.
pub fn receipt_key(prefix: &str, kind: &str, conversation_id: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + kind.len() + conversation_id.len() + 4);
    for part in [prefix, kind, ":{#", conversation_id, "}"] {
        key.push_str(part);
    }
    key
}

/// A seq set as the receipts' `sent` string: `"lo-hi lo-hi …"`.
pub fn ranges_value(set: &crate::core::seqset::SeqSet) -> String {
    let ranges: Vec<String> = set.runs().map(|(lo, hi)| format!("{lo}-{hi}")).collect();
    ranges.join(" ")
}

/// The highest seq of a `sent` string (its last range's end); `None` when empty or malformed.
pub fn ranges_max(value: &str) -> Option<u64> {
    value.rsplit(' ').find(|r| !r.is_empty())?.split_once('-')?.1.parse().ok()
}

/// Whether `seq` is in a `sent` string; `None` when the string is malformed.
pub fn ranges_contain(value: &str, seq: u64) -> Option<bool> {
    for range in value.split(' ').filter(|r| !r.is_empty()) {
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi): (u64, u64) = (lo.parse().ok()?, hi.parse().ok()?);
        if (lo..=hi).contains(&seq) {
            return Some(true);
        }
    }
    Some(false)
}

/// The `e:` field's value of a member conversation, `None` when none of its counts expire.
pub fn expiry_value(c: &ConvState) -> Option<String> {
    let buckets = c.expiry_counts();
    if buckets.is_empty() || !c.is_member() {
        return None;
    }
    let mut value = format!("{} {} {}", u8::from(c.feed), u8::from(c.muted), u8::from(c.is_marked()));
    for (day, unread, mentions) in buckets {
        value.push_str(&format!(" {day}:{unread}:{mentions}"));
    }
    Some(value)
}

/// The `e:` fields of a user's `conversations` (all of them, or those a patch names): one per member conversation
/// whose counts expire.
pub fn expiry_fields<'a>(
    conversations: impl IntoIterator<Item = (&'a str, &'a ConvState)>,
) -> BTreeMap<String, String> {
    conversations.into_iter().filter_map(|(id, c)| Some((id.to_owned(), expiry_value(c)?))).collect()
}

/// Subtracts from `view` what the `e:` fields say has expired by UTC day `today` (a conversation's counts and
/// the totals, by the fold's rule [`Sums::of_member`]).
fn apply_expiry(view: &mut UserView, expiring: &[(String, ExpiryFields)], today: i64) {
    for (id, e) in expiring {
        let (x_unread, x_mentions) =
            e.buckets.iter().filter(|b| b.0 <= today).fold((0, 0), |a, b| (a.0 + b.1, a.1 + b.2));
        if (x_unread, x_mentions) == (0, 0) {
            continue;
        }
        let (unread, mentions) = match view.conversations.get(id) {
            Some(c) if !e.feed => (c.unread, c.mentions),
            _ => (x_unread, 0), // a feed's share of feed_unread is at least what expires of it
        };
        let (u, m) = (unread.saturating_sub(x_unread), mentions.saturating_sub(x_mentions));
        let before = Sums::of_member(unread, mentions, e.muted, e.feed, e.marked);
        let after = Sums::of_member(u, m, e.muted, e.feed, e.marked);
        Sums::replace_in(view, before, after);
        if let Some(c) = view.conversations.get_mut(id).filter(|_| !e.feed) {
            (c.unread, c.mentions) = (u, m);
        }
    }
}

/// An `e:` field, parsed.
struct ExpiryFields {
    feed: bool,
    muted: bool,
    marked: bool,
    /// (day, unread, mentions).
    buckets: Vec<(i64, u64, u64)>,
}

fn parse_expiry(value: &str) -> Option<ExpiryFields> {
    let mut parts = value.split(' ');
    let mut flag = || match parts.next()? {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    };
    let (feed, muted, marked) = (flag()?, flag()?, flag()?);
    let buckets = parts
        .map(|b| {
            let mut n = b.split(':');
            let day = n.next()?.parse().ok()?;
            Some((day, n.next()?.parse().ok()?, n.next()?.parse().ok()?)).filter(|_| n.next().is_none())
        })
        .collect::<Option<Vec<_>>>()?;
    Some(ExpiryFields { feed, muted, marked, buckets })
}

/// The namespace's change channel (pub/sub: every user hash and list key written is published on it) and, on a
/// single server, as a key, its push version counter: the last version handed out. Versions are microseconds of
/// the Redis server's clock or more, so they grow even across a Redis that lost everything. On Redis Cluster no key
/// is shared by every write (each script stays within one slot): each key's version is one more than its own last,
/// or the clock of the node holding it if that is larger ([`redis::WRITE_TEMPLATE`]), so push versions there assume
/// the nodes' clocks agree (NTP; see `docs/operations.md`, "Redis Cluster").
pub fn changes_key(prefix: &str) -> String {
    format!("{prefix}changes")
}

/// A user's push version: the largest of its hash's `_pv` and its lists' `V:` versions (0 when it has none).
/// It grows whenever anything the user sees changes.
pub fn push_version<'a>(fields: impl IntoIterator<Item = &'a (String, String)>) -> u64 {
    fields
        .into_iter()
        .filter(|(f, _)| {
            f == PUSH_VERSION_FIELD || f.starts_with(LIST_VERSION_PREFIX) || f.starts_with(INDEX_VERSION_PREFIX)
        })
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

/// The hash field of one conversation.
pub fn conversation_field(conversation_id: &str) -> String {
    format!("{CONVERSATION_PREFIX}{conversation_id}")
}

/// The totals field's value ([`Counts::encode`]: `"v2 {total_unread} … {total_notifications_unseen}"`).
pub fn totals_value(view: &UserView) -> String {
    Counts::of(view).encode()
}

/// A conversation field's value, with the newest unread seq of the user's state when known (0: none).
pub fn conversation_value(c: &ConversationView, newest: Option<u64>) -> String {
    let value = format!("{} {} {} {}", c.unread, c.mentions, u8::from(c.muted), u8::from(c.marked_unread));
    match newest {
        Some(seq) => format!("{value} {seq}"),
        None => value,
    }
}

/// The newest unread seq of each member conversation among a user's `conversations` (all of them, or those a
/// patch names): the fifth number of its `c:` field (0: nothing unread in the user's state).
pub fn newest_fields<'a>(conversations: impl IntoIterator<Item = (&'a str, &'a ConvState)>) -> BTreeMap<String, u64> {
    let members = conversations.into_iter().filter(|(_, c)| c.is_member());
    members.map(|(id, c)| (id.to_owned(), c.unread.max().unwrap_or(0))).collect()
}

/// A `c:` field's counts and the newest unread seq it holds (0: nothing unread, or a field an older build wrote
/// without it); `None` when the value is malformed.
pub fn newest_unread_of(value: &str) -> Option<(ConversationView, u64)> {
    let (unread, mentions, muted, marked_unread, newest) = conversation_numbers(value)?;
    Some((ConversationView { unread, mentions, muted, marked_unread, ..Default::default() }, newest))
}

/// An `r:` field's (read-diffused conversation, [`index_value`]) low bound, mute and feed flags; `None` when the
/// value is malformed.
pub fn index_entry_of(value: &str) -> Option<IndexEntry> {
    let mut numbers = value.split(' ');
    let lo = numbers.next()?.parse().ok()?;
    let flag = |s: Option<&str>| match s {
        Some("0") => Some(false),
        Some("1") => Some(true),
        _ => None,
    };
    Some(IndexEntry { lo, muted: flag(numbers.next())?, feed: flag(numbers.next())? })
}

/// What a user's `r:` field says of a read-diffused conversation, besides its mentions ([`index_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The seq above which the index's messages are the user's unread (its cursor, or its head at the join).
    pub lo: u64,
    /// Muted by the user.
    pub muted: bool,
    /// A feed (its unread counts in `feed_unread`).
    pub feed: bool,
}

/// What a user's hash holds besides the conversations: totals, notification categories and broadcast cursors,
/// as (field, value), always written whole (a handful of fields).
pub fn summary_fields(view: &UserView, cursors: &BTreeMap<String, u64>) -> Vec<(String, String)> {
    let mut fields = vec![(TOTALS_FIELD.to_owned(), totals_value(view))];
    for (cat, n) in &view.notifications {
        fields.push((format!("{NOTIFICATION_PREFIX}{cat}"), format!("{} {}", n.unread, n.unseen)));
    }
    for (id, cursor) in cursors {
        fields.push((format!("{CURSOR_PREFIX}{id}"), cursor.to_string()));
    }
    fields
}

/// Every stored field of a user's hash (totals, notifications, cursors, then conversations by id), without the
/// version.
pub fn encode_view(view: &UserView, cursors: &BTreeMap<String, u64>) -> Vec<(String, String)> {
    let mut fields = summary_fields(view, cursors);
    fields.extend(view.conversations.iter().map(|(id, c)| (conversation_field(id), conversation_value(c, None))));
    fields
}

/// [`encode_view`] with the `d:` and `t:` fields of `state` (contract v4): every field a whole write stores but
/// the `e:` and `r:` fields and the version.
pub fn encode_state_view(
    view: &UserView,
    cursors: &BTreeMap<String, u64>,
    state: &crate::core::fold::UserState,
) -> Vec<(String, String)> {
    let mut fields = encode_view(view, cursors);
    let (d, t) = details::detail_fields(state.conversations().iter().map(|(id, c)| (&**id, &**c)));
    fields.extend(d.into_iter().map(|(id, v)| (format!("{}{id}", details::DETAIL_PREFIX), v)));
    fields.extend(t.into_iter().map(|(id, v)| (format!("{}{id}", details::THREADS_PREFIX), v)));
    fields
}

/// Rebuilds a user's counts at UTC day `today` ([`crate::core::expiry::NEVER`]: as stored, nothing expired) from
/// the fields the read script returns (the hash's fields, plus a computed [`COUNT_PREFIX`] field per broadcast
/// cursor). An empty hash is the contract's zero state; unknown fields (such as the version) are ignored.
///
/// Errors: a value that is not the numbers described above.
pub fn decode_view<I>(user_id: &str, fields: I, today: i64) -> Result<UserView, MalformedHash>
where
    I: IntoIterator<Item = (String, String)>,
{
    let bad = |field: &str, value: &str| MalformedHash {
        user_id: user_id.to_owned(),
        field: field.to_owned(),
        reason: format!("has malformed value {value:?}"),
    };
    let mut view = UserView { user_id: user_id.to_owned(), ..UserView::default() };
    let mut shares: BTreeMap<String, IndexFields> = BTreeMap::new();
    let mut expiring = Vec::new();
    let (mut details_of, mut threads_of) = (BTreeMap::new(), BTreeMap::new());
    for (field, value) in fields {
        if field == TOTALS_FIELD {
            decode_totals(&mut view, &value).ok_or_else(|| bad(&field, &value))?;
        } else if let Some(id) = field.strip_prefix(CONVERSATION_PREFIX) {
            let (unread, mentions, muted, marked_unread, _) =
                conversation_numbers(&value).ok_or_else(|| bad(&field, &value))?;
            view.conversations.insert(
                id.to_owned(),
                ConversationView { unread, mentions, muted, marked_unread, ..Default::default() },
            );
        } else if let Some(cat) = field.strip_prefix(NOTIFICATION_PREFIX) {
            let (unread, unseen) = pair(&value).ok_or_else(|| bad(&field, &value))?;
            view.notifications.insert(cat.to_owned(), NotificationView { unread, unseen });
        } else if let Some(id) = field.strip_prefix(COUNT_PREFIX) {
            let unread: u64 = value.parse().map_err(|_| bad(&field, &value))?;
            view.broadcasts.insert(id.to_owned(), BroadcastView { unread, dot: unread > 0 });
        } else if let Some(id) = field.strip_prefix(INDEX_PREFIX) {
            let head = value.splitn(4, ' ').take(3).collect::<Vec<_>>().join(" ");
            let n = numbers::<u64>(&head).filter(|n| n[1] <= 1 && n[2] <= 1).ok_or_else(|| bad(&field, &value))?;
            shares.entry(id.to_owned()).or_default().cursor = Some(n);
        } else if let Some(id) = field.strip_prefix(EXPIRY_PREFIX) {
            expiring.push((id.to_owned(), parse_expiry(&value).ok_or_else(|| bad(&field, &value))?));
        } else if let Some(id) = field.strip_prefix(details::DETAIL_PREFIX) {
            details_of.insert(id.to_owned(), details::parse_detail(&value).ok_or_else(|| bad(&field, &value))?);
        } else if let Some(id) = field.strip_prefix(details::THREADS_PREFIX) {
            threads_of.insert(id.to_owned(), details::parse_threads(&value).ok_or_else(|| bad(&field, &value))?);
        } else if let Some(id) = field.strip_prefix(INDEX_COUNT_PREFIX) {
            let share = index_share_of(&value).ok_or_else(|| bad(&field, &value))?;
            shares.entry(id.to_owned()).or_default().counts = Some(share);
        }
    }
    for (id, share) in shares {
        if let IndexFields { cursor: Some([_, muted, feed]), counts: Some((unread, mentions, first)) } = share {
            IndexShare { muted: muted == 1, feed: feed == 1, unread, mentions, first }.add_to(&mut view, &id);
        }
    }
    apply_expiry(&mut view, &expiring, today);
    details::apply(&mut view, &details_of, &threads_of, today);
    Ok(view)
}

/// A `c:` field's value: `"{unread} {mentions} {muted} {marked} {newest}"`, or without `{newest}` as a v3 build
/// before it wrote it (read as 0), or also without `{marked}` as a v2 build did; flags are 0 or 1.
fn conversation_numbers(value: &str) -> Option<(u64, u64, bool, bool, u64)> {
    let n: Vec<u64> = value.split(' ').map(|n| n.parse().ok()).collect::<Option<_>>()?;
    match n[..] {
        [u, m, muted, marked, newest] if muted <= 1 && marked <= 1 => Some((u, m, muted == 1, marked == 1, newest)),
        [u, m, muted, marked] if muted <= 1 && marked <= 1 => Some((u, m, muted == 1, marked == 1, 0)),
        [u, m, muted] if muted <= 1 => Some((u, m, muted == 1, false, 0)),
        _ => None,
    }
}

/// What the read script returns of one read-diffused conversation: its `r:` field's first three numbers (lo,
/// muted, feed) and its computed `R:` share (unread, mentions).
#[derive(Default)]
struct IndexFields {
    cursor: Option<[u64; 3]>,
    counts: Option<(u64, u64, Option<u64>)>,
}

/// A computed `R:` field: `"{unread} {mentions} {first}"` (`first` 0: none), or without `{first}` as the read script
/// of a build before contract v4 returned it.
fn index_share_of(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let n: Vec<u64> = value.split(' ').map(|n| n.parse().ok()).collect::<Option<_>>()?;
    match n[..] {
        [unread, mentions] => Some((unread, mentions, None)),
        [unread, mentions, first] => Some((unread, mentions, (first > 0).then_some(first))),
        _ => None,
    }
}

/// The totals field ([`Counts::decode`]: its format's counters, or three or six numbers from earlier builds).
fn decode_totals(view: &mut UserView, value: &str) -> Option<()> {
    Counts::decode(value)?.set_in(view);
    Some(())
}

fn pair(value: &str) -> Option<(u64, u64)> {
    let (a, b) = value.split_once(' ')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Three numbers separated by single spaces, as the hash values and `_version` hold them; `None` otherwise.
pub fn numbers<T: std::str::FromStr>(value: &str) -> Option<[T; 3]> {
    let mut it = value.split(' ').map(|n| n.parse::<T>().ok());
    let out = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::expiry::NEVER;

    #[test]
    fn view_round_trips_through_fields() {
        let mut view = UserView {
            user_id: "a b{c}".into(),
            total_unread: 3,
            total_mentions: 1,
            unread_conversations: 1,
            ..Default::default()
        };
        view.conversations.insert(
            "team c:1/%".into(),
            ConversationView { unread: 3, mentions: 1, marked_unread: true, ..Default::default() },
        );
        view.conversations.insert("quiet".into(), ConversationView { unread: 9, muted: true, ..Default::default() });
        let fields = encode_view(&view, &BTreeMap::new());
        assert_eq!(fields[0], ("_totals".into(), "v3 3 1 1 0 0 0 0 0 0".into()));
        assert!(fields.contains(&("c:team c:1/%".into(), "3 1 0 1".into())), "unread mentions muted marked");
        let mut with_version = fields.clone();
        with_version.push((VERSION_FIELD.into(), "anything".into()));
        assert_eq!(decode_view("a b{c}", with_version, NEVER).unwrap(), view);
        assert_eq!(user_key("unread:", "a b{c}"), "unread:u:a b{c}");
    }

    #[test]
    fn read_diffused_shares_add_to_their_conversations_and_totals() {
        let fields = [
            ("_totals", "2 0 1 0 0 0"),
            ("c:big", "2 0 0"),
            ("r:big", "10 0 0 12 13"),
            ("R:big", "5 1"),
            ("c:quiet", "0 0 1"),
            ("r:quiet", "0 1 0"),
            ("R:quiet", "3 1"),
            ("r:feed", "3 0 1"),
            ("R:feed", "4 0"),
            ("c:new", "0 0 0"),
            ("r:new", "0 0 0"),
            ("R:new", "1 0"),
        ];
        let view = decode_view("u", fields.map(|(f, v)| (f.to_owned(), v.to_owned())), NEVER).unwrap();
        let c = |id: &str| {
            let c = &view.conversations[id];
            (c.unread, c.mentions, c.muted)
        };
        assert_eq!((c("big"), c("quiet"), c("new")), ((7, 1, false), (3, 1, true), (1, 0, false)));
        // big adds 5 (already unread), quiet is muted (mentions only), new becomes an unread conversation.
        assert_eq!((view.total_unread, view.total_mentions, view.unread_conversations), (8, 2, 2));
        assert_eq!(view.feed_unread, 4);
        assert!(decode_view("u", [("r:x".to_owned(), "1 2 0".to_owned())], NEVER).is_err(), "muted must be 0 or 1");
    }

    #[test]
    fn empty_hash_is_the_zero_state_and_garbage_is_an_error() {
        let zero = decode_view("nobody", Vec::new(), NEVER).unwrap();
        assert_eq!(zero, UserView { user_id: "nobody".into(), ..Default::default() });
        let v1 = decode_view("u", vec![("_totals".into(), "1 2 3".into())], NEVER).unwrap();
        assert_eq!((v1.total_unread, v1.total_mentions, v1.unread_conversations, v1.feed_unread), (1, 2, 3, 0));
        for (f, v) in [
            ("_totals", "1 2"),
            ("_totals", "1 2 3 4"),
            ("c:x", "1 1 2"),
            ("c:x", "a b c"),
            ("c:x", ""),
            ("n:x", "1"),
            ("B:x", "-1"),
        ] {
            assert!(decode_view("u", vec![(f.into(), v.into())], NEVER).is_err(), "{f}={v}");
        }
    }

    #[test]
    fn a_conversation_field_carries_its_newest_unread_seq_and_older_fields_read_without_it() {
        let c = ConversationView { unread: 3, mentions: 1, marked_unread: true, ..Default::default() };
        let value = conversation_value(&c, Some(42));
        assert_eq!(value, "3 1 0 1 42");
        assert_eq!(newest_unread_of(&value), Some((c, 42)));
        let read = |v: &str| decode_view("u", vec![("c:x".into(), v.into())], NEVER).unwrap().conversations["x"];
        assert_eq!(read(&value), c, "the view ignores the seq");
        assert_eq!(newest_unread_of(&conversation_value(&c, None)), Some((c, 0)), "a v3 field before it");
        let v2 = ConversationView { marked_unread: false, ..c };
        assert_eq!((read("3 1 0"), newest_unread_of("3 1 0")), (v2, Some((v2, 0))), "a v2 field");
        assert_eq!(newest_unread_of("3 1 0 1 x"), None);
        assert!(decode_view("u", vec![("c:x".into(), "3 1 0 1 4 5".into())], NEVER).is_err());
    }

    #[test]
    fn an_index_field_gives_its_low_bound_and_flags() {
        let value = index_value(&ConvState { feed: true, ..Default::default() });
        assert_eq!(index_entry_of(&value), Some(IndexEntry { lo: 0, muted: false, feed: true }), "{value}");
        assert_eq!(index_entry_of("17 1 0 18 20 o 19"), Some(IndexEntry { lo: 17, muted: true, feed: false }));
        for bad in ["", "17", "17 1", "17 2 0", "x 1 0", "-1 0 0"] {
            assert_eq!(index_entry_of(bad), None, "{bad}");
        }
    }
}
