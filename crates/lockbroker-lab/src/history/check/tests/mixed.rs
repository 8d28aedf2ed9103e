//! Shared leases and semaphore permits: broken histories the checker must
//! catch for each kind's promise, and sound mixed ones it must pass.

use super::{event, grant, sentinel, status};
use crate::client::Outcome;
use crate::history::check::{check, check_against};
use crate::history::{Event, LeaseKind, Op};

/// `event` as a step of a lease of `kind` (on the name "job" of its family).
fn as_kind(kind: LeaseKind, e: Event) -> Event {
    Event { kind, ..e }
}

fn shared(lease: u64, at_ms: i64, fence: u64) -> Event {
    as_kind(LeaseKind::Shared, grant(lease, at_ms, fence, 100))
}

fn exclusive(lease: u64, at_ms: i64, fence: u64) -> Event {
    grant(lease, at_ms, fence, 100)
}

fn permit(lease: u64, at_ms: i64, fence: u64, limit: u32) -> Event {
    as_kind(LeaseKind::Permit { limit }, grant(lease, at_ms, fence, 100))
}

fn released(kind: LeaseKind, lease: u64, at_ms: i64, fence: u64) -> Event {
    as_kind(
        kind,
        event(Op::Release, lease, at_ms, Outcome::Released { fence }),
    )
}

/// A refused acquire (no lease) whose answer names `fence` and lists the
/// leases `in_the_way`.
fn busy(kind: LeaseKind, at_ms: i64, fence: u64, in_the_way: &[u64]) -> Event {
    let outcome = Outcome::Busy {
        fence: Some(fence),
        in_the_way: in_the_way.to_vec(),
    };
    Event {
        lease: None,
        ..as_kind(kind, event(Op::Acquire, 99, at_ms, outcome))
    }
}

const LIMIT_2: LeaseKind = LeaseKind::Permit { limit: 2 };

#[test]
fn limit_plus_one_overlapping_permits_is_a_violation() {
    let events = [
        permit(0, 1_000, 1, 2),
        permit(1, 1_010, 2, 2),
        permit(2, 1_020, 3, 2),
    ];
    let report = check(&events);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0].contains("3 valid at once")
            && report.violations[0].contains("limit of 2"),
        "{report}"
    );
    assert_eq!(report.stats.most_permits_at_once, 3);

    // The limit itself is fine, and so is a third permit once one is released.
    let events = [
        permit(0, 1_000, 1, 2),
        permit(1, 1_010, 2, 2),
        released(LIMIT_2, 0, 1_015, 1),
        permit(2, 1_020, 3, 2),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.most_permits_at_once, 2);
}

#[test]
fn permits_that_never_certainly_overlapped_pass() {
    // The first permit expired at 1_100; the third came at 1_100 exactly.
    let events = [
        permit(0, 1_000, 1, 2),
        permit(1, 1_050, 2, 2),
        permit(2, 1_100, 3, 2),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
}

#[test]
fn an_exclusive_lease_overlapping_a_shared_one_is_a_violation() {
    let after_shared = [shared(0, 1_000, 10), exclusive(1, 1_050, 11)];
    let report = check(&after_shared);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0].contains("fence 11 was granted at 1050 ms while shared fence 10"),
        "{report}"
    );

    let after_exclusive = [exclusive(0, 1_000, 10), shared(1, 1_050, 11)];
    let report = check(&after_exclusive);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0].contains("shared fence 11 was granted"),
        "{report}"
    );
}

#[test]
fn two_shared_leases_overlapping_is_fine() {
    let events = [
        shared(0, 1_000, 10),
        shared(1, 1_020, 11),
        shared(2, 1_040, 12),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.most_shared_at_once, 3);
    assert_eq!(report.stats.shared_leases, 3);
}

#[test]
fn an_exclusive_lease_after_shared_ones_waits_for_the_last_of_them() {
    // The earlier shared lease ends first; the later one still holds.
    let events = [
        shared(0, 1_000, 10),
        shared(1, 1_040, 11),
        released(LeaseKind::Shared, 0, 1_050, 10),
        exclusive(2, 1_100, 12),
    ];
    let report = check(&events);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(
        report.violations[0].contains("while shared fence 11"),
        "{report}"
    );
}

#[test]
fn a_fence_going_backwards_across_kinds_is_a_violation() {
    let events = [
        exclusive(0, 1_000, 10),
        released(LeaseKind::Exclusive, 0, 1_050, 10),
        shared(1, 1_200, 9),
    ];
    let report = check(&events);
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("fence 10 was granted at 1000 ms, before shared fence 9")),
        "{report}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("shared fence 9 was granted after fence 10 had already been seen")),
        "{report}"
    );
    // The two never were valid at once: no overlap is claimed.
    assert_eq!(report.violations.len(), 2, "{report}");
}

#[test]
fn a_lock_and_a_semaphore_of_one_name_are_two_names() {
    // Lock "job" and semaphore "job" each have a holder and fences of their
    // own; neither is in the other's way.
    let events = [
        exclusive(0, 1_000, 10),
        permit(1, 1_010, 3, 1),
        released(LeaseKind::Exclusive, 0, 1_030, 10),
        shared(2, 1_040, 11),
        permit(3, 1_200, 4, 1),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    assert_eq!((report.stats.locks, report.stats.semaphores), (1, 1));
}

#[test]
fn a_released_lease_in_the_way_is_a_violation_but_the_queue_stand_in_is_not() {
    let events = [
        shared(0, 1_000, 10),
        released(LeaseKind::Shared, 0, 1_010, 10),
        // An earlier waiter is owed the lock: the answer names the last
        // fence issued, the released lease's, as no lease in the way.
        busy(LeaseKind::Shared, 1_020, 10, &[]),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");

    let mut blocked = events.to_vec();
    blocked.push(busy(LeaseKind::Exclusive, 1_030, 10, &[10]));
    let report = check(&blocked);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(report.violations[0].contains("in its way"), "{report}");

    // The named holder is another lease, but the list holds a released one.
    let permits = [
        permit(0, 1_000, 1, 2),
        permit(1, 1_005, 2, 2),
        released(LIMIT_2, 0, 1_010, 1),
        busy(LIMIT_2, 1_020, 2, &[2, 1]),
    ];
    assert_eq!(check(&permits).violations.len(), 1);
}

#[test]
fn a_shared_lease_shows_in_the_holders_not_in_the_last_fence() {
    let as_shared =
        |lease, at, outcome| as_kind(LeaseKind::Shared, event(Op::Status, lease, at, outcome));
    let events = [
        shared(0, 1_000, 10),
        shared(1, 1_005, 11),
        released(LeaseKind::Shared, 1, 1_010, 11),
        // Held by fence 10 while the last fence issued is the released 11.
        as_shared(1, 1_020, status(&[10], 11)),
        as_shared(0, 1_030, status(&[10], 11)),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.release_probes, 1);

    // A valid shared lease missing from a complete list is not held.
    let mut missing = events.to_vec();
    missing.push(as_shared(0, 1_040, status(&[12], 12)));
    let report = check(&missing);
    let unshown = report
        .violations
        .iter()
        .filter(|v| v.contains("did not show"));
    assert_eq!(unshown.count(), 1, "{report}");

    // From a list cut short, its absence proves nothing.
    let mut cut = events.to_vec();
    let mut partial = status(&[12], 12);
    if let Outcome::Status { all_listed, .. } = &mut partial {
        *all_listed = false;
    }
    cut.push(shared(2, 1_035, 12));
    cut.push(as_shared(0, 1_040, partial));
    assert!(check(&cut).ok(), "{}", check(&cut));
}

#[test]
fn in_sentinel_mode_permits_above_the_limit_are_allowed_only_across_a_failover() {
    let events = [permit(0, 1_000, 1, 1), permit(1, 1_050, 2, 1)];
    let report = check_against(&events, &sentinel(&[]));
    assert_eq!(report.violations.len(), 1, "no failover: {report}");
    let report = check_against(&events, &sentinel(&[1_020_000]));
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.undone_by_failover, 1);
}

#[test]
fn a_clean_mixed_history_passes() {
    let renewed = Outcome::Renewed {
        fence: 12,
        ttl_ms: 200,
        expires_at_ms: 1_270,
    };
    let events = [
        // Two shared leases overlap, then both are released.
        shared(0, 1_000, 10),
        shared(1, 1_010, 11),
        as_kind(
            LeaseKind::Shared,
            event(Op::Status, 1, 1_020, status(&[10, 11], 11)),
        ),
        released(LeaseKind::Shared, 0, 1_030, 10),
        busy(LeaseKind::Exclusive, 1_035, 11, &[11]),
        released(LeaseKind::Shared, 1, 1_040, 11),
        // Then an exclusive lease, extended and released.
        exclusive(2, 1_050, 12),
        event(Op::Extend, 2, 1_070, renewed),
        busy(LeaseKind::Shared, 1_080, 12, &[12]),
        released(LeaseKind::Exclusive, 2, 1_200, 12),
        as_kind(
            LeaseKind::Shared,
            event(Op::Extend, 1, 1_210, Outcome::Lost),
        ),
        shared(3, 1_210, 13),
        // Semaphore "job", limit 2: up to two permits at once.
        permit(4, 1_000, 1, 2),
        permit(5, 1_005, 2, 2),
        busy(LIMIT_2, 1_010, 1, &[1, 2]),
        released(LIMIT_2, 4, 1_020, 1),
        permit(6, 1_030, 3, 2),
        as_kind(LIMIT_2, event(Op::Status, 6, 1_040, status(&[2, 3], 3))),
        released(LIMIT_2, 5, 1_050, 2),
        released(LIMIT_2, 6, 1_060, 3),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    let s = &report.stats;
    assert_eq!((s.locks, s.semaphores), (1, 1));
    assert_eq!((s.leases, s.shared_leases, s.permits), (7, 3, 3));
    assert_eq!((s.most_shared_at_once, s.most_permits_at_once), (2, 2));
    assert_eq!(s.release_probes, 1);
    let summary = report.to_string();
    assert!(
        summary.contains("permits: 3 (at most 2 valid at once)"),
        "{summary}"
    );
}
