//! Acquire, busy, extend, release and inspect.

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[tokio::test]
async fn acquire_grants_a_fenced_lease() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    let before = now_ms();
    let lease = app
        .acquire_with("job", json!({"ttl_ms": 5000, "owner": "worker-1"}))
        .await;

    assert_eq!(lease.status, StatusCode::OK, "{:?}", lease.body);
    assert_eq!(lease.body["name"], "job");
    assert_eq!(lease.body["owner"], "worker-1");
    assert_eq!(lease.body["ttl_ms"], 5000);
    let token = lease.token();
    assert!(token.len() >= 32, "at least 128 bits of token");
    assert!(token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    assert!(lease.fence() > 0 && lease.fence() < (1 << 53));
    let expires_at = lease.body["expires_at_ms"].as_u64().expect("expires_at_ms");
    assert!(expires_at >= before + 5000 - 1000 && expires_at <= now_ms() + 5000 + 1000);
}

#[tokio::test]
async fn ttl_defaults_to_the_configured_finite_value() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    let lease = app.acquire_with("job", json!({})).await;
    assert_eq!(lease.status, StatusCode::OK);
    assert_eq!(lease.body["ttl_ms"], 30_000);
    let empty_body = app.post_raw("/v1/locks/other/acquire", "").await;
    assert_eq!(empty_body.status, StatusCode::OK);
    assert_eq!(empty_body.body["ttl_ms"], 30_000);
}

#[tokio::test]
async fn busy_lock_answers_423_with_the_holder_and_retry_after() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app
        .acquire_with("job", json!({"ttl_ms": 4000, "owner": "worker-1"}))
        .await;

    let busy = app
        .acquire_with("job", json!({"ttl_ms": 1000, "owner": "worker-2"}))
        .await;

    assert_eq!(busy.status, StatusCode::LOCKED);
    assert_eq!(busy.code(), "lock_busy");
    assert_eq!(busy.body["error"]["owner"], "worker-1");
    assert_eq!(busy.body["error"]["fence"], held.fence());
    let remaining = busy.body["error"]["expires_in_ms"]
        .as_u64()
        .expect("expires_in_ms");
    assert!(remaining > 0 && remaining <= 4000);
    assert_eq!(busy.headers["retry-after"], "4");
    assert!(
        !busy.body.to_string().contains(&held.token()),
        "never the holder's token"
    );
}

#[tokio::test]
async fn extend_replaces_the_remaining_ttl_and_keeps_the_fence() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("job", 10_000).await;

    let extended = app.extend("job", &lease.token(), 2_000).await;

    assert_eq!(extended.status, StatusCode::OK, "{:?}", extended.body);
    assert_eq!(extended.fence(), lease.fence());
    assert_eq!(extended.body["ttl_ms"], 2_000);
    assert!(
        extended.body.get("token").is_none(),
        "extend does not echo the token"
    );
    let status = app.status("job").await;
    let remaining = status.body["expires_in_ms"]
        .as_u64()
        .expect("expires_in_ms");
    assert!(remaining <= 2_000, "replaced, not added: {remaining}");
}

#[tokio::test]
async fn release_frees_the_lock_at_once_and_is_safe_to_retry() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app
        .acquire_with("job", json!({"ttl_ms": 10_000, "lock_delay_ms": 5_000}))
        .await;

    let released = app.release("job", &lease.token()).await;
    assert_eq!(released.status, StatusCode::OK);
    assert_eq!(released.body["released"], true);
    assert_eq!(released.fence(), lease.fence());

    let retried = app.release("job", &lease.token()).await;
    assert_eq!(
        retried.status,
        StatusCode::OK,
        "a retried release reports the same release"
    );
    assert_eq!(retried.fence(), lease.fence());

    let next = app.acquire("job", 1_000).await;
    assert_eq!(
        next.status,
        StatusCode::OK,
        "release frees at once, lock-delay or not"
    );
    assert!(next.fence() > lease.fence());
    // Re-sent once the lock went to the next holder, the release still
    // reports itself, and frees nothing of the next lease.
    let resent = app.release("job", &lease.token()).await;
    assert_eq!(resent.status, StatusCode::OK, "{:?}", resent.body);
    assert_eq!(resent.fence(), lease.fence());
    assert_eq!(app.status("job").await.body["held"], true);
}

#[tokio::test]
async fn a_stale_holder_gets_lease_lost_after_expiry() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("job", 400).await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    let extend = app.extend("job", &lease.token(), 1_000).await;
    assert_eq!(extend.status, StatusCode::CONFLICT);
    assert_eq!(extend.code(), "lease_lost");

    let release = app.release("job", &lease.token()).await;
    assert_eq!(release.status, StatusCode::CONFLICT);
    assert_eq!(release.code(), "lease_lost");
    let message = release.body["error"]["message"].as_str().expect("message");
    assert!(message.contains("expired or was taken"), "{message}");
    assert!(message.contains("possibly duplicated"), "{message}");
}

#[tokio::test]
async fn a_token_only_works_on_its_own_lock() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let a = app.acquire("lock-a", 10_000).await;
    let _b = app.acquire("lock-b", 10_000).await;

    assert_eq!(
        app.extend("lock-b", &a.token(), 1_000).await.code(),
        "lease_lost"
    );
    assert_eq!(app.release("lock-b", &a.token()).await.code(), "lease_lost");
    assert_eq!(
        app.status("lock-b").await.body["held"],
        true,
        "lock-b untouched"
    );
}

#[tokio::test]
async fn inspect_shows_holder_and_fence_but_never_the_token() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    let never = app.status("job").await;
    assert_eq!(never.status, StatusCode::OK);
    assert_eq!(never.body["held"], false);
    assert!(never.body["fence"].is_null());

    let lease = app
        .acquire_with("job", json!({"ttl_ms": 5000, "owner": "w1"}))
        .await;
    let held = app.status("job").await;
    assert_eq!(held.body["name"], "job");
    assert_eq!(held.body["held"], true);
    assert_eq!(held.body["owner"], "w1");
    assert_eq!(held.body["fence"], lease.fence());
    assert!(held.body["expires_in_ms"].as_u64().expect("expires_in_ms") <= 5000);
    assert!(!held.body.to_string().contains(&lease.token()));

    app.release("job", &lease.token()).await;
    let free = app.status("job").await;
    assert_eq!(free.body["held"], false);
    assert_eq!(free.body["fence"], lease.fence(), "the last fence issued");
    assert_eq!(free.body["expires_in_ms"], 0);
}

#[tokio::test]
async fn tokens_are_unique() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let mut tokens = HashSet::new();
    for i in 0..200 {
        let lease = app.acquire(&format!("job-{i}"), 10_000).await;
        assert!(tokens.insert(lease.token()), "duplicate token");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_acquirers_get_exactly_one_winner() {
    let redis = RedisServer::start();
    let app = std::sync::Arc::new(TestApp::spawn(&redis).await);

    let attempts: Vec<_> = (0..50)
        .map(|i| {
            let app = std::sync::Arc::clone(&app);
            tokio::spawn(async move {
                app.acquire_with(
                    "contended",
                    json!({"ttl_ms": 10_000, "owner": format!("w{i}")}),
                )
                .await
                .status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for attempt in attempts {
        statuses.push(attempt.await.expect("task"));
    }

    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::OK).count(), 1);
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == StatusCode::LOCKED)
            .count(),
        49
    );
}

#[tokio::test]
async fn a_retry_with_the_same_request_id_returns_the_same_lease() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let body = json!({"ttl_ms": 5000, "owner": "w1", "request_id": "req-42"});

    let first = app.acquire_with("job", body.clone()).await;
    let retry = app.acquire_with("job", body).await;

    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.token(), first.token());
    assert_eq!(retry.fence(), first.fence());

    let other_request = app
        .acquire_with(
            "job",
            json!({"ttl_ms": 5000, "owner": "w1", "request_id": "req-43"}),
        )
        .await;
    assert_eq!(other_request.code(), "lock_busy");
    let other_owner = app
        .acquire_with(
            "job",
            json!({"ttl_ms": 5000, "owner": "w2", "request_id": "req-42"}),
        )
        .await;
    assert_eq!(
        other_owner.code(),
        "lock_busy",
        "the id only matches its own owner"
    );
}

#[tokio::test]
async fn lock_delay_keeps_an_expired_lock_unavailable() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app
        .acquire_with("job", json!({"ttl_ms": 400, "lock_delay_ms": 1_500}))
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    let during = app.acquire("job", 1_000).await;
    assert_eq!(
        during.code(),
        "lock_busy",
        "expired, but inside the lock-delay"
    );
    assert_eq!(during.body["error"]["expires_in_ms"], 0);
    assert!(
        during.body["error"]["available_in_ms"]
            .as_u64()
            .expect("available_in_ms")
            > 0
    );
    assert_eq!(
        app.extend("job", &lease.token(), 1_000).await.code(),
        "lease_lost"
    );

    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after = app.acquire("job", 1_000).await;
    assert_eq!(after.status, StatusCode::OK);
    assert!(after.fence() > lease.fence());
}

#[tokio::test]
async fn max_hold_stops_extends_past_the_limit() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_hold_ms = Some(3_000);
    let app = TestApp::spawn_with(settings).await;

    let too_long = app.acquire("job", 3_001).await;
    assert_eq!(too_long.code(), "invalid_request");
    assert_eq!(too_long.body["error"]["field"], "ttl_ms");

    let lease = app.acquire("job", 1_000).await;
    assert_eq!(
        app.extend("job", &lease.token(), 1_000).await.status,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = app.extend("job", &lease.token(), 2_900).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(refused.code(), "max_hold_exceeded");
    assert!(
        refused.body["error"]["expires_in_ms"]
            .as_u64()
            .expect("expires_in_ms")
            > 0
    );
    assert_eq!(
        app.status("job").await.body["held"],
        true,
        "the lease itself stays"
    );
}

#[tokio::test]
async fn busy_answers_say_what_is_in_the_way() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("job", 10_000).await;
    let busy = app.acquire("job", 1_000).await;
    let message = busy.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("held by another lease"), "{message}");
    assert_eq!(busy.body["error"]["fence"], held.fence());

    app.acquire_with("delayed", json!({"ttl_ms": 400, "lock_delay_ms": 5_000}))
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let delayed = app.acquire("delayed", 1_000).await;
    assert_eq!(delayed.code(), "lock_busy");
    assert_eq!(delayed.body["error"]["expires_in_ms"], 0);
    let message = delayed.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("lock-delay"), "{message}");
    assert!(message.contains(" ms"), "says for how long: {message}");
}

/// A release re-sent after the lock went to the next holder (as a client
/// library re-sends a command whose answer a Redis restart lost) still
/// reports the clean release with its own fence, never `lease_lost`; an
/// extend of that lease says its holder released it.
#[tokio::test]
async fn a_release_re_sent_after_the_next_grant_still_reports_the_release() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    for mode in ["exclusive", "shared"] {
        let name = format!("job-{mode}");
        let first = app
            .acquire_with(&name, json!({"ttl_ms": 10_000, "mode": mode}))
            .await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        let released = app.release(&name, &first.token()).await;
        assert_eq!(released.status, StatusCode::OK, "{}", released.body);
        let next = app.acquire(&name, 10_000).await;
        assert_eq!(
            next.status,
            StatusCode::OK,
            "{mode}: the next holder: {}",
            next.body
        );
        let again = app.release(&name, &first.token()).await;
        assert_eq!(again.status, StatusCode::OK, "{mode}: {}", again.body);
        assert_eq!(again.body["released"], true);
        assert_eq!(
            again.body["fence"],
            first.fence(),
            "{mode}: the first lease's fence"
        );
        let extend = app.extend(&name, &first.token(), 10_000).await;
        assert_eq!(
            (extend.status, extend.code()),
            (StatusCode::CONFLICT, "lease_lost")
        );
        let message = extend.body["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("released by its holder"),
            "{mode}: {message}"
        );
        let status = app.status(&name).await;
        assert_eq!(
            status.body["fence"],
            next.fence(),
            "{mode}: the next holder still holds it"
        );
    }
}

#[tokio::test]
async fn an_extend_after_the_holders_own_release_says_it_was_released() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("job", 10_000).await;
    assert_eq!(
        app.release("job", &lease.token()).await.status,
        StatusCode::OK
    );
    let extend = app.extend("job", &lease.token(), 10_000).await;
    assert_eq!(extend.status, StatusCode::CONFLICT);
    assert_eq!(extend.code(), "lease_lost");
    let message = extend.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("already released"), "{message}");
}
