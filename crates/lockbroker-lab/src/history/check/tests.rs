//! Broken histories the checker must catch, and sound ones it must pass.

use super::*;

/// An answer the broker gave `at_ms` (local = Redis clock), 1 ms round trip.
fn event(op: Op, lease: u64, at_ms: i64, outcome: Outcome) -> Event {
    Event {
        client: 0,
        lock: "job".into(),
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
            ..event(Op::Acquire, 9, 1_020, Outcome::Busy { fence: Some(10) })
        },
        event(
            Op::Status,
            0,
            1_030,
            Outcome::Status {
                held: true,
                fence: Some(10),
            },
        ),
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
