//! The operator page's semaphore table: each held semaphore under the prefix
//! with its limit, held and available permits and holders, read again from
//! the listing while the page is open, and a force release behind the same
//! confirmation as a lock's.

use reqwest::StatusCode;
use serde_json::json;

use super::webdriver::Browser;
use super::{force_release_from_page, open_page};
use lockbroker_tests::{RedisServer, TestApp};

/// The CSS selector of a semaphore's row.
fn row(name: &str) -> String {
    format!("#semaphores tr[data-semaphore=\"{name}\"]")
}

/// Waits until the cells of `name`'s row read `cells` (class -> text).
async fn wait_for_cells(browser: &Browser, name: &str, cells: serde_json::Value) {
    browser
        .wait_until(
            &format!("the row of semaphore {name} reads {cells}"),
            "const r = document.querySelector(arguments[0]); \
             return r !== null && Object.entries(arguments[1]).every(([c, t]) => \
                 r.querySelector('td.' + c) !== null && r.querySelector('td.' + c).textContent === t);",
            json!([row(name), cells]),
        )
        .await;
}

#[tokio::test]
async fn the_page_lists_semaphores_and_force_releases_one() {
    let browser = Browser::new_session().await;
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let take = |owner: &str| json!({"limit": 3, "ttl_ms": 60_000, "owner": owner});

    // Held before the page opens: the first listing shows it.
    let first = app
        .post("/v1/semaphores/sem:vendor/acquire", take("worker-1"))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    open_page(&browser, &app, false).await;
    wait_for_cells(
        &browser,
        "sem:vendor",
        json!({"limit": "3", "held": "1", "available": "2", "owners": "worker-1"}),
    )
    .await;

    // A second permit, taken while the page is open, shows without a reload.
    let second = app
        .post("/v1/semaphores/sem:vendor/acquire", take("worker-2"))
        .await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    wait_for_cells(
        &browser,
        "sem:vendor",
        json!({"held": "2", "available": "1", "owners": "worker-1, worker-2"}),
    )
    .await;
    let name = browser
        .text(&browser.find(&format!("{} th", row("sem:vendor"))).await)
        .await;
    assert_eq!(name, "sem:vendor");

    // A lock of the same name is another thing, in the other table.
    assert_eq!(
        browser
            .execute(
                "return document.querySelector('#locks tr[data-lock=\"sem:vendor\"]');",
                json!([]),
            )
            .await,
        serde_json::Value::Null
    );

    force_release_from_page(&browser, &row("sem:vendor")).await;
    let status = app.get("/v1/semaphores/sem:vendor").await;
    assert_eq!(status.body["held"], 0, "{}", status.body);
    let line = browser.text(&browser.find("#status").await).await;
    assert!(
        line.contains("Force released sem:vendor: 2 permits"),
        "{line}"
    );
    let extend = app
        .post(
            "/v1/semaphores/sem:vendor/extend",
            json!({"token": first.body["token"], "ttl_ms": 60_000}),
        )
        .await;
    assert_eq!(extend.status, StatusCode::CONFLICT, "{}", extend.body);
    browser.quit().await;
}
