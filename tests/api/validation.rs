//! Bad input gets a 4xx JSON error that names the field, and changes nothing.

use lockbroker_tests::app::test_settings;
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
        r#"{"token": "0123456789abcdef0123456789abcdef", "ttl_ms": 0}"#,
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

#[tokio::test]
async fn hidden_characters_in_free_text_are_rejected_naming_the_field() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let hidden = [
        "\u{202e}1-rekrow-SSAP",
        "worker\u{2066}-1\u{2069}",
        "worker\u{200b}1",
        "\u{200f}worker",
        "\u{feff}worker",
        "worker\u{2028}1",
        "worker\u{2029}1",
        "soft\u{ad}hyphen",
        "tag\u{e0041}",
    ];
    for text in hidden {
        for (path, extra) in [
            ("/v1/locks/job/acquire", json!({})),
            ("/v1/semaphores/job/acquire", json!({"limit": 2})),
        ] {
            for field in ["owner", "request_id"] {
                let mut body = extra.clone();
                body[field] = json!(text);
                assert_rejected(&app, &redis, path, &body.to_string(), field).await;
            }
        }
    }
    // Names and prefixes take ASCII only, so these are refused as well.
    let status = app.get("/v1/locks/%E2%80%AEjob").await;
    assert_eq!(status.body["error"]["field"], "name", "{}", status.body);
    let list = app.get("/v1/locks?prefix=%E2%80%AE").await;
    assert_eq!(list.body["error"]["field"], "prefix", "{}", list.body);
    // Visible text beyond ASCII is still welcome.
    let lease = app
        .acquire_with("job", json!({"owner": "Zoë ✓ 日本"}))
        .await;
    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
}

#[tokio::test]
async fn only_a_json_object_is_a_body() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    for (path, body) in [
        (
            "/v1/locks/job/acquire",
            r#"[60000, null, "owner", null, null, false, "shared"]"#,
        ),
        ("/v1/locks/job/acquire", "[]"),
        ("/v1/locks/job/acquire", "null"),
        ("/v1/locks/job/acquire", "true"),
        ("/v1/locks/job/acquire", "60000"),
        ("/v1/locks/job/acquire", r#""owner""#),
        ("/v1/semaphores/job/acquire", "[3, 60000]"),
    ] {
        assert_rejected(&app, &redis, path, body, "body").await;
    }
    let held = app.acquire("job", 30_000).await;
    for verb in ["release", "extend"] {
        let body = json!([held.token(), 60_000]).to_string();
        let reply = app.post_raw(&format!("/v1/locks/job/{verb}"), body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
        assert_eq!(reply.body["error"]["field"], "body");
    }
    assert_eq!(app.status("job").await.body["fence"], held.fence());
}

#[tokio::test]
async fn a_malformed_token_is_invalid_not_a_lost_lease() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("job", 30_000).await;
    let token = held.token();
    let upper = token.to_ascii_uppercase();
    let short = token[..31].to_owned();
    let wrong_prefix = format!("x-{token}");
    for bad in ["X", upper.as_str(), short.as_str(), wrong_prefix.as_str()] {
        for verb in ["extend", "release"] {
            let reply = app
                .post(&format!("/v1/locks/job/{verb}"), json!({"token": bad}))
                .await;
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{bad}: {}",
                reply.body
            );
            assert_eq!(reply.code(), "invalid_request");
            assert_eq!(reply.body["error"]["field"], "token");
            let message = reply.body["error"]["message"].as_str().expect("message");
            assert!(
                !message.contains(bad),
                "the message echoes the token: {message}"
            );
            assert!(!message.contains("duplicated"), "{message}");
        }
    }
    assert_eq!(app.status("job").await.body["fence"], held.fence());
    // A well-formed token of no lease is still a lost lease.
    let unknown = app.release("job", "0123456789abcdef0123456789abcdef").await;
    assert_eq!(unknown.code(), "lease_lost", "{}", unknown.body);
}

#[tokio::test]
async fn broken_json_says_where_and_what_was_expected() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    for (body, expected) in [
        ("{\"ttl_ms\": tru}", "body: is not valid JSON: expected `true`, `false` or `null` at line 1, column 15"),
        ("{\"ttl_ms\":\n 1000,}", "body: is not valid JSON: trailing comma at line 2, column 7"),
        ("{\"ttl_ms\": 1000} {}", "body: is not valid JSON: expected the end of the body after one JSON object at line 1, column 18"),
    ] {
        let reply = app.post_raw("/v1/locks/job/acquire", body).await;
        assert_eq!(reply.body["error"]["field"], "body", "{body}");
        assert_eq!(reply.body["error"]["message"], expected, "{body}");
    }
}

#[tokio::test]
async fn a_refusal_under_max_hold_names_the_setting() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_hold_ms = Some(5_000);
    let app = TestApp::spawn_with(settings).await;
    let long = app.acquire("job", 10_000).await;
    assert_eq!(long.body["error"]["field"], "ttl_ms", "{}", long.body);
    let message = long.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("locks.max_hold_ms"), "{message}");

    // 1.2 s into the hold, 4.5 s more would end past the 5 s it may last.
    let held = app.acquire("job", 4_000).await;
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    let past = app.extend("job", &held.token(), 4_500).await;
    assert_eq!(past.code(), "max_hold_exceeded", "{}", past.body);
    let message = past.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("locks.max_hold_ms"), "{message}");
}
