//! The row types, one per kind and version. Field order is the format (postcard is positional): never reorder a
//! field of a row type; add a new row type and version instead.

use super::*;
use crate::core::expiry::Buckets;

/// A conversation's kind in a row (variant order is the format).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) enum KindRow {
    Direct,
    Group,
    Channel,
    Feed,
}

impl From<ConversationKind> for KindRow {
    fn from(k: ConversationKind) -> Self {
        match k {
            ConversationKind::Direct => KindRow::Direct,
            ConversationKind::Group => KindRow::Group,
            ConversationKind::Channel => KindRow::Channel,
            ConversationKind::Feed => KindRow::Feed,
        }
    }
}

impl From<KindRow> for ConversationKind {
    fn from(k: KindRow) -> Self {
        match k {
            KindRow::Direct => ConversationKind::Direct,
            KindRow::Group => ConversationKind::Group,
            KindRow::Channel => ConversationKind::Channel,
            KindRow::Feed => ConversationKind::Feed,
        }
    }
}

/// A user's totals in rows of version 2 and 3.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct TotalsRow {
    total_unread: u64,
    total_mentions: u64,
    unread_conversations: u64,
    memberships: u64,
    feed_unread: u64,
}

impl From<Sums> for TotalsRow {
    fn from(t: Sums) -> Self {
        let Counts { total_unread, total_mentions, unread_conversations, feed_unread, .. } = t.counts;
        TotalsRow { total_unread, total_mentions, unread_conversations, memberships: t.memberships, feed_unread }
    }
}

impl From<TotalsRow> for Sums {
    fn from(t: TotalsRow) -> Self {
        let TotalsRow { total_unread, total_mentions, unread_conversations, memberships, feed_unread } = t;
        let counts = Counts { total_unread, total_mentions, unread_conversations, feed_unread, ..Counts::default() };
        Sums { counts, memberships }
    }
}

/// A user's sums in rows of version 5 on: the counts in the table's order ([`Counts::NAMES`]) and the memberships.
/// A counter added to the table needs no new row version: a row written before it holds fewer counts, read as 0
/// for the new ones (decoding then checks the sums against the conversations).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CountsRow {
    counts: Vec<u64>,
    memberships: u64,
}

impl From<Sums> for CountsRow {
    fn from(t: Sums) -> Self {
        CountsRow { counts: t.counts.values().to_vec(), memberships: t.memberships }
    }
}

/// A row's totals, whatever their layout, as the fold's sums.
pub(super) trait RowTotals {
    /// The sums.
    ///
    /// Errors: [`CheckpointError::Inconsistent`] for more counts than this build's table has (a newer build's row).
    fn sums(self) -> Result<Sums, CheckpointError>;
}

impl RowTotals for TotalsRow {
    fn sums(self) -> Result<Sums, CheckpointError> {
        Ok(self.into())
    }
}

impl RowTotals for CountsRow {
    fn sums(self) -> Result<Sums, CheckpointError> {
        let n = self.counts.len();
        let counts = Counts::from_values(&self.counts).ok_or_else(|| {
            CheckpointError::Inconsistent(format!("{n} counts: this build's table has {}", Counts::NAMES.len()))
        })?;
        Ok(Sums { counts, memberships: self.memberships })
    }
}

/// A user's notification summary in rows of version 2 and 3: per category (unread, unseen), and the clock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SummaryRow {
    categories: BTreeMap<String, (u64, u64)>,
    clock: u64,
}

impl From<&Summary> for SummaryRow {
    fn from(s: &Summary) -> Self {
        let categories = s.categories.iter().map(|(c, n)| (c.clone(), (n.unread, n.unseen))).collect();
        SummaryRow { categories, clock: s.clock }
    }
}

impl From<SummaryRow> for Summary {
    fn from(s: SummaryRow) -> Self {
        let counts = |(unread, unseen)| CategoryCounts { unread, unseen };
        Summary { categories: s.categories.into_iter().map(|(c, n)| (c, counts(n))).collect(), clock: s.clock }
    }
}

/// A user's conversation in rows of every version: the version-1 fields. Every conversation row's range sets are
/// of type `R`: [`Ranges`] when a row is read, `&SeqSet` when one is written (a `SeqSet` serializes as its ranges,
/// so both are the same bytes), which spares collecting each set into a `Vec` for every checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConvRowV1<R = Ranges> {
    floor: u64,
    joined_at: Option<u64>,
    muted: bool,
    unread: R,
    mentions: R,
    touched: u64,
}

impl<'a> ConvRowV1<&'a SeqSet> {
    fn of(c: &'a ConvState) -> Self {
        let (unread, mentions) = (&c.unread, &c.mentions);
        ConvRowV1 { floor: c.floor, joined_at: c.joined_at, muted: c.muted, unread, mentions, touched: c.touched }
    }
}

impl ConvRowV1 {
    fn into_state(self) -> Result<ConvState, CheckpointError> {
        let ConvRowV1 { floor, joined_at, muted, unread, mentions, touched } = self;
        let (unread, mentions) = (set(unread)?, set(mentions)?);
        Ok(ConvState { floor, joined_at, muted, unread, mentions, touched, ..ConvState::default() })
    }
}

/// Version 2's conversation: version 1's fields, then the feed flag (postcard writes a nested struct's fields in
/// line, so this is the same bytes as the seven fields flat).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConvRowV2<R = Ranges> {
    v1: ConvRowV1<R>,
    feed: bool,
}

impl ConvRowV2 {
    fn into_state(self) -> Result<ConvState, CheckpointError> {
        Ok(ConvState { feed: self.feed, ..self.v1.into_state()? })
    }
}

/// Version 3's conversation: version 2's fields, then the read-diffusion switch and the named mentions above it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConvRowV3<R = Ranges> {
    v2: ConvRowV2<R>,
    read_from: Option<u64>,
    named: R,
}

impl<'a> From<&'a ConvState> for ConvRowV3<&'a SeqSet> {
    fn from(c: &'a ConvState) -> Self {
        let v2 = ConvRowV2 { v1: ConvRowV1::of(c), feed: c.feed };
        ConvRowV3 { v2, read_from: c.read_from, named: &c.named }
    }
}

impl ConvRowV3 {
    fn into_state(self) -> Result<ConvState, CheckpointError> {
        Ok(ConvState { read_from: self.read_from, named: set(self.named)?, ..self.v2.into_state()? })
    }
}

/// Version 4's conversation (contract v3): version 3's fields, then the mark (with its "unread from" seq), the read
/// history with its mentions, and the expiry buckets (day, seqs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConvRowV4<R = Ranges> {
    v3: ConvRowV3<R>,
    mark: Option<Option<u64>>,
    read: R,
    read_mentions: R,
    expiry: Vec<(i64, R)>,
    own: R,
}

impl<'a> From<&'a ConvState> for ConvRowV4<&'a SeqSet> {
    fn from(c: &'a ConvState) -> Self {
        ConvRowV4 {
            v3: c.into(),
            mark: c.mark.map(|m| m.from_seq),
            read: &c.read,
            read_mentions: &c.read_mentions,
            expiry: buckets_row(&c.expiry),
            own: &c.own,
        }
    }
}

impl ConvRowV4 {
    fn into_state(self) -> Result<ConvState, CheckpointError> {
        let expiry = buckets(self.expiry)?;
        Ok(ConvState {
            mark: self.mark.map(|from_seq| Mark { from_seq }),
            read: set(self.read)?,
            read_mentions: set(self.read_mentions)?,
            expiry,
            own: set(self.own)?,
            ..self.v3.into_state()?
        })
    }
}

/// A user's conversation rows decoded with `decode`.
fn states<C>(
    rows: BTreeMap<String, C>,
    decode: impl Fn(C) -> Result<ConvState, CheckpointError>,
) -> Result<Conversations, CheckpointError> {
    rows.into_iter().map(|(id, c)| Ok((id.into(), Box::new(decode(c)?)))).collect()
}

/// A user row of version 1 (contract v1).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct UserRowV1 {
    conversations: BTreeMap<String, ConvRowV1>,
    /// total_unread, total_mentions, unread_conversations, memberships.
    totals: (u64, u64, u64, u64),
    clock: u64,
    detached: usize,
}

impl UserRowV1 {
    pub(super) fn into_state(self) -> Result<UserState, CheckpointError> {
        let conversations = states(self.conversations, ConvRowV1::into_state)?;
        let (total_unread, total_mentions, unread_conversations, memberships) = self.totals;
        let counts = Counts { total_unread, total_mentions, unread_conversations, ..Counts::default() };
        let totals = Sums { counts, memberships };
        Ok(UserState::from_parts(conversations, totals, self.clock, self.detached))
    }
}

/// A user row of versions 2 to 5: the same fields, with the conversation rows (`C`) and the totals (`T`) of that
/// version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct UserRow<C, T = TotalsRow> {
    conversations: BTreeMap<String, C>,
    totals: T,
    clock: u64,
    detached: usize,
    broadcasts: BTreeMap<String, u64>,
    notifications: SummaryRow,
}

/// A user row of version 2 (contract v2: feeds, broadcast cursors, notifications).
pub(super) type UserRowV2 = UserRow<ConvRowV2>;
/// A user row of version 3 (read diffusion).
pub(super) type UserRowV3 = UserRow<ConvRowV3>;
/// A user row of version 4 (contract v3: marks, read history, expiry).
pub(super) type UserRowV4 = UserRow<ConvRowV4>;
/// A user row of version 5: version 4's, with the totals as the table of counts ([`CountsRow`]).
pub(super) type UserRowV5 = UserRow<ConvRowV4, CountsRow>;

impl<C, T: RowTotals> UserRow<C, T> {
    /// The state, each conversation row decoded with `decode`.
    fn state_with(
        self,
        decode: impl Fn(C) -> Result<ConvState, CheckpointError>,
    ) -> Result<UserState, CheckpointError> {
        let conversations = states(self.conversations, decode)?;
        let state = UserState::from_parts(conversations, self.totals.sums()?, self.clock, self.detached);
        Ok(state.with_v2_parts(self.broadcasts, self.notifications.into()))
    }
}

impl UserRowV2 {
    pub(super) fn into_state(self) -> Result<UserState, CheckpointError> {
        self.state_with(ConvRowV2::into_state)
    }
}

impl UserRowV3 {
    pub(super) fn into_state(self) -> Result<UserState, CheckpointError> {
        self.state_with(ConvRowV3::into_state)
    }
}

impl UserRowV4 {
    pub(super) fn into_state(self) -> Result<UserState, CheckpointError> {
        self.state_with(ConvRowV4::into_state)
    }
}

impl UserRowV5 {
    pub(super) fn into_state(self) -> Result<UserState, CheckpointError> {
        self.state_with(ConvRowV4::into_state)
    }
}

/// A user row of version 5 on (the table of counts), with its conversations as rows `C`.
impl<'a, C: From<&'a ConvState>> From<&'a UserState> for UserRow<C, CountsRow> {
    fn from(s: &'a UserState) -> Self {
        UserRow {
            conversations: s.conversations().iter().map(|(id, c)| (id.to_string(), (&**c).into())).collect(),
            totals: s.totals().into(),
            clock: s.clock(),
            detached: s.detached(),
            broadcasts: s.broadcasts().clone(),
            notifications: s.notification_summary().into(),
        }
    }
}

/// A conversation row of versions 1 and 2: kind, head, members with their join heads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConversationRowV2 {
    kind: Option<KindRow>,
    head: u64,
    members: BTreeMap<String, u64>,
}

impl ConversationRowV2 {
    pub(super) fn into_state(self) -> ConversationState {
        let (kind, head, members) = (self.kind.map(Into::into), self.head, self.members);
        let (ttl_days, uncreated_days, sent) = (None, BTreeMap::new(), SeqSet::new());
        ConversationState { kind, head, members, index: None, ttl_days, uncreated_days, sent, ..Default::default() }
    }
}

/// A read-diffused conversation's index in a row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct IndexRow {
    since: u64,
    live: Ranges,
    mention_all: Ranges,
}

/// A conversation row of version 4 (contract v3): version 3's fields, then `unread_ttl_days`, the days of
/// messages sent before the first creation, and the sent seqs (those with receipts).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConversationRowV4 {
    v3: ConversationRowV3,
    ttl_days: Option<u64>,
    uncreated_days: Vec<(i64, Ranges)>,
    sent: Ranges,
}

impl From<&ConversationState> for ConversationRowV4 {
    fn from(c: &ConversationState) -> Self {
        let uncreated_days = c.uncreated_days.iter().map(|(day, seqs)| (*day, ranges(seqs))).collect();
        ConversationRowV4 { v3: c.into(), ttl_days: c.ttl_days, uncreated_days, sent: ranges(&c.sent) }
    }
}

impl ConversationRowV4 {
    pub(super) fn into_state(self) -> Result<ConversationState, CheckpointError> {
        let days = self.uncreated_days.into_iter().map(|(day, r)| Ok((day, set(r)?)));
        let uncreated_days = days.collect::<Result<_, CheckpointError>>()?;
        let sent = set(self.sent)?;
        Ok(ConversationState { ttl_days: self.ttl_days, uncreated_days, sent, ..self.v3.into_state()? })
    }
}

/// A conversation row of version 5: version 4's fields, then a read-diffused conversation's index's expiry
/// buckets (contract v3 on read diffusion; empty without an index or a ttl).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConversationRowV5 {
    v4: ConversationRowV4,
    index_expiry: Vec<(i64, Ranges)>,
}

impl From<&ConversationState> for ConversationRowV5 {
    fn from(c: &ConversationState) -> Self {
        let buckets = c.index.iter().flat_map(|i| i.expiry.iter());
        ConversationRowV5 { v4: c.into(), index_expiry: buckets.map(|(day, seqs)| (*day, ranges(seqs))).collect() }
    }
}

impl ConversationRowV5 {
    pub(super) fn into_state(self) -> Result<ConversationState, CheckpointError> {
        let mut state = self.v4.into_state()?;
        let days = self.index_expiry.into_iter().map(|(day, r)| Ok((day, set(r)?)));
        let expiry = days.collect::<Result<std::collections::BTreeMap<i64, SeqSet>, CheckpointError>>()?;
        match &mut state.index {
            Some(index) => index.expiry = expiry,
            None if expiry.is_empty() => {}
            None => return Err(CheckpointError::Inconsistent("expiry buckets without an index".into())),
        }
        Ok(state)
    }
}

/// A conversation row of version 3: version 2's fields, then the index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConversationRowV3 {
    v2: ConversationRowV2,
    index: Option<IndexRow>,
}

impl From<&ConversationState> for ConversationRowV3 {
    fn from(c: &ConversationState) -> Self {
        // Members are not written: from version 6 on they have rows of their own.
        let v2 = ConversationRowV2 { kind: c.kind.map(Into::into), head: c.head, members: BTreeMap::new() };
        let index = c.index.as_ref().map(|i| IndexRow {
            since: i.since,
            live: ranges(&i.live),
            mention_all: ranges(&i.mention_all),
        });
        ConversationRowV3 { v2, index }
    }
}

impl ConversationRowV3 {
    pub(super) fn into_state(self) -> Result<ConversationState, CheckpointError> {
        let index = match self.index {
            Some(i) => Some(ConvIndex::from_sets(i.since, set(i.live)?, set(i.mention_all)?)),
            None => None,
        };
        Ok(ConversationState { index, ..self.v2.into_state() })
    }
}

/// A broadcast list row (one layout so far).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ListRowV1 {
    pub(super) head: u64,
    pub(super) live: Ranges,
}

/// A remembered notification's row (one layout so far).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct NoteRowV1 {
    category: Option<String>,
    order: u64,
    read: bool,
    seen: bool,
    retracted: bool,
}

impl From<&Note> for NoteRowV1 {
    fn from(n: &Note) -> Self {
        let Note { category, order, read, seen, retracted } = n.clone();
        NoteRowV1 { category, order, read, seen, retracted }
    }
}

impl From<NoteRowV1> for Note {
    fn from(n: NoteRowV1) -> Self {
        let NoteRowV1 { category, order, read, seen, retracted } = n;
        Note { category, order, read, seen, retracted }
    }
}

/// One thread of a user's conversation in a row (contract v4, [`crate::core::threads::ThreadState`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ThreadRow<R = Ranges> {
    root: u64,
    floor: u64,
    follow: Option<bool>,
    involved: bool,
    unread: R,
    mentions: R,
    expiry: Vec<(i64, R)>,
}

/// Expiry buckets as a row writes them: (day, seqs), ascending by day. A `SeqSet` serializes as its ranges, the
/// same bytes as [`Ranges`].
fn buckets_row(buckets: &Buckets) -> Vec<(i64, &SeqSet)> {
    buckets.iter().map(|(day, seqs)| (*day, seqs)).collect()
}

fn buckets(rows: Vec<(i64, Ranges)>) -> Result<Buckets, CheckpointError> {
    rows.into_iter().map(|(day, r)| Ok((day, set(r)?))).collect()
}

/// Version 5's conversation (contract v4): version 4's fields, then the seqs the user sent and those naming the
/// user, the threads, the replies of threads not the user's yet, the reaction cursor's parts and the reacted messages, and the team.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConvRowV5<R = Ranges> {
    v4: ConvRowV4<R>,
    authored: R,
    named_in: R,
    threads: Vec<ThreadRow<R>>,
    /// The replies of threads not the user's yet: (seq, root, expiry day, mention).
    pending: Vec<(u64, u64, i64, bool)>,
    reactions_from: u64,
    reactions_read: u64,
    reacted: Vec<(u64, u64)>,
    team: Option<String>,
}

impl<'a> From<&'a ConvState> for ConvRowV5<&'a SeqSet> {
    fn from(c: &'a ConvState) -> Self {
        let threads = c.threads.by_root.iter().map(|(root, t)| ThreadRow {
            root: *root,
            floor: t.floor,
            follow: t.follow,
            involved: t.involved,
            unread: &t.unread,
            mentions: &t.mentions,
            expiry: buckets_row(&t.expiry),
        });
        ConvRowV5 {
            v4: c.into(),
            authored: &c.authored,
            named_in: &c.threads.named_in,
            threads: threads.collect(),
            pending: c.threads.pending.iter().map(|p| (p.seq, p.root, p.day, p.mention)).collect(),
            reactions_from: c.reactions.from,
            reactions_read: c.reactions.read,
            reacted: c.reactions.reacted.iter().map(|(s, r)| (*s, *r)).collect(),
            team: c.team.clone(),
        }
    }
}

impl ConvRowV5 {
    fn into_state(self) -> Result<ConvState, CheckpointError> {
        let mut by_root = BTreeMap::new();
        for t in self.threads {
            let (unread, mentions, expiry) = (set(t.unread)?, set(t.mentions)?, buckets(t.expiry)?);
            let state = crate::core::threads::ThreadState {
                floor: t.floor,
                follow: t.follow,
                involved: t.involved,
                unread,
                mentions,
                expiry,
            };
            by_root.insert(t.root, state);
        }
        let pending = self.pending.into_iter();
        let pending =
            pending.map(|(seq, root, day, mention)| crate::core::threads::Pending { seq, root, day, mention });
        let named_in = set(self.named_in)?;
        let threads = crate::core::threads::Threads { by_root, pending: pending.collect(), named_in };
        let reactions = crate::core::reactions::Reactions {
            from: self.reactions_from,
            read: self.reactions_read,
            reacted: self.reacted.into_iter().collect(),
        };
        let authored = set(self.authored)?;
        Ok(ConvState { authored, threads, reactions, team: self.team, ..self.v4.into_state()? })
    }
}

/// A user row of version 6 (contract v4): version 5's, with version 5's conversations.
pub(super) type UserRowV6 = UserRow<ConvRowV5, CountsRow>;

impl UserRowV6 {
    pub(super) fn into_state(self) -> Result<UserState, CheckpointError> {
        self.state_with(ConvRowV5::into_state)
    }
}

/// Version 6's conversation: version 5's fields, then whether the entry awaits its first delta
/// ([`ConvState::awaiting`]). A version 5 conversation was never awaiting: those entries were all counted in the
/// row's `detached`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConvRowV6<R = Ranges> {
    v5: ConvRowV5<R>,
    awaiting: bool,
}

impl<'a> From<&'a ConvState> for ConvRowV6<&'a SeqSet> {
    fn from(c: &'a ConvState) -> Self {
        ConvRowV6 { v5: c.into(), awaiting: c.awaiting }
    }
}

impl ConvRowV6 {
    fn into_state(self) -> Result<ConvState, CheckpointError> {
        Ok(ConvState { awaiting: self.awaiting, ..self.v5.into_state()? })
    }
}

/// A user row of version 7: version 6's, with version 6's conversations; `detached` counts only the non-member
/// entries a delta has reached.
pub(super) type UserRowV7 = UserRow<ConvRowV6, CountsRow>;

impl UserRowV7 {
    pub(super) fn into_state(self) -> Result<UserState, CheckpointError> {
        self.state_with(ConvRowV6::into_state)
    }
}

/// A user row of version 7 as it is written: borrowing the state's range sets.
pub(super) type UserRowV7Of<'a> = UserRow<ConvRowV6<&'a SeqSet>, CountsRow>;

impl<'a> UserRowV7Of<'a> {
    /// The row of `state` in a fold whose pending replies are `shared`, borrowing its range sets (the same bytes
    /// as a [`UserRowV7`]'s): each conversation's row carries the
    /// user's pending replies ([`crate::core::threads::Replies::pending_of`]), so that a fold restored from rows
    /// holds them again, unless the conversation's replies have rows of their own
    /// ([`crate::core::threads::Replies::has_rows`]), written in the same commit, which hold them all.
    pub(super) fn of(state: &'a UserState, shared: &SharedReplies) -> Self {
        let mut row = Self::from(state);
        for (id, ConvRowV6 { v5: conversation, .. }) in &mut row.conversations {
            let replies = shared.get(id.as_str()).filter(|r| !r.has_rows());
            let (Some(c), Some(replies)) = (state.conversations().get(id.as_str()), replies) else { continue };
            let Some(joined) = c.joined_at.filter(|_| c.takes_replies()) else { continue };
            let pending = replies.pending_of(&c.threads, joined).map(|p| (p.seq, p.root, p.day, p.mention));
            conversation.pending.extend(pending);
            conversation.pending.sort_unstable_by_key(|p| p.0);
            conversation.pending.dedup_by_key(|p| p.0);
        }
        row
    }
}

/// A conversation row of version 7 (contract v4): version 6's (5's layout, members apart), then the team, the
/// replies' roots, the recalled seqs, the reaction head and each message's live reactions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ConversationRowV7 {
    v5: ConversationRowV5,
    team: Option<String>,
    roots: Vec<(u64, u64)>,
    recalled: Ranges,
    reaction_head: u64,
    reactions: Vec<(u64, Vec<LiveReactionRow>)>,
}

/// A live reaction in a row: (user, reaction, reaction_seq).
type LiveReactionRow = (String, String, u64);

impl From<&ConversationState> for ConversationRowV7 {
    fn from(c: &ConversationState) -> Self {
        let live = |l: &Vec<crate::core::fanout::LiveReaction>| {
            l.iter().map(|r| (r.user.clone(), r.reaction.clone(), r.reaction_seq)).collect()
        };
        ConversationRowV7 {
            v5: c.into(),
            team: c.team.clone(),
            roots: c.roots.iter().map(|(s, r)| (*s, *r)).collect(),
            recalled: ranges(&c.recalled),
            reaction_head: c.reaction_head,
            reactions: c.reactions.iter().map(|(seq, l)| (*seq, live(l))).collect(),
        }
    }
}

impl ConversationRowV7 {
    pub(super) fn into_state(self) -> Result<ConversationState, CheckpointError> {
        let live = |l: Vec<LiveReactionRow>| {
            let reaction =
                |(user, reaction, reaction_seq)| crate::core::fanout::LiveReaction { user, reaction, reaction_seq };
            l.into_iter().map(reaction).collect()
        };
        Ok(ConversationState {
            team: self.team,
            roots: self.roots.into_iter().collect(),
            recalled: set(self.recalled)?,
            reaction_head: self.reaction_head,
            reactions: self.reactions.into_iter().map(|(seq, l)| (seq, live(l))).collect(),
            ..self.v5.into_state()?
        })
    }
}
