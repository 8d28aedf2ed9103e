//! What the store's values look like on the wire: leases, permits, holders
//! and states, for every route that shows them. Never a token, except in the
//! acquirer's own lease or permit.

use lockbroker_api::{
    FenceCheckResponse, HolderResponse, LeaseResponse, PermitResponse, RenewalResponse,
    SemaphoreStatusResponse, StatusResponse,
};
use lockbroker_core::lease::Renewal;
use lockbroker_core::{Fence, FenceCheck, Holder, Lease, LockName, LockStatus};

/// A granted lock lease as its acquirer sees it: the only lock answer with a
/// token.
pub(super) fn lease_response(lease: &Lease) -> LeaseResponse {
    LeaseResponse {
        name: lease.name.to_string(),
        token: lease.token.expose().to_owned(),
        fence: lease.fence.get(),
        ttl_ms: lease.ttl_ms,
        expires_at_ms: lease.expires_at_ms,
        validity_ms: lease.validity_ms,
        owner: lease.owner.clone(),
        mode: lease.token.kind().as_str().to_owned(),
    }
}

/// A granted permit as its acquirer sees it, under the semaphore's `limit`.
pub(super) fn permit_response(lease: &Lease, limit: u32) -> PermitResponse {
    PermitResponse {
        name: lease.name.to_string(),
        token: lease.token.expose().to_owned(),
        fence: lease.fence.get(),
        ttl_ms: lease.ttl_ms,
        expires_at_ms: lease.expires_at_ms,
        validity_ms: lease.validity_ms,
        owner: lease.owner.clone(),
        limit,
    }
}

/// An extended lease or permit.
pub(super) fn renewal_response(name: &LockName, renewal: Renewal) -> RenewalResponse {
    RenewalResponse {
        name: name.to_string(),
        fence: renewal.fence.get(),
        ttl_ms: renewal.ttl_ms,
        expires_at_ms: renewal.expires_at_ms,
        validity_ms: renewal.validity_ms,
        owner: renewal.owner,
    }
}

/// One lease as others see it.
pub(super) fn holder_response(holder: &Holder) -> HolderResponse {
    HolderResponse {
        owner: holder.owner.clone(),
        fence: holder.fence.get(),
        mode: holder.mode.as_str().to_owned(),
        expires_in_ms: holder.expires_in_ms,
        available_in_ms: holder.available_in_ms,
    }
}

/// The state of the lock `name` as read from the store.
pub(super) fn status_response(name: &LockName, status: LockStatus) -> StatusResponse {
    StatusResponse {
        name: name.to_string(),
        held: status.held,
        owner: status.owner,
        fence: status.fence.map(Fence::get),
        expires_in_ms: status.expires_in_ms,
        available_in_ms: status.available_in_ms,
        mode: status.mode.map(|mode| mode.as_str().to_owned()),
        holders: status.holders.iter().map(holder_response).collect(),
        holder_count: status.holder_count,
        waiting: status.waiting,
    }
}

/// The state of the semaphore `name` as read from the store.
pub(super) fn semaphore_status_response(
    name: &LockName,
    status: LockStatus,
) -> SemaphoreStatusResponse {
    let full = status
        .limit
        .is_some_and(|limit| status.occupied >= u64::from(limit));
    SemaphoreStatusResponse {
        name: name.to_string(),
        limit: status.limit,
        held: status.holder_count,
        available: status
            .limit
            .map(|limit| u64::from(limit).saturating_sub(status.occupied)),
        fence: status.fence.map(Fence::get),
        holders: status.holders.iter().map(holder_response).collect(),
        available_in_ms: if full { status.first_free_in_ms } else { 0 },
        waiting: status.waiting,
    }
}

/// A fence check of the lock or semaphore `name`. Never a token.
pub(super) fn fence_check_response(name: &LockName, check: FenceCheck) -> FenceCheckResponse {
    FenceCheckResponse {
        name: name.to_string(),
        fence: check.fence.get(),
        current: check.current,
        held: check.held,
        expires_in_ms: check.expires_in_ms,
    }
}
