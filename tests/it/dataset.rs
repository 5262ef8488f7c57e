//! Real `#ubuntu` IRC traffic: every user's final state must equal the expected file exactly.
use unread::core::fanout::BatchStats;
use unread::core::fold::Fold;
use unread::core::hybrid::Diffusion;
use unread::pipeline::{for_each_batch, open_input, write_views_shaped, Pipeline, Shape, MAX_BATCH};

use crate::support::{
    assert_same_views, churned_v2_dev_events, fold_text, parse_views, read_expected, repo_path, shared_dataset,
};

fn fold_file(path: &str, batch: usize) -> (Vec<unread::core::contract::UserView>, Vec<u8>) {
    let (views, bytes, _) = fold_file_with(path, batch, Diffusion::OFF);
    (views, bytes)
}

/// Folds a file with a read-diffusion policy; also returns the fan-out's counts (switches both ways).
fn fold_file_with(
    path: &str,
    batch: usize,
    diffusion: Diffusion,
) -> (Vec<unread::core::contract::UserView>, Vec<u8>, BatchStats) {
    let mut pipeline = Pipeline::with_diffusion(diffusion);
    let stats = for_each_batch(
        open_input(path).expect("open input"),
        batch,
        |bad| panic!("dataset holds an invalid event: {bad}"),
        |b| pipeline.process_batch(b),
    )
    .expect("read");
    assert!(stats.events > 0 && stats.invalid == 0, "{stats:?}");
    // The v1 and v2 expected files keep their shape: no v3 `marked_unread`, no v4 field.
    let views: Vec<_> = pipeline.views().iter().map(|v| Shape::V2.project(v)).collect();
    let mut bytes = Vec::new();
    write_views_shaped(&views, Shape::V2, &mut bytes).expect("write");
    for (id, state) in pipeline.fold().users() {
        state.check().unwrap_or_else(|e| panic!("user {id:?}: {e}"));
    }
    (views, bytes, pipeline.stats())
}

/// The pipeline after folding a bundled file (under the crate root).
fn fold_pipeline(rel: &str) -> Pipeline {
    let mut pipeline = Pipeline::new();
    let path = repo_path(rel);
    let input = open_input(path.to_str().unwrap()).unwrap();
    for_each_batch(input, MAX_BATCH, |bad| panic!("{bad}"), |b| pipeline.process_batch(b)).unwrap();
    pipeline
}

#[test]
fn dev_set_is_exact_for_every_user() {
    let events = repo_path("tests/data/ubuntu-irc/dev-events.jsonl");
    let expected_text = read_expected(repo_path("tests/data/ubuntu-irc/dev-expected.jsonl").to_str().unwrap());
    let expected = parse_views(&expected_text);
    assert_eq!(expected.len(), 1565, "the bundled expected file holds 1,565 users");
    assert!(!expected_text.contains("marked_unread"), "the v1 file keeps the v1 shape");
    let (views, bytes) = fold_file(events.to_str().unwrap(), MAX_BATCH);
    assert_same_views(&views, &expected);
    // The output is also byte-for-byte the reference model's (same key order, escaping and sorting).
    assert!(bytes == expected_text.as_bytes(), "output differs from dev-expected.jsonl in formatting");
}

/// Issue 12: with a low threshold many conversations switch to read diffusion and back, and every user's counts
/// stay exactly the expected ones, whatever the batching.
#[test]
fn dev_sets_are_exact_with_read_diffusion_at_low_thresholds() {
    for (events, expected) in [
        ("tests/data/ubuntu-irc/dev-events.jsonl", "tests/data/ubuntu-irc/dev-expected.jsonl"),
        ("tests/data/ubuntu-irc/v2-dev-events.jsonl", "tests/data/ubuntu-irc/v2-dev-expected.jsonl"),
    ] {
        let expected = parse_views(&read_expected(repo_path(expected).to_str().unwrap()));
        for (threshold, batch) in [(5, MAX_BATCH), (2, 7), (40, 333), (150, 1)] {
            let diffusion = Diffusion::from_threshold(threshold);
            let (views, _, stats) = fold_file_with(repo_path(events).to_str().unwrap(), batch, diffusion);
            assert_same_views(&views, &expected);
            assert!(stats.to_read >= 7, "threshold {threshold}: {stats:?}");
        }
    }
}

/// The dev set's channels only grow, so none would switch back: with churn added (every join followed, 150 events
/// later, by the same member leaving), channels shrink and grow again and switch both ways many times; every
/// user's counts stay those of write diffusion alone (itself exact against the reference on the dev sets).
#[test]
fn read_diffusion_switching_both_ways_under_churn_is_exact() {
    let churned = churned_v2_dev_events();
    let fold = |diffusion, batch| fold_text(&churned, diffusion, batch);
    let (expected, _) = fold(Diffusion::OFF, MAX_BATCH);
    for (threshold, batch) in [(4, MAX_BATCH), (6, 7), (10, 1)] {
        let (views, stats) = fold(Diffusion::from_threshold(threshold), batch);
        assert_same_views(&views, &expected);
        assert!(stats.to_read >= 20 && stats.to_write >= 20, "threshold {threshold}: {stats:?}");
        println!("threshold {threshold}, batch {batch}: {} to read, {} back to write", stats.to_read, stats.to_write);
    }
}

#[test]
fn dev_set_is_exact_whatever_the_batch_size() {
    let events = repo_path("tests/data/ubuntu-irc/dev-events.jsonl");
    let expected = parse_views(&read_expected(repo_path("tests/data/ubuntu-irc/dev-expected.jsonl").to_str().unwrap()));
    for batch in [1, 7, 333] {
        let (views, _) = fold_file(events.to_str().unwrap(), batch);
        assert_same_views(&views, &expected);
    }
}

#[test]
fn full_set_is_exact_when_present() {
    let (Some(events), Some(expected)) = (shared_dataset("events.jsonl.gz"), shared_dataset("expected.jsonl.gz"))
    else {
        println!("SKIPPED full_set_is_exact_when_present: ../shared/datasets/ubuntu-irc/ is not next to this checkout");
        return;
    };
    let expected = parse_views(&read_expected(expected.to_str().unwrap()));
    assert_eq!(expected.len(), 23_819);
    let (views, _) = fold_file(events.to_str().unwrap(), MAX_BATCH);
    assert_same_views(&views, &expected);
}

#[test]
fn every_dev_state_survives_checkpoint_and_projection_encoding() {
    use unread::projection;
    use unread::state::codec as checkpoint;
    let pipeline = fold_pipeline("tests/data/ubuntu-irc/dev-events.jsonl");
    let mut users = 0;
    for (id, state) in pipeline.fold().users() {
        state.check().unwrap_or_else(|e| panic!("user {id:?}: {e}"));
        let shared = pipeline.fold().shared_replies();
        assert_eq!(&checkpoint::decode_user(&checkpoint::encode_user(state, shared)).unwrap(), state);
        let view = state.view(id, &unread::core::broadcast::NoLists);
        let stored = projection::encode_state_view(&view, state.broadcasts(), state);
        // The stored fields hold the cursors; the read script adds a count per cursor (0 with no lists).
        let counts = state.broadcasts().keys().map(|b| (format!("{}{b}", projection::COUNT_PREFIX), "0".to_owned()));
        let never = unread::core::expiry::NEVER;
        assert_eq!(projection::decode_view(id, stored.into_iter().chain(counts), never).unwrap(), view);
        users += 1;
    }
    assert!(users >= 1565, "{users} users kept");
    // A conversation comes back from its row and its members' rows (`fanout_members`).
    for (id, conv) in pipeline.fanout().conversations() {
        use unread::checkpoint::store::{MemberRow, StateRow};
        let row = StateRow { id: id.clone(), partition: 0, state: checkpoint::encode_conversation(conv) };
        let member = |(u, at): (&String, &u64)| MemberRow {
            conversation_id: id.clone(),
            user_id: u.clone(),
            joined_head: *at as i64,
        };
        let members = conv.members.iter().map(member).collect();
        let d = unread::core::hybrid::Diffusion::default();
        let restored = unread::state::load::fanout_from_rows(vec![row], members, vec![], d).unwrap();
        assert_eq!(restored.fanout.conversation(id), Some(conv), "{id}");
    }
}

#[test]
fn v2_dev_set_is_exact_for_every_user_byte_for_byte() {
    let events = repo_path("tests/data/ubuntu-irc/v2-dev-events.jsonl");
    let expected_text = read_expected(repo_path("tests/data/ubuntu-irc/v2-dev-expected.jsonl").to_str().unwrap());
    let expected = parse_views(&expected_text);
    assert_eq!(expected.len(), 1616, "the bundled v2 expected file holds 1,616 users");
    for batch in [MAX_BATCH, 1, 97] {
        let (views, bytes) = fold_file(events.to_str().unwrap(), batch);
        assert_same_views(&views, &expected);
        assert!(bytes == expected_text.as_bytes(), "batch {batch}: output differs from v2-dev-expected.jsonl");
    }
}

#[test]
fn v2_full_set_is_exact_when_present() {
    let (Some(events), Some(expected)) = (shared_dataset("v2-events.jsonl.gz"), shared_dataset("v2-expected.jsonl.gz"))
    else {
        println!(
            "SKIPPED v2_full_set_is_exact_when_present: ../shared/datasets/ubuntu-irc/ is not next to this checkout"
        );
        return;
    };
    let expected_text = read_expected(expected.to_str().unwrap());
    let (views, bytes) = fold_file(events.to_str().unwrap(), MAX_BATCH);
    assert_same_views(&views, &parse_views(&expected_text));
    assert!(bytes == expected_text.as_bytes(), "output differs from v2-expected.jsonl.gz in formatting");
}

#[test]
fn every_v2_dev_state_survives_checkpoint_encoding_with_its_notifications() {
    use unread::core::notifications::NoteBook;
    use unread::state::codec as checkpoint;
    let pipeline = fold_pipeline("tests/data/ubuntu-irc/v2-dev-events.jsonl");
    let lists = pipeline.fanout();
    let mut with_notes = 0;
    for (id, state) in pipeline.fold().users() {
        let shared = pipeline.fold().shared_replies();
        let mut loaded = checkpoint::decode_user(&checkpoint::encode_user(state, shared)).unwrap();
        let notes = state
            .notes()
            .notes()
            .map(|(n, note)| (n, checkpoint::decode_note(&checkpoint::encode_note(note)).unwrap()));
        loaded.set_notes(NoteBook::restore(notes));
        loaded.check().unwrap_or_else(|e| panic!("user {id:?} after a round trip: {e}"));
        assert_eq!(loaded.view(id, lists), state.view(id, lists), "{id}");
        with_notes += usize::from(!state.notes().is_empty());
    }
    assert!(with_notes > 100, "{with_notes} users with notifications");
    for (id, list) in lists.lists() {
        assert_eq!(&checkpoint::decode_list(&checkpoint::encode_list(list)).unwrap(), list, "{id}");
    }
}

/// Folds a v3 file at `now` (RFC 3339) with receipts; returns the views' (v3 shape) and the receipts' JSON Lines.
fn fold_v3(path: &str, now: &str, batch: usize, diffusion: Diffusion) -> (Vec<u8>, Vec<u8>) {
    let (views, receipts, _) = fold_at(path, now, batch, diffusion, Shape::V3);
    (views, receipts)
}

/// Folds a file at `now` (RFC 3339) with receipts, every state checked; returns the views' JSON Lines in `shape`,
/// the receipts' and the pipeline.
fn fold_at(path: &str, now: &str, batch: usize, diffusion: Diffusion, shape: Shape) -> (Vec<u8>, Vec<u8>, Pipeline) {
    let mut pipeline = Pipeline::with_diffusion(diffusion);
    pipeline.keep_receipts();
    let input = open_input(path).expect("open input");
    for_each_batch(input, batch, |bad| panic!("{bad}"), |b| pipeline.process_batch(b)).expect("read");
    for (id, state) in pipeline.fold().users() {
        state.check().unwrap_or_else(|e| panic!("user {id:?}: {e}"));
    }
    let now = unread::core::expiry::seconds_of(now).expect("an RFC 3339 instant");
    let (mut views, mut receipts) = (Vec::new(), Vec::new());
    write_views_shaped(&pipeline.views_at(now), shape, &mut views).expect("write");
    unread::pipeline::write_receipts(&pipeline.receipts().expect("kept").all(), &mut receipts).expect("write");
    (views, receipts, pipeline)
}

/// Issue 22: the v3 dev set (expiry, marks "from here", receipts) at the README's instant, byte for byte, whatever
/// the batching, and with conversations of 20 members or more read-diffused (back below 10): the index's expiry
/// buckets, own seqs and named mentions give the same counts.
#[test]
fn v3_dev_set_and_its_receipts_are_exact_byte_for_byte_at_its_instant() {
    let events = repo_path("tests/data/ubuntu-irc/v3-dev-events.jsonl");
    let expected = read_expected(repo_path("tests/data/ubuntu-irc/v3-dev-expected.jsonl").to_str().unwrap());
    let receipts = read_expected(repo_path("tests/data/ubuntu-irc/v3-dev-receipts.jsonl").to_str().unwrap());
    assert_eq!((expected.lines().count(), receipts.lines().count()), (1616, 14_056));
    assert!(expected.contains(r#""marked_unread":true"#), "the v3 set marks conversations unread");
    for (batch, diffusion) in batchings() {
        let (views, got_receipts) = fold_v3(events.to_str().unwrap(), "2009-03-04T12:00:00Z", batch, diffusion);
        let case = format!("batch {batch}, {diffusion:?}");
        assert_same_views(&parse_views(&String::from_utf8(views.clone()).unwrap()), &parse_views(&expected));
        assert!(views == expected.as_bytes(), "{case}: output differs from v3-dev-expected.jsonl");
        assert!(got_receipts == receipts.as_bytes(), "{case}: receipts differ from v3-dev-receipts.jsonl");
    }
}

/// The instant matters: a second before midnight and at midnight differ exactly where expiry says.
#[test]
fn v3_counts_change_at_midnight_utc_and_not_a_second_before() {
    let events = repo_path("tests/data/ubuntu-irc/v3-dev-events.jsonl");
    let fold_at = |now: &str| fold_v3(events.to_str().unwrap(), now, MAX_BATCH, Diffusion::OFF).0;
    let (before, at, after) =
        (fold_at("2009-03-03T23:59:59Z"), fold_at("2009-03-04T00:00:00Z"), fold_at("2009-03-04T23:59:59Z"));
    assert_ne!(before, at, "something expires at 2009-03-04T00:00:00Z in the dev set");
    assert_eq!(at, after, "nothing expires during a day");
}

#[test]
fn v3_full_set_and_its_receipts_are_exact_when_present() {
    let (Some(events), Some(expected), Some(receipts)) = (
        shared_dataset("v3-events.jsonl.gz"),
        shared_dataset("v3-expected.jsonl.gz"),
        shared_dataset("v3-receipts.jsonl.gz"),
    ) else {
        println!(
            "SKIPPED v3_full_set_and_its_receipts_are_exact_when_present: ../shared/datasets/ubuntu-irc/ is absent"
        );
        return;
    };
    let (views, got_receipts) = fold_v3(events.to_str().unwrap(), "2011-02-25T12:00:00Z", MAX_BATCH, Diffusion::OFF);
    assert!(views == read_expected(expected.to_str().unwrap()).as_bytes(), "output differs from v3-expected.jsonl.gz");
    let receipts = read_expected(receipts.to_str().unwrap());
    assert!(got_receipts == receipts.as_bytes(), "receipts differ from v3-receipts.jsonl.gz");
}

/// v3 and v4 through the projection's layout: every v3-dev and v4-dev user's Redis fields (`c:` with the mark,
/// `e:` with the expiry buckets; v4's `d:` and `t:`), read back at the README's instant, a second before its
/// midnight and at it, are the fold's view then.
#[test]
fn v3_dev_states_read_from_their_redis_fields_at_any_instant_are_the_folds() {
    for version in ["v3", "v4"] {
        let threads =
            dev_states_read_from_their_redis_fields(&format!("tests/data/ubuntu-irc/{version}-dev-events.jsonl"));
        assert!(version == "v3" || threads > 300, "{threads} v4 users with followed threads in Redis");
    }
}

/// Checks one dev set's users through the Redis fields; returns how many have a `t:` field.
fn dev_states_read_from_their_redis_fields(file: &str) -> usize {
    use unread::core::broadcast::NoLists;
    use unread::core::expiry::{day_of, seconds_of};
    use unread::projection::{self, redis::UserWrite};
    use unread::state::codec as checkpoint;
    let pipeline = fold_pipeline(file);
    let (mut expiring, mut marked, mut threads) = (0, 0, 0);
    for (id, state) in pipeline.fold().users() {
        let (bytes, mut alone) = (checkpoint::encode_user(state, pipeline.fold().shared_replies()), Fold::new());
        alone.restore(id.clone(), checkpoint::decode_user(&bytes).unwrap());
        let loaded = alone.user(id).unwrap();
        assert_eq!((loaded.conversations(), loaded.totals()), (state.conversations(), state.totals()), "{id}");
        let write = UserWrite::of_state(id, Some(state), "1 1 1".parse().unwrap());
        let mut fields = projection::encode_view(&write.view, &write.cursors);
        fields.extend(write.expiring.iter().map(|(c, v)| (format!("{}{c}", projection::EXPIRY_PREFIX), v.clone())));
        let details = [
            (projection::details::DETAIL_PREFIX, &write.details),
            (projection::details::THREADS_PREFIX, &write.threads),
        ];
        for (prefix, values) in details {
            fields.extend(values.iter().map(|(c, v)| (format!("{prefix}{c}"), v.clone())));
        }
        fields.extend(state.broadcasts().keys().map(|b| (format!("{}{b}", projection::COUNT_PREFIX), "0".into())));
        expiring += usize::from(!write.expiring.is_empty());
        marked += usize::from(state.conversations().values().any(|c| c.is_marked()));
        threads += usize::from(!write.threads.is_empty());
        for at in ["2009-03-04T12:00:00Z", "2009-03-03T23:59:59Z", "2009-03-04T00:00:00Z", "2008-01-01T00:00:00Z"] {
            let today = day_of(seconds_of(at).unwrap());
            let got = projection::decode_view(id, fields.clone(), today).unwrap();
            assert_eq!(got, state.view_at(id, &NoLists, today), "{id} at {at}");
        }
    }
    assert!(expiring > 100 && marked > 10, "{expiring} users with expiring unread, {marked} with a mark");
    threads
}

/// The fold's publish patches a user's changed conversations only, and builds only their fields
/// (`UserWrite::patch_of_state`, issue 21: a patch costs the change, not the user's state). Over every user of the
/// v3 dev set, read-diffused from 20 members, a patch of each conversation, of all at once and of an unknown one
/// carries what the whole write carries for the same conversations, with the same totals, categories and cursors.
#[test]
fn a_patch_carries_what_the_whole_write_carries_for_its_conversations() {
    use std::collections::BTreeSet;
    use unread::projection::redis::UserWrite;
    let mut pipeline = Pipeline::with_diffusion(Diffusion::from_threshold(20));
    let input = open_input(repo_path("tests/data/ubuntu-irc/v3-dev-events.jsonl").to_str().unwrap()).unwrap();
    for_each_batch(input, MAX_BATCH, |bad| panic!("{bad}"), |b| pipeline.process_batch(b)).unwrap();
    let version = "3 10 20".parse().unwrap();
    let (mut patches, mut indexed, mut expiring) = (0, 0, 0);
    for (user, state) in pipeline.fold().users() {
        let whole = UserWrite::of_state(user, Some(state), version);
        let ids: Vec<String> = state.conversations().keys().map(|id| id.to_string()).collect();
        let sets = ids
            .iter()
            .map(|c| BTreeSet::from([c.clone()]))
            .chain([ids.iter().cloned().collect(), BTreeSet::from(["no such conversation".to_owned()])]);
        for changed in sets {
            let patch = UserWrite::patch_of_state(user, Some(state), version, &changed);
            let (mut a, mut b) = (patch.view.clone(), whole.view.clone());
            a.conversations.retain(|c, _| changed.contains(c));
            b.conversations.retain(|c, _| changed.contains(c));
            assert_eq!(a, b, "{user} {changed:?}");
            assert_eq!(a.conversations.len(), patch.view.conversations.len(), "only what changed: {user}");
            assert_eq!(patch.cursors, whole.cursors, "{user}");
            for c in &changed {
                assert_eq!(patch.indexed.get(c), whole.indexed.get(c), "{user} {c}");
                assert_eq!(patch.expiring.get(c), whole.expiring.get(c), "{user} {c}");
                indexed += usize::from(patch.indexed.contains_key(c));
                expiring += usize::from(patch.expiring.contains_key(c));
            }
            assert_eq!(patch.changed, changed.iter().cloned().collect::<Vec<_>>());
            assert!(!patch.replace && !patch.refill);
            patches += 1;
        }
    }
    assert!(patches > 5_000 && indexed > 1_000 && expiring > 100, "{patches} {indexed} {expiring}");
}

/// Folds a v4 file at `now` (RFC 3339) with receipts ([`fold_at`], v4 shape).
fn fold_v4(path: &str, now: &str, batch: usize, diffusion: Diffusion) -> (Vec<u8>, Vec<u8>, Pipeline) {
    fold_at(path, now, batch, diffusion, Shape::V4)
}

/// The batchings and diffusions the v3 and v4 dev sets are exact under: whole batches, one event at a time, 97;
/// conversations of 20 members or more read-diffused; replies and reactions in deltas for every member in every
/// conversation, and in none.
fn batchings() -> [(usize, Diffusion); 6] {
    let read_diffused = Diffusion::with_band(20, 10);
    let (always, never) = (Diffusion::OFF.with_shared_from(1), Diffusion::OFF.with_shared_from(usize::MAX));
    [
        (MAX_BATCH, Diffusion::OFF),
        (1, Diffusion::OFF),
        (97, Diffusion::OFF),
        (97, read_diffused),
        (97, always),
        (MAX_BATCH, never),
    ]
}

/// Issue 46: the v4 dev set (threads, reactions, teams, the first unread) at the README's instant, byte for byte,
/// counts and receipts, whatever the batching, with conversations of 20 members or more read-diffused, and
/// whichever conversations send their replies and reactions in a delta for every member (all, from 64 members,
/// none).
#[test]
fn v4_dev_set_and_its_receipts_are_exact_byte_for_byte_at_its_instant() {
    let events = repo_path("tests/data/ubuntu-irc/v4-dev-events.jsonl");
    let expected = read_expected(repo_path("tests/data/ubuntu-irc/v4-dev-expected.jsonl").to_str().unwrap());
    let receipts = read_expected(repo_path("tests/data/ubuntu-irc/v4-dev-receipts.jsonl").to_str().unwrap());
    assert_eq!((expected.lines().count(), receipts.lines().count()), (1616, 14_056));
    for needle in [r#""threads":{"ubuntu"#, r#""reactions":1"#, r#""teams":{"y"#, r#""first_unread":1"#] {
        assert!(expected.contains(needle), "the v4 set holds {needle}");
    }
    for (batch, diffusion) in batchings() {
        let (views, got_receipts, _) = fold_v4(events.to_str().unwrap(), "2009-03-04T12:00:00Z", batch, diffusion);
        let case = format!("batch {batch}, {diffusion:?}");
        assert_same_views(&parse_views(&String::from_utf8(views.clone()).unwrap()), &parse_views(&expected));
        assert!(views == expected.as_bytes(), "{case}: output differs from v4-dev-expected.jsonl");
        assert!(got_receipts == receipts.as_bytes(), "{case}: receipts differ from v4-dev-receipts.jsonl");
    }
}

/// Every v4 dev state (threads, reactions, teams) comes back from its checkpoint rows unchanged: users and
/// conversations; the pending replies from the users' rows, or, for a conversation whose replies went in deltas for
/// every member, from the conversation's reply rows (its users' rows then leave them out).
#[test]
fn every_v4_dev_state_survives_checkpoint_encoding() {
    use unread::state::codec as checkpoint;
    let events = repo_path("tests/data/ubuntu-irc/v4-dev-events.jsonl");
    let never = Diffusion::OFF.with_shared_from(usize::MAX);
    for diffusion in [Diffusion::OFF, never] {
        let (_, _, pipeline) = fold_v4(events.to_str().unwrap(), "2009-03-04T12:00:00Z", MAX_BATCH, diffusion);
        let (mut with_threads, mut with_reactions, mut with_pending, mut with_rows) = (0, 0, 0, 0);
        // Every user's rows, then the reply rows, loaded into one fresh fold, as a restarted fold task loads its
        // partition's: the pending replies make up its shared replies again, so every row re-encodes to the same
        // bytes.
        let (mut restored, mut rows) = (Fold::new(), Vec::new());
        for (id, state) in pipeline.fold().users() {
            // The notifications have rows of their own (`every_v2_dev_state_survives_…`).
            let bytes = checkpoint::encode_user(state, pipeline.fold().shared_replies());
            let loaded = checkpoint::decode_user(&bytes).unwrap();
            with_pending += usize::from(loaded.conversations().values().any(|c| !c.threads.pending.is_empty()));
            restored.restore(id.clone(), loaded);
            rows.push((id, state, bytes));
        }
        let chunks = |id: &str| 0..=pipeline.fanout().conversation(id).unwrap().head / unread::core::threads::CHUNK;
        for (id, replies) in pipeline.fold().shared_replies().iter().filter(|(_, r)| r.has_rows()) {
            with_rows += 1;
            for chunk in chunks(id) {
                let row = checkpoint::encode_replies(replies.chunk(chunk));
                restored.restore_replies(id, checkpoint::decode_replies(&row).unwrap());
            }
            let kept = |k| restored.replies_of(id).into_iter().flat_map(move |r| r.chunk(k));
            assert!(chunks(id).all(|k| kept(k).eq(replies.chunk(k))), "{id}: its replies come back");
        }
        for (id, state, bytes) in rows {
            let loaded = restored.user(id).unwrap();
            let parts =
                |s: &unread::core::fold::UserState| (s.conversations().clone(), s.totals(), s.broadcasts().clone());
            assert!(parts(loaded) == parts(state), "{id}");
            assert!(checkpoint::encode_user(loaded, restored.shared_replies()) == bytes, "{id}: its row re-encodes");
            with_threads += usize::from(state.conversations().values().any(|c| !c.threads.by_root.is_empty()));
            with_reactions += usize::from(state.conversations().values().any(|c| !c.reactions.reacted.is_empty()));
        }
        assert!(with_threads > 400 && with_reactions > 100, "{with_threads} with threads, {with_reactions} reactions");
        match diffusion == never {
            true => assert!(with_pending > 1000 && with_rows == 0, "{with_pending} users' rows carry pending replies"),
            false => assert!(with_rows >= 5 && with_pending < 100, "{with_rows} reply rows, {with_pending} pending"),
        }
        let mut teams = 0;
        for (id, conv) in pipeline.fanout().conversations() {
            let loaded = checkpoint::decode_conversation(&checkpoint::encode_conversation(conv)).unwrap();
            let expected = unread::core::fanout::ConversationState { members: Default::default(), ..conv.clone() };
            assert_eq!(loaded, expected, "{id}");
            teams += usize::from(conv.team.is_some());
        }
        assert_eq!(teams, 9, "9 channels of 10 have a team (the dataset's README)");
    }
}

#[test]
fn v4_full_set_and_its_receipts_are_exact_when_present() {
    let (Some(events), Some(expected), Some(receipts)) = (
        shared_dataset("v4-events.jsonl.gz"),
        shared_dataset("v4-expected.jsonl.gz"),
        shared_dataset("v4-receipts.jsonl.gz"),
    ) else {
        println!(
            "SKIPPED v4_full_set_and_its_receipts_are_exact_when_present: ../shared/datasets/ubuntu-irc/ is absent"
        );
        return;
    };
    let (views, got_receipts, _) = fold_v4(events.to_str().unwrap(), "2011-02-25T12:00:00Z", MAX_BATCH, Diffusion::OFF);
    assert!(views == read_expected(expected.to_str().unwrap()).as_bytes(), "output differs from v4-expected.jsonl.gz");
    assert!(got_receipts == read_expected(receipts.to_str().unwrap()).as_bytes(), "receipts differ");
}

/// The partition states the service's tasks own and the replay owns N of (`unread::state::partition`): the v4 dev
/// set routed by the Kafka default partitioner to 4 fan-out and 3 fold partitions, read diffusion from 20 members,
/// gives every conversation the state and every user the view of one fan-out and one fold over everything, and each partition's
/// commit carries exactly its own users.
#[test]
fn the_v4_dev_set_over_partition_states_equals_one_fold() {
    use unread::core::contract::Event;
    use unread::core::delta::Fence;
    use unread::core::fanout::FanOut;
    use unread::core::fold::Fold;
    use unread::kafka::{Partitioner, Placement};
    use unread::state::partition::{FanOutPartition, FoldPartition, Write};
    use unread::state::FoldNext;

    let diffusion = Diffusion::from_threshold(20);
    let (conversations, users) = (
        Placement { partitioner: Partitioner::Murmur2, partitions: 4 },
        Placement { partitioner: Partitioner::Murmur2, partitions: 3 },
    );
    let mut fanouts: Vec<FanOutPartition> =
        (0..4).map(|p| FanOutPartition::new(p, 1, 0, FanOut::with_diffusion(diffusion), Vec::new())).collect();
    let mut folds: Vec<FoldPartition> =
        (0..3).map(|p| FoldPartition::new(p, 1, FoldNext::default(), Fold::new(), Fence::default())).collect();
    let mut whole = Pipeline::with_diffusion(diffusion);
    let input = open_input(&crate::support::v4_dev_events()).unwrap();
    let mut for_members = 0;
    for_each_batch(
        input,
        MAX_BATCH,
        |bad| panic!("{bad}"),
        |batch| {
            whole.process_batch(batch);
            let mut by_partition: Vec<Vec<_>> = vec![Vec::new(); 4];
            for e in batch {
                if let Event::Conversation(c) = e {
                    by_partition[conversations.of(c.key().as_bytes()) as usize].push(c.clone());
                }
            }
            for (fanout, events) in fanouts.iter_mut().zip(by_partition) {
                for d in fanout.apply(&events).0 {
                    // A read-diffused conversation's replies go to every fold partition, once.
                    let to = match d.is_for_members() {
                        true => 0..folds.len(),
                        false => users.of(d.user_id.as_bytes()) as usize..users.of(d.user_id.as_bytes()) as usize + 1,
                    };
                    for_members += usize::from(d.is_for_members());
                    folds[to].iter_mut().for_each(|fold| fold.apply_deltas(std::slice::from_ref(&d)));
                }
            }
            for e in batch {
                if let Event::User(u) = e {
                    folds[users.of(u.user_id().as_bytes()) as usize].apply_event(u);
                }
            }
        },
    )
    .unwrap();
    let mut seen = 0;
    for (id, state) in whole.fold().users() {
        // The states differ only in each conversation's `touched` clock, which follows the order of deltas.
        let fold = &folds[users.of(id.as_bytes()) as usize].fold;
        let view = |s: &unread::core::fold::UserState| s.view(id, whole.fanout());
        assert_eq!(fold.user(id).map(view), Some(view(state)), "{id}");
        seen += 1;
    }
    assert_eq!(seen, folds.iter().map(|f| f.fold.users().count()).sum::<usize>(), "no user elsewhere");
    let mut read_diffused = 0;
    for (id, conv) in whole.fanout().conversations() {
        let part = fanouts[conversations.of(id.as_bytes()) as usize].fanout();
        assert_eq!(part.conversation(id), Some(conv), "{id}");
        read_diffused += usize::from(conv.index.is_some());
    }
    assert!(read_diffused > 0, "some conversations are read-diffused");
    assert!(for_members > 0, "some replies went once to every fold partition");
    assert!(seen > 1000, "{seen} users");
    for (p, fold) in folds.iter_mut().enumerate() {
        let writes = fold.writes(Write::ChangedWhole);
        assert!(!writes.is_empty() && writes.iter().all(|w| users.of(w.user_id.as_bytes()) == p as i32), "{p}");
        let commit = fold.take_commit(unread::state::commit::RedisWrites::Nothing, true);
        assert_eq!(commit.changes.states.len(), writes.len(), "partition {p}: every changed user's row");
        fold.committed(Vec::new());
        assert!(fold.writes(Write::Changes).is_empty(), "nothing changed since the commit");
    }
}

/// The fold is order-proof across its two inputs (docs/guarantees.md): the v4 full set with every user event folded
/// before any delta, the far end of a catch-up in which the fold's user events run ahead of the fan-out's deltas,
/// and with every delta before any user event, the other end, gives every user the state of the file's order. Some
/// users wait for many joins in the first: `ubottu` joins 1,412 conversations, and its read acks, mutes and thread
/// follows reach each of them first.
#[test]
fn v4_full_set_with_every_user_event_before_the_deltas_is_exact_when_present() {
    use unread::core::contract::{Event, UserEvent};
    let (Some(events), Some(expected)) = (shared_dataset("v4-events.jsonl.gz"), shared_dataset("v4-expected.jsonl.gz"))
    else {
        println!("SKIPPED v4_full_set_with_every_user_event_before_the_deltas_is_exact_when_present: no dataset");
        return;
    };
    let mut fanout = unread::core::fanout::FanOut::with_diffusion(Diffusion::default().for_one_fold());
    let (mut deltas, mut user_events): (Vec<_>, Vec<UserEvent>) = (Vec::new(), Vec::new());
    let input = open_input(events.to_str().unwrap()).unwrap();
    for_each_batch(
        input,
        MAX_BATCH,
        |bad| panic!("{bad}"),
        |batch| {
            let mut conversation_events = Vec::new();
            for event in batch {
                match event {
                    Event::Conversation(c) => conversation_events.push(c.clone()),
                    Event::User(u) => user_events.push(u.clone()),
                }
            }
            deltas.extend(fanout.process_batch(&conversation_events).0);
        },
    )
    .unwrap();
    let expected = parse_views(&read_expected(expected.to_str().unwrap()));
    let today = unread::core::expiry::day_of(unread::core::expiry::seconds_of("2011-02-25T12:00:00Z").unwrap());
    for user_events_first in [true, false] {
        let mut fold = Fold::new().without_own_changes();
        let apply_user_events = |fold: &mut Fold| user_events.iter().for_each(|u| fold.apply_user_event(u));
        if user_events_first {
            apply_user_events(&mut fold);
        }
        deltas.iter().for_each(|d| fold.apply_delta(d));
        if !user_events_first {
            apply_user_events(&mut fold);
        }
        let mut views = Vec::new();
        write_views_shaped(&fold.views_at(&fanout, today), Shape::V4, &mut views).unwrap();
        assert_same_views(&parse_views(&String::from_utf8(views).unwrap()), &expected);
    }
}
