//! When the answers in hand decide a step: the rules by which a quorum step
//! is answered before every node has answered. Each says "decided" only
//! when no answer still to come (from a node not known slow) could change
//! the outcome the tally gives.

use lockbroker_core::{
    AcquireOutcome, ExtendOutcome, ForceReleaseOutcome, LockStatus, ReleaseOutcome, StoreError,
};

use super::super::fan_out::Progress;
use super::status as tally_status;

/// An acquire is decided once the needed nodes granted, or once too few
/// nodes are left to answer to make the needed grants. A refusal otherwise
/// waits for every node not known slow: its grants there are then undone
/// before the answer (a grant a node makes after a refusal would be undone
/// in the background, and the next round of the same request could not use
/// that node meanwhile), and the refusal names a holder when a majority of
/// all the answering nodes report it.
pub fn acquire(progress: &Progress<'_, AcquireOutcome>, needed: usize) -> bool {
    let grants = progress.count(|a| matches!(a, AcquireOutcome::Granted(_)));
    grants >= needed || progress.answered() + progress.awaited < needed
}

/// An extend is decided once the needed nodes extended, or, when that can
/// no longer happen, once a majority agrees on why (released, force
/// released, past its max hold, or lost) or none still can.
pub fn extend(progress: &Progress<'_, ExtendOutcome>, majority: usize, needed: usize) -> bool {
    let extended = progress.count(|a| matches!(a, ExtendOutcome::Extended(_)));
    if extended >= needed {
        return true;
    }
    if extended + progress.awaited >= needed {
        return false;
    }
    let reasons = [
        progress.count(|a| matches!(a, ExtendOutcome::Released)),
        progress.count(|a| matches!(a, ExtendOutcome::ForceReleased { .. })),
        progress.count(|a| matches!(a, ExtendOutcome::MaxHoldExceeded { .. })),
        progress.count(|a| matches!(a, ExtendOutcome::Lost)),
    ];
    reasons.iter().any(|&n| n >= majority)
        || reasons.iter().all(|&n| n + progress.awaited < majority)
}

/// A release is decided once a majority answered: a lease still valid is on
/// a majority of the nodes, so on one of them. Whether it was force
/// released needs a majority saying so, or too few left to make one.
pub fn release(progress: &Progress<'_, ReleaseOutcome>, majority: usize) -> bool {
    let forced = progress.count(|a| matches!(a, ReleaseOutcome::ForceReleased { .. }));
    progress.answered() >= majority && (forced >= majority || forced + progress.awaited < majority)
}

/// A force release is decided once a majority ended what it held.
pub fn force_release(progress: &Progress<'_, ForceReleaseOutcome>, majority: usize) -> bool {
    progress.answered() >= majority
}

/// A status read is decided once the answers in hand show an exclusive lease
/// on a majority, or no lease that could still reach one with the nodes to
/// come. Shared leases and permits are counted holder by holder, so a read
/// that finds any waits for every node not known slow.
pub fn status(progress: &Progress<'_, LockStatus>, majority: usize) -> bool {
    if progress.answered() < majority {
        return false;
    }
    let in_hand: Vec<Result<LockStatus, StoreError>> = (progress.answers.iter())
        .map(|answer| match answer {
            Some(Ok(status)) => Ok(status.clone()),
            _ => Err(StoreError::Unavailable(String::new())),
        })
        .collect();
    let holder_sets = in_hand.iter().flatten().any(|s| s.occupied > 0);
    !holder_sets && tally_status(&in_hand, majority).is_ok()
}
