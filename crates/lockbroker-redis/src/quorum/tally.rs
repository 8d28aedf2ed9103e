//! Counting the nodes' answers into one answer: the quorum rules, apart from
//! the I/O, so each can be tested on its own.

use std::time::Duration;

use lockbroker_core::{
    AcquireOutcome, ExtendOutcome, Fence, ForceReleaseOutcome, Holder, Lease, LeaseToken,
    LockStatus, Release, ReleaseOutcome, StoreError, Ttl,
};

/// How much the nodes' clocks may disagree: Redlock's drift allowance,
/// subtracted from every validity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Drift {
    /// A share of the TTL (clock rate error over one lease), e.g. 0.01.
    pub factor: f64,
    /// A constant, ms.
    pub ms: u64,
}

impl Default for Drift {
    fn default() -> Self {
        Self {
            factor: 0.01,
            ms: 2,
        }
    }
}

impl Drift {
    /// What is left of `ttl` after `elapsed` and the drift allowance, ms;
    /// never negative.
    pub fn validity(&self, ttl: Ttl, elapsed: Duration) -> u64 {
        let elapsed = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        ttl.as_millis()
            .saturating_sub(elapsed)
            .saturating_sub(self.allowance(ttl))
    }

    /// How much of a lease of `ttl` the clocks' drift may take, ms.
    pub fn allowance(&self, ttl: Ttl) -> u64 {
        (ttl.as_millis() as f64 * self.factor).ceil() as u64 + self.ms
    }
}

/// The nodes' answers to one acquire.
pub struct Votes {
    grants: Vec<(usize, Lease)>,
    busy: Vec<(Holder, Option<u64>)>,
    /// Nodes whose answer was lost: the acquire may have run there.
    unknown: Vec<usize>,
    answered: usize,
    majority: usize,
    token: LeaseToken,
}

/// A lease a majority of nodes granted, before its fence is known to stand.
pub struct MajorityGrant {
    /// The lease, with the highest fence any granting node issued.
    pub lease: Lease,
    /// Granting nodes that issued that fence: they carry it as their mark.
    pub agreed: Vec<(usize, LeaseToken)>,
    /// Granting nodes that issued a lower fence: the fence must be written
    /// back to them.
    pub behind: Vec<(usize, LeaseToken)>,
}

/// Sorts the answers to an acquire by node.
pub fn acquire(
    answers: Vec<Result<AcquireOutcome, StoreError>>,
    majority: usize,
    token: &LeaseToken,
) -> Votes {
    let mut votes = Votes {
        grants: Vec::new(),
        busy: Vec::new(),
        unknown: Vec::new(),
        answered: 0,
        majority,
        token: token.clone(),
    };
    for (at, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(AcquireOutcome::Granted(lease)) => votes.grants.push((at, lease)),
            Ok(AcquireOutcome::Busy {
                holder,
                queue_position,
            }) => votes.busy.push((holder, queue_position)),
            Err(StoreError::OutcomeUnknown(_)) => {
                votes.unknown.push(at);
                continue;
            }
            Err(_) => continue,
        }
        votes.answered += 1;
    }
    votes
}

impl Votes {
    /// With a majority of grants: the lease, carrying the highest fence any
    /// granting node issued (each issued one above the broker's floor) and
    /// the shortest TTL, and which nodes already carry that fence.
    pub fn granted(&self) -> Option<MajorityGrant> {
        if self.grants.len() < self.majority {
            return None;
        }
        let fence = self
            .grants
            .iter()
            .map(|(_, lease)| lease.fence.get())
            .max()
            .unwrap_or(0);
        let shortest = self
            .grants
            .iter()
            .map(|(_, l)| l)
            .min_by_key(|l| l.expires_at_ms)?;
        let (mut agreed, mut behind) = (Vec::new(), Vec::new());
        for (at, lease) in &self.grants {
            let node = (*at, lease.token.clone());
            if lease.fence.get() == fence {
                agreed.push(node);
            } else {
                behind.push(node);
            }
        }
        Some(MajorityGrant {
            lease: Lease {
                fence: Fence::new(fence),
                ..shortest.clone()
            },
            agreed,
            behind,
        })
    }

    /// The answer when no majority grant stands: busy with the holder of the
    /// highest fence, or unavailable when too few nodes answered (or too few
    /// were in good standing to count).
    pub fn busy_answer(&self) -> Result<AcquireOutcome, StoreError> {
        if self.answered < self.majority {
            return Err(StoreError::Unavailable(format!(
                "only {} nodes answered; a majority is {}",
                self.answered, self.majority
            )));
        }
        let in_the_way = self
            .busy
            .iter()
            .max_by_key(|(holder, _)| (holder.expires_in_ms > 0, holder.fence));
        match in_the_way {
            Some((holder, _)) => Ok(AcquireOutcome::Busy {
                holder: holder.clone(),
                queue_position: self.busy.iter().filter_map(|(_, p)| *p).min(),
            }),
            None => Err(StoreError::Unavailable(
                "too few of the granting nodes are in good standing".into(),
            )),
        }
    }

    /// Every node where this acquire may hold a lease that must not stay:
    /// those that granted, and those whose answer was lost.
    pub fn to_roll_back(&self) -> Vec<(usize, LeaseToken)> {
        let granted = self
            .grants
            .iter()
            .map(|(at, lease)| (*at, lease.token.clone()));
        let unknown = self.unknown.iter().map(|at| (*at, self.token.clone()));
        granted.chain(unknown).collect()
    }
}

/// An extend stands when a majority extended within the new validity.
pub fn extend(
    answers: Vec<Result<ExtendOutcome, StoreError>>,
    majority: usize,
    validity: u64,
) -> Result<ExtendOutcome, StoreError> {
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    let mut extended = Vec::new();
    let (mut released, mut lost, mut max_hold) = (0, 0, Vec::new());
    for answer in answers.into_iter().flatten() {
        match answer {
            ExtendOutcome::Extended(renewal) => extended.push(renewal),
            ExtendOutcome::Released => released += 1,
            ExtendOutcome::MaxHoldExceeded { expires_in_ms } => max_hold.push(expires_in_ms),
            ExtendOutcome::Lost => lost += 1,
        }
    }
    if extended.len() >= majority && validity > 0 {
        // A node the write-back missed still carries its own, smaller fence:
        // the lease's fence is the highest.
        let fence = extended.iter().map(|r| r.fence).max();
        let shortest = extended.iter().min_by_key(|r| r.expires_at_ms).cloned();
        if let (Some(mut renewal), Some(fence)) = (shortest, fence) {
            renewal.validity_ms = validity;
            renewal.fence = fence;
            return Ok(ExtendOutcome::Extended(renewal));
        }
    }
    if max_hold.len() >= majority {
        let expires_in_ms = max_hold.into_iter().min().unwrap_or(0);
        return Ok(ExtendOutcome::MaxHoldExceeded { expires_in_ms });
    }
    if released >= majority {
        return Ok(ExtendOutcome::Released);
    }
    if lost >= majority {
        return Ok(ExtendOutcome::Lost);
    }
    if answered >= majority {
        // Neither kept nor gone on a majority (some nodes were slow, down, or
        // restarted empty): the lease stays valid until its expiry, but this
        // extend did not make it last longer.
        return Err(StoreError::Unavailable(format!(
            "only {} of the {answered} nodes that answered extended the lease; a majority is {majority}",
            extended.len()
        )));
    }
    Err(StoreError::Unavailable(format!(
        "only {answered} nodes answered the extend; a majority is {majority}"
    )))
}

/// A release stands when the lease is gone from every node that answered and
/// at least one of them released it (a majority answering); lost when a
/// majority never had it.
pub fn release(
    answers: Vec<Result<ReleaseOutcome, StoreError>>,
    majority: usize,
) -> Result<ReleaseOutcome, StoreError> {
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    let mut released = answers
        .into_iter()
        .flatten()
        .filter_map(|answer| match answer {
            ReleaseOutcome::Released(release) => Some(release),
            ReleaseOutcome::Lost => None,
        })
        .collect::<Vec<_>>();
    if answered < majority {
        return Err(StoreError::Unavailable(format!(
            "only {answered} nodes answered the release; a majority is {majority}"
        )));
    }
    // The lease's fence is the highest (a node the write-back missed keeps
    // its own); the first release of it reports how long it was held.
    let fence = released.iter().map(|release| release.fence).max();
    released.sort_by_key(|release| release.held_ms.is_none());
    Ok(match (released.into_iter().next(), fence) {
        (Some(release), Some(fence)) => ReleaseOutcome::Released(Release { fence, ..release }),
        _ => ReleaseOutcome::Lost,
    })
}

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
            "only {} nodes answered; a majority is {majority}",
            statuses.len()
        )));
    }
    let fence = statuses.iter().filter_map(|s| s.fence).max();
    let mut available: Vec<u64> = statuses.iter().map(|s| s.available_in_ms).collect();
    available.sort_unstable();
    // Free once a majority is: the majority-th soonest.
    let available_in_ms = available[majority - 1];
    // Held when one lease holds a majority: a granted lease carries the same
    // (written back) fence on a majority of nodes, while a grant in flight or
    // being rolled back holds only a minority with fences of its own.
    let holding = |fence: Fence| {
        statuses
            .iter()
            .filter(move |s| s.held && s.fence == Some(fence))
    };
    let held_fence = statuses
        .iter()
        .filter(|s| s.held)
        .filter_map(|s| s.fence)
        .find(|&fence| holding(fence).count() >= majority);
    if let Some(held_fence) = held_fence {
        let soonest = holding(held_fence).min_by_key(|s| s.expires_in_ms);
        return Ok(LockStatus {
            held: true,
            owner: soonest.and_then(|s| s.owner.clone()),
            fence: Some(held_fence),
            expires_in_ms: soonest.map_or(0, |s| s.expires_in_ms),
            available_in_ms,
        });
    }
    // A lease held by fewer than a majority of the answers may still hold a
    // majority with the nodes that did not answer: "not held" would be a
    // guess.
    let silent = answers.len() - statuses.len();
    let undecided = statuses
        .iter()
        .filter(|s| s.held)
        .filter_map(|s| s.fence)
        .any(|fence| holding(fence).count() + silent >= majority);
    if undecided {
        return Err(StoreError::Unavailable(format!(
            "a lease holds some of the nodes that answered and {silent} did not answer"
        )));
    }
    Ok(LockStatus {
        held: false,
        owner: None,
        fence,
        expires_in_ms: 0,
        available_in_ms,
    })
}

/// A force release ends the lease wherever it is; answered by a majority.
pub fn force_release(
    answers: Vec<Result<ForceReleaseOutcome, StoreError>>,
    majority: usize,
) -> Result<ForceReleaseOutcome, StoreError> {
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    if answered < majority {
        return Err(StoreError::Unavailable(format!(
            "only {answered} nodes answered the force release; a majority is {majority}"
        )));
    }
    let ended = answers
        .into_iter()
        .flatten()
        .filter(|outcome| matches!(outcome, ForceReleaseOutcome::Released { .. }))
        .max_by_key(|outcome| match outcome {
            ForceReleaseOutcome::Released { fence, .. } => fence.get(),
            ForceReleaseOutcome::NotHeld => 0,
        });
    Ok(ended.unwrap_or(ForceReleaseOutcome::NotHeld))
}

#[cfg(test)]
mod tests;
