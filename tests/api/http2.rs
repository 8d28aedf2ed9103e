//! HTTP/2 on the same listener as HTTP/1.1: many requests, waiting
//! acquires included, on one connection; a waiter that gives up stops
//! waiting; a connection without a request in progress is closed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::{StatusCode, Version};
use serde_json::{json, Value};

use crate::waiting::{waiters_that_give_up_leave_nothing_behind, waiting_gauge};

/// A client that speaks HTTP/2 from its first byte (prior knowledge), so
/// every request it sends shares one connection.
fn http2_client() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP/2 client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_acquires_share_one_http2_connection_up_to_its_stream_limit() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.max_streams_per_connection = 10;
    let app = TestApp::spawn_with(settings).await;
    let holder = app.acquire("job", 30_000).await;
    let floor = holder.fence();

    // The releases go over HTTP/1.1: with all ten streams waiting, a
    // release on the same connection would queue behind them.
    let client = http2_client();
    let acquire = app.url("/v1/locks/job/acquire");
    let release = app.url("/v1/locks/job/release");
    let waiting: Vec<_> = (0..30)
        .map(|_| {
            let (client, releaser) = (client.clone(), app.http.clone());
            let (acquire, release) = (acquire.clone(), release.clone());
            tokio::spawn(async move {
                let granted = client
                    .post(acquire)
                    .json(&json!({"ttl_ms": 30_000, "wait_ms": 20_000}))
                    .send()
                    .await
                    .expect("acquire");
                assert_eq!(granted.version(), Version::HTTP_2);
                assert_eq!(granted.status(), StatusCode::OK);
                let lease: Value = granted.json().await.expect("lease");
                let released = releaser
                    .post(release)
                    .json(&json!({"token": lease["token"]}))
                    .send()
                    .await
                    .expect("release");
                assert_eq!(released.status(), StatusCode::OK);
                lease["fence"].as_u64().expect("fence")
            })
        })
        .collect();

    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting_gauge(&app).await < 10 {
        assert!(Instant::now() < deadline, "ten acquires never waited");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        waiting_gauge(&app).await,
        10,
        "the connection's stream limit holds the rest at the client"
    );

    app.release("job", &holder.token()).await;
    let mut fences = HashSet::new();
    for waiter in waiting {
        let fence = waiter.await.expect("waiter");
        assert!(fence > floor, "a fence above the holder's");
        assert!(fences.insert(fence), "each grant its own fence");
    }
    assert_eq!(fences.len(), 30);
    assert_eq!(waiting_gauge(&app).await, 0);
}

#[tokio::test]
async fn an_http2_waiter_that_gives_up_stops_waiting_and_its_connection_serves_on() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("job", 30_000).await;
    let client = http2_client();

    waiters_that_give_up_leave_nothing_behind(&redis, &app, &client, &holder).await;
    let again = client
        .post(app.url("/v1/locks/job/acquire"))
        .json(&json!({"ttl_ms": 1_000}))
        .send()
        .await
        .expect("acquire on the same connection");
    assert_eq!(again.version(), Version::HTTP_2);
    assert_eq!(again.status(), StatusCode::OK);
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_but_not_one_with_a_request_in_progress() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.header_read_timeout_ms = 300;
    let app = TestApp::spawn_with(settings).await;

    // The preface and then nothing: without a deadline of its own, an
    // HTTP/2 connection would hold one of http.max_connections for good.
    let started = Instant::now();
    let answered = app
        .raw_exchange(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Duration::from_secs(3))
        .await;
    assert!(answered.is_some(), "the idle connection was left open");
    let closed_after = started.elapsed();
    assert!(
        closed_after >= Duration::from_millis(300),
        "closed {closed_after:?} after opening, before the timeout"
    );

    // A waiting acquire is a request in progress for all of its wait, here
    // more than twice the timeout.
    let holder = app.acquire("job", 1_000).await;
    let client = http2_client();
    let waited = client
        .post(app.url("/v1/locks/job/acquire"))
        .json(&json!({"ttl_ms": 1_000, "wait_ms": 5_000}))
        .send()
        .await
        .expect("a waiter on an HTTP/2 connection");
    assert_eq!(waited.status(), StatusCode::OK);
    let lease: Value = waited.json().await.expect("lease");
    assert!(lease["fence"].as_u64() > Some(holder.fence()));
}

#[tokio::test]
async fn an_event_stream_on_http2_is_a_request_in_progress_past_the_idle_timeout() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.header_read_timeout_ms = 200;
    let app = TestApp::spawn_with(settings).await;
    let mut stream = http2_client()
        .get(app.url("/v1/locks/job/events"))
        .send()
        .await
        .expect("an event stream");
    assert_eq!(stream.version(), Version::HTTP_2);
    assert_eq!(stream.status(), StatusCode::OK);

    // Several idle timeouts without a request beginning or ending.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let lease = app.acquire("job", 5_000).await;
    let mut seen = String::new();
    let heard = tokio::time::timeout(Duration::from_secs(5), async {
        while !seen.contains("event: acquired") {
            let chunk = stream.chunk().await.expect("the stream stays open");
            let chunk = chunk.expect("the stream has not ended");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(heard.is_ok(), "no acquired event; the stream sent {seen:?}");
    assert!(
        seen.contains(&format!("\"fence\":{}", lease.fence())),
        "{seen}"
    );
}

#[tokio::test]
async fn shutdown_answers_an_http2_waiter_at_once() {
    let redis = RedisServer::start();
    let mut app = TestApp::spawn(&redis).await;
    app.acquire("job", 30_000).await;
    let waiter = tokio::spawn({
        let url = app.url("/v1/locks/job/acquire");
        async move {
            http2_client()
                .post(url)
                .json(&json!({"wait_ms": 20_000}))
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let stopping = app.begin_shutdown().expect("the server runs");

    let reply = waiter.await.expect("task").expect("answered");
    assert_eq!(reply.version(), Version::HTTP_2);
    assert_eq!(reply.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not held up by the wait"
    );
    let body: Value = reply.json().await.expect("body");
    assert_eq!(body["error"]["code"], "shutting_down");
    stopping
        .await
        .expect("server task")
        .expect("clean shutdown");
}
