//! All-or-nothing acquires of several locks: every lease, or none.
//!
//! Callers asking for overlapping sets in any order never deadlock, and
//! none holds some locks while it waits for the rest: the locks are taken
//! in one canonical order (by name), each without waiting, and when one is
//! busy every lease taken so far is given back before the caller waits,
//! for that one lock alone, the way `std::lock` of C++ takes several
//! mutexes. Once it has it, the others are tried again in order. Each
//! lease is an ordinary one (its own token and fence), so this works the
//! same over every store.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Grant, LockService};
use crate::error::LockError;
use crate::lease::LeaseKind;
use crate::name::LockName;
use crate::policy::AcquireRequest;
use crate::store::LockStore;
use crate::validation::ValidationError;

/// How many locks one all-or-nothing acquire may name.
pub const MAX_LOCKS_PER_ACQUIRE: usize = 32;

/// One lock of an all-or-nothing acquire, and the kind of lease asked of it.
#[derive(Clone, Debug)]
pub struct LockAsk {
    /// The lock.
    pub name: LockName,
    /// Exclusive or shared.
    pub kind: LeaseKind,
}

/// Why an all-or-nothing acquire took nothing.
#[derive(Debug)]
pub struct AcquireAllError {
    /// The lock that refused (stayed busy until the deadline, or failed);
    /// `None` when the request as a whole is invalid.
    pub name: Option<LockName>,
    /// What went wrong.
    pub error: LockError,
}

impl AcquireAllError {
    fn invalid(error: ValidationError) -> Self {
        Self {
            name: None,
            error: error.into(),
        }
    }
}

impl<S: LockStore> LockService<S> {
    /// Acquires a lease on every lock of `locks` as `request` asks, or none:
    /// the grants in the order of `locks`, or the lock that refused. A
    /// request that waits (`wait_ms`) waits for the locks in turn, holding
    /// none of the others meanwhile, until its deadline. With a
    /// `request_id`, a retry gets back the leases still held from the first
    /// try (the retry memo is per lock).
    pub async fn acquire_all(
        self: &Arc<Self>,
        locks: &[LockAsk],
        request: AcquireRequest,
    ) -> Result<Vec<Grant<S>>, AcquireAllError> {
        if locks.is_empty() || locks.len() > MAX_LOCKS_PER_ACQUIRE {
            return Err(AcquireAllError::invalid(ValidationError::new(
                "locks",
                format!("name 1 to {MAX_LOCKS_PER_ACQUIRE} locks"),
            )));
        }
        if locks.iter().any(|ask| ask.kind == LeaseKind::Permit) {
            return Err(AcquireAllError::invalid(ValidationError::new(
                "locks",
                "takes exclusive and shared leases of locks, not permits",
            )));
        }
        // Every rule of the request, checked once before any lock is taken.
        let plan = (self.policy)
            .plan(request.clone(), self.is_shutting_down())
            .map_err(AcquireAllError::invalid)?;
        let mut order: Vec<usize> = (0..locks.len()).collect();
        order.sort_by(|a, b| locks[*a].name.as_str().cmp(locks[*b].name.as_str()));
        if let Some(pair) =
            (order.windows(2)).find(|pair| locks[pair[0]].name == locks[pair[1]].name)
        {
            return Err(AcquireAllError::invalid(ValidationError::new(
                "locks",
                format!("names {:?} twice", locks[pair[1]].name.as_str()),
            )));
        }
        let deadline = Instant::now() + plan.wait;
        let mut waiting_for = order[0];
        loop {
            match self
                .try_all(locks, &order, waiting_for, &request, deadline)
                .await
            {
                Ok(grants) => return Ok(grants),
                // Busy (or, in quorum mode, contended by other acquires)
                // before the deadline: wait for that lock next, holding
                // nothing else.
                Err((at, LockError::Busy(_) | LockError::Contended))
                    if !plan.wait.is_zero() && Instant::now() < deadline =>
                {
                    waiting_for = at;
                }
                Err((at, error)) => {
                    return Err(AcquireAllError {
                        name: Some(locks[at].name.clone()),
                        error,
                    })
                }
            }
        }
    }

    /// One round: `first` taken (waiting for it until `deadline` when there
    /// is time left), then the others in `order` without waiting. On a
    /// refusal every lease of the round is given back, and the releases
    /// awaited, before the refusal is returned with the lock's place in
    /// `locks`.
    async fn try_all(
        self: &Arc<Self>,
        locks: &[LockAsk],
        order: &[usize],
        first: usize,
        request: &AcquireRequest,
        deadline: Instant,
    ) -> Result<Vec<Grant<S>>, (usize, LockError)> {
        let mut taken: Vec<(usize, Grant<S>)> = Vec::with_capacity(locks.len());
        let left = deadline.saturating_duration_since(Instant::now());
        let steps = std::iter::once((first, left)).chain(
            (order.iter().copied())
                .filter(|at| *at != first)
                .map(|at| (at, Duration::ZERO)),
        );
        for (at, wait) in steps {
            let ask = AcquireRequest {
                kind: locks[at].kind,
                wait_ms: (!wait.is_zero())
                    .then(|| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1)),
                ..request.clone()
            };
            match self.acquire(&locks[at].name, ask).await {
                Ok(grant) => taken.push((at, grant)),
                Err(error) => {
                    self.give_back(taken).await;
                    return Err((at, error));
                }
            }
        }
        taken.sort_by_key(|(at, _)| *at);
        Ok(taken.into_iter().map(|(_, grant)| grant).collect())
    }

    /// Releases the leases of a round that did not take every lock, and
    /// waits for the releases, so that the next round (or another caller)
    /// finds them free. A release that fails leaves its lease to its TTL,
    /// as a dropped grant does.
    async fn give_back(self: &Arc<Self>, taken: Vec<(usize, Grant<S>)>) {
        for (_, grant) in taken {
            let (name, token) = (grant.lease.name.clone(), grant.lease.token.clone());
            grant.delivered();
            let _ = self.release(&name, &token).await;
        }
    }
}
