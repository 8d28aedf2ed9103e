//! A `request_id` retry returns the lease only to the principal that took it:
//! the same API key. Another key sending the same body is an ordinary acquire.

use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

const BILLING: &str = "billing-key-3e9f1a2b";
const OTHER: &str = "all-locks-key-8c4d2e1f";

fn key(id: &str, token: &str, prefixes: &[&str]) -> ApiKeyConfig {
    ApiKeyConfig {
        id: id.into(),
        sha256: hash_token(token),
        scopes: vec![Scope::Lock],
        prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
        rate_limit_per_sec: None,
    }
}

async fn keyed_app(redis: &RedisServer) -> TestApp {
    let mut settings = test_settings(redis);
    settings.auth.keys = vec![
        key("billing", BILLING, &["billing:"]),
        key("everything", OTHER, &["*"]),
    ];
    TestApp::spawn_with(settings).await
}

async fn acquire_as(app: &TestApp, key: &str, name: &str, body: Value) -> Reply {
    app.send(
        app.http
            .post(app.url(&format!("/v1/locks/{name}/acquire")))
            .bearer_auth(key)
            .json(&body),
    )
    .await
}

#[tokio::test]
async fn another_key_with_the_same_request_id_gets_busy_not_the_token() {
    let redis = RedisServer::start();
    let app = keyed_app(&redis).await;
    for body in [
        json!({"ttl_ms": 10_000, "owner": "w1", "request_id": "job-1"}),
        json!({"ttl_ms": 10_000, "request_id": "job-2"}),
    ] {
        let name = format!("billing:rid-{}", body["request_id"].as_str().unwrap_or(""));
        let first = acquire_as(&app, BILLING, &name, body.clone()).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);

        let stranger = acquire_as(&app, OTHER, &name, body.clone()).await;
        assert_eq!(stranger.status, StatusCode::LOCKED, "{}", stranger.body);
        assert_eq!(stranger.code(), "lock_busy");
        assert!(
            !stranger.body.to_string().contains(&first.token()),
            "the other key never sees the token"
        );

        let retry = acquire_as(&app, BILLING, &name, body).await;
        assert_eq!(retry.status, StatusCode::OK, "{}", retry.body);
        assert_eq!(retry.token(), first.token(), "the same key's retry");
        assert_eq!(retry.fence(), first.fence());
    }
}

#[tokio::test]
async fn without_keys_every_caller_is_one_principal() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let body = json!({"ttl_ms": 10_000, "owner": "w1", "request_id": "job-1"});
    let first = app.acquire_with("anon", body.clone()).await;
    let again = app.acquire_with("anon", body).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.token(), first.token());
    // The owner is part of the match: the same id under another owner is busy.
    let other_owner = app
        .acquire_with(
            "anon",
            json!({"ttl_ms": 10_000, "owner": "w2", "request_id": "job-1"}),
        )
        .await;
    assert_eq!(other_owner.status, StatusCode::LOCKED);
}
