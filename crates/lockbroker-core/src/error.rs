//! Errors of the lock domain: what a caller did wrong, and what went wrong underneath.

use crate::lease::{Blockers, Principal};
pub use crate::validation::ValidationError;

/// Why a lock store could not answer. Every variant fails closed: no grant is made
/// on the strength of an error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend could not be reached; the step did not run.
    #[error("lock store unavailable: {0}")]
    Unavailable(String),
    /// The step was sent but its answer was lost (a timeout or a dropped
    /// connection): it may have run, or may still run.
    #[error("lock store outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// The backend answers but refuses writes (for Redis: out of memory under
    /// `noeviction`, or a read-only replica); the step did not run.
    #[error("lock store refuses writes: {0}")]
    RefusesWrites(String),
    /// The broker already has as much of this work in flight as it allows
    /// (commands to the backend, or listing pages); the step was not sent.
    #[error("lock store overloaded: {0}")]
    Overloaded(String),
    /// The backend answered something the store cannot interpret.
    #[error("lock store protocol error: {0}")]
    Protocol(String),
    /// The step changed a lease on the primary, but too few replicas
    /// acknowledged the change in time (replica acknowledgement); `change`
    /// says what became of it, `detail` how many replicas answered.
    #[error("lock store replicas did not acknowledge the {change}: {detail}")]
    Unacknowledged {
        /// What the step changed, and what became of that change.
        change: Unacknowledged,
        /// How many replicas acknowledged, of how many required, within what.
        detail: String,
    },
}

/// A change to a lease that too few replicas acknowledged, and what became
/// of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unacknowledged {
    /// A grant, released again at once: the lock was held briefly (others
    /// were refused meanwhile) and nothing is held now.
    GrantReleased,
    /// A grant whose release failed: the lock stays held, by a lease whose
    /// token nobody was given, until its TTL runs out.
    GrantLeftToExpire {
        /// The lease's TTL.
        ttl_ms: u64,
    },
    /// An extend: it took effect on the primary, but a failover could
    /// bring back the lease's earlier expiry.
    Extend,
}

impl std::fmt::Display for Unacknowledged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::GrantReleased => "grant (released again)",
            Self::GrantLeftToExpire { .. } => "grant (left to expire at its TTL)",
            Self::Extend => "extend",
        })
    }
}

/// Every way a lock operation can end other than success.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The request broke a validation rule.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// Other leases hold the lock or the semaphore's places (after
    /// waiting, if the caller asked to wait).
    #[error("lock is held by another lease")]
    Busy(Box<Blockers>),
    /// Other acquires in flight split the places this one needed, and none
    /// got enough; no lease holds the lock (after retrying within the
    /// request's budget).
    #[error("other acquires in flight contended for the lock")]
    Contended,
    /// The semaphore's permits take places under another limit.
    #[error("the semaphore's limit in force is {limit}")]
    LimitConflict {
        /// The limit in force.
        limit: u32,
    },
    /// The token no longer holds the lease: it expired or was taken.
    #[error("the lease expired or was taken by another holder")]
    LeaseLost,
    /// The token's lease was already released by its holder.
    #[error("the lease was released by its holder")]
    LeaseReleased,
    /// An operator force-released the token's lease: another holder may
    /// have run since, as after a lost lease.
    #[error("the lease was force-released by an operator")]
    LeaseForceReleased {
        /// Who force-released it.
        by: Principal,
    },
    /// Extending would keep the lease past its acquisition time plus the max hold.
    #[error("extending would exceed the maximum hold time of {max_hold_ms} ms")]
    MaxHoldExceeded {
        /// The configured maximum hold.
        max_hold_ms: u64,
        /// How long the lease stays valid without the extension.
        expires_in_ms: u64,
    },
    /// The session named is not open: it expired, was closed, or the token
    /// is not its. Every lease it held has ended or is ending.
    #[error("the session is not open: it expired, was closed, or the token is not its")]
    SessionLost,
    /// The session holds as many leases as one session may.
    #[error("the session holds {max} leases already, as many as one session may")]
    SessionFull {
        /// The configured maximum.
        max: u32,
    },
    /// The caller's API key holds as many sessions open through this broker
    /// as one key may.
    #[error("the API key holds {max} sessions open already, as many as one key may")]
    TooManySessions {
        /// The configured maximum.
        max: u32,
    },
    /// This broker already has as many waiters as its limits allow.
    #[error("too many requests are already waiting")]
    TooManyWaiters,
    /// The broker is shutting down and stopped waiting on the caller's behalf.
    #[error("the broker is shutting down")]
    ShuttingDown,
    /// The store granted the lease but its answer came so late that too
    /// little of the lease's validity was left to hand it out; the grant was
    /// given back, so nothing is held.
    #[error("the grant took {elapsed_ms} ms to arrive, leaving less than {min_validity_ms} ms of validity")]
    GrantTooLate {
        /// How long the store took to answer.
        elapsed_ms: u64,
        /// The validity a grant must still have on arrival.
        min_validity_ms: u64,
    },
    /// The lock store could not be used; nothing was granted.
    #[error(transparent)]
    Store(#[from] StoreError),
}
