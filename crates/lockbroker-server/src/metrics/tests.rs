//! Unit tests of the metrics: label bounds, owned registries, series at 0.

use lockbroker_core::{Blockers, Holder, StoreError};

use super::*;

#[test]
fn families_match_prefixes_then_names_then_other() {
    let families = Families::new(vec!["billing:*".into(), "nightly-report".into()]);
    let of = |n: &str| families.of(&LockName::parse(n).expect("name")).to_owned();
    assert_eq!(of("billing:invoice-42"), "billing:*");
    assert_eq!(of("nightly-report"), "nightly-report");
    assert_eq!(of("nightly-report-2"), "other");
    assert_eq!(of("jobs:1"), "other");
}

#[test]
fn two_instances_do_not_share_counters() {
    let a = Metrics::new(Families::default()).expect("metrics");
    let b = Metrics::new(Families::default()).expect("metrics");
    let name = LockName::parse("x").expect("name");
    a.acquire_finished(&name, LeaseKind::Exclusive, Ok(()), None);
    let acquired = r#"lockbroker_acquires_total{family="other",kind="lock",outcome="acquired"}"#;
    assert!(a.render().contains(&format!("{acquired} 1")));
    assert!(b.render().contains(&format!("{acquired} 0")));
}

/// The counter series in `text`, without their values.
fn counter_series(text: &str) -> Vec<String> {
    text.lines()
        .filter(|line| line.starts_with("lockbroker_") && line.contains("_total{"))
        .filter_map(|line| line.rsplit_once(' ').map(|(series, _)| series.to_owned()))
        .collect()
}

#[test]
fn every_outcome_of_every_family_exists_at_zero_from_the_start() {
    let metrics = Metrics::new(Families::new(vec!["billing:*".into()])).expect("metrics");
    let at_start = counter_series(&metrics.render());
    for kind in ["lock", "shared", "semaphore"] {
        let lost = format!(
            r#"lockbroker_leases_lost_total{{family="billing:*",kind="{kind}",operation="extend"}}"#
        );
        assert!(at_start.contains(&lost), "{lost}");
    }
    assert!(metrics.render().contains(
        r#"lockbroker_leases_lost_total{family="other",kind="semaphore",operation="release"} 0"#
    ));

    // Every way each operation can end, for a name of each family, adds
    // no series: each one existed already.
    let holder = Holder {
        mode: LeaseKind::Permit,
        owner: None,
        fence: lockbroker_core::Fence::new(1),
        expires_in_ms: 1,
        available_in_ms: 1,
    };
    let errors = || {
        [
            LockError::Busy(Box::new(Blockers::one(holder.clone()))),
            LockError::LimitConflict { limit: 3 },
            LockError::LeaseLost,
            LockError::LeaseReleased,
            LockError::MaxHoldExceeded {
                max_hold_ms: 1,
                expires_in_ms: 1,
            },
            LockError::TooManyWaiters,
            LockError::ShuttingDown,
            LockError::Store(StoreError::Unavailable("down".into())),
        ]
    };
    let kinds = [LeaseKind::Exclusive, LeaseKind::Shared, LeaseKind::Permit];
    for (name, kind) in ["billing:1", "jobs:1"]
        .into_iter()
        .zip(kinds)
        .chain([("x", kinds[2])])
    {
        let name = LockName::parse(name).expect("name");
        let held = Ok(Some(Duration::from_millis(1)));
        metrics.acquire_finished(&name, kind, Ok(()), Some(Duration::from_millis(1)));
        metrics.extend_finished(&name, kind, Ok(()));
        metrics.release_finished(&name, kind, held);
        for error in errors() {
            metrics.acquire_finished(&name, kind, Err(&error), None);
            metrics.acquire_finished(&name, kind, Err(&error), Some(Duration::ZERO));
            metrics.extend_finished(&name, kind, Err(&error));
            metrics.release_finished(&name, kind, Err(&error));
        }
    }
    assert_eq!(counter_series(&metrics.render()), at_start);
}
