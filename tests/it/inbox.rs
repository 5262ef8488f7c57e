//! The web inbox, as a person would use it: a real headless Chromium, driven through chromedriver (WebDriver),
//! opens the page, sees the badge, sees it change when a message for the user is produced to Kafka, clicks the
//! conversation and sees it clear. A screenshot is saved under `target/` when it fails.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

use crate::support::*;

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// Starts chromedriver, or `None` (with a note) when it is not installed and the stack is not required.
fn chromedriver() -> Option<Driver> {
    let port = free_port();
    let child = match Command::new("chromedriver").arg(format!("--port={port}")).stdout(Stdio::null()).spawn() {
        Ok(c) => c,
        Err(e) if std::env::var_os("UNREAD_REQUIRE_STACK").is_none() => {
            eprintln!("skipping the browser test: chromedriver: {e} (scripts/stack up installs it)");
            return None;
        }
        Err(e) => panic!("chromedriver: {e} (scripts/stack up installs chromium and chromium-driver)"),
    };
    let driver = Driver { child, port };
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get_as(port, "/status", None).is_none() {
        assert!(Instant::now() < deadline, "chromedriver did not answer within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(driver)
}

/// A headless Chromium session.
async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    let args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1000,900"];
    caps.insert("goog:chromeOptions".into(), serde_json::json!({ "args": args }));
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session")
}

/// Waits (20 s at most) until the element at `css` has `attr` = `want`.
async fn wait_attr(c: &Client, css: &str, attr: &str, want: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < deadline {
        if let Ok(e) = c.find(Locator::Css(css)).await {
            last = e.attr(attr).await.ok().flatten();
            if last.as_deref() == Some(want) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{css} [{attr}] is {last:?}, not {want:?}, after 20 s"))
}

/// A message in aadi's conversation from someone else, with a seq above every seq of the dev set.
fn message_for_aadi(ns: &Ns) -> String {
    let path = std::env::temp_dir().join(format!("{}-message.jsonl", ns.name));
    let event = r#"{"type":"message.sent","event_id":"inbox-1","occurred_at":"2026-11-22T00:00:00Z","conversation_id":"ubuntu.2009-10-01_17","seq":1000000,"sender_id":"someone-else","mentions":["aadi"]}"#;
    std::fs::write(&path, event).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The steps a person takes (the badge live, a click clears it, the feed, marking unread and clearing the mark two
/// ways); `Err` says what they did not see.
async fn use_the_inbox(c: &Client, ns: &Ns<'_>, svc: &Service) -> Result<(), String> {
    let port = svc.port;
    let url = format!("http://127.0.0.1:{port}/#user=aadi&token={}", token("aadi", false));
    c.goto(&url).await.map_err(|e| e.to_string())?;
    let conversation = r#"button[data-conversation="ubuntu.2009-10-01_17"]"#;
    wait_attr(c, "#badge", "data-count", "276").await?;
    wait_attr(c, "#feed", "data-count", "4").await?;
    // The keyboard focus on the conversation survives the live update the message brings.
    let focused = "return document.activeElement && document.activeElement.dataset.conversation || null";
    c.execute(&format!("document.querySelector('{conversation}').focus()"), vec![]).await.map_err(|e| e.to_string())?;
    ns.ok(&["produce", &message_for_aadi(ns)]);
    wait_attr(c, "#badge", "data-count", "277").await?;
    let still = c.execute(focused, vec![]).await.map_err(|e| e.to_string())?;
    if still != serde_json::json!("ubuntu.2009-10-01_17") {
        return Err(format!("the focus moved to {still} at a live update"));
    }
    let label = c.find(Locator::Css(conversation)).await.map_err(|e| e.to_string())?;
    let text = label.attr("aria-label").await.map_err(|e| e.to_string())?.unwrap_or_default();
    if !text.contains("277 unread, 1 mentions") {
        return Err(format!("the conversation reads {text:?}"));
    }
    label.click().await.map_err(|e| e.to_string())?;
    wait_attr(c, "#badge", "data-count", "0").await?;
    c.find(Locator::Css("#feed")).await.map_err(|e| e.to_string())?.click().await.map_err(|e| e.to_string())?;
    wait_attr(c, "#feed", "data-count", "0").await?;
    // Contract v3: mark the conversation unread; reading it clears the mark; mark it again, "Mark all read" too.
    let mark = r#"button[data-mark-unread="ubuntu.2009-10-01_17"]"#;
    for clear in [conversation, "#read-all"] {
        click(c, mark).await?;
        wait_attr(c, conversation, "data-marked", "true").await?;
        click(c, clear).await?;
        wait_attr(c, conversation, "data-marked", "false").await?;
    }
    v4_in_the_inbox(c, ns).await?;
    switch_users_keeps_one_socket(c, svc).await?;
    // A refused token: a clear message, and no retry loop (still the same message 3 s later).
    let bad = format!("http://127.0.0.1:{port}/?refused#user=aadi&token=not-a-jwt");
    c.goto(&bad).await.map_err(|e| e.to_string())?;
    wait_status(c, "The token was refused").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_status(c, "The token was refused").await
}

/// Contract v4 as a person sees it: a conversation of team acme where aadi's message got a reply (a thread aadi
/// follows) and a reaction, and another message names aadi. The threads list, its badge, the reaction, the "from
/// #2" first-unread marker and the team appear live; clicking the thread reads it whole, clicking the conversation
/// reads it and sees its reaction.
async fn v4_in_the_inbox(c: &Client, ns: &Ns<'_>) -> Result<(), String> {
    let events = [
        r#"{"type":"conversation.created","event_id":"acme#0","occurred_at":"2026-11-22T00:00:00Z","conversation_id":"acme-room","kind":"group","members":["aadi","bob"],"team":"acme"}"#,
        r#"{"type":"message.sent","event_id":"acme#1","occurred_at":"2026-11-22T00:00:01Z","conversation_id":"acme-room","seq":1,"sender_id":"aadi","mentions":[]}"#,
        r#"{"type":"message.sent","event_id":"acme#2","occurred_at":"2026-11-22T00:00:02Z","conversation_id":"acme-room","seq":2,"sender_id":"bob","mentions":["aadi"]}"#,
        r#"{"type":"message.sent","event_id":"acme#3","occurred_at":"2026-11-22T00:00:03Z","conversation_id":"acme-room","seq":3,"sender_id":"bob","mentions":[],"thread_root":1}"#,
        r#"{"type":"reaction.added","event_id":"acme#4","occurred_at":"2026-11-22T00:00:04Z","conversation_id":"acme-room","reaction_seq":1,"seq":1,"user_id":"bob","reaction":"👍"}"#,
    ];
    produce_lines(ns, "acme", events.join("\n") + "\n");
    let thread = r#"button[data-thread="acme-room › #1"]"#;
    wait_attr(c, thread, "aria-label", "acme-room › #1: 1 unread replies, 0 mentions").await?;
    wait_attr(c, "#threads-badge", "data-count", "1").await?;
    wait_attr(c, "#reactions-total", "data-count", "1").await?;
    let room = r#"button[data-conversation="acme-room"]"#;
    let label = "acme-room: 1 unread, 1 mentions, 1 reacted, first unread 2";
    wait_attr(c, room, "aria-label", label).await?;
    wait_attr(c, &format!("{room} [data-first-unread]"), "data-first-unread", "2").await?;
    let team = "acme: 1 unread in 1 conversations, 1 mentions";
    wait_attr(c, r#"li[data-team="acme"]"#, "aria-label", team).await?;
    // For a person to look at: target/inbox-v4.png.
    if let Ok(png) = c.screenshot().await {
        std::fs::write(repo_path("target/inbox-v4.png"), png).ok();
    }
    click(c, thread).await?;
    wait_attr(c, "#threads-badge", "data-count", "0").await?;
    if c.find(Locator::Css(thread)).await.is_ok() {
        return Err("the thread read is still listed".into());
    }
    // Clicking the conversation reads it and sees its reaction.
    click(c, room).await?;
    wait_attr(c, room, "aria-label", "acme-room: 0 unread, 0 mentions").await?;
    wait_attr(c, "#reactions-total", "data-count", "0").await
}

/// Switching users in the form (twice) leaves exactly one stream open on the server.
async fn switch_users_keeps_one_socket(c: &Client, svc: &Service) -> Result<(), String> {
    for who in ["mandrix", "aadi"] {
        let user = c.find(Locator::Css("#user")).await.map_err(|e| e.to_string())?;
        user.clear().await.map_err(|e| e.to_string())?;
        user.send_keys(who).await.map_err(|e| e.to_string())?;
        let field = c.find(Locator::Css("#token")).await.map_err(|e| e.to_string())?;
        field.clear().await.map_err(|e| e.to_string())?;
        field.send_keys(&token(who, false)).await.map_err(|e| e.to_string())?;
        click(c, r#"#pick button[type="submit"]"#).await?;
        wait_status(c, &format!("Live: {who}")).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open = metric_sum(svc.admin, "unread_push_sockets");
        if open == 1.0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{open} sockets open after switching users, not 1"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    match metric_sum(svc.admin, "unread_push_sockets") {
        1.0 => Ok(()),
        open => Err(format!("{open} sockets open 2 s after switching users, not 1")),
    }
}

/// Waits (10 s at most) until the status line contains `want`.
async fn wait_status(c: &Client, want: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = c.find(Locator::Css("#status")).await.map_err(|e| e.to_string())?.text().await;
        let text = text.map_err(|e| e.to_string())?;
        if text.contains(want) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the status reads {text:?}, not {want:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn click(c: &Client, css: &str) -> Result<(), String> {
    c.find(Locator::Css(css)).await.map_err(|e| e.to_string())?.click().await.map_err(|e| e.to_string())
}

#[test]
fn the_inbox_shows_the_badge_live_and_clears_it_on_click_in_a_real_browser() {
    let Some(stack) = stack("the_inbox_shows_the_badge_live_and_clears_it_on_click_in_a_real_browser") else { return };
    let Some(driver) = chromedriver() else { return };
    let ns = Ns::new(&stack, "inbox");
    let svc = ns.start(&[]);
    ns.ok(&["produce", &v2_dev_events()]);
    ns.ok(&["lag", "--wait", "2m"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let result = rt.block_on(async {
        let c = browser(&driver).await;
        let result = use_the_inbox(&c, &ns, &svc).await;
        if result.is_err() {
            let shot = repo_path("target/inbox-failure.png");
            if let Ok(png) = c.screenshot().await {
                std::fs::write(&shot, png).ok();
                eprintln!("screenshot: {}", shot.display());
            }
        }
        c.close().await.ok();
        result
    });
    svc.stop();
    if let Err(e) = result {
        panic!("{e}");
    }
}
