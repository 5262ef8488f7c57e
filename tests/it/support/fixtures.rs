//! The bundled data (dev set, expected state) and comparisons of reader views.

use std::path::PathBuf;

use unread::core::contract::UserView;

use super::namespace::Ns;

/// A path under the crate root.
pub fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The shared datasets folder next to the checkout, if present.
pub fn shared_dataset(name: &str) -> Option<PathBuf> {
    let p = repo_path("../shared/datasets/ubuntu-irc").join(name);
    p.exists().then_some(p)
}

/// The whole text of a file, gzipped (`.gz`) or not (`unread::pipeline::open_input`): an expected-state or
/// receipts file of the datasets.
pub fn read_expected(path: &str) -> String {
    let mut text = String::new();
    let mut input = unread::pipeline::open_input(path).expect("open expected");
    std::io::Read::read_to_string(&mut input, &mut text).expect("read expected");
    text
}

/// Parses JSON Lines of reader views.
pub fn parse_views(text: &str) -> Vec<UserView> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad view line {l:?}: {e}"))).collect()
}

/// The reader shape a set of expected views is in: v4 when any of them says something only v4 says (a thread, a
/// team, a first unread, a reaction, a v4 total), v3 otherwise (the v1 and v2 files' events never mark a
/// conversation unread, so their `marked_unread` is false either way). A served or folded view is compared in it.
pub fn shape_of(expected: &[UserView]) -> unread::pipeline::Shape {
    let v4 = |v: &UserView| {
        !v.threads.is_empty()
            || !v.teams.is_empty()
            || v.unread_threads + v.thread_mentions + v.total_reactions > 0
            || v.conversations.values().any(|c| c.first_unread.is_some() || c.reactions > 0)
    };
    match expected.iter().any(v4) {
        true => unread::pipeline::Shape::V4,
        false => unread::pipeline::Shape::V3,
    }
}

/// Compares two sorted lists of views user by user, the got ones in the expected ones' shape ([`shape_of`]);
/// panics naming the first differences.
pub fn assert_same_views(got: &[UserView], expected: &[UserView]) {
    let shape = shape_of(expected);
    let got: Vec<UserView> = got.iter().map(|v| shape.project(v)).collect();
    let mut diffs = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < got.len() || j < expected.len() {
        match (got.get(i), expected.get(j)) {
            (Some(g), Some(e)) if g.user_id == e.user_id => {
                if g != e {
                    diffs.push(format!("user {:?}: got {g:?}, expected {e:?}", g.user_id));
                }
                i += 1;
                j += 1;
            }
            (Some(g), Some(e)) if g.user_id < e.user_id => {
                diffs.push(format!("extra user {:?}", g.user_id));
                i += 1;
            }
            (Some(g), None) => {
                diffs.push(format!("extra user {:?}", g.user_id));
                i += 1;
            }
            (_, Some(e)) => {
                diffs.push(format!("missing user {:?}", e.user_id));
                j += 1;
            }
            (None, None) => unreachable!(),
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {} users differ; first: {:#?}",
        diffs.len(),
        expected.len(),
        &diffs[..diffs.len().min(5)]
    );
}

/// The bundled dev set's events file.
pub fn dev_events() -> String {
    repo_path("tests/data/ubuntu-irc/dev-events.jsonl").to_str().unwrap().to_owned()
}

/// The bundled dev set's expected final state.
pub fn dev_expected() -> Vec<UserView> {
    parse_views(&std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/dev-expected.jsonl")).unwrap())
}

/// Produces `text` (JSON lines) through `unread produce`, from a temporary file named after the namespace and
/// `name`, removed afterwards.
pub fn produce_lines(ns: &Ns, name: &str, text: String) {
    let path = std::env::temp_dir().join(format!("{}-{name}.jsonl", ns.name));
    std::fs::write(&path, text).unwrap();
    ns.ok(&["produce", path.to_str().unwrap()]);
    std::fs::remove_file(path).ok();
}

/// Produces the dev set `copies` times and folds the same copies into `pipeline`, whose views are then the
/// expected state (copies are not mere duplicates: each replays leaves and rejoins at a new head).
pub fn produce_dev_copies(ns: &Ns, pipeline: &mut unread::pipeline::Pipeline, copies: usize) {
    for _ in 0..copies {
        ns.ok(&["produce", &dev_events()]);
        let input = unread::pipeline::open_input(&dev_events()).unwrap();
        unread::pipeline::for_each_batch(input, 1000, |e| panic!("{e}"), |b| pipeline.process_batch(b)).unwrap();
    }
}

/// The bundled v2 dev set's events file (contract v2: feeds, broadcasts, notifications).
pub fn v2_dev_events() -> String {
    repo_path("tests/data/ubuntu-irc/v2-dev-events.jsonl").to_str().unwrap().to_owned()
}

/// The bundled v2 dev set's expected final state (1,616 users).
pub fn v2_dev_expected() -> Vec<UserView> {
    parse_views(&std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/v2-dev-expected.jsonl")).unwrap())
}

/// The bundled v3 dev set's events (JSON Lines path).
pub fn v3_dev_events() -> String {
    repo_path("tests/data/ubuntu-irc/v3-dev-events.jsonl").to_str().unwrap().to_owned()
}

/// The bundled v3 dev set's expected state at [`V3_DEV_NOW`] (1,616 users).
pub fn v3_dev_expected() -> Vec<UserView> {
    parse_views(&std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/v3-dev-expected.jsonl")).unwrap())
}

/// The bundled v4 dev set's events (JSON Lines path).
pub fn v4_dev_events() -> String {
    repo_path("tests/data/ubuntu-irc/v4-dev-events.jsonl").to_str().unwrap().to_owned()
}

/// The bundled v4 dev set's expected state at [`V3_DEV_NOW`], the v3 set's instant (1,616 users).
pub fn v4_dev_expected() -> Vec<UserView> {
    parse_views(&std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/v4-dev-expected.jsonl")).unwrap())
}

/// The instant the v3 dev set's expected state is at (its README), as a read query.
pub const V3_DEV_NOW: &str = "?now=2009-03-04T12:00:00Z";

/// The v2 dev set with churn: every `member.joined` followed, 150 events later, by the same member leaving. The
/// dev set's channels only grow; with churn they shrink and grow again, so a low read-diffusion threshold makes
/// them switch both ways many times. JSON Lines.
pub fn churned_v2_dev_events() -> String {
    let text = std::fs::read_to_string(v2_dev_events()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let leaves: Vec<(usize, String)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, line)| {
            let mut e: serde_json::Value = serde_json::from_str(line).unwrap();
            (e["type"] == "member.joined").then(|| {
                e["type"] = "member.left".into();
                e["event_id"] = format!("churn-{i}").into();
                (i + 150, e.to_string())
            })
        })
        .collect();
    for (at, leave) in leaves.into_iter().rev() {
        lines.insert(at.min(lines.len()), leave);
    }
    lines.join("\n") + "\n"
}

/// The views of folding `events` (JSON Lines) in one process with `diffusion`, with the fan-out's counts.
pub fn fold_text(
    events: &str,
    diffusion: unread::core::hybrid::Diffusion,
    batch: usize,
) -> (Vec<UserView>, unread::core::fanout::BatchStats) {
    let mut pipeline = unread::pipeline::Pipeline::with_diffusion(diffusion);
    unread::pipeline::for_each_batch(events.as_bytes(), batch, |bad| panic!("{bad}"), |b| pipeline.process_batch(b))
        .unwrap();
    for (id, state) in pipeline.fold().users() {
        state.check().unwrap_or_else(|e| panic!("user {id:?}: {e}"));
    }
    (pipeline.views(), pipeline.stats())
}
