//! Writing and reading the projection in Redis (layout in [`super`]).
//!
//! Every user's write is one `EVALSHA` of [`WRITE_SCRIPT`]: it compares the version the write carries with the
//! `_version` field and applies the totals, the changed conversation fields and the deleted ones only when the
//! write is not older, all atomically. A flush pipelines the writes of many users in one round trip. A broadcast
//! list's (or a read-diffused conversation's index's) changes are one `EVALSHA` of [`LIST_SCRIPT`] per list,
//! guarded by the fan-out task's lease generation; a user's read is one `EVALSHA` of [`READ_SCRIPT`], which
//! combines the user's cursors with the lists and the indexes.

use std::collections::BTreeMap;

use redis::aio::ConnectionManager;
use redis::RedisError;

use super::{
    changes_key, decode_view, list_key, push_version, shared_keys, user_key, ProjectionError, ProjectionVersion,
    CONVERSATION_PREFIX, INDEX_PREFIX, VERSION_FIELD,
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

/// Lua that sets `v` to the namespace's next push version, the counter being `KEYS[$k]`: one more than the last,
/// or the server's clock in µs if that is larger, so versions only grow, even after Redis lost everything.
macro_rules! next_push_version {
    ($k:literal) => {
        concat!(
            "\nlocal t = redis.call('TIME')\nlocal v = redis.call('INCR', KEYS[",
            $k,
            "])\nlocal now = tonumber(t[1]) * 1000000 + tonumber(t[2])\nif v < now then v = now; redis.call('SET', KEYS[",
            $k,
            "], string.format('%d', v)) end\nv = string.format('%d', v)\n"
        )
    };
}

/// The write script. KEYS[1]: the user's hash; KEYS[2]: the namespace's change channel and version counter
/// ([`super::changes_key`]). ARGV[1]: the version, `"{g} {a} {b}"` (the writing task's lease
/// generation and its two next offsets);
/// ARGV[2]: the totals value; ARGV[3]: `patch` (touch only the fields named) or `replace` (first delete every
/// conversation field); ARGV[4]: n, the number of fields to set; ARGV[5 .. 4+2n]: field, value pairs; the
/// remaining ARGV: fields to delete. Returns 1 when written, 0 when refused. A write also sets the hash's push
/// version (`_pv`, [`super::PUSH_VERSION_FIELD`]) to the namespace's next one and publishes `"{version} {key}"` on the
/// change channel, for the push stream ([`crate::push`]).
///
/// A write is refused when it comes from an older generation (a paused task whose partition moved: fencing), or
/// from the same generation with a position the stored one dominates: at least as far in both offsets and not
/// equal. The fold is order-proof, so a user's state at position `(a, b)` depends only on `(a, b)`; a dominated
/// write can only be older. Two positions neither of which dominates the other (a task restarted from its
/// checkpoint reads the two topics in another interleaving) are both accepted: the live task only moves forward
/// from there and rewrites every user it touches, so Redis converges; refusing them would leave a user stale.
pub const WRITE_SCRIPT: &str = concat!(
    r#"
local cur = redis.call('HGET', KEYS[1], '_version')
if cur then
  local g, a, b = string.match(cur, '^(%d+) (%d+) (%d+)$')
  local ng, na, nb = string.match(ARGV[1], '^(%d+) (%d+) (%d+)$')
  if g then
    g, a, b, ng, na, nb = tonumber(g), tonumber(a), tonumber(b), tonumber(ng), tonumber(na), tonumber(nb)
    if ng < g then return 0 end
    if ng == g and a >= na and b >= nb and (a > na or b > nb) then return 0 end
  end
end
if ARGV[3] == 'replace' then
  for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
    local p = string.sub(f, 1, 2)
    if p == 'c:' or p == 'n:' or p == 'b:' or p == 'r:' then redis.call('HDEL', KEYS[1], f) end
  end
end
redis.call('HSET', KEYS[1], '_version', ARGV[1], '_totals', ARGV[2])
local n = tonumber(ARGV[4])
for i = 5, 4 + 2 * n, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
for i = 5 + 2 * n, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
"#,
    next_push_version!("2"),
    r#"
redis.call('HSET', KEYS[1], '_pv', v)
redis.call('PUBLISH', KEYS[2], v .. ' ' .. KEYS[1])
return 1
"#
);

/// The read script. KEYS[1]: the user's hash; ARGV[1]: the prefix of the list keys (`{prefix}l:`); ARGV[2]: the
/// prefix of the list version keys (`{prefix}lv:`); ARGV[3], ARGV[4], ARGV[5]: the prefixes of an index's live
/// seqs, its mention-all seqs and its version (`{prefix}x:`, `xa:`, `xv:`). Returns the hash's fields and values
/// flattened, and:
/// - for every broadcast cursor `b:{id}` = c, a computed `B:{id}` = the number of the list's seqs above c
///   (`ZCOUNT (c +inf`; seqs are at most 2^53, exact as scores) and `V:{id}` = the list's push version;
/// - for every read-diffused conversation `r:{id}` = `"{lo} {muted} {feed} {named…}"`, a computed `R:{id}` =
///   `"{unread} {mentions}"`: the index's live seqs above lo, and its mention-all seqs above lo plus the named seqs
///   still live and not mention-all; and `X:{id}` = the index's push version.
///
/// One round trip, atomic.
pub const READ_SCRIPT: &str = r#"
local h = redis.call('HGETALL', KEYS[1])
local out = {}
local function put(f, v) out[#out + 1] = f; out[#out + 1] = v end
for i = 1, #h, 2 do
  local f, v = h[i], h[i + 1]
  local p, id = string.sub(f, 1, 2), string.sub(f, 3)
  put(f, v)
  if p == 'b:' then
    put('B:' .. id, tostring(redis.call('ZCOUNT', ARGV[1] .. id, '(' .. v, '+inf')))
    put('V:' .. id, redis.call('GET', ARGV[2] .. id) or '0')
  elseif p == 'r:' then
    local n = {}
    for x in string.gmatch(v, '%d+') do n[#n + 1] = x end
    local live, all = ARGV[3] .. id, ARGV[4] .. id
    local unread = redis.call('ZCOUNT', live, '(' .. n[1], '+inf')
    local mentions = redis.call('ZCOUNT', all, '(' .. n[1], '+inf')
    for j = 4, #n do
      if redis.call('ZSCORE', live, n[j]) and not redis.call('ZSCORE', all, n[j]) then mentions = mentions + 1 end
    end
    put('R:' .. id, unread .. ' ' .. mentions)
    put('X:' .. id, redis.call('GET', ARGV[5] .. id) or '0')
  end
end
return out
"#;

/// The list script, for a broadcast list or a read-diffused conversation's index ([`super::shared_keys`]).
/// KEYS[1]: the live seqs' sorted set; KEYS[2]: its guard (the generation of the fan-out task that last wrote it);
/// KEYS[3]: its push version; KEYS[4]: the change channel and version counter; KEYS[5]: the mention-all seqs'
/// sorted set. ARGV[1]: the writer's generation; ARGV[2]: `patch` or `replace` (first empty both sets); then the
/// ops in order, `+{seq}` (add), `*{seq}` (add to both), `-{seq}` (remove from both) or `!` (empty both). Refused (0) when the guard holds a newer generation: a paused
/// fan-out task whose partition moved cannot undo its successor's writes; a successor re-applies, in log order,
/// every op since the checkpoint, so the set converges to the log's. Returns 1 when written; a write also sets the
/// list's push version and publishes `"{version} {key}"` on the change channel.
pub const LIST_SCRIPT: &str = concat!(
    r#"
local g = tonumber(redis.call('GET', KEYS[2]) or '0')
local ng = tonumber(ARGV[1])
if ng < g then return 0 end
if ng > g then redis.call('SET', KEYS[2], ARGV[1]) end
if ARGV[2] == 'replace' then redis.call('DEL', KEYS[1], KEYS[5]) end
for i = 3, #ARGV do
  local op, seq = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
  if op == '+' then redis.call('ZADD', KEYS[1], seq, seq)
  elseif op == '*' then redis.call('ZADD', KEYS[1], seq, seq); redis.call('ZADD', KEYS[5], seq, seq)
  elseif op == '-' then redis.call('ZREM', KEYS[1], seq); redis.call('ZREM', KEYS[5], seq)
  else redis.call('DEL', KEYS[1], KEYS[5]) end
end
"#,
    next_push_version!("4"),
    r#"
redis.call('SET', KEYS[3], v)
redis.call('PUBLISH', KEYS[4], v .. ' ' .. KEYS[1])
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
    /// Conversations whose fields changed: set when the user is a member (present in `view`), deleted otherwise.
    pub changed: Vec<String>,
    /// Replace every conversation field with those of `view` (projection rebuild) instead of patching `changed`.
    pub replace: bool,
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
        Self { user_id: view.user_id.clone(), version, view, cursors, indexed, changed, replace: true }
    }

    /// A write that replaces the user's whole hash with what `state` holds (the zero state for `None`).
    pub fn of_state(user_id: &str, state: Option<&UserState>, version: ProjectionVersion) -> Self {
        let view = match state {
            Some(s) => s.view(user_id, &NoLists),
            None => UserView { user_id: user_id.to_owned(), ..UserView::default() },
        };
        let cursors = state.map(|s| s.broadcasts().clone()).unwrap_or_default();
        Self::replace(view, cursors, state.map(super::index_fields).unwrap_or_default(), version)
    }
}

/// The fields a user's write sets (its changed conversations' `c:` and `r:` fields, or with `replace` every `r:`
/// field) and those it deletes (those of changed conversations the user is no longer a member of, or no longer
/// read-diffused in).
fn changed_fields(w: &UserWrite) -> (Vec<(String, String)>, Vec<String>) {
    let (mut set, mut delete) = (Vec::new(), Vec::new());
    for c in &w.changed {
        match w.view.conversations.get(c) {
            Some(view) => set.push((format!("{CONVERSATION_PREFIX}{c}"), super::conversation_value(view))),
            None => delete.push(format!("{CONVERSATION_PREFIX}{c}")),
        }
        match w.indexed.get(c) {
            Some(value) => set.push((format!("{INDEX_PREFIX}{c}"), value.clone())),
            None => delete.push(format!("{INDEX_PREFIX}{c}")),
        }
    }
    (set, delete)
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
}

/// What the read script says of one user.
struct UserRead {
    view: UserView,
    cursors: BTreeMap<String, u64>,
    /// Whether the user has a hash.
    present: bool,
    /// The push version ([`super::push_version`]).
    version: u64,
}

/// A handle on the projection: a reconnecting connection and the key prefix.
#[derive(Clone)]
pub struct RedisProjection {
    conn: ConnectionManager,
    prefix: String,
    sha: String,
    read: redis::Script,
    list_sha: String,
}

impl RedisProjection {
    /// Connects (reconnecting on failure from then on); the write script is loaded on first use.
    ///
    /// Errors: [`ProjectionError::Redis`] for a malformed URL or Redis unreachable.
    pub async fn connect(url: &str, prefix: &str) -> ProjectionResult<Self> {
        let client = redis::Client::open(url).map_err(redis_err("parsing the URL"))?;
        let conn = ConnectionManager::new(client).await.map_err(redis_err("connecting"))?;
        let sha = redis::Script::new(WRITE_SCRIPT).get_hash().to_owned();
        let list_sha = redis::Script::new(LIST_SCRIPT).get_hash().to_owned();
        let read = redis::Script::new(READ_SCRIPT);
        Ok(Self { conn, prefix: prefix.to_owned(), sha, read, list_sha })
    }

    /// The same connection with another key prefix (another namespace's projection).
    pub fn with_prefix(&self, prefix: &str) -> Self {
        Self { prefix: prefix.to_owned(), ..self.clone() }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The read script's ARGV: the key prefixes of lists and indexes.
    fn read_args(&self) -> Vec<String> {
        let (list, index) = (shared_keys(&self.prefix, &ListId::Broadcast(String::new())), self.index_keys(""));
        vec![list.live, list.version, index.live, index.mention_all, index.version]
    }

    fn index_keys(&self, conversation_id: &str) -> super::SharedKeys {
        shared_keys(&self.prefix, &ListId::Index(conversation_id.to_owned()))
    }

    /// Round trip to Redis.
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn ping(&self) -> ProjectionResult<()> {
        let mut conn = self.conn.clone();
        redis::cmd("PING").query_async::<()>(&mut conn).await.map_err(redis_err("pinging"))
    }

    /// Applies the writes, each user atomically, in pipelines of up to 500 users. Returns how many were written
    /// and how many refused by the version guard.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis is unreachable or failing; some writes may then be applied
    /// and others not (each user's is all-or-nothing), and the caller retries the whole flush.
    pub async fn write(&self, writes: &[UserWrite]) -> ProjectionResult<(usize, usize)> {
        self.write_chunks(writes).await.map_err(redis_err("writing users"))
    }

    async fn write_chunks(&self, writes: &[UserWrite]) -> Result<(usize, usize), RedisError> {
        let (mut written, mut refused) = (0, 0);
        for chunk in writes.chunks(500) {
            let results = match self.eval_pipeline(chunk).await {
                Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    self.load_scripts().await?;
                    self.eval_pipeline(chunk).await?
                }
                other => other?,
            };
            for r in results {
                if r == 1 {
                    written += 1
                } else {
                    refused += 1
                }
            }
        }
        Ok((written, refused))
    }

    async fn load_scripts(&self) -> Result<(), RedisError> {
        let mut conn = self.conn.clone();
        for script in [WRITE_SCRIPT, LIST_SCRIPT] {
            redis::cmd("SCRIPT").arg("LOAD").arg(script).query_async::<String>(&mut conn).await?;
        }
        Ok(())
    }

    async fn eval_pipeline(&self, writes: &[UserWrite]) -> Result<Vec<i64>, RedisError> {
        let mut pipe = redis::pipe();
        for w in writes {
            let cmd = pipe.cmd("EVALSHA").arg(&self.sha).arg(2).arg(user_key(&self.prefix, &w.user_id));
            cmd.arg(changes_key(&self.prefix));
            let mode = if w.replace { "replace" } else { "patch" };
            cmd.arg(w.version.to_string()).arg(super::totals_value(&w.view)).arg(mode);
            let (set, delete) = changed_fields(w);
            let summary = super::summary_fields(&w.view, &w.cursors);
            cmd.arg(set.len() + summary.len() - 1);
            for (field, value) in summary[1..].iter().chain(&set) {
                cmd.arg(field).arg(value);
            }
            cmd.arg(delete);
        }
        let mut conn = self.conn.clone();
        pipe.query_async(&mut conn).await
    }

    /// Applies the list writes, each list atomically, in one pipeline. Returns (written, refused by the guard).
    ///
    /// Errors: [`ProjectionError::Redis`]; the caller retries the whole flush (ops re-applied in order converge).
    pub async fn write_lists(&self, writes: &[ListWrite]) -> ProjectionResult<(usize, usize)> {
        if writes.is_empty() {
            return Ok((0, 0));
        }
        let results = match self.list_pipeline(writes).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.load_scripts().await.map_err(redis_err("loading scripts"))?;
                self.list_pipeline(writes).await
            }
            other => other,
        }
        .map_err(redis_err("writing broadcast lists"))?;
        let written = results.iter().filter(|r| **r == 1).count();
        Ok((written, results.len() - written))
    }

    async fn list_pipeline(&self, writes: &[ListWrite]) -> Result<Vec<i64>, RedisError> {
        let mut pipe = redis::pipe();
        for w in writes {
            let keys = shared_keys(&self.prefix, &w.list);
            let cmd = pipe.cmd("EVALSHA").arg(&self.list_sha).arg(5).arg(keys.live).arg(keys.guard);
            cmd.arg(keys.version).arg(changes_key(&self.prefix)).arg(keys.mention_all).arg(w.generation);
            cmd.arg(if w.replace { "replace" } else { "patch" });
            for op in &w.ops {
                cmd.arg(match op {
                    ListOp::Add(seq) => format!("+{seq}"),
                    ListOp::AddMention(seq) => format!("*{seq}"),
                    ListOp::Remove(seq) => format!("-{seq}"),
                    ListOp::Clear => "!".to_owned(),
                });
            }
        }
        let mut conn = self.conn.clone();
        pipe.query_async(&mut conn).await
    }

    /// A user's counts; the zero state when the user has no hash.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis fails; [`ProjectionError::Malformed`] for a malformed hash.
    pub async fn read(&self, user_id: &str) -> ProjectionResult<UserView> {
        Ok(self.read_with_cursors(user_id).await?.0)
    }

    /// Several users' counts, in the order asked, in one pipelined round trip (one read script call each).
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_many(&self, user_ids: &[String]) -> ProjectionResult<Vec<UserView>> {
        Ok(self.read_many_versioned(user_ids).await?.into_iter().map(|v| v.view).collect())
    }

    /// [`RedisProjection::read_many`] with each user's push version ([`super::push_version`]) and the lists and
    /// indexes its counts depend on.
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_many_versioned(&self, user_ids: &[String]) -> ProjectionResult<Vec<Versioned>> {
        let results = match self.read_pipeline(user_ids).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let mut conn = self.conn.clone();
                let load = redis::cmd("SCRIPT").arg("LOAD").arg(READ_SCRIPT).query_async::<String>(&mut conn).await;
                load.map_err(redis_err("loading scripts"))?;
                self.read_pipeline(user_ids).await
            }
            other => other,
        }
        .map_err(redis_err("reading users"))?;
        let mut views = Vec::with_capacity(results.len());
        for (user_id, flat) in user_ids.iter().zip(results) {
            let mut it = flat.into_iter();
            let fields: Vec<(String, String)> = std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect();
            let version = push_version(&fields);
            let indexes = fields.iter().filter_map(|(f, _)| f.strip_prefix(super::INDEX_VERSION_PREFIX));
            let indexes: Vec<ListId> = indexes.map(|id| ListId::Index(id.to_owned())).collect();
            let view = decode_view(user_id, fields)?;
            let lists = view.broadcasts.keys().map(|id| ListId::Broadcast(id.clone()));
            let follows = lists.chain(indexes).collect();
            views.push(Versioned { view, version, follows });
        }
        Ok(views)
    }

    async fn read_pipeline(&self, user_ids: &[String]) -> Result<Vec<Vec<String>>, RedisError> {
        let mut pipe = redis::pipe();
        for id in user_ids {
            pipe.cmd("EVALSHA").arg(self.read.get_hash()).arg(1).arg(user_key(&self.prefix, id)).arg(self.read_args());
        }
        let mut conn = self.conn.clone();
        pipe.query_async(&mut conn).await
    }

    /// A user's counts, or `None` when the user has no hash (never written, or lost by Redis).
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_existing(&self, user_id: &str) -> ProjectionResult<Option<UserView>> {
        let read = self.read_all(user_id).await?;
        Ok(read.present.then_some(read.view))
    }

    /// A user's counts and broadcast cursors (what a repair must write back whole).
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_with_cursors(&self, user_id: &str) -> ProjectionResult<(UserView, BTreeMap<String, u64>)> {
        let read = self.read_all(user_id).await?;
        Ok((read.view, read.cursors))
    }

    /// A user's counts and push version ([`super::push_version`]; 0 for a user with no hash).
    ///
    /// Errors: as [`RedisProjection::read`].
    pub async fn read_versioned(&self, user_id: &str) -> ProjectionResult<(UserView, u64)> {
        let read = self.read_all(user_id).await?;
        Ok((read.view, read.version))
    }

    /// Everything the read script says of a user.
    async fn read_all(&self, user_id: &str) -> ProjectionResult<UserRead> {
        let mut conn = self.conn.clone();
        let flat: Vec<String> = self
            .read
            .key(user_key(&self.prefix, user_id))
            .arg(self.read_args())
            .invoke_async(&mut conn)
            .await
            .map_err(redis_err("reading a user"))?;
        let mut it = flat.into_iter();
        let fields: Vec<(String, String)> = std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect();
        let cursors = fields
            .iter()
            .filter_map(|(f, v)| Some((f.strip_prefix(super::CURSOR_PREFIX)?.to_owned(), v.parse().ok()?)))
            .collect();
        let (present, version) = (!fields.is_empty(), push_version(&fields));
        Ok(UserRead { view: decode_view(user_id, fields)?, cursors, present, version })
    }

    /// A broadcast list's head: its largest live seq (0 for an empty or unknown list).
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn list_head(&self, broadcast_id: &str) -> ProjectionResult<u64> {
        let mut conn = self.conn.clone();
        let top: Vec<u64> = redis::cmd("ZRANGE")
            .arg(list_key(&self.prefix, broadcast_id))
            .arg("+inf")
            .arg("-inf")
            .arg("BYSCORE")
            .arg("REV")
            .arg("LIMIT")
            .arg(0)
            .arg(1)
            .query_async(&mut conn)
            .await
            .map_err(redis_err("reading a list's head"))?;
        Ok(top.first().copied().unwrap_or(0))
    }

    /// One conversation's counts for a user; `None` when the user is not a member.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis fails; [`ProjectionError::Malformed`] for a malformed field.
    pub async fn read_conversation(
        &self,
        user_id: &str,
        conversation_id: &str,
    ) -> ProjectionResult<Option<ConversationView>> {
        let mut conn = self.conn.clone();
        let field = format!("{CONVERSATION_PREFIX}{conversation_id}");
        let value: Option<String> = redis::cmd("HGET")
            .arg(user_key(&self.prefix, user_id))
            .arg(&field)
            .query_async(&mut conn)
            .await
            .map_err(redis_err("reading a conversation"))?;
        match value {
            None => Ok(None),
            Some(v) => Ok(decode_view(user_id, [(field, v)])?.conversations.into_values().next()),
        }
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
    /// all in Redis.
    fn marker_key(&self, stage: Stage, partition: i32) -> String {
        format!("{}partition:{stage}:{partition}", self.prefix)
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

    /// Raw command access for tools and tests.
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }
}
