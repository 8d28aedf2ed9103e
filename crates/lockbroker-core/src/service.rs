//! [`LockService`]: the rules every transport shares, on top of a [`LockStore`].

use std::pin::pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use crate::error::{LockError, StoreError, ValidationError};
use crate::lease::{
    Fence, Lease, LeaseToken, LockDelay, LockStatus, Owner, Renewal, RequestId, Ttl,
};
use crate::name::LockName;
use crate::store::{AcquireOutcome, AcquireParams, ExtendOutcome, LockStore, ReleaseOutcome};
use crate::wait::{WaiterLimits, Waiters};

/// The limits and defaults that apply to every request, from configuration.
#[derive(Clone, Debug)]
pub struct LockPolicy {
    /// TTL of a lease whose request names none. Never "forever".
    pub default_ttl_ms: u64,
    /// The longest TTL a request may ask for.
    pub max_ttl_ms: u64,
    /// Longer `wait_ms` values are shortened to this.
    pub max_wait_ms: u64,
    /// Lock-delay of a lease whose request names none.
    pub default_lock_delay_ms: u64,
    /// The longest lock-delay a request may ask for.
    pub max_lock_delay_ms: u64,
    /// If set, no lease is extended past its acquisition time plus this.
    pub max_hold_ms: Option<u64>,
    /// Caps on concurrent waiters.
    pub waiters: WaiterLimits,
}

impl Default for LockPolicy {
    fn default() -> Self {
        Self {
            default_ttl_ms: 30_000,
            max_ttl_ms: 86_400_000,
            max_wait_ms: 60_000,
            default_lock_delay_ms: 0,
            max_lock_delay_ms: 60_000,
            max_hold_ms: None,
            waiters: WaiterLimits {
                max_waiters: 10_000,
                max_waiters_per_lock: 1_000,
            },
        }
    }
}

/// An acquire as a transport received it; [`LockService::acquire`] checks each
/// field against the [`LockPolicy`].
#[derive(Clone, Debug, Default)]
pub struct AcquireRequest {
    /// Lease duration; the policy default when absent.
    pub ttl_ms: Option<u64>,
    /// How long to wait for a busy lock; 0 or absent answers busy at once.
    pub wait_ms: Option<u64>,
    /// Free-form holder label.
    pub owner: Option<String>,
    /// Idempotency key for retries.
    pub request_id: Option<String>,
    /// Lock-delay if the lease expires unreleased; the policy default when absent.
    pub lock_delay_ms: Option<u64>,
}

/// The checked form of an [`AcquireRequest`].
struct AcquirePlan {
    ttl: Ttl,
    wait: Duration,
    owner: Option<Owner>,
    request_id: Option<RequestId>,
    lock_delay: LockDelay,
}

/// Takes, renews and gives back leases through a [`LockStore`], applying the
/// policy, waiting for busy locks, and refusing holds past the max hold.
pub struct LockService<S> {
    store: S,
    policy: LockPolicy,
    waiters: Waiters,
    shutdown: watch::Sender<bool>,
}

impl<S: LockStore> LockService<S> {
    /// A service over `store` with `policy`.
    pub fn new(store: S, policy: LockPolicy) -> Self {
        Self {
            store,
            waiters: Waiters::new(policy.waiters),
            policy,
            shutdown: watch::Sender::new(false),
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
    pub async fn acquire(
        &self,
        name: &LockName,
        request: AcquireRequest,
    ) -> Result<Lease, LockError> {
        let plan = self.plan(request)?;
        // One token for every attempt of this request: an attempt that Redis ran
        // but whose answer was lost is recognised as ours by the next one.
        let token = LeaseToken::generate();
        let params = || AcquireParams {
            name,
            token: &token,
            ttl: plan.ttl,
            owner: plan.owner.as_ref(),
            request_id: plan.request_id.as_ref(),
            lock_delay: plan.lock_delay,
        };
        if plan.wait.is_zero() {
            return match self.store.acquire(params()).await? {
                AcquireOutcome::Granted(lease) => Ok(lease),
                AcquireOutcome::Busy(holder) => Err(LockError::Busy(holder)),
            };
        }

        let deadline = Instant::now() + plan.wait;
        let ticket = self.waiters.join(name)?;
        let mut shutdown = self.shutdown.subscribe();
        loop {
            // Listen before trying, so a release between the failed attempt and
            // the sleep below still wakes this waiter.
            let mut released = pin!(ticket.notify().notified());
            released.as_mut().enable();
            let holder = match self.store.acquire(params()).await? {
                AcquireOutcome::Granted(lease) => return Ok(lease),
                AcquireOutcome::Busy(holder) => holder,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(LockError::Busy(holder));
            }
            // The holder's expiry (plus lock-delay) frees the lock without any
            // release to wake us, so sleep no longer than that.
            let frees_at = now + Duration::from_millis(holder.available_in_ms.max(1));
            tokio::select! {
                () = released => {}
                () = sleep_until(frees_at.min(deadline)) => {}
                _ = shutdown.wait_for(|stopping| *stopping) => return Err(LockError::ShuttingDown),
            }
        }
    }

    /// Sets the remaining TTL of the caller's lease to `ttl_ms` (replace, not add).
    pub async fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl_ms: Option<u64>,
    ) -> Result<Renewal, LockError> {
        let ttl = Ttl::parse(
            "ttl_ms",
            ttl_ms.unwrap_or(self.policy.default_ttl_ms),
            self.policy.max_ttl_ms,
        )?;
        let max_hold_ms = self.policy.max_hold_ms.unwrap_or(0);
        match self.store.extend(name, token, ttl, max_hold_ms).await? {
            ExtendOutcome::Extended(renewal) => Ok(renewal),
            ExtendOutcome::Lost => Err(LockError::LeaseLost),
            ExtendOutcome::MaxHoldExceeded { expires_in_ms } => Err(LockError::MaxHoldExceeded {
                max_hold_ms,
                expires_in_ms,
            }),
        }
    }

    /// Gives the lock back at once and wakes this broker's waiters for it.
    pub async fn release(&self, name: &LockName, token: &LeaseToken) -> Result<Fence, LockError> {
        match self.store.release(name, token).await? {
            ReleaseOutcome::Released(fence) => {
                self.waiters.wake(name);
                Ok(fence)
            }
            ReleaseOutcome::Lost => Err(LockError::LeaseLost),
        }
    }

    /// Reads a lock's state; never reveals a token.
    pub async fn status(&self, name: &LockName) -> Result<LockStatus, LockError> {
        Ok(self.store.status(name).await?)
    }

    /// Succeeds when the store can serve lock steps.
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    /// Whether [`LockService::begin_shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Ends every wait in progress with [`LockError::ShuttingDown`] and refuses
    /// new waits, so a graceful shutdown is not held up by waiting requests.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    fn plan(&self, request: AcquireRequest) -> Result<AcquirePlan, ValidationError> {
        let policy = &self.policy;
        let max_ttl_ms = policy
            .max_hold_ms
            .map_or(policy.max_ttl_ms, |hold| hold.min(policy.max_ttl_ms));
        let ttl = Ttl::parse(
            "ttl_ms",
            request
                .ttl_ms
                .unwrap_or(policy.default_ttl_ms.min(max_ttl_ms)),
            max_ttl_ms,
        )?;
        let lock_delay = LockDelay::parse(
            request
                .lock_delay_ms
                .unwrap_or(policy.default_lock_delay_ms),
            policy.max_lock_delay_ms,
        )?;
        let owner = request.owner.as_deref().map(Owner::parse).transpose()?;
        let request_id = request
            .request_id
            .as_deref()
            .map(RequestId::parse)
            .transpose()?;
        let wait_ms = request.wait_ms.unwrap_or(0).min(policy.max_wait_ms);
        let wait = if *self.shutdown.borrow() {
            Duration::ZERO
        } else {
            Duration::from_millis(wait_ms)
        };
        Ok(AcquirePlan {
            ttl,
            wait,
            owner,
            request_id,
            lock_delay,
        })
    }
}
