//! How a session's leases end: at the session's TTL when its holder dies
//! (lock-delay and waiters as for any expiry), never past the session when
//! granted after a wait, and never past it by an extend of their own.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

use super::{acquire_in, held, kept, open, state};

/// A holder process that keeps `session` alive every 300 ms until killed.
fn keeping_holder(app: &TestApp, id: &str, token: &str) -> std::process::Child {
    let url = app.url(&format!("/v1/sessions/{id}/keepalive"));
    let body = format!("{{\"token\":\"{token}\"}}");
    let script = format!(
        "while true; do curl -s -o /dev/null -X POST -H 'content-type: application/json' \
         -d '{body}' '{url}'; sleep 0.3; done"
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the holder")
}

#[tokio::test]
async fn a_killed_holder_frees_every_lock_at_the_session_ttl_after_its_lock_delay() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 1_500, "lock_delay_ms": 600})).await;
    let lease = acquire_in(&app, &session, "jobs:a", json!({})).await;
    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
    acquire_in(&app, &session, "jobs:b", json!({})).await;
    let mut holder = keeping_holder(&app, &session.id, &session.token);

    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(
        held(&app, "jobs:a").await,
        "kept past its TTL by the holder"
    );
    let waiter = {
        let (base, http) = (app.base.clone(), app.http.clone());
        tokio::spawn(async move {
            let answer = http
                .post(format!("{base}/v1/locks/jobs:a/acquire"))
                .json(&json!({"ttl_ms": 10_000, "wait_ms": 8_000}))
                .send()
                .await
                .expect("waiter's acquire");
            (answer.status(), Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder.kill().expect("SIGKILL the holder");
    let killed_at = Instant::now();
    let _ = holder.wait();

    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        held(&app, "jobs:b").await,
        "the session's last keepalive still holds"
    );
    let delayed = loop {
        let status = app.status("jobs:b").await;
        if status.body["held"] == false {
            break status;
        }
        assert!(killed_at.elapsed() < Duration::from_secs(5), "never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let freed_after = killed_at.elapsed();
    assert!(
        delayed.body["available_in_ms"].as_u64() > Some(0),
        "an expiry's lock-delay: {}",
        delayed.body
    );
    assert!(
        freed_after <= Duration::from_millis(1_500 + 1_000),
        "at the session's TTL: {freed_after:?}"
    );
    let (granted, at) = waiter.await.expect("waiter");
    assert_eq!(granted, StatusCode::OK, "the waiter was woken and granted");
    let waited = at.duration_since(killed_at);
    assert!(
        waited >= Duration::from_millis(600),
        "not before the expiry and its lock-delay: {waited:?}"
    );
    assert!(!state(&app, &session).await.open);
}

#[tokio::test]
async fn a_lease_granted_after_a_wait_ends_no_later_than_its_session() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let blocker = app.acquire("jobs:late", 1_000).await;
    assert_eq!(blocker.status, StatusCode::OK);
    let session = open(&app, json!({"ttl_ms": 4_000})).await;
    let granted = acquire_in(&app, &session, "jobs:late", json!({"wait_ms": 5_000})).await;
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
    assert!(granted.fence() > blocker.fence());
    let lease = granted.lease();
    assert!(
        lease.expires_at_ms <= session.expires_at_ms + 50,
        "the lease ends with its session: {} > {}",
        lease.expires_at_ms,
        session.expires_at_ms
    );
    // A keepalive renews it with the session.
    let renewal = kept(&app, &session).await;
    assert_eq!(renewal.leases, 1);
    let left = app.status("jobs:late").await.body["expires_in_ms"]
        .as_u64()
        .unwrap_or(0);
    assert!(left > 3_000, "renewed to the session's TTL: {left}");
}

#[tokio::test]
async fn a_lease_that_ended_on_its_own_leaves_the_session_at_the_next_keepalive_saying_why() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 10_000})).await;
    let first = acquire_in(&app, &session, "jobs:one", json!({})).await;
    acquire_in(&app, &session, "jobs:two", json!({})).await;
    acquire_in(&app, &session, "jobs:three", json!({})).await;
    assert_eq!(
        app.release("jobs:one", &first.token()).await.status,
        StatusCode::OK
    );
    let forced = app
        .send(app.http.delete(app.url("/v1/locks/jobs:three")))
        .await;
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.body);
    let renewal = kept(&app, &session).await;
    assert_eq!(renewal.leases, 1);
    // Each named with why, as its own extend (which the routes refuse for a
    // lease under a session) would have answered.
    let ended: Vec<_> = (renewal.ended.iter())
        .map(|gone| {
            (
                gone.name.as_str(),
                gone.space.as_str(),
                gone.reason.as_deref(),
                gone.force_released_by.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        ended,
        [
            ("jobs:one", "lock", Some("released"), None),
            (
                "jobs:three",
                "lock",
                Some("force_released"),
                Some("anonymous")
            ),
        ]
    );
    assert_eq!(state(&app, &session).await.leases, 1);
}

#[tokio::test]
async fn a_lease_under_a_session_is_never_extended_on_its_own_and_ends_with_it() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 1_000})).await;
    let lock = acquire_in(&app, &session, "jobs:bound", json!({})).await;
    assert_eq!(lock.status, StatusCode::OK, "{}", lock.body);
    let shared = acquire_in(&app, &session, "jobs:read", json!({"mode": "shared"})).await;
    assert_eq!(shared.status, StatusCode::OK, "{}", shared.body);
    let permit = app
        .post(
            "/v1/semaphores/jobs:slots/acquire",
            json!({"session": session.token, "limit": 2}),
        )
        .await;
    assert_eq!(permit.status, StatusCode::OK, "{}", permit.body);

    let tries = [
        ("/v1/locks/jobs:bound/extend", lock.token()),
        ("/v1/locks/jobs:read/extend", shared.token()),
        (
            "/v1/semaphores/jobs:slots/extend",
            permit.body["token"].as_str().unwrap_or("").to_owned(),
        ),
    ];
    for (path, token) in &tries {
        let extended = app
            .post(path, json!({"token": token, "ttl_ms": 60_000}))
            .await;
        assert_eq!(
            (extended.status, extended.code()),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{path}: {}",
            extended.body
        );
        assert_eq!(
            extended.body["error"]["field"], "token",
            "{}",
            extended.body
        );
        assert!(
            !extended.body.to_string().contains(token.as_str()),
            "a token"
        );
    }
    // Nothing was extended: with no keepalive every lease ends with the
    // session, and the lock is free to another caller.
    let ends = std::time::Instant::now() + Duration::from_secs(5);
    while held(&app, "jobs:bound").await {
        assert!(std::time::Instant::now() < ends, "outlived its session");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!state(&app, &session).await.open);
    assert_eq!(app.status("jobs:read").await.body["held"], false);
    assert_eq!(app.get("/v1/semaphores/jobs:slots").await.body["held"], 0);
    assert_eq!(
        app.acquire("jobs:bound", 1_000).await.status,
        StatusCode::OK
    );
}
