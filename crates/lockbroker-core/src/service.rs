//! [`LockService`]: the rules every transport shares, on top of a [`LockStore`].

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use tokio::sync::watch as signal;
use tokio::sync::Semaphore;
use tokio::time::{sleep_until, Instant};

use crate::error::{LockError, StoreError};
use crate::events::{Change, ChangeKind, EventHub};
use crate::lease::{random_hex, Blockers, Fence, Lease};
use crate::name::LockName;
use crate::policy::{AcquireRequest, LockPolicy};
use crate::store::{
    contended_back_off, AcquireOutcome, AcquireParams, FairEntry, LockStore, Watch,
};
use crate::wait::{WaitMode, Waiters};

mod all;
mod attempt;
mod grant;
mod reads;
mod sessions;
mod steps;
mod watch;

pub use all::{AcquireAllError, LockAsk, MAX_LOCKS_PER_ACQUIRE};
use attempt::Attempt;
pub use grant::Grant;
use grant::{check_token_space, spawn_detached, QueueExit};
pub use sessions::{
    EndedLease, KeptSession, LeaseEnd, OpenedSession, SessionRequest, SessionState,
};

/// Takes, renews and gives back leases through a [`LockStore`], applying the
/// policy, waiting for busy locks, and refusing holds past the max hold.
pub struct LockService<S> {
    store: S,
    policy: LockPolicy,
    waiters: Arc<Waiters>,
    shutdown: signal::Sender<bool>,
    /// Numbers changes into events for this broker's streams.
    events: Arc<EventHub>,
    /// This broker's name in its announcements.
    id: String,
    /// The number of this broker's next announced change.
    next_change: AtomicU64,
    /// Whether this broker is saying that it watches.
    heartbeat: AtomicBool,
    /// One permit per listing page being read.
    listings: Semaphore,
    /// The sessions this broker opened or kept alive, for its metrics.
    sessions: sessions::SessionBook,
}

impl<S: LockStore> LockService<S> {
    /// A service over `store` with `policy`. Inside a Tokio runtime it also
    /// starts listening to the store's release announcements.
    pub fn new(store: S, policy: LockPolicy) -> Self {
        let waiters = Arc::new(Waiters::new(policy.waiters));
        if let (Some(mut wakes), Ok(runtime)) =
            (store.take_wakes(), tokio::runtime::Handle::try_current())
        {
            let waiters = Arc::clone(&waiters);
            runtime.spawn(async move {
                while let Some(wake) = wakes.recv().await {
                    waiters.wake(&wake);
                }
            });
        }
        let events = EventHub::new(policy.max_event_streams, policy.event_stream_buffer);
        let policy_listings = policy.max_concurrent_listings.max(1);
        let id = random_hex::<8>();
        if let (Some(announcements), Ok(runtime)) = (
            store.take_announcements(),
            tokio::runtime::Handle::try_current(),
        ) {
            runtime.spawn(watch::listen(
                id.clone(),
                announcements,
                Arc::clone(&events),
            ));
        }
        Self {
            store,
            waiters,
            policy,
            shutdown: signal::Sender::new(false),
            events,
            id,
            next_change: AtomicU64::new(0),
            heartbeat: AtomicBool::new(false),
            listings: Semaphore::new(policy_listings),
            sessions: sessions::SessionBook::default(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &LockPolicy {
        &self.policy
    }

    /// The store underneath, for readiness checks and shutdown.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// How many acquires are waiting on this broker now.
    pub fn waiting(&self) -> usize {
        self.waiters.count()
    }

    /// Grants `name` to the caller, waiting up to `wait_ms` for it to free.
    ///
    /// Waiters on this broker are served in arrival order; fair waiters in
    /// arrival order across every broker sharing the store.
    ///
    /// With `request.session`, the lease is taken under that session.
    ///
    /// Written as a function returning its future, not an `async fn`: a
    /// waiting acquire holds this future for its whole wait, and an `async
    /// fn` keeps every argument twice (as passed, and as moved on).
    pub fn acquire<'a>(
        self: &'a Arc<Self>,
        name: &'a LockName,
        mut request: AcquireRequest,
    ) -> impl Future<Output = Result<Grant<S>, LockError>> + 'a {
        match request.session.take() {
            // Boxed: most acquires are not under a session.
            Some(session) => Either::Left(Box::pin(async move {
                self.acquire_in_session(name, request, &session).await
            })),
            None => Either::Right(self.acquire_plain(name, request, false)),
        }
    }

    /// [`LockService::acquire`] of a lease with a TTL of its own;
    /// `under_session` marks its token as a lease under a session, which
    /// only the session's keepalives renew. The request is checked and its
    /// attempt made before the future, which holds only the attempt.
    fn acquire_plain<'a>(
        self: &'a Arc<Self>,
        name: &'a LockName,
        request: AcquireRequest,
        under_session: bool,
    ) -> impl Future<Output = Result<Grant<S>, LockError>> + 'a {
        let prepared = self.prepare(name, request, under_session);
        async move {
            let attempt = match prepared {
                Ok(ref attempt) => attempt,
                Err(error) => return Err(error),
            };
            if attempt.plan.wait.is_zero() {
                return match self.attempt(attempt, None, false).await? {
                    Ok(grant) => Ok(grant),
                    Err((blockers, _)) => Err(LockError::Busy(Box::new(blockers))),
                };
            }
            self.wait_for(attempt).await
        }
    }

    async fn wait_for(self: &Arc<Self>, attempt: &Attempt<'_>) -> Result<Grant<S>, LockError> {
        let deadline = Instant::now() + attempt.plan.wait;
        let mode = match &attempt.waiter_id {
            Some(id) if attempt.queues_always => WaitMode::Fair(id.to_string()),
            _ => WaitMode::Local,
        };
        let ticket = match self.waiters.join(attempt.name, mode) {
            Ok(ticket) => ticket,
            // Only a request that would actually wait counts against the cap:
            // one that finds the lock free is granted. A lock with waiters of
            // its own here is not tried, so nobody passes them.
            // Boxed: this rare path would otherwise set the size of the
            // whole wait's future.
            Err(LockError::TooManyWaiters) if !self.waiters.has_line(attempt.name) => {
                return match Box::pin(self.attempt(attempt, None, false)).await? {
                    Ok(grant) => Ok(grant),
                    Err(_) => Err(LockError::TooManyWaiters),
                };
            }
            Err(error) => return Err(error),
        };
        // Before the first attempt: a release between a busy answer and the
        // watch would go unheard.
        let _watch = Watch::start(&self.store, attempt.name).await;
        // Armed while the waiter holds a place in the store's queue.
        let mut queue_exit = attempt.waiter_id.as_deref().map(|waiter_id| QueueExit {
            service: self,
            name: attempt.name,
            waiter_id,
            armed: attempt.queues_always,
        });
        let heartbeat = Duration::from_millis((self.policy.fair_entry_ttl_ms / 3).max(1));
        let mut shutdown = self.shutdown.subscribe();
        // The only change is to stopping: the waits below end on any change,
        // which takes a smaller future than watching for the value.
        if *shutdown.borrow_and_update() {
            return Err(LockError::ShuttingDown);
        }
        // Contended answers in a row: each backs off longer.
        let mut contended = 0;
        loop {
            // Listen before trying, so a wake-up between a failed attempt and
            // the sleep below is kept as a permit.
            let mut woken = pin!(ticket.notify().notified());
            woken.as_mut().enable();
            let mut wake_at = deadline;
            if ticket.may_attempt() || Instant::now() >= deadline {
                let tried = self
                    .attempt(attempt, attempt.waiter_id.as_deref(), true)
                    .await;
                let answer = match tried {
                    // No release will announce the end of a split vote: try
                    // again after a random back-off, so one contender wins.
                    Err(LockError::Contended) if Instant::now() < deadline => {
                        wake_at = (Instant::now() + contended_back_off(contended)).min(deadline);
                        contended = contended.saturating_add(1);
                        tokio::select! {
                            () = sleep_until(wake_at) => {}
                            _ = shutdown.changed() => return Err(LockError::ShuttingDown),
                        }
                        continue;
                    }
                    other => other?,
                };
                contended = 0;
                match answer {
                    Ok(grant) => {
                        // The store took the entry out of its queue with the grant.
                        if let Some(exit) = &mut queue_exit {
                            exit.armed = false;
                        }
                        return Ok(grant);
                    }
                    Err((blockers, queue_position)) => {
                        let queued = queue_position.is_some();
                        if let Some(exit) = &mut queue_exit {
                            exit.armed = queued;
                        }
                        ticket.holds_store_place(queued);
                        let now = Instant::now();
                        if now >= deadline {
                            return Err(LockError::Busy(Box::new(blockers)));
                        }
                        // The holder's expiry (plus lock-delay) frees the lock
                        // without a release to announce it: the next in line
                        // wakes for it. Waiters further back wait to be named.
                        if queue_position.unwrap_or(0) == 0 {
                            let available_in_ms = blockers.holder.available_in_ms;
                            wake_at = now + Duration::from_millis(available_in_ms.max(1));
                        }
                        // A place in the queue lasts while it is refreshed.
                        if queued {
                            wake_at = wake_at.min(now + heartbeat);
                        }
                        wake_at = wake_at.min(deadline);
                    }
                }
            }
            tokio::select! {
                () = woken => {}
                () = sleep_until(wake_at) => {}
                _ = shutdown.changed() => return Err(LockError::ShuttingDown),
            }
        }
    }

    /// One try at the store, in the store's fair queue under `fair_id` if
    /// given, by a caller that `waits` for the lock if it is busy.
    /// `Ok(Err(..))` is a busy answer.
    async fn attempt(
        self: &Arc<Self>,
        attempt: &Attempt<'_>,
        fair_id: Option<&str>,
        waits: bool,
    ) -> Result<Result<Grant<S>, (Blockers, Option<u64>)>, LockError> {
        let plan = &attempt.plan;
        let params = AcquireParams {
            name: attempt.name,
            kind: plan.kind,
            limit: plan.limit,
            token: &attempt.token,
            ttl: plan.ttl,
            owner: plan.owner.as_ref(),
            request_id: plan.request_id.as_ref(),
            principal: &plan.principal,
            lock_delay: plan.lock_delay,
            fair: fair_id.map(|waiter_id| FairEntry {
                waiter_id,
                always: attempt.queues_always,
                entry_ttl_ms: self.policy.fair_entry_ttl_ms,
                arrived_at_us: attempt.arrived_at_us,
            }),
            waits,
        };
        // Armed from before the call: if this future is dropped while the
        // script runs, a grant it made is released.
        let in_flight = Grant {
            lease: Lease {
                name: attempt.name.clone(),
                token: attempt.token.clone(),
                fence: Fence::new(0),
                ttl_ms: 0,
                expires_at_ms: 0,
                validity_ms: 0,
                owner: None,
            },
            service: Arc::clone(self),
            armed: true,
        };
        let started = Instant::now();
        // Boxed: the store's future is the largest part of an acquire's, and
        // a waiting acquire would carry its size for its whole wait, not only
        // while the store is asked.
        let outcome = Box::pin(self.store.acquire(params)).await;
        let mut grant = in_flight;
        match outcome {
            Ok(AcquireOutcome::Granted(lease)) => {
                let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let min_validity = self.policy.min_validity_ms.min(lease.ttl_ms / 2);
                grant.lease = lease;
                // What is sure to be left once the answer reached the broker.
                grant.lease.validity_ms = grant.lease.validity_ms.saturating_sub(elapsed);
                if grant.lease.validity_ms < min_validity {
                    // Dropping the grant releases it.
                    return Err(LockError::GrantTooLate {
                        elapsed_ms: elapsed,
                        min_validity_ms: min_validity,
                    });
                }
                let lease = &grant.lease;
                // A retry that got back a lease taken before told its grant
                // then; only a new grant carries this attempt's token.
                if lease.token == attempt.token {
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
                Ok(Ok(grant))
            }
            Ok(AcquireOutcome::Busy {
                mut blockers,
                queue_position,
            }) => {
                grant.armed = false;
                // A busy permit asked under the limit in force (any other
                // limit is a conflict instead).
                blockers.limit = plan.limit;
                Ok(Err((blockers, queue_position)))
            }
            Ok(AcquireOutcome::LimitConflict { limit }) => {
                grant.armed = false;
                Err(LockError::LimitConflict { limit })
            }
            Ok(AcquireOutcome::Contended) => {
                grant.armed = false;
                Err(LockError::Contended)
            }
            Err(error) => {
                grant.armed = false;
                if let StoreError::OutcomeUnknown(_) = error {
                    self.release_orphan(attempt.name, &attempt.token, plan.ttl);
                }
                Err(error.into())
            }
        }
    }

    /// Succeeds when the store can serve lock steps.
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    /// Whether [`LockService::begin_shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Turns `true` when [`LockService::begin_shutdown`] is called, for
    /// work that must end then (event streams).
    pub fn shutdown_signal(&self) -> signal::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Ends every wait in progress with [`LockError::ShuttingDown`] and refuses
    /// new waits, so a graceful shutdown is not held up by waiting requests.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}
