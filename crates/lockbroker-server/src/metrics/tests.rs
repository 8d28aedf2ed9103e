//! Unit tests of the metrics: label bounds, owned registries, series at 0.

use lockbroker_core::{Holder, StoreError};

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
    a.acquire_finished(&name, Ok(()), None);
    assert!(a
        .render()
        .contains(r#"lockbroker_acquires_total{family="other",outcome="acquired"} 1"#));
    assert!(b
        .render()
        .contains(r#"lockbroker_acquires_total{family="other",outcome="acquired"} 0"#));
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
    assert!(at_start.contains(
        &r#"lockbroker_leases_lost_total{family="billing:*",operation="extend"}"#.to_owned()
    ));
    assert!(metrics
        .render()
        .contains(r#"lockbroker_leases_lost_total{family="other",operation="release"} 0"#));

    // Every way each operation can end, for a name of each family, adds
    // no series: each one existed already.
    let holder = Holder {
        owner: None,
        fence: lockbroker_core::Fence::new(1),
        expires_in_ms: 1,
        available_in_ms: 1,
    };
    let errors = || {
        [
            LockError::Busy(holder.clone()),
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
    for name in ["billing:1", "jobs:1"] {
        let name = LockName::parse(name).expect("name");
        metrics.acquire_finished(&name, Ok(()), Some(Duration::from_millis(1)));
        metrics.extend_finished(&name, Ok(()));
        metrics.release_finished(&name, Ok(Some(Duration::from_millis(1))));
        for error in errors() {
            metrics.acquire_finished(&name, Err(&error), None);
            metrics.acquire_finished(&name, Err(&error), Some(Duration::ZERO));
            metrics.extend_finished(&name, Err(&error));
            metrics.release_finished(&name, Err(&error));
        }
    }
    assert_eq!(counter_series(&metrics.render()), at_start);
}
