//! What a session refuses: bad fields named and nothing changed, a session
//! not open, a session full; a retried acquire joins once; the metrics.

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

use super::{acquire_in, close, held, kept, open, state};

#[tokio::test]
async fn bad_session_requests_name_the_field_and_change_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 10_000})).await;
    let keep = format!("/v1/sessions/{}/keepalive", session.id);
    let other = open(&app, json!({})).await;
    let cases = [
        (
            "/v1/locks/jobs:a/acquire",
            json!({"session": session.token, "ttl_ms": 5_000}),
            "ttl_ms",
        ),
        (
            "/v1/locks/jobs:a/acquire",
            json!({"session": session.token, "lock_delay_ms": 5}),
            "lock_delay_ms",
        ),
        (
            "/v1/locks/jobs:a/acquire",
            json!({"session": "0123.abc"}),
            "session",
        ),
        ("/v1/locks/jobs:a/acquire", json!({"session": 7}), "session"),
        (
            "/v1/semaphores/jobs:a/acquire",
            json!({"session": "x", "limit": 1}),
            "session",
        ),
        ("/v1/sessions", json!({"ttl_ms": 0}), "ttl_ms"),
        ("/v1/sessions", json!({"ttl_ms": 99}), "ttl_ms"),
        (
            "/v1/sessions",
            json!({"lock_delay_ms": 86_400_000}),
            "lock_delay_ms",
        ),
        ("/v1/sessions", json!({"token": "x"}), "token"),
        (keep.as_str(), json!({}), "token"),
        (keep.as_str(), json!({"token": "not-a-token"}), "token"),
        (
            "/v1/sessions/nothex/keepalive",
            json!({"token": session.token}),
            "id",
        ),
    ];
    for (path, body, field) in cases {
        let refused = app.post(path, body.clone()).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{path} {body}: {}",
            refused.body
        );
        assert_eq!(
            refused.error().field.as_deref(),
            Some(field),
            "{path} {body}: {}",
            refused.body
        );
        assert!(
            !refused.body.to_string().contains(&session.token),
            "a token echoed"
        );
    }
    assert!(!held(&app, "jobs:a").await, "nothing was granted");
    assert_eq!(state(&app, &session).await.leases, 0);

    // Another session's token is no key to this one.
    let path = format!("/v1/sessions/{}/close", session.id);
    let refused = app.post(&path, json!({"token": other.token})).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert_eq!(refused.code(), "session_lost");
    assert!(state(&app, &session).await.open, "still open");
    assert!(state(&app, &other).await.open, "the other, too");
}

#[tokio::test]
async fn a_session_holds_at_most_its_lease_limit() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_leases_per_session = 2;
    let app = TestApp::spawn_with(settings).await;
    let session = open(&app, json!({})).await;
    for name in ["jobs:1", "jobs:2"] {
        let lease = acquire_in(&app, &session, name, json!({})).await;
        assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
    }
    let full = acquire_in(&app, &session, "jobs:3", json!({})).await;
    assert_eq!(full.status, StatusCode::CONFLICT, "{}", full.body);
    assert_eq!(full.code(), "session_full");
    assert!(!held(&app, "jobs:3").await, "nothing was granted");
    assert_eq!(state(&app, &session).await.leases, 2);
}

#[tokio::test]
async fn a_key_holds_at_most_its_sessions_on_a_broker() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_sessions_per_key = 2;
    let app = TestApp::spawn_with(settings).await;
    let first = open(&app, json!({})).await;
    open(&app, json!({})).await;
    let refused = app.post("/v1/sessions", json!({})).await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.body
    );
    assert_eq!(refused.code(), "too_many_sessions");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(close(&app, &first).await.status, StatusCode::OK);
    open(&app, json!({})).await;
}

#[tokio::test]
async fn a_retried_acquire_gets_its_lease_back_and_joins_the_session_once() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({})).await;
    let body = json!({"request_id": "job-7-try"});
    let first = acquire_in(&app, &session, "jobs:retry", body.clone()).await;
    let second = acquire_in(&app, &session, "jobs:retry", body).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(second.token(), first.token(), "the same lease");
    assert_eq!(kept(&app, &session).await.leases, 1);
}

#[tokio::test]
async fn sessions_are_counted_in_the_metrics() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 10_000})).await;
    acquire_in(&app, &session, "jobs:m", json!({})).await;
    kept(&app, &session).await;
    let text = app.metrics().await;
    assert!(text.contains("lockbroker_sessions_open 1"), "{text}");
    assert!(
        text.contains("lockbroker_session_steps_total{outcome=\"ok\",step=\"keepalive\"} 1"),
        "{text}"
    );
    assert!(text.contains("lockbroker_session_leases_sum 1"), "{text}");
    assert!(
        !text.contains(&session.token) && !text.contains(&session.id),
        "no session label"
    );
    assert_eq!(close(&app, &session).await.status, StatusCode::OK);
    let text = app.metrics().await;
    assert!(text.contains("lockbroker_sessions_open 0"), "{text}");
    assert!(
        text.contains("lockbroker_session_steps_total{outcome=\"ok\",step=\"close\"} 1"),
        "{text}"
    );
}
