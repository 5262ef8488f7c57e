//! The push stream and the write gateway, through the real service: WebSocket (`unread watch`) and SSE clients
//! converge to the expected state while the dev set is produced, on an instance that runs no fold; reconnecting
//! with `since`; a message applied twice; every write route publishes its event with the user as key and changes the counts.

use std::io::BufRead;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use unread::core::changes::{apply, Changes};
use unread::core::contract::{ConversationView, UserView};

use crate::support::*;

/// Users of the v2 dev set with chat, feed, broadcast and notification counts between them.
const SAMPLE: [&str; 4] = ["aadi", "[[mandrix]]", "_icebreaker_", "epod"];

/// A client's view of a stream: the messages, in order, as JSON.
pub(crate) struct Follower {
    messages: mpsc::Receiver<Value>,
    child: Option<Child>,
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            c.kill().ok();
            c.wait().ok();
        }
    }
}

/// `unread watch` (a WebSocket client) for `user` on `port`, with `extra` arguments.
fn watch(ns: &Ns, port: u16, user: &str, extra: &[&str]) -> Follower {
    let api = format!("http://127.0.0.1:{port}");
    let mut child = ns
        .cmd(&[&["watch", "--user", user, "--api", &api][..], extra].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, messages) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(serde_json::from_str(&line).expect("watch prints JSON lines")).is_err() {
                return;
            }
        }
    });
    Follower { messages, child: Some(child) }
}

/// An SSE client for `user` on `port` (the tests' service token), reading in a thread.
pub(crate) fn sse(port: u16, user: &str) -> Follower {
    let url = format!("http://127.0.0.1:{port}/v1/users/{}/stream", encode(user));
    let token = token("sse-client", true);
    let response = ureq::get(&url)
        .header("accept", "text/event-stream")
        .header("authorization", &format!("Bearer {token}"))
        .call()
        .expect("the stream answers");
    assert_eq!(response.status().as_u16(), 200);
    let (tx, messages) = mpsc::channel();
    std::thread::spawn(move || {
        let reader = std::io::BufReader::new(response.into_body().into_reader());
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if let Some(data) = line.strip_prefix("data: ") {
                if tx.send(serde_json::from_str(data).expect("SSE data is JSON")).is_err() {
                    return;
                }
            }
        }
    });
    Follower { messages, child: None }
}

impl Follower {
    /// The next message, waiting at most `wait`.
    pub(crate) fn next_message(&self, wait: Duration) -> Option<Value> {
        self.messages.recv_timeout(wait).ok()
    }
}

/// What a client does with a message: a `state` replaces, `changes` of a newer version apply, older ones are
/// dropped. Returns the version applied.
fn apply_message(view: &mut UserView, version: &mut u64, m: &Value) {
    let v = m["version"].as_u64().expect("every message has a version");
    match m["type"].as_str() {
        Some("state") => {
            *view = serde_json::from_value(m["state"].clone()).unwrap();
            *version = v;
        }
        Some("changes") if v > *version => {
            apply(view, &serde_json::from_value::<Changes>(m.clone()).unwrap());
            *version = v;
        }
        Some("changes") => {}
        other => panic!("unknown message type {other:?}: {m}"),
    }
}

/// Applies the follower's messages until its view equals `expected` (60 s at most). Every message is applied
/// twice, as a client would after a duplicate delivery: the second changes nothing.
pub(crate) fn converge(f: &Follower, expected: &UserView) {
    let (mut view, mut version) = (UserView::default(), 0);
    let schema = crate::schemas::stream_validator();
    let deadline = Instant::now() + Duration::from_secs(60);
    let shape = shape_of(std::slice::from_ref(expected));
    while shape.project(&view) != *expected {
        let left = deadline.saturating_duration_since(Instant::now());
        match f.messages.recv_timeout(left) {
            Ok(m) => {
                crate::schemas::assert_stream_message(&schema, &m);
                apply_message(&mut view, &mut version, &m);
                let once = view.clone();
                apply_message(&mut view, &mut version, &m);
                assert_eq!(view, once, "a message applied twice");
            }
            Err(_) => panic!("{}: stream state {view:?}\nexpected {expected:?}", expected.user_id),
        }
    }
}

fn expected_of(user: &str) -> UserView {
    v2_dev_expected().into_iter().find(|v| v.user_id == user).expect("a dev-set user")
}

#[test]
fn streams_converge_on_an_instance_without_the_fold_and_resume_with_since() {
    let Some(stack) = stack("streams_converge_on_an_instance_without_the_fold_and_resume_with_since") else { return };
    let ns = Ns::new(&stack, "push");
    let stages = ns.start(&[]);
    let api_only = ns.start(&["--roles", "api"]);
    // Connected before any event: each gets an empty state, then what changes.
    let ws: Vec<Follower> =
        SAMPLE.iter().map(|u| watch(&ns, api_only.port, u, &["--token", &token(u, false)])).collect();
    let events: Vec<Follower> = SAMPLE.iter().map(|u| sse(stages.port, u)).collect();
    ns.ok(&["produce", &v2_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    for ((user, w), e) in SAMPLE.iter().zip(&ws).zip(&events) {
        let expected = expected_of(user);
        converge(w, &expected);
        converge(e, &expected);
    }
    // Reconnect with an old version: the whole state; with the current one: one empty `changes`. (The current
    // version is the state's, not the last one a follower applied: a write that changes nothing the user sees
    // bumps the version and sends nothing.)
    let api = format!("http://127.0.0.1:{}", api_only.port);
    for user in SAMPLE {
        let watch_once = |since: &str| {
            let out = ns.ok(&[
                "watch",
                "--user",
                user,
                "--api",
                &api,
                "--token",
                &token(user, false),
                "--since",
                since,
                "--count",
                "1",
            ]);
            serde_json::from_str::<Value>(out.trim()).unwrap()
        };
        let first = watch_once("1");
        assert_eq!(first["type"], "state");
        let state = serde_json::from_value::<UserView>(first["state"].clone()).unwrap();
        let expected = expected_of(user);
        assert_eq!(shape_of(std::slice::from_ref(&expected)).project(&state), expected);
        let version = first["version"].as_u64().unwrap();
        assert_eq!(watch_once(&version.to_string()), json!({"type": "changes", "version": version}), "{user}");
    }
    drop((ws, events));
    api_only.stop();
    stages.stop();
}

/// Every record of `topic`: (key, value as JSON).
fn records(brokers: &str, topic: &str) -> Vec<(String, Value)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Message, Offset, TopicPartitionList};
    let c: BaseConsumer = unread::kafka::reader(brokers, "it-gateway").create().unwrap();
    let (mut tpl, mut left) = (TopicPartitionList::new(), 0);
    for p in 0..unread::kafka::partition_count(&c, topic).unwrap() {
        let (low, high) = c.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap();
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
        left += high - low;
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (out.len() as i64) < left && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_secs(1)) {
            let key = String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap();
            out.push((key, serde_json::from_slice(m.payload().unwrap_or_default()).unwrap_or(Value::Null)));
        }
    }
    out
}

/// A POST with `token`, an optional JSON body and an optional `Idempotency-Key`: (status, body, replayed).
fn post(port: u16, path: &str, token: &str, body: Option<&Value>, key: Option<&str>) -> (u16, Value, bool) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut request =
        agent.post(&format!("http://127.0.0.1:{port}{path}")).header("authorization", &format!("Bearer {token}"));
    if let Some(k) = key {
        request = request.header("idempotency-key", k);
    }
    let mut response = match body {
        Some(b) => request.header("content-type", "application/json").send(b.to_string()),
        None => request.send_empty(),
    }
    .unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let text = response.body_mut().read_to_string().unwrap();
    (response.status().as_u16(), serde_json::from_str(&text).unwrap_or(Value::Null), replayed)
}

#[test]
fn every_write_route_publishes_its_event_keyed_by_the_user_and_the_counts_change() {
    let Some(stack) = stack("every_write_route_publishes_its_event_keyed_by_the_user_and_the_counts_change") else {
        return;
    };
    let ns = Ns::new(&stack, "gateway");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &v2_dev_events()]);
    let like = std::env::temp_dir().join(format!("{}-like.jsonl", ns.name));
    std::fs::write(&like, r#"{"type":"notification.created","event_id":"like-1","occurred_at":"2026-11-22T00:00:00Z","user_id":"aadi","notification_id":"gw-like-1","category":"like"}"#).unwrap();
    ns.ok(&["produce", like.to_str().unwrap()]);
    ns.ok(&["lag", "--wait", "2m"]);
    let (port, aadi) = (svc.port, token("aadi", false));
    let base = "/v1/users/aadi";
    let conv = format!("{base}/conversations/ubuntu.2009-10-01_17");
    let writes: Vec<(String, Option<Value>, &str)> = vec![
        // Contract v3: every unmuted conversation with unread, acked at its newest message (one event each).
        (format!("{base}/read-all"), None, "read.ack"),
        (format!("{conv}/read"), Some(json!({"read_seq": 1_000_000})), "read.ack"),
        (format!("{conv}/mute"), Some(json!({"muted": true})), "conversation.muted"),
        (format!("{base}/notifications/read"), Some(json!({"category": "mention"})), "notifications.read"),
        (format!("{base}/notifications/seen"), None, "notifications.seen"),
        (format!("{base}/notifications/gw-like-1/read"), None, "notification.read"),
        (format!("{base}/broadcasts/system/read"), None, "broadcast.read"),
        (format!("{base}/feed/read"), None, "read.ack"),
        // Found by Schemathesis (issue 24): JSON null is the absent body; a seq may be written 1000000.0.
        (format!("{base}/broadcasts/system/read"), Some(Value::Null), "broadcast.read"),
        (format!("{conv}/read"), Some(json!({"read_seq": 1_000_000.0})), "read.ack"),
        // Contract v3: unread from here, unmark, mark (the last one stands).
        (format!("{conv}/mark-unread"), Some(json!({"from_seq": 5})), "conversation.marked_unread"),
        (format!("{conv}/mark-unread"), Some(json!({"marked": false})), "conversation.marked_unread"),
        (format!("{conv}/mark-unread"), None, "conversation.marked_unread"),
    ];
    let mut published = Vec::new();
    for (path, body, kind) in &writes {
        let (code, answer, _) = post(port, path, &aadi, body.as_ref(), None);
        assert_eq!(code, 202, "{path}: {answer}");
        let ids = answer["event_ids"].as_array().unwrap().clone();
        assert!(!ids.is_empty(), "{path}: {answer}");
        published.extend(ids.into_iter().map(|id| (id.as_str().unwrap().to_owned(), *kind)));
    }
    // An idempotency key repeated publishes once and answers the same ids.
    let unmute = Some(json!({"muted": false}));
    let first = post(port, &format!("{conv}/mute"), &aadi, unmute.as_ref(), Some("retry-1"));
    let again = post(port, &format!("{conv}/mute"), &aadi, unmute.as_ref(), Some("retry-1"));
    assert_eq!((first.0, again.0, first.2, again.2), (202, 202, false, true));
    assert_eq!(first.1, again.1);
    // A key with a tab is refused, as the document says (Schemathesis found it accepted).
    let (code, answer, _) = post(port, &format!("{conv}/mute"), &aadi, unmute.as_ref(), Some("a\tb"));
    assert_eq!(code, 400, "{answer}");
    published.push((first.1["event_ids"][0].as_str().unwrap().to_owned(), "conversation.muted"));
    // Bad requests: JSON 400s and 403s, nothing published.
    for (path, body, token, status) in [
        (format!("{conv}/read"), Some(json!({"read_seq": "x"})), aadi.clone(), 400),
        // Above 2^53 (the decoder would dead-letter the event), a fraction, an empty category: refused here.
        (format!("{conv}/read"), Some(json!({"read_seq": 9_007_199_254_740_993_u64})), aadi.clone(), 400),
        (format!("{conv}/read"), Some(json!({"read_seq": 1.5})), aadi.clone(), 400),
        (format!("{base}/notifications/read"), Some(json!({"category": ""})), aadi.clone(), 400),
        (format!("{conv}/mute"), None, aadi.clone(), 400),
        (format!("{base}/conversations/%01/read"), Some(json!({"read_seq": 1})), aadi.clone(), 400),
        (format!("{conv}/read"), Some(json!({"read_seq": 1})), token("epod", false), 403),
        // Contract v3's routes: from_seq only with marked true, and at least 1; another user's token; no token.
        (format!("{conv}/mark-unread"), Some(json!({"marked": false, "from_seq": 3})), aadi.clone(), 400),
        (format!("{conv}/mark-unread"), Some(json!({"from_seq": 0})), aadi.clone(), 400),
        (format!("{conv}/mark-unread"), Some(json!({"marked": "yes"})), aadi.clone(), 400),
        (format!("{conv}/mark-unread"), None, token("epod", false), 403),
        (format!("{base}/read-all"), None, token("epod", false), 403),
        (format!("{conv}/mark-unread"), None, String::new(), 401),
        (format!("{base}/read-all"), None, String::new(), 401),
    ] {
        let (code, answer, _) = post(port, &path, &token, body.as_ref(), None);
        assert_eq!(code, status, "{path}: {answer}");
        assert!(answer["error"]["code"].is_string(), "{answer}");
    }
    ns.ok(&["lag", "--wait", "2m"]);
    let topic = format!("{}.unread.user-events", ns.name);
    let on_topic = records(&stack.brokers, &topic);
    for (id, kind) in &published {
        let found: Vec<_> = on_topic.iter().filter(|(_, v)| v["event_id"] == id.as_str()).collect();
        assert_eq!(found.len(), 1, "{id} published once");
        assert_eq!((found[0].0.as_str(), found[0].1["type"].as_str()), ("aadi", Some(*kind)), "{id}");
    }
    let (_, body) = http_get(port, "/v1/users/aadi/unread").unwrap();
    let got: UserView = serde_json::from_str(&body).unwrap();
    let c = got.conversations["ubuntu.2009-10-01_17"];
    assert_eq!((c.unread, c.muted, got.total_unread, got.feed_unread), (0, false, 0, 0), "{body}");
    // Marked unread (v3): it counts as an unread conversation with nothing unread, and read-all left no other.
    assert!(c.marked_unread && got.unread_conversations == 1, "{body}");
    assert_eq!((got.notifications["mention"].unread, got.total_notifications_unseen), (0, 0), "{body}");
    assert_eq!((got.notifications["like"].unread, got.broadcasts["system"].unread), (0, 0), "{body}");
    svc.stop();
}

/// Reads `user`'s conversation `cid` from Redis over HTTP until `marked_unread` is `want` (up to 20 s).
fn wait_marked(port: u16, user: &str, cid: &str, want: bool) {
    wait_conversation(port, user, cid, &format!("marked_unread {want}"), |c| c.marked_unread == want);
}

/// Reads `user`'s conversation `cid` from Redis over HTTP until its `unread` is `want` (up to 20 s).
fn wait_unread(port: u16, user: &str, cid: &str, want: u64) {
    wait_conversation(port, user, cid, &format!("unread {want}"), |c| c.unread == want);
}

/// Reads `user`'s conversation `cid` from Redis over HTTP until `done` holds of it (up to 20 s; `what` names it).
fn wait_conversation(port: u16, user: &str, cid: &str, what: &str, done: impl Fn(&ConversationView) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, body) = http_get(port, &format!("/v1/users/{user}/unread")).unwrap();
        let view: UserView = serde_json::from_str(&body).unwrap();
        if view.conversations.get(cid).is_some_and(&done) {
            return;
        }
        assert!(Instant::now() < deadline, "{cid} is not at {what} after 20 s: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The read routes without a `read_seq` ack what Redis shows, not only what the checkpoint holds, which trails it
/// by a commit: a conversation marked unread a moment ago, with nothing unread, is read all the same (its mark
/// cleared) by the read route and by read-all (the inbox test found this under load), and so is a message that
/// arrived a moment ago (the checkpoint would have acked the one before it and left it unread).
#[test]
fn reading_right_after_a_change_acks_what_redis_shows_before_the_checkpoint_has_it() {
    let test = "reading_right_after_a_change_acks_what_redis_shows_before_the_checkpoint_has_it";
    let Some(stack) = stack(test) else { return };
    let ns = Ns::new(&stack, "markread");
    let svc = ns.start(&["--flush-interval", "1s"]);
    ns.ok(&["produce", &v2_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    let (aadi, cid) = (token("aadi", false), "ubuntu.2009-10-01_17");
    let read = format!("/v1/users/aadi/conversations/{cid}/read");
    assert_eq!(post(svc.port, &read, &aadi, None, None).0, 202);
    ns.ok(&["lag", "--wait", "2m"]);
    std::thread::sleep(Duration::from_secs(2)); // the checkpoint holds the read: nothing unread there
                                                // A checkpoint every 60 s from now on: the mark reaches Redis at once and the checkpoint a minute later.
    svc.stop();
    let svc = ns.start(&["--flush-interval", "60s"]);
    let mark = format!("/v1/users/aadi/conversations/{cid}/mark-unread");
    assert_eq!(post(svc.port, &mark, &aadi, None, None).0, 202);
    wait_marked(svc.port, "aadi", cid, true);
    let (code, answer, _) = post(svc.port, &read, &aadi, None, None);
    assert_eq!(code, 202, "{answer}");
    wait_marked(svc.port, "aadi", cid, false);
    // The same with "mark all read".
    assert_eq!(post(svc.port, &mark, &aadi, None, None).0, 202);
    wait_marked(svc.port, "aadi", cid, true);
    let (code, answer, _) = post(svc.port, "/v1/users/aadi/read-all", &aadi, None, None);
    assert_eq!(code, 202, "{answer}");
    wait_marked(svc.port, "aadi", cid, false);
    // A message now: Redis shows it at once, the checkpoint a minute later. Reading the conversation, then (after
    // another) reading all, acks it.
    for (seq, route) in [(900_000_001u64, read.as_str()), (900_000_002, "/v1/users/aadi/read-all")] {
        let sent = json!({"type": "message.sent", "event_id": format!("late-{seq}"), "occurred_at":
            "2026-11-26T00:00:00Z", "conversation_id": cid, "seq": seq, "sender_id": "someone", "mentions": []});
        produce_lines(&ns, &format!("late-{seq}"), format!("{sent}\n"));
        wait_unread(svc.port, "aadi", cid, 1);
        let (code, answer, _) = post(svc.port, route, &aadi, None, None);
        assert_eq!(code, 202, "{answer}");
        wait_unread(svc.port, "aadi", cid, 0);
    }
    svc.stop();
}

/// What a WebSocket client of the stream saw: its messages until the server closed it, the close frame's code, and
/// how long after connecting it closed (`None`: still open at `until`).
struct Seen {
    messages: Vec<Value>,
    code: Option<u16>,
    closed_after: Option<Duration>,
}

/// Opens a WebSocket stream of `user` with `token`; every `refresh` (if any) sends `{"type":"refresh"}` with the
/// token `fresh()` gives, until `refresh_for` has passed; reads until the server closes or `until` has passed.
async fn ws_session(
    port: u16,
    user: &str,
    token: &str,
    refresh: Option<(Duration, Duration, &(dyn Fn() -> String + Sync))>,
    until: Duration,
) -> Seen {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;
    let url = format!("ws://127.0.0.1:{port}/v1/users/{}/stream", encode(user));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.expect("the stream opens");
    let started = tokio::time::Instant::now();
    let mut seen = Seen { messages: Vec::new(), code: None, closed_after: None };
    let every = refresh.map_or(Duration::from_secs(3600), |r| r.0);
    let mut tick = tokio::time::interval_at(started + every, every);
    loop {
        let message = tokio::select! {
            m = socket.next() => m,
            _ = tick.tick(), if refresh.is_some_and(|r| started.elapsed() < r.1) => {
                let fresh = json!({"type": "refresh", "token": (refresh.unwrap().2)()});
                socket.send(Message::Text(fresh.to_string().into())).await.unwrap();
                continue;
            }
            _ = tokio::time::sleep_until(started + until) => return seen,
        };
        match message {
            Some(Ok(Message::Text(text))) => seen.messages.push(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => {
                seen.code = frame.map(|f| u16::from(f.code));
                seen.closed_after = Some(started.elapsed());
                return seen;
            }
            Some(Ok(_)) => {}
            None | Some(Err(_)) => {
                seen.closed_after = Some(started.elapsed());
                return seen;
            }
        }
    }
}

/// The `type` of each message, and the `reason` of a `closing` one.
fn kinds(seen: &Seen) -> Vec<String> {
    let kind = |m: &Value| match m["type"].as_str().unwrap() {
        "closing" => format!("closing:{}", m["reason"].as_str().unwrap()),
        other => other.to_owned(),
    };
    seen.messages.iter().map(kind).collect()
}

#[test]
fn a_stream_ends_when_its_token_expires_unless_refreshed_over_the_socket() {
    let Some(stack) = stack("a_stream_ends_when_its_token_expires_unless_refreshed_over_the_socket") else { return };
    let ns = Ns::new(&stack, "tokens");
    let svc = ns.start_with_env(&[], &[("UNREAD_AUTH_LEEWAY", "1s")]);
    ns.ok(&["produce", &dev_events()]);
    ns.ok(&["lag", "--wait", "120"]);
    let (port, user, ttl) = (svc.port, "epod", Duration::from_secs(2));
    let mint = |who: &str| unread::auth::mint(&test_auth(), who, false, ttl).unwrap();
    let fresh = || mint(user);
    let other = || mint("bob");
    let garbage = || "not-a-jwt".to_owned();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let tokens: Vec<String> = (0..4).map(|_| mint(user)).collect();
    let (plain, refreshed, forbidden, invalid) = rt.block_on(async {
        let (window, half) = (Duration::from_secs(15), Duration::from_millis(500));
        tokio::join!(
            ws_session(port, user, &tokens[0], None, window),
            // Refreshed every second for 6 s, then left to expire.
            ws_session(port, user, &tokens[1], Some((Duration::from_secs(1), Duration::from_secs(6), &fresh)), window),
            ws_session(port, user, &tokens[2], Some((half, window, &other)), window),
            ws_session(port, user, &tokens[3], Some((half, window, &garbage)), window),
        )
    });
    // exp is whole seconds (up to 1 s sooner than the ttl), then 1 s of leeway: the end comes 1 to 3 s after opening.
    let in_time =
        |s: &Seen, from: f64, to: f64| s.closed_after.is_some_and(|d| (from..to + 1.0).contains(&d.as_secs_f64()));
    // Every message the four sockets got, and the refreshes they sent, are the stream schema's.
    let schema = crate::schemas::stream_validator();
    for m in [&plain, &refreshed, &forbidden, &invalid].iter().flat_map(|s| &s.messages) {
        crate::schemas::assert_stream_message(&schema, m);
    }
    crate::schemas::assert_stream_message(&schema, &json!({"type": "refresh", "token": fresh()}));
    assert_eq!(kinds(&plain), ["state", "closing:token_expired"]);
    assert!(plain.code == Some(4001) && in_time(&plain, 1.0, 3.0), "{:?} {:?}", plain.code, plain.closed_after);
    let k = kinds(&refreshed);
    assert!(
        k.iter().filter(|k| *k == "refreshed").count() >= 5 && k.last().unwrap() == "closing:token_expired",
        "{k:?}"
    );
    assert!(refreshed.code == Some(4001) && in_time(&refreshed, 6.0, 9.0), "{:?}", refreshed.closed_after);
    assert_eq!(kinds(&forbidden), ["state", "closing:forbidden"]);
    assert!(forbidden.code == Some(4003) && in_time(&forbidden, 0.4, 0.6), "{:?}", forbidden.closed_after);
    assert_eq!(kinds(&invalid), ["state", "closing:token_invalid"]);
    assert!(invalid.code == Some(4001) && in_time(&invalid, 0.4, 0.6), "{:?}", invalid.closed_after);

    // SSE cannot take a fresh token: it ends with the same last message.
    let url = format!("http://127.0.0.1:{port}/v1/users/{user}/stream");
    let started = Instant::now();
    let response = ureq::get(&url)
        .header("accept", "text/event-stream")
        .header("authorization", &format!("Bearer {}", mint(user)))
        .call()
        .unwrap();
    let body = response.into_body().read_to_string().unwrap(); // returns when the server ends the stream
    let elapsed = started.elapsed().as_secs_f64();
    let data: Vec<Value> =
        body.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(data.last().unwrap(), &json!({"type": "closing", "reason": "token_expired"}), "{body}");
    data.iter().for_each(|m| crate::schemas::assert_stream_message(&schema, m));
    assert!((1.0..4.0).contains(&elapsed), "the SSE stream ended after {elapsed} s");
    svc.stop();
    ns.cleanup();
}

#[test]
fn unread_watch_refreshes_a_minted_token_and_stops_on_an_expired_given_one() {
    let Some(stack) = stack("unread_watch_refreshes_a_minted_token_and_stops_on_an_expired_given_one") else { return };
    let ns = Ns::new(&stack, "watchtok");
    let svc = ns.start_with_env(&[], &[("UNREAD_AUTH_LEEWAY", "1s")]);
    let api = format!("http://127.0.0.1:{}", svc.port);
    // A minted token of 2 s, refreshed over the socket: one connection for 8 s, never ended for its token.
    let mut minted = ns
        .cmd(&["watch", "--user", "epod", "--api", &api, "--token-ttl", "2s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(8));
    minted.kill().unwrap();
    let out = minted.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with(r#"{"type":"state""#), "{stdout}");
    assert!(!stderr.contains("reconnecting"), "the minted token was refreshed, not the connection: {stderr}");
    // A given token cannot be refreshed: watch stops when it expires, saying why.
    let token = unread::auth::mint(&test_auth(), "epod", false, Duration::from_secs(2)).unwrap();
    let started = Instant::now();
    let given = ns.cmd(&["watch", "--user", "epod", "--api", &api, "--token", &token]).output().unwrap();
    let stderr = String::from_utf8_lossy(&given.stderr);
    assert!(!given.status.success() && stderr.contains("token_expired; pass a fresh --token"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(6), "{:?}", started.elapsed());
    svc.stop();
    ns.cleanup();
}
