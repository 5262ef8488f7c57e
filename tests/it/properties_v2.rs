//! Property tests of contract v2's user-side state against plain models (cf. shared/tools/reference_fold.py):
//! notifications created, read, retracted and marked in any order the contract allows, with duplicates and a crash
//! (checkpoint rows written and loaded back) at a random point; broadcast lists published and recalled while
//! readers' cursors move, the two streams interleaved at random.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;
use unread::core::broadcast::NoLists;
use unread::core::contract::*;
use unread::core::fanout::FanOut;
use unread::core::fold::Fold;
use unread::core::notifications::NoteBook;
use unread::state::codec as checkpoint;

const CATEGORIES: [&str; 3] = ["like", "mention", "follow"];

#[derive(Debug, Clone)]
enum NoteOp {
    Created { id: u8, category: usize },
    Read(u8),
    Retracted(u8),
    Seen(Option<usize>),
    ReadAll(Option<usize>),
}

fn note_op() -> impl Strategy<Value = NoteOp> {
    let category = proptest::option::of(0..CATEGORIES.len());
    prop_oneof![
        6 => (0u8..8, 0..CATEGORIES.len()).prop_map(|(id, category)| NoteOp::Created { id, category }),
        2 => (0u8..8).prop_map(NoteOp::Read),
        1 => (0u8..8).prop_map(NoteOp::Retracted),
        2 => category.clone().prop_map(NoteOp::Seen),
        1 => category.prop_map(NoteOp::ReadAll),
    ]
}

fn note_event(op: &NoteOp) -> UserEvent {
    let (event_id, occurred_at, user_id) = ("e".to_owned(), "2024-01-01T00:00:00Z".to_owned(), "u".to_owned());
    let mark = |id: u8| NotificationMark {
        event_id: event_id.clone(),
        occurred_at: occurred_at.clone(),
        user_id: user_id.clone(),
        notification_id: format!("n{id}"),
    };
    let marks = |c: Option<usize>| NotificationsMark {
        event_id: event_id.clone(),
        occurred_at: occurred_at.clone(),
        user_id: user_id.clone(),
        category: c.map(|c| CATEGORIES[c].to_owned()),
    };
    match *op {
        NoteOp::Created { id, category } => UserEvent::NotificationCreated(NotificationCreated {
            notification_id: format!("n{id}"),
            category: CATEGORIES[category].to_owned(),
            event_id,
            occurred_at,
            user_id,
        }),
        NoteOp::Read(id) => UserEvent::NotificationRead(mark(id)),
        NoteOp::Retracted(id) => UserEvent::NotificationRetracted(mark(id)),
        NoteOp::Seen(c) => UserEvent::NotificationsSeen(marks(c)),
        NoteOp::ReadAll(c) => UserEvent::NotificationsRead(marks(c)),
    }
}

/// The contract's notification rules, as plainly as possible: category → (unread, unseen).
fn note_model(ops: &[NoteOp]) -> BTreeMap<String, NotificationView> {
    let mut created: HashMap<u8, (usize, usize)> = HashMap::new(); // id → (category, position)
    let (mut read, mut retracted) = (BTreeSet::new(), BTreeSet::new());
    let mut marks: Vec<(usize, Option<usize>, bool)> = Vec::new(); // (position, category, is read)
    for (pos, op) in ops.iter().enumerate() {
        match *op {
            NoteOp::Created { id, category } => {
                created.entry(id).or_insert((category, pos));
            }
            NoteOp::Read(id) => {
                read.insert(id);
            }
            NoteOp::Retracted(id) => {
                retracted.insert(id);
            }
            NoteOp::Seen(c) => marks.push((pos, c, false)),
            NoteOp::ReadAll(c) => marks.push((pos, c, true)),
        }
    }
    let mut out: BTreeMap<String, NotificationView> = BTreeMap::new();
    for (id, (category, at)) in created {
        let counts = out.entry(CATEGORIES[category].to_owned()).or_default();
        if retracted.contains(&id) {
            continue;
        }
        let later = marks.iter().filter(|(p, c, _)| *p > at && c.is_none_or(|c| c == category));
        let is_read = read.contains(&id) || later.clone().any(|m| m.2);
        let is_seen = is_read || later.count() > 0;
        counts.unread += u64::from(!is_read);
        counts.unseen += u64::from(!is_seen);
    }
    out
}

/// Writes the user's checkpoint rows and loads them back, as a restarted fold task would.
fn crash_and_restore(fold: &mut Fold) {
    let Some(state) = fold.user("u") else { return };
    let mut loaded = checkpoint::decode_user(&checkpoint::encode_user(state, fold.shared_replies())).unwrap();
    let notes: Vec<_> = state
        .notes()
        .notes()
        .map(|(id, n)| (id, checkpoint::decode_note(&checkpoint::encode_note(n)).unwrap()))
        .collect();
    loaded.set_notes(NoteBook::restore(notes));
    *fold = Fold::new();
    fold.restore("u".to_owned(), loaded);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn notifications_equal_the_model_in_any_order_with_duplicates_and_a_crash(
        ops in proptest::collection::vec(note_op(), 0..40),
        crash_at in 0usize..40,
    ) {
        let mut fold = Fold::new();
        for (i, op) in ops.iter().enumerate() {
            if i == crash_at {
                crash_and_restore(&mut fold);
            }
            fold.apply_user_event(&note_event(op));
            if let Some(state) = fold.user("u") {
                prop_assert_eq!(state.check(), Ok(()));
            }
        }
        let view = fold.view("u", &NoLists);
        let expected = note_model(&ops);
        prop_assert_eq!(&view.notifications, &expected);
        prop_assert_eq!(view.total_notifications_unread, expected.values().map(|c| c.unread).sum::<u64>());
        prop_assert_eq!(view.total_notifications_unseen, expected.values().map(|c| c.unseen).sum::<u64>());
    }

    #[test]
    fn broadcast_counts_equal_the_model_whatever_the_interleaving(
        list_ops in proptest::collection::vec((0usize..2, 0u64..3, proptest::bool::weighted(0.8), 0u64..4), 0..30),
        reads in proptest::collection::vec((0usize..3, 0usize..2, 0u64..40), 0..20),
        seed in any::<u64>(),
    ) {
        let lists = ["system", "dot:x"];
        let meta = || ("e".to_owned(), "2024-01-01T00:00:00Z".to_owned());
        // (list, gap, countable, recall back): gap 0 repeats the head (a duplicate); back > 0 recalls head+1-back.
        let mut heads = [0u64; 2];
        let mut conv = Vec::new();
        for &(l, gap, countable, back) in &list_ops {
            let (event_id, occurred_at) = meta();
            let broadcast_id = lists[l].to_owned();
            if back > 0 {
                let seq = (heads[l] + 1).saturating_sub(back).max(1);
                conv.push(ConversationEvent::Unpublished(BroadcastRecalled { event_id, occurred_at, broadcast_id, seq }));
            } else {
                let seq = if gap == 0 { heads[l].max(1) } else { heads[l] + gap };
                heads[l] = heads[l].max(seq);
                conv.push(ConversationEvent::Published(BroadcastPublished { event_id, occurred_at, broadcast_id, seq, countable }));
            }
        }
        let user = |u: usize| format!("reader {u}");
        let user_events: Vec<UserEvent> = reads.iter().map(|&(u, l, read_seq)| {
            let (event_id, occurred_at) = meta();
            UserEvent::BroadcastRead(BroadcastRead { event_id, occurred_at, user_id: user(u), broadcast_id: lists[l].to_owned(), read_seq })
        }).collect();
        // The model: per list, the live countable seqs; per (reader, list), the largest read_seq.
        let mut live: [BTreeMap<u64, bool>; 2] = Default::default();
        let mut model_heads = [0u64; 2];
        for e in &conv {
            match e {
                ConversationEvent::Published(p) => {
                    let l = lists.iter().position(|x| *x == p.broadcast_id).unwrap();
                    if p.seq > model_heads[l] { model_heads[l] = p.seq; live[l].insert(p.seq, p.countable); }
                }
                ConversationEvent::Unpublished(r) => {
                    let l = lists.iter().position(|x| *x == r.broadcast_id).unwrap();
                    if r.seq <= model_heads[l] { live[l].remove(&r.seq); }
                }
                _ => unreachable!(),
            }
        }
        let mut cursors: BTreeMap<(usize, usize), u64> = BTreeMap::new();
        for &(u, l, s) in &reads {
            let c = cursors.entry((u, l)).or_default();
            *c = (*c).max(s);
        }
        // The system: the two streams interleaved at random, batches of random size.
        let (mut fanout, mut fold, mut rng) = (FanOut::new(), Fold::new(), seed | 1);
        let (mut ci, mut ui) = (0, 0);
        while ci < conv.len() || ui < user_events.len() {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            if ui == user_events.len() || (ci < conv.len() && rng % 2 == 0) {
                let n = 1 + (rng % 4) as usize;
                let end = (ci + n).min(conv.len());
                let (deltas, _) = fanout.process_batch(&conv[ci..end]);
                prop_assert!(deltas.is_empty(), "a broadcast is never fanned out");
                ci = end;
            } else {
                fold.apply_user_event(&user_events[ui]);
                ui += 1;
            }
        }
        for u in 0..3 {
            let view = fold.view(&user(u), &fanout);
            let mut expected = BTreeMap::new();
            for l in 0..2 {
                if let Some(c) = cursors.get(&(u, l)) {
                    let unread = live[l].iter().filter(|(s, countable)| **countable && **s > *c).count() as u64;
                    expected.insert(lists[l].to_owned(), BroadcastView { unread, dot: unread > 0 });
                }
            }
            prop_assert_eq!(view.broadcasts, expected);
        }
    }
}

#[test]
fn a_flush_writes_the_notifications_that_changed_not_the_history() {
    let mut fold = Fold::new();
    let created = |id: usize| NoteOp::Created { id: 0, category: id % 3 };
    let mut n = 0;
    let mut create = |fold: &mut Fold| {
        n += 1;
        let mut e = note_event(&created(n));
        if let UserEvent::NotificationCreated(c) = &mut e {
            c.notification_id = format!("n{n}");
        }
        fold.apply_user_event(&e);
    };
    for _ in 0..3000 {
        create(&mut fold);
    }
    fold.apply_user_event(&note_event(&NoteOp::ReadAll(None)));
    let users = ["u".to_owned()];
    let first = unread::state::commit::fold_changes(&mut fold, &users);
    assert_eq!(first.notes.len(), 3000, "the first flush writes every notification once");
    create(&mut fold);
    let next = unread::state::commit::fold_changes(&mut fold, &users);
    assert_eq!((next.states.len(), next.notes.len()), (1, 1), "one user row and one notification row");
    let (_, bytes) = next.size();
    assert!(bytes < 200, "{bytes} bytes for one notification after 3,000: the history is not rewritten");
    let view = fold.view("u", &NoLists);
    assert_eq!((view.total_notifications_unread, view.total_notifications_unseen), (1, 1));
}
