//! Asking the read API over HTTP (ureq) and comparing its answers with expected views.

use std::sync::OnceLock;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use unread::core::contract::UserView;

use super::Ns;

/// Everything but RFC 3986's unreserved characters is escaped in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Percent-encodes a path segment (everything but unreserved characters).
pub fn encode(id: &str) -> String {
    utf8_percent_encode(id, SEGMENT).to_string()
}

fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build();
        config.into()
    })
}

/// The HS256 secret every test service verifies tokens with (`UNREAD_AUTH_HS256_SECRET`, set by [`super::Ns`]).
pub const TEST_SECRET: &str = "unread-integration-tests-secret";

/// The auth settings of the test services.
pub fn test_auth() -> unread::auth::AuthOptions {
    unread::auth::AuthOptions {
        hs256_secret: Some(TEST_SECRET.to_owned()),
        service_scope: "unread:any".to_owned(),
        leeway: Duration::from_secs(60),
        ..Default::default()
    }
}

/// A token of the test secret: for `user`, or a service token.
pub fn token(user: &str, service: bool) -> String {
    unread::auth::mint(&test_auth(), user, service, Duration::from_secs(3600)).unwrap()
}

/// The service token the helpers below send.
fn service_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| token("integration-tests", true))
}

/// A GET on loopback with `token` as bearer (none: no header): (status, body); `None` when nothing answers.
pub fn http_get_as(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut request = agent().get(&format!("http://127.0.0.1:{port}{path}"));
    if let Some(t) = token {
        request = request.header("authorization", &format!("Bearer {t}"));
    }
    let mut response = request.call().ok()?;
    let body = response.body_mut().read_to_string().ok()?;
    Some((response.status().as_u16(), body))
}

/// A POST of a JSON body on loopback with `token` as bearer: (status, body).
pub fn http_post_as(port: u16, path: &str, token: Option<&str>, body: &serde_json::Value) -> Option<(u16, String)> {
    let mut request =
        agent().post(&format!("http://127.0.0.1:{port}{path}")).header("content-type", "application/json");
    if let Some(t) = token {
        request = request.header("authorization", &format!("Bearer {t}"));
    }
    let mut response = request.send(body.to_string()).ok()?;
    let text = response.body_mut().read_to_string().ok()?;
    Some((response.status().as_u16(), text))
}

/// A GET on loopback with the tests' service token: (status, header lines `name: value` lower-cased, body);
/// `None` when nothing answers.
pub fn http_get_full(port: u16, path: &str) -> Option<(u16, Vec<String>, String)> {
    let url = format!("http://127.0.0.1:{port}{path}");
    let mut response = agent().get(&url).header("authorization", &format!("Bearer {}", service_token())).call().ok()?;
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| format!("{}: {}", k.as_str(), v.to_str().unwrap_or_default()).to_ascii_lowercase())
        .collect();
    let body = response.body_mut().read_to_string().ok()?;
    Some((response.status().as_u16(), headers, body))
}

/// A GET on loopback: (status, body); `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_full(port, path).map(|(code, _, body)| (code, body))
}

/// Asks the API for every expected user; returns how many were asked and the mismatches.
pub fn mismatches(port: u16, expected: &[UserView]) -> (usize, Vec<String>) {
    mismatches_at(port, expected, "")
}

/// [`mismatches`] with a query string (`"?now=…"`, or `""`) on every read.
pub fn mismatches_at(port: u16, expected: &[UserView], query: &str) -> (usize, Vec<String>) {
    let mut bad = Vec::new();
    let shape = super::shape_of(expected);
    for e in expected {
        let path = format!("/v1/users/{}/unread{query}", encode(&e.user_id));
        let (code, body) = http_get(port, &path).expect("the admin address answers");
        let got: Option<UserView> = serde_json::from_str::<UserView>(&body).ok().map(|v| shape.project(&v));
        if code != 200 || got.as_ref() != Some(e) {
            bad.push(format!("{}: HTTP {code} {body}", e.user_id));
        }
    }
    (expected.len(), bad)
}

/// Every user of the dev set's expected state is served exactly.
pub fn assert_exact(port: u16) {
    assert_matches(port, &super::dev_expected());
}

/// Every user of `expected` (at least the dev set's 1,565) is served exactly.
pub fn assert_matches(port: u16, expected: &[UserView]) {
    assert_matches_at(port, expected, "");
}

/// [`assert_matches`] with a query string (`"?now=…"`) on every read.
pub fn assert_matches_at(port: u16, expected: &[UserView], query: &str) {
    let (n, bad) = mismatches_at(port, expected, query);
    assert!(n >= 1565, "{n} users expected");
    assert!(bad.is_empty(), "{} of {n} users differ, e.g. {:#?}", bad.len(), &bad[..bad.len().min(5)]);
}

/// The value of a metric line `name value` (a counter's or gauge's, without labels) at the admin address on `port`.
pub fn metric(port: u16, name: &str) -> f64 {
    let text = http_get(port, "/metrics").expect("the admin address answers").1;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
        .parse()
        .unwrap()
}

/// The sum of every sample of metric `name` (each label set's) at the admin address on `port`; 0 when it has none yet.
pub fn metric_sum(port: u16, name: &str) -> f64 {
    let text = http_get(port, "/metrics").expect("the admin address answers").1;
    let samples = text.lines().filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])));
    samples.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

#[test]
fn segments_escape_all_but_unreserved_characters() {
    assert_eq!(encode("a/b %c{d}~x-y_z.é"), "a%2Fb%20%25c%7Bd%7D~x-y_z.%C3%A9");
}

/// `events` produced, the service (started with `flags`) SIGKILLed while it folds them and started again: every user
/// of `expected` exact (read with `query`, `"?now=…"` or `""`); then `replay --into replayed` is complete, and `verify --against` it and
/// `verify` inside it find nothing differing.
pub fn sigkill_mid_flow_then_replay(ns: &Ns, events: &str, expected: &[UserView], query: &str, flags: &[&str]) {
    ns.ok(&["produce", events]);
    let initial = ns.total_lag();
    let svc = ns.start(&[&["--flush-events", "2000"], flags].concat());
    let at_kill = super::wait_for_progress(ns, initial);
    svc.kill();
    assert!(at_kill > 0, "the service had already finished when killed; the test proves nothing");
    let svc = ns.start(flags);
    // The v4 full set's catch-up in a debug build, beside other tests, takes about a minute.
    ns.ok(&["lag", "--wait", "5m"]);
    assert_matches_at(svc.port, expected, query);
    let replayed = "replayed";
    let out = ns.ok(&["replay", "--into", replayed]);
    assert!(out.contains("complete"), "{out}");
    let out = ns.ok(&["verify", "--against", replayed]);
    assert!(out.contains("differing: 0"), "{out}");
    assert!(ns.ok(&["verify", "--namespace", replayed]).contains("differing: 0"));
    svc.stop();
}

/// Redis loses every key of `ns`: an API-only instance answers each user of `sample` from the checkpoint
/// (`x-unread-source: checkpoint`, exact, never zeros), then `unread projection rebuild` makes every user of
/// `expected` exact again in Redis.
pub fn lose_redis_then_rebuild(ns: &Ns, expected: &[UserView], sample: &[&UserView]) {
    lose_redis_then_rebuild_at(ns, expected, sample, "");
}

/// [`lose_redis_then_rebuild`] with a query string (`"?now=…"`) on every read.
pub fn lose_redis_then_rebuild_at(ns: &Ns, expected: &[UserView], sample: &[&UserView], query: &str) {
    let api = ns.start(&["--roles", "api"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let redis = unread::projection::redis::RedisProjection::connect(&ns.redis_url, "").await.unwrap();
        unread::namespace::delete_matching(&redis, &format!("{}:*", ns.name)).await.unwrap()
    });
    for e in sample {
        let (code, headers, body) =
            http_get_full(api.port, &format!("/v1/users/{}/unread{query}", encode(&e.user_id))).unwrap();
        assert!(code == 200 && headers.contains(&"x-unread-source: checkpoint".to_owned()), "{body}");
        let shape = super::shape_of(std::slice::from_ref(*e));
        assert_eq!(&shape.project(&serde_json::from_str::<UserView>(&body).unwrap()), *e);
    }
    ns.ok(&["projection", "rebuild"]);
    let (n, bad) = mismatches_at(api.port, expected, query);
    assert!(
        bad.is_empty(),
        "{} of {n} users differ after the rebuild, e.g. {:#?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    api.stop();
}
