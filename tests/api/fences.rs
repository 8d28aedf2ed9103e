//! Fences only grow: over many cycles, across FLUSHALL and a Redis restart,
//! also when the last fence is ahead of Redis's clock.

use std::time::Duration;

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;

/// Acquires `name`, retrying while the broker reconnects after a Redis outage.
async fn acquire_when_back(app: &TestApp, name: &str) -> u64 {
    for _ in 0..200 {
        let lease = app.acquire(name, 1_000).await;
        if lease.status == StatusCode::OK {
            return lease.fence();
        }
        assert_eq!(lease.code(), "backend_unavailable", "{:?}", lease.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the broker never recovered");
}

// Each case starts from a last fence ahead of Redis's clock
// (`TestApp::put_fence_ahead`): a fence is never below Redis's time in µs,
// so from fences behind the clock every case would pass on the clock alone,
// without the fence counter or the broker's floor it is there to protect.

#[tokio::test]
async fn fences_strictly_increase_over_many_cycles() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let mut last = app.put_fence_ahead(&redis, "job");
    for _ in 0..200 {
        let lease = app.acquire("job", 5_000).await;
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        assert!(lease.fence() < 1 << 53, "safe as a JSON number");
        last = lease.fence();
        assert_eq!(
            app.release("job", &lease.token()).await.status,
            StatusCode::OK
        );
    }
}

#[tokio::test]
async fn fences_keep_growing_after_flushall() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    // Redis lost every key, the fence counter included: only the broker's
    // floor keeps the next fence above the last.
    let ahead = app.put_fence_ahead(&redis, "job");
    let before = app.acquire("job", 5_000).await.fence();
    assert_eq!(before, ahead + 1, "the counter is ahead of the clock");

    redis.conn().cmd(&["FLUSHALL"]);

    let after = app.acquire("job", 5_000).await;
    assert_eq!(after.status, StatusCode::OK, "the flushed lease is gone");
    assert!(after.fence() > before, "{} after {before}", after.fence());
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("lockbroker_fence_floor_raises_total 1"),
        "the floor set the fence: {metrics}"
    );
}

#[tokio::test]
async fn fences_keep_growing_after_redis_restarts_without_persistence() {
    let mut redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let mut before = app.put_fence_ahead(&redis, "job");
    for _ in 0..20 {
        let lease = app.acquire("job", 5_000).await;
        before = lease.fence();
        app.release("job", &lease.token()).await;
    }

    redis.restart();
    assert!(
        redis.conn().keys("*").is_empty(),
        "the restart lost every key"
    );

    let after = acquire_when_back(&app, "job").await;
    assert!(after > before, "{after} after {before}");
}

#[tokio::test]
async fn the_fence_is_remembered_for_the_idle_period_only() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    app.acquire("job", 5_000).await;

    let key = format!("{}:{{job}}:fence", app.prefix);
    let ttl_ms = redis.conn().cmd(&["PTTL", &key]).as_int().expect("PTTL");
    let week_ms = 7 * 24 * 3600 * 1000;
    assert!(
        ttl_ms > week_ms - 60_000 && ttl_ms <= week_ms,
        "fence key PTTL {ttl_ms}"
    );
}
