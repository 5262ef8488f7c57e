//! The fold against the contract, on event sequences the fuzzer writes: 4 bytes an event, over 4 users and 3
//! conversations (creations, joins, leaves, messages with mentions, recalls, read acks, mutes), each made as JSON and
//! taken through the decoder as a record would be. Whatever the sequence:
//! - nothing panics;
//! - every user's totals equal the sums of its parts (`UserState::check`);
//! - a replay changes nothing: applying every delta and user event a second time leaves every view as it was;
//! - the result does not depend on how user events and deltas interleave: user events first, deltas first, or
//!   alternating, the views are the same (`CONTRACT.md` § Semantics: the two topics are not ordered together).
#![no_main]

use libfuzzer_sys::fuzz_target;
use unread::core::contract::{decode, Event, UserEvent};
use unread::core::delta::Delta;
use unread::core::fanout::FanOut;
use unread::core::fold::Fold;

const USERS: [&str; 4] = ["alice", "bob", "c {x}", "ü/%"];
const CONVS: [&str; 3] = ["team", "a:{b}", "z/1"];

/// One event from 4 bytes: (kind, conversation, user, number), or `None` for bytes the decoder refuses.
fn event(n: usize, b: [u8; 4], heads: &mut [u64; 3]) -> Option<Event> {
    let (c, u) = (usize::from(b[1]) % CONVS.len(), usize::from(b[2]) % USERS.len());
    let (cid, uid, x) = (CONVS[c], USERS[u], u64::from(b[3]));
    let meta = format!(r#""event_id":"f{n}","occurred_at":"2024-01-01T00:00:00Z""#);
    let json = match b[0] % 8 {
        0 => {
            let members: Vec<&str> =
                USERS.iter().enumerate().filter(|(i, _)| x >> i & 1 == 1).map(|(_, u)| *u).collect();
            let kind = if x & 16 == 0 { "group" } else { "feed" };
            let members = serde_json::to_string(&members).ok()?;
            format!(
                r#"{{"type":"conversation.created",{meta},"conversation_id":"{cid}","kind":"{kind}","members":{members}}}"#
            )
        }
        1 => format!(r#"{{"type":"member.joined",{meta},"conversation_id":"{cid}","user_id":"{uid}"}}"#),
        2 => format!(r#"{{"type":"member.left",{meta},"conversation_id":"{cid}","user_id":"{uid}"}}"#),
        3 | 4 => {
            heads[c] += x % 3; // 0: a duplicate of the head
            let seq = heads[c].max(1);
            heads[c] = seq;
            let mentioned = USERS[usize::from(b[3] >> 4) % USERS.len()];
            format!(
                r#"{{"type":"message.sent",{meta},"conversation_id":"{cid}","seq":{seq},"sender_id":"{uid}","mentions":["{mentioned}"]}}"#
            )
        }
        5 => format!(
            r#"{{"type":"message.recalled",{meta},"conversation_id":"{cid}","seq":{}}}"#,
            (heads[c] + 1).saturating_sub(x % 6).max(1)
        ),
        6 => {
            format!(r#"{{"type":"read.ack",{meta},"user_id":"{uid}","conversation_id":"{cid}","read_seq":{}}}"#, x % 40)
        }
        _ => format!(
            r#"{{"type":"conversation.muted",{meta},"user_id":"{uid}","conversation_id":"{cid}","muted":{}}}"#,
            x & 1 == 1
        ),
    };
    decode(json.as_bytes()).ok()
}

/// The fold after `steps`, each a delta or a user event, from empty.
fn fold(steps: &[Step<'_>]) -> Fold {
    let mut fold = Fold::default();
    for step in steps {
        match step {
            Step::Delta(d) => fold.apply_delta(d),
            Step::User(u) => fold.apply_user_event(u),
        }
    }
    fold
}

#[derive(Clone, Copy)]
enum Step<'a> {
    Delta(&'a Delta),
    User(&'a UserEvent),
}

fuzz_target!(|data: &[u8]| {
    let mut heads = [0u64; 3];
    let events: Vec<Event> =
        data.chunks_exact(4).enumerate().filter_map(|(n, b)| event(n, b.try_into().ok()?, &mut heads)).collect();
    let mut fanout = FanOut::default();
    let mut deltas = Vec::new();
    for batch in events.chunks(usize::from(data.first().copied().unwrap_or(1) % 7 + 1)) {
        let conversation_events = batch.iter().filter_map(|e| match e {
            Event::Conversation(c) => Some(c),
            Event::User(_) => None,
        });
        deltas.extend(fanout.process_batch(conversation_events).0);
    }
    let users: Vec<&UserEvent> =
        events.iter().filter_map(|e| if let Event::User(u) = e { Some(u) } else { None }).collect();
    let deltas_first: Vec<Step<'_>> =
        deltas.iter().map(Step::Delta).chain(users.iter().copied().map(Step::User)).collect();
    let users_first: Vec<Step<'_>> =
        users.iter().copied().map(Step::User).chain(deltas.iter().map(Step::Delta)).collect();
    let (mut d, mut u) = (deltas.iter().map(Step::Delta).peekable(), users.iter().copied().map(Step::User).peekable());
    let mut alternating = Vec::new();
    while d.peek().is_some() || u.peek().is_some() {
        alternating.extend(d.next());
        alternating.extend(u.next());
    }
    let reference = fold(&deltas_first);
    for (_, state) in reference.users() {
        state.check().expect("totals equal the sums of their parts");
    }
    let views = reference.views(&fanout);
    assert_eq!(fold(&users_first).views(&fanout), views, "user events first changed the result");
    assert_eq!(fold(&alternating).views(&fanout), views, "alternating changed the result");
    let twice: Vec<Step<'_>> = deltas_first.iter().chain(deltas_first.iter()).copied().collect();
    assert_eq!(fold(&twice).views(&fanout), views, "a replay changed the result");
});
