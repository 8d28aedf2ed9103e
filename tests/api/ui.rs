//! The operator page (`/ui/`): served without a key under a strict CSP, and
//! driven in headless Chromium through chromedriver: locks appear and leave
//! live, a lock's queue length and lock-delay show, a force release from the
//! page ends a lease, semaphores are listed, the table fits at 1024 px, and
//! the page asks for a key when the API wants one. A page of another origin,
//! in the same browser, cannot take or free a lock.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_server::Settings;
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

mod semaphores;
mod webdriver;

use webdriver::Browser;

/// The page's policy, as the contract words it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";
const ADMIN_KEY: &str = "ui-admin-key-5e0c7a91";
const LOCK_KEY: &str = "ui-lock-key-b42d1f08";

/// A policy's directives, whatever their order and spacing.
fn directives(policy: &str) -> BTreeSet<String> {
    policy
        .split(';')
        .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|d| !d.is_empty())
        .collect()
}

/// Test settings with an admin key and a key that may only take locks.
fn keyed_settings(redis: &RedisServer) -> Settings {
    let key = |id: &str, token: &str, scopes: &[Scope]| ApiKeyConfig {
        id: id.to_owned(),
        sha256: hash_token(token),
        scopes: scopes.to_vec(),
        prefixes: vec!["*".to_owned()],
        rate_limit_per_sec: None,
    };
    let mut settings = test_settings(redis);
    settings.auth.keys = vec![
        key("ops", ADMIN_KEY, &[Scope::Lock, Scope::Admin]),
        key("worker", LOCK_KEY, &[Scope::Lock]),
    ];
    settings
}

/// The CSS selector of a lock's row.
fn row(name: &str) -> String {
    format!("#locks tr[data-lock=\"{name}\"]")
}

/// Waits until the row of `name` is there (`true`) or gone (`false`).
async fn wait_for_row(browser: &Browser, name: &str, present: bool) {
    let what = format!(
        "the row of {name} {}",
        if present { "appears" } else { "goes" }
    );
    browser
        .wait_until(
            &what,
            "return (document.querySelector(arguments[0]) !== null) === arguments[1];",
            json!([row(name), present]),
        )
        .await;
}

/// Waits until the `Waiting` cell of `name`'s row reads `shown`.
async fn wait_for_waiting(browser: &Browser, name: &str, shown: &str) {
    browser
        .wait_until(
            &format!("the row of {name} shows {shown} waiting"),
            "const r = document.querySelector(arguments[0]); \
             return r !== null && r.querySelector('td.waiting').textContent === arguments[1];",
            json!([row(name), shown]),
        )
        .await;
}

/// Opens `/ui/` and waits until the stylesheet is applied and the event
/// stream (or, with `key_form`, the key form) is up.
async fn open_page(browser: &Browser, app: &TestApp, key_form: bool) {
    browser.goto(&app.url("/ui/")).await;
    browser
        .wait_until(
            "app.css is applied",
            "const t = document.querySelector('#locks'); \
             return t !== null && getComputedStyle(t.closest('.table-wrap')).overflowX === 'auto';",
            json!([]),
        )
        .await;
    let (what, script) = if key_form {
        (
            "the key form shows",
            "return !document.getElementById('key-panel').hidden;",
        )
    } else {
        (
            "the event stream is live",
            "return document.getElementById('connection').dataset.state === 'live';",
        )
    };
    browser.wait_until(what, script, json!([])).await;
}

/// The text of the cell `cell` (a class) in `name`'s row; `None` while the
/// row is not there.
async fn cell_text(browser: &Browser, name: &str, cell: &str) -> Value {
    browser
        .execute(
            "const c = document.querySelector(arguments[0] + ' td.' + arguments[1]); \
             return c === null ? null : c.textContent;",
            json!([row(name), cell]),
        )
        .await
}

/// Clicks the force-release button of the row `row_css`, confirms, and
/// waits for the row to go.
async fn force_release_from_page(browser: &Browser, row_css: &str) {
    browser
        .click(
            &browser
                .find(&format!("{row_css} button.force-release"))
                .await,
        )
        .await;
    browser
        .wait_until(
            "the confirmation opens",
            "return document.getElementById('confirm').open;",
            json!([]),
        )
        .await;
    browser.click(&browser.find("#confirm-yes").await).await;
    browser
        .wait_until(
            &format!("{row_css} goes"),
            "return document.querySelector(arguments[0]) === null;",
            json!([row_css]),
        )
        .await;
}

/// Where screenshots go: `<target>/ui-test/`.
fn screenshot_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    // An absolute CARGO_TARGET_DIR replaces the workspace path when joined.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), |dir| workspace.join(dir));
    target.join("ui-test")
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_without_a_key_under_the_strict_csp() {
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(keyed_settings(&redis)).await;
    assert_eq!(app.get("/v1/locks").await.status, StatusCode::UNAUTHORIZED);

    let page = app
        .http
        .get(app.url("/ui/"))
        .send()
        .await
        .expect("GET /ui/");
    assert_eq!(page.status(), StatusCode::OK);
    let header = |name: &str| {
        page.headers()
            .get(name)
            .unwrap_or_else(|| panic!("/ui/ has no {name} header"))
            .to_str()
            .expect("ASCII header")
            .to_owned()
    };
    assert!(header("content-type").starts_with("text/html"));
    assert_eq!(
        directives(&header("content-security-policy")),
        directives(CSP)
    );
    let html = page.text().await.expect("page text");
    assert!(!html.contains("style="), "no inline style attributes");
    assert!(!html.contains("<style"), "no inline stylesheets");
    for tag in html.split("<script").skip(1) {
        let tag = &tag[..tag.find('>').expect("a closed script tag")];
        assert!(tag.contains("src="), "no inline scripts: <script{tag}>");
    }

    for (path, types) in [
        (
            "/ui/app.js",
            &["text/javascript", "application/javascript"][..],
        ),
        ("/ui/app.css", &["text/css"][..]),
    ] {
        let asset = app.http.get(app.url(path)).send().await.expect(path);
        assert_eq!(asset.status(), StatusCode::OK, "{path}");
        let kind = asset.headers()["content-type"]
            .to_str()
            .expect("ASCII header");
        assert!(
            types.iter().any(|t| kind.starts_with(t)),
            "{path} is served as {kind}"
        );
        assert!(!asset.bytes().await.expect(path).is_empty(), "{path}");
    }
}

#[tokio::test]
async fn the_page_follows_locks_live_and_force_releases_one() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    open_page(&browser, &app, false).await;

    // A lock acquired through the API appears without a reload...
    let first = app
        .acquire_with("ui:first", json!({"ttl_ms": 30_000, "owner": "ui-test"}))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    wait_for_row(&browser, "ui:first", true).await;
    let text = browser.text(&browser.find(&row("ui:first")).await).await;
    let fence = first.fence().to_string();
    for shown in ["ui:first", "ui-test", "exclusive", fence.as_str()] {
        assert!(text.contains(shown), "the row shows {shown}: {text}");
    }

    // A fair waiter queues in Redis without any event; the page's periodic
    // refresh shows it...
    let waiter = tokio::spawn({
        let app = Arc::clone(&app);
        async move {
            let body =
                json!({"ttl_ms": 30_000, "wait_ms": 20_000, "fair": true, "owner": "ui-waiter"});
            app.acquire_with("ui:first", body).await
        }
    });
    wait_for_waiting(&browser, "ui:first", "1").await;
    // ...and gets the lock when the holder releases it, the queue then empty.
    let released = app.release("ui:first", &first.token()).await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    let granted = waiter.await.expect("the waiter's task");
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
    browser
        .wait_until(
            "the row of ui:first shows the waiter's fence",
            "const r = document.querySelector(arguments[0]); \
             return r !== null && r.querySelector('td.fence').textContent === arguments[1];",
            json!([row("ui:first"), granted.fence().to_string()]),
        )
        .await;
    wait_for_waiting(&browser, "ui:first", "0").await;

    // ...and leaves when released.
    let released = app.release("ui:first", &granted.token()).await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    wait_for_row(&browser, "ui:first", false).await;

    // Its history, newest first; then a force release, confirmed.
    let second = app
        .acquire_with("ui:second", json!({"ttl_ms": 30_000, "owner": "victim"}))
        .await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    wait_for_row(&browser, "ui:second", true).await;
    browser
        .click(&browser.find(&format!("{} th", row("ui:second"))).await)
        .await;
    let heading = browser.text(&browser.find("#history-heading").await).await;
    assert!(heading.contains("ui:second"), "{heading}");
    browser
        .click(
            &browser
                .find(&format!("{} button.force-release", row("ui:second")))
                .await,
        )
        .await;
    browser
        .wait_until(
            "the confirmation opens",
            "return document.getElementById('confirm').open;",
            json!([]),
        )
        .await;
    browser.click(&browser.find("#confirm-yes").await).await;
    wait_for_row(&browser, "ui:second", false).await;
    let status = app.status("ui:second").await;
    assert_eq!(status.body["held"], false, "{}", status.body);
    let line = browser.text(&browser.find("#status").await).await;
    assert!(line.contains("Force released ui:second"), "{line}");
    browser
        .wait_until(
            "the history shows the force release first",
            "const r = document.querySelector('#history-list tr'); \
             return r !== null && r.children[1].textContent === 'force released';",
            json!([]),
        )
        .await;

    // Two readers of one lock, for the screenshot.
    for reader in ["reader-1", "reader-2"] {
        let body = json!({"ttl_ms": 60_000, "owner": reader, "mode": "shared"});
        let reply = app.acquire_with("ui:shared", body).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    }
    browser
        .wait_until(
            "the shared lock shows two holders",
            "const r = document.querySelector(arguments[0]); \
             return r !== null && r.querySelector('td.holders').textContent === '2';",
            json!([row("ui:shared")]),
        )
        .await;

    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    let dir = screenshot_dir();
    std::fs::create_dir_all(&dir).expect("create the screenshot directory");
    std::fs::write(dir.join("operator-page.png"), png).expect("write the screenshot");

    let refused: Vec<String> = browser
        .console()
        .await
        .into_iter()
        .filter(|m| m.contains("Content Security Policy"))
        .collect();
    assert!(
        refused.is_empty(),
        "the page broke its own CSP: {refused:?}"
    );
    browser.quit().await;
}

#[tokio::test]
async fn the_page_asks_for_a_key_and_says_when_it_lacks_the_admin_scope() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(keyed_settings(&redis)).await;
    open_page(&browser, &app, true).await;

    // A key that may take locks but not force release them.
    browser
        .send_keys(
            &browser.find("#api-key").await,
            &format!("{LOCK_KEY}\u{E007}"),
        )
        .await;
    browser
        .wait_until(
            "the event stream is live with the key",
            "return document.getElementById('connection').dataset.state === 'live';",
            json!([]),
        )
        .await;
    let stored = browser
        .execute(
            "return sessionStorage.getItem('lockbroker.key');",
            json!([]),
        )
        .await;
    assert_eq!(stored, Value::from(LOCK_KEY));

    let acquire = app
        .http
        .post(app.url("/v1/locks/ui:kept/acquire"))
        .bearer_auth(ADMIN_KEY)
        .header("content-type", "application/json")
        .body(json!({"ttl_ms": 30_000, "owner": "keeper"}).to_string());
    let reply = app.send(acquire).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    wait_for_row(&browser, "ui:kept", true).await;
    browser
        .click(
            &browser
                .find(&format!("{} button.force-release", row("ui:kept")))
                .await,
        )
        .await;
    browser.click(&browser.find("#confirm-yes").await).await;
    browser
        .wait_until(
            "the page says the key lacks the admin scope",
            "return document.getElementById('status').textContent.includes('this key lacks the admin scope');",
            json!([]),
        )
        .await;
    let status = app
        .send(
            app.http
                .get(app.url("/v1/locks/ui:kept"))
                .bearer_auth(ADMIN_KEY),
        )
        .await;
    assert_eq!(status.body["held"], true, "{}", status.body);

    // Forgetting the key asks for one again.
    browser.click(&browser.find("#forget-key").await).await;
    browser
        .wait_until(
            "the key form shows again",
            "return !document.getElementById('key-panel').hidden \
                 && sessionStorage.getItem('lockbroker.key') === null;",
            json!([]),
        )
        .await;
    browser.quit().await;
}

/// The page at 320 px: nothing wider than the window but the table, which
/// scrolls; and by keyboard alone a row's history opens and a force release
/// is confirmed.
#[tokio::test]
async fn the_page_reads_at_320_px_and_works_by_keyboard() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    browser.resize(320, 640).await;
    open_page(&browser, &app, false).await;
    let lease = app
        .acquire_with("kb:job", json!({"ttl_ms": 30_000, "owner": "keyboard"}))
        .await;
    assert_eq!(lease.status, StatusCode::OK);
    wait_for_row(&browser, "kb:job", true).await;
    let overflow = browser
        .execute(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            json!([]),
        )
        .await;
    assert!(
        overflow.as_i64() <= Some(0),
        "the page is wider than 320 px by {overflow}"
    );

    // Enter on the focused row opens its history.
    let row_element = browser.find(&row("kb:job")).await;
    browser.send_keys(&row_element, "\u{E007}").await;
    let heading = browser.text(&browser.find("#history-heading").await).await;
    assert!(heading.contains("kb:job"), "{heading}");
    // Enter on its force-release button, then on the dialog's confirm.
    let force = browser
        .find(&format!("{} button.force-release", row("kb:job")))
        .await;
    browser.send_keys(&force, "\u{E007}").await;
    browser
        .wait_until(
            "the confirmation dialog",
            "return document.getElementById('confirm').open === true;",
            json!([]),
        )
        .await;
    let focused = browser
        .execute(
            "return document.activeElement && document.activeElement.tagName;",
            json!([]),
        )
        .await;
    assert_eq!(focused, "BUTTON", "the dialog takes the focus");
    let yes = browser.find("#confirm-yes").await;
    browser.send_keys(&yes, "\u{E007}").await;
    wait_for_row(&browser, "kb:job", false).await;
    assert_eq!(app.status("kb:job").await.body["held"], false);
    browser.quit().await;
}

#[tokio::test]
async fn the_address_without_the_slash_redirects_to_the_page() {
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(keyed_settings(&redis)).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("http client");
    for (asked, location) in [
        ("/ui", "/ui/"),
        ("/ui?prefix=billing:", "/ui/?prefix=billing:"),
    ] {
        let answer = http.get(app.url(asked)).send().await.expect(asked);
        assert!(
            [
                StatusCode::PERMANENT_REDIRECT,
                StatusCode::MOVED_PERMANENTLY
            ]
            .contains(&answer.status()),
            "{asked}: {}",
            answer.status()
        );
        assert_eq!(answer.headers()["location"], location, "{asked}");
    }
    // Followed, it is the page.
    let page = app.http.get(app.url("/ui")).send().await.expect("GET /ui");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.url().path().ends_with("/ui/"), "{}", page.url());
    assert!(page.text().await.expect("page").contains("<html"));
}

#[tokio::test]
async fn the_key_prompt_says_its_sentence_once() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(keyed_settings(&redis)).await;
    open_page(&browser, &app, true).await;
    let shown = browser
        .execute(
            "return document.body.innerText.split('asks for an API key').length - 1;",
            json!([]),
        )
        .await;
    assert_eq!(shown, 1, "the sentence shows {shown} times");
    browser.quit().await;
}

/// At 1024 px the whole table fits: the force-release button is inside the
/// window, and neither the page nor the table scrolls sideways, with a long
/// owner and the largest fences.
#[tokio::test]
async fn the_table_fits_at_1024_px() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    browser.resize(1024, 768).await;
    open_page(&browser, &app, false).await;
    let lease = app
        .acquire_with(
            "wide:billing:invoice-2026-000042",
            json!({"ttl_ms": 3_600_000, "owner": "worker-7.eu-west-1.example", "lock_delay_ms": 60_000}),
        )
        .await;
    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
    wait_for_row(&browser, "wide:billing:invoice-2026-000042", true).await;
    let width = browser
        .execute("return window.innerWidth;", json!([]))
        .await;
    assert_eq!(width, 1024, "the window's width");
    let fit = browser
        .execute(
            "const b = document.querySelector(arguments[0] + ' button.force-release').getBoundingClientRect(); \
             const w = document.querySelector('#locks').closest('.table-wrap'); \
             return {left: b.left, right: b.right, width: window.innerWidth, \
                     page: document.documentElement.scrollWidth - document.documentElement.clientWidth, \
                     table: w.scrollWidth - w.clientWidth};",
            json!([row("wide:billing:invoice-2026-000042")]),
        )
        .await;
    assert!(
        fit["left"].as_f64() >= Some(0.0) && fit["right"].as_f64() <= fit["width"].as_f64(),
        "the button is outside the window: {fit}"
    );
    assert!(
        fit["page"].as_i64() <= Some(0),
        "the page scrolls sideways: {fit}"
    );
    assert!(
        fit["table"].as_i64() <= Some(0),
        "the table scrolls sideways: {fit}"
    );
    browser.quit().await;
}

/// A lease that expires unreleased leaves its lock unavailable for its
/// lock-delay: the page keeps the row, says so and counts down, whether the
/// delay began before the page opened or while it watched; a force release
/// ends it.
#[tokio::test]
async fn the_page_shows_a_lock_delay_and_force_releases_it() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let delay = json!({"ttl_ms": 1_000, "owner": "stalled", "lock_delay_ms": 60_000});

    // Expired before the page opens: the first fill shows its delay.
    let before = app.acquire_with("delay:before", delay.clone()).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.body);
    let deadline = std::time::Instant::now() + webdriver::DEADLINE;
    while app.status("delay:before").await.body["held"] != false {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never expired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    open_page(&browser, &app, false).await;
    wait_for_row(&browser, "delay:before", true).await;
    assert_eq!(
        cell_text(&browser, "delay:before", "mode").await,
        "lock-delay"
    );

    // Held while the page watches: it shows what the delay will be, and the
    // row stays when the lease expires.
    let watched = app.acquire_with("delay:watched", delay).await;
    assert_eq!(watched.status, StatusCode::OK, "{}", watched.body);
    wait_for_row(&browser, "delay:watched", true).await;
    assert_eq!(
        cell_text(&browser, "delay:watched", "mode").await,
        "exclusive"
    );
    browser
        .wait_until(
            "the row of delay:watched shows its lock-delay",
            "const r = document.querySelector(arguments[0]); \
             return r !== null && r.querySelector('td.mode').textContent === 'lock-delay';",
            json!([row("delay:watched")]),
        )
        .await;
    for name in ["delay:before", "delay:watched"] {
        let status = app.status(name).await.body;
        assert_eq!(status["held"], false, "{status}");
        assert!(status["available_in_ms"].as_u64() > Some(0), "{status}");
        let free = cell_text(&browser, name, "free").await;
        let free = free.as_str().expect("a free-in cell");
        assert!(free.ends_with(" s"), "{name} is free in {free}");
        assert_eq!(cell_text(&browser, name, "expires").await, "—");
    }

    force_release_from_page(&browser, &row("delay:watched")).await;
    let status = app.status("delay:watched").await.body;
    assert_eq!(status["available_in_ms"], 0, "{status}");
    browser.quit().await;
}

/// Serves `html` to every request on a loopback port of its own: a web page
/// of an origin other than the broker's. Its base URL; the server stops
/// with the test's runtime.
async fn serve_elsewhere(html: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let html = html.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{html}",
                    html.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    base
}

/// What a hostile page tries against the broker at `broker`: no-cors
/// `fetch` POSTs (a JSON text as `text/plain`, and no body at all), a
/// `DELETE` (which needs a preflight), and two form POSTs, one of them
/// shaped so its `text/plain` body reads as JSON. `window.settled` counts
/// the fetches that ended, `window.answered` those the broker answered, and
/// `window.framed` the form answers that loaded.
fn hostile_page(broker: &str) -> String {
    format!(
        r#"<!doctype html>
<title>another origin</title>
<iframe name="sink-a"></iframe><iframe name="sink-b"></iframe>
<form id="as-json" method="POST" target="sink-a" enctype="text/plain"
      action="{broker}/v1/locks/csrf:form/acquire">
  <input name='{{"ttl_ms": 86400000, "owner": "form", "pad": "' value='"}}'>
</form>
<form id="as-form" method="POST" target="sink-b" action="{broker}/v1/locks/csrf:urlencoded/acquire">
  <input name="ttl_ms" value="86400000">
</form>
<script>
window.settled = 0; window.answered = 0; window.framed = 0;
const broker = "{broker}";
const send = (path, init) => fetch(broker + path, init)
  .then(() => {{ window.answered++; }}, () => {{}})
  .finally(() => {{ window.settled++; }});
const text = {{"Content-Type": "text/plain"}};
const day = JSON.stringify({{ttl_ms: 86400000, owner: "fetch"}});
send("/v1/locks/csrf:text/acquire", {{method: "POST", mode: "no-cors", headers: text, body: day}});
send("/v1/locks/csrf:text/acquire", {{method: "POST", mode: "no-cors", body: day}});
send("/v1/locks/csrf:bare/acquire", {{method: "POST", mode: "no-cors"}});
send("/v1/semaphores/csrf:sem/acquire", {{method: "POST", mode: "no-cors", headers: text,
  body: JSON.stringify({{limit: 1, ttl_ms: 86400000}})}});
send("/v1/locks/csrf:held", {{method: "DELETE"}});
for (const frame of document.querySelectorAll("iframe")) {{
  frame.addEventListener("load", () => {{ window.framed++; }});
}}
document.getElementById("as-json").submit();
document.getElementById("as-form").submit();
</script>
"#
    )
}

#[tokio::test]
async fn a_page_of_another_origin_cannot_take_or_free_a_lock() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app
        .acquire_with("csrf:held", json!({"ttl_ms": 60_000, "owner": "victim"}))
        .await;
    assert_eq!(held.status, StatusCode::OK, "{}", held.body);

    let elsewhere = serve_elsewhere(hostile_page(&app.base)).await;
    browser.goto(&format!("{elsewhere}/")).await;
    browser
        .wait_until(
            "every fetch settled and both forms were answered",
            "return window.settled === 5 && window.framed === 2;",
            json!([]),
        )
        .await;
    // The no-cors POSTs reached the broker (their opaque answers resolve);
    // only the DELETE was stopped by the browser, at its preflight.
    let answered = browser.execute("return window.answered;", json!([])).await;
    assert_eq!(answered, 4, "the no-cors fetches reach the broker");

    for name in ["csrf:text", "csrf:bare", "csrf:form", "csrf:urlencoded"] {
        let status = app.status(name).await;
        assert_eq!(status.body["held"], false, "{name}: {}", status.body);
    }
    let semaphore = app.get("/v1/semaphores/csrf:sem").await;
    assert_eq!(semaphore.body["held"], 0, "{}", semaphore.body);
    let status = app.status("csrf:held").await;
    assert_eq!(status.body["fence"], held.fence(), "{}", status.body);
    assert!(redis
        .conn()
        .keys(&format!("{}:{{csrf:t*", app.prefix))
        .is_empty());
    browser.quit().await;
}
