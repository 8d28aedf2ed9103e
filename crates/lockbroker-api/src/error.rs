//! The one shape of every error: `{"error": {"code", "message", ...}}`.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

/// Every error answer's body (`Error` in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The inside of an error body: a stable code, a message for people, and the
/// details some codes carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A stable, machine-readable code.
    pub code: ErrorCode,
    /// What went wrong, for people. Never contains a token.
    pub message: String,
    /// For `invalid_request`, the request field that broke a rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For `lock_busy`, the holder's label: present (and `null` when the
    /// holder gave none) exactly on `lock_busy`, absent otherwise.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub owner: Option<Option<String>>,
    /// For `lock_busy`, the holder's fence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// For `lock_busy`, how long the holder's lease stays valid (0 once only
    /// its lock-delay remains); for `max_hold_exceeded`, how long the caller's
    /// lease stays valid without the extension.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
    /// For `lock_busy`, how long until the lock can be acquired at the earliest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_in_ms: Option<u64>,
    /// For `lock_busy`, every lease in the way, the first to free first (at
    /// most 20).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holders: Option<Vec<crate::response::HolderResponse>>,
    /// For `limit_conflict`, and `lock_busy` on a semaphore: the limit in force.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// For `lease_lost` of a lease an operator force-released: the API key
    /// id that did (`anonymous` on a broker without API keys, as its audit
    /// line names the caller); absent for any other lost lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_released_by: Option<String>,
    /// For a step over several locks (`acquire-all`, `release-all`): the
    /// lock the error is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
}

impl ErrorDetail {
    /// An error with `code` and `message` and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
            owner: None,
            fence: None,
            expires_in_ms: None,
            available_in_ms: None,
            holders: None,
            limit: None,
            force_released_by: None,
            lock: None,
        }
    }
}

/// A field that is there, even as `null`, reads as `Some`; an absent one
/// takes the `default` of `None`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// Every error code the broker answers with, each with one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// `400`: a path parameter, query parameter or body field broke a rule,
    /// or the request is not the JSON (or HTTP) this route takes.
    InvalidRequest,
    /// `423`: another lease (or its lock-delay) holds the lock.
    LockBusy,
    /// `409`: the token holds no valid lease on this lock.
    LeaseLost,
    /// `409`: the extend would keep the lease past its maximum hold.
    MaxHoldExceeded,
    /// `409`: the semaphore's permits take places under another limit.
    LimitConflict,
    /// `409`: no lease holds the lock, but other acquires in flight took the
    /// nodes' votes (quorum mode); try again after `Retry-After`.
    Contended,
    /// `409`: the session named is not open: it expired, was closed, or the
    /// token is not its. Every lease it held has ended.
    SessionLost,
    /// `409`: the session holds as many leases as one session may.
    SessionFull,
    /// `429`: this broker already has as many waiting acquires as it allows.
    TooManyWaiters,
    /// `429`: the API key sent more requests than its rate limit allows.
    RateLimited,
    /// `429`: the API key holds as many sessions open as one key may.
    TooManySessions,
    /// `429`: this broker already has as many event streams open as it allows.
    TooManyStreams,
    /// `401`: no API key, or one the broker does not accept.
    Unauthorized,
    /// `403`: the API key lacks the route's scope or the lock's prefix, or the
    /// request comes from a web page of another origin or names a host this
    /// broker does not answer to.
    Forbidden,
    /// `408`: the request body did not arrive within the body read timeout.
    RequestTimeout,
    /// `413`: the body is larger than the configured limit.
    PayloadTooLarge,
    /// `415`: the request has a body not declared as `application/json`.
    UnsupportedMediaType,
    /// `404`: no route matches the path.
    NotFound,
    /// `405`: the path exists but not with this method.
    MethodNotAllowed,
    /// `503`: Redis cannot be reached, refuses writes or answered too slowly,
    /// or the request outlived the request timeout.
    BackendUnavailable,
    /// `503`: this broker is draining for shutdown.
    ShuttingDown,
    /// `503`: this broker serves as many requests as it allows.
    Overloaded,
    /// `500`: an unexpected failure, never caused by request input.
    Internal,
    /// `414`: the request path is longer than the broker accepts.
    UriTooLong,
    /// `431`: the request headers are larger or more numerous than the broker
    /// accepts.
    HeadersTooLarge,
}

impl ErrorCode {
    /// Every code, in the order of the spec's list.
    pub const ALL: [ErrorCode; 25] = [
        Self::InvalidRequest,
        Self::LockBusy,
        Self::LeaseLost,
        Self::MaxHoldExceeded,
        Self::LimitConflict,
        Self::Contended,
        Self::SessionLost,
        Self::SessionFull,
        Self::TooManyWaiters,
        Self::RateLimited,
        Self::TooManySessions,
        Self::TooManyStreams,
        Self::Unauthorized,
        Self::Forbidden,
        Self::RequestTimeout,
        Self::PayloadTooLarge,
        Self::UnsupportedMediaType,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::BackendUnavailable,
        Self::ShuttingDown,
        Self::Overloaded,
        Self::Internal,
        Self::UriTooLong,
        Self::HeadersTooLarge,
    ];

    /// The code as it appears on the wire (and in logs and metrics).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::LockBusy => "lock_busy",
            Self::LeaseLost => "lease_lost",
            Self::MaxHoldExceeded => "max_hold_exceeded",
            Self::LimitConflict => "limit_conflict",
            Self::Contended => "contended",
            Self::SessionLost => "session_lost",
            Self::SessionFull => "session_full",
            Self::TooManyWaiters => "too_many_waiters",
            Self::RateLimited => "rate_limited",
            Self::TooManySessions => "too_many_sessions",
            Self::TooManyStreams => "too_many_streams",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::RequestTimeout => "request_timeout",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::BackendUnavailable => "backend_unavailable",
            Self::ShuttingDown => "shutting_down",
            Self::Overloaded => "overloaded",
            Self::Internal => "internal",
            Self::UriTooLong => "uri_too_long",
            Self::HeadersTooLarge => "headers_too_large",
        }
    }

    /// The HTTP status every answer with this code has.
    pub const fn status(self) -> u16 {
        match self {
            Self::InvalidRequest => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::RequestTimeout => 408,
            Self::LeaseLost
            | Self::MaxHoldExceeded
            | Self::LimitConflict
            | Self::Contended
            | Self::SessionLost
            | Self::SessionFull => 409,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::UriTooLong => 414,
            Self::LockBusy => 423,
            Self::TooManyWaiters
            | Self::RateLimited
            | Self::TooManySessions
            | Self::TooManyStreams => 429,
            Self::HeadersTooLarge => 431,
            Self::Internal => 500,
            Self::BackendUnavailable | Self::ShuttingDown | Self::Overloaded => 503,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
