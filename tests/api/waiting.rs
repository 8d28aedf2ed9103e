//! Waiting acquires: granted when the lock frees, 423 at the deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_waiter_is_granted_the_lock_when_it_is_released() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("job", 30_000).await;

    let waiter = {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            app.acquire_with("job", json!({"ttl_ms": 5_000, "wait_ms": 20_000}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the lock is held"
    );
    let released_at = Instant::now();
    app.release("job", &holder.token()).await;

    let granted = waiter.await.expect("waiter task");
    assert_eq!(granted.status, StatusCode::OK);
    assert!(granted.fence() > holder.fence());
    assert!(
        released_at.elapsed() < Duration::from_secs(10),
        "woken by the release, not by its wait_ms running out"
    );
}

#[tokio::test]
async fn a_waiter_gets_423_at_its_deadline() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("job", 30_000).await;

    let started = Instant::now();
    let busy = app
        .acquire_with("job", json!({"ttl_ms": 1_000, "wait_ms": 300}))
        .await;

    assert_eq!(busy.status, StatusCode::LOCKED);
    assert_eq!(busy.body["error"]["fence"], holder.fence());
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited its wait_ms"
    );
}

#[tokio::test]
async fn a_waiter_is_granted_the_lock_when_the_holder_expires() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("job", 400).await;

    let started = Instant::now();
    let granted = app
        .acquire_with("job", json!({"ttl_ms": 1_000, "wait_ms": 20_000}))
        .await;

    assert_eq!(granted.status, StatusCode::OK);
    assert!(granted.fence() > holder.fence());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "not before the expiry: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "at the expiry, not at wait_ms: {waited:?}"
    );
}

#[tokio::test]
async fn wait_ms_is_capped_by_configuration() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_wait_ms = 200;
    let app = TestApp::spawn_with(settings).await;
    app.acquire("job", 30_000).await;

    let started = Instant::now();
    let busy = app.acquire_with("job", json!({"wait_ms": 60_000})).await;

    assert_eq!(busy.code(), "lock_busy");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "capped at max_wait_ms, not 60 s"
    );
}

#[tokio::test]
async fn waiters_beyond_the_per_lock_limit_get_too_many_waiters() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_waiters_per_lock = 1;
    let app = Arc::new(TestApp::spawn_with(settings).await);
    app.acquire("job", 30_000).await;

    let first = {
        let app = Arc::clone(&app);
        tokio::spawn(async move { app.acquire_with("job", json!({"wait_ms": 2_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = app.acquire_with("job", json!({"wait_ms": 2_000})).await;

    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.code(), "too_many_waiters");
    assert!(second.headers.contains_key("retry-after"));
    assert_eq!(
        app.acquire_with("other", json!({"wait_ms": 100}))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(first.await.expect("task").code(), "lock_busy");
}

/// Starts a waiter for `name` that, once granted, records `index` and releases
/// after `hold`.
fn queued_waiter(
    app: &Arc<TestApp>,
    name: &'static str,
    index: usize,
    body: serde_json::Value,
    order: &Arc<std::sync::Mutex<Vec<usize>>>,
) -> tokio::task::JoinHandle<()> {
    let app = Arc::clone(app);
    let order = Arc::clone(order);
    tokio::spawn(async move {
        let lease = app.acquire_with(name, body).await;
        assert_eq!(
            lease.status,
            StatusCode::OK,
            "waiter {index}: {:?}",
            lease.body
        );
        order.lock().expect("order").push(index);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            app.release(name, &lease.token()).await.status,
            StatusCode::OK
        );
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_on_one_broker_are_granted_in_arrival_order() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("job", 30_000).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));

    let mut waiters = Vec::new();
    for index in 0..20 {
        let body = json!({"ttl_ms": 10_000, "wait_ms": 30_000, "owner": format!("w{index}")});
        waiters.push(queued_waiter(&app, "job", index, body, &order));
        // Let each waiter arrive before the next.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    app.release("job", &holder.token()).await;
    for waiter in waiters {
        waiter.await.expect("waiter");
    }

    assert_eq!(*order.lock().expect("order"), (0..20).collect::<Vec<_>>());
}

/// A second broker on the same Redis and key prefix as `app`.
async fn second_broker(redis: &RedisServer, app: &TestApp) -> Arc<TestApp> {
    let mut settings = test_settings(redis);
    settings.redis.key_prefix = app.prefix.clone();
    Arc::new(TestApp::spawn_with(settings).await)
}

#[tokio::test]
async fn a_release_on_one_broker_wakes_a_waiter_on_another() {
    let redis = RedisServer::start();
    let first = TestApp::spawn(&redis).await;
    let second = second_broker(&redis, &first).await;
    let holder = first.acquire("job", 30_000).await;

    let waiter = {
        let second = Arc::clone(&second);
        tokio::spawn(async move { second.acquire_with("job", json!({"wait_ms": 20_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    first.release("job", &holder.token()).await;

    let granted = waiter.await.expect("waiter");
    assert_eq!(granted.status, StatusCode::OK);
    assert!(granted.fence() > holder.fence());
    assert!(
        released_at.elapsed() < Duration::from_secs(10),
        "woken by the announcement, not by the 30 s expiry or the 20 s wait"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_across_two_brokers_are_granted_in_arrival_order() {
    let redis = RedisServer::start();
    let first = Arc::new(TestApp::spawn(&redis).await);
    let second = second_broker(&redis, &first).await;
    let holder = first.acquire("job", 30_000).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));

    let mut waiters = Vec::new();
    for index in 0..8 {
        let broker = if index % 2 == 0 { &first } else { &second };
        let body = json!({"ttl_ms": 10_000, "wait_ms": 30_000, "fair": true});
        waiters.push(queued_waiter(broker, "job", index, body, &order));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.release("job", &holder.token()).await;
    for waiter in waiters {
        waiter.await.expect("waiter");
    }

    assert_eq!(*order.lock().expect("order"), (0..8).collect::<Vec<_>>());
    let queue = format!("{}:{{job}}:queue", first.prefix);
    assert_eq!(
        redis.conn().cmd(&["ZCARD", &queue]).as_int(),
        Some(0),
        "the queue is empty again"
    );
}

#[tokio::test]
async fn a_fair_queue_is_respected_by_acquires_that_do_not_wait() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("job", 30_000).await;
    let fair = {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            app.acquire_with("job", json!({"wait_ms": 20_000, "fair": true}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    app.release("job", &holder.token()).await;
    let barging = app.acquire("job", 1_000).await;

    let fair = fair.await.expect("fair waiter");
    assert_eq!(
        fair.status,
        StatusCode::OK,
        "the queued waiter got the lock"
    );
    assert_eq!(barging.code(), "lock_busy", "no jumping the queue");
}

#[tokio::test]
async fn lock_delay_holds_back_a_waiter_after_the_holder_expires() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    app.acquire_with("job", json!({"ttl_ms": 200, "lock_delay_ms": 500}))
        .await;

    let started = Instant::now();
    let granted = app.acquire_with("job", json!({"wait_ms": 20_000})).await;

    assert_eq!(granted.status, StatusCode::OK);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(650),
        "TTL plus lock-delay: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "at the end of the delay, not at wait_ms"
    );
}

#[tokio::test]
async fn a_waiter_that_disconnects_stops_waiting_and_leaves_nothing_behind() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holder = app.acquire("job", 30_000).await;

    waiters_that_give_up_leave_nothing_behind(&redis, &app, &app.http, &holder).await;
    assert_eq!(app.acquire("job", 1_000).await.status, StatusCode::OK);
}

/// Sends two acquires of `job`, which `holder` holds (one fair, one not),
/// with `client` giving up on each after 300 ms; then checks that no
/// acquire waits any more, that they left the fair queue, and that the
/// release of `holder` grants neither of them the lock.
pub(crate) async fn waiters_that_give_up_leave_nothing_behind(
    redis: &RedisServer,
    app: &TestApp,
    client: &reqwest::Client,
    holder: &Reply,
) {
    for fair in [false, true] {
        let gone = client
            .post(app.url("/v1/locks/job/acquire"))
            .json(&json!({"wait_ms": 20_000, "ttl_ms": 30_000, "fair": fair}))
            .timeout(Duration::from_millis(300))
            .send()
            .await;
        assert!(gone.is_err(), "the client gave up");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(waiting_gauge(app).await, 0, "no acquire waits any more");
    let queue = format!("{}:{{job}}:queue", app.prefix);
    assert_eq!(
        redis.conn().cmd(&["ZCARD", &queue]).as_int(),
        Some(0),
        "left the fair queue"
    );

    app.release("job", &holder.token()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = app.status("job").await;
    assert_eq!(
        status.body["held"], false,
        "no lease was granted to a departed waiter"
    );
}

/// The broker's `lockbroker_waiters` gauge: acquires waiting now.
pub(crate) async fn waiting_gauge(app: &TestApp) -> u64 {
    app.metrics()
        .await
        .lines()
        .find_map(|line| line.strip_prefix("lockbroker_waiters "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .expect("lockbroker_waiters") as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_costs_constant_redis_work_however_many_wait() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("job", 30_000).await;
    let waiters: Vec<_> = (0..200)
        .map(|_| {
            let app = Arc::clone(&app);
            tokio::spawn(async move { app.acquire_with("job", json!({"wait_ms": 20_000})).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    let mut conn = redis.conn();
    conn.cmd(&["CONFIG", "RESETSTAT"]);
    app.release("job", &holder.token()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let info = conn.cmd(&["INFO", "commandstats"]);
    let scripts_run: u64 = info
        .as_text()
        .unwrap_or("")
        .lines()
        .filter(|line| line.starts_with("cmdstat_fcall:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();

    assert_eq!(
        app.status("job").await.body["held"],
        true,
        "one waiter got it"
    );
    assert!(
        scripts_run <= 4,
        "one release and one attempt, not one per waiter: {scripts_run}"
    );
    for waiter in waiters {
        waiter.abort();
    }
}

#[tokio::test]
async fn a_grant_that_arrives_with_too_little_validity_is_released_not_handed_out() {
    let redis = RedisServer::start();
    let proxy = lockbroker_tests::proxy::Proxy::start(redis.port()).await;
    let mut settings = test_settings(&redis);
    settings.redis.url = proxy.url();
    settings.redis.command_timeout_ms = 3_000;
    settings.locks.min_validity_ms = 400;
    let app = TestApp::spawn_with(settings).await;

    // Every Redis answer now takes at least 400 ms to come back.
    proxy.delay(Duration::from_millis(200));
    let late = app.acquire("job", 700).await;
    assert_eq!(
        late.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        late.body
    );
    assert_eq!(late.code(), "backend_unavailable");
    let message = late.error().message;
    assert!(
        message.starts_with("the lock store granted \"job\" but answered so late")
            && message.contains("the grant was given back, so nothing is held"),
        "{message}"
    );
    let roomy = app.acquire("other", 10_000).await;
    assert_eq!(
        roomy.status,
        StatusCode::OK,
        "a lease with room to spare is handed out"
    );

    proxy.delay(Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.status("job").await.body["held"] == true {
        assert!(
            Instant::now() < deadline,
            "the late grant was never given back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(app.acquire("job", 1_000).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_waiting_acquire_of_a_free_lock_is_granted_even_at_the_waiter_cap() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_waiters = 1;
    let app = Arc::new(TestApp::spawn_with(settings).await);
    app.acquire("held", 30_000).await;
    let waiter = {
        let app = Arc::clone(&app);
        tokio::spawn(async move { app.acquire_with("held", json!({"wait_ms": 1_500})).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The broker's one waiter slot is taken; a request that finds its lock
    // free never waits, so it does not need one.
    let free = app.acquire_with("free", json!({"wait_ms": 2_000})).await;
    assert_eq!(free.status, StatusCode::OK, "{}", free.body);
    // One that would wait is still refused.
    let busy = app.acquire_with("held", json!({"wait_ms": 2_000})).await;
    assert_eq!(busy.status, StatusCode::TOO_MANY_REQUESTS, "{}", busy.body);
    assert_eq!(busy.code(), "too_many_waiters");
    assert_eq!(waiter.await.expect("task").code(), "lock_busy");
}

#[tokio::test]
async fn a_plain_waiter_shows_in_the_status_as_waiting() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let holder = app.acquire("job", 30_000).await;
    assert_eq!(app.status("job").await.body["waiting"], 0);

    let waiter = {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            app.acquire_with("job", json!({"ttl_ms": 5_000, "wait_ms": 20_000}))
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.status("job").await.body["waiting"] != 1 {
        assert!(
            Instant::now() < deadline,
            "the waiter never showed as waiting"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed = app.get("/v1/locks?prefix=job").await;
    assert_eq!(listed.body["locks"][0]["waiting"], 1, "{:?}", listed.body);

    app.release("job", &holder.token()).await;
    let granted = waiter.await.expect("waiter task");
    assert_eq!(granted.status, StatusCode::OK);
    assert_eq!(
        app.status("job").await.body["waiting"],
        0,
        "a granted waiter waits no more"
    );
}

#[tokio::test]
async fn a_writer_waiting_behind_shared_leases_is_counted_once() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    let shared = json!({"ttl_ms": 30_000, "mode": "shared"});
    let readers = [
        app.acquire_with("report", shared.clone()).await,
        app.acquire_with("report", shared).await,
    ];
    // The writer waits in this broker's line and, turned away by shared
    // leases, also holds a place in the store's queue: one waiter.
    let writer = {
        let app = Arc::clone(&app);
        tokio::spawn(async move {
            app.acquire_with("report", json!({"ttl_ms": 5_000, "wait_ms": 20_000}))
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.status("report").await.body["waiting"] == 0 {
        assert!(
            Instant::now() < deadline,
            "the writer never showed as waiting"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let it settle into the store's queue, then count again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.status("report").await.body["waiting"], 1);

    for reader in &readers {
        assert_eq!(
            app.release("report", &reader.token()).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(writer.await.expect("writer task").status, StatusCode::OK);
    assert_eq!(app.status("report").await.body["waiting"], 0);
}
