//! When a node that came back empty may be given its epoch: only once the
//! horizons that set its quarantine speak for every lease still valid.

use super::{horizons_cover_every_lease, speaks_for_its_leases};
use crate::scripts::calls::Epoch;

const NOW: u64 = 1_000_000;

/// A node that kept its data and is in good standing.
fn kept() -> Option<Epoch> {
    Some(Epoch {
        id: Some("kept".into()),
        until_ms: NOW - 1_000,
        now_ms: NOW,
        horizon_ms: NOW + 200,
        pending_marks: false,
        max_fence: 7,
    })
}

/// A node that came back without its data and has no epoch yet.
fn empty() -> Option<Epoch> {
    Some(Epoch {
        id: None,
        until_ms: 0,
        now_ms: NOW,
        horizon_ms: 0,
        pending_marks: false,
        max_fence: 0,
    })
}

/// A node that came back empty earlier and is still in its quarantine.
fn quarantined() -> Option<Epoch> {
    Some(Epoch {
        id: Some("new".into()),
        until_ms: NOW + 150,
        now_ms: NOW,
        horizon_ms: 0,
        pending_marks: false,
        max_fence: 7,
    })
}

/// A node given its epoch whose fence floor is not raised yet.
fn pending() -> Option<Epoch> {
    Some(Epoch {
        pending_marks: true,
        ..quarantined().expect("an epoch")
    })
}

#[test]
fn only_a_node_that_kept_its_data_past_its_quarantine_speaks_for_its_leases() {
    assert!(speaks_for_its_leases(&kept().expect("an epoch")));
    for other in [empty(), quarantined(), pending()] {
        assert!(!speaks_for_its_leases(&other.expect("an epoch")));
    }
}

#[test]
fn a_majority_of_nodes_that_kept_their_data_sets_the_quarantine() {
    let five = [kept(), kept(), kept(), empty(), None];
    assert!(horizons_cover_every_lease(&five, 3));
}

#[test]
fn the_empty_node_itself_does_not_make_up_the_majority() {
    // A lease granted on the empty node and the two that did not answer
    // is still valid there; two horizons do not know of it.
    let five = [kept(), kept(), empty(), None, None];
    assert!(!horizons_cover_every_lease(&five, 3));
    let three = [kept(), empty(), None];
    assert!(!horizons_cover_every_lease(&three, 2));
}

#[test]
fn a_node_still_in_quarantine_or_pending_does_not_make_up_the_majority() {
    assert!(!horizons_cover_every_lease(
        &[kept(), kept(), quarantined(), empty(), None],
        3
    ));
    assert!(!horizons_cover_every_lease(
        &[kept(), kept(), pending(), empty(), None],
        3
    ));
}

#[test]
fn when_more_than_a_minority_lost_their_data_what_is_left_is_all_there_is() {
    let five = [empty(), empty(), empty(), empty(), empty()];
    assert!(horizons_cover_every_lease(&five, 3));
    let five = [kept(), kept(), empty(), empty(), quarantined()];
    assert!(horizons_cover_every_lease(&five, 3));
}

#[test]
fn fewer_answers_than_a_majority_decide_nothing() {
    assert!(!horizons_cover_every_lease(
        &[kept(), kept(), None, None, None],
        3
    ));
}
