//! The cases of a session's record: what joins it only while the session's
//! own lease is valid, what a read tells, and what outlives the session for
//! its close.

use crate::lease::{LeaseToken, LockDelay};
use crate::name::{LockName, Space};
use crate::session::{SessionEntry, SessionMember, SessionTerms, SessionWrite};
use crate::store::{LockStore, ReleaseOutcome};

use super::ask::{granted, name, release, run_id, semaphore, sleep_ms, ttl, Ask};
use super::Backend;

fn session_name(run: &str) -> LockName {
    LockName::parse_in(Space::Session, &format!("conf-{run}")).expect("valid session name")
}

fn member(name: LockName) -> SessionMember {
    SessionMember {
        name,
        token: LeaseToken::generate(),
    }
}

fn joining(member: &SessionMember, max_members: u32) -> SessionEntry<'_> {
    SessionEntry::Member {
        member,
        max_members,
    }
}

/// A session's record takes its terms and member leases only from the
/// token of its valid lease, up to the most members allowed; a read shows
/// them (and, with the token, how long the session stays valid); members
/// leave one by one, and the whole record on a close. Once the session's
/// lease is released nothing joins, yet its members stay readable for the
/// close that releases them.
pub async fn a_session_record_takes_leases_only_while_its_lease_is_valid<B: Backend>(backend: &B) {
    let (store, other) = (backend.broker().await, backend.broker().await);
    let run = run_id();
    let session = session_name(&run);
    let lease = Ask::new(5_000).owner("opener");
    granted(lease.on(&store, &session).await, "the session's lease");
    let terms = SessionTerms {
        ttl: ttl(5_000),
        lock_delay: LockDelay::parse(250, u64::MAX).expect("delay"),
    };
    let written = store
        .session_write(&session, &lease.token, SessionEntry::Terms(terms))
        .await
        .expect("write terms");
    assert!(
        matches!(written, SessionWrite::Written { valid_for_ms, .. } if valid_for_ms > 3_000 && valid_for_ms <= 5_000),
        "{written:?}"
    );
    let (lock, permit) = (member(name(&run, "a")), member(semaphore(&run, "b")));
    for (who, joined) in [(&lock, &store), (&permit, &other)] {
        let written = joined
            .session_write(&session, &lease.token, joining(who, 2))
            .await;
        assert!(
            matches!(written, Ok(SessionWrite::Written { .. })),
            "{written:?}"
        );
    }
    let third = member(name(&run, "c"));
    let full = store
        .session_write(&session, &lease.token, joining(&third, 2))
        .await;
    assert_eq!(
        full.expect("write"),
        SessionWrite::Full,
        "a third member of two at most"
    );
    let again = store
        .session_write(&session, &lease.token, joining(&lock, 2))
        .await;
    assert!(
        matches!(again, Ok(SessionWrite::Written { .. })),
        "a member written again: {again:?}"
    );
    let stranger = LeaseToken::generate();
    let refused = store
        .session_write(&session, &stranger, joining(&third, 10))
        .await;
    assert_eq!(
        refused.expect("write"),
        SessionWrite::NotOpen,
        "another token"
    );

    let read = other
        .session_read(&session, Some(&lease.token))
        .await
        .expect("read");
    assert_eq!(read.owner.as_deref(), Some("opener"), "the session's owner");
    assert!(
        read.valid_for_ms
            .is_some_and(|ms| ms > 3_000 && ms <= 5_000),
        "{read:?}"
    );
    assert_eq!(read.terms, Some(terms));
    assert_eq!(
        read.members,
        vec![lock.clone(), permit.clone()],
        "sorted by name"
    );
    let anonymous = store.session_read(&session, None).await.expect("read");
    assert_eq!(anonymous.valid_for_ms, None, "no token, no validity");
    let strange = store
        .session_read(&session, Some(&stranger))
        .await
        .expect("read");
    assert_eq!(strange.valid_for_ms, None, "another token holds no session");

    store
        .session_forget(&session, Some(std::slice::from_ref(&lock.token)))
        .await
        .expect("forget one");
    let read = store.session_read(&session, None).await.expect("read");
    assert_eq!(read.members, vec![permit.clone()]);

    assert!(matches!(
        release(&store, &session, &lease).await,
        ReleaseOutcome::Released(_)
    ));
    let late = other
        .session_write(&session, &lease.token, joining(&third, 10))
        .await;
    assert_eq!(
        late.expect("write"),
        SessionWrite::NotOpen,
        "after the session's release"
    );
    let read = store
        .session_read(&session, Some(&lease.token))
        .await
        .expect("read");
    assert_eq!(
        (read.valid_for_ms, read.owner),
        (None, None),
        "a session no longer held"
    );
    assert_eq!(read.members, vec![permit], "kept for the close");

    other
        .session_forget(&session, None)
        .await
        .expect("forget all");
    let read = store.session_read(&session, None).await.expect("read");
    assert_eq!((read.terms, read.members.len()), (None, 0), "{read:?}");
}

/// A session whose lease ran out takes no more leases, while its record
/// still names the ones it held, so a close soon after finds them.
pub async fn an_expired_session_takes_no_lease_and_keeps_its_record<B: Backend>(backend: &B) {
    let store = backend.broker().await;
    let run = run_id();
    let session = session_name(&run);
    let lease = Ask::new(300);
    granted(lease.on(&store, &session).await, "the session's lease");
    let held = member(name(&run, "held"));
    let written = store
        .session_write(&session, &lease.token, joining(&held, 10))
        .await;
    assert!(
        matches!(written, Ok(SessionWrite::Written { valid_for_ms, .. }) if valid_for_ms <= 300)
    );
    sleep_ms(450).await;
    let late = member(name(&run, "late"));
    let refused = store
        .session_write(&session, &lease.token, joining(&late, 10))
        .await;
    assert_eq!(refused.expect("write"), SessionWrite::NotOpen);
    let read = store
        .session_read(&session, Some(&lease.token))
        .await
        .expect("read");
    assert_eq!(read.valid_for_ms, None, "expired");
    assert_eq!(read.members, vec![held]);
}
