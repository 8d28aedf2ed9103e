//! When the answers in hand decide a step, before every node answered, and
//! which fence an extend or a release answers when a late copy differs.

use super::*;
use crate::quorum::fan_out::{Answers, Progress};
use crate::quorum::tally::decided;

fn progress<T>(answers: &Answers<T>, awaited: usize) -> Progress<'_, T> {
    Progress { answers, awaited }
}

fn granted(fence: u64) -> Option<Result<AcquireOutcome, StoreError>> {
    Some(Ok(AcquireOutcome::Granted(lease(fence, 1_000))))
}

#[test]
fn an_acquire_is_decided_by_the_needed_grants_without_the_rest() {
    let answers = vec![granted(7), granted(7), None, None, None];
    assert!(!decided::acquire(&progress(&answers, 3), 3), "two of three");
    let answers = vec![granted(7), granted(7), granted(7), None, None];
    assert!(decided::acquire(&progress(&answers, 2), 3));
}

#[test]
fn a_refusal_waits_for_every_node_not_known_slow_unless_none_can_grant() {
    // Busy on a majority already, and one more node to come: it is
    // waited for, so a grant it makes is undone before the answer.
    let answers = vec![
        Some(busy(5, 100)),
        Some(busy(5, 100)),
        granted(9),
        Some(busy(5, 100)),
        None,
    ];
    assert!(!decided::acquire(&progress(&answers, 1), 3));
    // Too few nodes left to answer at all: unavailable, at once.
    let answers: Answers<AcquireOutcome> = vec![
        granted(9),
        Some(Err(down())),
        Some(Err(down())),
        Some(Err(down())),
        None,
    ];
    assert!(decided::acquire(&progress(&answers, 1), 3));
}

#[test]
fn an_extend_is_decided_by_the_needed_extends_or_a_majority_agreeing_why_not() {
    let extended = || {
        Some(Ok(ExtendOutcome::Extended(Renewal {
            fence: Fence::new(7),
            ttl_ms: 1_000,
            expires_at_ms: 2_000,
            validity_ms: 1_000,
            owner: None,
            limit: None,
        })))
    };
    let answers = vec![extended(), extended(), None];
    assert!(decided::extend(&progress(&answers, 1), 2, 2));
    let answers = vec![extended(), Some(Ok(ExtendOutcome::Lost)), None];
    assert!(
        !decided::extend(&progress(&answers, 1), 2, 2),
        "the third decides"
    );
    let answers = vec![
        Some(Ok(ExtendOutcome::Lost)),
        Some(Ok(ExtendOutcome::Lost)),
        None,
    ];
    assert!(
        decided::extend(&progress(&answers, 1), 2, 2),
        "lost on a majority"
    );
    let answers = vec![
        Some(Ok(ExtendOutcome::Released)),
        Some(Ok(ExtendOutcome::Lost)),
        None,
        None,
        None,
    ];
    assert!(!decided::extend(&progress(&answers, 3), 3, 3));
}

#[test]
fn a_release_is_decided_by_a_majority_unless_a_force_release_may_still_show() {
    let released = || {
        Some(Ok(ReleaseOutcome::Released(Release {
            fence: Fence::new(7),
            held_ms: Some(10),
            acknowledged: None,
        })))
    };
    let answers = vec![released(), None, None];
    assert!(!decided::release(&progress(&answers, 2), 2));
    let answers = vec![released(), Some(Ok(ReleaseOutcome::Lost)), None];
    assert!(decided::release(&progress(&answers, 1), 2));
    let forced = || {
        Some(Ok(ReleaseOutcome::ForceReleased {
            by: Principal::ANONYMOUS,
        }))
    };
    let answers = vec![forced(), Some(Ok(ReleaseOutcome::Lost)), None];
    assert!(
        !decided::release(&progress(&answers, 1), 2),
        "the third may say forced"
    );
}

#[test]
fn a_status_is_decided_once_a_majority_holds_a_lease_or_none_can() {
    let held = |fence: u64| {
        let mut status = LockStatus::free(Some(Fence::new(fence)));
        status.held = true;
        status.mode = Some(LeaseKind::Exclusive);
        status.expires_in_ms = 500;
        Some(Ok(status))
    };
    let free = || Some(Ok(LockStatus::free(Some(Fence::new(3)))));
    let answers = vec![held(7), held(7), None, None, None];
    assert!(!decided::status(&progress(&answers, 3), 3));
    let answers = vec![held(7), held(7), held(7), None, None];
    assert!(decided::status(&progress(&answers, 2), 3));
    // A lease on two of three answers could hold a majority with the
    // two nodes to come: not decided.
    let answers = vec![held(7), held(7), free(), None, None];
    assert!(!decided::status(&progress(&answers, 2), 3));
    let answers = vec![held(7), free(), free(), free(), None];
    assert!(
        decided::status(&progress(&answers, 1), 3),
        "7 cannot reach three"
    );
}

#[test]
fn an_extend_and_a_release_answer_the_fence_most_copies_carry() {
    let renewal = |fence: u64| {
        Ok(ExtendOutcome::Extended(Renewal {
            fence: Fence::new(fence),
            ttl_ms: 1_000,
            expires_at_ms: 2_000,
            validity_ms: 1_000,
            owner: None,
            limit: None,
        }))
    };
    // Node 2 granted after the answer went out, with a fence of its own,
    // and has not been given the lease's yet.
    let answers = vec![renewal(7), renewal(7), renewal(9)];
    match extend(answers, 2, 2, 500) {
        Ok(ExtendOutcome::Extended(renewal)) => assert_eq!(renewal.fence, Fence::new(7)),
        other => panic!("{other:?}"),
    }
    let released = |fence: u64| {
        Ok(ReleaseOutcome::Released(Release {
            fence: Fence::new(fence),
            held_ms: Some(10),
            acknowledged: None,
        }))
    };
    let answers = vec![released(9), released(7), released(7)];
    match release(answers, 2) {
        Ok(ReleaseOutcome::Released(release)) => assert_eq!(release.fence, Fence::new(7)),
        other => panic!("{other:?}"),
    }
    // A node the write-back missed keeps a smaller fence: outnumbered too.
    let answers = vec![renewal(5), renewal(7), renewal(7)];
    match extend(answers, 2, 2, 500) {
        Ok(ExtendOutcome::Extended(renewal)) => assert_eq!(renewal.fence, Fence::new(7)),
        other => panic!("{other:?}"),
    }
}
