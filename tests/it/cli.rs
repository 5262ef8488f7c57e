//! `unread fold` as a user runs it: the binary on the bundled data, on stdin, and on bad input.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::repo_path;

fn unread() -> Command {
    Command::new(env!("CARGO_BIN_EXE_unread"))
}

#[test]
fn fold_writes_the_expected_file_for_the_dev_set() {
    let out = std::env::temp_dir().join(format!("unread-cli-{}.jsonl", std::process::id()));
    let status = unread()
        .args(["fold", "--input"])
        .arg(repo_path("tests/data/ubuntu-irc/dev-events.jsonl"))
        .args(["--shape", "v2", "--output"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let got = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).ok();
    assert!(got == std::fs::read(repo_path("tests/data/ubuntu-irc/dev-expected.jsonl")).unwrap());
}

/// Contract v3: `--now` and `--receipts` write the v3 dev set's expected files byte for byte; `--shape v2` is
/// refused for it (it marks conversations unread).
#[test]
fn fold_writes_the_v3_files_at_their_instant() {
    let dir = std::env::temp_dir();
    let (out, receipts) = (dir.join("unread-cli-v3.jsonl"), dir.join("unread-cli-v3-receipts.jsonl"));
    // Contract v4 (issue 46) in its shape, the default; v3's files in theirs.
    for (version, shape) in [("v4", "v4"), ("v3", "v3")] {
        let events = repo_path(&format!("tests/data/ubuntu-irc/{version}-dev-events.jsonl"));
        let status = unread()
            .args(["fold", "--shape", shape, "--now", "2009-03-04T12:00:00Z", "--input"])
            .arg(&events)
            .arg("--receipts")
            .arg(&receipts)
            .arg("--output")
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success());
        let (got, got_receipts) = (std::fs::read(&out).unwrap(), std::fs::read(&receipts).unwrap());
        let expected =
            |file: &str| std::fs::read(repo_path(&format!("tests/data/ubuntu-irc/{version}-dev-{file}"))).unwrap();
        assert!(got == expected("expected.jsonl"), "{version}: output differs");
        assert!(got_receipts == expected("receipts.jsonl"), "{version}: receipts differ");
    }
    let events = repo_path("tests/data/ubuntu-irc/v3-dev-events.jsonl");
    let refused = unread().args(["fold", "--shape", "v2", "--input"]).arg(&events).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("marked unread"));
    let bad = unread().args(["fold", "--now", "yesterday", "--input"]).arg(&events).output().unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("RFC 3339"));
    std::fs::remove_file(out).ok();
    std::fs::remove_file(receipts).ok();
}

fn fold_stdin(args: &[&str], input: &str) -> std::process::Output {
    let mut child = unread()
        .args(["fold", "--input", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

const GOOD: &str = concat!(
    r#"{"type":"member.joined","event_id":"1","occurred_at":"2024-01-01T00:00:00Z","conversation_id":"c","user_id":"a"}"#,
    "\n",
    r#"{"type":"message.sent","event_id":"2","occurred_at":"2024-01-01T00:00:00Z","conversation_id":"c","seq":1,"sender_id":"b","mentions":["a"]}"#,
    "\n"
);

#[test]
fn fold_reads_stdin_and_prints_reader_shape() {
    let out = fold_stdin(&[], GOOD);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"user_id\":\"a\",\"total_unread\":1,\"total_mentions\":1,\"unread_conversations\":1,\"conversations\":{\"c\":{\"unread\":1,\"mentions\":1,\"muted\":false,\"marked_unread\":false,\"first_unread\":1,\"reactions\":0}},\"feed_unread\":0,\"broadcasts\":{},\"notifications\":{},\"total_notifications_unread\":0,\"total_notifications_unseen\":0,\"threads\":{},\"unread_threads\":0,\"thread_mentions\":0,\"total_reactions\":0,\"teams\":{}}\n"
    );
}

#[test]
fn fold_fails_on_an_invalid_line_naming_it_unless_skipping() {
    let input = format!("{GOOD}{{\"type\":\"read.ack\"\n");
    let out = fold_stdin(&[], &input);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 3") && stderr.contains("--skip-invalid"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing is printed on failure");

    let out = fold_stdin(&["--skip-invalid"], &input);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 3") && stderr.contains("1 invalid skipped"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"total_unread\":1"));
}

/// `--config FILE`: settings from TOML, under the `UNREAD_*` variables, which are under the flags; a key that is no
/// setting stops the command with its name.
#[test]
fn a_config_file_sets_what_the_environment_and_the_flags_do_not() {
    let dir = std::env::temp_dir().join(format!("unread-cli-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("unread.toml");
    std::fs::write(&file, "auth-hs256-secret = \"from-the-file\"\nauth-issuer = \"file-issuer\"\n").unwrap();
    let claims = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let token = String::from_utf8(out.stdout).unwrap();
        let payload = token.trim().split('.').nth(1).unwrap().to_owned();
        use base64::Engine;
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap();
        serde_json::from_slice::<serde_json::Value>(&json).unwrap()
    };
    let token = |extra: &[&str]| {
        let mut c = unread();
        c.args(["token", "--user", "ann", "--config"]).arg(&file).args(extra).env_remove("UNREAD_AUTH_ISSUER");
        c.env_remove("UNREAD_AUTH_HS256_SECRET");
        c
    };
    assert_eq!(claims(&mut token(&[]))["iss"], "file-issuer", "from the file");
    assert_eq!(claims(token(&[]).env("UNREAD_AUTH_ISSUER", "env-issuer"))["iss"], "env-issuer", "env over file");
    let flag = claims(token(&["--auth-issuer", "flag-issuer"]).env("UNREAD_AUTH_ISSUER", "env-issuer"));
    assert_eq!(flag["iss"], "flag-issuer", "flag over env");
    std::fs::write(&file, "auth-issuer = \"x\"\nflush-intervall = \"1s\"\n").unwrap();
    let out = token(&[]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("\"flush-intervall\" is no setting"), "{stderr}");
    std::fs::remove_dir_all(dir).ok();
}

/// `--log-format json`: every log line is one JSON object (timestamp, level, target, fields with the message); the
/// one line that says why the process stopped stays plain text, after them.
#[test]
fn the_log_is_json_lines_with_log_format_json() {
    // An address the machine does not have: the API refuses to start right after its first warning.
    let out = unread()
        .args(["--log-format", "json", "run", "--roles", "api", "--insecure-no-auth", "--listen", "192.0.2.1:8080"])
        .env_remove("UNREAD_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let (log, last) = stderr.trim_end().rsplit_once('\n').expect("a log line, then the reason");
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string() && v["fields"]["message"].is_string(), "{v}");
    }
    assert!(log.contains("--insecure-no-auth"), "{stderr}");
    assert!(last.starts_with("unread: binding the read API to 192.0.2.1:8080"), "{last}");
}
