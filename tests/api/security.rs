//! Who may touch which locks, the operator routes, TLS, and limits against
//! hostile or careless callers. Every refusal is a 4xx JSON error that changes
//! nothing in Redis; each test checks Redis itself.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_server::{Application, Settings};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::redis::free_port;
use lockbroker_tests::{RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const WORKER: &str = "worker-key-2f8a4c0e9b7d";
const OPS: &str = "ops-key-61c3d9e0a2f4";
const JOBS_OPS: &str = "jobs-ops-key-0d1e2f3a";
const METRICS: &str = "metrics-key-7a6b5c4d";

fn key(id: &str, token: &str, scopes: &[Scope], prefixes: &[&str]) -> ApiKeyConfig {
    ApiKeyConfig {
        id: id.to_owned(),
        sha256: hash_token(token),
        scopes: scopes.to_vec(),
        prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
        rate_limit_per_sec: None,
    }
}

/// Test settings with four keys: a worker limited to `a:`, an operator for
/// everything, an operator limited to `jobs:`, and a metrics scraper.
fn secured_settings(redis: &RedisServer) -> Settings {
    let mut settings = test_settings(redis);
    settings.auth.keys = vec![
        key("worker", WORKER, &[Scope::Lock], &["a:"]),
        key("ops", OPS, &[Scope::Lock, Scope::Admin], &["*"]),
        key("jobs-ops", JOBS_OPS, &[Scope::Admin], &["jobs:"]),
        key("metrics", METRICS, &[Scope::Metrics], &[]),
    ];
    settings
}

/// Every key and value this broker's prefix holds in Redis, to compare before
/// and after a refused request.
fn redis_state(redis: &RedisServer, prefix: &str) -> Vec<String> {
    let mut conn = redis.conn();
    let mut state = Vec::new();
    for key in conn.keys(&format!("{prefix}:*")) {
        let kind = conn.cmd(&["TYPE", &key]).as_text().unwrap_or("").to_owned();
        let value = match kind.as_str() {
            "string" => format!("{:?}", conn.cmd(&["GET", &key])),
            "hash" => format!("{:?}", conn.cmd(&["HGETALL", &key])),
            other => other.to_owned(),
        };
        state.push(format!("{key} = {value}"));
    }
    state
}

async fn call(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> Reply {
    let mut request = app.http.request(method, app.url(path));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    app.send(request).await
}

async fn acquire_as(app: &TestApp, key: &str, name: &str, body: Value) -> Reply {
    call(
        app,
        reqwest::Method::POST,
        &format!("/v1/locks/{name}/acquire"),
        Some(key),
        Some(body),
    )
    .await
}

fn assert_error(reply: &Reply, status: StatusCode, code: &str) {
    assert_eq!(reply.status, status, "{:?}", reply.body);
    assert_eq!(reply.code(), code, "{:?}", reply.body);
    assert!(reply.body["error"]["message"].is_string());
}

#[tokio::test]
async fn lock_routes_need_a_known_key() {
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(secured_settings(&redis)).await;
    let before = redis_state(&redis, &app.prefix);

    let none = app
        .post("/v1/locks/a:1/acquire", json!({"ttl_ms": 1000}))
        .await;
    assert_error(&none, StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(
        none.headers["www-authenticate"],
        "Bearer realm=\"lockbroker\""
    );
    let guessed = acquire_as(&app, "worker-key-2f8a4c0e9b7", "a:1", json!({})).await;
    assert_error(&guessed, StatusCode::UNAUTHORIZED, "unauthorized");
    assert!(!guessed.body.to_string().contains("worker-key"));
    let basic = app
        .send(
            app.http
                .post(app.url("/v1/locks/a:1/acquire"))
                .header("authorization", format!("Basic {WORKER}")),
        )
        .await;
    assert_error(&basic, StatusCode::UNAUTHORIZED, "unauthorized");
    for path in ["/v1/locks/a:1", "/v1/locks"] {
        let reply = app.get(path).await;
        assert_error(&reply, StatusCode::UNAUTHORIZED, "unauthorized");
    }
    assert_eq!(redis_state(&redis, &app.prefix), before);

    // The probes stay open for orchestrators.
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
    assert_eq!(app.get("/readyz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_key_touches_only_its_prefixes_and_scopes() {
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(secured_settings(&redis)).await;

    let mine = acquire_as(&app, WORKER, "a:job", json!({"ttl_ms": 30_000})).await;
    assert_eq!(mine.status, StatusCode::OK, "{:?}", mine.body);
    let before = redis_state(&redis, &app.prefix);

    // A key for prefix `a:` touching `b:x`, on every lock route.
    let others = acquire_as(&app, WORKER, "b:x", json!({"ttl_ms": 1000})).await;
    assert_error(&others, StatusCode::FORBIDDEN, "forbidden");
    let token = mine.token();
    for (method, path, body) in [
        (
            reqwest::Method::POST,
            "/v1/locks/b:x/extend",
            Some(json!({"token": token, "ttl_ms": 1000})),
        ),
        (
            reqwest::Method::POST,
            "/v1/locks/b:x/release",
            Some(json!({"token": token})),
        ),
        (reqwest::Method::GET, "/v1/locks/b:x", None),
        (reqwest::Method::GET, "/v1/locks/a", None),
    ] {
        let reply = call(&app, method, path, Some(WORKER), body).await;
        assert_error(&reply, StatusCode::FORBIDDEN, "forbidden");
    }
    // Lock scope only: no operator routes.
    let list = call(&app, reqwest::Method::GET, "/v1/locks", Some(WORKER), None).await;
    assert_error(&list, StatusCode::FORBIDDEN, "forbidden");
    let force = call(
        &app,
        reqwest::Method::DELETE,
        "/v1/locks/a:job",
        Some(WORKER),
        None,
    )
    .await;
    assert_error(&force, StatusCode::FORBIDDEN, "forbidden");
    // A metrics key takes no locks, an admin key without `lock` scope neither.
    for other in [METRICS, JOBS_OPS] {
        let reply = acquire_as(&app, other, "jobs:1", json!({})).await;
        assert_error(&reply, StatusCode::FORBIDDEN, "forbidden");
    }
    assert_eq!(redis_state(&redis, &app.prefix), before);
}

#[tokio::test]
async fn a_lock_key_takes_and_gives_back_several_locks_only_within_its_prefixes() {
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(secured_settings(&redis)).await;
    let post = |path: &'static str, key: &'static str, body: Value| {
        call(&app, reqwest::Method::POST, path, Some(key), Some(body))
    };

    let both = json!({"locks": [{"name": "a:1"}, {"name": "a:2"}], "ttl_ms": 30_000});
    let taken = post("/v1/locks/acquire-all", WORKER, both.clone()).await;
    assert_eq!(taken.status, StatusCode::OK, "{:?}", taken.body);
    let leases: Vec<Value> = taken.body["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .map(|lease| json!({"name": lease["name"], "token": lease["token"]}))
        .collect();
    let before = redis_state(&redis, &app.prefix);

    // One name outside the key's prefixes refuses the whole request.
    let outside = json!({"locks": [{"name": "a:3"}, {"name": "b:x"}], "ttl_ms": 30_000});
    let refused = post("/v1/locks/acquire-all", WORKER, outside).await;
    assert_error(&refused, StatusCode::FORBIDDEN, "forbidden");
    let mut foreign = leases.clone();
    foreign.push(json!({"name": "b:x", "token": leases[0]["token"]}));
    let refused = post(
        "/v1/locks/release-all",
        WORKER,
        json!({ "leases": foreign }),
    )
    .await;
    assert_error(&refused, StatusCode::FORBIDDEN, "forbidden");
    // Keys without `lock` scope take and release nothing.
    for other in [METRICS, JOBS_OPS] {
        let reply = post("/v1/locks/acquire-all", other, both.clone()).await;
        assert_error(&reply, StatusCode::FORBIDDEN, "forbidden");
        let reply = post("/v1/locks/release-all", other, json!({ "leases": leases })).await;
        assert_error(&reply, StatusCode::FORBIDDEN, "forbidden");
    }
    assert_eq!(redis_state(&redis, &app.prefix), before);

    let released = post("/v1/locks/release-all", WORKER, json!({ "leases": leases })).await;
    assert_eq!(released.status, StatusCode::OK, "{:?}", released.body);
    for result in released.body["results"].as_array().expect("results") {
        assert_eq!(result["released"], true, "{result}");
    }
}

#[tokio::test]
async fn a_token_from_one_lock_is_useless_on_another() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("a:1", 30_000).await;
    app.acquire("a:2", 30_000).await;
    let before = redis_state(&redis, &app.prefix);

    let extend = app.extend("a:2", &held.token(), 60_000).await;
    assert_error(&extend, StatusCode::CONFLICT, "lease_lost");
    let release = app.release("a:2", &held.token()).await;
    assert_error(&release, StatusCode::CONFLICT, "lease_lost");
    let unheld = app.release("a:3", &held.token()).await;
    assert_error(&unheld, StatusCode::CONFLICT, "lease_lost");

    assert_eq!(redis_state(&redis, &app.prefix), before);
    assert_eq!(app.status("a:1").await.body["held"], true);
}

#[tokio::test]
async fn operators_list_held_locks_page_by_page() {
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(secured_settings(&redis)).await;
    let mut tokens = Vec::new();
    for i in 0..25 {
        let reply = acquire_as(
            &app,
            OPS,
            &format!("jobs:{i}"),
            json!({"ttl_ms": 30_000, "owner": format!("worker-{i}")}),
        )
        .await;
        tokens.push(reply.token());
    }
    let other = acquire_as(&app, OPS, "other:1", json!({"ttl_ms": 30_000})).await;
    tokens.push(other.token());
    let released = acquire_as(&app, OPS, "jobs:released", json!({})).await;
    let release = call(
        &app,
        reqwest::Method::POST,
        "/v1/locks/jobs:released/release",
        Some(OPS),
        Some(json!({"token": released.token()})),
    )
    .await;
    assert_eq!(release.status, StatusCode::OK);

    let mut seen = Vec::new();
    let mut cursor = "0".to_owned();
    for _ in 0..100 {
        let page = call(
            &app,
            reqwest::Method::GET,
            &format!("/v1/locks?prefix=jobs:&limit=10&cursor={cursor}"),
            Some(JOBS_OPS),
            None,
        )
        .await;
        assert_eq!(page.status, StatusCode::OK, "{:?}", page.body);
        let text = page.body.to_string();
        assert!(
            tokens.iter().all(|t| !text.contains(t.as_str())),
            "no tokens"
        );
        for lock in page.body["locks"].as_array().expect("locks") {
            assert_eq!(lock["held"], true);
            assert!(lock["fence"].as_u64().is_some());
            assert!(lock["expires_in_ms"].as_u64().expect("ttl") > 0);
            assert!(lock["owner"]
                .as_str()
                .expect("owner")
                .starts_with("worker-"));
            seen.push(lock["name"].as_str().expect("name").to_owned());
        }
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    let mut expected: Vec<String> = (0..25).map(|i| format!("jobs:{i}")).collect();
    expected.sort();
    assert_eq!(seen, expected);

    // A key limited to `jobs:` may not list everything.
    let everything = call(
        &app,
        reqwest::Method::GET,
        "/v1/locks",
        Some(JOBS_OPS),
        None,
    )
    .await;
    assert_error(&everything, StatusCode::FORBIDDEN, "forbidden");
    let all = call(
        &app,
        reqwest::Method::GET,
        "/v1/locks?limit=1000",
        Some(OPS),
        None,
    )
    .await;
    assert_eq!(all.status, StatusCode::OK);
}

#[tokio::test]
async fn bad_listing_queries_are_rejected() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    app.acquire("jobs:1", 30_000).await;
    let before = redis_state(&redis, &app.prefix);
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=abc", "limit"),
        ("limit=99999999999999999999999", "limit"),
        ("cursor=abc", "cursor"),
        ("cursor=007", "cursor"),
        ("prefix=a*", "prefix"),
        ("prefix=%7B", "prefix"),
        ("prefix=%C3%A9", "prefix"),
        ("colour=red", "colour"),
        ("limit=1&limit=2", "limit"),
    ] {
        let reply = app.get(&format!("/v1/locks?{query}")).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "invalid_request");
        assert_eq!(reply.body["error"]["field"], field, "{query}");
    }
    assert_eq!(redis_state(&redis, &app.prefix), before);
}

#[tokio::test]
async fn force_release_frees_the_lock_and_wakes_its_waiters() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let stuck = app
        .acquire_with("job", json!({"ttl_ms": 60_000, "owner": "stuck-worker"}))
        .await;

    let waiter = {
        let http = app.http.clone();
        let url = app.url("/v1/locks/job/acquire");
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = http
                .post(url)
                .json(&json!({"ttl_ms": 10_000, "wait_ms": 20_000}))
                .send()
                .await
                .expect("waiter reaches the broker");
            let status = reply.status();
            let body: Value = reply.json().await.expect("json");
            (status, body, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let forced = app.send(app.http.delete(app.url("/v1/locks/job"))).await;
    assert_eq!(forced.status, StatusCode::OK, "{:?}", forced.body);
    assert_eq!(forced.body["released"], true);
    assert_eq!(forced.body["fence"], stuck.fence());
    assert_eq!(forced.body["owner"], "stuck-worker");

    let (status, body, waited) = waiter.await.expect("waiter task");
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert!(body["fence"].as_u64().expect("fence") > stuck.fence());
    assert!(
        waited < Duration::from_secs(5),
        "woken, not timed out: {waited:?}"
    );

    // The former holder's token is dead: it must treat its work as duplicated.
    let late_extend = app.extend("job", &stuck.token(), 60_000).await;
    assert_error(&late_extend, StatusCode::CONFLICT, "lease_lost");
    let late_release = app.release("job", &stuck.token()).await;
    assert_error(&late_release, StatusCode::CONFLICT, "lease_lost");

    let free = app.send(app.http.delete(app.url("/v1/locks/free"))).await;
    assert_eq!(free.status, StatusCode::OK);
    assert_eq!(free.body["released"], false);
    assert_eq!(free.body["fence"], Value::Null);
}

#[tokio::test]
async fn force_release_wakes_a_fair_waiter_on_another_broker() {
    let redis = RedisServer::start();
    let first = TestApp::spawn(&redis).await;
    let mut shared = test_settings(&redis);
    shared.redis.key_prefix = first.prefix.clone();
    let second = TestApp::spawn_with(shared).await;
    let stuck = first.acquire("shared-job", 60_000).await;

    let waiter = {
        let http = second.http.clone();
        let url = second.url("/v1/locks/shared-job/acquire");
        tokio::spawn(async move {
            let reply = http
                .post(url)
                .json(&json!({"ttl_ms": 10_000, "wait_ms": 20_000, "fair": true}))
                .send()
                .await
                .expect("waiter reaches the broker");
            let status = reply.status();
            let body: Value = reply.json().await.expect("json");
            (status, body, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let forced_at = Instant::now();
    let forced = first
        .send(first.http.delete(first.url("/v1/locks/shared-job")))
        .await;
    assert_eq!(forced.body["released"], true, "{:?}", forced.body);

    let (status, body, granted_at) = waiter.await.expect("waiter task");
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert!(body["fence"].as_u64().expect("fence") > stuck.fence());
    // Woken by the announcement, not by its next periodic look (once a second).
    let handoff = granted_at.duration_since(forced_at);
    assert!(handoff < Duration::from_millis(800), "{handoff:?}");
}

#[tokio::test]
async fn hostile_names_and_bodies_on_every_route_change_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn_with(secured_settings(&redis)).await;
    let held = acquire_as(&app, OPS, "a:held", json!({"ttl_ms": 30_000})).await;
    let token = held.token();
    let before = redis_state(&redis, &app.prefix);
    let long = "x".repeat(201);
    let names = [
        "%7Bx%7D",
        "a%7D",
        "a*",
        "a%3F",
        "a%20b",
        "%E2%98%83",
        "a%2Fb",
        "a%2F..%2Fb",
        "a%00",
        long.as_str(),
    ];
    for name in names {
        for (method, path, body) in [
            (
                reqwest::Method::POST,
                format!("/v1/locks/{name}/acquire"),
                Some(json!({})),
            ),
            (
                reqwest::Method::POST,
                format!("/v1/locks/{name}/extend"),
                Some(json!({"token": token})),
            ),
            (
                reqwest::Method::POST,
                format!("/v1/locks/{name}/release"),
                Some(json!({"token": token})),
            ),
            (reqwest::Method::GET, format!("/v1/locks/{name}"), None),
            (reqwest::Method::DELETE, format!("/v1/locks/{name}"), None),
        ] {
            let reply = call(&app, method.clone(), &path, Some(OPS), body).await;
            assert!(
                reply.status.is_client_error(),
                "{method} {path}: {:?}",
                reply.body
            );
            assert!(reply.body["error"]["code"].is_string(), "{path}");
        }
    }
    let deep = format!("{}{}", "[".repeat(5_000), "]".repeat(5_000));
    let bodies = [
        r#"{"token": "t", "ttl_ms": 1e999}"#.to_owned(),
        r#"{"token": "t", "ttl_ms": 123456789012345678901234567890}"#.to_owned(),
        r#"{"token": "t", "ttl_ms": -0.0}"#.to_owned(),
        format!(r#"{{"token": "{token}", "token": "{token}"}}"#),
        format!(r#"{{"token": {deep}}}"#),
        r#"{"token": "t", "ttl_ms": 1000, "extra": {"a": 1}}"#.to_owned(),
        r#"{"token": null}"#.to_owned(),
        "\u{feff}{}".to_owned(),
    ];
    for verb in ["extend", "release"] {
        for body in &bodies {
            let reply = app
                .send(
                    app.http
                        .post(app.url(&format!("/v1/locks/a:held/{verb}")))
                        .bearer_auth(OPS)
                        .header("content-type", "application/json")
                        .body(body.clone()),
                )
                .await;
            assert_error(&reply, StatusCode::BAD_REQUEST, "invalid_request");
        }
    }
    for body in [
        r#"{"wait_ms": 1e400}"#,
        r#"{"lock_delay_ms": 99999999999999999999999}"#,
        r#"{"ttl_ms": 1000, "ttl_ms": 1000}"#,
    ] {
        let reply = app
            .send(
                app.http
                    .post(app.url("/v1/locks/a:new/acquire"))
                    .bearer_auth(OPS)
                    .header("content-type", "application/json")
                    .body(body),
            )
            .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "invalid_request");
    }
    assert_eq!(redis_state(&redis, &app.prefix), before);
}

/// Opens a raw connection to the broker, for requests no HTTP client sends.
async fn raw_connection(app: &TestApp) -> TcpStream {
    let addr = app.base.trim_start_matches("http://");
    TcpStream::connect(addr).await.expect("connect")
}

/// Reads whatever the broker sends until it closes the connection or `limit`
/// passes; `None` if it was still open then.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(String::from_utf8_lossy(&received).into()),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
            Err(_) => return None,
        }
    }
}

#[tokio::test]
async fn a_slow_request_body_gets_408_and_changes_nothing() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.body_read_timeout_ms = 300;
    let app = TestApp::spawn_with(settings).await;

    let mut stream = raw_connection(&app).await;
    stream
        .write_all(
            b"POST /v1/locks/slow/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"ttl_ms\":",
        )
        .await
        .expect("write");
    let started = Instant::now();
    let response = read_until_closed(&mut stream, Duration::from_secs(5)).await;
    let response = response.unwrap_or_default();
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("\"request_timeout\""), "{response}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(redis.conn().keys(&format!("{}:{{*", app.prefix)).is_empty());
}

#[tokio::test]
async fn headers_trickled_byte_by_byte_are_cut_off() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.header_read_timeout_ms = 500;
    let app = TestApp::spawn_with(settings).await;

    let mut stream = raw_connection(&app).await;
    stream
        .write_all(b"POST /v1/locks/slowloris/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");
    let started = Instant::now();
    let mut closed = false;
    // One header byte every 100 ms would keep a connection without a header
    // deadline open forever.
    for byte in b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
        if stream.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        if read_until_closed(&mut stream, Duration::from_millis(100))
            .await
            .is_some()
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "the broker kept a slowloris connection open");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(redis.conn().keys(&format!("{}:{{*", app.prefix)).is_empty());
    assert_eq!(app.get("/healthz").await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_concurrency_limit_answers_503_overloaded() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.max_concurrent_requests = 2;
    settings.http.body_read_timeout_ms = 5_000;
    settings.locks.max_waiters = 1;
    settings.locks.max_waiters_per_lock = 1;
    let app = TestApp::spawn_with(settings).await;

    // Two requests stuck in their bodies hold both slots.
    let mut stuck = Vec::new();
    for _ in 0..2 {
        let mut stream = raw_connection(&app).await;
        stream
            .write_all(
                b"POST /v1/locks/busy/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                  Content-Length: 10\r\n\r\n{",
            )
            .await
            .expect("write");
        stuck.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let refused = app.acquire("other", 1_000).await;
    assert_error(&refused, StatusCode::SERVICE_UNAVAILABLE, "overloaded");
    assert_eq!(refused.headers["retry-after"], "1");
    assert!(redis.conn().keys(&format!("{}:{{*", app.prefix)).is_empty());

    drop(stuck);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.acquire("other", 1_000).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_key_over_its_rate_limit_gets_429() {
    let redis = RedisServer::start();
    let mut settings = secured_settings(&redis);
    settings.auth.keys[0].rate_limit_per_sec = Some(1);
    settings.auth.rate_limit_burst_secs = 1;
    let app = TestApp::spawn_with(settings).await;

    let first = acquire_as(&app, WORKER, "a:1", json!({"ttl_ms": 30_000})).await;
    assert_eq!(first.status, StatusCode::OK);
    let before = redis_state(&redis, &app.prefix);
    let second = acquire_as(&app, WORKER, "a:2", json!({"ttl_ms": 30_000})).await;
    assert_error(&second, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert_eq!(second.headers["retry-after"], "1");
    assert_eq!(redis_state(&redis, &app.prefix), before);
    // Other keys have buckets of their own.
    let other = acquire_as(&app, OPS, "a:3", json!({})).await;
    assert_eq!(other.status, StatusCode::OK);
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/tls")
        .join(name)
}

fn tls_client() -> reqwest::Client {
    let ca = std::fs::read(fixture("ca.pem")).expect("CA fixture");
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("CA"))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("https client")
}

#[tokio::test]
async fn the_listener_serves_https_with_the_configured_certificate() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.tls_cert_path = Some(fixture("server.pem"));
    settings.http.tls_key_path = Some(fixture("server.key"));
    let app = Application::build(settings).await.expect("broker starts");
    let port = app.local_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));

    let client = tls_client();
    let base = format!("https://localhost:{port}");
    let mut ready = false;
    for _ in 0..100 {
        if let Ok(reply) = client.get(format!("{base}/readyz")).send().await {
            if reply.status() == StatusCode::OK {
                ready = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "the HTTPS listener never became ready");
    let lease = client
        .post(format!("{base}/v1/locks/tls/acquire"))
        .json(&json!({"ttl_ms": 5_000}))
        .send()
        .await
        .expect("acquire over https");
    assert_eq!(lease.status(), StatusCode::OK);
    assert_eq!(lease.version(), reqwest::Version::HTTP_2, "offered by ALPN");
    let ca = std::fs::read(fixture("ca.pem")).expect("CA fixture");
    let http1 = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("CA"))
        .http1_only()
        .build()
        .expect("HTTP/1.1 client")
        .get(format!("{base}/v1/locks/tls"))
        .send()
        .await
        .expect("status over HTTP/1.1 and TLS");
    assert_eq!(http1.version(), reqwest::Version::HTTP_11);
    assert_eq!(http1.status(), StatusCode::OK);

    // Plain HTTP to the HTTPS port gets no answer.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");

    let _ = stop.send(());
    server.await.expect("server task").expect("clean shutdown");
}

#[tokio::test]
async fn the_broker_reaches_redis_over_tls_with_a_user_and_password() {
    let tls_port = free_port().to_string();
    let (cert, key, ca) = (
        fixture("server.pem"),
        fixture("server.key"),
        fixture("ca.pem"),
    );
    let redis = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        cert.to_str().expect("utf-8"),
        "--tls-key-file",
        key.to_str().expect("utf-8"),
        "--tls-ca-cert-file",
        ca.to_str().expect("utf-8"),
        "--tls-auth-clients",
        "no",
        "--user",
        "broker",
        "on",
        ">broker-s3cret",
        "~*",
        "&*",
        "+@all",
    ]);
    let mut settings = test_settings(&redis);
    settings.redis.url = format!("rediss://127.0.0.1:{tls_port}/0");
    settings.redis.username = Some("broker".into());
    settings.redis.password = Some("broker-s3cret".into());
    settings.redis.tls_ca_path = Some(ca);
    let app = TestApp::spawn_with(settings).await;

    let lease = app.acquire("over-tls", 5_000).await;
    assert_eq!(lease.status, StatusCode::OK, "{:?}", lease.body);
    // The lock's one key, its lease hash, was written over TLS.
    assert_eq!(redis.conn().keys(&format!("{}:{{*", app.prefix)).len(), 1);
}

#[tokio::test]
async fn a_public_listener_without_keys_refuses_to_start() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.listen = "0.0.0.0:0".parse().expect("addr");
    let error = Application::build(settings.clone())
        .await
        .err()
        .expect("refused");
    assert!(error.to_string().contains("allow_insecure"), "{error}");

    settings.auth.allow_insecure = true;
    assert!(Application::build(settings.clone()).await.is_ok());

    settings.auth.allow_insecure = false;
    settings.auth.keys = vec![key("ops", OPS, &[Scope::Admin], &["*"])];
    assert!(Application::build(settings).await.is_ok());
}

/// Sends `head` (without the blank line) raw to `127.0.0.1:port`, with
/// `Connection: close`; the status and the body as text.
async fn raw_to(port: u16, head: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!("{head}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let answer = read_until_closed(&mut stream, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    let status = answer.split(' ').nth(1).and_then(|code| code.parse().ok());
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (
        status.unwrap_or_else(|| panic!("not HTTP: {answer:?}")),
        body,
    )
}

#[tokio::test]
async fn the_metrics_listener_answers_only_its_own_host_names_and_origin() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    let port = free_port();
    settings.metrics.listen = Some(([127, 0, 0, 1], port).into());
    settings.http.allowed_hosts = vec!["metrics.example".into()];
    let _app = TestApp::spawn_with(settings).await;

    // A scrape by the listener's address, a loopback name or a listed name.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("metrics.example:{port}"),
    ] {
        let (status, body) = raw_to(port, &format!("GET /metrics HTTP/1.1\r\nHost: {host}")).await;
        assert_eq!(status, 200, "{host}: {body}");
        assert!(body.contains("# TYPE lockbroker_"), "{host}");
    }
    // A page whose name was rebound to the listener, or a page of another
    // origin: refused in the one JSON error shape, no metrics read.
    for head in [
        format!("GET /metrics HTTP/1.1\r\nHost: attacker.example:{port}"),
        "GET /metrics HTTP/1.1\r\nHost: attacker.example".to_owned(),
        format!(
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://attacker.example"
        ),
    ] {
        let (status, body) = raw_to(port, &head).await;
        assert_eq!(status, 403, "{head}: {body}");
        let body: Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(body["error"]["code"], "forbidden", "{head}");
        assert!(body["error"]["message"].is_string(), "{head}");
        assert!(!body.to_string().contains("# TYPE"), "{head}");
    }
}
