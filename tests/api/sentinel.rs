//! Sentinel mode: the broker finds the primary through Redis Sentinel and
//! follows a failover without a restart, failing closed while it happens.
//! (The whole API suite also runs in this mode: `LOCKBROKER_TEST_MODE=sentinel`,
//! and the store conformance suite in `conformance::sentinel`.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_server::config::RedisMode;
use lockbroker_server::Settings;
use lockbroker_tests::app::test_settings;
use lockbroker_tests::sentinel::{ReplicatedRedis, SERVICE_NAME};
use lockbroker_tests::TestApp;
use reqwest::StatusCode;
use tokio::sync::Mutex;

/// A broker's settings for the primary the group's Sentinels name.
fn sentinel_settings(group: &ReplicatedRedis) -> Settings {
    let mut settings = test_settings(&group.servers[0]);
    settings.redis.mode = RedisMode::Sentinel;
    settings.redis.sentinels = group.sentinel_addresses();
    settings.redis.service_name = SERVICE_NAME.to_owned();
    settings
}

/// What a load loop saw: the fences it was granted, in order, and when.
#[derive(Default)]
struct Seen {
    grants: Vec<(Instant, u64)>,
    unavailable: usize,
}

/// Acquires and releases `lock` on `app` until `stop`, recording every
/// grant. Any answer but a grant, `423` or `503` with `Retry-After` fails.
async fn cycle(app: Arc<TestApp>, lock: String, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    while !stop.load(Ordering::Relaxed) {
        let reply = app.acquire(&lock, 2_000).await;
        match reply.status {
            StatusCode::OK => {
                seen.lock()
                    .await
                    .grants
                    .push((Instant::now(), reply.fence()));
                let released = app.release(&lock, &reply.token()).await;
                assert!(
                    [StatusCode::OK, StatusCode::SERVICE_UNAVAILABLE].contains(&released.status),
                    "release: {:?}",
                    released.body
                );
            }
            StatusCode::LOCKED => {}
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(reply.code(), "backend_unavailable", "{:?}", reply.body);
                assert!(
                    reply.headers.contains_key("retry-after"),
                    "a 503 says when to retry"
                );
                seen.lock().await.unavailable += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("during a failover: {other} {:?}", reply.body),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_without_a_restart_and_fences_keep_growing() {
    let mut group = ReplicatedRedis::start(2);
    let brokers = [
        Arc::new(TestApp::spawn_with(sentinel_settings(&group)).await),
        Arc::new(TestApp::spawn_with(sentinel_settings(&group)).await),
    ];
    let old_primary = group.primary_port().expect("a primary");

    // Two brokers cycle two locks each, before, during and after the kill.
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<Mutex<Seen>>> = (0..4).map(|_| Arc::default()).collect();
    let loops: Vec<_> = (0..4)
        .map(|i| {
            let (app, seen) = (Arc::clone(&brokers[i % 2]), Arc::clone(&seen[i]));
            tokio::spawn(cycle(
                app,
                format!("job-{}", i / 2),
                Arc::clone(&stop),
                seen,
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_at = Instant::now();
    group.primary().kill();

    // The Sentinels promote a replica; the brokers find it themselves.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let promoted = group.primary_port().is_some_and(|port| port != old_primary);
        let serving = brokers[0].acquire("after-failover", 1_000).await.status == StatusCode::OK
            && brokers[1].acquire("after-failover-b", 1_000).await.status == StatusCode::OK;
        if promoted && serving {
            break;
        }
        assert!(Instant::now() < deadline, "no failover within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let the loops run on the new primary for a while, then stop them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for task in loops {
        task.await.expect("a load loop failed");
    }

    let mut unavailable = 0;
    for (i, seen) in seen.iter().enumerate() {
        let seen = seen.lock().await;
        unavailable += seen.unavailable;
        let before: Vec<u64> = seen
            .grants
            .iter()
            .filter(|(at, _)| *at < killed_at)
            .map(|(_, fence)| *fence)
            .collect();
        let after: Vec<u64> = seen
            .grants
            .iter()
            .filter(|(at, _)| *at > killed_at)
            .map(|(_, fence)| *fence)
            .collect();
        assert!(
            !before.is_empty() && !after.is_empty(),
            "loop {i}: grants on both sides"
        );
        let highest_before = before.iter().max().expect("grants");
        assert!(
            after.iter().all(|fence| fence > highest_before),
            "loop {i}: every fence after the failover exceeds every fence before"
        );
        let fences: Vec<u64> = seen.grants.iter().map(|(_, fence)| *fence).collect();
        assert!(
            fences.windows(2).all(|pair| pair[1] > pair[0]),
            "loop {i}: fences grow grant after grant"
        );
    }
    assert!(
        unavailable > 0,
        "requests during the switch were answered 503, not served from a guess"
    );

    // The wake channel followed the primary: a waiter on one broker is woken
    // by a release through the other, long before the holder's TTL.
    let holder = brokers[0].acquire("handoff", 30_000).await;
    assert_eq!(holder.status, StatusCode::OK, "{:?}", holder.body);
    let waiter = {
        let app = Arc::clone(&brokers[1]);
        tokio::spawn(async move {
            let asked = Instant::now();
            let reply = app
                .acquire_with(
                    "handoff",
                    serde_json::json!({"ttl_ms": 5_000, "wait_ms": 20_000}),
                )
                .await;
            (reply.status, asked.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = brokers[0].release("handoff", &holder.token()).await;
    assert_eq!(released.status, StatusCode::OK);
    let (status, waited) = waiter.await.expect("waiter");
    assert_eq!(status, StatusCode::OK);
    assert!(
        waited < Duration::from_secs(5),
        "woken by the release through the new primary, not by polling: {waited:?}"
    );
}

#[tokio::test]
async fn a_broker_whose_sentinels_name_no_such_service_is_not_ready() {
    let group = ReplicatedRedis::start(0);
    let mut settings = sentinel_settings(&group);
    settings.redis.service_name = "no-such-service".to_owned();
    let app = lockbroker_server::Application::build(settings)
        .await
        .expect("the broker starts and waits for Redis");
    let base = format!("http://{}", app.local_addr());
    let task = tokio::spawn(app.run_until(tokio::time::sleep(Duration::from_secs(3))));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let ready = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("readyz");
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let acquire = reqwest::Client::new()
        .post(format!("{base}/v1/locks/job/acquire"))
        .json(&serde_json::json!({"ttl_ms": 1_000}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(acquire.status(), StatusCode::SERVICE_UNAVAILABLE);
    let _ = task.await;
}
