//! Helpers shared by the test modules.

use std::path::PathBuf;

use unread::core::contract::UserView;

/// A path under the crate root.
pub fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The shared datasets folder next to the checkout, if present.
pub fn shared_dataset(name: &str) -> Option<PathBuf> {
    let p = repo_path("../shared/datasets/ubuntu-irc").join(name);
    p.exists().then_some(p)
}

/// Parses JSON Lines of reader views.
pub fn parse_views(text: &str) -> Vec<UserView> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad view line {l:?}: {e}"))).collect()
}

/// Compares two sorted lists of views user by user; panics naming the first differences.
pub fn assert_same_views(got: &[UserView], expected: &[UserView]) {
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
