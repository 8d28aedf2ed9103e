//! All-or-nothing acquires of several locks: every lease, or none.
//!
//! Callers asking for overlapping sets in any order never deadlock, and
//! none holds some locks while it waits for the rest: the locks are taken
//! in one canonical order (by name), each without waiting, and when one is
//! busy every lease taken so far is given back before the caller waits,
//! for that one lock alone, the way `std::lock` of C++ takes several
//! mutexes. Once it has it, the others are tried again in order. Each
//! lease is an ordinary one (its own token and fence), so this works the
//! same over every store. Where every name lives on one server (single and
//! Sentinel mode), each try takes the whole set in one step instead, so no
//! other caller ever sees a part of it held.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::time::sleep_until;

use super::{Grant, LockService};
use crate::error::{LockError, StoreError};
use crate::events::{Change, ChangeKind};
use crate::lease::{Lease, LeaseKind, LeaseToken};
use crate::name::LockName;
use crate::policy::{AcquirePlan, AcquireRequest};
use crate::store::{AcquireOutcome, AcquireParams, LockStore, Together, Watch};
use crate::validation::ValidationError;
use crate::wait::{WaitMode, WaitTicket};

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
        // Where every name lives on one server, the set is taken in one
        // step; under a session, each lease also joins the session, so they
        // are taken one by one.
        if request.session.is_none() {
            if let Some(answer) = self.acquire_together(locks, &plan, deadline).await {
                return answer;
            }
        }
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

    /// [`LockService::acquire_all`] in one step per try: every lease or
    /// none, so no other caller ever sees a part of the set held. A busy
    /// lock is waited for, holding none of the others, until a release or
    /// its holder's expiry frees it, or the deadline. `None` when the store
    /// cannot take a set in one step.
    async fn acquire_together(
        self: &Arc<Self>,
        locks: &[LockAsk],
        plan: &AcquirePlan,
        deadline: Instant,
    ) -> Option<Result<Vec<Grant<S>>, AcquireAllError>> {
        let failed = |at: usize, error: LockError| AcquireAllError {
            name: Some(locks[at].name.clone()),
            error,
        };
        // The busy lock watched, once a try found it busy: a release after
        // the watch began wakes the next try.
        let mut watching: Option<(usize, WaitTicket, Watch<'_, S>)> = None;
        let mut shutdown = self.shutdown.subscribe();
        loop {
            // Listening before the try, so that a release between a busy
            // answer and the wait below is kept as a wake-up.
            let woken = watching.as_ref().map(|(_, ticket, _)| {
                let mut woken = Box::pin(ticket.notify().notified());
                woken.as_mut().enable();
                woken
            });
            let tokens: Vec<LeaseToken> = (locks.iter())
                .map(|ask| LeaseToken::generate_for(ask.kind))
                .collect();
            let waits = !plan.wait.is_zero() && Instant::now() < deadline;
            let params: Vec<AcquireParams<'_>> = (locks.iter().zip(&tokens))
                .map(|(ask, token)| AcquireParams {
                    name: &ask.name,
                    kind: ask.kind,
                    limit: None,
                    token,
                    ttl: plan.ttl,
                    owner: plan.owner.as_ref(),
                    request_id: plan.request_id.as_ref(),
                    principal: &plan.principal,
                    lock_delay: plan.lock_delay,
                    fair: None,
                    waits,
                })
                .collect();
            let started = Instant::now();
            let (at, blockers) = match self.store.acquire_together(&params).await? {
                Ok(Together::Granted(leases)) => {
                    return Some(
                        self.deliver_together(leases, &tokens, started)
                            .map_err(|e| failed(0, e)),
                    );
                }
                Ok(Together::Refused {
                    at,
                    outcome: AcquireOutcome::Busy { blockers, .. },
                }) => (at, blockers),
                Ok(Together::Refused { at, outcome }) => {
                    let error = match outcome {
                        AcquireOutcome::LimitConflict { limit } => {
                            LockError::LimitConflict { limit }
                        }
                        AcquireOutcome::Contended => LockError::Contended,
                        _ => StoreError::Protocol("a refusal that granted".into()).into(),
                    };
                    return Some(Err(failed(at, error)));
                }
                Err(error) => {
                    if let StoreError::OutcomeUnknown(_) = error {
                        for (ask, token) in locks.iter().zip(&tokens) {
                            self.release_orphan(&ask.name, token, plan.ttl);
                        }
                    }
                    return Some(Err(failed(0, error.into())));
                }
            };
            if !waits {
                return Some(Err(failed(at, LockError::Busy(Box::new(blockers)))));
            }
            let Some(woken) = woken.filter(|_| watching.as_ref().is_some_and(|(on, ..)| *on == at))
            else {
                drop(watching.take());
                let ticket = match self.waiters.join(&locks[at].name, WaitMode::Local) {
                    Ok(ticket) => ticket,
                    Err(error) => return Some(Err(failed(at, error))),
                };
                let watch = Watch::start(&self.store, &locks[at].name).await;
                watching = Some((at, ticket, watch));
                // A release between the busy answer and the watch would go
                // unheard: try again at once, watched.
                continue;
            };
            let available_in = Duration::from_millis(blockers.holder.available_in_ms.max(1));
            let wake_at = (Instant::now() + available_in).min(deadline);
            tokio::select! {
                () = woken => {}
                () = sleep_until(wake_at) => {}
                _ = shutdown.wait_for(|stopping| *stopping) => {
                    return Some(Err(failed(at, LockError::ShuttingDown)));
                }
            }
        }
    }

    /// The leases of a set granted together, on their way to the caller:
    /// given back (by dropping them) if the answer came too late to leave
    /// them the validity a grant must have.
    fn deliver_together(
        self: &Arc<Self>,
        leases: Vec<Lease>,
        tokens: &[LeaseToken],
        started: Instant,
    ) -> Result<Vec<Grant<S>>, LockError> {
        let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut grants = Vec::with_capacity(leases.len());
        for mut lease in leases {
            lease.validity_ms = lease.validity_ms.saturating_sub(elapsed);
            grants.push(Grant {
                lease,
                service: Arc::clone(self),
                armed: true,
            });
        }
        for grant in &grants {
            let lease = &grant.lease;
            let min_validity = self.policy.min_validity_ms.min(lease.ttl_ms / 2);
            if lease.validity_ms < min_validity {
                return Err(LockError::GrantTooLate {
                    elapsed_ms: elapsed,
                    min_validity_ms: min_validity,
                });
            }
        }
        for grant in &grants {
            let lease = &grant.lease;
            // A retry that got back a lease taken before told its grant then.
            if tokens.contains(&lease.token) {
                self.changed(|| Change {
                    name: lease.name.clone(),
                    kind: ChangeKind::Acquired,
                    mode: lease.token.kind(),
                    fence: lease.fence,
                    owner: lease.owner.clone(),
                    expires_in_ms: lease.ttl_ms,
                    expires_at_ms: Some(lease.expires_at_ms),
                });
            }
        }
        Ok(grants)
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
