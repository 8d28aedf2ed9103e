//! Listing held locks and semaphores page by page: a listing that fits one
//! page ends on it (`next_cursor` null), and following the cursor visits
//! every held name exactly once. Runs in every mode (scripts/test.sh), so a
//! quorum's per-node walk is held to the same answer as one Redis.

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// The names on every page of `path` (a listing of `field`, `locks` or
/// `semaphores`), following `next_cursor`, in the order listed, and how
/// many pages that took.
async fn every_page(app: &TestApp, path: &str, field: &str) -> (Vec<String>, usize) {
    let (mut names, mut cursor) = (Vec::new(), None::<String>);
    for pages in 1..=100 {
        let url = match &cursor {
            Some(cursor) => format!("{path}&cursor={cursor}"),
            None => path.to_owned(),
        };
        let page = app.get(&url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let listed = page.body[field].as_array().expect("a list of names");
        names.extend(
            listed
                .iter()
                .map(|entry| entry["name"].as_str().expect("name").to_owned()),
        );
        match &page.body["next_cursor"] {
            Value::Null => return (names, pages),
            Value::String(next) => cursor = Some(next.clone()),
            other => panic!("next_cursor is {other}"),
        }
    }
    panic!("{path}: more than 100 pages")
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[tokio::test]
async fn a_listing_that_fits_one_page_has_no_next_cursor() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    for name in ["few:a", "few:b", "few:c"] {
        assert_eq!(app.acquire(name, 30_000).await.status, StatusCode::OK);
    }
    for name in ["few:s1", "few:s2"] {
        let path = format!("/v1/semaphores/{name}/acquire");
        let permit = app.post(&path, json!({"ttl_ms": 30_000, "limit": 2})).await;
        assert_eq!(permit.status, StatusCode::OK, "{}", permit.body);
    }

    let (locks, pages) = every_page(&app, "/v1/locks?prefix=few:&limit=100", "locks").await;
    assert_eq!(
        (sorted(locks), pages),
        (vec!["few:a".into(), "few:b".into(), "few:c".into()], 1)
    );
    let (semaphores, pages) =
        every_page(&app, "/v1/semaphores?prefix=few:&limit=100", "semaphores").await;
    assert_eq!(
        (sorted(semaphores), pages),
        (vec!["few:s1".into(), "few:s2".into()], 1)
    );
    // Nothing held under a prefix: one empty page, and the end.
    let (none, pages) = every_page(&app, "/v1/locks?prefix=none:&limit=100", "locks").await;
    assert_eq!((none.len(), pages), (0, 1));
}

#[tokio::test]
async fn paging_with_the_cursor_visits_every_held_lock_exactly_once() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let mut held: Vec<String> = (0..12).map(|i| format!("many:{i:02}")).collect();
    for name in &held {
        assert_eq!(app.acquire(name, 30_000).await.status, StatusCode::OK);
    }
    // A free lock is not listed.
    let freed = app.acquire("many:free", 30_000).await;
    app.release("many:free", &freed.token()).await;

    let (listed, pages) = every_page(&app, "/v1/locks?prefix=many:&limit=5", "locks").await;
    assert!(pages >= 2, "12 locks in pages of 5 took {pages} page(s)");
    held.sort();
    assert_eq!(sorted(listed), held, "each held lock once, and only those");
}
