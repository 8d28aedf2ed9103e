//! Load across a failover: brokers cycling locks before, during and after
//! a primary is killed, and what every mode with a failover promises about
//! it (answers are a grant, `423` or `503` with `Retry-After`; fences after
//! it exceed fences before; a release wakes a waiter on another broker).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::TestApp;

/// What a load loop saw: the fences it was granted, in order, and when.
#[derive(Default)]
pub struct Seen {
    /// Every grant: when it was answered, and its fence.
    pub grants: Vec<(Instant, u64)>,
    /// Answers of `503`.
    pub unavailable: usize,
}

/// Loops that acquire and release locks until stopped: loop `i` runs on
/// broker `i % brokers` and cycles lock `job-<i / brokers>`.
pub struct Cycling {
    stop: Arc<AtomicBool>,
    loops: Vec<(JoinHandle<()>, Arc<Mutex<Seen>>)>,
}

impl Cycling {
    /// Starts `per_broker` loops on each broker.
    pub fn start(brokers: &[Arc<TestApp>], per_broker: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let loops = (0..brokers.len() * per_broker)
            .map(|i| {
                let seen = Arc::new(Mutex::new(Seen::default()));
                let app = Arc::clone(&brokers[i % brokers.len()]);
                let lock = format!("job-{}", i / brokers.len());
                let task = tokio::spawn(cycle(app, lock, Arc::clone(&stop), Arc::clone(&seen)));
                (task, seen)
            })
            .collect();
        Self { stop, loops }
    }

    /// Stops every loop and returns what each saw.
    pub async fn stop(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for (task, seen) in self.loops {
            task.await.expect("a load loop failed");
            all.push(std::mem::take(&mut *seen.lock().await));
        }
        all
    }
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

/// Waits until `failed_over` says the servers replaced the failed primary
/// and `broker` grants `probe` again, failing the test after 30 s; how long
/// that took since `failed_at`.
pub async fn wait_until_serving(
    broker: &TestApp,
    probe: &str,
    failed_at: Instant,
    mut failed_over: impl FnMut() -> bool,
) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let serving = broker.acquire(probe, 1_000).await.status == StatusCode::OK;
        if serving && failed_over() {
            return failed_at.elapsed();
        }
        assert!(Instant::now() < deadline, "no failover within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every loop was granted on both sides of `failed_at`; every fence after
/// it exceeds every fence before it; fences grow grant after grant. Returns
/// how many answers were `503`.
pub fn assert_fences_grow_across(seen: &[Seen], failed_at: Instant) -> usize {
    for (i, seen) in seen.iter().enumerate() {
        let fences_where = |after: bool| -> Vec<u64> {
            seen.grants
                .iter()
                .filter(|(at, _)| (*at > failed_at) == after)
                .map(|(_, fence)| *fence)
                .collect()
        };
        let (before, after) = (fences_where(false), fences_where(true));
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
    seen.iter().map(|seen| seen.unavailable).sum()
}

/// A waiter for `lock` on `waiter` is woken by a release through `holder`,
/// long before the holder's TTL would have freed it.
pub async fn assert_a_release_wakes_the_other_broker(
    holder: &TestApp,
    waiter: &Arc<TestApp>,
    lock: &str,
) {
    let held = holder.acquire(lock, 30_000).await;
    assert_eq!(held.status, StatusCode::OK, "{:?}", held.body);
    let waiting = {
        let (app, lock) = (Arc::clone(waiter), lock.to_owned());
        tokio::spawn(async move {
            let asked = Instant::now();
            let reply = app
                .acquire_with(
                    &lock,
                    serde_json::json!({"ttl_ms": 5_000, "wait_ms": 20_000}),
                )
                .await;
            (reply.status, asked.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = holder.release(lock, &held.token()).await;
    assert_eq!(released.status, StatusCode::OK);
    let (status, waited) = waiting.await.expect("waiter");
    assert_eq!(status, StatusCode::OK);
    assert!(
        waited < Duration::from_secs(5),
        "woken by the release, not by the holder's expiry: {waited:?}"
    );
}
