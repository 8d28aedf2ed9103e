//! Fail closed: Redis away means 503, never a guess; back means served again.

use std::time::{Duration, Instant};

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn redis_killed_mid_test_gives_503_then_recovers_without_a_broker_restart() {
    let mut redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    // Ahead of the clock, so that only the broker's floor keeps the fence
    // after the restart (which loses every key) above this one.
    let ahead = app.put_fence_ahead(&redis, "job");
    let held = app.acquire("job", 30_000).await;
    assert_eq!(held.status, StatusCode::OK);
    assert_eq!(held.fence(), ahead + 1);

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
    app.wait_ready().await;
}

#[tokio::test]
async fn a_redis_out_of_memory_still_lets_holders_extend_and_release() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let first = app.acquire("first", 30_000).await;
    let second = app.acquire("second", 30_000).await;
    redis
        .conn()
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.conn().cmd(&["CONFIG", "SET", "maxmemory", "1"]);

    let refused = app.acquire("third", 1_000).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    let message = refused.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("refuses writes"), "{message}");
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    let message = ready.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("refuses writes"), "{message}");

    let extended = app.extend("first", &first.token(), 20_000).await;
    assert_eq!(extended.status, StatusCode::OK, "{}", extended.body);
    for (name, lease) in [("first", &first), ("second", &second)] {
        let released = app.release(name, &lease.token()).await;
        assert_eq!(released.status, StatusCode::OK, "{}", released.body);
        assert_eq!(app.status(name).await.body["held"], false);
    }

    redis.conn().cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(app.get("/readyz").await.status, StatusCode::OK);
    assert_eq!(app.acquire("third", 1_000).await.status, StatusCode::OK);
}

#[tokio::test]
async fn an_acquire_whose_answer_is_lost_says_the_outcome_is_unknown() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    // Every step on a lock goes through one connection of the pool: one
    // cycle first makes sure that connection is up, so the acquire below is
    // sent to Redis, not held back for a connection that never comes (which
    // would change nothing, and say so).
    let warm = app.acquire("job", 30_000).await;
    assert_eq!(
        app.release("job", &warm.token()).await.status,
        StatusCode::OK
    );
    redis.pause();
    let lost = app.acquire("job", 30_000).await;
    assert_eq!(lost.status, StatusCode::SERVICE_UNAVAILABLE);
    let message = lost.body["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains("outcome is unknown"), "{message}");
    assert!(!message.contains("nothing was changed"), "{message}");
    redis.resume();

    // The acquire may reach Redis after all (its bytes were sent before the
    // pause), or be dropped with the stalled connection. If it ran, the
    // broker gives its lease back; either way the lock ends up free.
    let mut conn = redis.conn();
    let lease_key = format!("{}:{{job}}:lease", app.prefix);
    let resumed = Instant::now();
    loop {
        let ran = conn.cmd(&["HEXISTS", &lease_key, "f"]).as_int() == Some(1);
        let held = app.status("job").await.body["held"] == true;
        // Past the broker's redelivery window (ten command timeouts and
        // 5 s), an acquire that has not run never will.
        if !held && (ran || resumed.elapsed() > Duration::from_secs(11)) {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(20),
            "the late grant was never released (it ran: {ran}, held: {held})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.acquire("job", 1_000).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_step_while_redis_refuses_connections_says_it_changed_nothing() {
    let mut redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("held", 30_000).await;
    redis.kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.get("/readyz").await.status == StatusCode::OK {
        assert!(Instant::now() < deadline, "the broker never noticed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every connection of the pool has seen the close by now.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let message = |reply: &lockbroker_tests::Reply| {
        assert_eq!(
            reply.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            reply.body
        );
        assert_eq!(reply.code(), "backend_unavailable");
        reply.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    for read in [app.status("held").await, app.get("/v1/locks").await] {
        let said = message(&read);
        assert!(said.contains("this read changed nothing"), "{said}");
        assert!(!said.contains("unknown"), "{said}");
    }
    // A write is handed to the Redis client only while it is connected, so
    // one sent while Redis refuses connections never went out: it changed
    // nothing, and the message says so instead of "outcome unknown".
    for (step, write) in [
        ("extend", app.extend("held", &held.token(), 30_000).await),
        ("release", app.release("held", &held.token()).await),
        ("acquire", app.acquire("other", 30_000).await),
    ] {
        let said = message(&write);
        assert!(
            said.contains(&format!("the {step} did not reach it; nothing was changed")),
            "{step}: {said}"
        );
        assert!(!said.contains("unknown"), "{step}: {said}");
    }

    // Nothing was queued for later either: once Redis is back, the lease
    // is still held by its own token and the other lock was never taken.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.get("/readyz").await.status != StatusCode::OK {
        assert!(Instant::now() < deadline, "the broker never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.status("other").await.body["held"], false);
}

#[tokio::test]
async fn a_redis_that_lost_the_scripts_library_is_given_it_again_by_the_next_call() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("job", 30_000).await;
    assert_eq!(held.status, StatusCode::OK);

    // A restart without data loses the library as FUNCTION FLUSH does; the
    // next step loads it and runs, with no error seen by the caller.
    let mut conn = redis.conn();
    conn.cmd(&["FUNCTION", "FLUSH"]);
    let libraries = conn.cmd(&["FUNCTION", "LIST"]);
    assert!(libraries.as_array().is_empty(), "{libraries:?}");
    let released = app.release("job", &held.token()).await;
    assert_eq!(released.status, StatusCode::OK, "{:?}", released.body);
    let libraries = conn.cmd(&["FUNCTION", "LIST"]);
    assert_eq!(libraries.as_array().len(), 1, "{libraries:?}");
    assert_eq!(app.acquire("job", 1_000).await.status, StatusCode::OK);
}
