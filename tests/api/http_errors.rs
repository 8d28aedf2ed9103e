//! Requests that fail before any handler runs still get the one JSON error
//! shape: what hyper refuses to parse, bodies announced over the limit, and
//! ambiguous credentials.

use std::time::{Duration, Instant};

use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_tests::app::{parse_raw, test_settings};
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

/// Sends `request` raw and returns the status and JSON body of the answer.
async fn raw(app: &TestApp, request: &[u8]) -> (u16, serde_json::Value) {
    let answer = app
        .raw_exchange(request, Duration::from_secs(5))
        .await
        .expect("the broker answers and closes the connection");
    parse_raw(&answer)
}

#[tokio::test]
async fn requests_hyper_cannot_parse_get_json_errors() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let long_path = format!(
        "GET /v1/locks/{} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let many_headers = format!(
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n{}\r\n",
        (0..200)
            .map(|i| format!("x-h{i}: v\r\n"))
            .collect::<String>()
    );
    let huge_header = format!(
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nx-big: {}\r\n\r\n",
        "v".repeat(1024 * 1024)
    );
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "bad request line",
            b"GARBAGE\r\n\r\n".to_vec(),
            400,
            "invalid_request",
        ),
        (
            "NUL in a header",
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nx-a: a\0b\r\n\r\n".to_vec(),
            400,
            "invalid_request",
        ),
        (
            "conflicting Content-Length",
            b"POST /v1/locks/a/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\
              Content-Length: 3\r\n\r\n{}"
                .to_vec(),
            400,
            "invalid_request",
        ),
        ("a 100 KB path", long_path.into_bytes(), 414, "uri_too_long"),
        (
            "200 headers",
            many_headers.into_bytes(),
            431,
            "headers_too_large",
        ),
        (
            "a 1 MB header",
            huge_header.into_bytes(),
            431,
            "headers_too_large",
        ),
    ];
    for (what, request, status, code) in cases {
        let (got, body) = raw(&app, &request).await;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        assert!(body["error"]["message"].is_string(), "{what}: {body}");
    }
    // Still serving, and nothing was written.
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
    assert!(redis.conn().keys(&format!("{}:{{*", app.prefix)).is_empty());
}

#[tokio::test]
async fn a_body_announced_over_the_limit_gets_413_at_once() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.body_read_timeout_ms = 10_000;
    let app = TestApp::spawn_with(settings).await;
    let started = Instant::now();
    // The header announces 10 MB; not one byte of it follows.
    let (status, body) = raw(
        &app,
        b"POST /v1/locks/big/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n",
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered from the header, not after the 10 s body read timeout"
    );
    assert_eq!(app.status("big").await.body["held"], false);
}

const WORKER: &str = "worker-key-5b1c7e0d";

#[tokio::test]
async fn credentials_are_one_header_and_refusals_say_which_problem() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.auth.keys = vec![ApiKeyConfig {
        id: "worker".into(),
        sha256: hash_token(WORKER),
        scopes: vec![Scope::Lock],
        prefixes: vec!["*".into()],
        rate_limit_per_sec: None,
    }];
    let app = TestApp::spawn_with(settings).await;
    let path = app.url("/v1/locks/job/acquire");

    let twice = app
        .send(
            app.http
                .post(&path)
                .header("authorization", format!("Bearer {WORKER}"))
                .header("authorization", "Bearer someone-else")
                .json(&json!({})),
        )
        .await;
    assert_eq!(twice.status, StatusCode::BAD_REQUEST, "{}", twice.body);
    assert_eq!(twice.code(), "invalid_request");
    let status = app
        .send(app.http.get(app.url("/v1/locks/job")).bearer_auth(WORKER))
        .await;
    assert_eq!(status.body["held"], false, "nothing was acquired");

    let missing = app.send(app.http.post(&path).json(&json!({}))).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    let message = missing.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("needs an API key"), "{message}");

    let wrong = app
        .send(
            app.http
                .post(&path)
                .bearer_auth("not-a-key")
                .json(&json!({})),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let message = wrong.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("was not accepted"), "{message}");
    assert!(!message.contains("not-a-key"), "never echo a credential");
}
