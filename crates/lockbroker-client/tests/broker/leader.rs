//! Leader election: one leader at a time, a hand-over with a larger term
//! when it resigns, and a lost term noticed by the leader.

use std::time::{Duration, Instant};

use lockbroker_client::{AcquireOptions, Client, LostReason};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};

use crate::client;

fn candidate(app: &TestApp, owner: &str) -> lockbroker_client::Election {
    client(app)
        .election("scheduler")
        .with_options(AcquireOptions {
            ttl: Duration::from_secs(1),
            owner: Some(owner.to_owned()),
            ..AcquireOptions::default()
        })
}

#[tokio::test]
async fn leadership_hands_over_with_a_larger_term_when_the_leader_resigns() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    // One waiting acquire lasts 200 ms at most: the campaign keeps asking.
    settings.locks.max_wait_ms = 200;
    let app = TestApp::spawn_with(settings).await;
    let a = candidate(&app, "node-a");
    let leader = a.campaign().await.expect("node-a leads");
    assert!(leader.is_leader());
    let current = a.leader().await.expect("status").expect("a leader");
    assert_eq!(
        (current.owner.as_deref(), current.term),
        (Some("node-a"), leader.term())
    );

    let b = candidate(&app, "node-b");
    let follower = tokio::spawn(async move { b.campaign().await });
    // Longer than one waiting acquire of the campaign (the TTL): it asks again.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!follower.is_finished(), "one leader at a time");

    let first_term = leader.term();
    let resigned_at = Instant::now();
    leader.resign().await.expect("resigned");
    let next = tokio::time::timeout(Duration::from_secs(3), follower)
        .await
        .expect("the follower takes over at once")
        .expect("campaign task")
        .expect("node-b leads");
    assert!(
        resigned_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        resigned_at.elapsed()
    );
    assert!(next.term() > first_term);
    let current = a.leader().await.expect("status").expect("a leader");
    assert_eq!(current.owner.as_deref(), Some("node-b"));
}

#[tokio::test]
async fn a_leader_whose_lease_is_taken_learns_it_lost() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let leader = candidate(&app, "node-a").campaign().await.expect("leads");
    let admin: Client = client(&app);
    admin
        .force_release("scheduler")
        .await
        .expect("force release");
    tokio::time::timeout(Duration::from_secs(3), leader.lost())
        .await
        .expect("the leader notices within a renewal");
    assert!(!leader.is_leader());
    assert_eq!(leader.lost_reason(), Some(LostReason::LeaseLost));
}
