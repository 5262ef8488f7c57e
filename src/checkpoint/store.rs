//! The checkpoint store in PostgreSQL: per-partition input offsets and the state of the entities changed since
//! the last checkpoint, written in one transaction (tables in `migrations/`).
//!
//! Every method returns a [`StoreError`]: [`StoreError::Fenced`] when a partition's lease moved (the caller stops),
//! [`StoreError::Db`] when PostgreSQL failed (transient: the caller may retry), [`StoreError::Malformed`] for a
//! schema name or row that cannot be used.

use std::collections::HashMap;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, FromRow, PgPool};

pub use super::Stage;

/// A checkpoint refused because another task took the partition's lease since this one started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fenced: {stage} partition {partition} lease is at generation {current}, this task holds {ours}")]
pub struct Fenced {
    /// The stage of the partition.
    pub stage: Stage,
    /// The partition number.
    pub partition: i32,
    /// The generation the refused task holds.
    pub ours: i64,
    /// The lease's generation now.
    pub current: i64,
}

/// A lease taken ([`CheckpointStore::acquire_as`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The generation taken: every commit of an older one is fenced from now on.
    pub generation: i64,
    /// The previous owner, when it did not release the lease (it crashed, is paused or cut off, or still stops)
    /// and wrote with a transactional id that is not the new owner's: unless that owner is still a live member of
    /// the group, the new owner initializes that id before it produces, which fences that producer and aborts its
    /// open transaction.
    pub unreleased: Option<Unreleased>,
}

/// A lease's previous owner that did not release it ([`Acquired::unreleased`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreleased {
    /// Its name (`host:pid`, or `{instance}@host:pid`).
    pub owner: String,
    /// The transactional id it wrote its deltas with.
    pub transactional_id: String,
}

impl Acquired {
    /// `previous`: the previous owner and its transactional id if it did not release the lease; `own`: the new
    /// owner's transactional id.
    fn new(generation: i64, previous: (Option<String>, Option<String>), own: Option<&str>) -> Self {
        let unreleased = match previous {
            (Some(owner), Some(id)) if Some(id.as_str()) != own => Some(Unreleased { owner, transactional_id: id }),
            _ => None,
        };
        Self { generation, unreleased }
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another task took the partition's lease: stop, never retry.
    #[error(transparent)]
    Fenced(#[from] Fenced),
    /// PostgreSQL unreachable or a statement failed; `doing` says what the store was doing. Transient.
    #[error("PostgreSQL, {doing}: {source}")]
    Db {
        /// What the store was doing, e.g. `committing a checkpoint`.
        doing: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A migration failed or was changed after being applied.
    #[error("applying migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A name or URL that cannot be used (a schema name other than letters, digits and `_`, a bad URL).
    #[error("{0}")]
    Malformed(String),
}

impl StoreError {
    /// Whether retrying may help (PostgreSQL failed), as opposed to a fencing or malformed input.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Db { .. })
    }
}

/// The `map_err` of every query: the driver's error with what the store was doing.
fn db(doing: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Db { doing, source }
}

/// A result of the store.
pub type StoreResult<T> = Result<T, StoreError>;

/// A change to one remembered notification: (user, notification id) and its encoded state (`None`: delete).
pub type NoteChange = ((String, String), Option<Vec<u8>>);

/// A change to one chunk of a fold partition's replies of a conversation (fold): (conversation, chunk) and its
/// encoded replies (`None`: the chunk holds none, delete).
pub type ReplyChange = ((String, u64), Option<Vec<u8>>);

/// A change to one conversation's member (fan-out): (conversation, user) and the conversation's head when the
/// member joined (`None`: the member left, delete).
pub type MemberChange = ((String, String), Option<u64>);

/// What one checkpoint writes besides the offsets, each entity's encoded state or `None` to delete it.
#[derive(Debug, Default, Clone)]
pub struct Changes {
    /// Users (fold) or conversations (fan-out).
    pub states: Vec<(String, Option<Vec<u8>>)>,
    /// Conversations' members that joined or left (fan-out): one row each, so a join writes O(1) bytes whatever
    /// the conversation's size.
    pub members: Vec<MemberChange>,
    /// Broadcast lists (fan-out).
    pub lists: Vec<(String, Option<Vec<u8>>)>,
    /// Remembered notifications (fold).
    pub notes: Vec<NoteChange>,
    /// The fold's fence against zombie deltas: (fan-out partition, newest generation seen).
    pub fences: Vec<(i32, i64)>,
    /// The fold partition's chunks of replies of read-diffused conversations that changed.
    pub replies: Vec<ReplyChange>,
}

impl Changes {
    /// Changes of the main entities only.
    pub fn states(states: Vec<(String, Option<Vec<u8>>)>) -> Self {
        Self { states, ..Self::default() }
    }

    /// Rows written or deleted, and bytes of state written.
    pub fn size(&self) -> (usize, usize) {
        let bytes = |s: &Option<Vec<u8>>| s.as_ref().map_or(0, Vec::len);
        let rows = self.states.len() + self.lists.len() + self.notes.len() + self.members.len() + self.replies.len();
        let b = self.states.iter().map(|(_, s)| bytes(s)).sum::<usize>()
            + self.replies.iter().map(|(_, s)| bytes(s)).sum::<usize>()
            + self.lists.iter().map(|(_, s)| bytes(s)).sum::<usize>()
            + self.notes.iter().map(|(_, s)| bytes(s)).sum::<usize>()
            + self.members.iter().map(|((c, u), _)| c.len() + u.len() + 8).sum::<usize>();
        (rows, b)
    }
}

/// One remembered notification's row.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct NoteRow {
    /// The recipient.
    pub user_id: String,
    /// The notification.
    pub notification_id: String,
    /// Its encoded state ([`crate::state::codec::encode_note`]).
    pub state: Vec<u8>,
}

/// One member of a conversation, as the fan-out checkpoints it (`fanout_members`).
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct MemberRow {
    /// The conversation.
    pub conversation_id: String,
    /// The member.
    pub user_id: String,
    /// The conversation's head when the member (last) joined.
    pub joined_head: i64,
}

/// The whole checkpoint at one moment ([`CheckpointStore::snapshot`]).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// (topic, partition) → next offset of the fan-out stage.
    pub fanout_offsets: HashMap<(String, i32), i64>,
    /// (topic, partition) → next offset of the fold stage.
    pub fold_offsets: HashMap<(String, i32), i64>,
    /// Every conversation's encoded state.
    pub conversations: Vec<StateRow>,
    /// Every conversation's members (rows of version 6 on; older rows hold theirs).
    pub members: Vec<MemberRow>,
    /// Every user's encoded state.
    pub users: Vec<StateRow>,
    /// Every broadcast list's encoded state.
    pub lists: Vec<StateRow>,
    /// Every remembered notification.
    pub notes: Vec<NoteRow>,
    /// The fold's fences: (fold partition, fan-out partition, newest generation seen).
    pub fences: Vec<(i32, i32, i64)>,
    /// Every fold partition's chunks of replies of read-diffused conversations.
    pub replies: Vec<ReplyRow>,
}

/// One checkpointed chunk of a fold partition's replies of a read-diffused conversation (`fold_replies`).
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct ReplyRow {
    /// The fold partition that wrote it.
    pub partition: i32,
    /// The conversation.
    pub conversation_id: String,
    /// The chunk: its replies' seqs are in `chunk * 4096 .. (chunk + 1) * 4096`.
    pub chunk: i64,
    /// The encoded replies (`crate::state::codec::encode_replies`).
    pub state: Vec<u8>,
}

/// One checkpointed entity (a user of the fold, a conversation of the fan-out).
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct StateRow {
    /// The user or conversation id.
    pub id: String,
    /// The partition whose task owns it.
    pub partition: i32,
    /// Its encoded state ([`crate::state::codec::encode_user`], [`crate::state::codec::encode_conversation`]).
    pub state: Vec<u8>,
}

/// One checkpointed entity with the time of the checkpoint that wrote it ([`CheckpointStore::state_row`]).
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct TimedStateRow {
    /// The entity.
    #[sqlx(flatten)]
    pub row: StateRow,
    /// When the checkpoint that wrote it committed.
    pub updated_at: DateTime<Utc>,
}

#[derive(FromRow)]
struct LeaseRow {
    partition: i32,
    generation: i64,
}

#[derive(FromRow)]
struct SizeRow {
    rows: i64,
    bytes: i64,
}

#[derive(FromRow)]
struct OffsetRow {
    stage: String,
    topic: String,
    partition: i32,
    next_offset: i64,
}

/// The row of the `replays` table: which replay filled a namespace's schema and whether it finished.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct ReplayStatus {
    /// The namespace replayed from (its checkpoint, with `--from checkpoint`).
    pub source: String,
    /// `earliest`, `checkpoint` or the RFC 3339 timestamp.
    #[sqlx(rename = "from_spec")]
    pub from: String,
    /// When the replay started (its latest fresh start).
    pub started_at: DateTime<Utc>,
    /// Set when the replay reached the log end it aimed at.
    pub finished_at: Option<DateTime<Utc>>,
    /// Records folded, over every run that finished.
    pub events: i64,
    /// Whether its first checkpoint completed (otherwise it starts afresh).
    pub seeded: bool,
}

/// Checks a schema name: letters, digits and `_` only, as it is spliced into SQL.
fn check_schema(schema: &str) -> StoreResult<()> {
    if schema.is_empty() || !schema.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(StoreError::Malformed(format!("database schema {schema:?} must be letters, digits and _")));
    }
    Ok(())
}

/// The table and id column of a stage's entities.
fn table(stage: Stage) -> (&'static str, &'static str) {
    match stage {
        Stage::Fold => ("fold_users", "user_id"),
        Stage::FanOut => ("fanout_conversations", "conversation_id"),
    }
}

/// Drops a checkpoint schema and everything in it (`unread drop`); nothing happens when it does not exist.
///
/// Errors: [`StoreError::Malformed`] for a schema name other than letters, digits and `_`; [`StoreError::Db`].
pub async fn drop_schema(url: &str, schema: &str) -> StoreResult<()> {
    check_schema(schema)?;
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await.map_err(db("connecting"))?;
    // Audited: the schema name was checked above to be letters, digits and _ only.
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    sqlx::query(AssertSqlSafe(sql)).execute(&pool).await.map_err(db("dropping a schema"))?;
    pool.close().await;
    Ok(())
}

/// A connection pool to the checkpoint schema.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    pool: PgPool,
}

/// The embedded migrations of `migrations/`.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Creates `schema` if missing. Two processes creating it at once: the loser's error is ignored when the schema
/// exists.
async fn create_schema(base: &PgConnectOptions, schema: &str) -> StoreResult<()> {
    let admin = PgPoolOptions::new().max_connections(1).connect_with(base.clone()).await.map_err(db("connecting"))?;
    // Audited: the schema name was checked by the caller to be letters, digits and _ only.
    let created = sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))).execute(&admin).await;
    if let Err(e) = created {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema)
            .fetch_one(&admin)
            .await
            .map_err(db("looking up a schema"))?;
        if !exists {
            return Err(db("creating a schema")(e));
        }
    }
    admin.close().await;
    Ok(())
}

impl CheckpointStore {
    /// Connects to `url` with `schema` as the search path, creating the schema when missing.
    ///
    /// Errors: [`StoreError::Malformed`] for a bad schema name or URL; [`StoreError::Db`] when PostgreSQL is
    /// unreachable.
    pub async fn connect(url: &str, schema: &str, max_connections: u32) -> StoreResult<Self> {
        check_schema(schema)?;
        let base =
            PgConnectOptions::from_str(url).map_err(|e| StoreError::Malformed(format!("database URL {url}: {e}")))?;
        create_schema(&base, schema).await?;
        let opts = base.options([("search_path", schema)]);
        // A short acquire timeout makes an outage an error that the caller logs, counts and retries, rather
        // than every query silently hanging for the default 30 s.
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_with(opts)
            .await
            .map_err(db("connecting"))?;
        Ok(Self { pool })
    }

    /// Applies the migrations (idempotent).
    ///
    /// Errors: [`StoreError::Migrate`] when a migration fails or was changed after being applied.
    pub async fn migrate(&self) -> StoreResult<()> {
        Ok(MIGRATOR.run(&self.pool).await?)
    }

    /// Takes the lease of one partition: bumps and returns its generation. Every later [`CheckpointStore::commit`]
    /// with an older generation fails with [`Fenced`].
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn acquire(&self, stage: Stage, partition: i32, owner: &str) -> StoreResult<i64> {
        Ok(self.acquire_as(stage, partition, owner, None).await?.generation)
    }

    /// [`CheckpointStore::acquire`], recording `transactional_id`, the Kafka producer the new owner writes with (a
    /// fan-out's; `None` for the fold). Returns the generation and, when the previous owner did not release the
    /// lease ([`CheckpointStore::release`]) and wrote with another transactional id, that owner and id.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn acquire_as(
        &self,
        stage: Stage,
        partition: i32,
        owner: &str,
        transactional_id: Option<&str>,
    ) -> StoreResult<Acquired> {
        // A first lease is inserted; a concurrent first insert makes the update run again.
        for _ in 0..3 {
            if let Some(taken) = self.take(stage, partition, owner, transactional_id, None).await? {
                return Ok(taken);
            }
            let inserted: Option<i64> = sqlx::query_scalar(
                "INSERT INTO partition_leases (stage, partition, generation, owner, transactional_id) \
                 VALUES ($1, $2, 1, $3, $4) ON CONFLICT (stage, partition) DO NOTHING RETURNING generation",
            )
            .bind(stage.as_str())
            .bind(partition)
            .bind(owner)
            .bind(transactional_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(db("taking a lease"))?;
            if let Some(generation) = inserted {
                return Ok(Acquired::new(generation, (None, None), transactional_id));
            }
        }
        Err(db("taking a lease (three tries raced with other takers)")(sqlx::Error::RowNotFound))
    }

    /// The partitions, both stages, whose lease an owner whose name starts with `prefix` holds now, as (stage,
    /// partition) in ascending order: at a static member's start, those its previous incarnation held, unless
    /// another process took them since.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn leases_held(&self, prefix: &str) -> StoreResult<Vec<(Stage, i32)>> {
        let rows: Vec<(String, i32)> = sqlx::query_as(
            "SELECT stage, partition FROM partition_leases WHERE starts_with(owner, $1) ORDER BY stage, partition",
        )
        .bind(prefix)
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading the leases"))?;
        let stage = |name: &str| Stage::ALL.into_iter().find(|s| s.as_str() == name); // the table's CHECK: one of them
        Ok(rows.into_iter().filter_map(|(name, p)| Some((stage(&name)?, p))).collect())
    }

    /// Takes the lease of one partition as `owner` (as [`CheckpointStore::acquire_as`]) only if another owner whose
    /// name starts with `prefix` holds it now, and is not draining it unless `even_draining`
    /// ([`CheckpointStore::mark_draining`]): `None` when a different owner took it meanwhile (or `owner` itself
    /// already holds it), or it is draining.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn acquire_held(
        &self,
        stage: Stage,
        partition: i32,
        prefix: &str,
        owner: &str,
        even_draining: bool,
        transactional_id: Option<&str>,
    ) -> StoreResult<Option<Acquired>> {
        self.take(stage, partition, owner, transactional_id, Some((prefix, even_draining))).await
    }

    /// The update of [`CheckpointStore::acquire_as`] and [`CheckpointStore::acquire_held`]: the next generation of
    /// an existing lease row, taken by `owner` writing with `transactional_id`; with `held`, only if an owner named
    /// `{prefix}…` other than `owner` holds it and is not draining it (unless the flag says even then). `None` when
    /// no row matched. The previous owner and id come from a locked read joined to the update (a CTE read only in
    /// RETURNING would see the row as this statement left it).
    ///
    /// Errors: [`StoreError::Db`].
    async fn take(
        &self,
        stage: Stage,
        partition: i32,
        owner: &str,
        transactional_id: Option<&str>,
        held: Option<(&str, bool)>,
    ) -> StoreResult<Option<Acquired>> {
        let (prefix, even_draining) = held.map_or((None, false), |(prefix, even)| (Some(prefix), even));
        let row: Option<(i64, Option<String>, Option<String>)> = sqlx::query_as(
            "UPDATE partition_leases l SET generation = l.generation + 1, owner = $3, acquired_at = now(), \
             draining = false, released = false, transactional_id = $4 \
             FROM (SELECT owner, transactional_id, released FROM partition_leases \
             WHERE stage = $1 AND partition = $2 FOR UPDATE) prev \
             WHERE l.stage = $1 AND l.partition = $2 AND ($5::text IS NULL OR (starts_with(l.owner, $5) \
             AND l.owner <> $3 AND (NOT l.draining OR l.released OR $6))) \
             RETURNING l.generation, CASE WHEN NOT prev.released THEN prev.owner END, \
             CASE WHEN NOT prev.released THEN prev.transactional_id END",
        )
        .bind(stage.as_str())
        .bind(partition)
        .bind(owner)
        .bind(transactional_id)
        .bind(prefix)
        .bind(even_draining)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("taking a lease"))?;
        Ok(row.map(|(generation, previous, id)| Acquired::new(generation, (previous, id), transactional_id)))
    }

    /// Marks every lease `owner` holds as draining (a clean stop has begun), unless its task already stopped
    /// ([`CheckpointStore::release`]; the two may come in either order). A restarted static member waits for a
    /// draining lease to be released before it takes it. Returns how many were marked.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn mark_draining(&self, owner: &str) -> StoreResult<u64> {
        let done = sqlx::query("UPDATE partition_leases SET draining = true WHERE owner = $1 AND NOT released")
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(db("marking the leases draining"))?;
        Ok(done.rows_affected())
    }

    /// Marks a partition's lease released if it is still at `generation`: its task stopped cleanly (last
    /// checkpoint and Kafka transaction done).
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn release(&self, stage: Stage, partition: i32, generation: i64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE partition_leases SET released = true \
             WHERE stage = $1 AND partition = $2 AND generation = $3 AND NOT released",
        )
        .bind(stage.as_str())
        .bind(partition)
        .bind(generation)
        .execute(&self.pool)
        .await
        .map_err(db("releasing a lease"))?;
        Ok(())
    }

    /// Whether an owner whose name starts with `prefix` holds the partition's lease and is draining it
    /// ([`CheckpointStore::mark_draining`]) without having released it yet.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn draining(&self, stage: Stage, partition: i32, prefix: &str) -> StoreResult<bool> {
        let draining: Option<bool> = sqlx::query_scalar(
            "SELECT draining AND NOT released FROM partition_leases \
             WHERE stage = $1 AND partition = $2 AND starts_with(owner, $3)",
        )
        .bind(stage.as_str())
        .bind(partition)
        .bind(prefix)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("reading a lease"))?;
        Ok(draining.unwrap_or(false))
    }

    /// The current generation of a partition's lease (0 if never taken).
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn generation(&self, stage: Stage, partition: i32) -> StoreResult<i64> {
        let g: Option<i64> =
            sqlx::query_scalar("SELECT generation FROM partition_leases WHERE stage = $1 AND partition = $2")
                .bind(stage.as_str())
                .bind(partition)
                .fetch_optional(&self.pool)
                .await
                .map_err(db("reading a lease"))?;
        Ok(g.unwrap_or(0))
    }

    /// One entity's checkpoint row with the time of the checkpoint that wrote it.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn state_row(&self, stage: Stage, id: &str) -> StoreResult<Option<TimedStateRow>> {
        let (table, column) = table(stage);
        // Audited: `table` and `column` are constants of `table()`.
        let sql = format!("SELECT {column} AS id, partition, state, updated_at FROM {table} WHERE {column} = $1");
        sqlx::query_as(AssertSqlSafe(sql)).bind(id).fetch_optional(&self.pool).await.map_err(db("reading a state"))
    }

    /// Every partition's lease generation of a stage.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn generations(&self, stage: Stage) -> StoreResult<HashMap<i32, i64>> {
        let rows: Vec<LeaseRow> = sqlx::query_as("SELECT partition, generation FROM partition_leases WHERE stage = $1")
            .bind(stage.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(db("reading leases"))?;
        Ok(rows.into_iter().map(|r| (r.partition, r.generation)).collect())
    }

    /// Fails with [`Fenced`] unless the lease is still at `generation`.
    ///
    /// Errors: [`StoreError::Fenced`]; [`StoreError::Db`].
    pub async fn check_lease(&self, stage: Stage, partition: i32, generation: i64) -> StoreResult<()> {
        let current = self.generation(stage, partition).await?;
        if current != generation {
            return Err(Fenced { stage, partition, ours: generation, current }.into());
        }
        Ok(())
    }

    /// The next offset to process of one input partition, if checkpointed.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn offset(&self, stage: Stage, topic: &str, partition: i32) -> StoreResult<Option<i64>> {
        sqlx::query_scalar(
            "SELECT next_offset FROM checkpoint_offsets WHERE stage = $1 AND topic = $2 AND partition = $3",
        )
        .bind(stage.as_str())
        .bind(topic)
        .bind(partition)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("reading an offset"))
    }

    /// Every checkpointed offset of a stage: (topic, partition) → next offset.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn offsets(&self, stage: Stage) -> StoreResult<HashMap<(String, i32), i64>> {
        let rows: Vec<OffsetRow> =
            sqlx::query_as("SELECT stage, topic, partition, next_offset FROM checkpoint_offsets WHERE stage = $1")
                .bind(stage.as_str())
                .fetch_all(&self.pool)
                .await
                .map_err(db("reading offsets"))?;
        Ok(rows.into_iter().map(|r| ((r.topic, r.partition), r.next_offset)).collect())
    }

    /// The rows of a stage's entities chosen by `filter` (SQL after `FROM table`, with `$1` bound to `arg`).
    async fn rows<'q, A>(&self, stage: Stage, filter: &str, arg: A) -> StoreResult<Vec<StateRow>>
    where
        A: 'q + Send + sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        let (table, column) = table(stage);
        // Audited: `table` and `column` are constants of `table()`, `filter` a constant of the callers below.
        let sql = format!("SELECT {column} AS id, partition, state FROM {table} {filter}");
        sqlx::query_as(AssertSqlSafe(sql)).bind(arg).fetch_all(&self.pool).await.map_err(db("reading states"))
    }

    /// The encoded states of one partition's entities: users for [`Stage::Fold`], conversations for
    /// [`Stage::FanOut`], or every partition's when `partition` is `None`.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn states(&self, stage: Stage, partition: Option<i32>) -> StoreResult<Vec<StateRow>> {
        self.rows(stage, "WHERE $1::int IS NULL OR partition = $1", partition).await
    }

    /// The encoded states of `n` entities chosen at random (all when there are fewer); the choice is made in
    /// PostgreSQL, so only the sample crosses the wire.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn states_sample(&self, stage: Stage, n: usize) -> StoreResult<Vec<StateRow>> {
        self.rows(stage, "ORDER BY random() LIMIT $1", n as i64).await
    }

    /// The encoded states of some entities by id.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn states_of(&self, stage: Stage, ids: &[String]) -> StoreResult<Vec<StateRow>> {
        let (_, column) = table(stage);
        self.rows(stage, &format!("WHERE {column} = ANY($1)"), ids.to_vec()).await
    }

    /// The encoded states of the broadcast lists of one fan-out partition, or of every partition.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn lists(&self, partition: Option<i32>) -> StoreResult<Vec<StateRow>> {
        sqlx::query_as(
            "SELECT broadcast_id AS id, partition, state FROM fanout_lists WHERE $1::int IS NULL OR partition = $1",
        )
        .bind(partition)
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading lists"))
    }

    /// The members of one fan-out partition's conversations, or of every partition's.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn members(&self, partition: Option<i32>) -> StoreResult<Vec<MemberRow>> {
        sqlx::query_as(
            "SELECT conversation_id, user_id, joined_head FROM fanout_members WHERE $1::int IS NULL OR partition = $1",
        )
        .bind(partition)
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading members"))
    }

    /// The members of one conversation.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn members_of(&self, conversation_id: &str) -> StoreResult<Vec<MemberRow>> {
        sqlx::query_as("SELECT conversation_id, user_id, joined_head FROM fanout_members WHERE conversation_id = $1")
            .bind(conversation_id)
            .fetch_all(&self.pool)
            .await
            .map_err(db("reading members"))
    }

    /// The fold's fence against zombie deltas in one partition: (fan-out partition, newest generation seen).
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn fences(&self, partition: i32) -> StoreResult<Vec<(i32, i64)>> {
        sqlx::query_as("SELECT source_partition, generation FROM fold_delta_fences WHERE partition = $1")
            .bind(partition)
            .fetch_all(&self.pool)
            .await
            .map_err(db("reading delta fences"))
    }

    /// The remembered notifications of one fold partition's users, or of every partition.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn notes(&self, partition: Option<i32>) -> StoreResult<Vec<NoteRow>> {
        sqlx::query_as(
            "SELECT user_id, notification_id, state FROM fold_notifications WHERE $1::int IS NULL OR partition = $1",
        )
        .bind(partition)
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading notifications"))
    }

    /// The chunks of replies a fold partition keeps of its read-diffused conversations, or every partition's.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn replies(&self, partition: Option<i32>) -> StoreResult<Vec<ReplyRow>> {
        sqlx::query_as(
            "SELECT partition, conversation_id, chunk, state FROM fold_replies WHERE $1::int IS NULL OR partition = $1",
        )
        .bind(partition)
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading replies"))
    }

    /// The remembered notifications of some users.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn notes_of(&self, users: &[String]) -> StoreResult<Vec<NoteRow>> {
        sqlx::query_as("SELECT user_id, notification_id, state FROM fold_notifications WHERE user_id = ANY($1)")
            .bind(users)
            .fetch_all(&self.pool)
            .await
            .map_err(db("reading notifications"))
    }

    /// The ids of every checkpointed entity of a stage (users or conversations), without their states.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn ids(&self, stage: Stage) -> StoreResult<Vec<String>> {
        let (table, column) = table(stage);
        // Audited: constants of `table()`.
        let sql = format!("SELECT {column} FROM {table}");
        sqlx::query_scalar(AssertSqlSafe(sql)).fetch_all(&self.pool).await.map_err(db("reading ids"))
    }

    /// Writes one checkpoint in one transaction: the changed entities of `partition` (`None` state = delete) and
    /// the next offsets of the partition's input topics, provided the partition's lease is still at `generation`
    /// (the row is locked for the transaction).
    ///
    /// Errors: [`StoreError::Fenced`] when another task took the lease; [`StoreError::Db`] when a statement
    /// fails. Nothing is written then.
    pub async fn commit(
        &self,
        stage: Stage,
        partition: i32,
        generation: i64,
        changes: &Changes,
        offsets: &[(&str, i64)],
    ) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(db("starting a checkpoint"))?;
        let current: Option<i64> = sqlx::query_scalar(
            "SELECT generation FROM partition_leases WHERE stage = $1 AND partition = $2 FOR UPDATE",
        )
        .bind(stage.as_str())
        .bind(partition)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db("locking a lease"))?;
        if current != Some(generation) {
            return Err(Fenced { stage, partition, ours: generation, current: current.unwrap_or(0) }.into());
        }
        let (table, column) = table(stage);
        write_rows(&mut tx, table, column, partition, &changes.states).await?;
        write_rows(&mut tx, "fanout_lists", "broadcast_id", partition, &changes.lists).await?;
        write_replies(&mut tx, partition, &changes.replies).await?;
        write_members(&mut tx, partition, &changes.members).await?;
        write_notes(&mut tx, partition, &changes.notes).await?;
        write_fences(&mut tx, partition, &changes.fences).await?;
        write_offsets(&mut tx, stage, partition, offsets).await?;
        tx.commit().await.map_err(db("committing a checkpoint"))
    }

    /// A consistent snapshot of the whole checkpoint, read in one `REPEATABLE READ` transaction: every partition's
    /// state and offsets as one set of committed checkpoints (each partition's state matches its offsets).
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn snapshot(&self) -> StoreResult<Snapshot> {
        let doing = "reading a snapshot";
        let mut tx = self.pool.begin().await.map_err(db(doing))?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db(doing))?;
        let offsets: Vec<OffsetRow> =
            sqlx::query_as("SELECT stage, topic, partition, next_offset FROM checkpoint_offsets")
                .fetch_all(&mut *tx)
                .await
                .map_err(db(doing))?;
        let mut snap = Snapshot::default();
        for r in offsets {
            let map = if r.stage == Stage::Fold.as_str() { &mut snap.fold_offsets } else { &mut snap.fanout_offsets };
            map.insert((r.topic, r.partition), r.next_offset);
        }
        snap.conversations = sqlx::query_as("SELECT conversation_id AS id, partition, state FROM fanout_conversations")
            .fetch_all(&mut *tx)
            .await
            .map_err(db(doing))?;
        snap.members = sqlx::query_as("SELECT conversation_id, user_id, joined_head FROM fanout_members")
            .fetch_all(&mut *tx)
            .await
            .map_err(db(doing))?;
        snap.users = sqlx::query_as("SELECT user_id AS id, partition, state FROM fold_users")
            .fetch_all(&mut *tx)
            .await
            .map_err(db(doing))?;
        snap.lists = sqlx::query_as("SELECT broadcast_id AS id, partition, state FROM fanout_lists")
            .fetch_all(&mut *tx)
            .await
            .map_err(db(doing))?;
        snap.fences = sqlx::query_as("SELECT partition, source_partition, generation FROM fold_delta_fences")
            .fetch_all(&mut *tx)
            .await
            .map_err(db(doing))?;
        snap.notes = sqlx::query_as("SELECT user_id, notification_id, state FROM fold_notifications")
            .fetch_all(&mut *tx)
            .await
            .map_err(db(doing))?;
        snap.replies = sqlx::query_as("SELECT partition, conversation_id, chunk, state FROM fold_replies")
            .fetch_all(&mut *tx)
            .await
            .map_err(db(doing))?;
        tx.commit().await.map_err(db(doing))?;
        Ok(snap)
    }

    /// The replay that filled this schema, if any.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn replay_status(&self) -> StoreResult<Option<ReplayStatus>> {
        sqlx::query_as("SELECT source, from_spec, started_at, finished_at, events, seeded FROM replays WHERE id = 1")
            .fetch_optional(&self.pool)
            .await
            .map_err(db("reading the replay status"))
    }

    /// Records that a replay fills this schema: a fresh one from `source` (a namespace) starting at `from`, recorded
    /// anew and not yet seeded; or, when not `fresh`, a resumed one, only marked unfinished again.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn start_replay(&self, source: &str, from: &str, fresh: bool) -> StoreResult<()> {
        let query = if fresh {
            sqlx::query(
                "INSERT INTO replays (id, source, from_spec) VALUES (1, $1, $2) ON CONFLICT (id) DO UPDATE \
                 SET source = EXCLUDED.source, from_spec = EXCLUDED.from_spec, started_at = now(), \
                 finished_at = NULL, events = 0, seeded = false",
            )
            .bind(source)
            .bind(from)
        } else {
            sqlx::query("UPDATE replays SET finished_at = NULL WHERE id = 1")
        };
        query.execute(&self.pool).await.map_err(db("recording a replay"))?;
        Ok(())
    }

    /// Records that the replay reached the end it aimed at, having folded `events` records in all its runs.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn finish_replay(&self, events: i64) -> StoreResult<()> {
        sqlx::query("UPDATE replays SET finished_at = now(), events = events + $1 WHERE id = 1")
            .bind(events)
            .execute(&self.pool)
            .await
            .map_err(db("finishing a replay"))?;
        Ok(())
    }

    /// Records that the replay's first checkpoint is complete: from now on it resumes instead of starting afresh.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn mark_replay_seeded(&self) -> StoreResult<()> {
        sqlx::query("UPDATE replays SET seeded = true WHERE id = 1")
            .execute(&self.pool)
            .await
            .map_err(db("marking a replay seeded"))?;
        Ok(())
    }

    /// Deletes every checkpointed state and offset of the schema (a replay restarting afresh). Leases stay.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn reset(&self) -> StoreResult<()> {
        let mut tx = self.pool.begin().await.map_err(db("resetting"))?;
        let tables = [
            "checkpoint_offsets",
            "fold_users",
            "fanout_conversations",
            "fanout_members",
            "fanout_lists",
            "fold_notifications",
            "fold_replies",
        ];
        for table in tables {
            // Audited: the table names are the constants above.
            sqlx::query(AssertSqlSafe(format!("DELETE FROM {table}")))
                .execute(&mut *tx)
                .await
                .map_err(db("resetting"))?;
        }
        tx.commit().await.map_err(db("resetting"))
    }

    /// Whether the schema holds any checkpoint at all.
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn is_empty(&self) -> StoreResult<bool> {
        sqlx::query_scalar("SELECT NOT EXISTS (SELECT 1 FROM checkpoint_offsets)")
            .fetch_one(&self.pool)
            .await
            .map_err(db("reading offsets"))
    }

    /// Size of the checkpoint: (rows, bytes of encoded state) over the state tables of users, conversations and
    /// members (a member counts its two ids and its head).
    ///
    /// Errors: [`StoreError::Db`].
    pub async fn size(&self) -> StoreResult<(i64, i64)> {
        let size: SizeRow = sqlx::query_as(
            "SELECT (SELECT count(*) FROM fold_users) + (SELECT count(*) FROM fanout_conversations) + \
             (SELECT count(*) FROM fanout_members) AS rows, \
             COALESCE((SELECT sum(length(state)) FROM fold_users), 0)::bigint + \
             COALESCE((SELECT sum(length(state)) FROM fanout_conversations), 0)::bigint + \
             COALESCE((SELECT sum(length(conversation_id) + length(user_id) + 8) FROM fanout_members), 0)::bigint \
             AS bytes",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(db("measuring the checkpoint"))?;
        Ok((size.rows, size.bytes))
    }
}

/// Upserts the rows with a state and deletes those without, in `tx`.
async fn write_rows(
    tx: &mut sqlx::PgConnection,
    table: &'static str,
    column: &'static str,
    partition: i32,
    rows: &[(String, Option<Vec<u8>>)],
) -> StoreResult<()> {
    let (upserts, deletes): (Vec<_>, Vec<_>) = rows.iter().partition(|(_, s)| s.is_some());
    if !upserts.is_empty() {
        let ids: Vec<&str> = upserts.iter().map(|(i, _)| i.as_str()).collect();
        let states: Vec<&[u8]> = upserts.iter().map(|(_, s)| s.as_deref().unwrap_or_default()).collect();
        // Audited: `table` and `column` are constants of this module, never input.
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} ({column}, partition, state, updated_at) \
             SELECT i, $3, s, now() FROM UNNEST($1::text[], $2::bytea[]) AS t(i, s) \
             ON CONFLICT ({column}) DO UPDATE SET state = EXCLUDED.state, partition = EXCLUDED.partition, \
             updated_at = now()"
        )))
        .bind(&ids)
        .bind(&states)
        .bind(partition)
        .execute(&mut *tx)
        .await
        .map_err(db("writing states"))?;
    }
    if !deletes.is_empty() {
        let ids: Vec<&str> = deletes.iter().map(|(i, _)| i.as_str()).collect();
        sqlx::query(AssertSqlSafe(format!("DELETE FROM {table} WHERE {column} = ANY($1)")))
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(db("deleting states"))?;
    }
    Ok(())
}

/// Upserts the members that joined and deletes those that left, in `tx`.
async fn write_members(tx: &mut sqlx::PgConnection, partition: i32, rows: &[MemberChange]) -> StoreResult<()> {
    let (upserts, deletes): (Vec<_>, Vec<_>) = rows.iter().partition(|(_, head)| head.is_some());
    if !upserts.is_empty() {
        let convs: Vec<&str> = upserts.iter().map(|((c, _), _)| c.as_str()).collect();
        let users: Vec<&str> = upserts.iter().map(|((_, u), _)| u.as_str()).collect();
        // Heads are seqs, at most 2^53 (the contract's bound), so they fit a bigint.
        let heads: Vec<i64> = upserts.iter().map(|(_, h)| h.unwrap_or_default() as i64).collect();
        sqlx::query(
            "INSERT INTO fanout_members (conversation_id, user_id, partition, joined_head) \
             SELECT c, u, $4, h FROM UNNEST($1::text[], $2::text[], $3::bigint[]) AS t(c, u, h) \
             ON CONFLICT (conversation_id, user_id) DO UPDATE SET joined_head = EXCLUDED.joined_head, \
             partition = EXCLUDED.partition",
        )
        .bind(&convs)
        .bind(&users)
        .bind(&heads)
        .bind(partition)
        .execute(&mut *tx)
        .await
        .map_err(db("writing members"))?;
    }
    if !deletes.is_empty() {
        let convs: Vec<&str> = deletes.iter().map(|((c, _), _)| c.as_str()).collect();
        let users: Vec<&str> = deletes.iter().map(|((_, u), _)| u.as_str()).collect();
        sqlx::query(
            "DELETE FROM fanout_members AS m USING UNNEST($1::text[], $2::text[]) AS t(c, u) \
             WHERE m.conversation_id = t.c AND m.user_id = t.u",
        )
        .bind(&convs)
        .bind(&users)
        .execute(&mut *tx)
        .await
        .map_err(db("deleting members"))?;
    }
    Ok(())
}

/// Upserts the remembered notifications with a state and deletes those without, in `tx`.
async fn write_notes(tx: &mut sqlx::PgConnection, partition: i32, rows: &[NoteChange]) -> StoreResult<()> {
    let (upserts, deletes): (Vec<_>, Vec<_>) = rows.iter().partition(|(_, s)| s.is_some());
    if !upserts.is_empty() {
        let users: Vec<&str> = upserts.iter().map(|((u, _), _)| u.as_str()).collect();
        let ids: Vec<&str> = upserts.iter().map(|((_, n), _)| n.as_str()).collect();
        let states: Vec<&[u8]> = upserts.iter().map(|(_, s)| s.as_deref().unwrap_or_default()).collect();
        sqlx::query(
            "INSERT INTO fold_notifications (user_id, notification_id, partition, state, updated_at) \
             SELECT u, n, $4, s, now() FROM UNNEST($1::text[], $2::text[], $3::bytea[]) AS t(u, n, s) \
             ON CONFLICT (user_id, notification_id) DO UPDATE SET state = EXCLUDED.state, \
             partition = EXCLUDED.partition, updated_at = now()",
        )
        .bind(&users)
        .bind(&ids)
        .bind(&states)
        .bind(partition)
        .execute(&mut *tx)
        .await
        .map_err(db("writing notifications"))?;
    }
    if !deletes.is_empty() {
        let users: Vec<&str> = deletes.iter().map(|((u, _), _)| u.as_str()).collect();
        let ids: Vec<&str> = deletes.iter().map(|((_, n), _)| n.as_str()).collect();
        sqlx::query(
            "DELETE FROM fold_notifications AS f USING UNNEST($1::text[], $2::text[]) AS t(u, n) \
             WHERE f.user_id = t.u AND f.notification_id = t.n",
        )
        .bind(&users)
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .map_err(db("deleting notifications"))?;
    }
    Ok(())
}

/// Upserts the next offsets of a partition's input topics, in `tx`.
async fn write_fences(tx: &mut sqlx::PgConnection, partition: i32, fences: &[(i32, i64)]) -> StoreResult<()> {
    for (source, generation) in fences {
        sqlx::query(
            "INSERT INTO fold_delta_fences (partition, source_partition, generation, updated_at) \
             VALUES ($1, $2, $3, now()) ON CONFLICT (partition, source_partition) \
             DO UPDATE SET generation = EXCLUDED.generation, updated_at = now()",
        )
        .bind(partition)
        .bind(source)
        .bind(generation)
        .execute(&mut *tx)
        .await
        .map_err(db("writing delta fences"))?;
    }
    Ok(())
}

/// Writes (or, for `None`, deletes) fold partition `partition`'s chunks of replies, one statement each way.
async fn write_replies(tx: &mut sqlx::PgConnection, partition: i32, rows: &[ReplyChange]) -> StoreResult<()> {
    let (upserts, deletes): (Vec<_>, Vec<_>) = rows.iter().partition(|(_, s)| s.is_some());
    let keys = |rows: &[&ReplyChange]| -> (Vec<String>, Vec<i64>) {
        // Chunks are seqs (at most 2^53) over 4,096: they fit a bigint.
        rows.iter().map(|((id, chunk), _)| (id.clone(), *chunk as i64)).unzip()
    };
    if !upserts.is_empty() {
        let (ids, chunks) = keys(&upserts);
        let states: Vec<&[u8]> = upserts.iter().map(|(_, s)| s.as_deref().unwrap_or_default()).collect();
        sqlx::query(
            "INSERT INTO fold_replies (partition, conversation_id, chunk, state, updated_at) \
             SELECT $4, i, c, s, now() FROM UNNEST($1::text[], $2::bigint[], $3::bytea[]) AS t(i, c, s) \
             ON CONFLICT (partition, conversation_id, chunk) DO UPDATE SET state = EXCLUDED.state, updated_at = now()",
        )
        .bind(&ids)
        .bind(&chunks)
        .bind(&states)
        .bind(partition)
        .execute(&mut *tx)
        .await
        .map_err(db("writing replies"))?;
    }
    if !deletes.is_empty() {
        let (ids, chunks) = keys(&deletes);
        sqlx::query(
            "DELETE FROM fold_replies f USING UNNEST($2::text[], $3::bigint[]) AS t(i, c) \
             WHERE f.partition = $1 AND f.conversation_id = t.i AND f.chunk = t.c",
        )
        .bind(partition)
        .bind(&ids)
        .bind(&chunks)
        .execute(&mut *tx)
        .await
        .map_err(db("deleting replies"))?;
    }
    Ok(())
}

async fn write_offsets(
    tx: &mut sqlx::PgConnection,
    stage: Stage,
    partition: i32,
    offsets: &[(&str, i64)],
) -> StoreResult<()> {
    for (topic, next) in offsets {
        sqlx::query(
            "INSERT INTO checkpoint_offsets (stage, topic, partition, next_offset, updated_at) \
             VALUES ($1, $2, $3, $4, now()) ON CONFLICT (stage, topic, partition) \
             DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()",
        )
        .bind(stage.as_str())
        .bind(topic)
        .bind(partition)
        .bind(next)
        .execute(&mut *tx)
        .await
        .map_err(db("writing offsets"))?;
    }
    Ok(())
}
