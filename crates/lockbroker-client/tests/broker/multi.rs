//! Several locks at once: `acquire_all` takes every lock or none and names
//! the busy one, waits until the holder releases, its leases are ordinary
//! leases renewed by `keep_alive`, and `release_all` ends each lease as its
//! own release would.

use std::time::{Duration, Instant};

use lockbroker_client::{AcquireOptions, Client, Error, LeaseEnd, LeaseKind, LockAsk, LostReason};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};

use crate::{client, with_ttl};

const TTL: Duration = Duration::from_secs(10);

fn exclusive(names: &[&str]) -> Vec<LockAsk> {
    names.iter().copied().map(LockAsk::exclusive).collect()
}

async fn held(client: &Client, name: &str) -> bool {
    client.status(name).await.expect("status").held
}

#[tokio::test]
async fn acquire_all_takes_every_lock_or_none_and_busy_names_the_lock() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let holder = (client.lock("ledger:b"))
        .acquire(with_ttl(TTL, "holder"))
        .await
        .expect("granted");

    let asks = exclusive(&["ledger:c", "ledger:b", "ledger:a"]);
    let refused = client.acquire_all(&asks, with_ttl(TTL, "mover")).await;
    let Err(Error::Busy {
        lock, owner, fence, ..
    }) = &refused
    else {
        panic!("busy: {refused:?}");
    };
    assert_eq!(lock.as_deref(), Some("ledger:b"));
    assert_eq!(
        (owner.as_deref(), *fence),
        (Some("holder"), Some(holder.fence()))
    );
    let said = refused.as_ref().expect_err("busy").to_string();
    assert!(said.starts_with(r#"the lock "ledger:b" is busy"#), "{said}");
    for name in ["ledger:a", "ledger:c"] {
        assert!(!held(&client, name).await, "{name} was left held");
    }

    holder.release().await.expect("released");
    let asks = vec![
        LockAsk::exclusive("ledger:c"),
        LockAsk::exclusive("ledger:b"),
        LockAsk::shared("ledger:a"),
    ];
    let leases = (client.acquire_all(&asks, with_ttl(TTL, "mover")))
        .await
        .expect("every lock");
    let names: Vec<&str> = leases.iter().map(|lease| lease.name()).collect();
    assert_eq!(names, ["ledger:c", "ledger:b", "ledger:a"], "as asked");
    let kinds: Vec<LeaseKind> = leases.iter().map(|lease| lease.kind()).collect();
    assert_eq!(
        kinds,
        [
            LeaseKind::Exclusive,
            LeaseKind::Exclusive,
            LeaseKind::Shared
        ]
    );
    assert!(leases[1].fence() > holder.fence());
    assert!(leases[0].token() != leases[1].token() && leases[1].token() != leases[2].token());
    for lease in &leases {
        let status = client.status(lease.name()).await.expect("status");
        assert_eq!(status.fence, Some(lease.fence()), "{status:?}");
        assert_eq!(lease.owner(), Some("mover"));
    }
    // Each is an ordinary lease: extended and released on its own.
    leases[0].extend(TTL * 2).await.expect("extended");
    leases[0].release().await.expect("released");
    assert!(!held(&client, "ledger:c").await);
    assert!(held(&client, "ledger:b").await);
}

#[tokio::test]
async fn a_name_given_twice_is_refused_without_asking_and_none_is_no_request() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let twice = [LockAsk::shared("twice:a"), LockAsk::exclusive("twice:a")];
    let refused = client.acquire_all(&twice, with_ttl(TTL, "w")).await;
    assert!(
        matches!(&refused, Err(Error::Validation { field: Some(f), .. }) if f == "locks[1].name"),
        "{refused:?}"
    );
    assert!(!held(&client, "twice:a").await);
    let none = client.acquire_all(&[], with_ttl(TTL, "w")).await;
    assert!(none.expect("no locks, no leases").is_empty());
    let released = client.release_all(&[]).await;
    assert!(released.expect("nothing to release").is_empty());
}

#[tokio::test]
async fn acquire_all_waits_until_the_holder_releases() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    // The broker holds one waiting request 200 ms at most: the client asks
    // again with the rest of its wait.
    settings.locks.max_wait_ms = 200;
    let app = TestApp::spawn_with(settings).await;
    let client = client(&app);
    let holder = (client.lock("table:q"))
        .acquire(with_ttl(TTL, "holder"))
        .await
        .expect("granted");
    let fence = holder.fence();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        holder.release().await.expect("released");
    });

    let started = Instant::now();
    let waiting = AcquireOptions {
        wait: Duration::from_secs(5),
        ..with_ttl(TTL, "mover")
    };
    let asks = exclusive(&["table:p", "table:q"]);
    let leases = (client.acquire_all(&asks, waiting))
        .await
        .expect("granted after the wait");
    assert!(started.elapsed() >= Duration::from_millis(650));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(leases[1].fence() > fence);
    assert!(held(&client, "table:p").await && held(&client, "table:q").await);
}

#[tokio::test]
async fn a_wait_that_runs_out_is_busy_and_takes_nothing() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let _holder = (client.lock("nightly:b"))
        .acquire(with_ttl(TTL, "holder"))
        .await
        .expect("granted");
    let started = Instant::now();
    let waiting = AcquireOptions {
        wait: Duration::from_millis(400),
        ..with_ttl(TTL, "mover")
    };
    let asks = exclusive(&["nightly:a", "nightly:b"]);
    let refused = client.acquire_all(&asks, waiting).await;
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(
        matches!(&refused, Err(Error::Busy { lock: Some(lock), .. }) if lock == "nightly:b"),
        "{refused:?}"
    );
    assert!(!held(&client, "nightly:a").await);
}

#[tokio::test]
async fn the_same_request_id_gets_the_same_leases() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let options = AcquireOptions {
        request_id: Some("move-42".to_owned()),
        ..with_ttl(TTL, "mover")
    };
    let asks = exclusive(&["batch:1", "batch:2"]);
    let first = (client.acquire_all(&asks, options.clone()))
        .await
        .expect("granted");
    let again = (client.acquire_all(&asks, options))
        .await
        .expect("the same leases, not busy");
    for (a, b) in first.iter().zip(&again) {
        assert_eq!((a.token(), a.fence()), (b.token(), b.fence()));
    }
}

#[tokio::test]
async fn lock_all_renews_every_lease_past_its_ttl() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let asks = exclusive(&["long:a", "long:b"]);
    let leases = (client.lock_all(&asks, with_ttl(Duration::from_millis(900), "worker")))
        .await
        .expect("granted");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for lease in &leases {
        assert_eq!(lease.end(), None, "{} renewed, not lost", lease.name());
        let status = client.status(lease.name()).await.expect("status");
        assert!(status.held, "{status:?}");
        assert_eq!(status.fence, Some(lease.fence()));
    }
}

#[tokio::test]
async fn first_lost_names_the_lease_that_ended_while_the_others_are_held() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let asks = exclusive(&["set:a", "set:b", "set:c"]);
    let leases = (client.lock_all(&asks, with_ttl(Duration::from_millis(900), "worker")))
        .await
        .expect("granted");
    // Renewed past its TTL, the set stays whole: nothing ends.
    let whole = tokio::time::timeout(
        Duration::from_millis(1_500),
        lockbroker_client::first_lost(&leases),
    )
    .await;
    assert!(whole.is_err(), "ended: {:?}", whole.map(|l| l.name()));

    client.force_release("set:b").await.expect("ended");
    let lost = tokio::time::timeout(
        Duration::from_secs(2),
        lockbroker_client::first_lost(&leases),
    )
    .await
    .expect("told at the next renewal");
    assert_eq!(lost.name(), "set:b");
    assert_eq!(lost.lost_reason(), Some(LostReason::LeaseLost));
    let results = client.release_all(&leases).await.expect("answered");
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    assert!(!held(&client, "set:a").await && !held(&client, "set:c").await);
}

#[tokio::test]
async fn release_all_ends_each_lease_as_its_own_release_would() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let mut leases = (client.lock_all(&exclusive(&["pair:a", "pair:b"]), with_ttl(TTL, "w")))
        .await
        .expect("granted");
    // Lost at the broker, which this client learns from release_all.
    let taken = (client.lock("pair:taken"))
        .acquire(with_ttl(TTL, "w"))
        .await
        .expect("granted");
    client.force_release("pair:taken").await.expect("ended");
    leases.push(taken);

    let results = client.release_all(&leases).await.expect("answered");
    assert_eq!(results.len(), 3);
    for (lease, result) in leases.iter().zip(&results).take(2) {
        let released = result.as_ref().expect("released");
        assert_eq!(released.fence, lease.fence());
        assert_eq!(lease.end(), Some(LeaseEnd::Released));
        assert!(lease.cancellation().is_cancelled());
        assert!(matches!(lease.extend(TTL).await, Err(Error::Released)));
        assert!(!held(&client, lease.name()).await, "{}", lease.name());
    }
    assert!(
        matches!(
            results[2],
            Err(Error::LeaseLost {
                reason: LostReason::LeaseLost
            })
        ),
        "{:?}",
        results[2]
    );
    assert_eq!(leases[2].lost_reason(), Some(LostReason::LeaseLost));
    assert!(leases[2].cancellation().is_cancelled());
}

#[tokio::test]
async fn a_lease_already_lost_reads_lost_and_the_rest_are_released() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let ttl = Duration::from_millis(900);
    let leases = (client.lock_all(&exclusive(&["known:a", "known:b"]), with_ttl(ttl, "w")))
        .await
        .expect("granted");
    client.force_release("known:a").await.expect("ended");
    // Its renewal, every ttl / 3, hears that it is lost.
    tokio::time::timeout(Duration::from_secs(2), leases[0].lost())
        .await
        .expect("lost within a renewal");
    assert_eq!(leases[0].lost_reason(), Some(LostReason::LeaseLost));

    let results = client.release_all(&leases).await.expect("answered");
    assert!(
        matches!(results[0], Err(Error::LeaseLost { .. })),
        "{:?}",
        results[0]
    );
    assert_eq!(
        results[1].as_ref().expect("released").fence,
        leases[1].fence()
    );
    assert_eq!(leases[0].lost_reason(), Some(LostReason::LeaseLost));
    assert_eq!(leases[1].end(), Some(LeaseEnd::Released));
    assert!(!held(&client, "known:b").await);
}
