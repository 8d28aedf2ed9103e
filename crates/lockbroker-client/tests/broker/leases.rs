//! Acquire, busy with its holders, extend, release, waiting, shared leases,
//! permits, `request_id` retries and the mapping of a bad field.

use std::time::{Duration, Instant};

use lockbroker_client::{AcquireOptions, Client, Error, LeaseEnd, LeaseKind, LockMode};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};

use crate::front::LossyFront;
use crate::{client, with_ttl};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test]
async fn busy_names_the_holder_and_release_lets_the_next_in() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let lock = client.lock("job");

    let first = lock
        .acquire(with_ttl(TTL, "worker-a"))
        .await
        .expect("granted");
    assert_eq!((first.name(), first.owner()), ("job", Some("worker-a")));
    assert_eq!(first.kind(), LeaseKind::Exclusive);
    let Err(Error::Busy {
        holders,
        owner,
        fence,
        ..
    }) = lock.acquire(with_ttl(TTL, "worker-b")).await
    else {
        panic!("a second acquire is busy");
    };
    assert_eq!(owner.as_deref(), Some("worker-a"));
    assert_eq!(fence, Some(first.fence()));
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].fence, first.fence());

    let renewal = first
        .extend(Duration::from_secs(20))
        .await
        .expect("extended");
    assert_eq!(renewal.fence, first.fence());
    assert!(renewal.ttl_ms > 10_000, "{renewal:?}");
    assert!(first.remaining() > Duration::from_secs(15));

    let fence = first.fence();
    let released = first.release().await.expect("released");
    assert_eq!(released.fence, fence);
    let next = lock
        .acquire(with_ttl(TTL, "worker-b"))
        .await
        .expect("free now");
    assert!(next.fence() > fence);
}

#[tokio::test]
async fn a_released_lease_stays_readable_and_is_never_extended() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let lease = client
        .lock("done")
        .acquire(with_ttl(TTL, "worker"))
        .await
        .expect("granted");
    // By name and token, as a process that kept only those would.
    let renewal = client
        .extend("done", lease.token(), Duration::from_secs(20))
        .await
        .expect("extended by its token");
    assert_eq!(renewal.fence, lease.fence());
    assert!(renewal.ttl_ms > 10_000, "{renewal:?}");

    lease.release().await.expect("released");
    assert_eq!(lease.end(), Some(LeaseEnd::Released));
    assert!(lease.cancellation().is_cancelled());
    let extended = lease.extend(TTL).await;
    assert!(matches!(extended, Err(Error::Released)), "{extended:?}");
    assert!(matches!(lease.check(), Err(Error::Released)));
    let check = lease.check_fence().await.expect("answered");
    assert!(!check.current && !check.held, "{check:?}");
    // The broker agrees: its token holds nothing now.
    let by_token = client.extend("done", lease.token(), TTL).await;
    assert!(
        matches!(by_token, Err(Error::LeaseLost { .. })),
        "{by_token:?}"
    );
}

#[tokio::test]
async fn a_wait_longer_than_the_brokers_cap_goes_on_until_the_lock_is_released() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    // The broker holds one waiting request 200 ms at most: the client asks
    // again with the rest of its wait.
    settings.locks.max_wait_ms = 200;
    let app = TestApp::spawn_with(settings).await;
    let client = client(&app);
    let lock = client.lock("queue");
    let holder = lock.acquire(with_ttl(TTL, "a")).await.expect("granted");
    let fence = holder.fence();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        holder.release().await.expect("released");
    });

    let started = Instant::now();
    let waiting = AcquireOptions {
        wait: Duration::from_secs(5),
        ..with_ttl(TTL, "b")
    };
    let lease = lock.acquire(waiting).await.expect("granted after the wait");
    assert!(started.elapsed() >= Duration::from_millis(650));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(lease.fence() > fence);
}

#[tokio::test]
async fn a_grant_after_a_wait_longer_than_its_ttl_is_held_with_a_whole_ttl() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let lock = client.lock("handover");
    let holder = lock.acquire(with_ttl(TTL, "a")).await.expect("granted");
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        holder.release().await.expect("released");
    });

    // Granted 1.5 s after its send, with a TTL of 1 s: counted from the
    // send, the lease would have run out before it was granted.
    let ttl = Duration::from_secs(1);
    let waiting = AcquireOptions {
        wait: Duration::from_secs(5),
        ..with_ttl(ttl, "b")
    };
    let lease = lock.lock(waiting).await.expect("granted after the wait");
    assert_eq!(lease.end(), None);
    assert!(lease.remaining() > ttl / 2, "{:?}", lease.remaining());
    // Renewed past several TTLs, still held.
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(lease.end(), None);
    assert!(lease.check_fence().await.expect("answered").current);
    lease.release().await.expect("released");
}

#[tokio::test]
async fn shared_leases_coexist_and_keep_a_writer_out() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let lock = client.lock("catalog");
    let shared = |owner: &str| AcquireOptions {
        mode: LockMode::Shared,
        ..with_ttl(TTL, owner)
    };
    let reader_a = lock.acquire(shared("reader-a")).await.expect("shared");
    let reader_b = lock
        .acquire(shared("reader-b"))
        .await
        .expect("shared beside it");
    assert_eq!(reader_a.kind(), LeaseKind::Shared);
    assert_ne!(reader_a.fence(), reader_b.fence());

    let Err(Error::Busy { holders, .. }) = lock.acquire(with_ttl(TTL, "writer")).await else {
        panic!("a writer waits for the readers");
    };
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(holders.iter().all(|h| h.mode == "shared"), "{holders:?}");

    reader_a.release().await.expect("released");
    reader_b.release().await.expect("released");
    lock.acquire(with_ttl(TTL, "writer"))
        .await
        .expect("the writer once they left");
}

#[tokio::test]
async fn permits_go_up_to_the_limit_and_one_limit_holds() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let exports = client.semaphore("exports", 2);
    let one = exports
        .acquire(with_ttl(TTL, "a"))
        .await
        .expect("first permit");
    let two = exports
        .acquire(with_ttl(TTL, "b"))
        .await
        .expect("second permit");
    assert_eq!(one.kind(), LeaseKind::Permit { limit: 2 });
    assert!(two.fence() > one.fence());

    let Err(Error::Busy { holders, limit, .. }) = exports.acquire(with_ttl(TTL, "c")).await else {
        panic!("no third permit under limit 2");
    };
    assert_eq!((holders.len(), limit), (2, Some(2)));
    let other_limit = client
        .semaphore("exports", 3)
        .acquire(with_ttl(TTL, "c"))
        .await;
    assert!(
        matches!(other_limit, Err(Error::LimitConflict { limit: Some(2) })),
        "{other_limit:?}"
    );
    assert_eq!(exports.status().await.expect("status").held, 2);

    one.extend(Duration::from_secs(20))
        .await
        .expect("a permit extends");
    one.release().await.expect("a permit releases");
    exports
        .acquire(with_ttl(TTL, "c"))
        .await
        .expect("a freed place");
}

#[tokio::test]
async fn a_retried_acquire_with_the_same_request_id_gets_the_same_lease() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let options = AcquireOptions {
        request_id: Some("job-7f3a".to_owned()),
        ..with_ttl(TTL, "worker")
    };
    let first = client
        .lock("report")
        .acquire(options.clone())
        .await
        .expect("granted");
    let again = client
        .lock("report")
        .acquire(options)
        .await
        .expect("the same lease, not busy");
    assert_eq!(again.fence(), first.fence());
    assert_eq!(again.token(), first.token());
}

#[tokio::test]
async fn an_acquire_whose_answer_was_lost_is_retried_into_the_same_lease() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let front = LossyFront::start(app.base.clone()).await;
    let client = Client::new(front.base.clone()).expect("client");
    let options = AcquireOptions {
        wait: Duration::from_secs(2),
        ..with_ttl(TTL, "worker")
    };
    // The broker granted the first attempt, whose answer became a 503: the
    // retry carries the same request_id and gets that lease, not busy.
    let lease = client
        .lock("retried")
        .acquire(options)
        .await
        .expect("granted");
    let status = client.status("retried").await.expect("status");
    assert_eq!(
        (status.holder_count, status.fence),
        (1, Some(lease.fence()))
    );
    lease
        .release()
        .await
        .expect("the retry's token is the lease's");
}

#[tokio::test]
async fn a_bad_field_is_a_validation_error_naming_it() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);

    let zero_ttl = client
        .lock("job")
        .acquire(with_ttl(Duration::ZERO, "w"))
        .await;
    assert!(
        matches!(&zero_ttl, Err(Error::Validation { field: Some(f), .. }) if f == "ttl_ms"),
        "{zero_ttl:?}"
    );
    // The name is percent-encoded, so it reaches the lock route and the
    // broker names it, rather than another route answering.
    for name in ["a b", "x/../y", "é"] {
        let bad = client.lock(name).acquire(with_ttl(TTL, "w")).await;
        assert!(
            matches!(&bad, Err(Error::Validation { field: Some(f), .. }) if f == "name"),
            "{name}: {bad:?}"
        );
    }
}

#[tokio::test]
async fn the_token_is_in_no_debug_output() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = client(&app)
        .lock("secret")
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");
    let shown = format!("{lease:?}");
    assert!(!shown.contains(lease.token()), "{shown}");
    assert!(shown.contains(&lease.fence().to_string()), "{shown}");
}

#[tokio::test]
async fn a_fence_is_current_only_while_its_lease_holds() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let lease = client
        .lock("billing:42")
        .acquire(with_ttl(TTL, "biller"))
        .await
        .expect("granted");
    let check = lease.check_fence().await.expect("answered");
    assert_eq!(
        (check.name.as_str(), check.fence),
        ("billing:42", lease.fence())
    );
    assert!(check.current && check.held, "{check:?}");
    assert!(check.expires_in_ms > 0 && check.expires_in_ms <= 10_000);
    let older = client
        .check_fence("billing:42", lease.fence() - 1)
        .await
        .expect("answered");
    assert!(!older.current && older.held, "{older:?}");
    // A permit's fence is checked on its semaphore, not on a lock.
    let permit = client
        .semaphore("billing:42", 1)
        .acquire(with_ttl(TTL, "exporter"))
        .await
        .expect("a permit");
    let on_semaphore = client
        .check_semaphore_fence("billing:42", permit.fence())
        .await
        .expect("answered");
    assert!(on_semaphore.current, "{on_semaphore:?}");
    let on_lock = client
        .check_fence("billing:42", permit.fence())
        .await
        .expect("answered");
    assert!(!on_lock.current, "{on_lock:?}");

    lease.release().await.expect("released");
    let after = client
        .check_fence("billing:42", older.fence + 1)
        .await
        .expect("answered");
    assert!(!after.current && !after.held, "{after:?}");
    permit.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_waits_on_many_locks_at_once_and_each_is_granted() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let holding = client(&app);
    let waiting = Client::builder(app.base.clone())
        .http2()
        .build()
        .expect("client");
    let mut held = Vec::new();
    for i in 0..8 {
        let name = format!("many-{i}");
        held.push(
            holding
                .lock(&name)
                .acquire(with_ttl(TTL, "a"))
                .await
                .expect("granted"),
        );
    }
    let waiters: Vec<_> = held
        .iter()
        .map(|lease| {
            let lock = waiting.lock(lease.name());
            tokio::spawn(async move {
                let options = AcquireOptions {
                    wait: Duration::from_secs(20),
                    ..with_ttl(TTL, "b")
                };
                lock.acquire(options).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "all of them wait");
    let fences: Vec<u64> = held.iter().map(|lease| lease.fence()).collect();
    for lease in held {
        lease.release().await.expect("released");
    }
    for (waiter, before) in waiters.into_iter().zip(fences) {
        let lease = waiter
            .await
            .expect("task")
            .expect("granted after the release");
        assert_eq!(lease.owner(), Some("b"));
        assert!(lease.fence() > before);
        lease.release().await.expect("released over HTTP/2");
    }
}
