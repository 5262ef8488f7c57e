//! Writing and reading the projection in Redis (layout in [`super`]).
//!
//! Users' writes are `EVALSHA`s of [`WRITE_TEMPLATE`], [`USERS_PER_CALL`] users to a call on a single server: for
//! each user it compares the version the write carries with the `_version` field and applies the totals, the
//! changed conversation fields and the deleted ones only when the write is not older, all atomically. A flush
//! pipelines the writes of many users in one round trip (on a Redis
//! Cluster: concurrent calls, each to its slot's master, [`super::conn`]). A broadcast
//! list's (or a read-diffused conversation's index's) changes are one `EVALSHA` of [`LIST_TEMPLATE`] per list,
//! guarded by the fan-out task's lease generation; a user's read is one `EVALSHA` of [`READ_TEMPLATE`], which
//! combines the user's cursors with the lists and the indexes.

mod receipts;

pub use receipts::{MalformedRanges, ReceiptWrite, Receipts, ReceiptsRefill, SentWrite, MAX_LISTED};

use std::collections::BTreeMap;

use std::sync::LazyLock;

use redis::{Cmd, FromRedisValue, RedisError, Value};

use super::conn::Conn;
use super::{
    changes_key, decode_view, push_version, shared_key_prefixes, shared_keys, user_key, ProjectionError,
    ProjectionVersion, CONVERSATION_PREFIX, COUNT_PREFIX, INDEX_COUNT_PREFIX, INDEX_PREFIX, INDEX_VERSION_PREFIX,
    LIST_VERSION_PREFIX, VERSION_FIELD,
};
use crate::checkpoint::Stage;
use crate::core::broadcast::{ListId, ListOp, NoLists};
use crate::core::contract::{ConversationView, UserView};
use crate::core::fold::UserState;

/// The `map_err` of every command: the client's error with what the projection was doing.
fn redis_err(doing: &'static str) -> impl FnOnce(RedisError) -> ProjectionError {
    move |source| ProjectionError::Redis { doing, source }
}

/// A result of the projection.
pub type ProjectionResult<T> = Result<T, ProjectionError>;

/// Lua that sets `v` to the key's next push version: with a counter `KEYS[$k]` (a single server: the namespace's,
/// [`super::changes_key`]) one more than the counter's last, else (Redis Cluster, where no key is shared by every
/// write) one more than `$own`, the key's own last version; or the server's clock in µs if that is larger, so
/// versions only grow, even after Redis lost everything.
macro_rules! next_push_version {
    ($k:literal, $own:literal) => {
        concat!(
            "\nlocal t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000000 + tonumber(t[2])\nlocal v\n",
            "if KEYS[",
            $k,
            "] then v = redis.call('INCR', KEYS[",
            $k,
            "]) else v = tonumber(",
            $own,
            " or '0') + 1 end\nif v < now then\n  v = now\n  if KEYS[",
            $k,
            "] then redis.call('SET', KEYS[",
            $k,
            "], string.format('%d', v)) end\nend\nv = string.format('%d', v)\n"
        )
    };
}

/// Lua function `share(live, all, exp, version, lo, named, own, today)`: a list's or index's share above a cursor
/// `lo` ([`crate::core::hybrid::ConvIndex::counts`]) — the live seqs above it, less those expired at UTC day
/// `today` (a number, or nil: nothing expires; `exp` is the index's expiry buckets, day → `"a-b c-d"`) and the
/// reader's `own`; the mention-all seqs above it plus the `named` seqs still counted and not mention-all, less
/// the same; its push version; and, with `first`, the lowest seq it counts as unread (v4's `first_unread`; `'0'`:
/// none). Seqs are at most 2^53, exact as scores and as Lua numbers. `split(t, i)`
/// reads tokens from `t[i]` on: the named seqs, then after a token `o` the own seqs.
macro_rules! share_fn {
    () => {
        r#"
local function split(t, i)
  local named, own = {}, {}
  local into = named
  for j = i, #t do
    if t[j] == 'o' then into = own else into[#into + 1] = t[j] end
  end
  return named, own
end
local function share(live, all, exp, version, lo, named, own, today, first)
  local unread = redis.call('ZCOUNT', live, '(' .. lo, '+inf')
  local mentions = redis.call('ZCOUNT', all, '(' .. lo, '+inf')
  local low, gone = tonumber(lo), {}
  if today then
    local e = redis.call('HGETALL', exp)
    for i = 1, #e, 2 do
      if tonumber(e[i]) <= today then
        for a, b in string.gmatch(e[i + 1], '(%d+)-(%d+)') do
          local from, upto = math.max(tonumber(a), low + 1), tonumber(b)
          if from <= upto then
            local za = tonumber(a) > low and a or ('(' .. lo)
            unread = unread - redis.call('ZCOUNT', live, za, b)
            mentions = mentions - redis.call('ZCOUNT', all, za, b)
            gone[#gone + 1] = {from, upto}
          end
        end
      end
    end
  end
  local function counted(s)
    local x = tonumber(s)
    if x <= low or not redis.call('ZSCORE', live, s) then return false end
    for _, r in ipairs(gone) do if x >= r[1] and x <= r[2] then return false end end
    return true
  end
  local mine = {}
  for j = 1, #own do
    if counted(own[j]) then
      mine[own[j]] = true
      unread = unread - 1
      if redis.call('ZSCORE', all, own[j]) then mentions = mentions - 1 end
    end
  end
  for j = 1, #named do
    local s = named[j]
    if not mine[s] and counted(s) and not redis.call('ZSCORE', all, s) then mentions = mentions + 1 end
  end
  local lowest, offset = 0, 0
  while first and unread > 0 and lowest == 0 do
    local batch = redis.call('ZRANGEBYSCORE', live, '(' .. lo, '+inf', 'LIMIT', offset, 64)
    if #batch == 0 then break end
    for _, s in ipairs(batch) do
      if not mine[s] and counted(s) then lowest = tonumber(s); break end
    end
    offset = offset + #batch
  end
  return tostring(unread), tostring(mentions), redis.call('GET', version) or '0', tostring(lowest)
end
"#
    };
}

/// The write script: the writes of one or more users, each atomic and version-guarded, all in one call.
/// ARGV[1]: the change channel; ARGV[2]: the hashes' time to live in ms, `0` for none (`--projection-ttl`: set again
/// by every write); ARGV[3]: n, the number of users. KEYS[1..n]: the users' hashes; KEYS[n+1], on a single server
/// only: the namespace's version counter ([`super::changes_key`]); on Redis Cluster n is 1 (the keys of one call
/// must share a slot). Then one block per user, in the order of KEYS: the version, `"{g} {a} {b}"` (the writing
/// task's lease generation and its two next offsets); the totals value; `patch` (touch only the fields named),
/// `replace` (first delete every conversation field) or `refill` (`replace`, from the checkpoint by a reader: marks
/// the hash [`super::REFILLED_FIELD`]); s, the number of fields to set, and s field, value pairs; d, the number of
/// fields to delete, and d fields.
///
/// Returns one number per user: 1 when written, 0 when refused, 2 when a patch found no base to patch: the hash
/// expired (with a ttl) or was refilled from the checkpoint by a reader; the writer then writes the user whole
/// ([`WriteOutcome::whole`]). The users written get the next push version in their `_pv` field
/// ([`super::PUSH_VERSION_FIELD`]), and one message on the change channel names them all, a line
/// `"{version} {key}"` each (lines joined by `\n`; ids hold no control characters), for the push stream
/// ([`crate::push`]).
///
/// A write is refused when it comes from an older generation (a paused task whose partition moved: fencing), or
/// from the same generation with a position the stored one dominates: at least as far in both offsets and not
/// equal. The fold is order-proof, so a user's state at position `(a, b)` depends only on `(a, b)`; a dominated
/// write can only be older. Two positions neither of which dominates the other (a task restarted from its
/// checkpoint reads the two topics in another interleaving) are both accepted: the live task only moves forward
/// from there and rewrites every user it touches, so Redis converges; refusing them would leave a user stale.
///
/// Cost: a user new to Redis takes two commands (`HGET` of the version, one `HSET` of the version, totals, push
/// version and up to 127 fields: the fields to delete are not there); a user in Redis one more for a patch
/// (`HEXISTS` of the refilled mark) and its deletes, if any, or two for a whole write (`HKEYS`, then an `HDEL` of
/// the conversation fields and the mark). Fields beyond the first 127 go 128 to an `HSET`; a refill sets its mark
/// with one more. The push version is taken once per call, before the
/// writes: a call whose writes are all refused leaves a version unused, which readers never wait for (they only
/// compare versions).
pub const WRITE_TEMPLATE: &str = concat!(
    r#"
local ttl, n = tonumber(ARGV[2]), tonumber(ARGV[3])
"#,
    next_push_version!("n + 1", "redis.call('HGET', KEYS[1], '${PV}')"),
    r#"
local function chunked(cmd, key, list, from, upto)
  for i = from, upto, 256 do redis.call(cmd, key, unpack(list, i, math.min(upto, i + 255))) end
end
local function write(key, i)
  local s = tonumber(ARGV[i + 3])
  local d = i + 4 + 2 * s
  local upto = d + tonumber(ARGV[d])
  local cur = redis.call('HGET', key, '${VERSION}')
  if cur then
    local g, a, b = string.match(cur, '^(%d+) (%d+) (%d+)$')
    local ng, na, nb = string.match(ARGV[i], '^(%d+) (%d+) (%d+)$')
    if g then
      g, a, b, ng, na, nb = tonumber(g), tonumber(a), tonumber(b), tonumber(ng), tonumber(na), tonumber(nb)
      if ng < g then return 0, upto + 1 end
      if ng == g and a >= na and b >= nb and (a > na or b > nb) then return 0, upto + 1 end
    end
  end
  if ARGV[i + 2] == 'patch' then
    if ttl > 0 and not cur then return 2, upto + 1 end
    if cur and redis.call('HEXISTS', key, '${REFILLED}') == 1 then return 2, upto + 1 end
  else
    -- Every write sets the version: a hash without one does not exist, and has nothing to delete.
    if cur then
      local stale = {'${REFILLED}'}
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local p = string.sub(f, 1, 2)
        if p == '${C}' or p == '${N}' or p == '${B}' or p == '${R}' or p == '${E}' or p == '${D}' or p == '${T}' then stale[#stale + 1] = f end
      end
      chunked('HDEL', key, stale, 1, #stale)
    end
    if ARGV[i + 2] == 'refill' then redis.call('HSET', key, '${REFILLED}', '1') end
  end
  local first = math.min(d - 1, i + 4 + 253)
  redis.call('HSET', key, '${VERSION}', ARGV[i], '${TOTALS}', ARGV[i + 1], '${PV}', v, unpack(ARGV, i + 4, first))
  chunked('HSET', key, ARGV, first + 1, d - 1)
  if cur then chunked('HDEL', key, ARGV, d + 1, upto) end
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  return 1, upto + 1
end
local results, written, at = {}, {}, 4
for k = 1, n do
  results[k], at = write(KEYS[k], at)
  if results[k] == 1 then written[#written + 1] = v .. ' ' .. KEYS[k] end
end
if #written == 0 then return results end
redis.call('PUBLISH', ARGV[1], table.concat(written, '\n'))
return results
"#
);

/// Most users in one call of [`WRITE_TEMPLATE`] on a single server: 50. One call runs atomically, so this bounds
/// how long it holds Redis (tens of µs per user); it saves a script call, a push version and a `PUBLISH` per user.
pub const USERS_PER_CALL: usize = 50;

/// The read script, on a single server. KEYS[1]: the user's hash; ARGV[1..4]: what the keys of a broadcast list
/// are made of before its id ([`super::shared_key_prefixes`]: live, mention-all, expiry, version), ARGV[5..8]: the
/// same for an index (the script appends `{id}}`); ARGV[9]: the UTC day of the read, or empty (nothing expires);
/// ARGV[10]: the hash's time to live in ms, or `0`: a read of an existing hash sets it again (`--projection-ttl`).
/// Returns the hash's fields and values flattened, and:
/// - for every broadcast cursor `b:{id}` = c, a computed `B:{id}` = the number of the list's seqs above c and
///   `V:{id}` = the list's push version;
/// - for every read-diffused conversation `r:{id}` = `"{lo} {muted} {feed} {named…} [o {own…}]"`
///   ([`super::index_value`]), a computed `R:{id}` = `"{unread} {mentions}"` (the share function above) and
///   `X:{id}` = the index's push version.
///
/// One round trip, atomic. It reads keys it was not given, which only a single server allows; on Redis Cluster the
/// hash is read alone and each list's or index's share with [`SHARE_TEMPLATE`]
/// ([`RedisProjection::read_many_versioned`]).
pub const READ_TEMPLATE: &str = concat!(
    share_fn!(),
    r#"
local h = redis.call('HGETALL', KEYS[1])
if #h > 0 and tonumber(ARGV[10]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[10]) end
local out = {}
local function put(f, v) out[#out + 1] = f; out[#out + 1] = v end
for i = 1, #h, 2 do
  local f, v = h[i], h[i + 1]
  local p, id = string.sub(f, 1, 2), string.sub(f, 3)
  put(f, v)
  local k = function(i) return ARGV[i] .. id .. '}' end
  if p == '${B}' then
    local unread, _, version = share(k(1), k(2), k(3), k(4), v, {}, {}, nil)
    put('${COUNT}' .. id, unread)
    put('${LISTV}' .. id, version)
  elseif p == '${R}' then
    local n = {}
    for x in string.gmatch(v, '%S+') do n[#n + 1] = x end
    local named, own = split(n, 4)
    local unread, mentions, version, lowest = share(k(5), k(6), k(7), k(8), n[1], named, own, tonumber(ARGV[9]), true)
    put('${ICOUNT}' .. id, unread .. ' ' .. mentions .. ' ' .. lowest)
    put('${IVERSION}' .. id, version)
  end
end
return out
"#
);

/// One list's or index's share above a cursor (Redis Cluster reads, [`READ_TEMPLATE`] elsewhere). KEYS[1..4]: its
/// live, mention-all, expiry and version keys (one slot: [`super::SharedKeys`]); ARGV[1]: the UTC day of the read,
/// or empty; ARGV[2]: the cursor (`lo`); ARGV[3..]: the reader's named mention seqs, then `o` and its own seqs.
/// Returns `[unread, mentions, version, first]`, strings (`first`: the lowest seq counted, `0` for none).
pub const SHARE_TEMPLATE: &str = concat!(
    share_fn!(),
    r#"
local named, own = split(ARGV, 3)
local unread, mentions, version, lowest =
  share(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], named, own, tonumber(ARGV[1]), true)
return {unread, mentions, version, lowest}
"#
);

/// The list script, for a broadcast list or a read-diffused conversation's index ([`super::shared_keys`]: its
/// keys share a slot). KEYS[1]: the live seqs' sorted set; KEYS[2]: its guard (the generation of the fan-out task
/// that last wrote it); KEYS[3]: its push version; KEYS[4]: the mention-all seqs' sorted set; KEYS[5]: the expiry
/// buckets' hash (UTC day → `"a-b c-d"`); KEYS[6], on a single server only: the namespace's version counter.
/// ARGV[1]: the change channel; ARGV[2]: the writer's generation; ARGV[3]: `patch` or `replace` (first empty the
/// sets and the buckets); then the ops in order, `+{seq}` (add), `*{seq}` (add to both), `-{seq}` (remove from
/// both), `e{day}:{ranges}` (a bucket's seqs; empty ranges delete it) or `!` (empty all). Refused (0) when the
/// guard holds a newer generation: a paused fan-out task whose partition moved cannot undo its successor's writes;
/// a successor re-applies, in log order, every op since the checkpoint, so the set converges to the log's. Returns
/// 1 when written; a write also sets the list's push version and publishes `"{version} {key}"` on the change
/// channel.
pub const LIST_TEMPLATE: &str = concat!(
    r#"
local g = tonumber(redis.call('GET', KEYS[2]) or '0')
local ng = tonumber(ARGV[2])
if ng < g then return 0 end
if ng > g then redis.call('SET', KEYS[2], ARGV[2]) end
if ARGV[3] == 'replace' then redis.call('DEL', KEYS[1], KEYS[4], KEYS[5]) end
for i = 4, #ARGV do
  local op, seq = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
  if op == '+' then redis.call('ZADD', KEYS[1], seq, seq)
  elseif op == '*' then redis.call('ZADD', KEYS[1], seq, seq); redis.call('ZADD', KEYS[4], seq, seq)
  elseif op == '-' then redis.call('ZREM', KEYS[1], seq); redis.call('ZREM', KEYS[4], seq)
  elseif op == 'e' then
    local day, r = string.match(seq, '^(-?%d+):(.*)$')
    if r == '' then redis.call('HDEL', KEYS[5], day) else redis.call('HSET', KEYS[5], day, r) end
  else redis.call('DEL', KEYS[1], KEYS[4], KEYS[5]) end
end
"#,
    next_push_version!("6", "redis.call('GET', KEYS[3])"),
    r#"
redis.call('SET', KEYS[3], v)
redis.call('PUBLISH', ARGV[1], v .. ' ' .. KEYS[1])
return 1
"#
);

/// One broadcast list's (or index's) write: its ops since the last one, or its whole live set (`replace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListWrite {
    /// The list or index.
    pub list: ListId,
    /// The writing fan-out task's lease generation.
    pub generation: i64,
    /// The ops, in order (with `replace`: one `Add` or `AddMention` per live seq).
    pub ops: Vec<ListOp>,
    /// Empty the list first (a rebuild, or Redis lost it).
    pub replace: bool,
}

/// What [`RedisProjection::write`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Users written.
    pub written: usize,
    /// Users refused by the version guard (Redis holds newer state).
    pub refused: usize,
    /// Users whose patch was not applied because their hash expired (`--projection-ttl`) or was refilled from the
    /// checkpoint: the writer must write them whole.
    pub whole: Vec<String>,
}

impl WriteOutcome {
    /// (written, refused), the users to write whole not counted.
    pub fn counts(&self) -> (usize, usize) {
        (self.written, self.refused)
    }
}

/// One user's write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserWrite {
    /// The user whose hash is written.
    pub user_id: String,
    /// The writing task's lease generation and the position this state reflects.
    pub version: ProjectionVersion,
    /// The user's full counts after the change (its broadcast counts are not stored: see `cursors`).
    pub view: UserView,
    /// The user's cursor in every broadcast list read.
    pub cursors: BTreeMap<String, u64>,
    /// The `r:` field's value of every read-diffused conversation the user is a member of
    /// ([`super::index_fields`]).
    pub indexed: BTreeMap<String, String>,
    /// The `e:` field's value of every member conversation with expiring unread ([`super::expiry_fields`]).
    pub expiring: BTreeMap<String, String>,
    /// v4: the `d:` field's value of every member non-feed conversation with something to say
    /// ([`super::details::detail_fields`]).
    pub details: BTreeMap<String, String>,
    /// v4: the `t:` field's value of every member non-feed conversation with followed threads that have unread.
    pub threads: BTreeMap<String, String>,
    /// The newest unread seq of the member conversations written, the last number of their `c:` fields
    /// ([`super::newest_fields`]); a conversation missing here is written without it.
    pub newest: BTreeMap<String, u64>,
    /// Conversations whose fields changed: set when the user is a member (present in `view`), deleted otherwise.
    pub changed: Vec<String>,
    /// Replace every conversation field with those of `view` (projection rebuild) instead of patching `changed`.
    pub replace: bool,
    /// With `replace`: a reader's refill from the checkpoint, which marks the hash so that no patch builds on it
    /// ([`super::REFILLED_FIELD`]).
    pub refill: bool,
    /// What the conversations' read receipts follow (v3), applied when the user's write is.
    pub receipts: Vec<ReceiptWrite>,
}

impl UserWrite {
    /// A write that replaces the user's whole hash with `view` (the user's own part: built with
    /// [`NoLists`]), `cursors` and `indexed` at `version`.
    pub fn replace(
        view: UserView,
        cursors: BTreeMap<String, u64>,
        indexed: BTreeMap<String, String>,
        version: ProjectionVersion,
    ) -> Self {
        let mut changed: Vec<String> = view.conversations.keys().chain(indexed.keys()).cloned().collect();
        changed.sort_unstable();
        changed.dedup();
        let (user_id, expiring, newest, receipts) =
            (view.user_id.clone(), BTreeMap::new(), BTreeMap::new(), Vec::new());
        let (replace, refill, details, threads) = (true, false, BTreeMap::new(), BTreeMap::new());
        Self {
            user_id,
            version,
            view,
            cursors,
            indexed,
            expiring,
            details,
            threads,
            newest,
            changed,
            replace,
            refill,
            receipts,
        }
    }

    /// A write that replaces the user's whole hash with what `state` holds (the zero state for `None`), receipts
    /// whole.
    pub fn of_state(user_id: &str, state: Option<&UserState>, version: ProjectionVersion) -> Self {
        let mut write = Self::hash_of_state(user_id, state, version);
        write.receipts = state.map(ReceiptWrite::whole).unwrap_or_default();
        write
    }

    /// A write of the conversations named in `changed` (with the totals, categories and cursors, always whole),
    /// their receipts from the own seqs changed since the last write: the fold's publish. It builds the fields of
    /// the conversations named only ([`UserState::view_of`]), so it costs what changed, not what the user has.
    pub fn patch_of_state(
        user_id: &str,
        state: Option<&UserState>,
        version: ProjectionVersion,
        changed: &std::collections::BTreeSet<String>,
    ) -> Self {
        let Some(s) = state else {
            let mut write = Self::hash_of_state(user_id, None, version);
            (write.changed, write.replace) = (changed.iter().cloned().collect(), false);
            write.receipts = ReceiptWrite::changed(None, changed);
            return write;
        };
        let named = || changed.iter().filter_map(|id| Some((id.as_str(), &**s.conversations().get(id.as_str())?)));
        let (details, threads) = super::details::detail_fields(named());
        Self {
            user_id: user_id.to_owned(),
            version,
            view: s.view_of(user_id, changed),
            cursors: s.broadcasts().clone(),
            indexed: super::index_fields(named()),
            expiring: super::expiry_fields(named()),
            details,
            threads,
            newest: super::newest_fields(named()),
            changed: changed.iter().cloned().collect(),
            replace: false,
            refill: false,
            receipts: ReceiptWrite::changed(state, changed),
        }
    }

    /// The hash part of [`UserWrite::of_state`]: every field, no receipts.
    fn hash_of_state(user_id: &str, state: Option<&UserState>, version: ProjectionVersion) -> Self {
        let view = match state {
            Some(s) => s.view(user_id, &NoLists),
            None => UserView { user_id: user_id.to_owned(), ..UserView::default() },
        };
        let cursors = state.map(|s| s.broadcasts().clone()).unwrap_or_default();
        let all = || state.into_iter().flat_map(|s| s.conversations().iter().map(|(id, c)| (&**id, &**c)));
        let mut write = Self::replace(view, cursors, super::index_fields(all()), version);
        write.expiring = super::expiry_fields(all());
        (write.details, write.threads) = super::details::detail_fields(all());
        write.newest = super::newest_fields(all());
        write.changed.extend(write.expiring.keys().cloned());
        write.changed.sort_unstable();
        write.changed.dedup();
        write
    }
}

/// The fields a user's write sets (its changed conversations' `c:` and `r:` fields, or with `replace` every `r:`
/// field) and those it deletes (those of changed conversations the user is no longer a member of, or no longer
/// read-diffused in).
fn changed_fields(w: &UserWrite) -> (Vec<(String, String)>, Vec<String>) {
    let (mut set, mut delete) = (Vec::new(), Vec::new());
    for c in &w.changed {
        match w.view.conversations.get(c) {
            Some(view) => {
                let value = super::conversation_value(view, w.newest.get(c).copied());
                set.push((format!("{CONVERSATION_PREFIX}{c}"), value));
            }
            None => delete.push(format!("{CONVERSATION_PREFIX}{c}")),
        }
        match w.indexed.get(c) {
            Some(value) => set.push((format!("{INDEX_PREFIX}{c}"), value.clone())),
            None => delete.push(format!("{INDEX_PREFIX}{c}")),
        }
        match w.expiring.get(c) {
            Some(value) => set.push((format!("{}{c}", super::EXPIRY_PREFIX), value.clone())),
            None => delete.push(format!("{}{c}", super::EXPIRY_PREFIX)),
        }
        for (prefix, values) in
            [(super::details::DETAIL_PREFIX, &w.details), (super::details::THREADS_PREFIX, &w.threads)]
        {
            match values.get(c) {
                Some(value) => set.push((format!("{prefix}{c}"), value.clone())),
                None => delete.push(format!("{prefix}{c}")),
            }
        }
    }
    (set, delete)
}

/// The share a hash field asks for, with the share script's ARGV after the day, when it is a broadcast cursor
/// (`b:{id}` = c: the list, `[c]`) or a read-diffused conversation's (`r:{id}` = `"{lo} {muted} {feed} {named…}
/// [o {own…}]"`: the index, `[lo, named…, o, own…]`).
fn share_wanted(field: &str, value: &str) -> Option<(ListId, Vec<String>)> {
    if let Some(id) = field.strip_prefix(super::CURSOR_PREFIX) {
        return Some((ListId::Broadcast(id.to_owned()), vec![value.to_owned()]));
    }
    let id = field.strip_prefix(INDEX_PREFIX)?;
    let mut tokens = value.split(' ').map(str::to_owned);
    let lo = tokens.next()?;
    Some((ListId::Index(id.to_owned()), std::iter::once(lo).chain(tokens.skip(2)).collect()))
}

/// The read scripts' ARGV for UTC day `today`: its number, or empty for [`crate::core::expiry::NEVER`] (nothing
/// expires).
fn day_arg(today: i64) -> String {
    if today == crate::core::expiry::NEVER {
        String::new()
    } else {
        today.to_string()
    }
}

/// A user's counts as the push stream reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The counts.
    pub view: UserView,
    /// The push version ([`super::push_version`]).
    pub version: u64,
    /// The broadcast lists and read-diffused conversations' indexes the counts depend on: a change of one of them
    /// changes the user's counts without a write of the user's hash.
    pub follows: Vec<ListId>,
    /// Whether the user has a hash: one without may have state in the checkpoint (expired: `--projection-ttl`).
    pub present: bool,
}

/// What the read script says of one user.
struct UserRead {
    view: UserView,
    cursors: BTreeMap<String, u64>,
    /// Whether the user has a hash.
    present: bool,
}

/// A user's conversations as its hash holds them, for the read routes ([`RedisProjection::newest_unread`]).
#[derive(Debug, Default)]
pub struct Newest {
    /// Each conversation with a `c:` field: its counts as stored and its newest unread seq
    /// ([`super::newest_unread_of`]; 0: nothing unread).
    pub chats: BTreeMap<String, (ConversationView, u64)>,
    /// Each read-diffused conversation the user is a member of (its `r:` field): the index's messages above `lo`
    /// are its unread.
    pub indexed: BTreeMap<String, super::IndexEntry>,
}

/// The scripts, in the order of their SHA1s in [`SHAS`]: the templates filled with the layout ([`fill`]).
static SCRIPTS: LazyLock<[String; 8]> = LazyLock::new(|| TEMPLATES.map(fill));
/// The script templates: the users', lists', reads' and shares', then the receipts' ([`receipts`]).
const TEMPLATES: [&str; 8] = [
    WRITE_TEMPLATE,
    LIST_TEMPLATE,
    READ_TEMPLATE,
    SHARE_TEMPLATE,
    receipts::WRITE_TEMPLATE,
    receipts::READ_TEMPLATE,
    receipts::REFILL_TEMPLATE,
    receipts::READERS_TEMPLATE,
];
/// The SHA1 of each of [`SCRIPTS`] (what `EVALSHA` takes).
static SHAS: LazyLock<[String; 8]> =
    LazyLock::new(|| SCRIPTS.each_ref().map(|s| redis::Script::new(s).get_hash().to_owned()));

/// The Redis layout's names as the scripts spell them: `${NAME}` → the constant of [`super`] that defines it.
const LAYOUT: [(&str, &str); 15] = [
    ("${VERSION}", super::VERSION_FIELD),
    ("${TOTALS}", super::TOTALS_FIELD),
    ("${PV}", super::PUSH_VERSION_FIELD),
    ("${REFILLED}", super::REFILLED_FIELD),
    ("${C}", super::CONVERSATION_PREFIX),
    ("${N}", super::NOTIFICATION_PREFIX),
    ("${B}", super::CURSOR_PREFIX),
    ("${R}", super::INDEX_PREFIX),
    ("${E}", super::EXPIRY_PREFIX),
    ("${D}", super::details::DETAIL_PREFIX),
    ("${T}", super::details::THREADS_PREFIX),
    ("${COUNT}", super::COUNT_PREFIX),
    ("${LISTV}", super::LIST_VERSION_PREFIX),
    ("${ICOUNT}", super::INDEX_COUNT_PREFIX),
    ("${IVERSION}", super::INDEX_VERSION_PREFIX),
];

/// A script template with every `${NAME}` of [`LAYOUT`] replaced: the Lua and the Rust read one definition of the
/// layout (`src/projection/mod.rs`).
fn fill(template: &str) -> String {
    LAYOUT.iter().fold(template.to_owned(), |script, (name, value)| script.replace(name, value))
}
const WRITE: usize = 0;
const LIST: usize = 1;
const READ: usize = 2;
const SHARE: usize = 3;
const RECEIPTS_WRITE: usize = 4;
const RECEIPTS_READ: usize = 5;
const RECEIPTS_REFILL: usize = 6;
const RECEIPTS_READERS: usize = 7;

/// An `EVALSHA` of script `script` (an index into [`SCRIPTS`]) with `keys`; the caller adds the ARGV.
fn evalsha(script: usize, keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(&SHAS[script]).arg(keys.len()).arg(keys);
    cmd
}

/// Pairs up a flattened `field, value, …` reply.
fn pairs(flat: Vec<String>) -> Vec<(String, String)> {
    let mut it = flat.into_iter();
    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
}

/// A handle on the projection: a reconnecting connection (to one server or a cluster: [`Conn`]) and the key prefix.
#[derive(Clone)]
pub struct RedisProjection {
    conn: Conn,
    url: String,
    prefix: String,
    /// The user hashes' time to live in ms (`--projection-ttl`), 0 for none.
    ttl_ms: u64,
}

/// What a user's hash answers about one conversation ([`RedisProjection::read_conversation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversationRead {
    /// The conversation's counts; `None`: the user is not a member.
    Counts(Option<ConversationView>),
    /// The hash alone cannot answer (no hash, or a read-diffused conversation): read the user whole.
    NeedsUser,
}

impl RedisProjection {
    /// Connects to one server, or to a cluster when `url` lists several seed nodes ([`super::conn`]), reconnecting
    /// on failure from then on; the scripts are loaded on first use.
    ///
    /// Errors: [`ProjectionError::Redis`] for a malformed URL or Redis unreachable.
    pub async fn connect(url: &str, prefix: &str) -> ProjectionResult<Self> {
        let conn = Conn::open(url).await.map_err(redis_err("connecting"))?;
        Ok(Self { conn, url: url.to_owned(), prefix: prefix.to_owned(), ttl_ms: 0 })
    }

    /// The same projection whose user hashes expire `ttl` after their last write or read (`--projection-ttl`;
    /// `None`: never, the default), and so do conversations' receipts keys after their last write or read
    /// ([`receipts`]); broadcast lists and indexes never expire. Every role must be given
    /// the same ttl: the writer sets it and refuses to patch a hash that expired, readers set it again and refill
    /// a user with no hash from the checkpoint (docs/operations.md, "Redis as a bounded cache").
    pub fn with_ttl(mut self, ttl: Option<std::time::Duration>) -> Self {
        self.ttl_ms = ttl.map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1));
        self
    }

    /// Whether user hashes expire (`--projection-ttl`): a user with no hash may then have state in the checkpoint.
    pub fn expires(&self) -> bool {
        self.ttl_ms > 0
    }

    /// The same connection with another key prefix (another namespace's projection).
    pub fn with_prefix(&self, prefix: &str) -> Self {
        Self { prefix: prefix.to_owned(), ..self.clone() }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether the projection lives on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// The URLs of the masters holding the keys ([`Conn::masters`]): for scanning keys, master by master.
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn masters(&self) -> ProjectionResult<Vec<String>> {
        self.conn.masters(&self.url).await.map_err(redis_err("listing the cluster's masters"))
    }

    /// The key of the namespace's version counter, which the scripts take on a single server only (on a cluster a
    /// key shared by every write would put every write in one slot).
    fn counter(&self) -> Option<String> {
        (!self.is_cluster()).then(|| changes_key(&self.prefix))
    }

    /// Round trip to Redis.
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn ping(&self) -> ProjectionResult<()> {
        redis::cmd("PING").query_async::<()>(&mut self.connection()).await.map_err(redis_err("pinging"))
    }

    /// Runs script calls ([`Conn::run_all`]): when Redis answers that it does not have a script (restarted, or a
    /// new node), loads them all and runs the calls again (every script is safe to run twice).
    async fn run_scripts<T: FromRedisValue + Send>(&self, cmds: impl Fn() -> Vec<Cmd>) -> Result<Vec<T>, RedisError> {
        match self.conn.run_all(cmds()).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                for script in SCRIPTS.iter() {
                    // On a cluster, SCRIPT LOAD goes to every master.
                    redis::cmd("SCRIPT").arg("LOAD").arg(script).query_async::<Value>(&mut self.connection()).await?;
                }
                self.conn.run_all(cmds()).await
            }
            other => other,
        }
    }

    /// Applies the writes, each user atomically, in batches of up to 500 users (one round trip each on a single
    /// server), [`USERS_PER_CALL`] users to a call of [`WRITE_TEMPLATE`] on a single server and one on a cluster.
    /// Returns how many were written, how many refused by the version guard, and the users whose patch found no
    /// base (expired or refilled: [`WRITE_TEMPLATE`]), which the writer must write whole.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis is unreachable or failing; some writes may then be applied
    /// and others not (each user's is all-or-nothing), and the caller retries the whole flush;
    /// [`ProjectionError::UnexpectedReply`] when the script's results do not match the users.
    pub async fn write(&self, writes: &[UserWrite]) -> ProjectionResult<WriteOutcome> {
        let mut outcome = WriteOutcome::default();
        let per_call = if self.is_cluster() { 1 } else { USERS_PER_CALL };
        for chunk in writes.chunks(500) {
            let replies: Vec<Vec<i64>> = self
                .run_scripts(|| chunk.chunks(per_call).map(|users| self.write_cmd(users)).collect())
                .await
                .map_err(redis_err("writing users"))?;
            let results: Vec<i64> = replies.into_iter().flatten().collect();
            if results.len() != chunk.len() {
                let reason = format!("{} results for {} users", results.len(), chunk.len());
                return Err(ProjectionError::UnexpectedReply { doing: "writing users", reason });
            }
            let accepted = chunk.iter().zip(&results).filter(|(_, r)| **r == 1).map(|(w, _)| w);
            self.write_receipts(accepted).await?;
            for (w, r) in chunk.iter().zip(&results) {
                match r {
                    1 => outcome.written += 1,
                    2 => outcome.whole.push(w.user_id.clone()),
                    _ => outcome.refused += 1,
                }
            }
        }
        Ok(outcome)
    }

    /// One call of [`WRITE_TEMPLATE`] with the writes of `users` (one on a cluster: its keys must share a slot).
    fn write_cmd(&self, users: &[UserWrite]) -> Cmd {
        let mut keys: Vec<String> = users.iter().map(|w| user_key(&self.prefix, &w.user_id)).collect();
        keys.extend(self.counter());
        let mut cmd = evalsha(WRITE, &keys.iter().map(String::as_str).collect::<Vec<_>>());
        cmd.arg(changes_key(&self.prefix)).arg(self.ttl_ms).arg(users.len());
        for w in users {
            let mode = match (w.replace, w.refill) {
                (false, _) => "patch",
                (true, false) => "replace",
                (true, true) => "refill",
            };
            cmd.arg(w.version.to_string()).arg(super::totals_value(&w.view)).arg(mode);
            let (set, delete) = changed_fields(w);
            let summary = super::summary_fields(&w.view, &w.cursors);
            cmd.arg(set.len() + summary.len() - 1);
            for (field, value) in summary[1..].iter().chain(&set) {
                cmd.arg(field).arg(value);
            }
            cmd.arg(delete.len()).arg(delete);
        }
        cmd
    }

    /// Applies the list writes, each list atomically (one round trip on a single server). Returns (written, refused
    /// by the guard).
    ///
    /// Errors: [`ProjectionError::Redis`]; the caller retries the whole flush (ops re-applied in order converge).
    pub async fn write_lists(&self, writes: &[ListWrite]) -> ProjectionResult<(usize, usize)> {
        if writes.is_empty() {
            return Ok((0, 0));
        }
        let results: Vec<i64> = self
            .run_scripts(|| writes.iter().map(|w| self.list_cmd(w)).collect())
            .await
            .map_err(redis_err("writing broadcast lists"))?;
        let written = results.iter().filter(|r| **r == 1).count();
        Ok((written, results.len() - written))
    }

    /// One list's call of [`LIST_TEMPLATE`].
    fn list_cmd(&self, w: &ListWrite) -> Cmd {
        let (keys, counter) = (shared_keys(&self.prefix, &w.list), self.counter());
        let all = [&keys.live, &keys.guard, &keys.version, &keys.mention_all, &keys.expiry].map(String::as_str);
        let mut cmd = evalsha(LIST, &all.into_iter().chain(counter.as_deref()).collect::<Vec<_>>());
        cmd.arg(changes_key(&self.prefix)).arg(w.generation).arg(if w.replace { "replace" } else { "patch" });
        for op in &w.ops {
            cmd.arg(match op {
                ListOp::Add(seq) => format!("+{seq}"),
                ListOp::AddMention(seq) => format!("*{seq}"),
                ListOp::Remove(seq) => format!("-{seq}"),
                ListOp::Clear => "!".to_owned(),
                ListOp::Expiring { day, seqs } => format!("e{day}:{}", super::ranges_value(seqs)),
            });
        }
        cmd
    }

    /// A user's counts as stored, nothing expired (what `verify` and `inspect` compare with the checkpoint); the
    /// zero state when the user has no hash.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis fails; [`ProjectionError::Malformed`] for a malformed hash.
    pub async fn read(&self, user_id: &str) -> ProjectionResult<UserView> {
        Ok(self.read_with_cursors(user_id).await?.0)
    }

    /// Several users' counts, in the order asked, each with its push version ([`super::push_version`]), the lists
    /// and indexes its counts depend on and whether it has a hash: one round trip on a single server (one read
    /// script call each), two on a cluster (the hashes, then the shares of their lists and indexes).
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_many_versioned(&self, user_ids: &[String], today: i64) -> ProjectionResult<Vec<Versioned>> {
        let results = self.read_fields(user_ids, today).await?;
        let mut views = Vec::with_capacity(results.len());
        for (user_id, fields) in user_ids.iter().zip(results) {
            let version = push_version(&fields);
            let indexes = fields.iter().filter_map(|(f, _)| f.strip_prefix(super::INDEX_VERSION_PREFIX));
            let indexes: Vec<ListId> = indexes.map(|id| ListId::Index(id.to_owned())).collect();
            let present = !fields.is_empty();
            let view = decode_view(user_id, fields, today)?;
            let lists = view.broadcasts.keys().map(|id| ListId::Broadcast(id.clone()));
            let follows = lists.chain(indexes).collect();
            views.push(Versioned { view, version, follows, present });
        }
        Ok(views)
    }

    /// v4: a user's stored `d:` and `t:` fields by conversation ([`super::details`]), to copy its hash into
    /// another namespace (`verify --against --repair`) whole, as a reader shape cannot say them.
    ///
    /// Errors: Redis unreachable.
    pub async fn detail_fields(
        &self,
        user_id: &str,
    ) -> ProjectionResult<(BTreeMap<String, String>, BTreeMap<String, String>)> {
        // The stored fields only (`HGETALL`): the read script would compute every list's share for nothing.
        let hgetall = redis::cmd("HGETALL").arg(user_key(&self.prefix, user_id)).to_owned();
        let flat: Vec<Vec<String>> =
            self.conn.run_all(vec![hgetall]).await.map_err(redis_err("reading a user's details"))?;
        let (mut details, mut threads) = (BTreeMap::new(), BTreeMap::new());
        for (field, value) in flat.into_iter().flat_map(pairs) {
            if let Some(id) = field.strip_prefix(super::details::DETAIL_PREFIX) {
                details.insert(id.to_owned(), value);
            } else if let Some(id) = field.strip_prefix(super::details::THREADS_PREFIX) {
                threads.insert(id.to_owned(), value);
            }
        }
        Ok((details, threads))
    }

    /// What [`READ_TEMPLATE`] returns for each user: its hash's fields with the computed ones, in pairs.
    async fn read_fields(&self, user_ids: &[String], today: i64) -> ProjectionResult<Vec<Vec<(String, String)>>> {
        if user_ids.is_empty() {
            return Ok(Vec::new()); // an empty pipeline is an error to Redis ("empty command")
        }
        if self.is_cluster() {
            return self.read_fields_cluster(user_ids, today).await.map_err(redis_err("reading users"));
        }
        let ([l, la, _, lv, le], [x, xa, _, xv, xe]) =
            (shared_key_prefixes(&self.prefix, 'l'), shared_key_prefixes(&self.prefix, 'x'));
        let args = [l, la, le, lv, x, xa, xe, xv, day_arg(today), self.ttl_ms.to_string()];
        let cmds = || {
            let keys = user_ids.iter().map(|id| user_key(&self.prefix, id));
            keys.map(|key| evalsha(READ, &[&key]).arg(&args).to_owned()).collect()
        };
        let flat: Vec<Vec<String>> = self.run_scripts(cmds).await.map_err(redis_err("reading users"))?;
        Ok(flat.into_iter().map(pairs).collect())
    }

    /// [`RedisProjection::read_fields`] on a cluster, where a script may only touch keys of one slot: the hashes in
    /// one round trip, then the share ([`SHARE_TEMPLATE`]) of each list or index they hold a cursor in, added as the
    /// read script would (`B:`/`V:`, `R:`/`X:`). Not atomic across keys, as reading a list just after a change is
    /// not: a change between the two is pushed like any other.
    async fn read_fields_cluster(
        &self,
        user_ids: &[String],
        today: i64,
    ) -> Result<Vec<Vec<(String, String)>>, RedisError> {
        let hgetall = |id: &String| redis::cmd("HGETALL").arg(user_key(&self.prefix, id)).to_owned();
        let flat: Vec<Vec<String>> = self.conn.run_all(user_ids.iter().map(hgetall).collect()).await?;
        let mut users: Vec<Vec<(String, String)>> = flat.into_iter().map(pairs).collect();
        if self.expires() {
            let present = user_ids.iter().zip(&users).filter(|(_, f)| !f.is_empty());
            let keep = |(id, _): (&String, _)| {
                redis::cmd("PEXPIRE").arg(user_key(&self.prefix, id)).arg(self.ttl_ms).to_owned()
            };
            let cmds: Vec<Cmd> = present.map(keep).collect();
            if !cmds.is_empty() {
                self.conn.run_all::<Value>(cmds).await?;
            }
        }
        let wanted: Vec<(usize, ListId, Vec<String>)> = users
            .iter()
            .enumerate()
            .flat_map(|(u, fields)| fields.iter().filter_map(move |(f, v)| share_wanted(f, v).map(|(l, a)| (u, l, a))))
            .collect();
        let day = day_arg(today);
        let cmds = || wanted.iter().map(|(_, list, args)| self.share_cmd(list, &day, args)).collect();
        let shares: Vec<Vec<String>> = self.run_scripts(cmds).await?;
        for ((u, list, _), share) in wanted.into_iter().zip(shares) {
            let [unread, mentions, version, first] = <[String; 4]>::try_from(share).map_err(|_| {
                RedisError::from((redis::ErrorKind::Client, "a share reply of another shape than 4 strings"))
            })?;
            let computed = match list {
                ListId::Broadcast(id) => {
                    [(format!("{COUNT_PREFIX}{id}"), unread), (format!("{LIST_VERSION_PREFIX}{id}"), version)]
                }
                ListId::Index(id) => {
                    let share = format!("{unread} {mentions} {first}");
                    [(format!("{INDEX_COUNT_PREFIX}{id}"), share), (format!("{INDEX_VERSION_PREFIX}{id}"), version)]
                }
            };
            users[u].extend(computed);
        }
        Ok(users)
    }

    /// The [`SHARE_TEMPLATE`] call for one list's or index's share at a day ([`day_arg`]), with its ARGV
    /// ([`share_wanted`]).
    fn share_cmd(&self, list: &ListId, day: &str, args: &[String]) -> Cmd {
        let keys = shared_keys(&self.prefix, list);
        evalsha(SHARE, &[&keys.live, &keys.mention_all, &keys.expiry, &keys.version]).arg(day).arg(args).to_owned()
    }

    /// A user's counts, or `None` when the user has no hash (never written, or lost by Redis).
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_existing(&self, user_id: &str, today: i64) -> ProjectionResult<Option<UserView>> {
        let read = self.read_all(user_id, today).await?;
        Ok(read.present.then_some(read.view))
    }

    /// A user's counts and broadcast cursors (what a repair must write back whole).
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_with_cursors(&self, user_id: &str) -> ProjectionResult<(UserView, BTreeMap<String, u64>)> {
        let read = self.read_all(user_id, crate::core::expiry::NEVER).await?;
        Ok((read.view, read.cursors))
    }

    /// Everything the read script says of a user.
    async fn read_all(&self, user_id: &str, today: i64) -> ProjectionResult<UserRead> {
        let fields = self.read_fields(&[user_id.to_owned()], today).await?.pop().unwrap_or_default();
        let cursors = fields
            .iter()
            .filter_map(|(f, v)| Some((f.strip_prefix(super::CURSOR_PREFIX)?.to_owned(), v.parse().ok()?)))
            .collect();
        let present = !fields.is_empty();
        Ok(UserRead { view: decode_view(user_id, fields, today)?, cursors, present })
    }

    /// The head of a broadcast list or of a read-diffused conversation's index: its largest live seq (0 for an
    /// empty or unknown one).
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn list_head(&self, list: &ListId) -> ProjectionResult<u64> {
        Ok(self.list_heads(std::slice::from_ref(list)).await?[0])
    }

    /// [`RedisProjection::list_head`] of each of `lists`, in their order, in one round trip (a pipeline; on a
    /// cluster, one request per list, concurrently).
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn list_heads(&self, lists: &[ListId]) -> ProjectionResult<Vec<u64>> {
        if lists.is_empty() {
            return Ok(Vec::new());
        }
        let top = |list: &ListId| {
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(super::shared_keys(&self.prefix, list).live).arg("+inf").arg("-inf");
            cmd.arg("BYSCORE").arg("REV").arg("LIMIT").arg(0).arg(1);
            cmd
        };
        let tops: Vec<Vec<u64>> =
            self.conn.run_all(lists.iter().map(top).collect()).await.map_err(redis_err("reading lists' heads"))?;
        Ok(tops.iter().map(|t| t.first().copied().unwrap_or(0)).collect())
    }

    /// One conversation's counts for a user from two fields of its hash ([`ConversationRead`]): its counts, none
    /// (the user is not a member), or [`ConversationRead::NeedsUser`] when the hash alone cannot answer: the user
    /// has no hash (never written, lost or expired: the caller may refill it from the checkpoint), or the
    /// conversation is read-diffused (its count needs the index's share: the caller reads the user whole). With a
    /// ttl, the read sets the hash's expiry again.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis fails; [`ProjectionError::Malformed`] for a malformed field.
    pub async fn read_conversation(
        &self,
        user_id: &str,
        conversation_id: &str,
        today: i64,
    ) -> ProjectionResult<ConversationRead> {
        let key = user_key(&self.prefix, user_id);
        let c = format!("{CONVERSATION_PREFIX}{conversation_id}");
        let r = format!("{INDEX_PREFIX}{conversation_id}");
        let d = format!("{}{conversation_id}", super::details::DETAIL_PREFIX);
        let fields = [c, format!("{}{conversation_id}", super::EXPIRY_PREFIX), VERSION_FIELD.to_owned(), r, d];
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET").arg(&key).arg(&fields);
        if self.expires() {
            pipe.cmd("PEXPIRE").arg(&key).arg(self.ttl_ms).ignore();
        }
        let (values,): (Vec<Option<String>>,) =
            pipe.query_async(&mut self.connection()).await.map_err(redis_err("reading a conversation"))?;
        if values.get(2).is_none_or(Option::is_none) || values.get(3).is_some_and(Option::is_some) {
            return Ok(ConversationRead::NeedsUser);
        }
        // The counts (`c:`), their expiry (`e:`) and v4's details (`d:`: reactions, first unread).
        let counted = fields.into_iter().zip(values).enumerate().filter(|(i, _)| [0, 1, 4].contains(i));
        let present = counted.filter_map(|(_, (f, v))| Some((f, v?)));
        Ok(ConversationRead::Counts(decode_view(user_id, present, today)?.conversations.into_values().next()))
    }

    /// What the read routes ack when no `read_seq` is given, as a user's hash holds it: the hash is written at
    /// every publish, the checkpoint only at every commit. Empty when the user has no hash.
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn newest_unread(&self, user_id: &str) -> ProjectionResult<Newest> {
        let mut conn = self.conn.clone();
        let fields: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(user_key(&self.prefix, user_id))
            .query_async(&mut conn)
            .await
            .map_err(redis_err("reading a user's newest unread seqs"))?;
        let mut newest = Newest::default();
        for (field, value) in fields {
            if let Some(id) = field.strip_prefix(CONVERSATION_PREFIX) {
                newest.chats.extend(super::newest_unread_of(&value).map(|n| (id.to_owned(), n)));
            } else if let Some(id) = field.strip_prefix(INDEX_PREFIX) {
                newest.indexed.extend(super::index_entry_of(&value).map(|e| (id.to_owned(), e)));
            }
        }
        Ok(newest)
    }

    /// The stored version of a user's hash; `None` when the hash has none (or an unreadable one).
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn version(&self, user_id: &str) -> ProjectionResult<Option<ProjectionVersion>> {
        let mut conn = self.conn.clone();
        let v: Option<String> = redis::cmd("HGET")
            .arg(user_key(&self.prefix, user_id))
            .arg(VERSION_FIELD)
            .query_async(&mut conn)
            .await
            .map_err(redis_err("reading a version"))?;
        Ok(v.and_then(|v| v.parse().ok()))
    }

    /// The key marking that a partition's entities (a fold partition's users, a fan-out partition's lists) are
    /// all in Redis. `v2`: the layout whose shared keys carry a hash tag ([`super::SharedKeys`]); a projection
    /// written with the older layout has no such marker, so its partitions are written again in this one.
    fn marker_key(&self, stage: Stage, partition: i32) -> String {
        format!("{}partition:v2:{stage}:{partition}", self.prefix)
    }

    /// Whether the marker of a partition is present. A missing marker means Redis lost the projection (restarted
    /// empty, flushed) or never had it: the partition's owner must rewrite all its entities.
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn has_marker(&self, stage: Stage, partition: i32) -> ProjectionResult<bool> {
        let mut conn = self.conn.clone();
        let key = self.marker_key(stage, partition);
        redis::cmd("EXISTS").arg(key).query_async(&mut conn).await.map_err(redis_err("reading a marker"))
    }

    /// Sets the marker of a partition (after all its entities were written).
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn set_marker(&self, stage: Stage, partition: i32) -> ProjectionResult<()> {
        let mut conn = self.conn.clone();
        let key = self.marker_key(stage, partition);
        redis::cmd("SET").arg(key).arg(1).query_async(&mut conn).await.map_err(redis_err("setting a marker"))
    }

    /// Raw command access for tools and tests: commands on one key (or keys of one slot) work on a cluster too.
    pub fn connection(&self) -> Conn {
        self.conn.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_names_the_layout_only_through_its_constants() {
        for (template, script) in TEMPLATES.iter().zip(SCRIPTS.iter()) {
            assert!(!script.contains("${"), "a placeholder left unfilled:\n{script}");
            for (name, value) in LAYOUT {
                assert_eq!(template.matches(name).count(), script.matches(&format!("'{value}'")).count(), "{name}");
            }
        }
        // The scripts take a field's kind as its first two bytes (`string.sub(f, 1, 2)`).
        for (name, value) in &LAYOUT[4..] {
            assert_eq!(value.len(), 2, "{name} = {value:?}: the scripts read prefixes as 2 bytes");
        }
        assert!(SCRIPTS[WRITE].contains("HGET', key, '_version'"), "{}", SCRIPTS[WRITE]);
    }
}
