//! The cases of one exclusive lease's life: its grant and fence, retries,
//! expiry and lock-delay, extends, releases, and status (force releases:
//! forced.rs).

use crate::lease::{Fence, LeaseToken, Principal};
use crate::store::{AcquireOutcome, ExtendOutcome, LockStore, ReleaseOutcome};

use super::ask::{busy, granted, name, release, run_id, sleep_ms, ttl, Ask};
use super::Backend;

/// A grant excludes every other acquire until it is released.
pub async fn a_grant_excludes_everyone_else<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let lock = name(&run_id(), "job");
    let first = Ask::new(10_000).owner("w1");
    let fence = granted(first.on(&store, &lock).await, "first");
    for (broker, what) in [(&store, "same broker"), (&other, "other broker")] {
        let (holder, position) = busy(Ask::new(10_000).on(broker, &lock).await, what);
        assert_eq!(holder.owner.as_deref(), Some("w1"));
        assert_eq!(holder.fence, fence);
        assert!(holder.expires_in_ms > 0 && holder.expires_in_ms <= 10_000);
        assert_eq!(position, None, "not a fair waiter");
    }
    assert!(matches!(
        release(&store, &lock, &first).await,
        ReleaseOutcome::Released(_)
    ));
    let next = granted(Ask::new(10_000).on(&other, &lock).await, "after release");
    assert!(next > fence, "{next} > {fence}");
}

/// Every grant's fence exceeds all before it, also after the store lost
/// its data. The last fence starts ten minutes ahead of the clock, so the
/// clock alone makes no grant pass: the store's counter must carry the
/// fences across grants, and the broker's floor across the data loss.
pub async fn fences_grow_across_grants_and_data_loss<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "fenced");
    let ahead = crate::lease::unix_micros() + 600_000_000;
    backend.put_last_fence(&lock, ahead).await;
    let mut last = Fence::new(ahead);
    for round in 0..3 {
        let ask = Ask::new(10_000);
        let fence = granted(ask.on(&store, &lock).await, "grant");
        assert!(fence > last, "round {round}: {fence} > {last}");
        last = fence;
        release(&store, &lock, &ask).await;
    }
    backend.lose_data().await;
    let fresh = backend.broker().await;
    for broker in [&store, &fresh] {
        let ask = Ask::new(10_000);
        let fence = granted(ask.on(broker, &lock).await, "after data loss");
        assert!(fence > last, "after data loss: {fence} > {last}");
        last = fence;
        release(broker, &lock, &ask).await;
    }
}

/// A re-sent acquire (same token) and a retry (same request id, owner and
/// principal) get the same lease; another principal or owner is busy.
pub async fn retries_get_the_same_lease_only_from_the_same_principal<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "retried");
    let key_a = Principal::key("a");
    let first = Ask::new(10_000)
        .owner("w1")
        .request_id("job-1", key_a.clone());
    let fence = granted(first.on(&store, &lock).await, "first");
    let resent = match first.on(&store, &lock).await {
        AcquireOutcome::Granted(lease) => lease,
        other => panic!("a re-sent acquire is not granted: {other:?}"),
    };
    assert_eq!(
        (resent.fence, resent.token.expose()),
        (fence, first.token.expose())
    );
    let retry = Ask::new(10_000).owner("w1").request_id("job-1", key_a);
    match retry.on(&store, &lock).await {
        AcquireOutcome::Granted(lease) => {
            assert_eq!(lease.token.expose(), first.token.expose(), "the same lease");
            assert_eq!(lease.fence, fence);
        }
        other => panic!("a retry by the same principal is not granted: {other:?}"),
    }
    let stranger = Ask::new(10_000)
        .owner("w1")
        .request_id("job-1", Principal::key("b"));
    busy(stranger.on(&store, &lock).await, "another principal");
    let other_owner = Ask::new(10_000)
        .owner("w2")
        .request_id("job-1", Principal::key("a"));
    busy(other_owner.on(&store, &lock).await, "another owner");
}

/// A lease that runs out frees the lock; its token then extends and
/// releases nothing.
pub async fn an_expired_lease_frees_the_lock_and_its_token_is_lost<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "expiring");
    let short = Ask::new(100);
    let fence = granted(short.on(&store, &lock).await, "short lease");
    sleep_ms(250).await;
    let extend = store.extend(&lock, &short.token, ttl(1_000), 0).await;
    assert!(matches!(extend, Ok(ExtendOutcome::Lost)), "{extend:?}");
    assert!(matches!(
        release(&store, &lock, &short).await,
        ReleaseOutcome::Lost
    ));
    let next = granted(Ask::new(1_000).on(&store, &lock).await, "after expiry");
    assert!(next > fence);
}

/// An expired lease keeps its lock unavailable for its lock-delay; a busy
/// answer then says so (no time left on the lease, some on the lock).
pub async fn lock_delay_keeps_an_expired_lock_unavailable<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "delayed");
    granted(
        Ask::new(100).lock_delay(600).on(&store, &lock).await,
        "grant",
    );
    sleep_ms(250).await;
    let (holder, _) = busy(Ask::new(1_000).on(&store, &lock).await, "in lock-delay");
    assert_eq!(holder.expires_in_ms, 0);
    assert!(holder.available_in_ms > 0 && holder.available_in_ms <= 600);
    sleep_ms(holder.available_in_ms + 100).await;
    granted(
        Ask::new(1_000).on(&store, &lock).await,
        "after the lock-delay",
    );
}

/// A release frees the lock at once (no lock-delay), and the released lease
/// is remembered: a re-sent release reports it again, an extend says it was
/// released.
pub async fn a_release_frees_at_once_and_is_remembered<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "released");
    let ask = Ask::new(10_000).lock_delay(60_000);
    let fence = granted(ask.on(&store, &lock).await, "grant");
    match release(&store, &lock, &ask).await {
        ReleaseOutcome::Released(done) => {
            assert_eq!(done.fence, fence);
            assert!(done.held_ms.is_some());
        }
        other => panic!("the holder's release is lost: {other:?}"),
    }
    match release(&store, &lock, &ask).await {
        ReleaseOutcome::Released(again) => {
            assert_eq!(
                (again.fence, again.held_ms),
                (fence, None),
                "a re-sent release"
            );
        }
        other => panic!("a re-sent release is lost: {other:?}"),
    }
    let extend = store.extend(&lock, &ask.token, ttl(1_000), 0).await;
    assert!(matches!(extend, Ok(ExtendOutcome::Released)), "{extend:?}");
    granted(Ask::new(1_000).on(&store, &lock).await, "free at once");
}

/// A release re-sent after the lock was granted again (a client library
/// re-sends a command after a reconnect) still reports that release, with
/// its own fence, also once the next lease expired; an extend then says
/// the lease was released. The next lease keeps its lock-delay all the
/// same, and the memos stay bounded: many releases later the first is
/// forgotten and answers lost.
pub async fn a_release_is_remembered_across_the_next_grants<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let lock = name(&run_id(), "remembered");
    let first = Ask::new(10_000);
    let first_fence = granted(first.on(&store, &lock).await, "first");
    release(&store, &lock, &first).await;
    let next = Ask::new(200).lock_delay(600);
    let next_fence = granted(next.on(&other, &lock).await, "the next holder");
    let resent_release = |outcome: ReleaseOutcome, fence: Fence, what: &str| match outcome {
        ReleaseOutcome::Released(again) => {
            assert_eq!((again.fence, again.held_ms), (fence, None), "{what}");
        }
        other => panic!("{what}: a re-sent release is lost: {other:?}"),
    };
    resent_release(
        release(&store, &lock, &first).await,
        first_fence,
        "re-sent while the next holder holds the lock",
    );
    let extend = store.extend(&lock, &first.token, ttl(1_000), 0).await;
    assert!(matches!(extend, Ok(ExtendOutcome::Released)), "{extend:?}");
    sleep_ms(400).await;
    let (holder, _) = busy(Ask::new(1_000).on(&store, &lock).await, "in lock-delay");
    assert_eq!((holder.fence, holder.expires_in_ms), (next_fence, 0));
    assert!(holder.available_in_ms > 0 && holder.available_in_ms <= 400);
    resent_release(
        release(&other, &lock, &first).await,
        first_fence,
        "re-sent after the next lease expired",
    );
    assert!(matches!(
        release(&other, &lock, &next).await,
        ReleaseOutcome::Lost
    ));
    sleep_ms(holder.available_in_ms + 100).await;
    let mut last = first_fence;
    for round in 0..8 {
        let ask = Ask::new(10_000);
        last = granted(ask.on(&store, &lock).await, "a later grant");
        release(&store, &lock, &ask).await;
        if round == 0 {
            resent_release(
                release(&store, &lock, &first).await,
                first_fence,
                "re-sent two grants later",
            );
        }
    }
    assert!(last > next_fence);
    assert!(
        matches!(release(&store, &lock, &first).await, ReleaseOutcome::Lost),
        "eight releases later the first is forgotten"
    );
    let extend = store.extend(&lock, &first.token, ttl(1_000), 0).await;
    assert!(matches!(extend, Ok(ExtendOutcome::Lost)), "{extend:?}");
}

/// An extend sets the remaining TTL (replace, not add) and keeps the fence;
/// past the max hold it is refused and the lease stays as it was.
pub async fn extends_replace_the_ttl_up_to_the_max_hold<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "extended");
    let ask = Ask::new(1_000);
    let fence = granted(ask.on(&store, &lock).await, "grant");
    match store.extend(&lock, &ask.token, ttl(5_000), 10_000).await {
        Ok(ExtendOutcome::Extended(renewal)) => {
            assert_eq!(renewal.fence, fence);
            // The validity from now: the TTL asked for, or (where clocks may
            // drift, as in quorum mode) a little less.
            assert!(
                renewal.ttl_ms <= 5_000 && renewal.ttl_ms > 4_800,
                "{}",
                renewal.ttl_ms
            );
        }
        other => panic!("extend within the max hold: {other:?}"),
    }
    match store.extend(&lock, &ask.token, ttl(20_000), 10_000).await {
        Ok(ExtendOutcome::MaxHoldExceeded { expires_in_ms }) => {
            assert!(
                expires_in_ms > 1_000 && expires_in_ms <= 5_000,
                "{expires_in_ms}"
            );
        }
        other => panic!("extend past the max hold: {other:?}"),
    }
    let status = store.status(&lock).await.expect("status");
    assert!(status.held && status.expires_in_ms > 1_000);
    let stranger = LeaseToken::generate();
    let extend = store.extend(&lock, &stranger, ttl(1_000), 0).await;
    assert!(matches!(extend, Ok(ExtendOutcome::Lost)), "another token");
}

/// Status tells held or not, the holder's owner while held, and the last
/// fence issued even when free.
pub async fn status_reports_the_holder_and_the_last_fence<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "inspected");
    let never = store.status(&lock).await.expect("status");
    assert!(!never.held && never.fence.is_none() && never.available_in_ms == 0);
    let ask = Ask::new(10_000).owner("w1");
    let fence = granted(ask.on(&store, &lock).await, "grant");
    let held = store.status(&lock).await.expect("status");
    assert!(held.held);
    assert_eq!(
        (held.owner.as_deref(), held.fence),
        (Some("w1"), Some(fence))
    );
    release(&store, &lock, &ask).await;
    let free = store.status(&lock).await.expect("status");
    assert!(!free.held && free.owner.is_none() && free.available_in_ms == 0);
    assert_eq!(free.fence, Some(fence));
}
