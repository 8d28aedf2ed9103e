//! The cases of an operator's force release as its former holders see it:
//! every lease it ends, exclusive, shared or a permit, tells its holder who
//! ended it, for as long as releases are remembered.

use crate::lease::{LeaseKind, Principal};
use crate::name::LockName;
use crate::store::{ExtendOutcome, ForceReleaseOutcome, LockStore, ReleaseOutcome};

use super::ask::{granted, name, release, run_id, semaphore, sleep_ms, ttl, Ask};
use super::Backend;

/// A force release ends the lease whoever holds it; its holder's token then
/// answers that it was force-released, and a second force release finds
/// nothing.
pub async fn force_release_ends_the_lease_for_its_holder<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let lock = name(&run_id(), "forced");
    let ask = Ask::new(10_000).owner("stuck");
    let fence = granted(ask.on(&store, &lock).await, "grant");
    let ops = Principal::key("ops");
    let ended = store
        .force_release(&lock, &ops)
        .await
        .expect("force release");
    assert_eq!(
        ended,
        ForceReleaseOutcome::Released {
            fence,
            owner: Some("stuck".into()),
            leases_ended: 1,
            mode: crate::lease::LeaseKind::Exclusive,
        }
    );
    let released = release(&store, &lock, &ask).await;
    assert!(
        matches!(&released, ReleaseOutcome::ForceReleased { by } if *by == ops),
        "{released:?}"
    );
    let extend = store.extend(&lock, &ask.token, ttl(1_000), 0).await;
    assert!(
        matches!(&extend, Ok(ExtendOutcome::ForceReleased { by }) if *by == ops),
        "{extend:?}"
    );
    let again = store
        .force_release(&lock, &ops)
        .await
        .expect("force release");
    assert_eq!(again, ForceReleaseOutcome::NotHeld);
    let next = granted(Ask::new(1_000).on(&store, &lock).await, "after");
    assert!(next > fence);
}

/// Checks that `ask`'s extend and release (twice: a re-sent release never
/// reads as released) answer that `by` force-released its lease.
async fn told_forced_by<S: LockStore>(store: &S, lock: &LockName, ask: &Ask, by: &Principal) {
    for attempt in ["release", "re-sent release"] {
        let released = release(store, lock, ask).await;
        assert!(
            matches!(&released, ReleaseOutcome::ForceReleased { by: who } if who == by),
            "{lock}: {attempt}: {released:?}"
        );
    }
    let extend = store.extend(lock, &ask.token, ttl(1_000), 0).await;
    assert!(
        matches!(&extend, Ok(ExtendOutcome::ForceReleased { by: who }) if who == by),
        "{lock}: extend: {extend:?}"
    );
}

/// A force release by the key "ops" ends a held lock, its holder learns so
/// from extend and release, also after the next holder took the lock, while
/// that holder's own release is remembered apart from it. Each of a
/// semaphore's permits and a lock's shared lease learns the same, and a
/// broker without keys force-releases as the anonymous principal. A lease
/// that had expired before (only its lock-delay left) was lost, and its
/// holder hears that instead.
pub async fn a_force_released_holder_learns_who_ended_its_lease<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let run = run_id();
    let ops = Principal::key("ops");

    let lock = name(&run, "forced-memo");
    let stuck = Ask::new(10_000);
    granted(stuck.on(&store, &lock).await, "the stuck holder");
    (store.force_release(&lock, &ops).await).expect("force release");
    told_forced_by(&other, &lock, &stuck, &ops).await;
    let next = Ask::new(10_000);
    granted(next.on(&other, &lock).await, "the next holder");
    told_forced_by(&store, &lock, &stuck, &ops).await;
    assert!(matches!(
        release(&other, &lock, &next).await,
        ReleaseOutcome::Released(_)
    ));
    let resent = release(&other, &lock, &next).await;
    assert!(
        matches!(&resent, ReleaseOutcome::Released(r) if r.held_ms.is_none()),
        "the next holder's re-sent release: {resent:?}"
    );
    told_forced_by(&store, &lock, &stuck, &ops).await;

    let sem = semaphore(&run, "forced-memo");
    let permits = [Ask::permit(10_000, 2), Ask::permit(10_000, 2)];
    for permit in &permits {
        granted(permit.on(&store, &sem).await, "a permit");
    }
    let ended = (store.force_release(&sem, &ops).await).expect("force release");
    assert!(
        matches!(
            ended,
            ForceReleaseOutcome::Released {
                leases_ended: 2,
                mode: LeaseKind::Permit,
                ..
            }
        ),
        "{ended:?}"
    );
    for permit in &permits {
        told_forced_by(&other, &sem, permit, &ops).await;
    }
    granted(
        Ask::permit(10_000, 1).on(&other, &sem).await,
        "a permit under another limit",
    );
    told_forced_by(&store, &sem, &permits[0], &ops).await;

    let shared = name(&run, "forced-shared-memo");
    let reader = Ask::shared(10_000);
    granted(reader.on(&store, &shared).await, "a reader");
    (store.force_release(&shared, &Principal::ANONYMOUS).await).expect("force release");
    told_forced_by(&other, &shared, &reader, &Principal::ANONYMOUS).await;

    let delayed = name(&run, "forced-after-expiry");
    let late = Ask::new(200).lock_delay(10_000);
    granted(late.on(&store, &delayed).await, "a lease left to expire");
    sleep_ms(400).await;
    let ended = (store.force_release(&delayed, &ops).await).expect("force release");
    assert!(
        matches!(ended, ForceReleaseOutcome::Released { .. }),
        "{ended:?}"
    );
    assert!(matches!(
        release(&store, &delayed, &late).await,
        ReleaseOutcome::Lost
    ));
    let extend = store.extend(&delayed, &late.token, ttl(1_000), 0).await;
    assert!(matches!(extend, Ok(ExtendOutcome::Lost)), "{extend:?}");
}
