//! Sessions: one keepalive keeps every lease under it, a close releases
//! them all, an expiry ends them all at the session's TTL (lock-delay and
//! waiters as for any lease), and the token stays the opener's secret.

use std::time::Duration;

use lockbroker_api::{SessionRenewalResponse, SessionResponse, SessionStatusResponse};
use lockbroker_tests::{Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

mod ending;
mod requests;
mod streams;

/// Opens a session with `body` and returns it; panics unless `200`.
async fn open(app: &TestApp, body: Value) -> SessionResponse {
    let opened = app.post("/v1/sessions", body).await;
    assert_eq!(opened.status, StatusCode::OK, "{}", opened.body);
    opened.decode()
}

async fn keepalive(app: &TestApp, session: &SessionResponse) -> Reply {
    let path = format!("/v1/sessions/{}/keepalive", session.id);
    app.post(&path, json!({"token": session.token})).await
}

async fn kept(app: &TestApp, session: &SessionResponse) -> SessionRenewalResponse {
    let kept = keepalive(app, session).await;
    assert_eq!(kept.status, StatusCode::OK, "{}", kept.body);
    kept.decode()
}

async fn close(app: &TestApp, session: &SessionResponse) -> Reply {
    let path = format!("/v1/sessions/{}/close", session.id);
    app.post(&path, json!({"token": session.token})).await
}

async fn state(app: &TestApp, session: &SessionResponse) -> SessionStatusResponse {
    let read = app.get(&format!("/v1/sessions/{}", session.id)).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.body);
    assert!(!read.body.to_string().contains(&session.token), "a token");
    read.decode()
}

/// An acquire of `name` under `session`, with `extra` fields.
async fn acquire_in(app: &TestApp, session: &SessionResponse, name: &str, extra: Value) -> Reply {
    let mut body = json!({"session": session.token});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    app.acquire_with(name, body).await
}

async fn held(app: &TestApp, name: &str) -> bool {
    app.status(name).await.body["held"] == true
}

#[tokio::test]
async fn a_session_keeps_every_lease_under_it_and_a_close_releases_them_all() {
    let redis = lockbroker_tests::RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 1_500, "owner": "batch-7"})).await;
    assert_eq!((session.ttl_ms, session.lock_delay_ms), (1_500, 0));
    assert_eq!(session.owner.as_deref(), Some("batch-7"));

    let lock = acquire_in(&app, &session, "ledger:a", json!({})).await;
    assert_eq!(lock.status, StatusCode::OK, "{}", lock.body);
    assert_eq!(
        lock.body["owner"], "batch-7",
        "the session's owner, named by none"
    );
    assert!(
        lock.lease().ttl_ms <= 1_500,
        "the session's TTL: {}",
        lock.body
    );
    let shared = acquire_in(&app, &session, "ledger:b", json!({"mode": "shared"})).await;
    assert_eq!(shared.body["mode"], "shared", "{}", shared.body);
    let permit = app
        .post(
            "/v1/semaphores/render/acquire",
            json!({"session": session.token, "limit": 2}),
        )
        .await;
    assert_eq!(permit.status, StatusCode::OK, "{}", permit.body);
    let pair = app
        .post(
            "/v1/locks/acquire-all",
            json!({"session": session.token, "locks": [{"name": "ledger:c"}, {"name": "ledger:d"}]}),
        )
        .await;
    assert_eq!(pair.status, StatusCode::OK, "{}", pair.body);
    let read = state(&app, &session).await;
    assert!(read.open && read.expires_in_ms > 0, "{read:?}");
    assert_eq!(
        (read.leases, read.ttl_ms, read.lock_delay_ms),
        (5, Some(1_500), Some(0))
    );

    // Three TTLs long, kept by the session's keepalives only.
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let renewal = kept(&app, &session).await;
        assert_eq!((renewal.leases, renewal.ended.len()), (5, 0), "{renewal:?}");
    }
    for name in ["ledger:a", "ledger:b", "ledger:c", "ledger:d"] {
        assert!(held(&app, name).await, "{name} held under the session");
    }
    assert_eq!(app.status("ledger:a").await.fence(), lock.fence());
    assert_eq!(app.get("/v1/semaphores/render").await.body["held"], 1);

    let closed = close(&app, &session).await;
    assert_eq!(closed.status, StatusCode::OK, "{}", closed.body);
    assert_eq!(closed.body["leases_released"], 5, "{}", closed.body);
    for name in ["ledger:a", "ledger:b", "ledger:c", "ledger:d"] {
        let status = app.status(name).await;
        assert_eq!(status.body["held"], false, "{name}: {}", status.body);
        assert_eq!(
            status.body["available_in_ms"], 0,
            "no lock-delay after a close"
        );
    }
    assert_eq!(app.get("/v1/semaphores/render").await.body["held"], 0);
    let read = state(&app, &session).await;
    assert!(!read.open && read.expires_in_ms == 0, "{read:?}");

    // Re-sent, a close answers as the first did, releasing nothing more.
    let again = close(&app, &session).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.body["leases_released"], 0);
    for refused in [
        keepalive(&app, &session).await,
        acquire_in(&app, &session, "ledger:e", json!({})).await,
    ] {
        assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
        assert_eq!(refused.code(), "session_lost");
        assert!(!refused.body.to_string().contains(&session.token));
    }
    assert!(!held(&app, "ledger:e").await);
}

#[tokio::test]
async fn a_session_of_100_leases_stays_alive_on_one_keepalive_a_second() {
    let redis = lockbroker_tests::RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 2_500})).await;
    let mut fences = Vec::new();
    for at in 0..100 {
        let lease = acquire_in(&app, &session, &format!("batch:{at}"), json!({})).await;
        assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
        fences.push(lease.fence());
    }
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let renewal = kept(&app, &session).await;
        assert_eq!((renewal.leases, renewal.ended.len()), (100, 0));
        assert_eq!(renewal.ttl_ms, 2_500);
    }
    for (at, fence) in fences.iter().enumerate() {
        let status = app.status(&format!("batch:{at}")).await;
        assert_eq!(
            status.body["held"], true,
            "batch:{at} after 10 s: {}",
            status.body
        );
        assert_eq!(status.fence(), *fence, "the same lease");
        let left = status.body["expires_in_ms"].as_u64().unwrap_or(0);
        assert!(left <= 2_500, "tied to the session: {left}");
    }
    assert_eq!(state(&app, &session).await.leases, 100);
    assert_eq!(close(&app, &session).await.body["leases_released"], 100);
    assert!(!held(&app, "batch:0").await && !held(&app, "batch:99").await);
}
