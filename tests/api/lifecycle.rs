//! The process: config errors, bind errors, and graceful shutdown.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_tests::redis::free_port;
use lockbroker_tests::{broker_binary, RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

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
    app.shutdown().await.expect("clean shutdown");

    let reply = waiter.await.expect("task").expect("answered");
    assert_eq!(reply.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not held up by the wait"
    );
    assert!(
        reqwest::get(format!("{base}/healthz")).await.is_err(),
        "no longer accepting connections"
    );
}
