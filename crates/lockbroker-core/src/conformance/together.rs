//! The case of a set of leases granted in one step, for a store that can
//! ([`LockStore::acquire_together`]): every lease or none, and a refused
//! set leaves no trace.

use crate::store::{AcquireOutcome, LockStore, Together};

use super::ask::{busy, granted, name, release, run_id, Ask};
use super::Backend;

/// A set is granted whole or not at all. While one of its locks is held,
/// the set is refused at that lock, and the free ones are left as they
/// were: not held, no fence spent. Once free, every lease is granted, each
/// with a fence above all before. A store that cannot take a set in one
/// step says so, and has nothing else to show here.
pub async fn a_set_of_leases_is_granted_whole_or_not_at_all<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let run = run_id();
    let (a, b, c) = (name(&run, "a"), name(&run, "b"), name(&run, "c"));
    let earlier = Ask::new(10_000);
    let before = granted(earlier.on(&store, &a).await, "a, before");
    release(&store, &a, &earlier).await;
    let holder = Ask::new(10_000).owner("holder");
    let held = granted(holder.on(&store, &b).await, "b's holder");
    let (first, second, third) = (Ask::new(10_000), Ask::new(10_000), Ask::shared(10_000));
    let asks = [(&first, &a), (&second, &b), (&third, &c)];
    let all: Vec<_> = asks.iter().map(|(ask, lock)| ask.params(lock)).collect();
    let Some(answer) = store.acquire_together(&all).await else {
        return;
    };
    match answer.expect("the store answers") {
        Together::Refused {
            at,
            outcome: outcome @ AcquireOutcome::Busy { .. },
        } => {
            assert_eq!(at, 1, "refused at b");
            let (holder_seen, _) = busy(outcome, "b");
            assert_eq!(holder_seen.fence, held);
        }
        other => panic!("expected a refusal at b, got {other:?}"),
    }
    for lock in [&a, &c] {
        let status = store.status(lock).await.expect("status");
        assert!(!status.held, "{lock} left held by a refused set");
    }
    let status = store.status(&a).await.expect("status");
    assert!(
        status.fence.is_none_or(|fence| fence <= before.max(held)),
        "a fence spent on a refused set"
    );

    release(&store, &b, &holder).await;
    let (first, second, third) = (Ask::new(10_000), Ask::new(10_000), Ask::shared(10_000));
    let asks = [(&first, &a), (&second, &b), (&third, &c)];
    let all: Vec<_> = asks.iter().map(|(ask, lock)| ask.params(lock)).collect();
    let leases = match store.acquire_together(&all).await {
        Some(Ok(Together::Granted(leases))) => leases,
        other => panic!("expected every lease, got {other:?}"),
    };
    assert_eq!(leases.len(), 3);
    for (lease, (ask, lock)) in leases.iter().zip(asks) {
        assert_eq!(&lease.name, lock);
        assert_eq!(lease.token, ask.token);
        assert!(lease.fence > held, "{lock}: {} > {held}", lease.fence);
        assert!(
            store.status(lock).await.expect("status").held,
            "{lock} held"
        );
    }
}
