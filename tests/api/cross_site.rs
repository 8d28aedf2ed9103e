//! A broker without API keys takes requests only from its own callers: bodies
//! declared `application/json` (`415` otherwise), no web page of another
//! origin (`403`), and only host names it answers to (`403`, against DNS
//! rebinding). Every refusal leaves the lock as it was. The same requests
//! from a real browser are in `ui.rs`.

use std::time::Duration;

use lockbroker_tests::app::{parse_raw, test_settings};
use lockbroker_tests::{RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn assert_refused(reply: &Reply, status: StatusCode, code: &str, what: &str) {
    assert_eq!(reply.status, status, "{what}: {}", reply.body);
    assert_eq!(reply.code(), code, "{what}: {}", reply.body);
    assert!(reply.body["error"]["message"].is_string(), "{what}");
}

/// `POST path` with `body` declared as `content_type` (none when `None`).
async fn post_as(app: &TestApp, path: &str, content_type: Option<&str>, body: &str) -> Reply {
    let mut request = app.http.post(app.url(path)).body(body.to_owned());
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    app.send(request).await
}

/// Sends `head` (request line and headers, without the blank line) raw on a
/// new connection, with `Connection: close`; the status and JSON body.
async fn raw(app: &TestApp, head: &str) -> (u16, Value) {
    let request = format!("{head}\r\nConnection: close\r\n\r\n");
    let answer = app
        .raw_exchange(request.as_bytes(), Duration::from_secs(5))
        .await
        .expect("the broker answers and closes the connection");
    parse_raw(&answer)
}

fn port(app: &TestApp) -> &str {
    app.base.rsplit(':').next().expect("a port")
}

#[tokio::test]
async fn a_body_not_declared_json_is_refused_415_and_takes_no_lock() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let body = r#"{"ttl_ms": 86400000, "owner": "csrf"}"#;
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        None,
    ] {
        for path in [
            "/v1/locks/csrf/acquire",
            "/v1/semaphores/csrf/acquire",
            "/v1/locks/csrf/release",
        ] {
            let reply = post_as(&app, path, content_type, body).await;
            let what = format!("{path} as {content_type:?}");
            assert_refused(
                &reply,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                &what,
            );
            let message = reply.body["error"]["message"].as_str().unwrap_or("");
            assert!(message.contains("application/json"), "{what}: {message}");
        }
    }
    // A form that names a type but sends nothing is refused too.
    let empty_form = post_as(
        &app,
        "/v1/locks/csrf/acquire",
        Some("application/x-www-form-urlencoded"),
        "",
    )
    .await;
    assert_refused(
        &empty_form,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "empty form",
    );
    assert_eq!(app.status("csrf").await.body["held"], false);
    assert!(redis.conn().keys(&format!("{}:{{*", app.prefix)).is_empty());

    // With its type (and any charset), the same body takes the lock.
    let granted = post_as(
        &app,
        "/v1/locks/csrf/acquire",
        Some("application/json; charset=utf-8"),
        body,
    )
    .await;
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
}

#[tokio::test]
async fn a_request_without_a_body_needs_no_content_type() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    // `curl -X POST .../acquire`: the configured defaults.
    let granted = app
        .send(app.http.post(app.url("/v1/locks/bare/acquire")))
        .await;
    assert_eq!(granted.status, StatusCode::OK, "{}", granted.body);
    let release = app
        .send(app.http.post(app.url("/v1/locks/bare/release")))
        .await;
    assert_refused(
        &release,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "bare release",
    );
    assert_eq!(release.body["error"]["field"], "token");
}

#[tokio::test]
async fn a_page_of_another_origin_is_refused_403_and_changes_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("held", 30_000).await;
    let own = app.base.clone();
    for origin in [
        "http://evil.example",
        "null",
        "http://127.0.0.1:1",
        "https://evil.example:443",
    ] {
        let acquire = app
            .send(
                app.http
                    .post(app.url("/v1/locks/taken/acquire"))
                    .header("origin", origin)
                    .json(&json!({"ttl_ms": 86_400_000})),
            )
            .await;
        assert_refused(&acquire, StatusCode::FORBIDDEN, "forbidden", origin);
        let message = acquire.body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("http.allowed_origins"), "{message}");
        let force = app
            .send(
                app.http
                    .delete(app.url("/v1/locks/held"))
                    .header("origin", origin),
            )
            .await;
        assert_refused(&force, StatusCode::FORBIDDEN, "forbidden", origin);
        let read = app
            .send(
                app.http
                    .get(app.url("/v1/locks/held"))
                    .header("origin", origin),
            )
            .await;
        assert_refused(&read, StatusCode::FORBIDDEN, "forbidden", origin);
    }
    assert_eq!(app.status("taken").await.body["held"], false);
    assert_eq!(app.status("held").await.body["fence"], held.fence());

    // The broker's own pages send its own origin.
    let same = app
        .send(
            app.http
                .post(app.url("/v1/locks/taken/acquire"))
                .header("origin", own.as_str())
                .json(&json!({"ttl_ms": 1_000})),
        )
        .await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
}

#[tokio::test]
async fn an_allowed_origin_is_taken() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.allowed_origins = vec!["https://ops.example.com".into()];
    let app = TestApp::spawn_with(settings).await;
    let acquire = |origin: &'static str| {
        app.http
            .post(app.url("/v1/locks/ops/acquire"))
            .header("origin", origin)
            .json(&json!({"ttl_ms": 1_000}))
    };
    let refused = app.send(acquire("https://other.example.com")).await;
    assert_refused(
        &refused,
        StatusCode::FORBIDDEN,
        "forbidden",
        "unlisted origin",
    );
    let taken = app.send(acquire("https://ops.example.com")).await;
    assert_eq!(taken.status, StatusCode::OK, "{}", taken.body);
}

#[tokio::test]
async fn a_host_name_the_broker_does_not_answer_to_is_refused_403() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("rebound", 30_000).await;
    let port = port(&app);
    // A page of attacker.rebind.example whose name now points at 127.0.0.1
    // is same-origin with itself: only its Host tells it apart.
    for host in [
        format!("attacker.rebind.example:{port}"),
        "attacker.rebind.example".to_owned(),
        format!("localhost.rebind.example:{port}"),
    ] {
        let (status, body) = raw(
            &app,
            &format!("DELETE /v1/locks/rebound HTTP/1.1\r\nHost: {host}"),
        )
        .await;
        assert_eq!(status, 403, "{host}: {body}");
        assert_eq!(body["error"]["code"], "forbidden", "{host}");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("http.allowed_hosts"), "{message}");
        let acquire = format!(
            "POST /v1/locks/rebound-new/acquire HTTP/1.1\r\nHost: {host}\r\n\
             Content-Type: application/json\r\nContent-Length: 0"
        );
        let (status, _) = raw(&app, &acquire).await;
        assert_eq!(status, 403, "{host}");
    }
    let status = app.status("rebound").await;
    assert_eq!(status.body["fence"], held.fence(), "{}", status.body);
    assert_eq!(app.status("rebound-new").await.body["held"], false);

    // Loopback names and addresses are the broker's own on loopback.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".to_owned(),
    ] {
        let (status, body) = raw(
            &app,
            &format!("GET /v1/locks/rebound HTTP/1.1\r\nHost: {host}"),
        )
        .await;
        assert_eq!(status, 200, "{host}: {body}");
    }
}

#[tokio::test]
async fn an_allowed_host_name_is_answered() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.allowed_hosts = vec!["lockbroker.internal".into(), ".svc.example".into()];
    let app = TestApp::spawn_with(settings).await;
    for (host, status) in [
        ("lockbroker.internal:7700", 200),
        ("LockBroker.Internal.", 200),
        ("lockbroker.ops.svc.example", 200),
        ("svc.example", 403),
        ("lockbroker.example", 403),
    ] {
        let (got, body) = raw(&app, &format!("GET /healthz HTTP/1.1\r\nHost: {host}")).await;
        assert_eq!(got, status, "{host}: {body}");
    }
}

#[tokio::test]
async fn host_and_origin_entries_that_are_none_keep_the_broker_from_starting() {
    let redis = RedisServer::start();
    for (hosts, origins) in [
        (vec!["http://lockbroker.internal"], vec![]),
        (vec!["lockbroker.internal:7700"], vec![]),
        (vec![], vec!["*"]),
        (vec![], vec!["ops.example.com"]),
    ] {
        let mut settings = test_settings(&redis);
        settings.http.allowed_hosts = hosts.iter().map(|h| (*h).to_owned()).collect();
        settings.http.allowed_origins = origins.iter().map(|o| (*o).to_owned()).collect();
        let Err(error) = lockbroker_server::Application::build(settings).await else {
            panic!("started with hosts {hosts:?} and origins {origins:?}");
        };
        let message = error.to_string();
        assert!(message.contains("http.allowed_"), "{message}");
    }
}
