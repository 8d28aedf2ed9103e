//! Counting the nodes' answers into one answer: the quorum rules, apart from
//! the I/O, so each can be tested on its own.

use std::time::Duration;

use super::nodes;

use lockbroker_core::{
    AcquireOutcome, Blockers, ExtendOutcome, Fence, ForceReleaseOutcome, Holder, Lease, LeaseKind,
    LeaseToken, Principal, Release, ReleaseOutcome, StoreError, Ttl,
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
        self.allowance_ms(ttl.as_millis())
    }

    /// How much of a span of `ms` the clocks' drift may take, ms.
    pub fn allowance_ms(&self, ms: u64) -> u64 {
        (ms as f64 * self.factor).ceil() as u64 + self.ms
    }
}

/// The nodes' answers to one acquire.
pub struct Votes {
    grants: Vec<(usize, Lease)>,
    busy: Vec<(Blockers, Option<u64>)>,
    /// Limits in force on nodes that refused a permit under another limit.
    conflicts: Vec<u32>,
    /// Nodes whose answer was lost: the acquire may have run there.
    unknown: Vec<usize>,
    /// Nodes that granted nothing because their fence ran ahead of the
    /// proposal: nobody holds the lock there.
    ahead: usize,
    answered: usize,
    /// How many nodes make a majority: a holder is named only when that
    /// many report it.
    majority: usize,
    /// How many nodes must grant this acquire: a majority, or more for a
    /// semaphore's permit.
    needed: usize,
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

/// Sorts the answers to an acquire by node: `needed` of them must grant
/// it, and `majority` of them must report a holder for it to be named.
pub fn acquire(
    answers: Vec<Result<AcquireOutcome, StoreError>>,
    majority: usize,
    needed: usize,
    token: &LeaseToken,
) -> Votes {
    let mut votes = Votes {
        grants: Vec::new(),
        busy: Vec::new(),
        conflicts: Vec::new(),
        unknown: Vec::new(),
        ahead: 0,
        answered: 0,
        majority,
        needed,
        token: token.clone(),
    };
    for (at, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(AcquireOutcome::Granted(lease)) => votes.grants.push((at, lease)),
            Ok(AcquireOutcome::Busy {
                blockers,
                queue_position,
            }) => votes.busy.push((blockers, queue_position)),
            Ok(AcquireOutcome::LimitConflict { limit }) => votes.conflicts.push(limit),
            // A node answers contended only when its fence ran ahead of
            // the proposal (acquire.lua): the next round asks above it.
            Ok(AcquireOutcome::Contended) => votes.ahead += 1,
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
    /// With the needed grants: the lease, carrying the highest fence any
    /// granting node issued (each issued one above the broker's floor) and
    /// the shortest TTL, and which nodes already carry that fence.
    pub fn granted(&self) -> Option<MajorityGrant> {
        if self.grants.len() < self.needed {
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

    /// The answer when the needed grants did not stand: busy with a holder
    /// that a majority of the nodes reports (by its fence, which a lease
    /// carries on every node of its majority), contended when no such
    /// holder exists (other acquires in flight split the nodes, a grant was
    /// still being written back, or a node's fence ran ahead of the
    /// proposal), or unavailable when too few nodes
    /// answered (or too few were in good standing to count).
    pub fn busy_answer(&self) -> Result<AcquireOutcome, StoreError> {
        if self.answered < self.needed {
            return Err(StoreError::Unavailable(format!(
                "only {} answered; {} must grant the lease",
                nodes(self.answered),
                self.needed
            )));
        }
        // A node that keeps another limit speaks for permits the caller
        // cannot join, whatever the others say.
        if let Some(limit) = self.conflicts.iter().copied().max() {
            return Ok(AcquireOutcome::LimitConflict { limit });
        }
        // A lease stands in the way when as many nodes report it as its
        // grant needed (a majority; more for a permit). A grant in flight or
        // being rolled back holds fewer, and is neither named nor listed:
        // nobody holds its fence. Silent nodes are not counted for a permit:
        // a permit being rolled back from a majority but fewer nodes than it
        // needs would be shown in the way though no grant returned it.
        let reporting = |fence: Fence| {
            (self.busy.iter())
                .filter(|(blockers, _)| {
                    blockers.holder.fence == fence
                        || blockers.holders.iter().any(|h| h.fence == fence)
                })
                .count()
        };
        let needed_for = |holder: &Holder| match holder.mode {
            LeaseKind::Permit => self.needed,
            _ => self.majority,
        };
        let stands = |holder: &Holder| reporting(holder.fence) >= needed_for(holder);
        // Still valid only as a majority says: right after a release that a
        // majority applied, a node that applies it late still reports the
        // lease valid, while the others report its fence as the last one
        // issued, standing for the queue's turn (acquire.lua).
        let valid = |holder: &Holder| {
            let reports = (self.busy.iter())
                .filter(|(b, _)| b.holder.fence == holder.fence && b.holder.expires_in_ms > 0)
                .count();
            holder.expires_in_ms > 0 && reports >= needed_for(holder)
        };
        let in_the_way = (self.busy.iter())
            .filter(|(blockers, _)| stands(&blockers.holder))
            .max_by_key(|(blockers, _)| {
                let holder = &blockers.holder;
                let valid = valid(holder);
                (valid, holder.fence, valid || holder.expires_in_ms == 0)
            });
        if let Some((blockers, _)) = in_the_way {
            let mut blockers = blockers.clone();
            blockers.holders.retain(|holder| stands(holder));
            return Ok(AcquireOutcome::Busy {
                blockers,
                queue_position: self.busy.iter().filter_map(|(_, p)| *p).min(),
            });
        }
        if self.busy.is_empty() && self.ahead == 0 {
            return Err(StoreError::Unavailable(
                "too few of the granting nodes are in good standing".into(),
            ));
        }
        Ok(AcquireOutcome::Contended)
    }

    /// Whether a node granted nothing because its fence ran ahead of the
    /// proposal.
    pub fn ran_ahead(&self) -> bool {
        self.ahead > 0
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
    needed: usize,
    validity: u64,
) -> Result<ExtendOutcome, StoreError> {
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    let mut extended = Vec::new();
    let (mut released, mut lost, mut max_hold) = (0, 0, Vec::new());
    let mut forced = Vec::new();
    for answer in answers.into_iter().flatten() {
        match answer {
            ExtendOutcome::Extended(renewal) => extended.push(renewal),
            ExtendOutcome::Released => released += 1,
            ExtendOutcome::ForceReleased { by } => forced.push(by),
            ExtendOutcome::MaxHoldExceeded { expires_in_ms } => max_hold.push(expires_in_ms),
            ExtendOutcome::Lost => lost += 1,
        }
    }
    if extended.len() >= needed && validity > 0 {
        let fence = lease_fence(extended.iter().map(|r| r.fence));
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
    if let Some(by) = forced_by_majority(forced, majority) {
        return Ok(ExtendOutcome::ForceReleased { by });
    }
    if lost >= majority {
        return Ok(ExtendOutcome::Lost);
    }
    if answered >= majority {
        // Neither kept nor gone on a majority (some nodes were slow, down, or
        // restarted empty): the lease stays valid until its expiry, but this
        // extend did not make it last longer.
        return Err(StoreError::Unavailable(format!(
            "only {} of the {} that answered extended the lease; {needed} must",
            extended.len(),
            nodes(answered)
        )));
    }
    Err(StoreError::Unavailable(format!(
        "only {} answered the extend; a majority is {majority}",
        nodes(answered)
    )))
}

/// The lease's fence among the fences its copies on the nodes report: the
/// one most of them carry, the highest on a tie. Every node counted for the
/// grant carries it; a node the write-back missed keeps its own, smaller
/// fence, and a node that granted after the answer went out may carry its
/// own until the broker gives it the lease's. Neither is usual, and each
/// is on one node, so the lease's fence outnumbers them.
fn lease_fence(fences: impl Iterator<Item = Fence>) -> Option<Fence> {
    let fences: Vec<Fence> = fences.collect();
    let carrying = |fence: &Fence| fences.iter().filter(|f| *f == fence).count();
    fences
        .iter()
        .copied()
        .max_by_key(|fence| (carrying(fence), *fence))
}

/// The rule for a lease that force releases ended: force-released when a
/// majority of the nodes say so, by the principal most of them name (the
/// first node's on a tie), for then an operator took the lease away from a
/// majority while it held them and another holder may have been granted. A
/// force release that reached fewer (some answered lost, or released) leaves
/// the answer to the other rules: lost, as before force releases told
/// their holders.
fn forced_by_majority(forced: Vec<Principal>, majority: usize) -> Option<Principal> {
    if forced.len() < majority {
        return None;
    }
    let named = |by: &Principal| forced.iter().filter(|other| *other == by).count();
    let most = forced.iter().map(named).max()?;
    forced.iter().find(|by| named(by) == most).cloned()
}

/// A release stands when the lease is gone from every node that answered and
/// at least one of them released it (a majority answering); force-released
/// when a majority says so ([`forced_by_majority`]), whatever the others
/// did; lost when a majority never had it.
pub fn release(
    answers: Vec<Result<ReleaseOutcome, StoreError>>,
    majority: usize,
) -> Result<ReleaseOutcome, StoreError> {
    let answered = answers.iter().filter(|a| a.is_ok()).count();
    let mut forced = Vec::new();
    let mut released = answers
        .into_iter()
        .flatten()
        .filter_map(|answer| match answer {
            ReleaseOutcome::Released(release) => Some(release),
            ReleaseOutcome::ForceReleased { by } => {
                forced.push(by);
                None
            }
            ReleaseOutcome::Lost => None,
        })
        .collect::<Vec<_>>();
    if answered < majority {
        return Err(StoreError::Unavailable(format!(
            "only {} answered the release; a majority is {majority}",
            nodes(answered)
        )));
    }
    if let Some(by) = forced_by_majority(forced, majority) {
        return Ok(ReleaseOutcome::ForceReleased { by });
    }
    // The first release of the lease reports how long it was held.
    let fence = lease_fence(released.iter().map(|release| release.fence));
    released.sort_by_key(|release| release.held_ms.is_none());
    Ok(match (released.into_iter().next(), fence) {
        (Some(release), Some(fence)) => ReleaseOutcome::Released(Release { fence, ..release }),
        _ => ReleaseOutcome::Lost,
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
            "only {} answered the force release; a majority is {majority}",
            nodes(answered)
        )));
    }
    // Every node ended what it held: the answer of the node that ended the
    // most, with the highest fence any of them ended.
    let ended = answers
        .into_iter()
        .flatten()
        .filter_map(|outcome| match outcome {
            ForceReleaseOutcome::Released {
                fence,
                owner,
                leases_ended,
                mode,
            } => Some((fence, owner, leases_ended, mode)),
            ForceReleaseOutcome::NotHeld => None,
        });
    let mut top = None::<Fence>;
    let mut most = None::<(Option<String>, u64, LeaseKind)>;
    for (fence, owner, leases_ended, mode) in ended {
        top = top.max(Some(fence));
        if most.as_ref().is_none_or(|(_, n, _)| leases_ended > *n) {
            most = Some((owner, leases_ended, mode));
        }
    }
    Ok(match (top, most) {
        (Some(fence), Some((owner, leases_ended, mode))) => ForceReleaseOutcome::Released {
            fence,
            owner,
            leases_ended,
            mode,
        },
        _ => ForceReleaseOutcome::NotHeld,
    })
}

pub mod decided;
mod status;
#[cfg(test)]
mod tests;

pub use status::status;
