//! Fences only grow: over many cycles, across FLUSHALL and a Redis restart,
//! also when the last fence is ahead of Redis's clock.

use std::time::Duration;

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;

/// Milliseconds since the Unix epoch, by this machine's clock (Redis's).
fn unix_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(since.expect("clock").as_millis()).expect("ms")
}

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
async fn the_fence_is_remembered_for_the_idle_period_in_the_locks_one_key() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("job", 5_000).await;
    app.release("job", &lease.token()).await;

    // One key per lock: the lease hash keeps the last fence (`f`) for the
    // idle period past the grant, released or not, and an eighth of it
    // more, so that the grants after it need not set its expiry again;
    // there is no fence key.
    let key = format!("{}:{{job}}:lease", app.prefix);
    let mut conn = redis.conn();
    let first_ttl_ms = conn.cmd(&["PTTL", &key]).as_int().expect("PTTL");
    let week_ms = 7 * 24 * 3600 * 1000;
    assert!(
        first_ttl_ms > week_ms + week_ms / 8 - 60_000 && first_ttl_ms <= week_ms + week_ms / 8,
        "lease hash PTTL {first_ttl_ms}"
    );
    let kept = conn.cmd(&["HGET", &key, "f"]);
    assert_eq!(kept.as_text(), Some(lease.fence().to_string().as_str()));
    let pattern = format!("{}:{{job}}:*", app.prefix);
    let keys = conn.cmd(&["KEYS", &pattern]);
    assert_eq!(keys.as_array().len(), 1, "{keys:?}");

    // The next grant finds the recorded expiry far enough off and leaves
    // it; one whose record fell short of the idle period sets it again.
    let again = app.acquire("job", 5_000).await;
    app.release("job", &again.token()).await;
    let second_ttl_ms = conn.cmd(&["PTTL", &key]).as_int().expect("PTTL");
    assert!(
        second_ttl_ms <= first_ttl_ms && second_ttl_ms > week_ms,
        "lease hash PTTL {second_ttl_ms} after {first_ttl_ms}"
    );
    conn.cmd(&["PEXPIRE", &key, &(week_ms / 2).to_string()]);
    conn.cmd(&["HSET", &key, "ke", &(unix_ms() + week_ms / 2).to_string()]);
    let third = app.acquire("job", 5_000).await;
    assert_eq!(third.status, StatusCode::OK);
    let third_ttl_ms = conn.cmd(&["PTTL", &key]).as_int().expect("PTTL");
    assert!(
        third_ttl_ms > week_ms + week_ms / 8 - 60_000,
        "lease hash PTTL {third_ttl_ms} after a record that fell short"
    );
}

#[tokio::test]
async fn a_lease_near_the_idle_period_sets_its_keys_expiry_at_every_grant() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.redis.fence_idle_ms = 20_000;
    settings.redis.release_memo_ms = 500;
    settings.locks.max_ttl_ms = 20_000;
    let app = TestApp::spawn_with(settings).await;
    let key = format!("{}:{{near}}:lease", app.prefix);
    let mut conn = redis.conn();

    // 19 s of lease and an eighth of 20 s of slack exceed the idle
    // period: no expiry is recorded, and the key lives exactly as long as
    // the lease needs.
    let long = app.acquire("near", 19_000).await;
    let pttl = conn.cmd(&["PTTL", &key]).as_int().expect("PTTL");
    assert!(pttl > 19_000 && pttl <= 20_000, "PTTL {pttl}");
    assert_eq!(conn.cmd(&["HGET", &key, "ke"]).as_text(), Some(""));
    app.release("near", &long.token()).await;

    // A short lease records its key's expiry; the long one after it sets
    // it again rather than trust a record made for a shorter need.
    let short = app.acquire("near", 1_000).await;
    app.release("near", &short.token()).await;
    assert!(conn
        .cmd(&["HGET", &key, "ke"])
        .as_text()
        .is_some_and(|ke| !ke.is_empty()));
    conn.cmd(&["PEXPIRE", &key, "20000"]);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let long = app.acquire("near", 19_000).await;
    assert_eq!(long.status, StatusCode::OK);
    let pttl = conn.cmd(&["PTTL", &key]).as_int().expect("PTTL");
    assert!(pttl > 19_000, "PTTL {pttl}: the key must outlive the lease");
}

#[tokio::test]
async fn a_hash_without_its_fence_gets_its_expiry_from_every_grant_whatever_it_records() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    // A hash as a broker that kept the fence in a key of its own left it: a
    // released lease, no `f`, shortened by that broker's release to its
    // memo time. A recorded expiry far off must not be trusted for it.
    let key = format!("{}:{{older}}:lease", app.prefix);
    let mut conn = redis.conn();
    let now = unix_ms().to_string();
    let far = (unix_ms() + 30 * 24 * 3600 * 1000).to_string();
    conn.cmd(&[
        "HSET",
        &key,
        "token",
        "0123456789abcdef0123456789abcdef",
        "fence",
        "7",
    ]);
    conn.cmd(&["HSET", &key, "exp", &now, "rel", "1", "ke", &far]);
    conn.cmd(&["PEXPIRE", &key, "30000"]);

    let lease = app.acquire("older", 5_000).await;
    assert_eq!(lease.status, StatusCode::OK);
    let week_ms = 7 * 24 * 3600 * 1000;
    let pttl = conn.cmd(&["PTTL", &key]).as_int().expect("PTTL");
    assert!(pttl > week_ms, "PTTL {pttl}: the hash now keeps the fence");
}

#[tokio::test]
async fn a_last_fence_kept_in_the_fence_key_of_older_brokers_is_honoured() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    // Brokers before the fence moved into the lease hash kept it in
    // `<name>:fence`; one Redis may serve both during an upgrade.
    let ahead = app.put_fence_ahead(&redis, "old");
    let lease_key = format!("{}:{{old}}:lease", app.prefix);
    let fence_key = format!("{}:{{old}}:fence", app.prefix);
    let mut conn = redis.conn();
    conn.cmd(&["DEL", &lease_key]);
    conn.cmd(&["SET", &fence_key, &ahead.to_string()]);

    let lease = app.acquire("old", 5_000).await;
    assert_eq!(lease.status, StatusCode::OK);
    assert_eq!(lease.fence(), ahead + 1);
    // From then on the lease hash keeps it.
    let kept = conn.cmd(&["HGET", &lease_key, "f"]);
    assert_eq!(kept.as_text(), Some((ahead + 1).to_string().as_str()));
}

#[tokio::test]
async fn a_force_release_keeps_the_last_fence_for_the_next_grant() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let ahead = app.put_fence_ahead(&redis, "job");
    let held = app.acquire("job", 30_000).await;
    assert_eq!(held.fence(), ahead + 1);

    // The operator's override ends the lease, never the lock's fence.
    let forced = app.send(app.http.delete(app.url("/v1/locks/job"))).await;
    assert_eq!(forced.status, StatusCode::OK, "{:?}", forced.body);
    let next = app.acquire("job", 30_000).await;
    assert_eq!(next.status, StatusCode::OK);
    assert!(
        next.fence() > held.fence(),
        "{} after {}",
        next.fence(),
        held.fence()
    );
}
