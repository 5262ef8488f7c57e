//! The TypeScript client (`clients/typescript/`, issue 48) against the real service: Node runs
//! `test/integration.mjs`, which watches a dev-set user while the service folds the set, is SIGKILLed and restarted
//! on the same port; the client must reconnect, resume and end with the user's exact counts, applying every version
//! once and in order.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn the_typescript_client_follows_a_user_through_a_sigkill_to_the_exact_counts() {
    let Some(stack) = stack("the_typescript_client_follows_a_user_through_a_sigkill_to_the_exact_counts") else {
        return;
    };
    let ns = Ns::new(&stack, "tsclient");
    let expected = v2_dev_expected();
    let user = expected.iter().max_by_key(|v| (v.conversations.len(), v.user_id.clone())).unwrap();
    // The file's own line: the fields of the contract it was made for, none that a later contract defaults.
    let lines = std::fs::read_to_string(repo_path("tests/data/ubuntu-irc/v2-dev-expected.jsonl")).unwrap();
    let id = serde_json::to_string(&user.user_id).unwrap();
    let line = lines.lines().find(|l| l.starts_with(&format!("{{\"user_id\":{id},"))).unwrap();
    let file = std::env::temp_dir().join(format!("{}-expected.json", ns.name));
    std::fs::write(&file, line).unwrap();
    let svc = ns.start(&[]);
    let port = svc.port;
    let mut node = Command::new("node")
        .arg(repo_path("clients/typescript/test/integration.mjs"))
        .env("UNREAD_URL", format!("http://127.0.0.1:{port}"))
        .env("UNREAD_USER", &user.user_id)
        .env("UNREAD_TOKEN", token(&user.user_id, false))
        .env("UNREAD_EXPECTED", &file)
        .stdout(Stdio::piped())
        .spawn()
        .expect("node (scripts/stack up installs it)");
    let mut out = BufReader::new(node.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in out.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line == "LIVE" {
            break;
        }
    }
    assert!(seen.last().is_some_and(|l| l == "LIVE"), "the client never went live: {seen:?}");
    ns.ok(&["produce", &v2_dev_events()]);
    svc.kill();
    std::thread::sleep(Duration::from_millis(500));
    let svc = ns.start_at(port, &[]);
    let deadline = Instant::now() + Duration::from_secs(170);
    let status = loop {
        if let Some(status) = node.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the client did not finish");
        std::thread::sleep(Duration::from_millis(100));
    };
    seen.extend(out.map_while(Result::ok));
    svc.stop();
    assert!(status.success(), "the client: {status}; it printed {seen:#?}");
    assert!(seen.iter().any(|l| l.starts_with("exact after")), "{seen:#?}");
}
