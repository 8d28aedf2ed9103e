//! Quorum mode: shared leases and permits, the leases many holders of one
//! name hold at once.

use std::sync::atomic::Ordering;

use futures_util::future::join_all;
use lockbroker_core::lease::unix_micros;
use lockbroker_core::{AcquireOutcome, Lease, LeaseKind, LeaseToken, LockName, LockStore, Space};
use lockbroker_redis::quorum::QuorumStore;
use lockbroker_redis::KeyLayout;

use super::contended::CONTENDERS;
use super::{plain, Quorum};

/// The racing permits' semaphore limit: on five nodes, each permit needs
/// four of them. Sixteen racing from two brokers, two win most rounds and
/// fourteen are told who holds the places.
const LIMIT: u32 = 2;

/// How many times the permits race.
const ROUNDS: usize = 20;

/// One try at a shared lease or a permit (of a semaphore of `limit`) on
/// `lock`, with a fresh token.
async fn try_hold(
    store: &QuorumStore,
    lock: &LockName,
    kind: LeaseKind,
    limit: Option<u32>,
) -> AcquireOutcome {
    let token = LeaseToken::generate_for(kind);
    let outcome = store
        .acquire(plain(lock, kind, limit, &token, 10_000))
        .await;
    outcome.expect("the quorum answers")
}

/// A shared lease or a permit that must be granted.
async fn hold(store: &QuorumStore, lock: &LockName, kind: LeaseKind, limit: Option<u32>) -> Lease {
    match try_hold(store, lock, kind, limit).await {
        AcquireOutcome::Granted(lease) => lease,
        other => panic!("expected a grant: {other:?}"),
    }
}

/// Whether node `at` keeps a copy of `lease` with exactly its fence.
fn copy_carries(quorum: &Quorum, at: usize, lock: &LockName, lease: &Lease) -> bool {
    let key = KeyLayout::new(quorum.prefix.clone()).members(lock);
    let reply = quorum.servers[at].conn().cmd(&["HGETALL", &key]);
    let fence = format!("\"f\":\"{}\"", lease.fence.get());
    let stored = reply.as_array();
    stored.chunks(2).any(|field| {
        field[0].as_text() == Some(lease.token.expose())
            && field[1]
                .as_text()
                .is_some_and(|lease| lease.contains(&fence))
    })
}

#[tokio::test]
async fn every_copy_of_a_shared_lease_or_permit_carries_its_fence_from_the_start() {
    let quorum = Quorum::start(3);
    let (store, counts) = quorum.observed().await;
    let kinds = [
        (LeaseKind::Shared, None, Space::Lock),
        (LeaseKind::Permit, Some(1), Space::Semaphore),
    ];
    for (kind, limit, space) in kinds {
        let lock = LockName::parse_in(space, "quorum-holders-ahead").expect("name");
        // Node 1's mark runs far ahead (another holder's grant reached it
        // alone), and node 2 stalls, so the grant needs node 1. Granting
        // there with a fence of its own would leave node 0's copy under
        // another fence until written back, for any read to count apart:
        // node 1 refuses instead, and the next round proposes above it.
        let ahead = unix_micros() + 1_000_000_000_000;
        let key = KeyLayout::new(quorum.prefix.clone()).lease(&lock);
        (quorum.servers[1].conn()).cmd(&["HSET", &key, "f", &ahead.to_string()]);
        quorum.servers[2].pause();
        let lease = hold(&store, &lock, kind, limit).await;
        assert!(lease.fence.get() > ahead + 1, "{kind:?}: {:?}", lease.fence);
        assert_eq!(counts.write_backs.load(Ordering::Relaxed), 0, "{kind:?}");
        for at in 0..2 {
            assert!(
                copy_carries(&quorum, at, &lock, &lease),
                "{kind:?} on node {at}"
            );
        }
        quorum.servers[2].resume();
        quorum.marks_become(&lock, lease.fence).await;
        store.release(&lock, &lease.token).await.expect("release");
    }
}

/// One round: [`CONTENDERS`] acquires of `name` sent at once from two
/// brokers, each of the kind (and limit) `ask` gives its index. Checks that
/// whatever a busy answer names or lists is a lease some grant of this round
/// returned, with the fence that grant returned, and answers the grants.
async fn race(
    brokers: &[QuorumStore],
    name: &LockName,
    round: usize,
    ask: impl Fn(usize) -> (LeaseKind, Option<u32>),
) -> Vec<Lease> {
    let answers = join_all((0..CONTENDERS).map(|at| {
        let (kind, limit) = ask(at);
        try_hold(&brokers[at % brokers.len()], name, kind, limit)
    }))
    .await;
    let granted: Vec<Lease> = (answers.iter())
        .filter_map(|answer| match answer {
            AcquireOutcome::Granted(lease) => Some(lease.clone()),
            _ => None,
        })
        .collect();
    for answer in &answers {
        let AcquireOutcome::Busy { blockers, .. } = answer else {
            continue;
        };
        for holder in std::iter::once(&blockers.holder).chain(&blockers.holders) {
            assert!(
                granted.iter().any(|lease| lease.fence == holder.fence),
                "round {round}: {:?} names a lease no grant returned: {answers:?}",
                holder.fence
            );
        }
    }
    for lease in &granted {
        brokers[0]
            .release(name, &lease.token)
            .await
            .expect("release");
    }
    granted
}

#[tokio::test]
async fn racing_permits_never_name_a_holder_whose_grant_did_not_return_its_fence() {
    let quorum = Quorum::start(5);
    let brokers = [quorum.connect().await, quorum.connect().await];
    let semaphore = LockName::parse_in(Space::Semaphore, "quorum-racing-permits").expect("name");
    for round in 0..ROUNDS {
        let granted = race(&brokers, &semaphore, round, |_| {
            (LeaseKind::Permit, Some(LIMIT))
        })
        .await;
        assert!(
            granted.len() <= LIMIT as usize,
            "round {round}: {granted:?}"
        );
    }
}

#[tokio::test]
async fn racing_shared_leases_never_name_a_holder_whose_grant_did_not_return_its_fence() {
    let quorum = Quorum::start(5);
    let brokers = [quorum.connect().await, quorum.connect().await];
    let lock = LockName::parse("quorum-racing-shared").expect("name");
    // Three of every four ask for a shared lease, the fourth for the lock
    // alone: each is told which shared leases stand in its way.
    let ask = |at: usize| match at % 4 {
        3 => (LeaseKind::Exclusive, None),
        _ => (LeaseKind::Shared, None),
    };
    for round in 0..ROUNDS {
        let granted = race(&brokers, &lock, round, ask).await;
        let exclusive = (granted.iter())
            .filter(|lease| lease.token.kind() == LeaseKind::Exclusive)
            .count();
        assert!(
            exclusive == 0 || granted.len() == 1,
            "round {round}: the lock alone beside others: {granted:?}"
        );
    }
}
