//! The cases of a fence check: a fence is current exactly while a valid
//! lease carries it, whatever its kind, read off one status.

use crate::lease::{Fence, FenceCheck, Principal};
use crate::name::LockName;
use crate::store::LockStore;

use super::ask::{granted, name, release, run_id, semaphore, sleep_ms, Ask};
use super::Backend;

/// The check of `fence` on `lock` as the store's status answers it.
async fn check<S: LockStore>(store: &S, lock: &LockName, fence: Fence) -> FenceCheck {
    let status = store.status(lock).await.expect("status");
    FenceCheck::of(&status, fence)
}

/// An exclusive lease's fence is current while it is valid, and neither a
/// neighbouring fence nor the same one after release, the next grant, a
/// force release or expiry (its lock-delay included) is.
pub async fn a_fence_is_current_only_while_its_lease_is_valid<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let lock = name(&run_id(), "fenced");
    let first = Ask::new(10_000);
    let fence = granted(first.on(&store, &lock).await, "grant");
    let now = check(&other, &lock, fence).await;
    assert!(now.current && now.held, "{now:?}");
    assert!(now.expires_in_ms > 0 && now.expires_in_ms <= 10_000);
    for near in [fence.get() - 1, fence.get() + 1] {
        let wrong = check(&other, &lock, Fence::new(near)).await;
        assert!(!wrong.current && wrong.held, "fence {near}: {wrong:?}");
    }
    release(&store, &lock, &first).await;
    let released = check(&other, &lock, fence).await;
    assert!(!released.current && !released.held, "{released:?}");

    let next = granted(Ask::new(10_000).on(&other, &lock).await, "next grant");
    let replaced = check(&store, &lock, fence).await;
    assert!(!replaced.current && replaced.held, "{replaced:?}");
    assert!(check(&store, &lock, next).await.current);
    (store.force_release(&lock, &Principal::ANONYMOUS).await).expect("force release");
    assert!(!check(&store, &lock, next).await.current, "force-released");

    let short = granted(
        Ask::new(150).lock_delay(5_000).on(&store, &lock).await,
        "short grant",
    );
    assert!(check(&store, &lock, short).await.current);
    sleep_ms(300).await;
    let expired = check(&other, &lock, short).await;
    assert!(
        !expired.current && !expired.held,
        "in its lock-delay: {expired:?}"
    );
}

/// Shared leases and permits are checked one by one: each is current while
/// it is valid, whatever the others do.
pub async fn shared_and_permit_fences_are_current_one_by_one<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let prefix = run_id();
    for (lock, asks) in [
        (
            name(&prefix, "readers"),
            [Ask::shared(10_000), Ask::shared(10_000)],
        ),
        (
            semaphore(&prefix, "slots"),
            [Ask::permit(10_000, 3), Ask::permit(10_000, 3)],
        ),
    ] {
        let [one, two] = asks;
        let first = granted(one.on(&store, &lock).await, "first");
        let second = granted(two.on(&store, &lock).await, "second");
        assert!(check(&store, &lock, first).await.current, "{lock}");
        assert!(check(&store, &lock, second).await.current, "{lock}");
        release(&store, &lock, &one).await;
        let gone = check(&store, &lock, first).await;
        assert!(!gone.current && gone.held, "{lock}: {gone:?}");
        assert!(check(&store, &lock, second).await.current, "{lock}");
        release(&store, &lock, &two).await;
        assert!(!check(&store, &lock, second).await.current, "{lock}");
    }
}
