//! The process: config errors, bind errors, and graceful shutdown.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_tests::app::parse_raw;
use lockbroker_tests::redis::free_port;
use lockbroker_tests::{broker_binary, RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[test]
fn a_bad_setting_prints_one_line_and_exits_non_zero() {
    let output = Command::new(broker_binary())
        .env("LOCKBROKER_REDIS_POOL_SIZE", "lots")
        .output()
        .expect("run lockbroker");

    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("LOCKBROKER_REDIS_POOL_SIZE"), "{stderr}");
}

#[test]
fn an_unknown_key_in_the_config_file_is_an_error() {
    let dir = std::env::temp_dir().join(format!("lockbroker-lifecycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join("bad.toml");
    std::fs::write(&file, "lisen = \"127.0.0.1:1\"\n").expect("write config");

    let output = Command::new(broker_binary())
        .arg("--config")
        .arg(&file)
        .output()
        .expect("run lockbroker");

    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("lisen"), "{stderr}");
}

#[test]
fn an_address_in_use_prints_one_line_and_exits_non_zero() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");

    let output = Command::new(broker_binary())
        .env("LOCKBROKER_LISTEN", addr.to_string())
        .output()
        .expect("run lockbroker");

    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}

#[tokio::test]
async fn sigterm_answers_waiters_finishes_requests_and_exits_zero() {
    let redis = RedisServer::start();
    let port = free_port();
    let mut broker = Command::new(broker_binary())
        .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
        .env("LOCKBROKER_REDIS_URL", redis.url())
        .env("LOCKBROKER_LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start lockbroker");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..200 {
        if let Ok(reply) = http.get(format!("{base}/readyz")).send().await {
            if reply.status() == StatusCode::OK {
                ready = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ready, "broker became ready");
    let acquire = |body: serde_json::Value| {
        http.post(format!("{base}/v1/locks/job/acquire"))
            .json(&body)
            .send()
    };
    assert_eq!(
        acquire(json!({"ttl_ms": 30_000}))
            .await
            .expect("acquire")
            .status(),
        StatusCode::OK
    );
    let waiter = tokio::spawn(acquire(json!({"wait_ms": 30_000})));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let signalled = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &broker.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());

    let waiter = waiter
        .await
        .expect("task")
        .expect("the waiter gets an answer, not a cut");
    assert_eq!(waiter.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = waiter.json().await.expect("json");
    assert_eq!(body["error"]["code"], "shutting_down");
    let exit = broker.wait().expect("broker exits");
    assert!(exit.success(), "exit status {exit:?}");
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "well inside the grace period"
    );
}

#[tokio::test]
async fn graceful_shutdown_lets_in_flight_requests_finish() {
    let redis = RedisServer::start();
    let mut app = TestApp::spawn(&redis).await;
    let app_ref = Arc::new(app.http.clone());
    let base = app.base.clone();
    app.acquire("job", 600).await;
    let report = app.acquire("report", 60_000).await.token();

    // An ordinary request is in flight when shutdown begins: its body is
    // still arriving.
    let body = format!(r#"{{"token":"{report}"}}"#);
    let (head, tail) = body.split_at(body.len() / 2);
    let mut in_flight = TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .expect("connect");
    in_flight
        .write_all(
            format!(
                "POST /v1/locks/report/release HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{head}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("send the head");

    // A waiter whose lock frees (by expiry) within the grace period... is still
    // answered at once with shutting_down: waits never hold shutdown up.
    let waiter = tokio::spawn({
        let http = Arc::clone(&app_ref);
        let url = format!("{base}/v1/locks/job/acquire");
        async move {
            http.post(url)
                .json(&json!({"wait_ms": 20_000}))
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let stopping = app.begin_shutdown().expect("the server runs");

    let reply = waiter.await.expect("task").expect("answered");
    assert_eq!(reply.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not held up by the wait"
    );

    // The request in flight is served to the end, then shutdown completes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    in_flight
        .write_all(tail.as_bytes())
        .await
        .expect("send the rest of the body");
    let mut answer = String::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        in_flight.read_to_string(&mut answer),
    )
    .await
    .expect("answered within the grace period")
    .expect("read the answer");
    let (status, released) = parse_raw(&answer);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(released["released"], true, "{answer}");
    stopping
        .await
        .expect("server task")
        .expect("clean shutdown");
    assert!(
        reqwest::get(format!("{base}/healthz")).await.is_err(),
        "no longer accepting connections"
    );
}
