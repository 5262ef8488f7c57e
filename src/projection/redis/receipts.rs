//! A conversation's read receipts in Redis (contract v3, "Read receipts"; the keys: [`receipt_keys`]).
//!
//! The fold writes each member's entries (head at the latest join, cursor, the seqs it sent) after the member's
//! user write is accepted; the fan-out writes the sent seqs. Without `--projection-ttl` these are plain commands
//! and the keys stay for good. With it, a conversation's receipts are a bounded cache like the user hashes:
//!
//! - every write and every read sets the same expiry on all six keys in one script, so they expire together,
//!   that long after the conversation's receipts last changed or were read;
//! - the `complete` key says they hold every member; a read that finds it missing answers [`Receipts::Cold`],
//!   and the reader refills them from the checkpoint ([`ReceiptsRefill`]: the fan-out's sent seqs and members,
//!   each member's checkpointed state) with [`REFILL_TEMPLATE`];
//! - a write that finds `complete` missing still applies, and notes what it wrote (`j:{user}`, `s:{seq}`,
//!   `_sent`) in the `written` hash; the fan-out's first write of a conversation new to it sets `complete`
//!   instead (whatever the keys hold was written since the conversation began). A refill leaves every noted item
//!   as written and takes the rest from the checkpoint. That is exact: an item not noted was last written before
//!   the keys expired, at least the ttl (5 minutes at the least) before, so the checkpoint holds it; a noted one
//!   was written since, from the writer's memory, which is newer than any checkpoint row the refill read. The
//!   script runs atomically, so a write lands either before the refill (noted, kept) or after it (on complete
//!   keys).

use redis::{Cmd, FromRedisValue, RedisError, Value};

use super::{redis_err, ProjectionResult, RedisProjection, UserWrite};
use crate::core::fold::{ConvState, OwnChange, UserState};
use crate::core::seqset::SeqSet;
use crate::projection::{padded, receipt_key, receipt_keys, ReceiptKeys};

/// Lua helpers of the receipts scripts: `expire(ttl)` sets the expiry of every key given (absent ones stay
/// absent; time is frozen while a script runs, so they get one deadline); `floor(root, f, user, note)` raises
/// `user`'s floor in the thread of `root` to `f` (both [`crate::projection::padded`]) in the `floors` hash and its
/// entry in the `threads` sorted set (a floor never goes down), calling `note(item)` when it writes.
macro_rules! helpers {
    () => {
        r#"local function expire(ttl)
  for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ttl) end
end
local function floor(root, f, user, note)
  local field = root .. ':' .. user
  local old = redis.call('HGET', KEYS[8], field)
  if old and tonumber(old) >= tonumber(f) then return end
  if old then redis.call('ZREM', KEYS[9], root .. ':' .. old .. ':' .. user) end
  redis.call('ZADD', KEYS[9], 0, root .. ':' .. f .. ':' .. user)
  redis.call('HSET', KEYS[8], field, f)
  note('f:' .. field)
end
"#
    };
}

/// One member's or the fan-out's receipts write. KEYS: [`ReceiptKeys::all`]. ARGV: ttl (ms; `0`: the keys do not
/// expire, nothing is noted), user, op (`j`: joined with ARGV[4] join head and ARGV[5] cursor; `x`: not a member;
/// `-`: membership unchanged; `s`: the fan-out's sent seqs ARGV[4], `""` for none, and ARGV[5] `1` when the
/// conversation is new ([`SentWrite::new`])), then the count and the seqs the user no longer sent, the count and
/// the seqs it sent, the count and the (root, floor) pairs of its thread floors that rose (v4, padded), the count
/// and the (reply, root) pairs of new replies (v4, the fan-out's). With a ttl, while `complete` is missing each
/// item written is noted in `written` (a reply's root never changes: a refill writes them all again); the sent
/// seqs of a new conversation set `complete` instead. Returns 1.
pub const WRITE_TEMPLATE: &str = concat!(
    helpers!(),
    r#"local ttl = tonumber(ARGV[1])
local complete = ttl == 0 or redis.call('EXISTS', KEYS[1]) == 1
local function noted(item) if not complete then redis.call('HSET', KEYS[2], item, 1) end end
local user, op = ARGV[2], ARGV[3]
if op == 'j' then
  redis.call('ZADD', KEYS[4], ARGV[4], user)
  redis.call('ZADD', KEYS[5], ARGV[5], user)
  noted('j:' .. user)
elseif op == 'x' then
  redis.call('ZREM', KEYS[4], user)
  redis.call('ZREM', KEYS[5], user)
  noted('j:' .. user)
elseif op == 's' then
  if ARGV[4] == '' then redis.call('DEL', KEYS[3]) else redis.call('SET', KEYS[3], ARGV[4]) end
  if ARGV[5] == '1' then
    redis.call('SET', KEYS[1], '1')
    redis.call('DEL', KEYS[2])
    complete = true
  else
    noted('_sent')
  end
end
local i = 6
local n = tonumber(ARGV[i])
for j = i + 1, i + n do
  redis.call('HDEL', KEYS[6], ARGV[j])
  noted('s:' .. ARGV[j])
end
i = i + n + 1
n = tonumber(ARGV[i])
for j = i + 1, i + n do
  redis.call('HSET', KEYS[6], ARGV[j], user)
  noted('s:' .. ARGV[j])
end
i = i + n + 1
n = tonumber(ARGV[i])
for j = 1, n do floor(ARGV[i + 2 * j - 1], ARGV[i + 2 * j], user, noted) end
i = i + 2 * n + 1
n = tonumber(ARGV[i])
for j = 1, n do redis.call('HSET', KEYS[7], ARGV[i + 2 * j - 1], ARGV[i + 2 * j]) end
if ttl > 0 then expire(ttl) end
return 1
"#
);

/// A receipts read with `--projection-ttl`. KEYS: [`ReceiptKeys::all`]. ARGV: ttl (ms), requester (`""`: none),
/// `"({seq}"`, seq. Returns nil when `complete` is missing (the keys expired), else sets the expiry again and
/// returns what [`RedisProjection::read_receipts`] reads without a ttl: the requester's join head, the sent seqs,
/// the members who joined before the seq, those whose cursor is below it, its sender, the member count, and its
/// thread's root when it is a reply (v4).
pub const READ_TEMPLATE: &str = concat!(
    helpers!(),
    r#"if redis.call('EXISTS', KEYS[1]) == 0 then return false end
expire(tonumber(ARGV[1]))
return {redis.call('ZSCORE', KEYS[4], ARGV[2]), redis.call('GET', KEYS[3]),
  redis.call('ZCOUNT', KEYS[4], '-inf', ARGV[3]), redis.call('ZCOUNT', KEYS[5], '-inf', ARGV[3]),
  redis.call('HGET', KEYS[6], ARGV[4]), redis.call('ZCARD', KEYS[4]), redis.call('HGET', KEYS[7], ARGV[4])}
"#
);

/// v4: the readers of reply `seq` (`CONTRACT.md` § v4, "Threads": the recipients whose thread cursor reached it).
/// KEYS: joins, threads ([`ReceiptKeys`]). ARGV: the root and seq, padded, and the reply's sender (`""`: none
/// kept). Returns the users whose floor in the thread is at or above the seq (one range by lex), who are members
/// that joined before it, other than the sender: O(log n + users with such a floor).
pub const READERS_TEMPLATE: &str = r#"local seq = tonumber(ARGV[2])
local readers = {}
local entries = redis.call('ZRANGE', KEYS[2], '[' .. ARGV[1] .. ':' .. ARGV[2], '(' .. ARGV[1] .. ';', 'BYLEX')
for _, entry in ipairs(entries) do
  local user = string.sub(entry, 35)
  local joined = redis.call('ZSCORE', KEYS[1], user)
  if user ~= ARGV[3] and joined and tonumber(joined) < seq then table.insert(readers, user) end
end
return readers
"#;

/// A refill from the checkpoint ([`ReceiptsRefill`]). KEYS: [`ReceiptKeys::all`]. ARGV: ttl (ms), the sent
/// seqs (`""`: none), the member count and (user, join head, cursor) of each, the sender count and (seq, user) of
/// each, the floor count and (user, root, floor) of each (padded), the reply count and (reply, root) of each. Does
/// nothing and returns 0 when `complete` is present (another refill came first). Otherwise every item not noted in
/// `written` becomes the checkpoint's (entries the checkpoint lacks are removed; a floor only rises), `complete`
/// is set, `written` deleted, the expiry set; returns 1.
pub const REFILL_TEMPLATE: &str = concat!(
    helpers!(),
    r#"if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local function fresh(item) return redis.call('HEXISTS', KEYS[2], item) == 0 end
local function quiet() end
if fresh('_sent') then
  if ARGV[2] == '' then redis.call('DEL', KEYS[3]) else redis.call('SET', KEYS[3], ARGV[2]) end
end
local i, n = 4, tonumber(ARGV[3])
local members, senders = {}, {}
for j = 0, n - 1 do
  local user = ARGV[i + 3 * j]
  members[user] = true
  if fresh('j:' .. user) then
    redis.call('ZADD', KEYS[4], ARGV[i + 3 * j + 1], user)
    redis.call('ZADD', KEYS[5], ARGV[i + 3 * j + 2], user)
  end
end
for _, user in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  if not members[user] and fresh('j:' .. user) then
    redis.call('ZREM', KEYS[4], user)
    redis.call('ZREM', KEYS[5], user)
  end
end
i = i + 3 * n
n = tonumber(ARGV[i])
for j = 1, n do
  local seq = ARGV[i + 2 * j - 1]
  senders[seq] = true
  if fresh('s:' .. seq) then redis.call('HSET', KEYS[6], seq, ARGV[i + 2 * j]) end
end
for _, seq in ipairs(redis.call('HKEYS', KEYS[6])) do
  if not senders[seq] and fresh('s:' .. seq) then redis.call('HDEL', KEYS[6], seq) end
end
i = i + 2 * n + 1
n = tonumber(ARGV[i])
for j = 0, n - 1 do floor(ARGV[i + 3 * j + 2], ARGV[i + 3 * j + 3], ARGV[i + 3 * j + 1], quiet) end
i = i + 3 * n + 1
n = tonumber(ARGV[i])
for j = 1, n do redis.call('HSET', KEYS[7], ARGV[i + 2 * j - 1], ARGV[i + 2 * j]) end
redis.call('SET', KEYS[1], '1')
redis.call('DEL', KEYS[2])
expire(tonumber(ARGV[1]))
return 1
"#
);

/// What a refill writes of a conversation's receipts: what the checkpoint holds of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReceiptsRefill {
    /// The fan-out's sent, not recalled seqs ([`crate::projection::ranges_value`]; `""`: none).
    pub sent: String,
    /// Each current member: (user, head at the latest join, cursor) ([`ConvState::receipt_entry`]).
    pub members: Vec<(String, u64, u64)>,
    /// Each sent seq whose sender is still in the membership it sent it in: (seq, sender).
    pub senders: Vec<(u64, String)>,
    /// v4: each member's thread floors: (user, root, floor).
    pub floors: Vec<(String, u64, u64)>,
    /// v4: every reply → its thread's root (the fan-out's).
    pub replies: Vec<(u64, u64)>,
}

impl ReceiptsRefill {
    /// Adds `user`'s part, from its state in the conversation (`None`: none kept, nothing added).
    pub fn add(&mut self, user: &str, c: Option<&ConvState>) {
        let Some(c) = c else { return };
        if let Some((joined, cursor)) = c.receipt_entry() {
            self.members.push((user.to_owned(), joined, cursor));
        }
        self.senders.extend(c.own.iter().map(|seq| (seq, user.to_owned())));
        self.floors.extend(c.threads.floors().map(|(root, floor)| (user.to_owned(), root, floor)));
    }
}

/// One conversation's part of a user's write that the conversation's read receipts follow (contract v3,
/// [`crate::projection::receipt_keys`]): the user's membership there, and the seqs it sent as a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptWrite {
    /// The conversation.
    pub conversation_id: String,
    /// (head at the latest join, cursor) while a member; `None`: not a member (taken out of the receipts).
    pub member: Option<(u64, u64)>,
    /// Whether `member` changed since the last write (always, in a whole write): when not, its two sorted-set
    /// entries are left as they are. A message received changes neither, so a patch usually writes none.
    pub member_changed: bool,
    /// Seqs the user sent as a member since the last write (or all of them, in a whole write).
    pub own_added: SeqSet,
    /// Seqs no longer the user's as a member (its membership ended, or a recall).
    pub own_removed: SeqSet,
    /// v4: the user's floors in the conversation's threads that rose since the last write (or all of them, in a
    /// whole write): (root, floor). Kept whether or not the user is a member.
    pub floors: Vec<(u64, u64)>,
}

impl ReceiptWrite {
    /// The write of `c` (a user's state in `conversation_id`, `None` when none is kept), with `own_added` and
    /// `own_removed` as given.
    pub fn of(conversation_id: &str, c: Option<&ConvState>, own_added: SeqSet, own_removed: SeqSet) -> Self {
        let (conversation_id, member) = (conversation_id.to_owned(), c.and_then(ConvState::receipt_entry));
        let floors = c.map(|c| c.threads.floors().collect()).unwrap_or_default();
        Self { conversation_id, member, member_changed: true, own_added, own_removed, floors }
    }

    /// Every conversation of `state` whole: memberships and all own seqs.
    pub fn whole(state: &UserState) -> Vec<Self> {
        let each = state.conversations().iter();
        each.map(|(id, c)| Self::of(id, Some(c), c.own.clone(), SeqSet::new())).collect()
    }

    /// The conversations of `state` named in `changed`, with the own seqs and memberships changed since the last
    /// write ([`UserState::own_changes`]). Where the user is not a member the entries are always taken out (a
    /// few ZREMs of what is mostly absent): a user whose state emptied is dropped with its notes, and may come
    /// back before the next write with an entry there but no note of the membership that ended.
    pub fn changed<'a>(state: Option<&UserState>, changed: impl IntoIterator<Item = &'a String>) -> Vec<Self> {
        let change = |id: &str| state.and_then(|s| s.own_changes().get(id)).cloned().unwrap_or_default();
        let conv = |id: &str| state.and_then(|s| s.conversations().get(id)).map(|c| &**c);
        let write = |id: &String| {
            let (OwnChange { added, removed, membership, threads }, c) = (change(id), conv(id));
            let write = Self::of(id, c, added, removed);
            let floor = |root: &u64| c.map_or(0, |c| c.threads.floor(*root));
            let floors = threads.iter().map(|root| (*root, floor(root))).filter(|(_, f)| *f > 0).collect();
            Self { member_changed: membership || write.member.is_none(), floors, ..write }
        };
        changed.into_iter().map(write).collect()
    }
}

/// Most members of a conversation whose readers `?list=true` names: 256.
pub const MAX_LISTED: u64 = 256;

/// What [`RedisProjection::read_receipts`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipts {
    /// The keys expired (`--projection-ttl`): refill them from the checkpoint ([`ReceiptsRefill`]), then read
    /// again.
    Cold,
    /// The requesting user is not a current member.
    NotMember,
    /// The seq was never sent, was a duplicate or was recalled.
    NotSent,
    /// Readers were asked for in a conversation of more than [`MAX_LISTED`] members (this many).
    TooManyToList(u64),
    /// The counts, and the readers when asked for.
    Found {
        /// Recipients who read it.
        read: u64,
        /// Current members but the sender who joined before it.
        recipients: u64,
        /// The readers' ids, sorted, when asked for.
        readers: Option<Vec<String>>,
    },
}

/// The part of `r` that raises thread floors, nothing else.
fn floors_only(r: &ReceiptWrite) -> ReceiptWrite {
    let (own_added, own_removed) = (SeqSet::new(), SeqSet::new());
    ReceiptWrite { conversation_id: r.conversation_id.clone(), member: None, own_added, own_removed, ..r.clone() }
}

/// A reply of a receipts read, typed.
fn parsed<T: FromRedisValue>(v: &Value) -> ProjectionResult<T> {
    redis::from_redis_value_ref(v).map_err(|e| redis_err("reading receipts")(RedisError::from(e)))
}

/// A conversation's sent-seqs value is not ranges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("receipts of conversation {conversation_id:?}: the sent seqs are not ranges")]
pub struct MalformedRanges {
    /// The conversation.
    pub conversation_id: String,
}

/// The fan-out's writes of a conversation's sent seqs ([`ReceiptKeys::sent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentWrite {
    /// The conversation.
    pub conversation_id: String,
    /// Its sent, not recalled seqs ([`crate::projection::ranges_value`]).
    pub ranges: String,
    /// The conversation is new to the fan-out since its last checkpoint (`--projection-ttl`): every receipts entry
    /// was written since it began, so this write marks its receipts keys complete.
    pub new: bool,
    /// v4: replies → their thread's root, not written yet (all of them, in a whole write).
    pub replies: Vec<(u64, u64)>,
    /// v4: the conversation's highest `reaction_seq` so far, 0 before any (written to `rh:` when above 0): what
    /// marking its reactions seen reads up to by default ([`RedisProjection::reaction_heads`]).
    pub reaction_head: u64,
}

impl SentWrite {
    /// The write of conversation `id`'s sent seqs, with no reply (the caller adds those not written yet).
    pub fn of(id: &str, c: &crate::core::fanout::ConversationState) -> Self {
        let (conversation_id, ranges) = (id.to_owned(), crate::projection::ranges_value(&c.sent));
        SentWrite { conversation_id, ranges, new: false, replies: Vec::new(), reaction_head: c.reaction_head }
    }

    /// The whole write of conversation `id`: its sent seqs and every reply.
    pub fn whole(id: &str, c: &crate::core::fanout::ConversationState) -> Self {
        let replies = c.roots.iter().map(|(seq, root)| (*seq, *root)).collect();
        SentWrite { replies, ..Self::of(id, c) }
    }
}

/// A receipts read's reply, as the six replies of the plain commands.
fn read_replies(v: Value) -> ProjectionResult<Option<Vec<Value>>> {
    match v {
        Value::Nil => Ok(None),
        other => parsed(&other).map(Some),
    }
}

impl RedisProjection {
    /// Applies the receipts part of accepted user writes ([`ReceiptWrite`]): plain commands, or with
    /// `--projection-ttl` one call of [`WRITE_TEMPLATE`] per conversation changed.
    ///
    /// Errors: [`crate::projection::ProjectionError::Redis`].
    pub(super) async fn write_receipts<'a>(
        &self,
        accepted: impl Iterator<Item = &'a UserWrite>,
    ) -> ProjectionResult<()> {
        let cmds: Vec<Cmd> = if self.expires() {
            accepted.flat_map(|w| w.receipts.iter().filter_map(|r| self.receipt_script(&w.user_id, r))).collect()
        } else {
            self.receipt_cmds(accepted)
        };
        if !cmds.is_empty() {
            self.run_scripts::<Value>(|| cmds.clone()).await.map_err(redis_err("writing receipts"))?;
        }
        Ok(())
    }

    /// The plain receipts commands of accepted user writes: their memberships' join heads and cursors, their own
    /// seqs. The memberships are gathered by conversation, one `ZADD` (or `ZREM`) of every member written to each
    /// sorted set: a million members joining one conversation is a few thousand commands, not two million. Each
    /// user is written once in a call, so the order of its entries against other users' does not matter.
    fn receipt_cmds<'a>(&self, accepted: impl Iterator<Item = &'a UserWrite>) -> Vec<Cmd> {
        let mut members: std::collections::BTreeMap<&str, (Cmd, Cmd, Cmd, Cmd)> = Default::default();
        let mut cmds = Vec::new();
        // Only the keys written are built: a message received usually writes none, one sent only `ro:`.
        let key = |kind: &str, r: &ReceiptWrite| receipt_key(&self.prefix, kind, &r.conversation_id);
        for (w, r) in accepted.flat_map(|w| w.receipts.iter().map(move |r| (w, r))) {
            if r.member_changed {
                let (joins, cursors, left_joins, left_cursors) =
                    members.entry(&r.conversation_id).or_insert_with(|| {
                        let cmd = |name: &str, key: &str| redis::cmd(name).arg(key).clone();
                        let (j, c) = (key("rj", r), key("rc", r));
                        (cmd("ZADD", &j), cmd("ZADD", &c), cmd("ZREM", &j), cmd("ZREM", &c))
                    });
                match r.member {
                    Some((joined, cursor)) => {
                        joins.arg(joined).arg(&w.user_id);
                        cursors.arg(cursor).arg(&w.user_id);
                    }
                    None => {
                        left_joins.arg(&w.user_id);
                        left_cursors.arg(&w.user_id);
                    }
                }
            }
            if !r.own_removed.is_empty() {
                let seqs: Vec<u64> = r.own_removed.iter().collect();
                cmds.push(redis::cmd("HDEL").arg(key("ro", r)).arg(seqs).clone());
            }
            if !r.floors.is_empty() {
                // Raising a floor reads the old entry first: one script call (no expiry, nothing noted).
                cmds.extend(self.receipt_script(&w.user_id, &ReceiptWrite { member_changed: false, ..floors_only(r) }));
            }
            if !r.own_added.is_empty() {
                let mut hset = redis::cmd("HSET");
                hset.arg(key("ro", r));
                r.own_added.iter().for_each(|seq| {
                    hset.arg(seq).arg(&w.user_id);
                });
                cmds.push(hset);
            }
        }
        // A command with only its key has nothing to write.
        let written = members.into_values().flat_map(|(a, b, c, d)| [a, b, c, d]);
        cmds.extend(written.filter(|cmd| cmd.args_iter().count() > 2));
        cmds
    }

    /// One call of [`WRITE_TEMPLATE`] for `user`'s receipts write `r`; `None` when it changes nothing.
    fn receipt_script(&self, user: &str, r: &ReceiptWrite) -> Option<Cmd> {
        let (op, joined, cursor) = match (r.member_changed, r.member) {
            (false, _) => ("-", 0, 0),
            (true, Some((joined, cursor))) => ("j", joined, cursor),
            (true, None) => ("x", 0, 0),
        };
        if op == "-" && r.own_removed.is_empty() && r.own_added.is_empty() && r.floors.is_empty() {
            return None;
        }
        let keys = receipt_keys(&self.prefix, &r.conversation_id);
        let mut cmd = super::evalsha(super::RECEIPTS_WRITE, &keys.all());
        cmd.arg(self.ttl_ms).arg(user).arg(op).arg(joined).arg(cursor);
        for seqs in [&r.own_removed, &r.own_added] {
            cmd.arg(seqs.len()).arg(seqs.iter().collect::<Vec<_>>());
        }
        cmd.arg(r.floors.len());
        for (root, floor) in &r.floors {
            cmd.arg(padded(*root)).arg(padded(*floor));
        }
        cmd.arg(0);
        Some(cmd)
    }

    /// Writes conversations' sent seqs (receipts, v3): one `SET` each (a `DEL` when none); with
    /// `--projection-ttl` one call of [`WRITE_TEMPLATE`] each.
    ///
    /// Errors: [`crate::projection::ProjectionError::Redis`].
    pub async fn write_sent(&self, writes: &[SentWrite]) -> ProjectionResult<()> {
        let cmds = |w: &SentWrite| {
            let keys = receipt_keys(&self.prefix, &w.conversation_id);
            let mut cmds = Vec::with_capacity(3);
            if w.reaction_head > 0 {
                let mut set = redis::cmd("SET");
                set.arg(receipt_key(&self.prefix, "rh", &w.conversation_id)).arg(w.reaction_head);
                if self.expires() {
                    set.arg("PX").arg(self.ttl_ms);
                }
                cmds.push(set);
            }
            match (self.expires(), w.ranges.is_empty()) {
                (true, _) => {
                    let mut cmd = super::evalsha(super::RECEIPTS_WRITE, &keys.all());
                    cmd.arg(self.ttl_ms).arg("").arg("s").arg(&w.ranges).arg(u8::from(w.new)).arg(0).arg(0).arg(0);
                    cmd.arg(w.replies.len());
                    w.replies.iter().for_each(|(seq, root)| {
                        cmd.arg(seq).arg(root);
                    });
                    cmds.push(cmd);
                    return cmds;
                }
                (false, true) => cmds.push(redis::cmd("DEL").arg(&keys.sent).clone()),
                (false, false) => cmds.push(redis::cmd("SET").arg(&keys.sent).arg(&w.ranges).clone()),
            }
            if !w.replies.is_empty() {
                let mut hset = redis::cmd("HSET");
                hset.arg(&keys.roots);
                w.replies.iter().for_each(|(seq, root)| {
                    hset.arg(seq).arg(root);
                });
                cmds.push(hset);
            }
            cmds
        };
        if !writes.is_empty() {
            self.run_scripts::<Value>(|| writes.iter().flat_map(cmds).collect())
                .await
                .map_err(redis_err("writing sent seqs"))?;
        }
        Ok(())
    }

    /// The read receipts of message `seq` of `conversation_id` (contract v3): three O(log members) counts and a
    /// lookup, in one round trip; with `list`, the readers' ids too (conversations of at most [`MAX_LISTED`]
    /// members). `requester`: a user who must be a current member (`None`: a service). With `--projection-ttl`
    /// the read sets the keys' expiry again, and answers [`Receipts::Cold`] when they expired.
    ///
    /// Errors: [`crate::projection::ProjectionError::Redis`] when Redis fails; [`crate::projection::ProjectionError::MalformedSent`] when a sent-seqs
    /// value is not ranges (a bug or a foreign writer, not an outage).
    pub async fn read_receipts(
        &self,
        conversation_id: &str,
        seq: u64,
        requester: Option<&str>,
        list: bool,
    ) -> ProjectionResult<Receipts> {
        let keys = receipt_keys(&self.prefix, conversation_id);
        let below = format!("({seq}");
        let requester_id = requester.unwrap_or_default();
        let v: Vec<Value> = if self.expires() {
            let mut cmd = super::evalsha(super::RECEIPTS_READ, &keys.all());
            cmd.arg(self.ttl_ms).arg(requester_id).arg(&below).arg(seq);
            let reply = self.run_scripts::<Value>(|| vec![cmd.clone()]).await.map_err(redis_err("reading receipts"))?;
            match read_replies(reply.into_iter().next().unwrap_or(Value::Nil))? {
                Some(v) => v,
                None => return Ok(Receipts::Cold),
            }
        } else {
            let cmds = vec![
                redis::cmd("ZSCORE").arg(&keys.joins).arg(requester_id).clone(),
                redis::cmd("GET").arg(&keys.sent).clone(),
                redis::cmd("ZCOUNT").arg(&keys.joins).arg("-inf").arg(&below).clone(),
                redis::cmd("ZCOUNT").arg(&keys.cursors).arg("-inf").arg(&below).clone(),
                redis::cmd("HGET").arg(&keys.senders).arg(seq).clone(),
                redis::cmd("ZCARD").arg(&keys.joins).clone(),
                redis::cmd("HGET").arg(&keys.roots).arg(seq).clone(),
            ];
            self.conn.run_all(cmds).await.map_err(redis_err("reading receipts"))?
        };
        self.receipts_from(&keys, conversation_id, seq, requester.is_some(), list, &v).await
    }

    /// The receipts of `seq` from the six replies `v` of a read ([`READ_TEMPLATE`]), the readers read with `list`.
    async fn receipts_from(
        &self,
        keys: &ReceiptKeys,
        conversation_id: &str,
        seq: u64,
        by_member: bool,
        list: bool,
        v: &[Value],
    ) -> ProjectionResult<Receipts> {
        let parse = |i: usize| v.get(i).unwrap_or(&Value::Nil);
        let member: Option<f64> = parsed(parse(0))?;
        if by_member && member.is_none() {
            return Ok(Receipts::NotMember);
        }
        let sent: Option<String> = parsed(parse(1))?;
        let malformed = || MalformedRanges { conversation_id: conversation_id.to_owned() };
        if !crate::projection::ranges_contain(sent.as_deref().unwrap_or_default(), seq).ok_or_else(malformed)? {
            return Ok(Receipts::NotSent);
        }
        let (before, unread): (u64, u64) = (parsed(parse(2))?, parsed(parse(3))?);
        let sender: Option<String> = parsed(parse(4))?;
        let members: u64 = parsed(parse(5))?;
        let own = u64::from(sender.is_some());
        let root: Option<u64> = parsed(parse(6))?;
        let (read, recipients) = (before.saturating_sub(unread + own), before.saturating_sub(own));
        if list && members > MAX_LISTED {
            return Ok(Receipts::TooManyToList(members));
        }
        let readers = match (root, list) {
            (Some(root), _) => Some(self.thread_readers(keys, root, seq, sender.as_deref()).await?),
            (None, false) => None,
            (None, true) => Some(self.readers(keys, seq, sender.as_deref()).await?),
        };
        // A reply's readers are counted by thread cursor (§ v4), the main timeline's by the conversation's.
        let read = if root.is_some() { readers.as_ref().map_or(0, |r| r.len() as u64) } else { read };
        Ok(Receipts::Found { read, recipients, readers: readers.filter(|_| list) })
    }

    /// v4: the readers of reply `seq` in the thread of `root` ([`READERS_TEMPLATE`]), sorted.
    async fn thread_readers(
        &self,
        keys: &ReceiptKeys,
        root: u64,
        seq: u64,
        sender: Option<&str>,
    ) -> ProjectionResult<Vec<String>> {
        let mut cmd = super::evalsha(super::RECEIPTS_READERS, &[&keys.joins, &keys.threads]);
        cmd.arg(padded(root)).arg(padded(seq)).arg(sender.unwrap_or_default());
        let reply =
            self.run_scripts::<Vec<String>>(|| vec![cmd.clone()]).await.map_err(redis_err("reading receipts"))?;
        let mut readers = reply.into_iter().next().unwrap_or_default();
        readers.sort_unstable();
        Ok(readers)
    }

    /// The members who read `seq`: joined before it, cursor at or above it, not its sender; sorted.
    async fn readers(&self, keys: &ReceiptKeys, seq: u64, sender: Option<&str>) -> ProjectionResult<Vec<String>> {
        let cmds = vec![
            redis::cmd("ZRANGE").arg(&keys.joins).arg("-inf").arg(format!("({seq}")).arg("BYSCORE").clone(),
            redis::cmd("ZRANGE").arg(&keys.cursors).arg(seq).arg("+inf").arg("BYSCORE").clone(),
        ];
        let v: Vec<Vec<String>> = self.conn.run_all(cmds).await.map_err(redis_err("reading receipts"))?;
        let joined: std::collections::HashSet<&String> = v[0].iter().collect();
        let mut readers: Vec<String> =
            v[1].iter().filter(|u| joined.contains(u) && Some(u.as_str()) != sender).cloned().collect();
        readers.sort_unstable();
        Ok(readers)
    }

    /// v4: each conversation's newest sent, not recalled seq, from its sent seqs (`rl:`), in one pipelined round
    /// trip; `None` where Redis holds none (none sent, or expired under `--projection-ttl`).
    ///
    /// Errors: [`crate::projection::ProjectionError::Redis`].
    pub async fn sent_heads(&self, conversation_ids: &[&str]) -> ProjectionResult<Vec<Option<u64>>> {
        let values: Vec<Option<String>> = self.get_each("rl", conversation_ids, "reading sent seqs").await?;
        Ok(values.iter().map(|v| v.as_deref().and_then(crate::projection::ranges_max)).collect())
    }

    /// v4: each conversation's highest `reaction_seq` as the fan-out last wrote it (`rh:{#id}`), `None` when
    /// missing (no reaction yet, or expired under `--projection-ttl`: the checkpoint knows it).
    ///
    /// Errors: [`crate::projection::ProjectionError::Redis`].
    pub async fn reaction_heads(&self, conversation_ids: &[&str]) -> ProjectionResult<Vec<Option<u64>>> {
        self.get_each("rh", conversation_ids, "reading reaction heads").await
    }

    /// The string key `kind` of each conversation ([`receipt_key`]), `None` where missing, in one pipelined round
    /// trip (one `GET` per key: their slots differ on Redis Cluster). `doing` names the read in an error.
    async fn get_each<T: FromRedisValue + Send + 'static>(
        &self,
        kind: &str,
        conversation_ids: &[&str],
        doing: &'static str,
    ) -> ProjectionResult<Vec<Option<T>>> {
        let cmds = conversation_ids.iter().map(|id| redis::cmd("GET").arg(receipt_key(&self.prefix, kind, id)).clone());
        self.conn.run_all(cmds.collect()).await.map_err(redis_err(doing))
    }

    /// Refills `conversation_id`'s expired receipts with `refill` (what the checkpoint holds), keeping what was
    /// written since they expired ([`REFILL_TEMPLATE`]). Returns false when another refill came first (nothing
    /// written).
    ///
    /// Errors: [`crate::projection::ProjectionError::Redis`].
    pub async fn refill_receipts(&self, conversation_id: &str, refill: &ReceiptsRefill) -> ProjectionResult<bool> {
        let keys = receipt_keys(&self.prefix, conversation_id);
        let mut cmd = super::evalsha(super::RECEIPTS_REFILL, &keys.all());
        cmd.arg(self.ttl_ms.max(1)).arg(&refill.sent).arg(refill.members.len());
        for (user, joined, cursor) in &refill.members {
            cmd.arg(user).arg(joined).arg(cursor);
        }
        cmd.arg(refill.senders.len());
        for (seq, user) in &refill.senders {
            cmd.arg(seq).arg(user);
        }
        cmd.arg(refill.floors.len());
        for (user, root, floor) in &refill.floors {
            cmd.arg(user).arg(padded(*root)).arg(padded(*floor));
        }
        cmd.arg(refill.replies.len());
        for (seq, root) in &refill.replies {
            cmd.arg(seq).arg(root);
        }
        let done: Vec<i64> = self.run_scripts(|| vec![cmd.clone()]).await.map_err(redis_err("refilling receipts"))?;
        Ok(done.first() == Some(&1))
    }
}
