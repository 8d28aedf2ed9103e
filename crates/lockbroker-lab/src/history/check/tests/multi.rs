//! Several locks at once: an acquire-all recorded once per lock, and a
//! release-all once per lease. Each lease of a grant must keep a single
//! grant's promises, a refused one must have kept nothing, and one with no
//! answer may have taken any of its locks.

use super::{event, grant, status};
use crate::client::Outcome;
use crate::history::check::check;
use crate::history::{Event, Op};

/// `e` on the lock `lock` instead of "job".
fn on(lock: &str, e: Event) -> Event {
    Event {
        lock: lock.into(),
        ..e
    }
}

/// An acquire-all at `at_ms` that granted lease `lease` with `fence` (a
/// 100 ms TTL) on `lock`: one lock's part of the grant.
fn granted(lock: &str, lease: u64, at_ms: i64, fence: u64) -> Event {
    Event {
        op: Op::AcquireAll,
        ..on(lock, grant(lease, at_ms, fence, 100))
    }
}

/// One lock's part of an acquire-all at `at_ms` answered `outcome` (no
/// lease taken).
fn not_granted(lock: &str, at_ms: i64, outcome: Outcome) -> Event {
    Event {
        lease: None,
        ..on(lock, event(Op::AcquireAll, 99, at_ms, outcome))
    }
}

/// A release-all's result for lease `lease` of `lock` at `at_ms`.
fn released_all(lock: &str, lease: u64, at_ms: i64, outcome: Outcome) -> Event {
    on(lock, event(Op::ReleaseAll, lease, at_ms, outcome))
}

/// A status read of `lock` by a client holding no lease of it.
fn read(lock: &str, at_ms: i64, outcome: Outcome) -> Event {
    Event {
        lease: None,
        ..on(lock, event(Op::Status, 9, at_ms, outcome))
    }
}

fn unavailable() -> Outcome {
    Outcome::Failed {
        status: 503,
        code: "backend_unavailable".into(),
    }
}

#[test]
fn an_acquire_all_held_and_released_together_then_granted_again_passes() {
    let renewed = |fence| Outcome::Renewed {
        fence,
        ttl_ms: 100,
        expires_at_ms: 1_130,
    };
    let events = [
        granted("a", 0, 1_000, 10),
        granted("b", 1, 1_000, 20),
        on("a", event(Op::Extend, 0, 1_030, renewed(10))),
        on("b", event(Op::Extend, 1, 1_030, renewed(20))),
        released_all("a", 0, 1_050, Outcome::Released { fence: 10 }),
        released_all("b", 1, 1_050, Outcome::Released { fence: 20 }),
        on("a", event(Op::Extend, 0, 1_060, Outcome::Lost)),
        granted("a", 2, 1_070, 11),
        granted("b", 3, 1_070, 21),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.leases, 4);
    assert_eq!(report.stats.release_probes, 1);
}

#[test]
fn a_lease_of_an_acquire_all_is_exclusive_as_a_single_grant() {
    // The acquire-all's lease of b is valid until 1_100; a single grant of
    // b at 1_050 overlaps it, and so does another acquire-all's.
    let single = [
        granted("a", 0, 1_000, 10),
        granted("b", 1, 1_000, 20),
        on("b", grant(2, 1_050, 21, 100)),
    ];
    let report = check(&single);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0].contains("lock b: fence 21 was granted"),
        "{report}"
    );
    let other_acquire_all = [
        granted("a", 0, 1_000, 10),
        granted("b", 1, 1_000, 20),
        granted("b", 2, 1_050, 21),
        granted("c", 3, 1_050, 30),
    ];
    assert_eq!(check(&other_acquire_all).violations.len(), 1);
}

#[test]
fn fences_of_an_acquire_all_must_exceed_those_already_seen() {
    let events = [
        on("b", grant(0, 1_000, 20, 100)),
        on(
            "b",
            event(Op::Release, 0, 1_010, Outcome::Released { fence: 20 }),
        ),
        granted("a", 1, 1_020, 10),
        granted("b", 2, 1_020, 19),
    ];
    let report = check(&events);
    assert!(
        (report.violations.iter())
            .any(|v| v.contains("lock b: fence 19 was granted after fence 20")),
        "{report}"
    );
}

#[test]
fn a_release_all_result_is_judged_as_a_single_release() {
    // Another lease's fence in the answer, and lost while valid.
    let events = [
        granted("a", 0, 1_000, 10),
        granted("b", 1, 1_000, 20),
        released_all("a", 0, 1_020, Outcome::Released { fence: 11 }),
        released_all("b", 1, 1_020, Outcome::Lost),
    ];
    let report = check(&events);
    assert_eq!(report.violations.len(), 2, "{report}");
    assert!(report.violations[0].contains("release answered fence 11"));
    assert!(report.violations[1].contains("release answered lease_lost"));

    // An acknowledged release-all frees the lock: still shown, or still
    // in the way of an acquire, breaks it.
    let events = [
        granted("a", 0, 1_000, 10),
        released_all("a", 0, 1_020, Outcome::Released { fence: 10 }),
        on("a", event(Op::Status, 0, 1_030, status(&[10], 10))),
        Event {
            lease: None,
            ..on(
                "a",
                event(
                    Op::Acquire,
                    9,
                    1_040,
                    Outcome::Busy {
                        fence: Some(10),
                        in_the_way: vec![10],
                    },
                ),
            )
        },
    ];
    assert_eq!(check(&events).violations.len(), 2, "{}", check(&events));

    // A release-all with no answer may have freed the lock.
    let events = [
        granted("a", 0, 1_000, 10),
        released_all("a", 0, 1_020, unavailable()),
        on("a", grant(1, 1_040, 11, 100)),
    ];
    assert!(check(&events).ok(), "{}", check(&events));
}

#[test]
fn a_refused_acquire_all_keeps_none_of_its_locks() {
    // b was busy (lease 0); a was refused. A read of a after the refusal
    // that finds a lease no grant returned: the acquire-all kept it.
    let busy = Outcome::Busy {
        fence: Some(20),
        in_the_way: vec![20],
    };
    let refused = [
        on("b", grant(0, 1_000, 20, 100)),
        not_granted("a", 1_010, Outcome::Refused),
        not_granted("b", 1_010, busy.clone()),
        read("a", 1_020, status(&[11], 11)),
    ];
    let report = check(&refused);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0].contains("lock a: a status read listed a holder with fence 11"),
        "{report}"
    );
    assert_eq!(report.stats.outcomes[&(Op::AcquireAll, "refused")], 1);

    // While the acquire-all was in flight it may have held a for a moment.
    let mut during = refused.clone();
    during[3].timed.send_us = 1_010_500;
    during[3].timed.recv_us = 1_010_800;
    assert!(check(&during).ok(), "{}", check(&during));

    // A busy answer must name a lease that exists.
    let phantom = [
        not_granted("a", 1_010, Outcome::Refused),
        not_granted(
            "b",
            1_010,
            Outcome::Busy {
                fence: Some(21),
                in_the_way: vec![21],
            },
        ),
    ];
    let report = check(&phantom);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(report.violations[0].contains("lock b: a busy answer"));
}

#[test]
fn an_acquire_all_without_an_answer_may_have_taken_each_of_its_locks() {
    let events = [
        not_granted("a", 1_000, unavailable()),
        not_granted("b", 1_000, unavailable()),
        read("a", 1_020, status(&[11], 11)),
        read("b", 1_030, status(&[21], 21)),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    // A lock it did not ask for had no such acquire.
    let elsewhere = [
        not_granted("a", 1_000, unavailable()),
        read("c", 1_020, status(&[31], 31)),
    ];
    assert_eq!(check(&elsewhere).violations.len(), 1);
}
