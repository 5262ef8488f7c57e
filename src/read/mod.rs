//! The read model: where every answer about a user's counts comes from, for the HTTP handlers and the push hub
//! alike ([`Reader`]). Redis first; a user with no hash is read from the PostgreSQL checkpoint and written back
//! (refilled); while Redis is down, the checkpoint answers, stale, behind a circuit breaker ([`fallback`]).
//! Each answer says where it came from ([`Source`]) and is counted in `unread_reads_total{source}`.

pub mod fallback;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::core::broadcast::ListId;
use crate::core::contract::{ConversationView, ThreadView, UserView};
use crate::core::fold::Conversations;
use crate::metrics::Metrics;
use crate::namespace::LiveProjection;
use crate::projection::redis::{ConversationRead, Newest, Receipts, RedisProjection};
use crate::projection::ProjectionError;
pub use fallback::{Breaker, Fallback};

/// Where an answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Redis, as always.
    Redis,
    /// The checkpoint, because Redis had no hash for the user (refilled since).
    Refilled,
    /// The checkpoint, because Redis is down: the answer is stale.
    Stale,
}

impl Source {
    /// Its name in `unread_reads_total{source}`: `redis`, `checkpoint` or `stale`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Redis => "redis",
            Source::Refilled => "checkpoint",
            Source::Stale => "stale",
        }
    }
}

/// Why a read has no answer.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Redis failed or holds a malformed value ([`ProjectionError`]).
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// The checkpoint is needed and cannot be read (PostgreSQL failing, or this instance reads none); retry later.
    #[error("{0}")]
    Unavailable(String),
}

/// The live namespace at one moment: its name and its projection. One request reads one.
#[derive(Clone)]
pub struct At {
    /// The namespace's name (`x-unread-namespace`).
    pub namespace: String,
    /// Its Redis projection.
    pub projection: RedisProjection,
}

/// Reads users' counts from the live namespace ([`crate::namespace::LiveProjection`]), with degraded reads from
/// the checkpoint when a fallback is given.
pub struct Reader {
    live: Arc<LiveProjection>,
    fallback: Option<Fallback>,
    metrics: Arc<Metrics>,
}

impl Reader {
    /// A reader of `live`; `fallback`: degraded reads from the checkpoint (`None`: Redis only).
    pub fn new(live: Arc<LiveProjection>, fallback: Option<Fallback>, metrics: Arc<Metrics>) -> Self {
        Self { live, fallback, metrics }
    }

    /// The live namespace now.
    pub fn at(&self) -> At {
        let (namespace, projection) = self.live.current();
        At { namespace, projection }
    }

    /// Whether the breaker around Redis reads is open now (false without a fallback).
    pub fn breaker_open(&self) -> bool {
        self.fallback.as_ref().is_some_and(|f| f.breaker.is_open())
    }

    /// A user's counts at UTC day `today`, and where they came from: Redis; the checkpoint when Redis has no hash
    /// for the user (then refilled); the checkpoint, stale, while Redis is down. Zeros for a user with state
    /// nowhere. Counted by source.
    ///
    /// Errors: [`ReadError::Projection`] for a malformed hash (or Redis failing without a fallback);
    /// [`ReadError::Unavailable`] when the checkpoint is needed and PostgreSQL fails.
    pub async fn user(&self, at: &At, user_id: &str, today: i64) -> Result<(UserView, Source), ReadError> {
        let read = self.user_uncounted(at, user_id, today).await?;
        self.metrics.read(read.1.name());
        Ok(read)
    }

    /// [`Reader::user`], uncounted.
    async fn user_uncounted(&self, at: &At, user_id: &str, today: i64) -> Result<(UserView, Source), ReadError> {
        let zero = || UserView { user_id: user_id.to_owned(), ..UserView::default() };
        let Some(fb) = &self.fallback else {
            return Ok((at.projection.read_existing(user_id, today).await?.unwrap_or_else(zero), Source::Redis));
        };
        if fb.breaker.allows() {
            match tokio::time::timeout(fallback::REDIS_TIMEOUT, at.projection.read_existing(user_id, today)).await {
                Ok(Ok(Some(view))) => {
                    fb.breaker.success();
                    return Ok((view, Source::Redis));
                }
                Ok(Ok(None)) => {
                    fb.breaker.success();
                    let view = fb.read_and_refill(&at.namespace, user_id, &at.projection, today).await;
                    let view = view.map_err(unavailable)?;
                    return Ok(view.map_or_else(|| (zero(), Source::Redis), |v| (v, Source::Refilled)));
                }
                Ok(Err(e @ ProjectionError::Malformed(_))) => return Err(e.into()),
                Ok(Err(_)) | Err(_) => {
                    self.metrics.read_redis_failure();
                    fb.breaker.failure();
                }
            }
        }
        let view = fb.read(&at.namespace, user_id, today).await.map_err(unavailable)?;
        Ok((view.unwrap_or_else(zero), Source::Stale))
    }

    /// Many users' counts, in the order asked, in one pipelined Redis round trip; users with no hash are refilled
    /// from the checkpoint (counted), zeros for those with state nowhere.
    ///
    /// Errors: [`ReadError::Projection`] (Redis failing, a malformed hash); [`ReadError::Unavailable`] when
    /// PostgreSQL fails during a refill.
    pub async fn users(&self, at: &At, user_ids: &[String], today: i64) -> Result<Vec<UserView>, ReadError> {
        let mut users = Vec::with_capacity(user_ids.len());
        for read in at.projection.read_many_versioned(user_ids, today).await? {
            users.push(match (read.present, &self.fallback) {
                (false, Some(fb)) => {
                    let refilled = fb.read_and_refill(&at.namespace, &read.view.user_id, &at.projection, today).await;
                    match refilled.map_err(unavailable)? {
                        Some(view) => {
                            self.metrics.read(Source::Refilled.name());
                            view
                        }
                        None => read.view,
                    }
                }
                _ => read.view,
            });
        }
        Ok(users)
    }

    /// One conversation's counts for a user (`None`: not a member): from two fields of the user's hash, or from
    /// the whole user ([`Reader::user`]) when the hash alone cannot answer (no hash, or a read-diffused
    /// conversation, whose count needs its index's share).
    ///
    /// Errors: as [`Reader::user`].
    pub async fn conversation(
        &self,
        at: &At,
        user_id: &str,
        conversation_id: &str,
        today: i64,
    ) -> Result<Option<ConversationView>, ReadError> {
        Ok(match at.projection.read_conversation(user_id, conversation_id, today).await? {
            ConversationRead::Counts(c) => c,
            ConversationRead::NeedsUser => self.user(at, user_id, today).await?.0.conversations.remove(conversation_id),
        })
    }

    /// The receipts of message `seq` of a conversation ([`RedisProjection::read_receipts`]); receipts expired under
    /// `--projection-ttl` are refilled from the checkpoint (counted) and read again: still [`Receipts::Cold`] only
    /// when they expired again meanwhile.
    ///
    /// Errors: [`ReadError::Projection`]; [`ReadError::Unavailable`] when they expired and this instance reads no
    /// checkpoint, or PostgreSQL fails.
    pub async fn receipts(
        &self,
        at: &At,
        conversation_id: &str,
        seq: u64,
        requester: Option<&str>,
        list: bool,
    ) -> Result<Receipts, ReadError> {
        let receipts = at.projection.read_receipts(conversation_id, seq, requester, list).await?;
        if receipts != Receipts::Cold {
            return Ok(receipts);
        }
        let Some(fb) = &self.fallback else {
            let message = "the receipts expired and this instance reads no checkpoint to refill them";
            return Err(ReadError::Unavailable(message.into()));
        };
        fb.refill_receipts(&at.namespace, conversation_id, &at.projection).await.map_err(unavailable)?;
        self.metrics.read(Source::Refilled.name());
        Ok(at.projection.read_receipts(conversation_id, seq, requester, list).await?)
    }

    /// v4: each followed thread with unread (`view.threads`) in a conversation `pick` selects (by id, feed: never,
    /// muted), with the `read_seq` that reads it whole: the conversation's newest sent seq in Redis (a thread's
    /// replies are all at or below it), else the newest unread reply the checkpoint holds. What read-all
    /// publishes as `thread.read`s: (conversation, root, read_seq).
    ///
    /// Errors: [`ReadError::Projection`] when Redis fails; [`ReadError::Unavailable`] when PostgreSQL does.
    pub async fn thread_heads(
        &self,
        at: &At,
        view: &UserView,
        pick: impl Fn(&str, bool, bool) -> bool,
    ) -> Result<Vec<(String, u64, u64)>, ReadError> {
        let muted = |cid: &str| view.conversations.get(cid).is_some_and(|c| c.muted);
        let picked: Vec<(&String, &BTreeMap<u64, ThreadView>)> =
            view.threads.iter().filter(|(cid, _)| pick(cid, false, muted(cid))).collect();
        if picked.is_empty() {
            return Ok(Vec::new());
        }
        let threads = picked.iter().flat_map(|(cid, threads)| threads.keys().map(|root| (cid.as_str(), *root)));
        self.read_seqs(at, &view.user_id, &threads.collect::<Vec<_>>()).await
    }

    /// v4: the `read_seq` that reads `user_id`'s thread of `root` in `conversation_id` whole (as
    /// [`Reader::thread_heads`] finds it), `None` when nothing is known sent there. The thread read route's default.
    ///
    /// Errors: as [`Reader::thread_heads`].
    pub async fn thread_head(
        &self,
        at: &At,
        user_id: &str,
        conversation_id: &str,
        root: u64,
    ) -> Result<Option<u64>, ReadError> {
        let reads = self.read_seqs(at, user_id, &[(conversation_id, root)]).await?;
        Ok(reads.first().map(|(_, _, read_seq)| *read_seq))
    }

    /// v4: the `read_seq` that marks every reaction of `conversation_id` so far seen: its highest `reaction_seq`
    /// as the fan-out last wrote it to Redis, else as the checkpoint holds it; `None` when no reaction is known.
    /// The reactions read route's default.
    ///
    /// Errors: [`ReadError::Projection`] when Redis fails; [`ReadError::Unavailable`] when PostgreSQL does.
    pub async fn reaction_head(&self, at: &At, conversation_id: &str) -> Result<Option<u64>, ReadError> {
        if let Some(head) = at.projection.reaction_heads(&[conversation_id]).await?.pop().flatten() {
            return Ok(Some(head));
        }
        match &self.fallback {
            Some(fb) => fb.reaction_head(&at.namespace, conversation_id).await.map_err(unavailable),
            None => Ok(None),
        }
    }

    /// Each thread's whole-reading `read_seq` ([`Reader::thread_heads`]); threads with none are left out.
    async fn read_seqs(
        &self,
        at: &At,
        user_id: &str,
        threads: &[(&str, u64)],
    ) -> Result<Vec<(String, u64, u64)>, ReadError> {
        let mut ids: Vec<&str> = threads.iter().map(|(cid, _)| *cid).collect();
        ids.dedup();
        let heads: HashMap<&str, Option<u64>> =
            ids.iter().copied().zip(at.projection.sent_heads(&ids).await?).collect();
        let state = match (&self.fallback, heads.values().any(Option::is_none)) {
            (Some(fb), true) => fb.state(&at.namespace, user_id).await.map_err(unavailable)?,
            _ => None,
        };
        let checkpointed = |cid: &str, root: u64| {
            let thread = state.as_ref()?.conversations().get(cid)?.threads.by_root.get(&root)?;
            thread.unread.iter().last()
        };
        let head = |cid: &str, root: u64| heads.get(cid).copied().flatten().or_else(|| checkpointed(cid, root));
        let reads = threads.iter().filter_map(|(cid, root)| Some((cid.to_string(), *root, head(cid, *root)?)));
        Ok(reads.collect())
    }

    /// Refills `users`, who have no hash, from the checkpoint (counted); returns those with checkpointed state,
    /// written back unless Redis held newer state. None without a fallback.
    ///
    /// Errors: [`ReadError::Unavailable`] when PostgreSQL fails.
    pub async fn refill(&self, at: &At, users: &[String], today: i64) -> Result<Vec<String>, ReadError> {
        let Some(fb) = &self.fallback else { return Ok(Vec::new()) };
        let refilled = fb.refill(&at.namespace, &at.projection, users, today).await.map_err(unavailable)?;
        refilled.iter().for_each(|_| self.metrics.read(Source::Refilled.name()));
        Ok(refilled)
    }

    /// Each conversation that `pick` selects (by id, feed, muted) with unread messages, with the newest of them; or
    /// that is marked unread (v3, in the checkpoint or in Redis: a mark made a moment ago), or with `at_cursor` any
    /// read past seq 0, with its cursor: an ack there clears a mark. What the gateway's read-all and feed-read
    /// routes ack. The newest is the larger of the checkpoint's and the one Redis shows (the checkpoint trails it by
    /// a commit), and in a read-diffused conversation, whose messages never reach a member's state, its index's
    /// head. Conversations joined since the checkpoint come from Redis alone: a chat's `c:` field, a read-diffused
    /// conversation's `r:` field.
    ///
    /// Errors: [`ReadError::Unavailable`] when this instance reads no checkpoint or PostgreSQL fails.
    pub async fn newest_unread(
        &self,
        at: &At,
        user_id: &str,
        at_cursor: bool,
        pick: impl Fn(&str, bool, bool) -> bool,
    ) -> Result<Vec<(String, u64)>, ReadError> {
        let fallback =
            self.fallback.as_ref().ok_or_else(|| ReadError::Unavailable("this instance reads no checkpoint".into()))?;
        let state = fallback
            .state(&at.namespace, user_id)
            .await
            .map_err(|e| ReadError::Unavailable(format!("reading the checkpoint: {e:#}")))?;
        let empty = Conversations::default();
        let checkpointed = state.as_ref().map_or(&empty, |state| state.conversations());
        let Newest { mut chats, indexed } = newest_in_redis(&at.projection, user_id).await;
        let picked = checkpointed.iter().filter(|(id, c)| c.is_member() && pick(id, c.feed, c.muted));
        let joined_since =
            indexed.iter().filter(|(id, e)| !checkpointed.contains_key(id.as_str()) && pick(id, e.feed, e.muted));
        let read_diffused: Vec<&str> = picked
            .filter(|(id, c)| c.index_from().is_some() || indexed.contains_key(id.as_ref()))
            .map(|(id, _)| id.as_ref())
            .chain(joined_since.clone().map(|(id, _)| id.as_str()))
            .collect();
        let heads = index_heads(&at.projection, &read_diffused).await;
        let mut newest = Vec::new();
        // By id, as the acks of a read-all were always sent (a user's conversations are held in no order).
        let mut by_id: Vec<_> = checkpointed.iter().collect();
        by_id.sort_unstable_by_key(|(id, _)| *id);
        for (id, c) in by_id {
            let (marked, shown) = chats.remove(&**id).map_or((false, 0), |(view, seq)| (view.marked_unread, seq));
            if !c.is_member() || !pick(id, c.feed, c.muted) {
                continue;
            }
            let indexed = heads.get(&**id).copied().filter(|&head| head > c.cursor());
            let cursor = (c.is_marked() || marked || (at_cursor && c.cursor() > 0)).then(|| c.cursor());
            let shown = Some(shown).filter(|&seq| seq > 0);
            if let Some(seq) = c.unread.max().max(shown).max(indexed).or(cursor) {
                newest.push((id.to_string(), seq));
            }
        }
        // Joined since the checkpoint (a `c:` field is a chat's, never a feed's).
        let chats =
            chats.into_iter().filter(|(id, (c, seq))| pick(id, false, c.muted) && (*seq > 0 || c.marked_unread));
        newest.extend(chats.map(|(id, (_, seq))| (id, seq)));
        for (id, e) in joined_since {
            if let Some(&head) = heads.get(id.as_str()).filter(|&&head| head > e.lo) {
                newest.push((id.clone(), head));
            }
        }
        Ok(newest)
    }
}

/// A checkpoint failure as a read error.
fn unavailable(e: anyhow::Error) -> ReadError {
    ReadError::Unavailable(format!("{e:#}"))
}

/// [`RedisProjection::newest_unread`], or nothing when Redis fails (logged): the checkpoint answers alone.
async fn newest_in_redis(projection: &RedisProjection, user_id: &str) -> Newest {
    projection.newest_unread(user_id).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "reading the newest unread seqs from Redis; the checkpoint answers alone");
        Default::default()
    })
}

/// The heads of read-diffused conversations `ids`' indexes in Redis, in one round trip; none when Redis fails
/// (logged): the checkpoint answers alone.
async fn index_heads<'a>(projection: &RedisProjection, ids: &[&'a str]) -> HashMap<&'a str, u64> {
    let lists: Vec<ListId> = ids.iter().map(|id| ListId::Index((*id).to_owned())).collect();
    match projection.list_heads(&lists).await {
        Ok(heads) => ids.iter().copied().zip(heads).collect(),
        Err(e) => {
            tracing::warn!(error = %e, conversations = ids.len(), "reading indexes' heads from Redis");
            Default::default()
        }
    }
}
