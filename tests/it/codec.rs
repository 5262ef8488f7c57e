//! Checkpoint rows written before the row types existed (`tests/data/checkpoint-rows-v3.json`, by the code at
//! f50be7f, where the core's structs were the format) still decode with today's codec, re-encode to the same
//! bytes, and equal the state a fresh fold of the same input gives.

use std::collections::BTreeMap;

use unread::core::hybrid::Diffusion;
use unread::pipeline::{for_each_batch, open_input, Pipeline, MAX_BATCH};
use unread::state::codec;

#[derive(serde::Deserialize)]
struct Rows {
    diffusion_threshold: u64,
    users: BTreeMap<String, String>,
    conversations: BTreeMap<String, String>,
    lists: BTreeMap<String, String>,
    notes: BTreeMap<String, String>,
}

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

fn rows() -> Rows {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/checkpoint-rows-v3.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn folded(threshold: u64) -> Pipeline {
    let mut p = Pipeline::with_diffusion(Diffusion::from_threshold(threshold));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ubuntu-irc/v2-dev-events.jsonl");
    for_each_batch(open_input(path).unwrap(), MAX_BATCH, |bad| panic!("{bad}"), |b| p.process_batch(b)).unwrap();
    p
}

#[test]
fn rows_written_before_the_row_types_decode_and_reencode_byte_for_byte() {
    let rows = rows();
    assert!(
        rows.users.len() >= 10 && rows.conversations.len() >= 10 && !rows.lists.is_empty() && !rows.notes.is_empty()
    );
    let p = folded(rows.diffusion_threshold);
    let (mut read_diffused, mut indexes) = (0, 0);
    for (id, hex) in &rows.users {
        let stored = bytes(hex);
        let state = codec::decode_user(&stored).unwrap_or_else(|e| panic!("user {id}: {e}"));
        // Rows of the last version re-encode byte for byte; older ones are read and written at today's version.
        if stored[0] == codec::USER_ROW {
            assert_eq!(codec::encode_user(&state, &Default::default()), stored, "user {id} re-encodes to other bytes");
        }
        let again = codec::decode_user(&codec::encode_user(&state, &Default::default())).unwrap();
        assert_eq!(again.conversations(), state.conversations(), "user {id} after a round trip");
        let fresh = p.fold().user(id).unwrap();
        // A row from before v3 has no read history (kept from the upgrade on): the counts are the same.
        assert_eq!(state.view(id, p.fanout()), fresh.view(id, p.fanout()), "{id}");
        assert_eq!((state.totals(), state.broadcasts()), (fresh.totals(), fresh.broadcasts()), "{id}");
        assert_eq!(state.notification_summary(), fresh.notification_summary(), "{id}");
        read_diffused += usize::from(state.read_diffused().next().is_some());
    }
    for (id, hex) in &rows.conversations {
        let stored = bytes(hex);
        let state = codec::decode_conversation(&stored).unwrap_or_else(|e| panic!("conversation {id}: {e}"));
        if stored[0] == codec::CONVERSATION_ROW {
            assert_eq!(codec::encode_conversation(&state), stored, "conversation {id} re-encodes to other bytes");
        }
        // From version 6 on a row leaves the members out: they have rows of their own (`fanout_members`).
        let without_members = unread::core::fanout::ConversationState { members: BTreeMap::new(), ..state.clone() };
        let again = codec::decode_conversation(&codec::encode_conversation(&state)).unwrap();
        assert_eq!(again, without_members, "{id}");
        // A row from before v3 has no sent seqs (receipts count from the upgrade on); the rest is the fold's.
        let fresh = p
            .fanout()
            .conversation(id)
            .map(|c| unread::core::fanout::ConversationState { sent: Default::default(), ..c.clone() });
        assert_eq!(Some(&state), fresh.as_ref(), "{id}");
        indexes += usize::from(state.index.is_some());
    }
    for (id, hex) in &rows.lists {
        let stored = bytes(hex);
        let state = codec::decode_list(&stored).unwrap();
        assert_eq!(codec::encode_list(&state), stored, "list {id}");
        assert_eq!(Some(&state), p.fanout().list(id), "{id}");
    }
    for (id, hex) in &rows.notes {
        let stored = bytes(hex);
        assert_eq!(codec::encode_note(&codec::decode_note(&stored).unwrap()), stored, "note {id}");
    }
    assert!(
        read_diffused >= 5 && indexes >= 5,
        "the rows cover read diffusion: {read_diffused} users, {indexes} indexes"
    );
}
