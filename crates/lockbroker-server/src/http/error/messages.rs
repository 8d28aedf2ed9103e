//! What the caller is told in words: the messages of busy answers, of
//! failed lock store steps (what is known of the outcome, per [`Step`]),
//! and of refused event streams.

use lockbroker_core::{Blockers, LeaseKind, LockName, Space, StoreError, Unacknowledged};

use super::{Step, StreamLimit};

impl Step {
    /// The step as messages name it.
    pub(super) fn noun(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Extend => "extend",
            Self::Release => "release",
            Self::ForceRelease => "force release",
            Self::Read => "read",
        }
    }
}

impl StreamLimit {
    /// What the refused caller is told.
    pub(super) fn message(self) -> &'static str {
        match self {
            Self::Broker => {
                "this broker has as many event streams open as it allows; retry later or on \
                 another instance"
            }
            Self::KeyShare => {
                "this API key has as many event streams open as one key may; close one or \
                 retry later"
            }
            Self::AdminReserve => {
                "the event streams this broker has left are kept for admin keys; retry later \
                 or on another instance"
            }
            Self::StateReads => {
                "this broker is reading as many opening states for event streams as it allows \
                 at once; retry in a moment"
            }
        }
    }
}

/// What a `lock_busy` answer says is in the way: live leases, the
/// lock-delay of one that expired unreleased, or an earlier waiter.
pub(super) fn busy_message(name: &LockName, blockers: &Blockers) -> String {
    let holder = &blockers.holder;
    let noun = name.space().noun();
    match (name.space(), holder.mode) {
        (Space::Semaphore, _) if holder.available_in_ms > 0 => format!(
            "every permit of semaphore {name:?} is taken ({} held); the first frees in {} ms",
            blockers.holders.len(),
            holder.available_in_ms
        ),
        (_, LeaseKind::Shared) if holder.available_in_ms > 0 => format!(
            "lock {name:?} is held by {} shared lease(s); it frees for an exclusive lease in {} ms",
            blockers.holders.len(),
            holder.available_in_ms
        ),
        _ if holder.expires_in_ms > 0 => format!("lock {name:?} is held by another lease"),
        _ if holder.available_in_ms > 0 => format!(
            "lock {name:?} is in its lock-delay after a lease expired unreleased; it frees in {} ms",
            holder.available_in_ms
        ),
        _ if blockers.holders.is_empty() => format!(
            "{noun} {name:?} is free but promised to an earlier waiter in its queue; wait with \
             `wait_ms` to take a place in line"
        ),
        _ => format!(
            "{noun} {name:?} has waiters queued before this request, and {} lease(s) hold it; \
             wait with `wait_ms` to take a place in line",
            blockers.holders.len()
        ),
    }
}

/// What the caller is told when the lock store failed `step`: what is known
/// of the outcome, never the cause (that is logged). Only a change whose
/// answer was lost has an unknown outcome: a read changes nothing, and a
/// step that never reached the store changed nothing either.
pub(super) fn store_message(step: Step, cause: &StoreError) -> String {
    let noun = step.noun();
    match (step, cause) {
        (_, StoreError::Protocol(_)) => "internal error".to_owned(),
        (_, StoreError::Overloaded(_)) => format!(
            "the broker is already doing as much of this work as it allows; the {noun} was \
             not sent to the lock store and nothing was changed, retry later"
        ),
        (
            _,
            StoreError::Unacknowledged {
                change: Unacknowledged::GrantReleased,
                ..
            },
        ) => "the lock was granted, but too few Redis replicas acknowledged the grant in time, \
              so the broker released it again: the lock was held briefly (other acquires may \
              have been refused meanwhile) and nothing is held now; retry later"
            .to_owned(),
        (
            _,
            StoreError::Unacknowledged {
                change: Unacknowledged::GrantLeftToExpire { ttl_ms },
                ..
            },
        ) => format!(
            "the lock was granted, but too few Redis replicas acknowledged the grant in time, \
             and releasing it again failed: the lock stays held, by a lease whose token nobody \
             was given, until its TTL of {ttl_ms} ms runs out; retry after that"
        ),
        (
            _,
            StoreError::Unacknowledged {
                change: Unacknowledged::Extend,
                ..
            },
        ) => "the lease was extended on the Redis primary, but too few replicas acknowledged \
              the extend in time, so a failover could bring back its earlier expiry: count only \
              on the expiry from before this extend; retrying the extend is safe"
            .to_owned(),
        (Step::Read, StoreError::RefusesWrites(_)) => {
            "the lock store refuses writes (Redis is out of memory or read-only); this read \
             changed nothing, retry later"
                .to_owned()
        }
        (Step::Read, _) => {
            "the lock store is unavailable; this read changed nothing, retry later".to_owned()
        }
        (_, StoreError::Unavailable(_)) => format!(
            "the lock store is unavailable and the {noun} did not reach it; nothing was \
             changed, retry later"
        ),
        (_, StoreError::RefusesWrites(_)) => format!(
            "the lock store refuses writes (Redis is out of memory or read-only), so the \
             {noun} was not made; nothing was changed, retry later"
        ),
        (Step::Acquire, StoreError::OutcomeUnknown(_)) => {
            "the lock store did not answer the acquire in time, so the outcome is unknown: a \
             lease it took is being released by the broker; retrying with the same request_id \
             is safe"
                .to_owned()
        }
        (Step::ForceRelease, StoreError::OutcomeUnknown(_)) => {
            "the lock store did not answer the force release in time, so the outcome is \
             unknown: it may still take effect; retrying it is safe"
                .to_owned()
        }
        (_, StoreError::OutcomeUnknown(_)) => format!(
            "the lock store did not answer the {noun} in time, so the outcome is unknown: it \
             may still take effect; retrying it with the same token is safe"
        ),
    }
}

/// What a `contended` answer says: nobody holds the name, other acquires
/// took the votes this one needed.
pub(super) fn contended_message(name: &LockName) -> String {
    format!(
        "{} {name:?} is held by no lease, but other acquires in flight took the nodes' votes; \
         try again in a moment, or wait with `wait_ms`",
        name.space().noun()
    )
}
