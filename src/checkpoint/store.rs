//! The checkpoint store in PostgreSQL: per-partition input offsets and the state of the entities changed since
//! the last checkpoint, written in one transaction (tables in `migrations/`).

use std::collections::HashMap;
use std::str::FromStr;

use anyhow::{bail, Context};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool, Row};

/// Which stage a checkpoint belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    FanOut,
    Fold,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::FanOut => "fanout",
            Stage::Fold => "fold",
        }
    }
}

/// A checkpoint refused because another task took the partition's lease since this one started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fenced: {stage} partition {partition} lease is at generation {current}, this task holds {ours}")]
pub struct Fenced {
    pub stage: &'static str,
    pub partition: i32,
    pub ours: i64,
    pub current: i64,
}

/// The whole checkpoint at one moment ([`CheckpointStore::snapshot`]).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// (topic, partition) → next offset of the fan-out stage.
    pub fanout_offsets: HashMap<(String, i32), i64>,
    /// (topic, partition) → next offset of the fold stage.
    pub fold_offsets: HashMap<(String, i32), i64>,
    /// (conversation id, encoded state).
    pub conversations: Vec<(String, Vec<u8>)>,
    /// (user id, encoded state).
    pub users: Vec<(String, Vec<u8>)>,
}

/// The row of the `replays` table: which replay filled a namespace's schema and whether it finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayStatus {
    /// The namespace replayed from (its checkpoint, with `--from checkpoint`).
    pub source: String,
    /// `earliest`, `checkpoint` or the RFC 3339 timestamp.
    pub from: String,
    pub started_at: String,
    /// Set when the replay reached the log end it aimed at.
    pub finished_at: Option<String>,
    /// Records folded, over every run that finished.
    pub events: i64,
    /// Whether its first checkpoint completed (otherwise it starts afresh).
    pub seeded: bool,
}

/// Drops a checkpoint schema and everything in it (`unread drop`); nothing happens when it does not exist.
///
/// Errors: a schema name other than letters, digits and `_`; PostgreSQL unreachable.
pub async fn drop_schema(url: &str, schema: &str) -> anyhow::Result<()> {
    if schema.is_empty() || !schema.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        bail!("database schema {schema:?} must be letters, digits and _");
    }
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await.context("connecting to PostgreSQL")?;
    // Audited: the schema name was checked above to be letters, digits and _ only.
    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))).execute(&pool).await?;
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

impl CheckpointStore {
    /// Connects to `url` with `schema` as the search path, creating the schema when missing.
    ///
    /// Errors: a schema name other than letters, digits and `_`; PostgreSQL unreachable.
    pub async fn connect(url: &str, schema: &str, max_connections: u32) -> anyhow::Result<Self> {
        if schema.is_empty() || !schema.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            bail!("database schema {schema:?} must be letters, digits and _");
        }
        let base = PgConnectOptions::from_str(url).with_context(|| format!("database URL {url}"))?;
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(base.clone())
            .await
            .context("connecting to PostgreSQL")?;
        // Audited: the schema name was checked above to be letters, digits and _ only.
        // Two processes creating the schema at once: the loser gets a unique violation although the schema exists.
        let created =
            sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))).execute(&admin).await;
        if let Err(e) = created {
            let exists: bool = sqlx::query("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(schema)
                .fetch_one(&admin)
                .await?
                .get(0);
            if !exists {
                return Err(e).context("creating schema");
            }
        }
        admin.close().await;
        let opts = base.options([("search_path", schema)]);
        // A short acquire timeout makes an outage an error that the caller logs, counts and retries, rather
        // than every query silently hanging for the default 30 s.
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_with(opts)
            .await
            .context("connecting to PostgreSQL")?;
        Ok(Self { pool })
    }

    /// Applies the migrations (idempotent).
    ///
    /// Errors: a migration fails or was changed after being applied.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        MIGRATOR.run(&self.pool).await.context("applying migrations")
    }

    /// Takes the lease of one partition: bumps and returns its generation. Every later [`CheckpointStore::commit`]
    /// with an older generation fails with [`Fenced`].
    pub async fn acquire(&self, stage: Stage, partition: i32, owner: &str) -> anyhow::Result<i64> {
        let row = sqlx::query(
            "INSERT INTO partition_leases (stage, partition, generation, owner) VALUES ($1, $2, 1, $3) \
             ON CONFLICT (stage, partition) DO UPDATE SET generation = partition_leases.generation + 1, \
             owner = EXCLUDED.owner, acquired_at = now() RETURNING generation",
        )
        .bind(stage.as_str())
        .bind(partition)
        .bind(owner)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.get(0))
    }

    /// The current generation of a partition's lease (0 if never taken).
    pub async fn generation(&self, stage: Stage, partition: i32) -> anyhow::Result<i64> {
        let row = sqlx::query("SELECT generation FROM partition_leases WHERE stage = $1 AND partition = $2")
            .bind(stage.as_str())
            .bind(partition)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map_or(0, |r| r.get(0)))
    }

    /// One entity's checkpoint row: (partition, encoded state, time of the checkpoint that wrote it, RFC 3339).
    pub async fn state_row(&self, stage: Stage, id: &str) -> anyhow::Result<Option<(i32, Vec<u8>, String)>> {
        let sql = match stage {
            Stage::Fold => {
                "SELECT partition, state, to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
                 FROM fold_users WHERE user_id = $1"
            }
            Stage::FanOut => {
                "SELECT partition, state, to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
                 FROM fanout_conversations WHERE conversation_id = $1"
            }
        };
        let row = sqlx::query(sql).bind(id).fetch_optional(&self.pool).await?;
        Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    /// Every partition's lease generation of a stage.
    pub async fn generations(&self, stage: Stage) -> anyhow::Result<HashMap<i32, i64>> {
        let rows = sqlx::query("SELECT partition, generation FROM partition_leases WHERE stage = $1")
            .bind(stage.as_str())
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Fails with [`Fenced`] unless the lease is still at `generation`.
    pub async fn check_lease(&self, stage: Stage, partition: i32, generation: i64) -> anyhow::Result<()> {
        let current = self.generation(stage, partition).await?;
        if current != generation {
            return Err(Fenced { stage: stage.as_str(), partition, ours: generation, current }.into());
        }
        Ok(())
    }

    /// The next offset to process of one input partition, if checkpointed.
    pub async fn offset(&self, stage: Stage, topic: &str, partition: i32) -> anyhow::Result<Option<i64>> {
        let row = sqlx::query(
            "SELECT next_offset FROM checkpoint_offsets WHERE stage = $1 AND topic = $2 AND partition = $3",
        )
        .bind(stage.as_str())
        .bind(topic)
        .bind(partition)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Every checkpointed offset of a stage: (topic, partition) → next offset.
    pub async fn offsets(&self, stage: Stage) -> anyhow::Result<HashMap<(String, i32), i64>> {
        let rows = sqlx::query("SELECT topic, partition, next_offset FROM checkpoint_offsets WHERE stage = $1")
            .bind(stage.as_str())
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|r| ((r.get(0), r.get(1)), r.get(2))).collect())
    }

    /// The encoded states of one partition's entities: users for [`Stage::Fold`], conversations for
    /// [`Stage::FanOut`], or all partitions' when `partition` is `None`.
    /// The encoded states (id, partition, bytes) of one partition's entities: users for [`Stage::Fold`],
    /// conversations for [`Stage::FanOut`], or every partition's when `partition` is `None`.
    pub async fn states(&self, stage: Stage, partition: Option<i32>) -> anyhow::Result<Vec<(String, i32, Vec<u8>)>> {
        let sql = match stage {
            Stage::Fold => "SELECT user_id, partition, state FROM fold_users WHERE $1::int IS NULL OR partition = $1",
            Stage::FanOut => {
                "SELECT conversation_id, partition, state FROM fanout_conversations \
                 WHERE $1::int IS NULL OR partition = $1"
            }
        };
        let rows = sqlx::query(sql).bind(partition).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
    }

    /// The encoded states (id, partition, bytes) of `n` entities chosen at random (all when there are fewer); the
    /// choice is made in PostgreSQL, so only the sample crosses the wire.
    pub async fn states_sample(&self, stage: Stage, n: usize) -> anyhow::Result<Vec<(String, i32, Vec<u8>)>> {
        let sql = match stage {
            Stage::Fold => "SELECT user_id, partition, state FROM fold_users ORDER BY random() LIMIT $1",
            Stage::FanOut => {
                "SELECT conversation_id, partition, state FROM fanout_conversations ORDER BY random() LIMIT $1"
            }
        };
        let rows = sqlx::query(sql).bind(n as i64).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
    }

    /// The ids of every checkpointed entity of a stage (users or conversations), without their states.
    pub async fn ids(&self, stage: Stage) -> anyhow::Result<Vec<String>> {
        let sql = match stage {
            Stage::Fold => "SELECT user_id FROM fold_users",
            Stage::FanOut => "SELECT conversation_id FROM fanout_conversations",
        };
        Ok(sqlx::query_scalar(sql).fetch_all(&self.pool).await?)
    }

    /// The encoded states (id, partition, bytes) of some entities by id.
    pub async fn states_of(&self, stage: Stage, ids: &[String]) -> anyhow::Result<Vec<(String, i32, Vec<u8>)>> {
        let sql = match stage {
            Stage::Fold => "SELECT user_id, partition, state FROM fold_users WHERE user_id = ANY($1)",
            Stage::FanOut => {
                "SELECT conversation_id, partition, state FROM fanout_conversations WHERE conversation_id = ANY($1)"
            }
        };
        let rows = sqlx::query(sql).bind(ids).fetch_all(&self.pool).await?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
    }

    /// Writes one checkpoint in one transaction: the changed entities of `partition` (`None` state = delete) and
    /// the next offsets of the partition's input topics, provided the partition's lease is still at `generation`
    /// (the row is locked for the transaction).
    ///
    /// Errors: [`Fenced`] when another task took the lease; any statement failing. Nothing is written then.
    pub async fn commit(
        &self,
        stage: Stage,
        partition: i32,
        generation: i64,
        changed: &[(String, Option<Vec<u8>>)],
        offsets: &[(&str, i64)],
    ) -> anyhow::Result<()> {
        let (table, id) = match stage {
            Stage::Fold => ("fold_users", "user_id"),
            Stage::FanOut => ("fanout_conversations", "conversation_id"),
        };
        let mut tx = self.pool.begin().await?;
        let current: Option<i64> =
            sqlx::query("SELECT generation FROM partition_leases WHERE stage = $1 AND partition = $2 FOR UPDATE")
                .bind(stage.as_str())
                .bind(partition)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| r.get(0));
        if current != Some(generation) {
            let current = current.unwrap_or(0);
            return Err(Fenced { stage: stage.as_str(), partition, ours: generation, current }.into());
        }
        let (upserts, deletes): (Vec<_>, Vec<_>) = changed.iter().partition(|(_, s)| s.is_some());
        if !upserts.is_empty() {
            let ids: Vec<&str> = upserts.iter().map(|(i, _)| i.as_str()).collect();
            let states: Vec<&[u8]> = upserts.iter().map(|(_, s)| s.as_deref().unwrap_or_default()).collect();
            // Audited: `table` and `id` come from the match above, never from input.
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {table} ({id}, partition, state, updated_at) \
                 SELECT i, $3, s, now() FROM UNNEST($1::text[], $2::bytea[]) AS t(i, s) \
                 ON CONFLICT ({id}) DO UPDATE SET state = EXCLUDED.state, partition = EXCLUDED.partition, \
                 updated_at = now()"
            )))
            .bind(&ids)
            .bind(&states)
            .bind(partition)
            .execute(&mut *tx)
            .await?;
        }
        if !deletes.is_empty() {
            let ids: Vec<&str> = deletes.iter().map(|(i, _)| i.as_str()).collect();
            sqlx::query(AssertSqlSafe(format!("DELETE FROM {table} WHERE {id} = ANY($1)")))
                .bind(&ids)
                .execute(&mut *tx)
                .await?;
        }
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
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A consistent snapshot of the whole checkpoint, read in one `REPEATABLE READ` transaction: every partition's
    /// state and offsets as one set of committed checkpoints (each partition's state matches its offsets).
    ///
    /// Errors: PostgreSQL unreachable or failing.
    pub async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY").execute(&mut *tx).await?;
        let offsets = sqlx::query("SELECT stage, topic, partition, next_offset FROM checkpoint_offsets")
            .fetch_all(&mut *tx)
            .await?;
        let mut snap = Snapshot::default();
        for r in offsets {
            let stage: String = r.get(0);
            let map = if stage == "fold" { &mut snap.fold_offsets } else { &mut snap.fanout_offsets };
            map.insert((r.get(1), r.get(2)), r.get(3));
        }
        let rows = |sql: &'static str| sqlx::query(sql);
        for r in rows("SELECT conversation_id, state FROM fanout_conversations").fetch_all(&mut *tx).await? {
            snap.conversations.push((r.get(0), r.get(1)));
        }
        for r in rows("SELECT user_id, state FROM fold_users").fetch_all(&mut *tx).await? {
            snap.users.push((r.get(0), r.get(1)));
        }
        tx.commit().await?;
        Ok(snap)
    }

    /// The replay that filled this schema, if any.
    pub async fn replay_status(&self) -> anyhow::Result<Option<ReplayStatus>> {
        let row = sqlx::query(
            "SELECT source, from_spec, started_at::text, finished_at::text, events, seeded FROM replays WHERE id = 1",
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| ReplayStatus {
            source: r.get(0),
            from: r.get(1),
            started_at: r.get(2),
            finished_at: r.get(3),
            events: r.get(4),
            seeded: r.get(5),
        }))
    }

    /// Records that a replay fills this schema: a fresh one from `source` (a namespace) starting at `from`, recorded
    /// anew and not yet seeded; or, when not `fresh`, a resumed one, only marked unfinished again.
    pub async fn start_replay(&self, source: &str, from: &str, fresh: bool) -> anyhow::Result<()> {
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
        query.execute(&self.pool).await?;
        Ok(())
    }

    /// Records that the replay reached the end it aimed at, having folded `events` records in all its runs.
    pub async fn finish_replay(&self, events: i64) -> anyhow::Result<()> {
        sqlx::query("UPDATE replays SET finished_at = now(), events = events + $1 WHERE id = 1")
            .bind(events)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records that the replay's first checkpoint is complete: from now on it resumes instead of starting afresh.
    pub async fn mark_replay_seeded(&self) -> anyhow::Result<()> {
        sqlx::query("UPDATE replays SET seeded = true WHERE id = 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Deletes every checkpointed state and offset of the schema (a replay restarting afresh). Leases stay.
    pub async fn reset(&self) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        for table in ["checkpoint_offsets", "fold_users", "fanout_conversations"] {
            // Audited: the table names are the constants above.
            sqlx::query(AssertSqlSafe(format!("DELETE FROM {table}"))).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Whether the schema holds any checkpoint at all.
    pub async fn is_empty(&self) -> anyhow::Result<bool> {
        let row = sqlx::query("SELECT NOT EXISTS (SELECT 1 FROM checkpoint_offsets)").fetch_one(&self.pool).await?;
        Ok(row.get(0))
    }

    /// Size of the checkpoint: (rows, bytes of encoded state) over both state tables.
    pub async fn size(&self) -> anyhow::Result<(i64, i64)> {
        let row = sqlx::query(
            "SELECT (SELECT count(*) FROM fold_users) + (SELECT count(*) FROM fanout_conversations), \
             COALESCE((SELECT sum(length(state)) FROM fold_users), 0)::bigint + \
             COALESCE((SELECT sum(length(state)) FROM fanout_conversations), 0)::bigint",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((row.get(0), row.get(1)))
    }
}
