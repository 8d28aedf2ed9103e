//! The one place where errors become HTTP responses.
//!
//! [`ApiError::answer`] is the table: for every error, its stable
//! [`ErrorCode`] (which fixes the status), its message, the field or holder it
//! names, its `Retry-After`, and the cause to log. Every body is an
//! [`ErrorResponse`](lockbroker_api::ErrorResponse); 5xx bodies stay generic
//! and their cause is logged once, here, under the same code. The code also
//! rides on the response (as an extension) for the request log line.
//! [`answer`] builds a row and turns it into the response; [`messages`]
//! words the longer messages (per [`Step`], busy, stream limits).

mod answer;
mod messages;

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use lockbroker_api::ErrorCode;
use lockbroker_core::{LockError, LockName, StoreError, ValidationError};

use crate::auth::ANONYMOUS_ID;
use answer::{store_failed, Answer};
use messages::{busy_message, contended_message, store_message};

/// What a request asked of the lock store: it decides what a failed step
/// can have changed, and so what the caller is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// An acquire: it may take a lease.
    Acquire,
    /// An extend of the caller's lease.
    Extend,
    /// A release of the caller's lease.
    Release,
    /// An operator's force release.
    ForceRelease,
    /// A status, listing or readiness check: it changes nothing.
    Read,
}

/// Every way an HTTP request can fail.
#[derive(Debug)]
pub enum ApiError {
    /// The lock service refused or failed the step, for the named lock.
    Lock(Step, LockName, LockError),
    /// A step over several locks that took nothing because of one of them:
    /// that lock's own error, naming the lock and saying nothing was taken.
    AllOrNothing(LockName, Box<ApiError>),
    /// A field failed a rule before any lock was touched.
    Invalid(ValidationError),
    /// The body is not the JSON this route takes.
    BadBody {
        /// The offending field, or `body` when the JSON itself is broken.
        field: String,
        /// What is wrong, phrased for the caller.
        message: String,
    },
    /// The body is over the configured limit.
    PayloadTooLarge,
    /// The body is not declared as `application/json`.
    UnsupportedMediaType(String),
    /// No route matches the path.
    NotFound,
    /// The path exists but not with this method.
    MethodNotAllowed,
    /// The request outlived the request timeout.
    Timeout {
        /// The configured limit.
        limit: Duration,
    },
    /// The service is draining for shutdown and will not take this request.
    ShuttingDown,
    /// Redis cannot be reached (readiness probe).
    Unavailable(StoreError),
    /// The lock store failed a step that concerns no single lock (listing).
    Store(StoreError),
    /// The route needs an API key and the request presented none.
    MissingKey,
    /// The request presented a key the broker does not accept.
    KeyNotAccepted,
    /// The request carried more than one `Authorization` header.
    RepeatedAuthorization,
    /// The API key lacks the scope or the lock-name prefix this request needs.
    Forbidden(String),
    /// The API key sent more requests than its rate limit allows.
    RateLimited {
        /// When the next request will be allowed.
        retry_after: Duration,
    },
    /// The broker is already serving as many requests as it allows.
    Overloaded,
    /// An event stream may not open now: the limit it met.
    TooManyStreams(StreamLimit),
    /// The broker failed on its own, never because of the request: `500`.
    Internal {
        /// What failed, for the log line.
        event: &'static str,
        /// Why, for the log line only.
        cause: String,
    },
    /// The request body arrived too slowly.
    BodyTimeout {
        /// The configured limit.
        limit: Duration,
    },
}

/// Which limit refused an event stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamLimit {
    /// `http.max_event_streams`: the broker has as many open as it allows.
    Broker,
    /// The caller's API key holds its share of the streams.
    KeyShare,
    /// The streams left are kept for keys with the `admin` scope.
    AdminReserve,
    /// The broker reads as many opening states as it allows at once.
    StateReads,
}

impl ApiError {
    /// The table: what each kind of error answers.
    fn answer(&self) -> Answer<'_> {
        use ErrorCode as Code;
        match self {
            Self::Invalid(e) | Self::Lock(_, _, LockError::Invalid(e)) => {
                Answer::new(Code::InvalidRequest, e.to_string()).field(e.field)
            }
            Self::BadBody { field, message } => {
                Answer::new(Code::InvalidRequest, format!("{field}: {message}")).field(field)
            }
            Self::RepeatedAuthorization => Answer::new(
                Code::InvalidRequest,
                "Authorization: send one Authorization header, not several",
            ),
            Self::AllOrNothing(name, inner) => inner.answer().of_lock(name),
            Self::Lock(_, name, LockError::Busy(blockers)) => {
                Answer::new(Code::LockBusy, busy_message(name, blockers)).blockers(blockers)
            }
            Self::Lock(_, name, LockError::Contended) => {
                Answer::new(Code::Contended, contended_message(name)).retry_after(1)
            }
            Self::Lock(_, name, LockError::LimitConflict { limit }) => Answer::new(
                Code::LimitConflict,
                format!(
                    "semaphore {name:?} has limit {limit} while permits are held; ask with \
                     \"limit\": {limit}"
                ),
            )
            .field("limit")
            .limit(*limit),
            Self::Lock(_, name, LockError::LeaseLost) => Answer::new(
                Code::LeaseLost,
                format!(
                    "the lease on {name:?} expired or was taken by another holder; another \
                     holder may already have run, so treat the work done under this lease as \
                     possibly duplicated"
                ),
            ),
            Self::Lock(_, name, LockError::LeaseForceReleased { by }) => {
                let key = (!by.is_anonymous()).then_some(by.as_str());
                let who = key.map_or("by an operator".to_owned(), |id| {
                    format!("by key id {id:?}")
                });
                Answer::new(
                    Code::LeaseLost,
                    format!(
                        "the lease on {name:?} was force-released {who}; another holder may \
                         already have run, so treat the work done under this lease as possibly \
                         duplicated"
                    ),
                )
                .force_released_by(key.unwrap_or(ANONYMOUS_ID).to_owned())
            }
            Self::Lock(_, name, LockError::LeaseReleased) => Answer::new(
                Code::LeaseLost,
                format!(
                    "the lease on {name:?} was already released by its holder, so no other \
                     holder overlapped the work done under it; acquire the lock again to go on"
                ),
            ),
            Self::Lock(
                _,
                name,
                LockError::MaxHoldExceeded {
                    max_hold_ms,
                    expires_in_ms,
                },
            ) => Answer::new(
                Code::MaxHoldExceeded,
                format!(
                    "the lease on {name:?} cannot be extended past its maximum hold of \
                     {max_hold_ms} ms (locks.max_hold_ms); finish and release, or acquire again"
                ),
            )
            .expires_in(*expires_in_ms),
            Self::Lock(_, _, LockError::SessionLost) => Answer::new(
                Code::SessionLost,
                "the session is not open: it expired, was closed, or the token is not its; \
                 every lease taken under it has ended or ends with it, so treat the work done \
                 under them as possibly duplicated, and open a new session to go on",
            ),
            Self::Lock(_, _, LockError::SessionFull { max }) => Answer::new(
                Code::SessionFull,
                format!(
                    "the session holds {max} leases already, as many as one session may \
                     (locks.max_leases_per_session); release some, or take more under another \
                     session"
                ),
            )
            .field("session"),
            Self::Lock(_, _, LockError::TooManySessions { max }) => Answer::new(
                Code::TooManySessions,
                format!(
                    "this API key holds {max} sessions open through this broker already, as \
                     many as one key may (locks.max_sessions_per_key); close one, or retry \
                     once one expires"
                ),
            )
            .retry_after(1),
            Self::Lock(_, _, LockError::TooManyWaiters) => Answer::new(
                Code::TooManyWaiters,
                "too many requests are already waiting; retry later",
            ),
            Self::Lock(_, _, LockError::ShuttingDown) | Self::ShuttingDown => Answer::new(
                Code::ShuttingDown,
                "this broker is shutting down; retry on another instance",
            ),
            Self::Lock(_, name, error @ LockError::GrantTooLate { .. }) => Answer::new(
                Code::BackendUnavailable,
                format!(
                    "the lock store granted {name:?} but answered so late that too little of \
                     the lease's validity was left ({error}); the grant was given back, so \
                     nothing is held: retry, or ask for a longer ttl_ms"
                ),
            )
            .logged("late grant given back", Some(name), None),
            Self::Lock(step, name, LockError::Store(error)) => {
                store_failed(*step, error).logged("lock step failed", Some(name), Some(error))
            }
            Self::Store(error) => {
                store_failed(Step::Read, error).logged("lock store step failed", None, Some(error))
            }
            // A failed probe is never `internal`: the broker is just not ready.
            Self::Unavailable(error) => Answer::new(
                Code::BackendUnavailable,
                store_message(Step::Read, error),
            )
            .logged("readiness check failed", None, Some(error)),
            Self::Timeout { limit } => Answer::new(
                Code::BackendUnavailable,
                format!(
                    "the request did not complete within {} ms; retry later",
                    limit.as_millis()
                ),
            )
            .logged("request timed out", None, None)
            .with_limit(*limit),
            Self::PayloadTooLarge => Answer::new(
                Code::PayloadTooLarge,
                "the request body is larger than this broker accepts",
            ),
            Self::UnsupportedMediaType(message) => {
                Answer::new(Code::UnsupportedMediaType, message.as_str())
            }
            Self::NotFound => Answer::new(Code::NotFound, "no such route"),
            Self::MethodNotAllowed => Answer::new(
                Code::MethodNotAllowed,
                "this route does not take that method",
            ),
            // Never echo the presented credential.
            Self::MissingKey => Answer::new(
                Code::Unauthorized,
                "this route needs an API key: send `Authorization: Bearer <key>`",
            ),
            Self::KeyNotAccepted => Answer::new(
                Code::Unauthorized,
                "the API key presented was not accepted: check that it is one the broker is \
                 configured with",
            ),
            Self::Forbidden(reason) => Answer::new(Code::Forbidden, reason.as_str()),
            Self::RateLimited { retry_after } => Answer::new(
                Code::RateLimited,
                "this API key sent more requests than its rate limit allows; retry later",
            )
            .retry_after(retry_after.as_millis()),
            Self::TooManyStreams(limit) => Answer::new(Code::TooManyStreams, limit.message()),
            Self::Overloaded => Answer::new(
                Code::Overloaded,
                "this broker is serving as many requests as it allows; retry later",
            ),
            Self::Internal { event, cause } => {
                Answer::new(Code::Internal, "internal error").logged_cause(event, cause)
            }
            Self::BodyTimeout { limit } => Answer::new(
                Code::RequestTimeout,
                format!(
                    "the request body did not arrive within {} ms",
                    limit.as_millis()
                ),
            ),
        }
    }
}

impl From<ValidationError> for ApiError {
    fn from(error: ValidationError) -> Self {
        Self::Invalid(error)
    }
}

impl ApiError {
    /// The error body this error answers, its cause logged: for a result
    /// inside a `200` answer over several locks.
    pub fn into_detail(self) -> lockbroker_api::ErrorDetail {
        let answer = self.answer();
        answer.log();
        answer.into_detail()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer = self.answer();
        answer.log();
        answer.into_response()
    }
}
