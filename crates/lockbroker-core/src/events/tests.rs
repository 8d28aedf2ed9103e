//! The hub's rules on its own: expiries told by its timer, resumes, the
//! stream limit, and nothing kept while nobody watches.

use std::time::Duration;

use super::*;
use crate::name::LockName;

fn change(kind: ChangeKind, fence: u64, expires_in_ms: u64) -> Change {
    Change {
        name: LockName::parse("job").expect("name"),
        kind,
        mode: LeaseKind::Exclusive,
        fence: Fence::new(fence),
        owner: Some("w1".into()),
        expires_in_ms,
        expires_at_ms: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_watched_lease_that_is_not_extended_ends_with_expired_at_its_ttl() {
    let hub = EventHub::new(10, 64);
    let mut stream = hub.open().expect("a stream");
    hub.apply(change(ChangeKind::Acquired, 7, 500));
    assert_eq!(
        stream.events.recv().await.expect("acquired").change.kind,
        ChangeKind::Acquired
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    hub.apply(change(ChangeKind::Extended, 7, 500));
    stream.events.recv().await.expect("extended");
    let extended_at = Instant::now();
    let expired = stream.events.recv().await.expect("expired");
    assert_eq!(
        (expired.change.kind, expired.change.fence),
        (ChangeKind::Expired, Fence::new(7))
    );
    assert_eq!(expired.change.owner.as_deref(), Some("w1"));
    assert!(
        extended_at.elapsed() >= Duration::from_millis(500),
        "at the new TTL, not the old"
    );

    // A released lease never expires.
    hub.apply(change(ChangeKind::Acquired, 8, 300));
    hub.apply(change(ChangeKind::Released, 8, 0));
    stream.events.recv().await.expect("acquired");
    let released = stream.events.recv().await.expect("released");
    assert_eq!(
        released.change.owner.as_deref(),
        Some("w1"),
        "the holder streams knew"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        stream.events.try_recv().is_err(),
        "no expiry after a release"
    );
}

#[tokio::test]
async fn a_resume_gets_what_followed_and_nothing_for_ids_it_no_longer_knows() {
    let hub = EventHub::new(10, 64);
    let _stream = hub.open().expect("a stream");
    let before = hub.last_id();
    for fence in 1..=3 {
        hub.apply(change(ChangeKind::Acquired, fence, 10_000));
    }
    let after: Vec<u64> = (hub.since(before).expect("kept").iter())
        .map(|e| e.change.fence.get())
        .collect();
    assert_eq!(after, [1, 2, 3]);
    assert_eq!(
        hub.since(hub.last_id()).map(|e| e.len()),
        Some(0),
        "up to date"
    );
    assert!(
        hub.since(1).is_none(),
        "an id from before this broker started"
    );
    assert!(
        hub.since(u64::MAX).is_none(),
        "an id this broker never issued"
    );
}

#[tokio::test]
async fn streams_are_capped_and_nothing_is_kept_while_nobody_watches() {
    let hub = EventHub::new(2, 64);
    assert!(!hub.watched());
    let before = hub.last_id();
    hub.apply(change(ChangeKind::Acquired, 1, 10_000));
    assert_eq!(hub.last_id(), before, "no event without a stream");
    let (one, two) = (hub.open().expect("one"), hub.open().expect("two"));
    assert!(hub.open().is_none(), "the third is refused");
    drop(one);
    let three = hub.open().expect("a closed stream frees its place");
    drop((two, three));
    assert!(hub.watched(), "kept a while after the last stream closed");
}

#[tokio::test(start_paused = true)]
async fn a_term_granted_as_the_last_one_expires_follows_that_expiry() {
    let hub = EventHub::new(10, 64);
    let mut stream = hub.open().expect("a stream");
    let mut kinds = Vec::new();
    hub.apply(change(ChangeKind::Acquired, 1, 500));
    // The next term is heard a moment before this broker's timer fires.
    tokio::time::sleep(Duration::from_millis(499)).await;
    hub.apply(change(ChangeKind::Acquired, 2, 500));
    // A shared lease granted next to a far-off exclusive one proves nothing.
    hub.apply(Change {
        mode: LeaseKind::Shared,
        ..change(ChangeKind::Acquired, 3, 500)
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    while let Ok(event) = stream.events.try_recv() {
        kinds.push((event.change.kind, event.change.fence.get()));
    }
    assert_eq!(
        kinds,
        [
            (ChangeKind::Acquired, 1),
            (ChangeKind::Expired, 1),
            (ChangeKind::Acquired, 2),
            (ChangeKind::Acquired, 3),
            (ChangeKind::Expired, 2),
            (ChangeKind::Expired, 3),
        ],
        "each term's end before the next term, and each expiry once"
    );
}
