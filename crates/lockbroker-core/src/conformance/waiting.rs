//! The cases of waiting for a lock: fair queues, and the release
//! announcements that wake waiters on every broker.

use std::time::Duration;

use crate::store::{LockStore, Watch};
use crate::wait::Wake;

use super::ask::{busy, granted, name, next_release_heard, release, run_id, Ask};
use super::Backend;

/// Fair waiters queue in arrival order; while the queue lives nobody passes
/// it, not even a non-waiting acquire.
pub async fn fair_waiters_are_served_in_arrival_order<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let lock = name(&run_id(), "fair");
    let holder = Ask::new(10_000);
    granted(holder.on(&store, &lock).await, "holder");
    let first = Ask::new(10_000).fair("w-first");
    let second = Ask::new(10_000).fair("w-second");
    assert_eq!(busy(first.on(&store, &lock).await, "first").1, Some(0));
    assert_eq!(busy(second.on(&other, &lock).await, "second").1, Some(1));
    release(&store, &lock, &holder).await;
    let (in_the_way, _) = busy(Ask::new(1_000).on(&other, &lock).await, "jumping the queue");
    assert_eq!(
        in_the_way.expires_in_ms, 0,
        "the lock is free, owed to the queue"
    );
    busy(second.on(&other, &lock).await, "second before first");
    granted(first.on(&store, &lock).await, "first in line");
    release(&store, &lock, &first).await;
    granted(second.on(&other, &lock).await, "second in line");
}

/// A fair waiter that gives up leaves the queue, and the next in line is
/// told its turn has come when the lock is free.
pub async fn a_fair_waiter_that_leaves_passes_the_turn_on<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let mut wakes = other.take_wakes().expect("the store announces");
    let lock = name(&run_id(), "leaving");
    let holder = Ask::new(10_000);
    granted(holder.on(&store, &lock).await, "holder");
    let leaver = Ask::new(10_000).fair("w-leaver");
    let stayer = Ask::new(10_000).fair("w-stayer");
    busy(leaver.on(&store, &lock).await, "leaver");
    let _watch = Watch::start(&other, &lock).await;
    busy(stayer.on(&other, &lock).await, "stayer");
    release(&store, &lock, &holder).await;
    store.leave_queue(&lock, "w-leaver").await.expect("leave");
    let turn = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match wakes.recv().await {
                Some(Wake::Turn { waiter_id }) if waiter_id == "w-stayer" => return,
                Some(_) => continue,
                None => panic!("the announcements ended"),
            }
        }
    })
    .await;
    assert!(turn.is_ok(), "the stayer is told its turn");
    granted(stayer.on(&other, &lock).await, "the stayer");
}

/// A release on one broker reaches every other broker sharing the store.
pub async fn releases_are_announced_to_every_broker<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let mut wakes = other.take_wakes().expect("the store announces");
    let lock = name(&run_id(), "announced");
    let ask = Ask::new(10_000);
    granted(ask.on(&store, &lock).await, "grant");
    // The other broker has a waiter: it watches the lock first.
    let _watch = Watch::start(&other, &lock).await;
    busy(Ask::new(10_000).waiting().on(&other, &lock).await, "waiter");
    release(&store, &lock, &ask).await;
    assert_eq!(
        next_release_heard(&mut wakes).await.as_ref(),
        Some(&lock),
        "the other broker hears the release its waiter waits for"
    );
}

/// A release that nobody waited for is not announced: a lock cycle without
/// contention costs no message to any broker.
pub async fn a_release_nobody_waits_for_is_not_announced<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let mut wakes = other.take_wakes().expect("the store announces");
    let run = run_id();
    let (quiet, watched) = (name(&run, "quiet"), name(&run, "watched"));
    let _watches = (
        Watch::start(&other, &quiet).await,
        Watch::start(&other, &watched).await,
    );
    let ask = Ask::new(10_000);
    granted(ask.on(&store, &quiet).await, "grant");
    // A caller that does not wait is turned away without marking the lease.
    busy(
        Ask::new(10_000).on(&other, &quiet).await,
        "non-waiting caller",
    );
    release(&store, &quiet, &ask).await;
    // Announcements of one store arrive in the order they were made, so had
    // the first release been announced, it would be heard before this one.
    let ask = Ask::new(10_000);
    granted(ask.on(&store, &watched).await, "grant");
    busy(
        Ask::new(10_000).waiting().on(&other, &watched).await,
        "waiter",
    );
    release(&store, &watched, &ask).await;
    assert_eq!(
        next_release_heard(&mut wakes).await.as_ref(),
        Some(&watched),
        "the first release heard is the one a waiter waited for"
    );
}
