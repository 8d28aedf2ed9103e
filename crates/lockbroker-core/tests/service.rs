//! `LockService` on the in-memory store, with Tokio's clock paused: waiting,
//! fairness, minimum validity, grants that never reach their caller, orphaned
//! acquires and shutdown, each without Redis or HTTP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockbroker_core::memory::MemoryStore;
use lockbroker_core::store::AcquireOutcome;
use lockbroker_core::{
    AcquireParams, AcquireRequest, ExtendOutcome, ForceReleaseOutcome, LeaseToken, ListRequest,
    LockError, LockName, LockPage, LockPolicy, LockService, LockStatus, LockStore, Principal,
    ReleaseOutcome, SessionEntry, SessionRecord, SessionWrite, StoreError, Ttl, Wake,
};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::{sleep, Instant};

#[path = "service/all.rs"]
mod all;

fn name(text: &str) -> LockName {
    LockName::parse(text).expect("valid name")
}

fn service<S: LockStore>(store: S) -> Arc<LockService<S>> {
    Arc::new(LockService::new(store, LockPolicy::default()))
}

fn ask(ttl_ms: u64, wait_ms: u64) -> AcquireRequest {
    AcquireRequest {
        ttl_ms: Some(ttl_ms),
        wait_ms: Some(wait_ms),
        principal: Principal::ANONYMOUS,
        ..AcquireRequest::default()
    }
}

/// Takes `lock` and keeps the lease (as a delivered response does).
async fn hold<S: LockStore>(
    service: &Arc<LockService<S>>,
    lock: &LockName,
    ttl_ms: u64,
) -> LeaseToken {
    let grant = service
        .acquire(lock, ask(ttl_ms, 0))
        .await
        .expect("granted");
    let token = grant.lease().token.clone();
    grant.delivered();
    token
}

/// An acquire in a task of its own, keeping the lease if granted.
fn spawn_acquire<S: LockStore>(
    service: &Arc<LockService<S>>,
    lock: &LockName,
    request: AcquireRequest,
) -> tokio::task::JoinHandle<Result<(), LockError>> {
    let (service, lock) = (Arc::clone(service), lock.clone());
    tokio::spawn(async move { service.acquire(&lock, request).await.map(|g| g.delivered()) })
}

async fn held<S: LockStore>(service: &LockService<S>, lock: &LockName) -> bool {
    service.status(lock).await.expect("status").held
}

/// Lets spawned tasks run (their clean-up included) without moving the clock much.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn waiters_on_one_broker_are_granted_in_arrival_order() {
    let service = service(MemoryStore::new());
    let lock = name("fifo");
    let holder = hold(&service, &lock, 10_000).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (service, lock, order) = (Arc::clone(&service), lock.clone(), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let grant = service
                .acquire(&lock, ask(10_000, 60_000))
                .await
                .expect("granted");
            order.lock().expect("order").push(i);
            let token = grant.lease().token.clone();
            grant.delivered();
            sleep(Duration::from_millis(10)).await;
            service.release(&lock, &token).await.expect("release");
        }));
        settle().await;
    }
    service.release(&lock, &holder).await.expect("release");
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn a_release_on_another_broker_wakes_the_waiter_at_once() {
    let store = MemoryStore::new();
    let (here, there) = (service(store.peer()), service(store.peer()));
    let lock = name("cross");
    let holder = hold(&there, &lock, 60_000).await;
    let waiter = {
        let (here, lock) = (Arc::clone(&here), lock.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            here.acquire(&lock, ask(1_000, 30_000)).await.map(|g| {
                g.delivered();
                started.elapsed()
            })
        })
    };
    sleep(Duration::from_millis(500)).await;
    there.release(&lock, &holder).await.expect("release");
    let waited = waiter.await.expect("task").expect("granted");
    assert!(
        waited < Duration::from_millis(600),
        "woken by the release: {waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_is_granted_when_the_holder_expires() {
    let service = service(MemoryStore::new());
    let lock = name("expiring");
    hold(&service, &lock, 1_000).await;
    let started = Instant::now();
    let grant = service
        .acquire(&lock, ask(1_000, 5_000))
        .await
        .expect("granted");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_000) && waited < Duration::from_millis(1_200),
        "granted at the holder's expiry, not by polling: {waited:?}"
    );
    grant.delivered();
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gets_busy_at_its_deadline() {
    let service = service(MemoryStore::new());
    let lock = name("deadline");
    hold(&service, &lock, 60_000).await;
    let started = Instant::now();
    let outcome = service.acquire(&lock, ask(1_000, 2_000)).await;
    assert!(matches!(outcome, Err(LockError::Busy(_))));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(2_000) && waited < Duration::from_millis(2_100));
    assert_eq!(service.waiting(), 0, "the waiter left the registry");
}

#[tokio::test(start_paused = true)]
async fn fair_waiters_keep_their_place_across_heartbeats_and_brokers() {
    let store = MemoryStore::new();
    let (one, two) = (service(store.peer()), service(store.peer()));
    let lock = name("fair");
    let holder = hold(&one, &lock, 60_000).await;
    let fair = |wait_ms| AcquireRequest {
        fair: true,
        ..ask(1_000, wait_ms)
    };
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (i, broker) in [(0, &two), (1, &one), (2, &two)] {
        let (service, lock, order) = (Arc::clone(broker), lock.clone(), Arc::clone(&order));
        let request = fair(60_000);
        waiters.push(tokio::spawn(async move {
            let grant = service.acquire(&lock, request).await.expect("granted");
            order.lock().expect("order").push(i);
            let token = grant.lease().token.clone();
            grant.delivered();
            service.release(&lock, &token).await.expect("release");
        }));
        settle().await;
    }
    // Longer than a queue entry lives without its heartbeat (3 s by default).
    sleep(Duration::from_secs(10)).await;
    one.release(&lock, &holder).await.expect("release");
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2]);
}

/// A store whose acquires answer late (as a slow Redis does), or whose
/// answers are lost after the acquire ran.
struct Faulty {
    inner: MemoryStore,
    delay: Duration,
    lose_answers: bool,
}

impl LockStore for Faulty {
    async fn acquire(&self, params: AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        let outcome = self.inner.acquire(params).await;
        sleep(self.delay).await;
        if self.lose_answers {
            return Err(StoreError::OutcomeUnknown("the answer was lost".into()));
        }
        outcome
    }
    async fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl: Ttl,
        max_hold_ms: u64,
    ) -> Result<ExtendOutcome, StoreError> {
        self.inner.extend(name, token, ttl, max_hold_ms).await
    }
    async fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.inner.release(name, token).await
    }
    async fn status(&self, name: &LockName) -> Result<LockStatus, StoreError> {
        self.inner.status(name).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
    async fn list(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        self.inner.list(request).await
    }
    async fn force_release(
        &self,
        name: &LockName,
        by: &Principal,
    ) -> Result<ForceReleaseOutcome, StoreError> {
        self.inner.force_release(name, by).await
    }
    async fn leave_queue(&self, name: &LockName, waiter_id: &str) -> Result<(), StoreError> {
        self.inner.leave_queue(name, waiter_id).await
    }
    fn take_wakes(&self) -> Option<UnboundedReceiver<Wake>> {
        self.inner.take_wakes()
    }
    async fn session_write(
        &self,
        session: &LockName,
        token: &LeaseToken,
        entry: SessionEntry<'_>,
    ) -> Result<SessionWrite, StoreError> {
        self.inner.session_write(session, token, entry).await
    }
    async fn session_read(
        &self,
        session: &LockName,
        token: Option<&LeaseToken>,
    ) -> Result<SessionRecord, StoreError> {
        self.inner.session_read(session, token).await
    }
    async fn session_forget(
        &self,
        session: &LockName,
        tokens: Option<&[LeaseToken]>,
    ) -> Result<(), StoreError> {
        self.inner.session_forget(session, tokens).await
    }
    fn orphan_window(&self) -> Duration {
        Duration::from_secs(5)
    }
}

#[tokio::test(start_paused = true)]
async fn a_grant_arriving_with_too_little_validity_is_given_back() {
    let store = MemoryStore::new();
    let slow = service(Faulty {
        inner: store.peer(),
        delay: Duration::from_millis(80),
        lose_answers: false,
    });
    let lock = name("late");
    let outcome = slow.acquire(&lock, ask(100, 0)).await;
    assert!(
        matches!(
            outcome,
            Err(LockError::GrantTooLate {
                elapsed_ms: 80,
                min_validity_ms: 50
            })
        ),
        "20 ms left of a 100 ms lease is under the 50 ms minimum"
    );
    settle().await;
    assert!(!held(&*slow, &lock).await, "the late grant was released");
}

#[tokio::test(start_paused = true)]
async fn a_grant_that_never_reaches_its_caller_is_released() {
    let service = service(MemoryStore::new());
    let lock = name("undelivered");
    let grant = service
        .acquire(&lock, ask(60_000, 0))
        .await
        .expect("granted");
    assert!(held(&service, &lock).await);
    drop(grant);
    settle().await;
    assert!(!held(&service, &lock).await);

    let kept = service
        .acquire(&lock, ask(60_000, 0))
        .await
        .expect("granted");
    kept.delivered();
    settle().await;
    assert!(held(&service, &lock).await, "a delivered grant is kept");
}

#[tokio::test(start_paused = true)]
async fn a_waiting_acquire_dropped_mid_wait_leaves_nothing_behind() {
    let service = service(MemoryStore::new());
    let lock = name("abandoned");
    let holder = hold(&service, &lock, 60_000).await;
    let request = AcquireRequest {
        fair: true,
        ..ask(1_000, 30_000)
    };
    let waiter = spawn_acquire(&service, &lock, request);
    sleep(Duration::from_millis(100)).await;
    assert_eq!(service.waiting(), 1);
    waiter.abort();
    settle().await;
    assert_eq!(service.waiting(), 0);
    service.release(&lock, &holder).await.expect("release");
    // The fair queue was left too: a plain acquire is not kept out by it.
    hold(&service, &lock, 1_000).await;
}

#[tokio::test(start_paused = true)]
async fn the_lease_of_an_acquire_whose_answer_was_lost_is_released() {
    let store = MemoryStore::new();
    let service = service(Faulty {
        inner: store.peer(),
        delay: Duration::ZERO,
        lose_answers: true,
    });
    let lock = name("orphan");
    let outcome = service.acquire(&lock, ask(60_000, 0)).await;
    assert!(matches!(
        outcome,
        Err(LockError::Store(StoreError::OutcomeUnknown(_)))
    ));
    settle().await;
    let status = store.status(&lock).await.expect("status");
    assert!(!status.held, "the orphaned lease was released");
    assert!(status.fence.is_some(), "it had been granted");
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_every_wait_at_once() {
    let service = service(MemoryStore::new());
    let lock = name("draining");
    hold(&service, &lock, 60_000).await;
    let waiter = spawn_acquire(&service, &lock, ask(1_000, 60_000));
    sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    service.begin_shutdown();
    let outcome = waiter.await.expect("task");
    assert!(matches!(outcome, Err(LockError::ShuttingDown)));
    assert!(started.elapsed() < Duration::from_millis(10));
    // New requests no longer wait: a busy lock answers busy at once.
    let late = service.acquire(&lock, ask(1_000, 60_000)).await;
    assert!(matches!(late, Err(LockError::Busy(_))));
}

#[tokio::test(start_paused = true)]
async fn at_the_waiter_cap_only_requests_that_would_wait_are_refused() {
    let mut policy = LockPolicy::default();
    policy.waiters.max_waiters = 1;
    let service = Arc::new(LockService::new(MemoryStore::new(), policy));
    let lock = name("capped");
    hold(&service, &lock, 60_000).await;
    let waiter = spawn_acquire(&service, &lock, ask(1_000, 5_000));
    sleep(Duration::from_millis(100)).await;
    let refused = service.acquire(&lock, ask(1_000, 5_000)).await;
    assert!(matches!(refused, Err(LockError::TooManyWaiters)));
    let free = service.acquire(&name("free"), ask(1_000, 5_000)).await;
    assert!(free.is_ok(), "a free lock is granted without a waiter slot");
    waiter.abort();
}

#[tokio::test(start_paused = true)]
async fn extends_stop_at_the_max_hold() {
    let policy = LockPolicy {
        max_hold_ms: Some(10_000),
        ..LockPolicy::default()
    };
    let service = Arc::new(LockService::new(MemoryStore::new(), policy));
    let lock = name("held-long");
    let token = hold(&service, &lock, 5_000).await;
    sleep(Duration::from_secs(4)).await;
    service
        .extend(&lock, &token, Some(5_000))
        .await
        .expect("within the max hold");
    sleep(Duration::from_secs(4)).await;
    let refused = service.extend(&lock, &token, Some(5_000)).await;
    assert!(matches!(
        refused,
        Err(LockError::MaxHoldExceeded {
            max_hold_ms: 10_000,
            ..
        })
    ));
    // A shorter extend that ends within the max hold still works.
    service
        .extend(&lock, &token, Some(1_500))
        .await
        .expect("up to the cap");
}
