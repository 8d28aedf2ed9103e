//! Broken histories the checker must catch, and sound ones it must pass.

use super::*;
use crate::client::Timed;
use crate::history::LeaseKind;

mod mixed;
mod multi;
mod summary;

/// An answer the broker gave `at_ms` (local = Redis clock), 1 ms round trip.
fn event(op: Op, lease: u64, at_ms: i64, outcome: Outcome) -> Event {
    Event {
        client: 0,
        lock: "job".into(),
        kind: LeaseKind::Exclusive,
        op,
        lease: Some(lease),
        timed: Timed {
            send_us: at_ms * 1000,
            recv_us: at_ms * 1000 + 1000,
            outcome,
        },
    }
}

fn grant(lease: u64, at_ms: i64, fence: u64, ttl_ms: u64) -> Event {
    let expires_at_ms = u64::try_from(at_ms).expect("positive") + ttl_ms;
    event(
        Op::Acquire,
        lease,
        at_ms,
        Outcome::Granted {
            fence,
            ttl_ms,
            expires_at_ms,
        },
    )
}

/// A status answer listing every valid lease, by fence, after `last` was
/// issued.
fn status(holders: &[u64], last: u64) -> Outcome {
    Outcome::Status {
        held: !holders.is_empty(),
        fence: Some(last),
        holders: holders.to_vec(),
        all_listed: true,
    }
}

#[test]
fn a_clean_handover_passes() {
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Release, 0, 1_050, Outcome::Released { fence: 10 }),
        grant(1, 1_060, 11, 100),
        event(Op::Extend, 0, 1_070, Outcome::Lost),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.release_probes, 1);
}

#[test]
fn a_grant_inside_another_lease_is_a_violation() {
    let events = [grant(0, 1_000, 10, 100), grant(1, 1_050, 11, 100)];
    let report = check(&events);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(report.violations[0].contains("valid until"));
}

#[test]
fn an_acknowledged_extend_keeps_others_out_until_the_new_expiry() {
    let renewed = Outcome::Renewed {
        fence: 10,
        ttl_ms: 200,
        expires_at_ms: 1_250,
    };
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Extend, 0, 1_050, renewed),
        grant(1, 1_150, 11, 100),
    ];
    assert!(!check(&events).ok());
}

#[test]
fn fences_that_go_backwards_are_violations() {
    let events = [grant(0, 1_000, 10, 100), grant(1, 1_200, 9, 100)];
    let report = check(&events);
    assert!(
        report.violations.iter().any(|v| v.contains("before fence")),
        "{report}"
    );
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("already been seen")),
        "{report}"
    );
}

#[test]
fn a_released_lease_that_still_blocks_is_a_violation() {
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Release, 0, 1_010, Outcome::Released { fence: 10 }),
        Event {
            lease: None,
            ..event(
                Op::Acquire,
                9,
                1_020,
                Outcome::Busy {
                    fence: Some(10),
                    in_the_way: vec![10],
                },
            )
        },
        event(Op::Status, 0, 1_030, status(&[10], 10)),
    ];
    assert_eq!(check(&events).violations.len(), 2);
}

#[test]
fn success_on_an_expired_lease_and_lost_on_a_valid_one_are_violations() {
    let late = Outcome::Renewed {
        fence: 10,
        ttl_ms: 100,
        expires_at_ms: 1_300,
    };
    let expired = [grant(0, 1_000, 10, 100), event(Op::Extend, 0, 1_200, late)];
    assert!(!check(&expired).ok());
    let early = [
        grant(0, 1_000, 10, 100),
        event(Op::Release, 0, 1_020, Outcome::Lost),
    ];
    assert!(!check(&early).ok());
}

#[test]
fn an_unanswered_release_may_have_freed_the_lock() {
    let failed = Outcome::Failed {
        status: 503,
        code: "backend_unavailable".into(),
    };
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Release, 0, 1_020, failed),
        grant(1, 1_040, 11, 100),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
}

/// Quorum mode with the default drift (3 ms off a 100 ms lease); `restarts`
/// are local ms at which a node restarted empty.
fn quorum(restarts: &[i64]) -> Backend {
    Backend::Quorum {
        drift: Drift::default(),
        restarts: Some(restarts.iter().map(|ms| ms * 1000).collect()),
    }
}

/// A quorum grant sent at `send_ms` and answered at `recv_ms`, whose
/// earliest-expiring node granted at `node_ms`: the answer's expiry is that
/// node's less the allowance, and its TTL the requested one.
fn quorum_grant(lease: u64, (send_ms, node_ms, recv_ms): (i64, i64, i64), fence: u64) -> Event {
    let ttl_ms = 100;
    let node_expiry = u64::try_from(node_ms).expect("positive") + ttl_ms;
    let mut e = grant(lease, send_ms, fence, ttl_ms);
    e.timed.recv_us = recv_ms * 1000;
    e.timed.outcome = Outcome::Granted {
        fence,
        ttl_ms,
        expires_at_ms: node_expiry - Drift::default().allowance(ttl_ms),
    };
    e
}

#[test]
fn a_quorum_grant_right_after_the_previous_expiry_passes() {
    // The first lease is promised until 1_097. The next acquire waited; its
    // earliest node granted at 1_098 and the answer came at 1_100, but
    // `expires_at_ms - ttl_ms` puts it at 1_095, inside the first lease.
    let events = [
        quorum_grant(0, (1_000, 1_000, 1_001), 10),
        quorum_grant(1, (1_060, 1_098, 1_100), 11),
    ];
    let report = check_against(&events, &quorum(&[]));
    assert!(report.ok(), "{report}");
    // Single mode's reading of the same answers sees an overlap.
    assert!(!check(&events).ok());
}

#[test]
fn a_quorum_grant_answered_inside_another_lease_is_a_violation() {
    let events = [
        quorum_grant(0, (1_000, 1_000, 1_001), 10),
        quorum_grant(1, (1_049, 1_049, 1_050), 11),
    ];
    let report = check_against(&events, &quorum(&[]));
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(report.violations[0].contains("valid until"), "{report}");
}

#[test]
fn a_quorum_lease_lost_early_is_allowed_only_after_a_node_restart() {
    let events = [
        quorum_grant(0, (1_000, 1_000, 1_001), 10),
        event(Op::Extend, 0, 1_020, Outcome::Lost),
        event(Op::Status, 0, 1_030, status(&[], 10)),
    ];
    let report = check_against(&events, &quorum(&[1_010]));
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.lost_after_restart, 2);
    assert!(report.notes.iter().any(|n| n.contains("node restarts")));
    // No restart since the grant: the same answers break the promise.
    assert_eq!(check_against(&events, &quorum(&[990])).violations.len(), 2);
    assert_eq!(check(&events).violations.len(), 2);
}

#[test]
fn quorum_nodes_may_hold_a_lease_past_its_promised_expiry() {
    // Promised until 1_097; the nodes keep it until 1_100 or so. A release
    // landing in between found it on a node.
    let events = [
        quorum_grant(0, (1_000, 1_000, 1_001), 10),
        event(Op::Release, 0, 1_099, Outcome::Released { fence: 10 }),
    ];
    assert!(check_against(&events, &quorum(&[])).ok());
    // Past a whole TTL after the answer, no node can have had it.
    let late = [
        events[0].clone(),
        event(Op::Release, 0, 1_110, Outcome::Released { fence: 10 }),
    ];
    assert!(!check_against(&late, &quorum(&[])).ok());
}

fn sentinel(failovers: &[i64]) -> Backend {
    Backend::Sentinel {
        failovers: Some(failovers.to_vec()),
    }
}

#[test]
fn in_sentinel_mode_a_second_grant_is_allowed_only_across_a_failover() {
    let events = [grant(0, 1_000, 10, 100), grant(1, 1_050, 11, 100)];
    let report = check_against(&events, &sentinel(&[]));
    assert_eq!(report.violations.len(), 1, "no failover: {report}");

    let report = check_against(&events, &sentinel(&[1_020_000]));
    assert!(
        report.ok(),
        "the failover may have lost the first lease: {report}"
    );
    assert_eq!(report.stats.undone_by_failover, 1);
    assert!(
        report.notes.iter().any(|n| n.contains("failover")),
        "{report}"
    );
}

#[test]
fn in_sentinel_mode_fences_must_grow_across_a_failover() {
    let events = [grant(0, 1_000, 10, 100), grant(1, 1_200, 9, 100)];
    let report = check_against(&events, &sentinel(&[1_100_000]));
    assert!(
        report.violations.iter().any(|v| v.contains("before fence")),
        "{report}"
    );
}

#[test]
fn in_sentinel_mode_a_release_may_be_undone_only_by_a_failover() {
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Release, 0, 1_020, Outcome::Released { fence: 10 }),
        event(Op::Status, 0, 1_040, status(&[10], 10)),
    ];
    assert!(!check_against(&events, &sentinel(&[])).ok());
    let report = check_against(&events, &sentinel(&[1_030_000]));
    assert!(report.ok(), "{report}");
    assert_eq!(report.stats.undone_by_failover, 1);
}

#[test]
fn a_status_holder_or_busy_lease_that_no_grant_returned_is_a_violation() {
    let busy = Outcome::Busy {
        fence: Some(12),
        in_the_way: vec![12],
    };
    // Read by a client that holds no lease: only rule 6 judges it.
    let reader = |at, outcome| Event {
        lease: None,
        ..event(Op::Status, 9, at, outcome)
    };
    let events = [
        grant(0, 1_000, 10, 100),
        reader(1_010, status(&[10, 11], 11)),
        Event {
            lease: None,
            ..event(Op::Acquire, 9, 1_020, busy)
        },
    ];
    let report = check(&events);
    assert_eq!(report.violations.len(), 2, "{report}");
    assert!(
        report.violations[0].contains("status read listed a holder with fence 11"),
        "{report}"
    );
    assert!(
        report.violations[1].contains("busy answer said a lease was in the way with fence 12"),
        "{report}"
    );
    let granted_only = [grant(0, 1_000, 10, 100), reader(1_010, status(&[10], 10))];
    assert!(check(&granted_only).ok(), "{}", check(&granted_only));
}

#[test]
fn a_lease_shown_after_an_acquire_of_unknown_outcome_may_be_its_grant() {
    let unknown = Outcome::Failed {
        status: 503,
        code: "backend_unavailable".into(),
    };
    let events = [
        Event {
            lease: None,
            ..event(Op::Acquire, 9, 1_000, unknown)
        },
        Event {
            lease: None,
            ..event(Op::Status, 8, 1_010, status(&[11], 11))
        },
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
}

#[test]
fn an_acquire_of_unknown_outcome_explains_a_holder_only_until_its_lease_would_end() {
    // A grant on another lock says how long a lease lasts: 100 ms.
    let other = Event {
        lock: "other".into(),
        ..grant(0, 1_000, 10, 100)
    };
    let failed = |status| Event {
        lease: None,
        ..event(
            Op::Acquire,
            1,
            1_000,
            Outcome::Failed {
                status,
                code: String::new(),
            },
        )
    };
    let read = |at_ms| Event {
        lease: None,
        ..event(Op::Status, 2, at_ms, status(&[11], 11))
    };
    // Answered 503 at 1.001 s: it may have taken fence 11 until a TTL past
    // a late grant, no later.
    let soon = [other.clone(), failed(503), read(1_500)];
    assert!(check(&soon).ok(), "{}", check(&soon));
    let later = [other.clone(), failed(503), read(3_000)];
    let report = check(&later);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(report.violations[0].contains("fence 11"), "{report}");
    // Without an answer, or where the Redis client may run it again after
    // a failover, it may have been granted at any later time.
    let unanswered = [other.clone(), failed(0), read(3_000)];
    assert!(check(&unanswered).ok(), "{}", check(&unanswered));
    assert!(check_against(&later, &sentinel(&[])).ok());
}

/// A session's keepalive renews each lease under it, and its close releases
/// each: the same rules as the lease's own extend and release.
#[test]
fn a_session_keepalive_and_close_are_held_to_each_lease_under_the_session() {
    let kept = Outcome::Renewed {
        fence: 10,
        ttl_ms: 200,
        expires_at_ms: 1_250,
    };
    // Renewed by the keepalive: a grant before the new expiry overlaps.
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Keepalive, 0, 1_050, kept.clone()),
        grant(1, 1_150, 11, 100),
    ];
    assert!(!check(&events).ok(), "a keepalive keeps others out");

    // Closed: free at once, and never shown held after the close came back.
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Keepalive, 0, 1_050, kept.clone()),
        event(Op::Close, 0, 1_060, Outcome::Released { fence: 10 }),
        grant(1, 1_070, 11, 100),
    ];
    let report = check(&events);
    assert!(report.ok(), "{report}");
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Close, 0, 1_060, Outcome::Released { fence: 10 }),
        event(Op::Status, 0, 1_070, status(&[10], 10)),
    ];
    assert!(!check(&events).ok(), "held after the close");

    // A session lost while its lease was surely valid.
    let events = [
        grant(0, 1_000, 10, 100),
        event(Op::Keepalive, 0, 1_020, Outcome::Lost),
    ];
    let report = check(&events);
    assert_eq!(report.violations.len(), 1, "{report}");
}

/// A lease a step found lost (an extend, or a keepalive that named it
/// ended) stays lost: a later step that renews it is a violation in every
/// mode, whatever the times.
#[test]
fn a_lease_found_lost_is_never_renewed_again() {
    let renewed = |expires_at_ms| Outcome::Renewed {
        fence: 10,
        ttl_ms: 200,
        expires_at_ms,
    };
    for op in [Op::Extend, Op::Keepalive] {
        let events = [
            grant(0, 1_000, 10, 100),
            event(op, 0, 1_090, renewed(1_290)),
            event(op, 0, 1_295, Outcome::Lost),
            event(op, 0, 1_300, renewed(1_500)),
        ];
        for backend in [Backend::Single, quorum(&[])] {
            let report = check_against(&events, &backend);
            assert!(
                report
                    .violations
                    .iter()
                    .any(|v| v.contains("after an earlier step found it lost")),
                "{op:?} in {backend:?}: {report}"
            );
        }
    }
}
