//! `GET /v1/locks/{name}/fence/{fence}` and its semaphore twin: whether a
//! valid lease carries exactly that fence now, for a resource that keeps no
//! state. Never a token; a bad fence is a 400 naming `fence`.

use std::time::Duration;

use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::json;

/// The check of `fence` on the lock `name`, which must answer 200.
async fn check(app: &TestApp, name: &str, fence: u64) -> Reply {
    let reply = app.get(&format!("/v1/locks/{name}/fence/{fence}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    reply
}

fn assert_no_token(reply: &Reply, token: &str) {
    let text = reply.body.to_string();
    assert!(!text.contains(token), "a token in {text}");
    assert!(reply.body.get("token").is_none(), "{text}");
}

#[tokio::test]
async fn a_fence_is_current_while_its_lease_holds_and_never_after() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("ledger", 10_000).await;
    let (fence, token) = (lease.fence(), lease.token());

    let held = check(&app, "ledger", fence).await;
    assert_eq!(
        (
            &held.body["name"],
            &held.body["fence"],
            &held.body["current"],
            &held.body["held"]
        ),
        (&json!("ledger"), &json!(fence), &json!(true), &json!(true)),
    );
    let expires = held.body["expires_in_ms"].as_u64().expect("expires_in_ms");
    assert!(expires > 0 && expires <= 10_000, "{expires}");
    assert_no_token(&held, &token);
    let older = check(&app, "ledger", fence - 1).await;
    assert_eq!(
        (&older.body["current"], &older.body["held"]),
        (&json!(false), &json!(true))
    );
    assert_no_token(&older, &token);

    app.release("ledger", &token).await;
    let released = check(&app, "ledger", fence).await;
    assert_eq!(
        (
            &released.body["current"],
            &released.body["held"],
            &released.body["expires_in_ms"]
        ),
        (&json!(false), &json!(false), &json!(0)),
    );

    let next = app.acquire("ledger", 10_000).await;
    let replaced = check(&app, "ledger", fence).await;
    assert_eq!(
        (&replaced.body["current"], &replaced.body["held"]),
        (&json!(false), &json!(true))
    );
    assert_eq!(
        check(&app, "ledger", next.fence()).await.body["current"],
        true
    );
    let forced = app.send(app.http.delete(app.url("/v1/locks/ledger"))).await;
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.body);
    assert_eq!(
        check(&app, "ledger", next.fence()).await.body["current"],
        false,
        "force-released"
    );
}

#[tokio::test]
async fn an_expired_lease_is_not_current_during_its_lock_delay() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app
        .acquire_with("batch", json!({"ttl_ms": 200, "lock_delay_ms": 10_000}))
        .await;
    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
    assert_eq!(
        check(&app, "batch", lease.fence()).await.body["current"],
        true
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let expired = check(&app, "batch", lease.fence()).await;
    assert_eq!(
        (&expired.body["current"], &expired.body["held"]),
        (&json!(false), &json!(false))
    );
    // Still unavailable: the lock-delay is what the check must not mistake.
    assert_eq!(app.acquire("batch", 1_000).await.status, StatusCode::LOCKED);
}

#[tokio::test]
async fn shared_leases_and_permits_are_checked_one_by_one() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let shared = json!({"ttl_ms": 10_000, "mode": "shared"});
    let (one, two) = (
        app.acquire_with("report", shared.clone()).await,
        app.acquire_with("report", shared).await,
    );
    app.release("report", &one.token()).await;
    assert_eq!(
        check(&app, "report", one.fence()).await.body["current"],
        false
    );
    let reader = check(&app, "report", two.fence()).await;
    assert_eq!(reader.body["current"], true);
    assert_no_token(&reader, &two.token());

    let permit = app
        .post(
            "/v1/semaphores/gpus/acquire",
            json!({"ttl_ms": 10_000, "limit": 2}),
        )
        .await;
    assert_eq!(permit.status, StatusCode::OK, "{}", permit.body);
    let (fence, token) = (
        &permit.body["fence"],
        permit.body["token"].as_str().expect("token"),
    );
    let path = format!("/v1/semaphores/gpus/fence/{fence}");
    let held = app.get(&path).await;
    assert_eq!(
        (held.status, &held.body["current"]),
        (StatusCode::OK, &json!(true)),
        "{}",
        held.body
    );
    assert_no_token(&held, token);
    let released = app
        .post("/v1/semaphores/gpus/release", json!({"token": token}))
        .await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.body);
    assert_eq!(app.get(&path).await.body["current"], false);
}

#[tokio::test]
async fn a_fence_that_is_not_a_positive_integer_is_refused_naming_fence() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    for bad in [
        "0",
        "-3",
        "abc",
        "1.5",
        "9007199254740992",
        "99999999999999999999999",
    ] {
        for family in ["locks", "semaphores"] {
            let reply = app.get(&format!("/v1/{family}/job/fence/{bad}")).await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{family} {bad}: {}",
                reply.body
            );
            assert_eq!(reply.code(), "invalid_request", "{bad}");
            assert_eq!(
                reply.error().field.as_deref(),
                Some("fence"),
                "{bad}: {}",
                reply.body
            );
        }
    }
}

#[tokio::test]
async fn a_check_needs_the_lock_scope_and_a_prefix_covering_the_name() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.auth.keys = vec![ApiKeyConfig {
        id: "reader".to_owned(),
        sha256: hash_token("reader-key-1f2e3d4c5b6a"),
        scopes: vec![Scope::Lock],
        prefixes: vec!["jobs:".to_owned()],
        rate_limit_per_sec: None,
    }];
    let app = TestApp::spawn_with(settings).await;
    let get = |path: &str| {
        app.http
            .get(app.url(path))
            .bearer_auth("reader-key-1f2e3d4c5b6a")
    };
    let ok = app.send(get("/v1/locks/jobs:a/fence/1")).await;
    assert_eq!(
        (ok.status, &ok.body["current"]),
        (StatusCode::OK, &json!(false)),
        "{}",
        ok.body
    );
    assert_eq!(
        app.send(get("/v1/locks/other/fence/1")).await.status,
        StatusCode::FORBIDDEN
    );
    let anonymous = app.get("/v1/locks/jobs:a/fence/1").await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}
