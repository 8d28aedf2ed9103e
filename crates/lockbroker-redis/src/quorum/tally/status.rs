//! A name's state as a majority of nodes sees it, from each node's status.

use lockbroker_core::{Fence, Holder, LeaseKind, LockStatus, StoreError};

use super::nodes;
use crate::quorum::permits::permit_quorum;

/// A lock's state as a majority sees it: held when one lease holds a
/// majority; free to take once a majority is free; otherwise the highest
/// fence any node knows.
pub fn status(
    answers: &[Result<LockStatus, StoreError>],
    majority: usize,
) -> Result<LockStatus, StoreError> {
    let statuses: Vec<&LockStatus> = answers.iter().flatten().collect();
    if statuses.len() < majority {
        return Err(StoreError::Unavailable(format!(
            "only {} answered; a majority is {majority}",
            nodes(statuses.len())
        )));
    }
    let fence = statuses.iter().filter_map(|s| s.fence).max();
    // Every node keeps a copy of the queue; the longest counts.
    let waiting = statuses.iter().map(|s| s.waiting).max().unwrap_or(0);
    let mut available: Vec<u64> = statuses.iter().map(|s| s.available_in_ms).collect();
    available.sort_unstable();
    // Free once a majority is: the majority-th soonest.
    let available_in_ms = available[majority - 1];
    // Held when one lease holds a majority: a granted lease carries the same
    // (written back) fence on a majority of nodes, while a grant in flight or
    // being rolled back holds only a minority with fences of its own.
    // Shared leases and permits are counted holder by holder below.
    let holding = |fence: Fence| {
        statuses
            .iter()
            .filter(move |s| exclusive(s) && s.fence == Some(fence))
    };
    let held_fence = statuses
        .iter()
        .filter(|s| exclusive(s))
        .filter_map(|s| s.fence)
        .find(|&fence| holding(fence).count() >= majority);
    if let Some(held_fence) = held_fence {
        let soonest = holding(held_fence).min_by_key(|s| s.expires_in_ms);
        let mut status = LockStatus::free(Some(held_fence));
        status.held = true;
        status.owner = soonest.and_then(|s| s.owner.clone());
        status.expires_in_ms = soonest.map_or(0, |s| s.expires_in_ms);
        status.available_in_ms = available_in_ms;
        status.mode = Some(LeaseKind::Exclusive);
        status.holder_count = 1;
        status.holders = soonest.map(|s| s.holders.clone()).unwrap_or_default();
        status.waiting = waiting;
        return Ok(status);
    }
    if statuses.iter().any(|s| s.occupied > 0) {
        let silent = answers.len() - statuses.len();
        let mut status = holder_set_status(&statuses, silent, majority, fence, available_in_ms)?;
        status.waiting = waiting;
        return Ok(status);
    }
    // A lease held by fewer than a majority of the answers may still hold a
    // majority with the nodes that did not answer: "not held" would be a
    // guess.
    let silent = answers.len() - statuses.len();
    let undecided = statuses
        .iter()
        .filter(|s| exclusive(s))
        .filter_map(|s| s.fence)
        .any(|fence| holding(fence).count() + silent >= majority);
    if undecided {
        return Err(StoreError::Unavailable(format!(
            "a lease holds some of the nodes that answered and {silent} did not answer"
        )));
    }
    let mut status = LockStatus::free(fence);
    status.available_in_ms = available_in_ms;
    status.waiting = waiting;
    Ok(status)
}

/// The leases of a holder set as the nodes see them: a holder counts when
/// its fence (written back to every node that granted it) is on as many
/// nodes as its grant needed: a majority for a shared lease, more for a
/// permit of a semaphore whose limit is above one. A grant in flight or
/// rolled back holds fewer and is not counted. Where the silent nodes could
/// make up the rest of a holder's nodes, neither "held" nor "not held" is
/// known (a permit being rolled back from a majority, or one whose grant
/// took in a node now silent, read the same): no answer, not a guess.
fn holder_set_status(
    statuses: &[&LockStatus],
    silent: usize,
    majority: usize,
    fence: Option<Fence>,
    available_in_ms: u64,
) -> Result<LockStatus, StoreError> {
    let mut seen: Vec<(&Holder, usize)> = Vec::new();
    for holder in statuses.iter().flat_map(|s| &s.holders) {
        match seen.iter_mut().find(|(h, _)| h.fence == holder.fence) {
            // The soonest expiry among the nodes counts.
            Some((kept, count)) => {
                *count += 1;
                if holder.expires_in_ms < kept.expires_in_ms {
                    *kept = holder;
                }
            }
            None => seen.push((holder, 1)),
        }
    }
    let limit = statuses.iter().filter_map(|s| s.limit).max();
    let nodes = statuses.len() + silent;
    let needed = |holder: &Holder| match (holder.mode, limit) {
        (LeaseKind::Permit, Some(limit)) => permit_quorum(limit, nodes),
        _ => majority,
    };
    if let Some((holder, _)) = (seen.iter())
        .find(|(holder, count)| *count < needed(holder) && count + silent >= needed(holder))
    {
        let what = match holder.mode {
            LeaseKind::Permit => "a permit",
            _ => "a shared lease",
        };
        return Err(StoreError::Unavailable(format!(
            "{what} holds some of the nodes that answered and {silent} did not answer"
        )));
    }
    let mut holders: Vec<Holder> = (seen.into_iter())
        .filter(|(holder, count)| *count >= needed(holder))
        .map(|(holder, _)| holder.clone())
        .collect();
    holders.sort_by_key(|h| (h.available_in_ms, h.fence));
    let valid = holders.iter().filter(|h| h.expires_in_ms > 0).count() as u64;
    let mut status = LockStatus::free(fence);
    status.held = valid > 0;
    status.mode = (valid > 0).then(|| holders[0].mode);
    status.holder_count = valid;
    status.occupied = holders.len() as u64;
    status.limit = limit;
    status.expires_in_ms = holders.iter().map(|h| h.expires_in_ms).max().unwrap_or(0);
    status.first_free_in_ms = holders.first().map_or(0, |h| h.available_in_ms);
    status.available_in_ms = available_in_ms;
    status.holders = holders;
    Ok(status)
}

/// Whether a node's status says an exclusive lease holds the lock (shared
/// leases and permits are counted holder by holder instead).
fn exclusive(status: &LockStatus) -> bool {
    status.held && !matches!(status.mode, Some(LeaseKind::Shared | LeaseKind::Permit))
}
