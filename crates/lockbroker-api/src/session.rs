//! Sessions: the bodies of `/v1/sessions` and its answers. Only the
//! opening's answer carries the session's token.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::request::redacted;

/// Body of `POST /v1/sessions` (`SessionOpenRequest` in the spec). An empty
/// body reads as `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionOpenBody {
    /// How long the session and its leases stay valid after each keepalive,
    /// in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// A label of who holds the session, shown on the session and on each
    /// lease under it that names no owner of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// How long each lock of the session stays unavailable when the session
    /// expires (not when it closes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
}

/// Body of `POST /v1/sessions/{id}/keepalive` and `/close`
/// (`SessionTokenRequest` in the spec). Its `Debug` never shows the token.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionTokenBody {
    /// The session's token; required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl SessionTokenBody {
    /// A body presenting `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: Some(token.into()),
        }
    }
}

impl fmt::Debug for SessionTokenBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionTokenBody")
            .field("token", &redacted(self.token.as_deref()))
            .finish()
    }
}

/// An opened session (`Session` in the spec): the only answer with its token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionResponse {
    /// The session's id, for its routes.
    pub id: String,
    /// The secret that keeps, closes and takes leases under the session.
    pub token: String,
    /// How long each keepalive keeps the session and its leases, in ms.
    pub ttl_ms: u64,
    /// When the session expires without a keepalive, in Unix milliseconds
    /// of the Redis clock.
    pub expires_at_ms: u64,
    /// How long the session is sure to stay valid from when the answer
    /// left the broker, in milliseconds.
    pub validity_ms: u64,
    /// The lock-delay of each of its leases.
    pub lock_delay_ms: u64,
    /// The holder's label.
    pub owner: Option<String>,
}

impl fmt::Debug for SessionResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionResponse")
            .field("id", &self.id)
            .field("token", &"<redacted>")
            .field("ttl_ms", &self.ttl_ms)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// A lease that left its session (`SessionLeaseRef` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLeaseRef {
    /// The lock's or semaphore's name.
    pub name: String,
    /// `lock` or `semaphore`.
    pub space: String,
    /// Why it ended: `released` (by its holder), `force_released`,
    /// `max_hold_exceeded` (it runs out at its TTL) or `lost`. Absent from
    /// brokers older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With `force_released`: the API key id that did it (`anonymous`
    /// without keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_released_by: Option<String>,
}

/// A kept session (`SessionRenewal` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRenewalResponse {
    /// The session's id.
    pub id: String,
    /// The validity given to the session and each of its leases, in ms.
    pub ttl_ms: u64,
    /// Until when the session and every lease renewed with it are valid,
    /// in Unix milliseconds of the Redis clock: the earliest of their
    /// expiries.
    pub expires_at_ms: u64,
    /// How long the session and every lease renewed with it are sure to
    /// stay valid, in milliseconds.
    pub validity_ms: u64,
    /// How many leases were renewed with it.
    pub leases: u64,
    /// Leases that had ended (released, force-released, lost or past their
    /// max hold) and were taken out of the session.
    pub ended: Vec<SessionLeaseRef>,
}

/// A closed session (`SessionClosed` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClosedResponse {
    /// The session's id.
    pub id: String,
    /// Always `true`.
    pub closed: bool,
    /// How many leases the close released.
    pub leases_released: u64,
}

/// A session as anyone may read it (`SessionStatus` in the spec): never
/// its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStatusResponse {
    /// The session's id.
    pub id: String,
    /// Whether it is open now.
    pub open: bool,
    /// The holder's label.
    pub owner: Option<String>,
    /// How long it stays valid without a keepalive; 0 when not open.
    pub expires_in_ms: u64,
    /// The validity each keepalive gives; `null` once the session's record
    /// is gone.
    pub ttl_ms: Option<u64>,
    /// The lock-delay of its leases; `null` once its record is gone.
    pub lock_delay_ms: Option<u64>,
    /// How many leases it holds.
    pub leases: u64,
}
