//! Contract v4's details of a user's conversations in the Redis hash (pure): per member non-feed conversation, a
//! `d:` field with its `reactions`, what its `first_unread` is made of and its team, and a `t:` field with its
//! followed threads that have unread replies. A read at UTC day D ([`apply`]) takes what expired by then out of
//! the threads and the first unread, recounts `unread_threads` and `thread_mentions` from the `t:` fields, and sums
//! `teams` from the conversations as the read shows them, so they are exact at any instant and nothing is written at
//! midnight, as for the `e:` fields.
//!
//! - [`DETAIL_PREFIX`]`{conversation_id}` → `"{reactions} {first} {n} {day}:{first}… {team}"`: `first` is the
//!   lowest counted unread seq that never expires (0: none), then `n` expiry buckets, each the UTC day its seqs
//!   expire on and the lowest counted seq among them, then the team's id, if any, as the rest of the value (an id
//!   may hold spaces). Written when any of them is not zero or absent.
//! - [`THREADS_PREFIX`]`{conversation_id}` → one token per followed thread with unread replies, separated by
//!   spaces: `"{root}:{unread}:{mentions}"` and, per expiry bucket of its replies, `":{day}:{unread}:{mentions}"`.

use std::collections::BTreeMap;

use crate::core::contract::{ThreadView, UserView};
use crate::core::expiry::NEVER;
use crate::core::fold::ConvState;

/// The prefix of a conversation's details field (v4).
pub const DETAIL_PREFIX: &str = "d:";
/// The prefix of a conversation's followed threads field (v4).
pub const THREADS_PREFIX: &str = "t:";

/// The `d:` field's value of a member non-feed conversation, `None` when it has nothing to say (no reaction, no
/// unread, no team) or the user is not a member of a non-feed conversation.
pub fn detail_value(c: &ConvState) -> Option<String> {
    if !c.is_member() || c.feed {
        return None;
    }
    let reactions = c.reactions.count();
    let (kept, buckets) = first_parts(c);
    if reactions == 0 && kept == 0 && buckets.is_empty() && c.team.is_none() {
        return None;
    }
    let mut value = format!("{reactions} {kept} {}", buckets.len());
    for (day, first) in buckets {
        value.push_str(&format!(" {day}:{first}"));
    }
    if let Some(team) = &c.team {
        value.push(' ');
        value.push_str(team);
    }
    Some(value)
}

/// The lowest counted unread seq in no expiry bucket (0: none), and per bucket holding counted seqs its day and
/// lowest counted seq.
fn first_parts(c: &ConvState) -> (u64, Vec<(i64, u64)>) {
    let buckets = c.expiry.iter().filter_map(|(day, seqs)| Some((*day, c.first_counted_in(seqs)?)));
    let kept = c.first_counted_outside(c.expiry.values());
    (kept.unwrap_or(0), buckets.collect())
}

/// The `t:` field's value of a member non-feed conversation, `None` when it has no followed thread with unread.
pub fn threads_value(c: &ConvState) -> Option<String> {
    if !c.is_member() || c.feed {
        return None;
    }
    let followed = c.threads.by_root.iter().filter(|(root, t)| c.threads.follows(**root, t, &c.authored));
    let tokens: Vec<String> = followed
        .filter(|(_, t)| !t.unread.is_empty())
        .map(|(root, t)| {
            let (unread, mentions) = t.counts_at(NEVER);
            let mut token = format!("{root}:{unread}:{mentions}");
            for (day, seqs) in &t.expiry {
                token.push_str(&format!(":{day}:{}:{}", seqs.len(), seqs.intersection(&t.mentions).len()));
            }
            token
        })
        .collect();
    (!tokens.is_empty()).then(|| tokens.join(" "))
}

/// The `d:` and `t:` fields of a user's `conversations` (all of them, or those a patch names), by conversation.
pub fn detail_fields<'a>(
    conversations: impl IntoIterator<Item = (&'a str, &'a ConvState)>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let (mut details, mut threads) = (BTreeMap::new(), BTreeMap::new());
    for (id, c) in conversations {
        if let Some(value) = detail_value(c) {
            details.insert(id.to_owned(), value);
        }
        if let Some(value) = threads_value(c) {
            threads.insert(id.to_owned(), value);
        }
    }
    (details, threads)
}

/// A `d:` field, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    reactions: u64,
    kept: u64,
    buckets: Vec<(i64, u64)>,
    team: Option<String>,
}

/// Parses a `d:` field's value; `None` when malformed.
pub fn parse_detail(value: &str) -> Option<Detail> {
    let mut parts = value.splitn(4, ' ');
    let (reactions, kept) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    let n: usize = parts.next()?.parse().ok()?;
    let mut rest = parts.next().unwrap_or("");
    let mut buckets = Vec::with_capacity(n);
    for _ in 0..n {
        let (token, after) = rest.split_once(' ').unwrap_or((rest, ""));
        let (day, first) = token.split_once(':')?;
        buckets.push((day.parse().ok()?, first.parse().ok()?));
        rest = after;
    }
    let team = (!rest.is_empty()).then(|| rest.to_owned());
    Some(Detail { reactions, kept, buckets, team })
}

/// One followed thread of a `t:` field: root, unread, mentions and per expiry bucket (day, unread, mentions).
type ThreadFields = (u64, u64, u64, Vec<(i64, u64, u64)>);

/// Parses a `t:` field's value; `None` when malformed.
pub fn parse_threads(value: &str) -> Option<Vec<ThreadFields>> {
    value
        .split(' ')
        .map(|token| {
            let mut n = token.split(':');
            let (root, unread, mentions) = (n.next()?.parse().ok()?, n.next()?.parse().ok()?, n.next()?.parse().ok()?);
            let mut buckets = Vec::new();
            while let Some(day) = n.next() {
                buckets.push((day.parse().ok()?, n.next()?.parse().ok()?, n.next()?.parse().ok()?));
            }
            Some((root, unread, mentions, buckets))
        })
        .collect()
}

/// Applies the parsed `d:` and `t:` fields to `view` at UTC day `today`, after its conversations' counts are
/// final (expiry and read-diffused shares applied): each conversation's `reactions` and `first_unread` (the own
/// part's; a read-diffused conversation's index may add a later one when the own part has none), the threads and
/// their two totals, and the teams.
pub fn apply(
    view: &mut UserView,
    details: &BTreeMap<String, Detail>,
    threads: &BTreeMap<String, Vec<ThreadFields>>,
    today: i64,
) {
    for (id, d) in details {
        let Some(c) = view.conversations.get_mut(id) else { continue };
        c.reactions = d.reactions;
        let live = d.buckets.iter().filter(|(day, _)| *day > today).map(|(_, first)| *first);
        let own = live.chain((d.kept > 0).then_some(d.kept)).min();
        c.first_unread = if c.unread == 0 { None } else { own.or(c.first_unread) };
    }
    (view.unread_threads, view.thread_mentions, view.threads) = (0, 0, BTreeMap::new());
    for (id, list) in threads {
        let Some(muted) = view.conversations.get(id).map(|c| c.muted) else { continue };
        for (root, unread, mentions, buckets) in list {
            let gone = buckets.iter().filter(|b| b.0 <= today).fold((0, 0), |a, b| (a.0 + b.1, a.1 + b.2));
            let (unread, mentions) = (unread.saturating_sub(gone.0), mentions.saturating_sub(gone.1));
            if unread == 0 {
                continue;
            }
            view.threads.entry(id.clone()).or_default().insert(*root, ThreadView { unread, mentions });
            view.unread_threads += u64::from(!muted);
            view.thread_mentions += mentions;
        }
    }
    let team_of = |id: &str| details.get(id).and_then(|d| d.team.as_deref());
    crate::core::totals::add_teams(view, team_of);
}
