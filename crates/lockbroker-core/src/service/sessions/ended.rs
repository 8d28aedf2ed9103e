//! Why a lease under a session ended before its session, as a keepalive
//! names it: what the lease's own extend would have answered, which the
//! extend routes refuse for such a lease.

use crate::error::LockError;
use crate::lease::Principal;
use crate::name::LockName;

/// A lease a keepalive found ended, and took out of its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedLease {
    /// The lock's or semaphore's name.
    pub name: LockName,
    /// Why it ended: what an extend of its own would have answered.
    pub end: LeaseEnd,
}

/// Why a lease under a session ended before its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Its holder released it.
    Released,
    /// An operator force-released it.
    ForceReleased {
        /// Who force-released it.
        by: Principal,
    },
    /// It reached the broker's maximum hold and runs out at its TTL.
    MaxHoldExceeded,
    /// It expired, or was replaced, before the keepalive came.
    Lost,
}

/// Why a lease's own extend failed, when it says the lease ended.
pub(super) fn lease_end(error: &LockError) -> Option<LeaseEnd> {
    match error {
        LockError::LeaseLost => Some(LeaseEnd::Lost),
        LockError::LeaseReleased => Some(LeaseEnd::Released),
        LockError::LeaseForceReleased { by } => Some(LeaseEnd::ForceReleased { by: by.clone() }),
        LockError::MaxHoldExceeded { .. } => Some(LeaseEnd::MaxHoldExceeded),
        _ => None,
    }
}
