//! Writing and reading the projection in Redis (layout in [`super`]).
//!
//! Every user's write is one `EVALSHA` of [`WRITE_SCRIPT`]: it compares the version the write carries with the
//! `_version` field and applies the totals, the changed conversation fields and the deleted ones only when the
//! write is not older, all atomically. A flush pipelines the writes of many users in one round trip.

use redis::aio::ConnectionManager;
use redis::RedisError;

use super::{decode_view, user_key, ProjectionError, ProjectionVersion, CONVERSATION_PREFIX, VERSION_FIELD};
use crate::core::contract::{ConversationView, UserView};

/// The `map_err` of every command: the client's error with what the projection was doing.
fn redis_err(doing: &'static str) -> impl FnOnce(RedisError) -> ProjectionError {
    move |source| ProjectionError::Redis { doing, source }
}

/// A result of the projection.
pub type ProjectionResult<T> = Result<T, ProjectionError>;

/// The write script. KEYS[1]: the user's hash. ARGV[1]: the version, `"{g} {a} {b}"` (the writing task's lease
/// generation and its two next offsets);
/// ARGV[2]: the totals value; ARGV[3]: `patch` (touch only the fields named) or `replace` (first delete every
/// conversation field); ARGV[4]: n, the number of fields to set; ARGV[5 .. 4+2n]: field, value pairs; the
/// remaining ARGV: fields to delete. Returns 1 when written, 0 when refused.
///
/// A write is refused when it comes from an older generation (a paused task whose partition moved: fencing), or
/// from the same generation with a position the stored one dominates: at least as far in both offsets and not
/// equal. The fold is order-proof, so a user's state at position `(a, b)` depends only on `(a, b)`; a dominated
/// write can only be older. Two positions neither of which dominates the other (a task restarted from its
/// checkpoint reads the two topics in another interleaving) are both accepted: the live task only moves forward
/// from there and rewrites every user it touches, so Redis converges; refusing them would leave a user stale.
pub const WRITE_SCRIPT: &str = r#"
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
    if string.sub(f, 1, 2) == 'c:' then redis.call('HDEL', KEYS[1], f) end
  end
end
redis.call('HSET', KEYS[1], '_version', ARGV[1], '_totals', ARGV[2])
local n = tonumber(ARGV[4])
for i = 5, 4 + 2 * n, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
for i = 5 + 2 * n, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
return 1
"#;

/// One user's write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserWrite {
    /// The user whose hash is written.
    pub user_id: String,
    /// The writing task's lease generation and the position this state reflects.
    pub version: ProjectionVersion,
    /// The user's full counts after the change.
    pub view: UserView,
    /// Conversations whose fields changed: set when the user is a member (present in `view`), deleted otherwise.
    pub changed: Vec<String>,
    /// Replace every conversation field with those of `view` (projection rebuild) instead of patching `changed`.
    pub replace: bool,
}

impl UserWrite {
    /// A write that replaces the user's whole hash with `view` at `version`.
    pub fn replace(view: UserView, version: ProjectionVersion) -> Self {
        let changed = view.conversations.keys().cloned().collect();
        Self { user_id: view.user_id.clone(), version, view, changed, replace: true }
    }
}

/// A handle on the projection: a reconnecting connection and the key prefix.
#[derive(Clone)]
pub struct RedisProjection {
    conn: ConnectionManager,
    prefix: String,
    sha: String,
}

impl RedisProjection {
    /// Connects (reconnecting on failure from then on); the write script is loaded on first use.
    ///
    /// Errors: [`ProjectionError::Redis`] for a malformed URL or Redis unreachable.
    pub async fn connect(url: &str, prefix: &str) -> ProjectionResult<Self> {
        let client = redis::Client::open(url).map_err(redis_err("parsing the URL"))?;
        let conn = ConnectionManager::new(client).await.map_err(redis_err("connecting"))?;
        let sha = redis::Script::new(WRITE_SCRIPT).get_hash().to_owned();
        Ok(Self { conn, prefix: prefix.to_owned(), sha })
    }

    /// The same connection with another key prefix (another namespace's projection).
    pub fn with_prefix(&self, prefix: &str) -> Self {
        Self { conn: self.conn.clone(), prefix: prefix.to_owned(), sha: self.sha.clone() }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
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
                    let mut conn = self.conn.clone();
                    redis::cmd("SCRIPT").arg("LOAD").arg(WRITE_SCRIPT).query_async::<String>(&mut conn).await?;
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

    async fn eval_pipeline(&self, writes: &[UserWrite]) -> Result<Vec<i64>, RedisError> {
        let mut pipe = redis::pipe();
        for w in writes {
            let cmd = pipe.cmd("EVALSHA").arg(&self.sha).arg(1).arg(user_key(&self.prefix, &w.user_id));
            cmd.arg(w.version.to_string()).arg(super::totals_value(&w.view)).arg(if w.replace {
                "replace"
            } else {
                "patch"
            });
            let (set, delete): (Vec<&String>, Vec<&String>) =
                w.changed.iter().partition(|c| w.view.conversations.contains_key(*c));
            cmd.arg(set.len());
            for c in set {
                cmd.arg(format!("{CONVERSATION_PREFIX}{c}")).arg(super::conversation_value(&w.view.conversations[c]));
            }
            for c in delete {
                cmd.arg(format!("{CONVERSATION_PREFIX}{c}"));
            }
        }
        let mut conn = self.conn.clone();
        pipe.query_async(&mut conn).await
    }

    /// A user's counts; the zero state when the user has no hash.
    ///
    /// Errors: [`ProjectionError::Redis`] when Redis fails; [`ProjectionError::Malformed`] for a malformed hash.
    pub async fn read(&self, user_id: &str) -> ProjectionResult<UserView> {
        let mut conn = self.conn.clone();
        let fields: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(user_key(&self.prefix, user_id))
            .query_async(&mut conn)
            .await
            .map_err(redis_err("reading a user"))?;
        Ok(decode_view(user_id, fields)?)
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

    /// The key marking that fold partition `partition`'s users are all in Redis.
    fn marker_key(&self, partition: i32) -> String {
        format!("{}partition:fold:{partition}", self.prefix)
    }

    /// Whether the marker of a fold partition is present. A missing marker means Redis lost the projection
    /// (restarted empty, flushed) or never had it: the partition's owner must rewrite all its users.
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn has_marker(&self, partition: i32) -> ProjectionResult<bool> {
        let mut conn = self.conn.clone();
        let key = self.marker_key(partition);
        redis::cmd("EXISTS").arg(key).query_async(&mut conn).await.map_err(redis_err("reading a marker"))
    }

    /// Sets the marker of a fold partition (after all its users were written).
    ///
    /// Errors: [`ProjectionError::Redis`].
    pub async fn set_marker(&self, partition: i32) -> ProjectionResult<()> {
        let mut conn = self.conn.clone();
        let key = self.marker_key(partition);
        redis::cmd("SET").arg(key).arg(1).query_async(&mut conn).await.map_err(redis_err("setting a marker"))
    }

    /// Raw command access for tools and tests.
    pub fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }
}
