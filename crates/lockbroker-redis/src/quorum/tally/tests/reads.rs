//! The quorum's reads: a lock's status, a holder set's, and a fence check,
//! as a majority of the nodes sees them.

use super::*;

#[test]
fn status_is_held_when_a_majority_holds_and_free_when_a_majority_is() {
    let status = |held: bool, available_in_ms: u64, fence: u64| {
        Ok(LockStatus {
            held,
            owner: held.then(|| "w".to_owned()),
            expires_in_ms: if held { available_in_ms } else { 0 },
            available_in_ms,
            ..LockStatus::free(Some(Fence::new(fence)))
        })
    };
    let answers = vec![
        status(true, 900, 7),
        status(true, 950, 7),
        status(false, 0, 3),
    ];
    let read = super::super::status(&answers, 2).expect("a majority answered");
    assert!(read.held);
    assert_eq!(
        (read.fence.map(Fence::get), read.available_in_ms),
        (Some(7), 900)
    );
    let answers = vec![
        status(true, 900, 7),
        status(false, 0, 7),
        status(false, 0, 3),
    ];
    let read = super::super::status(&answers, 2).expect("a majority answered");
    assert!(!read.held);
    assert_eq!(read.available_in_ms, 0, "a majority is free now");

    // Five nodes, the lease on two that answered, two silent: the silent ones
    // may make a majority with them, so neither "held" nor "free" is known.
    let answers = vec![
        status(true, 900, 7),
        status(true, 900, 7),
        status(false, 0, 3),
        Err(down()),
        Err(down()),
    ];
    assert!(super::super::status(&answers, 3).is_err());
    let answers = vec![
        status(true, 900, 7),
        status(false, 0, 3),
        status(false, 0, 3),
        status(false, 0, 3),
        Err(down()),
    ];
    assert!(!super::super::status(&answers, 3).expect("decided").held);
}

#[test]
fn a_holder_counts_in_a_status_when_a_majority_carries_its_fence() {
    let holder = |fence: u64, expires_in_ms: u64| Holder {
        mode: LeaseKind::Shared,
        owner: None,
        fence: Fence::new(fence),
        expires_in_ms,
        available_in_ms: expires_in_ms,
    };
    let node = |holders: Vec<Holder>| {
        let mut status = LockStatus::free(Some(Fence::new(9)));
        status.held = !holders.is_empty();
        status.mode = status.held.then_some(LeaseKind::Shared);
        status.occupied = holders.len() as u64;
        status.holder_count = holders.len() as u64;
        status.holders = holders;
        Ok(status)
    };
    // Shared leases: fence 7 stands on two nodes; fence 8 (a grant rolled
    // back) on one.
    let answers = vec![
        node(vec![holder(7, 900), holder(8, 950)]),
        node(vec![holder(7, 880)]),
        node(Vec::new()),
    ];
    let status = status(&answers, 2).expect("a majority answered");
    assert_eq!((status.holder_count, status.limit), (1, None));
    assert_eq!(
        status.holders,
        vec![holder(7, 880)],
        "the soonest expiry counts"
    );
    assert_eq!(status.mode, Some(LeaseKind::Shared));
}

#[test]
fn a_fence_is_current_only_when_a_majority_reports_a_valid_lease_with_it() {
    let check = |answers: &[Result<LockStatus, StoreError>], fence: u64| {
        let read = super::super::status(answers, 2).expect("a majority answered");
        lockbroker_core::FenceCheck::of(&read, Fence::new(fence)).current
    };
    let exclusive = |fence: u64| {
        Ok(LockStatus {
            held: true,
            expires_in_ms: 900,
            mode: Some(LeaseKind::Exclusive),
            holder_count: 1,
            holders: vec![permit_holder(fence, 900, LeaseKind::Exclusive)],
            ..LockStatus::free(Some(Fence::new(fence)))
        })
    };
    let on_two = vec![
        exclusive(7),
        exclusive(7),
        Ok(LockStatus::free(Some(Fence::new(3)))),
    ];
    assert!(check(&on_two, 7));
    assert!(!check(&on_two, 6), "another fence");
    // A grant in flight, or being rolled back, holds one node of three.
    let free = || Ok(LockStatus::free(Some(Fence::new(7))));
    assert!(!check(&[exclusive(8), free(), free()], 8));
    // With a node silent it may yet hold a majority: no answer, not a guess.
    let silent = [exclusive(8), free(), Err(down())];
    assert!(super::super::status(&silent, 2).is_err());

    let permits = |holders: Vec<Holder>| {
        let valid = holders.iter().filter(|h| h.expires_in_ms > 0).count() as u64;
        Ok(LockStatus {
            held: valid > 0,
            mode: (valid > 0).then_some(LeaseKind::Permit),
            holder_count: valid,
            occupied: holders.len() as u64,
            holders,
            ..LockStatus::free(Some(Fence::new(9)))
        })
    };
    let p = |fence, expires_in_ms| permit_holder(fence, expires_in_ms, LeaseKind::Permit);
    let answers = vec![
        permits(vec![p(5, 900), p(9, 900)]),
        permits(vec![p(5, 800)]),
        // Its lease expired here first: a node that says so is not counted.
        permits(vec![p(9, 0)]),
    ];
    assert!(check(&answers, 5), "valid on two of three");
    assert!(
        !check(&answers, 9),
        "valid on one, in its lock-delay on another"
    );
}

#[test]
fn a_permit_counts_only_on_as_many_nodes_as_its_grant_needs() {
    // Limit 2 on five nodes: a permit needs four (a majority is three).
    let permits = |fences: &[u64]| {
        let holders: Vec<Holder> = (fences.iter())
            .map(|&fence| permit_holder(fence, 900, LeaseKind::Permit))
            .collect();
        Ok(LockStatus {
            held: !holders.is_empty(),
            mode: (!holders.is_empty()).then_some(LeaseKind::Permit),
            holder_count: holders.len() as u64,
            occupied: holders.len() as u64,
            limit: Some(2),
            holders,
            ..LockStatus::free(Some(Fence::new(9)))
        })
    };
    let held = |answers: &[Result<LockStatus, StoreError>]| {
        let read = super::super::status(answers, 3).expect("a majority answered");
        read.holders
            .iter()
            .map(|h| h.fence.get())
            .collect::<Vec<_>>()
    };
    // Granted on four, written back: held.
    let granted = [
        permits(&[5]),
        permits(&[5]),
        permits(&[5]),
        permits(&[5]),
        permits(&[]),
    ];
    assert_eq!(held(&granted), [5]);
    // On three of five, every node answering: a grant being rolled back.
    let rolled_back = [
        permits(&[7]),
        permits(&[7]),
        permits(&[7]),
        permits(&[]),
        permits(&[]),
    ];
    assert!(held(&rolled_back).is_empty());
    // On three of four answers, the fifth silent: it may be the fourth, or
    // a grant being rolled back; neither held nor free is known.
    let one_silent = [
        permits(&[5]),
        permits(&[5]),
        permits(&[5]),
        permits(&[]),
        Err(down()),
    ];
    assert!(super::super::status(&one_silent, 3).is_err());
    let four_of_four = [
        permits(&[5]),
        permits(&[5]),
        permits(&[5]),
        permits(&[5]),
        Err(down()),
    ];
    assert_eq!(held(&four_of_four), [5]);
}
