//! Waiting acquires: granted when the lock frees, 423 at the deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_waiter_is_granted_the_lock_when_it_is_released() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("job", 30_000).await;

    let waiter = {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            app.acquire_with("job", json!({"ttl_ms": 5_000, "wait_ms": 20_000}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the lock is held"
    );
    let released_at = Instant::now();
    app.release("job", &holder.token()).await;

    let granted = waiter.await.expect("waiter task");
    assert_eq!(granted.status, StatusCode::OK);
    assert!(granted.fence() > holder.fence());
    assert!(
        released_at.elapsed() < Duration::from_secs(10),
        "woken by the release, not by its wait_ms running out"
    );
}

#[tokio::test]
async fn a_waiter_gets_423_at_its_deadline() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("job", 30_000).await;

    let started = Instant::now();
    let busy = app
        .acquire_with("job", json!({"ttl_ms": 1_000, "wait_ms": 300}))
        .await;

    assert_eq!(busy.status, StatusCode::LOCKED);
    assert_eq!(busy.body["error"]["fence"], holder.fence());
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited its wait_ms"
    );
}

#[tokio::test]
async fn a_waiter_is_granted_the_lock_when_the_holder_expires() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("job", 400).await;

    let started = Instant::now();
    let granted = app
        .acquire_with("job", json!({"ttl_ms": 1_000, "wait_ms": 20_000}))
        .await;

    assert_eq!(granted.status, StatusCode::OK);
    assert!(granted.fence() > holder.fence());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "not before the expiry: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "at the expiry, not at wait_ms: {waited:?}"
    );
}

#[tokio::test]
async fn wait_ms_is_capped_by_configuration() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_wait_ms = 200;
    let app = TestApp::spawn_with(settings).await;
    app.acquire("job", 30_000).await;

    let started = Instant::now();
    let busy = app.acquire_with("job", json!({"wait_ms": 60_000})).await;

    assert_eq!(busy.code(), "lock_busy");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "capped at max_wait_ms, not 60 s"
    );
}

#[tokio::test]
async fn waiters_beyond_the_per_lock_limit_get_too_many_waiters() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_waiters_per_lock = 1;
    let app = Arc::new(TestApp::spawn_with(settings).await);
    app.acquire("job", 30_000).await;

    let first = {
        let app = Arc::clone(&app);
        tokio::spawn(async move { app.acquire_with("job", json!({"wait_ms": 2_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = app.acquire_with("job", json!({"wait_ms": 2_000})).await;

    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.code(), "too_many_waiters");
    assert!(second.headers.contains_key("retry-after"));
    assert_eq!(
        app.acquire_with("other", json!({"wait_ms": 100}))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(first.await.expect("task").code(), "lock_busy");
}
