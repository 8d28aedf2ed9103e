//! The quorum rules on hand-made answers.

use lockbroker_core::lease::Renewal;
use lockbroker_core::{Holder, LockName, LockStatus, Release};

use super::*;

mod decided;
mod reads;

fn lease(fence: u64, ttl_ms: u64) -> Lease {
    Lease {
        name: LockName::parse("job").expect("name"),
        token: LeaseToken::generate(),
        fence: Fence::new(fence),
        ttl_ms,
        expires_at_ms: 1_000_000 + ttl_ms,
        validity_ms: ttl_ms,
        owner: None,
    }
}

fn busy(fence: u64, expires_in_ms: u64) -> Result<AcquireOutcome, StoreError> {
    Ok(AcquireOutcome::Busy {
        blockers: Blockers::one(Holder {
            mode: LeaseKind::Exclusive,
            owner: Some("w".into()),
            fence: Fence::new(fence),
            expires_in_ms,
            available_in_ms: expires_in_ms,
        }),
        queue_position: None,
    })
}

fn down() -> StoreError {
    StoreError::Unavailable("down".into())
}

fn permit_holder(fence: u64, expires_in_ms: u64, mode: LeaseKind) -> Holder {
    Holder {
        mode,
        owner: None,
        fence: Fence::new(fence),
        expires_in_ms,
        available_in_ms: expires_in_ms,
    }
}

#[test]
fn a_majority_of_grants_carries_the_highest_fence_and_shortest_ttl() {
    let token = LeaseToken::generate();
    let answers = vec![
        Ok(AcquireOutcome::Granted(lease(10, 1_000))),
        Ok(AcquireOutcome::Granted(lease(30, 900))),
        Err(down()),
        Ok(AcquireOutcome::Granted(lease(20, 1_000))),
        Err(StoreError::OutcomeUnknown("lost".into())),
    ];
    let votes = acquire(answers, 3, 3, &token);
    let grant = votes.granted().expect("three of five granted");
    assert_eq!((grant.lease.fence.get(), grant.lease.ttl_ms), (30, 900));
    let nodes = |of: &[(usize, LeaseToken)]| of.iter().map(|(at, _)| *at).collect::<Vec<_>>();
    assert_eq!(
        nodes(&grant.agreed),
        vec![1],
        "only node 1 carries fence 30"
    );
    assert_eq!(
        nodes(&grant.behind),
        vec![0, 3],
        "the fence is written back there"
    );
    let rolled: Vec<usize> = votes.to_roll_back().iter().map(|(at, _)| *at).collect();
    assert_eq!(rolled, vec![0, 1, 3, 4], "the grants and the lost answer");
}

#[test]
fn nodes_that_issued_the_same_fence_need_no_write_back() {
    let token = LeaseToken::generate();
    let answers = vec![
        Ok(AcquireOutcome::Granted(lease(40, 1_000))),
        Ok(AcquireOutcome::Granted(lease(40, 1_000))),
        Ok(AcquireOutcome::Granted(lease(40, 990))),
        busy(7, 0),
        Err(down()),
    ];
    let grant = acquire(answers, 3, 3, &token)
        .granted()
        .expect("a majority");
    assert_eq!(grant.agreed.len(), 3);
    assert!(grant.behind.is_empty());
}

#[test]
fn without_the_needed_grants_the_answer_is_busy_or_unavailable() {
    let token = LeaseToken::generate();
    let answers = vec![
        Ok(AcquireOutcome::Granted(lease(10, 1_000))),
        busy(8, 500),
        busy(8, 480),
        busy(8, 490),
        Err(down()),
    ];
    let votes = acquire(answers, 3, 3, &token);
    assert!(votes.granted().is_none());
    match votes.busy_answer() {
        Ok(AcquireOutcome::Busy { blockers, .. }) => assert_eq!(blockers.holder.fence.get(), 8),
        other => panic!("{other:?}"),
    }
    let answers = vec![
        Err(down()),
        Err(down()),
        busy(8, 500),
        Err(down()),
        Err(down()),
    ];
    assert!(matches!(
        acquire(answers, 3, 3, &token).busy_answer(),
        Err(StoreError::Unavailable(_))
    ));
}

#[test]
fn a_split_vote_names_no_holder_that_no_majority_reports() {
    let token = LeaseToken::generate();
    // Three contenders in flight, one node each: nobody holds the lock.
    let answers = vec![
        Ok(AcquireOutcome::Granted(lease(10, 1_000))),
        busy(11, 1_000),
        busy(12, 1_000),
    ];
    let votes = acquire(answers, 2, 2, &token);
    assert!(votes.granted().is_none());
    assert!(
        matches!(votes.busy_answer(), Ok(AcquireOutcome::Contended)),
        "no majority reports a holder: contended, not busy"
    );
    // A lease on a majority is named, whatever a contender holds elsewhere.
    let answers = vec![busy(11, 1_000), busy(12, 1_000), busy(12, 990)];
    match acquire(answers, 2, 2, &token).busy_answer() {
        Ok(AcquireOutcome::Busy { blockers, .. }) => assert_eq!(blockers.holder.fence.get(), 12),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_lease_one_node_still_holds_after_a_majority_released_it_is_not_named_valid() {
    // Nodes 0 and 1 applied the release: the lock is free there, owed to
    // the queue, and its last fence stands in for the queue's turn. Node 2
    // applies the release late and still reports the lease valid.
    let stand_in = || busy(9, 0);
    let token = LeaseToken::generate();
    for late_at in 0..3 {
        let mut answers = vec![stand_in(), stand_in()];
        answers.insert(late_at, busy(9, 9_997));
        match acquire(answers, 2, 2, &token).busy_answer() {
            Ok(AcquireOutcome::Busy { blockers, .. }) => {
                assert_eq!(blockers.holder.fence.get(), 9);
                assert_eq!(blockers.holder.expires_in_ms, 0, "late node at {late_at}");
            }
            other => panic!("{other:?}"),
        }
    }
    // A lease a majority reports valid is named valid.
    let answers = vec![busy(9, 9_997), stand_in(), busy(9, 9_990)];
    match acquire(answers, 2, 2, &token).busy_answer() {
        Ok(AcquireOutcome::Busy { blockers, .. }) => assert!(blockers.holder.expires_in_ms > 0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_permit_counts_the_grants_it_needs_and_names_the_count_truthfully() {
    let token = LeaseToken::generate_for(LeaseKind::Permit);
    // A permit of limit 2 on 3 nodes needs all 3; a majority (2) is not enough.
    let answers = vec![
        Ok(AcquireOutcome::Granted(lease(10, 1_000))),
        Ok(AcquireOutcome::Granted(lease(10, 1_000))),
        Err(down()),
    ];
    let votes = acquire(answers, 2, 3, &token);
    assert!(
        votes.granted().is_none(),
        "two grants are not the three needed"
    );
    match votes.busy_answer() {
        Err(StoreError::Unavailable(message)) => {
            assert!(message.contains("3 must grant"), "{message}");
            assert!(!message.contains("majority"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_busy_permit_answer_lists_only_permits_on_as_many_nodes_as_their_grant_needs() {
    let token = LeaseToken::generate_for(LeaseKind::Permit);
    let permit = |fence| permit_holder(fence, 500, LeaseKind::Permit);
    let full = |fences: &[u64]| {
        let holders: Vec<Holder> = fences.iter().map(|&f| permit(f)).collect();
        Ok(AcquireOutcome::Busy {
            blockers: Blockers {
                holder: holders[0].clone(),
                holders,
                limit: Some(2),
            },
            queue_position: None,
        })
    };
    // Limit 2 on 3 nodes: a permit needs all 3. Permits 10 and 12 hold
    // every node; 11 is a grant on one node being rolled back.
    let answers = vec![full(&[10, 12]), full(&[10, 12]), full(&[10, 11, 12])];
    match acquire(answers, 2, 3, &token).busy_answer() {
        Ok(AcquireOutcome::Busy { blockers, .. }) => {
            let listed: Vec<u64> = blockers.holders.iter().map(|h| h.fence.get()).collect();
            assert_eq!(listed, vec![10, 12], "the rolled-back 11 is not listed");
            assert_eq!(blockers.holder.fence.get(), 10);
        }
        other => panic!("{other:?}"),
    }
    // A permit on two of three nodes holds fewer than its grant needed:
    // named by nobody, so the answer is contended, not busy.
    let answers = vec![full(&[11]), full(&[11]), Ok(AcquireOutcome::Contended)];
    assert!(matches!(
        acquire(answers, 2, 3, &token).busy_answer(),
        Ok(AcquireOutcome::Contended)
    ));
    // Limit 2 on 5 nodes needs 4: three reports and a silent node may be
    // the whole grant, or a permit being rolled back from three: not named,
    // so the answer is contended.
    let answers = vec![
        full(&[11]),
        full(&[11]),
        full(&[11]),
        Ok(AcquireOutcome::Contended),
        Err(down()),
    ];
    assert!(matches!(
        acquire(answers, 3, 4, &token).busy_answer(),
        Ok(AcquireOutcome::Contended)
    ));
    // On four of them it is named, the fifth silent.
    let answers = vec![
        full(&[11]),
        full(&[11]),
        full(&[11]),
        full(&[11]),
        Err(down()),
    ];
    match acquire(answers, 4, 4, &token).busy_answer() {
        Ok(AcquireOutcome::Busy { blockers, .. }) => assert_eq!(blockers.holder.fence.get(), 11),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_validity_subtracts_elapsed_time_and_drift_and_never_goes_negative() {
    let drift = Drift::default();
    let ttl = Ttl::parse("ttl_ms", 10_000, u64::MAX).expect("ttl");
    assert_eq!(
        drift.validity(ttl, Duration::from_millis(100)),
        10_000 - 100 - 102
    );
    assert_eq!(drift.validity(ttl, Duration::from_secs(20)), 0);
}

#[test]
fn extends_and_releases_need_a_majority() {
    let renewal = |expires_at_ms| {
        Ok(ExtendOutcome::Extended(Renewal {
            fence: Fence::new(5),
            ttl_ms: 1_000,
            expires_at_ms,
            validity_ms: 1_000,
            owner: None,
            limit: None,
        }))
    };
    let two_of_three = vec![renewal(2_000), renewal(1_990), Ok(ExtendOutcome::Lost)];
    match extend(two_of_three, 2, 2, 900) {
        Ok(ExtendOutcome::Extended(r)) => {
            assert_eq!(
                (r.ttl_ms, r.expires_at_ms, r.validity_ms),
                (1_000, 1_990, 900)
            );
        }
        other => panic!("{other:?}"),
    }
    let one = vec![
        renewal(2_000),
        Ok(ExtendOutcome::Lost),
        Ok(ExtendOutcome::Lost),
    ];
    assert!(matches!(extend(one, 2, 2, 900), Ok(ExtendOutcome::Lost)));
    let silent = vec![renewal(2_000), Err(down()), Err(down())];
    assert!(extend(silent, 2, 2, 900).is_err());

    let released = |held| {
        Ok(ReleaseOutcome::Released(Release {
            fence: Fence::new(5),
            held_ms: held,
            acknowledged: None,
        }))
    };
    let partly = vec![released(None), released(Some(40)), Ok(ReleaseOutcome::Lost)];
    match release(partly, 2) {
        Ok(ReleaseOutcome::Released(r)) => assert_eq!(r.held_ms, Some(40)),
        other => panic!("{other:?}"),
    }
    let gone = vec![
        Ok(ReleaseOutcome::Lost),
        Ok(ReleaseOutcome::Lost),
        Err(down()),
    ];
    assert!(matches!(release(gone, 2), Ok(ReleaseOutcome::Lost)));
    assert!(release(vec![released(Some(1)), Err(down()), Err(down())], 2).is_err());
}

#[test]
fn a_majority_saying_force_released_tells_the_holder_by_whom() {
    let forced = |id: &str| Principal::key(id);
    let extend_forced = |id: &str| Ok(ExtendOutcome::ForceReleased { by: forced(id) });
    let release_forced = |id: &str| Ok(ReleaseOutcome::ForceReleased { by: forced(id) });
    // Two nodes forced by "ops", one by "oncall" after it missed the first.
    let most = vec![
        extend_forced("oncall"),
        extend_forced("ops"),
        extend_forced("ops"),
    ];
    assert!(
        matches!(extend(most, 2, 2, 900), Ok(ExtendOutcome::ForceReleased { by }) if by == forced("ops"))
    );
    let missed_one = vec![
        extend_forced("ops"),
        Ok(ExtendOutcome::Lost),
        extend_forced("ops"),
    ];
    assert!(matches!(
        extend(missed_one, 2, 2, 900),
        Ok(ExtendOutcome::ForceReleased { .. })
    ));
    // Fewer than a majority: lost, as before force releases told holders.
    let mixed = vec![
        extend_forced("ops"),
        Ok(ExtendOutcome::Lost),
        Ok(ExtendOutcome::Lost),
    ];
    assert!(matches!(extend(mixed, 2, 2, 900), Ok(ExtendOutcome::Lost)));

    // A node the force release missed still releases the lease there: the
    // majority that was forced decides.
    let released_on_one = vec![
        release_forced("ops"),
        Ok(ReleaseOutcome::Released(Release {
            fence: Fence::new(5),
            held_ms: Some(10),
            acknowledged: None,
        })),
        release_forced("ops"),
    ];
    assert!(
        matches!(release(released_on_one, 2), Ok(ReleaseOutcome::ForceReleased { by }) if by == forced("ops"))
    );
    let mixed = vec![release_forced("ops"), Ok(ReleaseOutcome::Lost), Err(down())];
    assert!(matches!(release(mixed, 2), Ok(ReleaseOutcome::Lost)));
}

#[test]
fn a_permit_extend_needs_as_many_nodes_as_its_grant() {
    let renewal = || {
        Ok(ExtendOutcome::Extended(Renewal {
            fence: Fence::new(5),
            ttl_ms: 1_000,
            expires_at_ms: 2_000,
            validity_ms: 1_000,
            owner: None,
            limit: Some(2),
        }))
    };
    // Two of three nodes are a majority, but a permit of limit 2 needs three.
    let two_of_three = vec![renewal(), renewal(), Err(down())];
    assert!(extend(two_of_three, 2, 3, 900).is_err());
    let all = vec![renewal(), renewal(), renewal()];
    assert!(matches!(
        extend(all, 2, 3, 900),
        Ok(ExtendOutcome::Extended(_))
    ));
}
