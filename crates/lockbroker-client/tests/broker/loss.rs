//! Renewal and loss: a renewed lease outlives its TTL, and its loss cancels
//! the work `select!`ed beside it within one renewal interval.

use std::time::{Duration, Instant};

use lockbroker_client::{AcquireOptions, LeaseEnd, LostReason};
use lockbroker_tests::{RedisServer, TestApp};

use crate::{client, with_ttl};

#[tokio::test]
async fn a_loss_while_a_select_body_runs_cancels_it_within_one_renewal_interval() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let ttl = Duration::from_secs(3);
    let interval = ttl / 3;
    let lease = client
        .lock("job")
        .lock(with_ttl(ttl, "worker"))
        .await
        .expect("granted");
    tokio::time::sleep(Duration::from_millis(300)).await;

    // An operator ends the lease behind the holder's back.
    let ended = client.force_release("job").await.expect("force release");
    assert!(ended.released);
    let taken_at = Instant::now();
    let body_ran_to_the_end = tokio::select! {
        () = tokio::time::sleep(Duration::from_secs(20)) => true,
        () = lease.lost() => false,
    };
    let noticed = taken_at.elapsed();
    assert!(!body_ran_to_the_end, "the body was never cancelled");
    assert!(
        noticed <= interval + Duration::from_millis(400),
        "noticed after {noticed:?}, past one renewal interval ({interval:?})"
    );
    assert_eq!(lease.lost_reason(), Some(LostReason::LeaseLost));
    assert!(lease.cancellation().is_cancelled());
    assert!(lease.check().is_err());
}

#[tokio::test]
async fn a_kept_alive_lease_outlives_its_ttl() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let lease = (client.lock("long"))
        .lock(with_ttl(Duration::from_millis(900), "worker"))
        .await
        .expect("granted");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(lease.end(), None, "renewed, not lost");
    let status = client.status("long").await.expect("status");
    assert!(status.held, "{status:?}");
    assert_eq!(status.fence, Some(lease.fence()));
}

#[tokio::test]
async fn a_lease_nobody_renews_is_lost_at_its_local_deadline() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let started = Instant::now();
    let lease = (client.lock("short"))
        .acquire(with_ttl(Duration::from_millis(600), "worker"))
        .await
        .expect("granted");
    tokio::time::timeout(Duration::from_secs(3), lease.lost())
        .await
        .expect("lost at its deadline");
    assert!(
        started.elapsed() <= Duration::from_millis(1_000),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(lease.end(), Some(LeaseEnd::Lost(LostReason::Expired)));
}

#[tokio::test]
async fn renewal_stops_at_the_maximum_hold() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let options = AcquireOptions {
        max_hold: Duration::from_millis(1_500),
        ..with_ttl(Duration::from_millis(900), "hung")
    };
    let started = Instant::now();
    let lease = client.lock("capped").lock(options).await.expect("granted");
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lost at its maximum hold");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_millis(1_200),
        "renewed until the cap: {held:?}"
    );
    assert!(
        held <= Duration::from_millis(2_300),
        "not past the cap: {held:?}"
    );
    assert_eq!(lease.lost_reason(), Some(LostReason::MaxHold));
}
