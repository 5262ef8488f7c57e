//! The codec against hand-written rows of every version.

use super::*;
use crate::core::contract::{ConversationEvent, MemberJoined, MessageSent, ReadAck, UserEvent};
use crate::core::delta::{Delta, DeltaOp};
use crate::core::fanout::FanOut;
use crate::core::fold::Fold;

fn sample() -> (FanOut, Fold) {
    let meta = || ("e".to_owned(), "2024-01-01T00:00:00Z".to_owned());
    let mut events = vec![ConversationEvent::Joined(MemberJoined {
        event_id: meta().0,
        occurred_at: meta().1,
        conversation_id: "c {1}".into(),
        user_id: "a/b".into(),
    })];
    for seq in 1..=500 {
        events.push(ConversationEvent::Sent(MessageSent {
            event_id: meta().0,
            occurred_at: meta().1,
            conversation_id: "c {1}".into(),
            seq,
            sender_id: "z".into(),
            mentions: if seq % 100 == 0 { vec!["a/b".into()] } else { vec![] },
            mention_all: false,
            countable: seq % 7 != 0,
            thread_root: None,
        }));
    }
    let mut fanout = FanOut::new();
    let mut fold = Fold::new();
    for d in fanout.process_batch(&events).0 {
        fold.apply_delta(&d);
    }
    fold.apply_user_event(&UserEvent::ReadAck(ReadAck {
        event_id: meta().0,
        occurred_at: meta().1,
        user_id: "a/b".into(),
        conversation_id: "elsewhere".into(),
        read_seq: 9,
    }));
    (fanout, fold)
}

#[test]
fn a_version_1_user_row_still_loads() {
    let (_, fold) = sample();
    let user = fold.user("a/b").unwrap();
    // The v1 layout: conversations without `feed`, totals without `feed_unread`, nothing after `detached`.
    type ConvV1 = (u64, Option<u64>, bool, SeqSet, SeqSet, u64);
    let convs: BTreeMap<String, ConvV1> = user
        .conversations()
        .iter()
        .map(|(id, c)| {
            (id.to_string(), (c.floor, c.joined_at, c.muted, c.unread.clone(), c.mentions.clone(), c.touched))
        })
        .collect();
    let t = user.totals();
    let v1 = (
        convs,
        (t.counts.total_unread, t.counts.total_mentions, t.counts.unread_conversations, t.memberships),
        501u64,
        1usize,
    );
    let mut bytes = vec![1u8];
    bytes.extend(postcard::to_allocvec(&v1).unwrap());
    let loaded = decode_user(&bytes).unwrap();
    assert_eq!(
        loaded.view("a/b", &crate::core::broadcast::NoLists),
        user.view("a/b", &crate::core::broadcast::NoLists)
    );
    assert_eq!(loaded.totals(), user.totals());
}

#[test]
fn version_2_user_and_conversation_rows_still_load() {
    let (fanout, fold) = sample();
    let user = fold.user("a/b").unwrap();
    // The v2 layout: conversations without `read_from` and `named`, written flat.
    type ConvV2 = (u64, Option<u64>, bool, SeqSet, SeqSet, u64, bool);
    let convs: BTreeMap<String, ConvV2> = user
        .conversations()
        .iter()
        .map(|(id, c)| {
            let (unread, mentions) = (c.unread.clone(), c.mentions.clone());
            (id.to_string(), (c.floor, c.joined_at, c.muted, unread, mentions, c.touched, c.feed))
        })
        .collect();
    let detached = user.conversations().values().filter(|c| !c.is_member()).count();
    let t = user.totals();
    let c = t.counts;
    // The totals row: total_unread, total_mentions, unread_conversations, memberships, feed_unread.
    let totals = (c.total_unread, c.total_mentions, c.unread_conversations, t.memberships, c.feed_unread);
    let v2 = (convs, totals, 501u64, detached, user.broadcasts(), user.notification_summary());
    let mut bytes = vec![2u8];
    bytes.extend(postcard::to_allocvec(&v2).unwrap());
    let loaded = decode_user(&bytes).unwrap();
    // A row from before contract v3 has no read history, mark or expiry buckets; everything else loads.
    let before_v3 = |c: &ConvState| ConvState {
        read: SeqSet::new(),
        read_mentions: SeqSet::new(),
        expiry: Default::default(),
        mark: None,
        own: SeqSet::new(),
        authored: SeqSet::new(),
        threads: Default::default(),
        reactions: Default::default(),
        team: None,
        awaiting: false,
        ..c.clone()
    };
    let expected: Conversations =
        user.conversations().iter().map(|(id, c)| (id.clone(), Box::new(before_v3(c)))).collect();
    assert_eq!(loaded.conversations(), &expected);
    assert_eq!((loaded.totals(), loaded.broadcasts()), (user.totals(), user.broadcasts()));
    let (id, conv) = fanout.conversations().next().unwrap();
    let mut bytes = vec![2u8];
    bytes.extend(postcard::to_allocvec(&(conv.kind, conv.head, &conv.members)).unwrap());
    let expected = ConversationState { uncreated_days: BTreeMap::new(), sent: SeqSet::new(), ..conv.clone() };
    assert_eq!(decode_conversation(&bytes).unwrap(), expected, "{id}");
}

#[test]
fn user_and_conversation_states_round_trip() {
    let (fanout, fold) = sample();
    let user = fold.user("a/b").unwrap();
    let bytes = encode_user(user, fold.shared_replies());
    assert_eq!(bytes[0], USER_ROW);
    assert!(bytes.len() < 400, "500 messages with 71 gaps encode in {} bytes", bytes.len());
    assert_eq!(&decode_user(&bytes).unwrap(), user);
    let conv = fanout.conversation("c {1}").unwrap();
    let without_members = ConversationState { members: BTreeMap::new(), ..conv.clone() };
    assert_eq!(decode_conversation(&encode_conversation(conv)).unwrap(), without_members);
}

#[test]
fn rows_are_postcards_own_bytes() {
    // Seqs near the contract's bound (2^53) take the longest varints.
    let (fanout, mut fold) = sample();
    let far = (1u64 << 53) - 3;
    fold.apply_delta(&Delta {
        user_id: "a/b".into(),
        conversation_id: "far".into(),
        ops: vec![DeltaOp::Joined { head: far - 100, reactions: 0 }],
        feed: false,
        source: None,
        team: Some("t".into()),
    });
    // The reference: postcard's own output into a Vec.
    fn postcard_of<T: Serialize>(version: u8, row: &T) -> Vec<u8> {
        [vec![version], postcard::to_allocvec(row).unwrap()].concat()
    }
    for (_, user) in fold.users() {
        let row = rows::UserRowV7Of::of(user, fold.shared_replies());
        let bytes = encode_user(user, fold.shared_replies());
        assert_eq!(bytes, postcard_of(USER_ROW, &row));
        // The row as written borrows the state's range sets; read back as the owned row, it writes the same bytes.
        let owned: rows::UserRowV7 = postcard::from_bytes(&bytes[1..]).unwrap();
        assert_eq!(bytes, postcard_of(USER_ROW, &owned));
    }
    let conv = fanout.conversation("c {1}").unwrap();
    assert_eq!(encode_conversation(conv), postcard_of(CONVERSATION_ROW, &ConversationRowV7::from(conv)));
}

#[test]
fn members_have_rows_of_their_own_and_old_rows_move_theirs_there() {
    use crate::checkpoint::store::{MemberRow, StateRow};
    use crate::state::commit::fanout_changes;
    use crate::state::load::fanout_from_rows;
    let (fanout, _) = sample();
    let d = crate::core::hybrid::Diffusion::default();
    let (id, conv) = fanout.conversations().next().unwrap();
    assert!(!conv.members.is_empty());
    let row = |state: Vec<u8>| StateRow { id: id.clone(), partition: 0, state };
    let member = |(u, at): (&String, &u64)| MemberRow {
        conversation_id: id.clone(),
        user_id: u.clone(),
        joined_head: *at as i64,
    };
    let members: Vec<MemberRow> = conv.members.iter().map(member).collect();
    let bytes = encode_conversation(conv);
    assert_eq!(bytes[0], CONVERSATION_ROW);
    assert!(decode_conversation(&bytes).unwrap().members.is_empty(), "a row of version 6 holds no member");
    let restored = fanout_from_rows(vec![row(bytes.clone())], members.clone(), vec![], d).unwrap();
    assert_eq!(restored.fanout.conversation(id), Some(conv));
    assert!(restored.rewrite.is_empty());
    // A row of version 2 holds its members: restored from it, and moved to rows of their own by the next
    // checkpoint, which rewrites the conversation's row without them.
    let mut old = vec![2u8];
    old.extend(postcard::to_allocvec(&(conv.kind, conv.head, &conv.members)).unwrap());
    let restored = fanout_from_rows(vec![row(old)], vec![], vec![], d).unwrap();
    assert_eq!(restored.fanout.conversation(id).unwrap().members, conv.members);
    let changes = fanout_changes(&restored.fanout, &restored.rewrite);
    assert_eq!(changes.states.iter().map(|(_, s)| s.as_ref().unwrap()[0]).collect::<Vec<_>>(), [CONVERSATION_ROW]);
    let mut written: Vec<MemberRow> =
        changes.members.iter().map(|((_, u), at)| member((u, at.as_ref().unwrap()))).collect();
    written.sort_by(|a, b| a.user_id.cmp(&b.user_id));
    assert_eq!(written, members);
    // A member row without its conversation's row, or joined above its head, is corrupt.
    assert!(fanout_from_rows(vec![], members[..1].to_vec(), vec![], d).is_err());
    let mut above = members.clone();
    above[0].joined_head = conv.head as i64 + 1;
    assert!(fanout_from_rows(vec![row(bytes)], above, vec![], d).is_err());
}

#[test]
fn a_version_4_user_row_still_loads_and_a_newer_table_is_refused() {
    let (_, fold) = sample();
    let user = fold.user("a/b").unwrap();
    let bytes = encode_user(user, fold.shared_replies());
    type Row<T> =
        (BTreeMap<String, ConvRowV6>, T, u64, usize, BTreeMap<String, u64>, crate::core::notifications::Summary);
    let (convs, (counts, memberships), clock, detached, lists, summary): Row<(Vec<u64>, u64)> =
        postcard::from_bytes(&bytes[1..]).unwrap();
    let convs4: BTreeMap<String, ConvRowV4<&SeqSet>> =
        user.conversations().iter().map(|(id, c)| (id.to_string(), (&**c).into())).collect();
    // Version 4's totals: total_unread, total_mentions, unread_conversations, memberships, feed_unread.
    let totals = (counts[0], counts[1], counts[2], memberships, counts[3]);
    // Before version 7, `detached` counted every non-member entry (none awaited its first delta).
    let detached4 = user.conversations().values().filter(|c| !c.is_member()).count();
    let mut v4 = vec![4u8];
    v4.extend(postcard::to_allocvec(&(convs4, totals, clock, detached4, lists.clone(), summary.clone())).unwrap());
    let loaded = decode_user(&v4).unwrap();
    assert_eq!(loaded.totals(), user.totals());
    assert_eq!(
        loaded.view("a/b", &crate::core::broadcast::NoLists),
        user.view("a/b", &crate::core::broadcast::NoLists)
    );
    // A row of a build whose table has one more counter: refused, never read short.
    let mut more = counts.clone();
    more.push(0);
    let mut newer = vec![USER_ROW];
    newer.extend(postcard::to_allocvec(&(convs, (more, memberships), clock, detached, lists, summary)).unwrap());
    let err = decode_user(&newer).unwrap_err();
    assert!(matches!(&err, CheckpointError::Inconsistent(m) if m.contains("counts")), "{err}");
}

#[test]
fn rejects_other_versions_truncation_and_inconsistency() {
    let (_, fold) = sample();
    let mut bytes = encode_user(fold.user("a/b").unwrap(), fold.shared_replies());
    assert!(matches!(decode_user(&[]), Err(CheckpointError::Version { found: None, .. })));
    assert!(matches!(decode_user(&[9, 0]), Err(CheckpointError::Version { found: Some(9), .. })));
    assert!(matches!(decode_user(&bytes[..bytes.len() / 2]), Err(CheckpointError::Corrupt(_))));
    // Same layout as UserState (postcard is positional), with a total that no longer equals the sum.
    type Mirror =
        (BTreeMap<String, ConvRowV6>, Totals, u64, usize, BTreeMap<String, u64>, crate::core::notifications::Summary);
    // The totals row of version 5: the table of counts in its order, and the memberships.
    type Totals = (Vec<u64>, u64);
    let mut mirror: Mirror = postcard::from_bytes(&bytes[1..]).unwrap();
    mirror.1 .0[0] += 1;
    bytes.truncate(1);
    bytes.extend(postcard::to_allocvec(&mirror).unwrap());
    let err = decode_user(&bytes).unwrap_err();
    assert!(matches!(&err, CheckpointError::Inconsistent(m) if m.contains("totals")), "{err}");
}
