//! What the broker answers with `200`.
//!
//! Every field is always present; the ones that may be unknown are `null`
//! (`owner` when the holder gave no label, a lock's `fence` when none is
//! remembered), never absent.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A granted lease (`Lease` in the spec): the only answer that carries a token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseResponse {
    /// The lock's name.
    pub name: String,
    /// The secret that extends or releases this lease. Keep it private.
    pub token: String,
    /// Strictly greater than every fence issued before for this lock.
    pub fence: u64,
    /// How long the lease is valid from now, in milliseconds.
    pub ttl_ms: u64,
    /// When the lease expires, in Unix milliseconds of the Redis clock.
    pub expires_at_ms: u64,
    /// How long the lease is sure to stay valid from when the answer left
    /// the broker, in milliseconds: budget work by this.
    pub validity_ms: u64,
    /// The holder's label.
    pub owner: Option<String>,
    /// `exclusive` or `shared`.
    pub mode: String,
}

/// A granted semaphore permit (`Permit` in the spec): a lease among at most
/// `limit` valid at once. The only semaphore answer that carries a token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitResponse {
    /// The semaphore's name.
    pub name: String,
    /// The secret that extends or releases this permit. Keep it private.
    pub token: String,
    /// Strictly greater than every fence issued before for this semaphore.
    pub fence: u64,
    /// How long the permit is valid from now, in milliseconds.
    pub ttl_ms: u64,
    /// When the permit expires, in Unix milliseconds of the Redis clock.
    pub expires_at_ms: u64,
    /// How long the permit is sure to stay valid from when the answer left
    /// the broker, in milliseconds.
    pub validity_ms: u64,
    /// The holder's label.
    pub owner: Option<String>,
    /// The semaphore's limit in force.
    pub limit: u32,
}

/// One lease of a lock or semaphore as others see it (`LeaseHolder` in the
/// spec). Never a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderResponse {
    /// The holder's label.
    pub owner: Option<String>,
    /// The lease's fence.
    pub fence: u64,
    /// `exclusive`, `shared` or `permit`.
    pub mode: String,
    /// How long the lease stays valid; 0 once only its lock-delay remains.
    pub expires_in_ms: u64,
    /// How long until its place frees, lock-delay included.
    pub available_in_ms: u64,
}

/// A semaphore's state at one instant (`SemaphoreStatus` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreStatusResponse {
    /// The semaphore's name.
    pub name: String,
    /// The limit in force; `null` while no permit takes a place.
    pub limit: Option<u32>,
    /// How many permits are valid now.
    pub held: u64,
    /// How many more permits the limit allows now; `null` with no limit in force.
    pub available: Option<u64>,
    /// The last fence issued; `null` when none is remembered.
    pub fence: Option<u64>,
    /// The permits taking a place, the first to free first (at most 100).
    pub holders: Vec<HolderResponse>,
    /// How long until a place frees; 0 when one is free now.
    pub available_in_ms: u64,
    /// Permit requests waiting in the semaphore's queue in Redis.
    pub waiting: u64,
}

/// One page of the operators' semaphore listing (`SemaphoreList` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreListResponse {
    /// Semaphores with permits taking places, on this page.
    pub semaphores: Vec<SemaphoreStatusResponse>,
    /// Pass as `cursor` for the next page; `null` once the listing is complete.
    pub next_cursor: Option<String>,
}

/// An extended lease (`Renewal` in the spec): the same fence, a new expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewalResponse {
    /// The lock's name.
    pub name: String,
    /// The lease's fence, unchanged by the extend.
    pub fence: u64,
    /// The new remaining validity, in milliseconds.
    pub ttl_ms: u64,
    /// The new expiry, in Unix milliseconds of the Redis clock.
    pub expires_at_ms: u64,
    /// How long the lease is sure to stay valid from when the answer left
    /// the broker, in milliseconds.
    pub validity_ms: u64,
    /// The holder's label.
    pub owner: Option<String>,
}

/// A released lease (`Released` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseResponse {
    /// The lock's name.
    pub name: String,
    /// Always `true`: a release that fails is an error instead.
    pub released: bool,
    /// The released lease's fence.
    pub fence: u64,
    /// Present when the broker waits for Redis replicas to acknowledge what
    /// changes a lease (`redis.min_replicas_acked` above 0): whether enough
    /// of them acknowledged this release. One that was not can be undone by
    /// a failover, leaving the lock held until the lease's TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<bool>,
}

/// A lock's state at one instant (`LockStatus` in the spec). Never a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusResponse {
    /// The lock's name.
    pub name: String,
    /// Whether a valid lease holds the lock now.
    pub held: bool,
    /// The holder's label, while held.
    pub owner: Option<String>,
    /// The last fence issued for the lock, held or not; `null` when none is
    /// remembered.
    pub fence: Option<u64>,
    /// How long the current lease stays valid; 0 when not held.
    pub expires_in_ms: u64,
    /// How long until the lock can be acquired at the earliest (lease plus
    /// lock-delay); 0 when it is free now.
    pub available_in_ms: u64,
    /// `exclusive` or `shared` while held; `null` when not.
    pub mode: Option<String>,
    /// The valid leases and those in their lock-delay (at most 100).
    pub holders: Vec<HolderResponse>,
    /// How many leases are valid now.
    pub holder_count: u64,
    /// Requests waiting for the lock: those in its queue in Redis (fair
    /// waiters, and waiting requests once shared leases made a queue) and
    /// those in the answering broker's own line.
    pub waiting: u64,
}

/// A fence check of a lock or a semaphore (`FenceCheck` in the spec):
/// whether a valid lease carries exactly that fence now. Never a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceCheckResponse {
    /// The lock's or semaphore's name.
    pub name: String,
    /// The fence asked about.
    pub fence: u64,
    /// Whether a valid lease (exclusive, shared or permit) carries exactly
    /// that fence now; false once it expired (its lock-delay included), was
    /// released, force-released or replaced.
    pub current: bool,
    /// When current, true; otherwise whether another lease holds the name.
    pub held: bool,
    /// When current, how long the lease with that fence stays valid;
    /// otherwise how long the name's current lease does (0 when free).
    pub expires_in_ms: u64,
}

/// One page of the operators' listing (`LockList` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResponse {
    /// Held locks (or locks in their lock-delay) on this page.
    pub locks: Vec<StatusResponse>,
    /// Pass as `cursor` for the next page; `null` once the listing is complete.
    pub next_cursor: Option<String>,
}

/// The answer to a force release (`ForceReleased` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceReleaseResponse {
    /// The lock's name.
    pub name: String,
    /// Whether a lease (or lock-delay) was in place and is gone now.
    pub released: bool,
    /// The fence of the lease that was ended.
    pub fence: Option<u64>,
    /// The label of the exclusive holder whose lease was ended.
    pub owner: Option<String>,
    /// How many leases were ended.
    pub leases_ended: u64,
}

/// The answer of `/healthz` and `/readyz` (`Health` in the spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthResponse {
    /// `ok` from liveness, `ready` from readiness.
    pub status: HealthStatus,
}

/// What a probe reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// The process is alive and serving HTTP.
    Ok,
    /// Redis answers and the broker takes lock requests.
    Ready,
}

impl fmt::Debug for LeaseResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseResponse")
            .field("name", &self.name)
            .field("token", &crate::request::redacted(Some(&self.token)))
            .field("fence", &self.fence)
            .field("ttl_ms", &self.ttl_ms)
            .field("validity_ms", &self.validity_ms)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("owner", &self.owner)
            .field("mode", &self.mode)
            .finish()
    }
}

impl fmt::Debug for PermitResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitResponse")
            .field("name", &self.name)
            .field("token", &crate::request::redacted(Some(&self.token)))
            .field("fence", &self.fence)
            .field("ttl_ms", &self.ttl_ms)
            .field("validity_ms", &self.validity_ms)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("owner", &self.owner)
            .field("limit", &self.limit)
            .finish()
    }
}

/// The answer of `POST /v1/locks/acquire-all` (`AcquireAllResponse` in the
/// spec): one lease per lock, in the order asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireAllResponse {
    /// The leases, each with its own token and fence.
    pub leases: Vec<LeaseResponse>,
}

/// The answer of `POST /v1/locks/release-all` (`ReleaseAllResponse` in the
/// spec): what became of each lease, in the order asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseAllResponse {
    /// One result per lease.
    pub results: Vec<ReleaseAllResult>,
}

/// What became of one lease of a release-all (`ReleaseAllResult` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseAllResult {
    /// The lock's name.
    pub name: String,
    /// Whether the lease was released (or already had been, by this holder).
    pub released: bool,
    /// The released lease's fence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// Why it was not released: the error a single release would answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::ErrorDetail>,
}
