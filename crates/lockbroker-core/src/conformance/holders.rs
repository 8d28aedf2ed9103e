//! The cases of shared leases and semaphore permits: the leases of a name
//! that many may hold at once.

use crate::lease::{Fence, LeaseKind, Principal};
use crate::listing::ListRequest;
use crate::name::{LockPrefix, Space};
use crate::store::{
    AcquireOutcome, ExtendOutcome, ForceReleaseOutcome, LockStore, ReleaseOutcome, Watch,
};

use super::ask::{
    blocked, busy, granted, name, next_release_heard, release, run_id, semaphore, sleep_ms, ttl,
    Ask,
};
use super::Backend;

/// Shared leases coexist, from every broker, each with a fence above all
/// before it; an exclusive request meanwhile is busy and names them; once
/// they are gone, it is granted above them all.
pub async fn shared_leases_coexist_and_exclude_an_exclusive_one<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let lock = name(&run_id(), "shared");
    let mut readers = Vec::new();
    let mut last = Fence::new(0);
    for (i, broker) in [&store, &other, &store].into_iter().enumerate() {
        let reader = Ask::shared(10_000).owner(&format!("reader-{i}"));
        let fence = granted(reader.on(broker, &lock).await, "a reader");
        assert!(fence > last, "{fence} > {last}");
        last = fence;
        readers.push(reader);
    }
    let (blockers, position) = blocked(Ask::new(10_000).on(&other, &lock).await, "a writer");
    assert_eq!(position, None, "a writer that does not wait takes no place");
    assert_eq!(blockers.holders.len(), 3, "{blockers:?}");
    assert!(blockers.holders.iter().all(|h| h.mode == LeaseKind::Shared));
    let status = store.status(&lock).await.expect("status");
    assert_eq!(
        (status.held, status.mode, status.holder_count),
        (true, Some(LeaseKind::Shared), 3)
    );
    assert_eq!(status.owner, None, "no single owner");
    for reader in &readers {
        assert!(matches!(
            release(&store, &lock, reader).await,
            ReleaseOutcome::Released(_)
        ));
    }
    let writer = Ask::new(10_000).owner("writer");
    let fence = granted(
        writer.on(&other, &lock).await,
        "the writer after the readers",
    );
    assert!(fence > last, "{fence} > {last}");
    let (holder, _) = busy(Ask::shared(10_000).on(&store, &lock).await, "a reader");
    assert_eq!(
        (holder.mode, holder.owner.as_deref()),
        (LeaseKind::Exclusive, Some("writer"))
    );
    let status = store.status(&lock).await.expect("status");
    assert_eq!(status.mode, Some(LeaseKind::Exclusive));
}

/// A waiting exclusive request takes a place in line that newer shared
/// requests do not pass, waiting or not; the line is served in order.
pub async fn a_waiting_writer_is_not_passed_by_newer_readers<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let lock = name(&run_id(), "no-starving");
    let reader = Ask::shared(10_000);
    granted(reader.on(&store, &lock).await, "the first reader");
    let writer = Ask::new(10_000).waiting_as("w-writer");
    let (_, position) = busy(writer.on(&other, &lock).await, "the writer");
    assert_eq!(position, Some(0), "the writer is first in line");
    busy(
        Ask::shared(10_000).on(&store, &lock).await,
        "a newer reader that does not wait",
    );
    let late = Ask::shared(10_000).waiting_as("w-late");
    let (_, position) = busy(late.on(&store, &lock).await, "a newer reader that waits");
    assert_eq!(position, Some(1), "behind the writer");
    let status = store.status(&lock).await.expect("status");
    assert_eq!(
        status.waiting, 2,
        "the writer and the newer reader wait in line"
    );
    release(&store, &lock, &reader).await;
    busy(
        late.on(&store, &lock).await,
        "the newer reader before the writer",
    );
    let fence = granted(writer.on(&other, &lock).await, "the writer");
    busy(
        late.on(&store, &lock).await,
        "the newer reader while the writer holds",
    );
    release(&other, &lock, &writer).await;
    let next = granted(
        late.on(&store, &lock).await,
        "the newer reader after the writer",
    );
    assert!(next > fence);
}

/// A semaphore grants permits up to its limit, each with a fence above all
/// before; the next is busy naming every holder; a release frees one place.
pub async fn a_semaphore_grants_up_to_its_limit<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let sem = semaphore(&run_id(), "backups");
    let mut permits = Vec::new();
    let mut last = Fence::new(0);
    for i in 0..3u64 {
        let permit = Ask::permit(10_000 + i * 1_000, 3).owner(&format!("host-{i}"));
        let broker = if i % 2 == 0 { &store } else { &other };
        let fence = granted(permit.on(broker, &sem).await, "a permit");
        assert!(fence > last);
        last = fence;
        permits.push(permit);
    }
    let (blockers, _) = blocked(Ask::permit(10_000, 3).on(&other, &sem).await, "a fourth");
    assert_eq!(blockers.holders.len(), 3);
    assert!(blockers.holders.iter().all(|h| h.mode == LeaseKind::Permit));
    assert_eq!(
        blockers.holder.owner.as_deref(),
        Some("host-0"),
        "the first to free"
    );
    let status = store.status(&sem).await.expect("status");
    assert_eq!((status.holder_count, status.limit), (3, Some(3)));
    release(&store, &sem, &permits[1]).await;
    let fence = granted(
        Ask::permit(10_000, 3).on(&other, &sem).await,
        "a freed place",
    );
    assert!(fence > last);
    busy(Ask::permit(10_000, 3).on(&store, &sem).await, "full again");
    let lock = name("", sem.as_str());
    granted(
        Ask::new(10_000).on(&store, &lock).await,
        "the lock of the same name is apart",
    );
}

/// The limit is fixed while any permit takes a place: another limit gets the
/// one in force and changes nothing; once every permit is gone, any goes.
pub async fn a_semaphore_keeps_its_limit_while_permits_are_held<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let sem = semaphore(&run_id(), "limited");
    let first = Ask::permit(10_000, 2);
    granted(first.on(&store, &sem).await, "a permit");
    let conflict = Ask::permit(10_000, 5).on(&store, &sem).await;
    assert!(
        matches!(conflict, AcquireOutcome::LimitConflict { limit: 2 }),
        "{conflict:?}"
    );
    let status = store.status(&sem).await.expect("status");
    assert_eq!(
        (status.holder_count, status.limit),
        (1, Some(2)),
        "nothing changed"
    );
    release(&store, &sem, &first).await;
    granted(
        Ask::permit(10_000, 5).on(&store, &sem).await,
        "another limit once free",
    );
}

/// Permits and shared leases are leases like any other: extends replace the
/// TTL, an unrenewed one frees its place at its TTL (after its lock-delay)
/// and its token is lost, a re-sent release is remembered, and a retry with
/// the same request id gets the same lease.
pub async fn permits_expire_extend_and_retry_like_leases<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let run = run_id();
    let sem = semaphore(&run, "leased");
    let short = Ask::permit(400, 1).lock_delay(300);
    granted(short.on(&store, &sem).await, "a short permit");
    let extended = store.extend(&sem, &short.token, ttl(600), 0).await;
    assert!(
        matches!(extended, Ok(ExtendOutcome::Extended(_))),
        "{extended:?}"
    );
    sleep_ms(700).await;
    let (holder, _) = busy(
        Ask::permit(1_000, 1).on(&store, &sem).await,
        "in its lock-delay",
    );
    assert_eq!(holder.expires_in_ms, 0);
    assert!(matches!(
        store.extend(&sem, &short.token, ttl(1_000), 0).await,
        Ok(ExtendOutcome::Lost)
    ));
    sleep_ms(350).await;
    let key = crate::lease::Principal::key("a");
    let retried = Ask::permit(10_000, 1)
        .owner("o")
        .request_id("r-1", key.clone());
    let fence = granted(retried.on(&store, &sem).await, "after the lock-delay");
    match Ask::permit(10_000, 1)
        .owner("o")
        .request_id("r-1", key)
        .on(&store, &sem)
        .await
    {
        AcquireOutcome::Granted(lease) => {
            assert_eq!(
                (lease.fence, lease.token.expose()),
                (fence, retried.token.expose())
            );
        }
        other => panic!("a retry is not granted: {other:?}"),
    }
    let Ok(ReleaseOutcome::Released(first)) = store.release(&sem, &retried.token).await else {
        panic!("the release");
    };
    let Ok(ReleaseOutcome::Released(again)) = store.release(&sem, &retried.token).await else {
        panic!("a re-sent release is remembered");
    };
    assert_eq!((first.fence, again.held_ms), (again.fence, None));
    let lock = name(&run, "shared-lease");
    let reader = Ask::shared(10_000);
    granted(reader.on(&store, &lock).await, "a reader");
    let extended = store.extend(&lock, &reader.token, ttl(20_000), 0).await;
    assert!(matches!(extended, Ok(ExtendOutcome::Extended(r)) if r.ttl_ms == 20_000));
}

/// A released permit that a caller waits for is announced to every broker;
/// a force release ends every shared lease and permit at once.
pub async fn freed_places_are_announced_and_force_release_ends_them_all<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let mut wakes = other.take_wakes().expect("the store announces");
    let run = run_id();
    let sem = semaphore(&run, "announced");
    let permit = Ask::permit(10_000, 1);
    granted(permit.on(&store, &sem).await, "a permit");
    let _watch = Watch::start(&other, &sem).await;
    busy(
        Ask::permit(10_000, 1)
            .waiting_as("w-next")
            .on(&other, &sem)
            .await,
        "a waiter",
    );
    release(&store, &sem, &permit).await;
    assert_eq!(next_release_heard(&mut wakes).await.as_ref(), Some(&sem));
    let lock = name(&run, "forced-shared");
    let readers = [Ask::shared(10_000), Ask::shared(10_000)];
    let mut top = Fence::new(0);
    for reader in &readers {
        top = top.max(granted(reader.on(&store, &lock).await, "a reader"));
    }
    let ended = (store.force_release(&lock, &Principal::ANONYMOUS).await).expect("force release");
    assert_eq!(
        ended,
        ForceReleaseOutcome::Released {
            fence: top,
            owner: None,
            leases_ended: 2,
            mode: LeaseKind::Shared,
        }
    );
    for reader in &readers {
        let released = release(&store, &lock, reader).await;
        assert!(
            matches!(&released, ReleaseOutcome::ForceReleased { by } if by.is_anonymous()),
            "{released:?}"
        );
    }
    granted(
        Ask::new(1_000).on(&store, &lock).await,
        "a writer after the force release",
    );
}

/// The semaphore listing shows semaphores with permits, apart from locks.
pub async fn listing_shows_semaphores_apart_from_locks<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let run = run_id();
    let sem = semaphore(&run, "listed");
    granted(Ask::permit(10_000, 4).on(&store, &sem).await, "a permit");
    let lock = name(&run, "listed-lock");
    granted(Ask::shared(10_000).on(&store, &lock).await, "a reader");
    let prefix = LockPrefix::parse("prefix", &format!("conf-{run}-")).expect("prefix");
    for (space, expected) in [(Space::Semaphore, &sem), (Space::Lock, &lock)] {
        let mut request = ListRequest {
            space,
            prefix: prefix.clone(),
            ..ListRequest::default()
        };
        let mut seen = Vec::new();
        for _ in 0..100 {
            let page = store.list(&request).await.expect("list");
            seen.extend(
                page.locks
                    .into_iter()
                    .map(|entry| (entry.name, entry.status.holder_count)),
            );
            match page.next_cursor {
                Some(cursor) => request.cursor = cursor,
                None => break,
            }
        }
        assert_eq!(seen, vec![(expected.clone(), 1)], "{space:?}");
    }
}

/// A shared lease's or a permit's release re-sent after its place was
/// granted again still reports that release with its own fence, and an
/// extend then says the lease was released; a holder set remembers a
/// bounded number of releases, the latest.
pub async fn a_place_release_is_remembered_across_the_next_grants<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let run = run_id();
    let (lock, sem) = (name(&run, "shared-memo"), semaphore(&run, "permit-memo"));
    let reader = Ask::shared(10_000);
    let permit = Ask::permit(10_000, 1);
    let firsts = [(&lock, &reader), (&sem, &permit)];
    let mut fences = Vec::new();
    for (name, first) in firsts {
        fences.push(granted(first.on(&store, name).await, "first"));
        release(&store, name, first).await;
    }
    // The places go to others: a writer on the lock, another permit.
    granted(Ask::new(10_000).on(&other, &lock).await, "a writer");
    granted(
        Ask::permit(10_000, 1).on(&other, &sem).await,
        "the next permit",
    );
    for ((name, first), fence) in firsts.into_iter().zip(fences) {
        match release(&store, name, first).await {
            ReleaseOutcome::Released(again) => {
                assert_eq!((again.fence, again.held_ms), (fence, None), "{name}");
            }
            other => panic!("{name}: a re-sent release is lost: {other:?}"),
        }
        let extend = store.extend(name, &first.token, ttl(1_000), 0).await;
        assert!(
            matches!(extend, Ok(ExtendOutcome::Released)),
            "{name}: {extend:?}"
        );
    }
    // Releases beyond what a holder set remembers make room, oldest first.
    let busy_sem = semaphore(&run, "busy-permits");
    let oldest = Ask::permit(10_000, 1);
    granted(oldest.on(&store, &busy_sem).await, "the oldest permit");
    release(&store, &busy_sem, &oldest).await;
    for _ in 0..100 {
        let permit = Ask::permit(10_000, 1);
        granted(permit.on(&store, &busy_sem).await, "a later permit");
        release(&store, &busy_sem, &permit).await;
    }
    assert!(
        matches!(
            release(&store, &busy_sem, &oldest).await,
            ReleaseOutcome::Lost
        ),
        "a hundred releases later the oldest is forgotten"
    );
}
