//! Sessions: one keepalive keeps many leases past the session's TTL, a
//! close releases them all, and a session ended elsewhere, or out of reach
//! past its TTL, is lost with every lease under it.

use std::time::Duration;

use lockbroker_client::{
    Client, Error, LeaseEnd, LeaseKind, LockAsk, LostReason, Session, SessionAcquireOptions,
    SessionEnd, SessionOptions,
};
use lockbroker_tests::{RedisServer, TestApp};

use crate::client;

/// A session of `ttl` held by `owner`.
async fn open(client: &Client, ttl: Duration, owner: &str) -> Session {
    let options = SessionOptions {
        ttl,
        owner: Some(owner.to_owned()),
        ..SessionOptions::default()
    };
    client.session(options).await.expect("session opened")
}

async fn held(client: &Client, name: &str) -> bool {
    client.status(name).await.expect("status").held
}

/// Takes three locks, a shared lease and a permit under `session`.
async fn take_five(session: &Session) -> Vec<lockbroker_client::Lease> {
    let none = SessionAcquireOptions::default;
    let mut leases = session
        .acquire_all(
            &[
                LockAsk::exclusive("ledger:a"),
                LockAsk::exclusive("ledger:b"),
            ],
            none(),
        )
        .await
        .expect("acquire-all under the session");
    let lock = session.lock("ledger:c").acquire(none()).await;
    leases.push(lock.expect("a lease under the session"));
    let shared = SessionAcquireOptions {
        mode: lockbroker_client::LockMode::Shared,
        ..none()
    };
    let reader = session.lock("catalog").acquire(shared).await;
    leases.push(reader.expect("a shared lease under the session"));
    let permit = session.semaphore("render", 2).acquire(none()).await;
    leases.push(permit.expect("a permit under the session"));
    leases
}

#[tokio::test]
async fn one_session_keeps_many_leases_past_its_ttl_and_a_close_releases_them() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let ttl = Duration::from_millis(900);
    let session = open(&client, ttl, "batch-7").await;
    let leases = take_five(&session).await;
    assert_eq!(leases[3].kind(), LeaseKind::Shared);
    assert_eq!(leases[4].kind(), LeaseKind::Permit { limit: 2 });
    for lease in &leases {
        assert_eq!(lease.owner(), Some("batch-7"), "the session's owner");
        assert!(lease.remaining() <= ttl, "{lease:?}");
        // Only the session renews them.
        lease.keep_alive();
        let refused = lease.extend(ttl).await;
        assert!(
            matches!(&refused, Err(Error::Validation { field: Some(f), .. }) if f == "session"),
            "{refused:?}"
        );
    }

    // Well past the TTL: only the session's keepalives kept them.
    tokio::time::sleep(ttl * 3).await;
    for lease in &leases {
        assert_eq!(lease.end(), None, "{lease:?}");
        assert!(!lease.remaining().is_zero(), "{lease:?}");
    }
    for name in ["ledger:a", "ledger:b", "ledger:c", "catalog"] {
        assert!(held(&client, name).await, "{name}");
    }
    let render = client.semaphore_status("render").await.expect("status");
    assert_eq!(render.held, 1);
    let status = session.status().await.expect("session status");
    assert!(status.open, "{status:?}");
    assert_eq!(
        (status.leases, status.ttl_ms, status.owner.as_deref()),
        (5, Some(900), Some("batch-7"))
    );

    let closed = session.close().await.expect("closed");
    assert_eq!(closed.leases_released, 5);
    assert_eq!(session.end(), Some(SessionEnd::Closed));
    assert!(session.cancellation().is_cancelled());
    for lease in &leases {
        assert_eq!(lease.end(), Some(LeaseEnd::Released), "{lease:?}");
        assert!(lease.cancellation().is_cancelled());
    }
    for name in ["ledger:a", "ledger:b", "ledger:c", "catalog"] {
        assert!(!held(&client, name).await, "{name} released by the close");
    }
    let render = client.semaphore_status("render").await.expect("status");
    assert_eq!(render.held, 0);
    assert!(!session.status().await.expect("session status").open);

    // Nothing more under a closed session, and no request to learn it.
    let refused = session.lock("ledger:d").acquire(Default::default()).await;
    assert!(
        matches!(
            refused,
            Err(Error::LeaseLost {
                reason: LostReason::SessionLost
            })
        ),
        "{refused:?}"
    );
    assert!(!held(&client, "ledger:d").await);
}

#[tokio::test]
async fn a_session_closed_elsewhere_is_lost_with_its_leases_at_the_next_keepalive() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let ttl = Duration::from_millis(1_500);
    let session = open(&client, ttl, "batch-8").await;
    let leases = take_five(&session).await;

    // Another holder of the token closes it.
    let closed = client.close_session(session.id(), session.token()).await;
    assert_eq!(closed.expect("closed elsewhere").leases_released, 5);
    let lost = tokio::time::timeout(ttl / 3 + Duration::from_millis(500), leases[2].lost()).await;
    assert!(lost.is_ok(), "lost() fired within one keepalive interval");
    assert_eq!(
        session.end(),
        Some(SessionEnd::Lost(LostReason::SessionLost))
    );
    session.lost().await;
    for lease in &leases {
        assert_eq!(lease.lost_reason(), Some(LostReason::SessionLost));
        assert!(lease.cancellation().is_cancelled());
        // Lost: its release answers so without asking.
        let released = lease.release().await;
        assert!(
            matches!(
                released,
                Err(Error::LeaseLost {
                    reason: LostReason::SessionLost
                })
            ),
            "{released:?}"
        );
    }
    let closed = session.close().await;
    assert!(matches!(closed, Err(Error::LeaseLost { .. })), "{closed:?}");
}

#[tokio::test]
async fn a_session_out_of_reach_is_lost_at_its_local_deadline() {
    let redis = RedisServer::start();
    let mut app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let ttl = Duration::from_millis(1_200);
    let session = open(&client, ttl, "batch-9").await;
    let lease = session.lock("ledger:a").acquire(Default::default()).await;
    let lease = lease.expect("granted");
    app.shutdown().await.expect("the broker stops");

    let lost = tokio::time::timeout(ttl + Duration::from_millis(300), lease.lost()).await;
    assert!(lost.is_ok(), "lost once the TTL ran out by the local clock");
    assert_eq!(session.end(), Some(SessionEnd::Lost(LostReason::Expired)));
    assert_eq!(lease.lost_reason(), Some(LostReason::SessionLost));
    assert!(session.remaining().is_zero() && lease.remaining().is_zero());
}

#[tokio::test]
async fn a_lease_force_released_under_a_session_is_lost_alone() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let ttl = Duration::from_millis(900);
    let session = open(&client, ttl, "batch-10").await;
    let leases = take_five(&session).await;

    client.force_release("ledger:b").await.expect("forced");
    let lost = tokio::time::timeout(ttl / 3 + Duration::from_millis(500), leases[1].lost()).await;
    assert!(lost.is_ok(), "found at the next keepalive");
    assert_eq!(leases[1].lost_reason(), Some(LostReason::LeaseLost));
    tokio::time::sleep(ttl).await;
    assert_eq!(session.end(), None);
    for lease in [&leases[0], &leases[2], &leases[3], &leases[4]] {
        assert_eq!(lease.end(), None, "{lease:?}");
    }
    assert!(held(&client, "ledger:a").await);

    // A lease under the session is released on its own, as any lease.
    leases[0].release().await.expect("released");
    assert!(!held(&client, "ledger:a").await);
    drop(session);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !held(&client, "ledger:c").await,
        "a dropped session is closed"
    );
    assert_eq!(leases[2].end(), Some(LeaseEnd::Released));
}

#[tokio::test]
async fn a_lease_whose_end_was_told_in_a_lost_answer_is_still_found_lost() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let ttl = Duration::from_millis(900);
    let session = open(&client, ttl, "batch-11").await;
    let none = SessionAcquireOptions::default;
    let forced = session.lock("ledger:x").acquire(none()).await.expect("x");
    let kept = session.lock("ledger:y").acquire(none()).await.expect("y");

    client.force_release("ledger:x").await.expect("forced");
    // A keepalive of its own takes the one answer that names the ended
    // lease, as if the session's answer had been lost on its way: the
    // session's next keepalive renews one lease of the two it holds.
    let renewal = (client.keep_session(session.id(), session.token()).await).expect("kept");
    assert_eq!(renewal.leases, 1);

    let lost = tokio::time::timeout(ttl / 3 + Duration::from_millis(500), forced.lost()).await;
    assert!(lost.is_ok(), "the keepalive's short count went unnoticed");
    assert_eq!(forced.lost_reason(), Some(LostReason::LeaseLost));
    tokio::time::sleep(ttl).await;
    assert_eq!((session.end(), kept.end()), (None, None));
}
