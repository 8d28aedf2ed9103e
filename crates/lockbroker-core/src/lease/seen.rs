//! What others see of the leases of a name: a busy answer's holders and a
//! status. Never a token.

use super::{Fence, LeaseKind};

/// What a busy answer tells about the lease in the way. Never the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The kind of lease it is.
    pub mode: LeaseKind,
    /// The holder's label, if it gave one.
    pub owner: Option<String>,
    /// The holder's fence.
    pub fence: Fence,
    /// How long the holder's lease stays valid; 0 once it expired and only the
    /// lock-delay keeps the lock unavailable.
    pub expires_in_ms: u64,
    /// How long until the lock can be acquired at the earliest (lease plus
    /// lock-delay), assuming nobody extends it.
    pub available_in_ms: u64,
}

/// Who is in the way of an acquire that was turned away. Never a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blockers {
    /// The lease whose end decides when the caller may look again: an
    /// exclusive lease; the last shared lease to free, for an exclusive
    /// request; the first permit to free, for a permit. For a free name owed
    /// to an earlier waiter in the queue: no owner, the last fence, zero times.
    pub holder: Holder,
    /// Every lease in the way, the first to free first, at most
    /// [`MAX_SHOWN_BLOCKERS`].
    pub holders: Vec<Holder>,
    /// For a semaphore: its limit in force.
    pub limit: Option<u32>,
}

/// How many leases a busy answer shows at most.
pub const MAX_SHOWN_BLOCKERS: usize = 20;
/// How many leases a status shows at most.
pub const MAX_SHOWN_HOLDERS: usize = 100;

impl Blockers {
    /// One lease in the way, alone.
    pub fn one(holder: Holder) -> Self {
        Self {
            holders: vec![holder.clone()],
            holder,
            limit: None,
        }
    }

    /// A free name owed to an earlier waiter in its queue.
    pub fn queue(fence: Fence) -> Self {
        Self {
            holder: Holder {
                mode: LeaseKind::Exclusive,
                owner: None,
                fence,
                expires_in_ms: 0,
                available_in_ms: 0,
            },
            holders: Vec::new(),
            limit: None,
        }
    }
}

/// A read of a lock's or a semaphore's state for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockStatus {
    /// Whether a valid lease holds the name now.
    pub held: bool,
    /// The holder's label, while an exclusive lease holds the lock.
    pub owner: Option<String>,
    /// The last fence issued for this name, if the store still remembers one.
    pub fence: Option<Fence>,
    /// How long the current lease stays valid (the last of several); 0 when
    /// not held.
    pub expires_in_ms: u64,
    /// How long until an exclusive lease could be granted (0 when the name
    /// is free now).
    pub available_in_ms: u64,
    /// The kind of the valid leases: exclusive, shared or permit; `None`
    /// when not held.
    pub mode: Option<LeaseKind>,
    /// The valid leases and those in their lock-delay, the first to free
    /// first, at most [`MAX_SHOWN_HOLDERS`].
    pub holders: Vec<Holder>,
    /// How many leases are valid, in all.
    pub holder_count: u64,
    /// How many places are taken: valid leases and those in their lock-delay.
    pub occupied: u64,
    /// A semaphore's limit in force while any permit takes a place.
    pub limit: Option<u32>,
    /// How long until the first taken place frees (0 when none is taken).
    pub first_free_in_ms: u64,
    /// Requests waiting in the name's queue in the store: fair waiters,
    /// every waiting shared or permit request, and waiting exclusive ones
    /// once a queue exists. The service adds the waiters in its own line
    /// (a broker's other waiters wait there, out of the store's sight).
    pub waiting: u64,
}

impl LockStatus {
    /// The state of a name nothing holds, with the last fence known.
    pub fn free(fence: Option<Fence>) -> Self {
        Self {
            held: false,
            owner: None,
            fence,
            expires_in_ms: 0,
            available_in_ms: 0,
            mode: None,
            holders: Vec::new(),
            holder_count: 0,
            occupied: 0,
            limit: None,
            first_free_in_ms: 0,
            waiting: 0,
        }
    }
}
