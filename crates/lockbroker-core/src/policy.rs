//! [`LockPolicy`]: the limits and defaults of every request, and the check
//! that turns an [`AcquireRequest`] into a plan the service can run.

use std::time::Duration;

use crate::lease::{LeaseKind, LockDelay, Owner, Principal, RequestId, Ttl};
use crate::validation::ValidationError;
use crate::wait::WaiterLimits;

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
    /// A grant that reaches the broker with less validity left than this
    /// (the store answered slowly) is given back instead of handed out.
    pub min_validity_ms: u64,
    /// A fair waiter's queue entry in the store lives this long unless
    /// refreshed; waiters refresh it three times per period.
    pub fair_entry_ttl_ms: u64,
    /// Caps on concurrent waiters.
    pub waiters: WaiterLimits,
    /// The highest limit a semaphore may have.
    pub max_semaphore_limit: u32,
    /// Event streams open at once on this broker.
    pub max_event_streams: usize,
    /// Events a stream may fall behind by before it is told it lagged.
    pub event_stream_buffer: usize,
    /// Listing pages this broker reads at once; more are refused with
    /// [`StoreError::Overloaded`](crate::StoreError::Overloaded), so a burst
    /// of listings cannot crowd out lock steps.
    pub max_concurrent_listings: usize,
    /// The most leases one session may hold at once.
    pub max_leases_per_session: u32,
    /// The most sessions one API key may hold open through this broker.
    pub max_sessions_per_key: u32,
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
            min_validity_ms: 50,
            fair_entry_ttl_ms: 3_000,
            waiters: WaiterLimits {
                max_waiters: 10_000,
                max_waiters_per_lock: 1_000,
            },
            max_semaphore_limit: 10_000,
            max_event_streams: 1_000,
            event_stream_buffer: 256,
            max_concurrent_listings: 8,
            max_leases_per_session: 1_000,
            max_sessions_per_key: 10_000,
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
    /// Who asks: a retry returns an existing lease only to the same principal.
    pub principal: Principal,
    /// Lock-delay if the lease expires unreleased; the policy default when absent.
    pub lock_delay_ms: Option<u64>,
    /// Wait in the store's queue, in arrival order across all brokers.
    pub fair: bool,
    /// The kind of lease asked for: exclusive (the default) or shared on a
    /// lock, a permit on a semaphore.
    pub kind: LeaseKind,
    /// For a permit: the semaphore's limit; required there, refused elsewhere.
    pub limit: Option<u64>,
    /// The token of a session to take the lease under, instead of a TTL
    /// and lock-delay of its own: the lease is valid while the session is.
    pub session: Option<String>,
}

/// The checked form of an [`AcquireRequest`].
pub(crate) struct AcquirePlan {
    pub(crate) ttl: Ttl,
    pub(crate) wait: Duration,
    pub(crate) owner: Option<Owner>,
    pub(crate) request_id: Option<RequestId>,
    pub(crate) principal: Principal,
    pub(crate) lock_delay: LockDelay,
    pub(crate) fair: bool,
    pub(crate) kind: LeaseKind,
    pub(crate) limit: Option<u32>,
}

impl LockPolicy {
    /// Checks every field of `request` against the policy; a broker that is
    /// shutting down waits for nobody.
    pub(crate) fn plan(
        &self,
        request: AcquireRequest,
        shutting_down: bool,
    ) -> Result<AcquirePlan, ValidationError> {
        let policy = self;
        // A lease can never be valid longer than it may be held.
        let (max_ttl_ms, setting) = match policy.max_hold_ms {
            Some(hold) if hold < policy.max_ttl_ms => (hold, "locks.max_hold_ms"),
            _ => (policy.max_ttl_ms, "locks.max_ttl_ms"),
        };
        let ttl = Ttl::parse_under(
            "ttl_ms",
            request
                .ttl_ms
                .unwrap_or(policy.default_ttl_ms.min(max_ttl_ms)),
            max_ttl_ms,
            setting,
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
        let wait = if shutting_down {
            Duration::ZERO
        } else {
            Duration::from_millis(wait_ms)
        };
        let limit = self.check_limit(request.kind, request.limit)?;
        Ok(AcquirePlan {
            ttl,
            wait,
            owner,
            request_id,
            principal: request.principal,
            lock_delay,
            fair: request.fair,
            kind: request.kind,
            limit,
        })
    }

    /// A permit needs a limit from 1 to the configured maximum; other
    /// leases take none.
    fn check_limit(
        &self,
        kind: LeaseKind,
        limit: Option<u64>,
    ) -> Result<Option<u32>, ValidationError> {
        let max = self.max_semaphore_limit;
        match (kind, limit) {
            (LeaseKind::Permit, None) => Err(ValidationError::new("limit", "is required")),
            (LeaseKind::Permit, Some(limit)) => match u32::try_from(limit) {
                Ok(limit) if (1..=max).contains(&limit) => Ok(Some(limit)),
                _ => Err(ValidationError::new(
                    "limit",
                    format!("must be between 1 and {max} (the configured maximum)"),
                )),
            },
            (_, None) => Ok(None),
            (_, Some(_)) => Err(ValidationError::new(
                "limit",
                "is a semaphore's; a lock takes none",
            )),
        }
    }
}
