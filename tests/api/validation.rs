//! Bad input gets a 4xx JSON error that names the field, and changes nothing.

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

/// Asserts a 400 `invalid_request` naming `field`, and that Redis holds no key
/// of this broker afterwards.
async fn assert_rejected(app: &TestApp, redis: &RedisServer, path: &str, body: &str, field: &str) {
    let reply = app.post_raw(path, body.to_owned()).await;
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "{path} {body}: {:?}",
        reply.body
    );
    assert_eq!(reply.code(), "invalid_request", "{path} {body}");
    assert_eq!(
        reply.body["error"]["field"], field,
        "{path} {body}: {:?}",
        reply.body
    );
    let message = reply.body["error"]["message"].as_str().expect("message");
    assert!(
        message.contains(field),
        "message names the field: {message}"
    );
    let keys = redis.conn().keys(&format!("{}:{{*", app.prefix));
    assert!(keys.is_empty(), "{path} {body} wrote {keys:?}");
}

#[tokio::test]
async fn bad_lock_names_are_rejected() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let long = "x".repeat(201);
    for name in [
        "a%20b",         // space
        "%C3%A9t%C3%A9", // unicode
        "%7Bx%7D",       // braces would break the Redis hash tag
        "a*",
        "a%3F",  // ?
        "a%2Fb", // percent-encoded slash
        "a%00b",
        long.as_str(),
    ] {
        assert_rejected(
            &app,
            &redis,
            &format!("/v1/locks/{name}/acquire"),
            "{}",
            "name",
        )
        .await;
    }
    let status = app.get("/v1/locks/a%20b").await;
    assert_eq!(status.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        app.acquire(&"x".repeat(200), 1_000).await.status,
        StatusCode::OK,
        "200 is fine"
    );
}

#[tokio::test]
async fn bad_acquire_fields_are_rejected() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let path = "/v1/locks/job/acquire";
    let long_owner = json!({"owner": "o".repeat(257)}).to_string();
    let long_request_id = json!({"request_id": "r".repeat(129)}).to_string();
    let cases: &[(&str, &str)] = &[
        (r#"{"ttl_ms": 0}"#, "ttl_ms"),
        (r#"{"ttl_ms": 86400001}"#, "ttl_ms"),
        (r#"{"ttl_ms": "1000"}"#, "ttl_ms"),
        (r#"{"ttl_ms": -5}"#, "ttl_ms"),
        (r#"{"ttl_ms": 1.5}"#, "ttl_ms"),
        (r#"{"ttl_ms": 1e400}"#, "ttl_ms"),
        (r#"{"ttl_ms": 184467440737095516150}"#, "ttl_ms"),
        (r#"{"ttl_ms": 18446744073709551615}"#, "ttl_ms"),
        (r#"{"wait_ms": -1}"#, "wait_ms"),
        (r#"{"lock_delay_ms": 60001}"#, "lock_delay_ms"),
        (&long_owner, "owner"),
        (r#"{"owner": 7}"#, "owner"),
        (&long_request_id, "request_id"),
        (r#"{"request_id": ""}"#, "request_id"),
        (r#"{"ttl_ms": 1000, "colour": "red"}"#, "colour"),
        (r#"{"ttl_ms": 1000, "ttl_ms": 2000}"#, "ttl_ms"),
        (r#"{"ttl_ms": 1000"#, "body"),
        ("not json", "body"),
        (r#"[1000]"#, "body"),
        (r#"{"ttl_ms": 1000} trailing"#, "body"),
    ];
    for (body, field) in cases {
        assert_rejected(&app, &redis, path, body, field).await;
    }
}

#[tokio::test]
async fn deeply_nested_json_is_rejected() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let deep = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
    for body in [deep.clone(), format!(r#"{{"owner": {deep}}}"#)] {
        let reply = app.post_raw("/v1/locks/job/acquire", body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.code(), "invalid_request");
    }
    assert!(redis.conn().keys(&format!("{}:{{*", app.prefix)).is_empty());
}

#[tokio::test]
async fn extend_and_release_need_a_well_formed_token() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    for verb in ["extend", "release"] {
        let path = format!("/v1/locks/job/{verb}");
        assert_rejected(&app, &redis, &path, "{}", "token").await;
        assert_rejected(&app, &redis, &path, r#"{"token": ""}"#, "token").await;
        assert_rejected(&app, &redis, &path, r#"{"token": "has spaces"}"#, "token").await;
        let long = json!({"token": "t".repeat(129)}).to_string();
        assert_rejected(&app, &redis, &path, &long, "token").await;
    }
    assert_rejected(
        &app,
        &redis,
        "/v1/locks/job/extend",
        r#"{"token": "abc", "ttl_ms": 0}"#,
        "ttl_ms",
    )
    .await;
}

#[tokio::test]
async fn an_oversized_body_gets_413() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let body = json!({"owner": "o".repeat(20_000)}).to_string();

    let reply = app.post_raw("/v1/locks/job/acquire", body).await;

    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.code(), "payload_too_large");
    assert!(redis.conn().keys(&format!("{}:{{*", app.prefix)).is_empty());
}

#[tokio::test]
async fn unknown_routes_and_methods_get_json_errors() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;

    let missing = app.get("/v1/nothing-here").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "not_found");

    let wrong_method = app.get("/v1/locks/job/acquire").await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(wrong_method.code(), "method_not_allowed");
}
