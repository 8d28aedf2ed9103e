//! What callers send: the bodies of the lock routes and the listing's query.
//!
//! Every field is optional on the wire. The broker answers a missing required
//! field (`token`) with `invalid_request` naming it, which serde's own
//! "missing field" error would not do, so the check lives in the broker and
//! the types here stay `Option`. Absent and `null` mean the same. Clients
//! leave absent fields out of what they send.
//!
//! No field has `#[serde(default)]`: an `Option` needs none to be absent from
//! an object, and with it a short JSON array would decode as the first fields.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A secret a request carries (a session's token): sent as a plain JSON
/// string, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The kind of lease a lock acquire asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// Nothing else holds the lock meanwhile (the default).
    #[default]
    Exclusive,
    /// Coexists with other shared leases, never with an exclusive one.
    Shared,
}

/// Body of `POST /v1/locks/{name}/acquire` (`AcquireRequest` in the spec).
/// An empty body reads as `{}`: every field takes its configured default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    /// How long the lease is valid, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// How long to wait for a busy lock, in milliseconds; 0 answers at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// A label of who holds the lease, shown to other callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// An idempotency key: a retry with the same one gets the same lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// How long the lock stays unavailable if this lease expires unreleased.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// With `wait_ms` > 0, wait in the lock's queue shared by every broker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair: Option<bool>,
    /// The token of a session to hold the lease under, instead of a TTL
    /// and lock-delay of its own: the lease stays valid while the session
    /// does. A secret: its `Debug` never shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<Secret>,
    /// `exclusive` (when absent) or `shared`. Last of the fields, so that a
    /// short JSON array still fails as a whole body (see above), not on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
}

/// Body of `POST /v1/semaphores/{name}/acquire` (`SemaphoreAcquireRequest`
/// in the spec): one permit, among at most `limit` valid at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SemaphoreAcquireBody {
    /// How many permits may be valid at once; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// How long the permit is valid, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// How long to wait for a free permit, in milliseconds; 0 answers at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// A label of who holds the permit, shown to other callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// An idempotency key: a retry with the same one gets the same permit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// How long the permit's place stays taken if it expires unreleased.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// Accepted for symmetry with locks: waiting permit requests always
    /// wait in the semaphore's queue shared by every broker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair: Option<bool>,
    /// The token of a session to hold the lease under, instead of a TTL
    /// and lock-delay of its own: the lease stays valid while the session
    /// does. A secret: its `Debug` never shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<Secret>,
}

/// Body of `POST /v1/locks/{name}/extend` (`ExtendRequest` in the spec).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    /// The lease's token; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The new remaining validity from now, in milliseconds (replace, not add).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

impl ExtendBody {
    /// Extends the lease of `token` to `ttl_ms` from now, or to the default TTL.
    pub fn new(token: impl Into<String>, ttl_ms: Option<u64>) -> Self {
        Self {
            token: Some(token.into()),
            ttl_ms,
        }
    }
}

/// Body of `POST /v1/locks/{name}/release` (`ReleaseRequest` in the spec).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// The lease's token; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl ReleaseBody {
    /// Releases the lease of `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: Some(token.into()),
        }
    }
}

/// Query of `GET /v1/locks`: one page of the held locks under `prefix`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only names starting with this; absent or empty for all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// How many keys the page visits, 1 to 1000 (100 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The `next_cursor` of the previous page; absent or `0` to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

// Tokens are secrets: the Debug output of a body that carries one says only
// whether it is there.
impl fmt::Debug for ExtendBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtendBody")
            .field("token", &redacted(self.token.as_deref()))
            .field("ttl_ms", &self.ttl_ms)
            .finish()
    }
}

impl fmt::Debug for ReleaseBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReleaseBody")
            .field("token", &redacted(self.token.as_deref()))
            .finish()
    }
}

/// What Debug shows of a token.
pub(crate) fn redacted(token: Option<&str>) -> Option<&'static str> {
    token.map(|_| "<redacted>")
}

/// One lock of `POST /v1/locks/acquire-all` (`LockAsk` in the spec).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockAskBody {
    /// The lock's name; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `exclusive` (when absent) or `shared`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<LockMode>,
}

/// Body of `POST /v1/locks/acquire-all` (`AcquireAllRequest` in the spec):
/// a lease on every lock named, or none. The other fields apply to every
/// lease as in a single acquire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireAllBody {
    /// The locks, 1 to 32 distinct names; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locks: Option<Vec<LockAskBody>>,
    /// How long each lease is valid, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// How long to wait until every lock can be taken, in milliseconds; 0
    /// answers at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// A label of who holds the leases, shown to other callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// An idempotency key: a retry with the same one gets back the leases
    /// still held from the first try.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// How long each lock stays unavailable if its lease expires unreleased.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// The token of a session to hold the lease under, instead of a TTL
    /// and lock-delay of its own: the lease stays valid while the session
    /// does. A secret: its `Debug` never shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<Secret>,
}

/// One lease of `POST /v1/locks/release-all` (`LeaseRef` in the spec).
/// Its `Debug` never shows the token.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRefBody {
    /// The lock's name; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The lease's token; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Body of `POST /v1/locks/release-all` (`ReleaseAllRequest` in the spec).
/// Its `Debug` never shows a token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseAllBody {
    /// The leases to release, 1 to 32; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases: Option<Vec<LeaseRefBody>>,
}

impl fmt::Debug for LeaseRefBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseRefBody")
            .field("name", &self.name)
            .field("token", &redacted(self.token.as_deref()))
            .finish()
    }
}
