//! Fail closed: Redis away means 503, never a guess; back means served again.

use std::time::{Duration, Instant};

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn redis_killed_mid_test_gives_503_then_recovers_without_a_broker_restart() {
    let mut redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("job", 30_000).await;
    assert_eq!(held.status, StatusCode::OK);

    redis.kill();
    let token = held.token();
    for (path, body) in [
        ("acquire", json!({"ttl_ms": 1_000})),
        ("extend", json!({"token": token, "ttl_ms": 1_000})),
        ("release", json!({"token": token})),
    ] {
        let started = Instant::now();
        let reply = app.post(&format!("/v1/locks/job/{path}"), body).await;
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{path}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "backend_unavailable");
        assert!(reply.headers.contains_key("retry-after"));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "fails within the command timeout"
        );
    }
    assert_eq!(
        app.status("job").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        app.get("/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        app.get("/healthz").await.status,
        StatusCode::OK,
        "alive, just not ready"
    );

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lease = app.acquire("job", 1_000).await;
        if lease.status == StatusCode::OK {
            assert!(
                lease.fence() > held.fence(),
                "fences grow across the outage"
            );
            break;
        }
        assert_eq!(lease.code(), "backend_unavailable");
        assert!(Instant::now() < deadline, "the broker never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.get("/readyz").await.status, StatusCode::OK);
}
