//! The one place where errors become HTTP responses.
//!
//! [`ApiError::answer`] is the table: for every error, its stable
//! [`ErrorCode`] (which fixes the status), its message, the field or holder it
//! names, its `Retry-After`, and the cause to log. Every body is an
//! [`ErrorResponse`]; 5xx bodies stay generic and their cause is logged once,
//! here, under the same code. The code also rides on the response (as an
//! extension) for the request log line.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockbroker_api::{ErrorCode, ErrorDetail, ErrorResponse};
use lockbroker_core::{
    Blockers, LeaseKind, LockError, LockName, Space, StoreError, Unacknowledged, ValidationError,
};

use super::views::holder_response;
use crate::auth::ANONYMOUS_ID;

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

impl Step {
    /// The step as messages name it.
    fn noun(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Extend => "extend",
            Self::Release => "release",
            Self::ForceRelease => "force release",
            Self::Read => "read",
        }
    }
}

/// Every way an HTTP request can fail.
#[derive(Debug)]
pub enum ApiError {
    /// The lock service refused or failed the step, for the named lock.
    Lock(Step, LockName, LockError),
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

/// What one error answers: a row of the table in [`ApiError::answer`].
struct Answer<'a> {
    /// The body; its code fixes the status.
    detail: ErrorDetail,
    /// Seconds the caller should wait before trying again.
    retry_after_secs: Option<u64>,
    /// Why a 5xx happened, for the log only.
    cause: Option<Cause<'a>>,
}

/// The cause of a 5xx answer, logged once and never shown to the caller.
struct Cause<'a> {
    /// What failed, as the log line's message.
    event: &'static str,
    lock: Option<&'a LockName>,
    error: Option<&'a StoreError>,
    limit: Option<Duration>,
    /// A failure that is no store error, as text.
    detail: Option<&'a str>,
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
            Self::Lock(_, name, LockError::Busy(blockers)) => {
                Answer::new(Code::LockBusy, busy_message(name, blockers)).blockers(blockers)
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
                let mut answer = Answer::new(
                    Code::LeaseLost,
                    format!(
                        "the lease on {name:?} was force-released {who}; another holder may \
                         already have run, so treat the work done under this lease as possibly \
                         duplicated"
                    ),
                );
                answer.detail.force_released_by = Some(key.unwrap_or(ANONYMOUS_ID).to_owned());
                answer
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
            Self::Lock(_, _, LockError::TooManyWaiters) => Answer::new(
                Code::TooManyWaiters,
                "too many requests are already waiting; retry later",
            ),
            Self::Lock(_, _, LockError::ShuttingDown) | Self::ShuttingDown => Answer::new(
                Code::ShuttingDown,
                "this broker is shutting down; retry on another instance",
            ),
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

impl StreamLimit {
    /// What the refused caller is told.
    fn message(self) -> &'static str {
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

impl<'a> Answer<'a> {
    /// An answer with `code` and `message`. A caller told to come back later
    /// (`429`, `503`) is told to wait a second, unless the row says how long.
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            detail: ErrorDetail::new(code, message),
            retry_after_secs: matches!(code.status(), 429 | 503).then_some(1),
            cause: None,
        }
    }

    /// Names the request field that broke a rule.
    fn field(mut self, field: &str) -> Self {
        self.detail.field = Some(field.to_owned());
        self
    }

    /// Describes the leases in the way; come back when the first that
    /// matters can free.
    fn blockers(mut self, blockers: &Blockers) -> Self {
        let holder = &blockers.holder;
        self.detail.owner = Some(holder.owner.clone());
        self.detail.fence = Some(holder.fence.get());
        self.detail.expires_in_ms = Some(holder.expires_in_ms);
        self.detail.available_in_ms = Some(holder.available_in_ms);
        self.detail.holders = Some(blockers.holders.iter().map(holder_response).collect());
        self.detail.limit = blockers.limit;
        self.retry_after(u128::from(holder.available_in_ms))
    }

    /// The semaphore's limit in force.
    fn limit(mut self, limit: u32) -> Self {
        self.detail.limit = Some(limit);
        self
    }

    /// How long the caller's own lease stays valid as it is.
    fn expires_in(mut self, expires_in_ms: u64) -> Self {
        self.detail.expires_in_ms = Some(expires_in_ms);
        self
    }

    /// `Retry-After` of `ms` rounded up to whole seconds, at least one.
    fn retry_after(mut self, ms: u128) -> Self {
        self.retry_after_secs = Some(u64::try_from(ms.div_ceil(1000)).unwrap_or(1).max(1));
        self
    }

    /// Logs the answer as `event`, with the lock and the store's error.
    fn logged(
        mut self,
        event: &'static str,
        lock: Option<&'a LockName>,
        error: Option<&'a StoreError>,
    ) -> Self {
        self.cause = Some(Cause {
            event,
            lock,
            error,
            limit: None,
            detail: None,
        });
        self
    }

    /// Logs the answer as `event`, caused by `detail`.
    fn logged_cause(mut self, event: &'static str, detail: &'a str) -> Self {
        self = self.logged(event, None, None);
        if let Some(cause) = &mut self.cause {
            cause.detail = Some(detail);
        }
        self
    }

    /// Adds the limit that was exceeded to the logged cause.
    fn with_limit(mut self, limit: Duration) -> Self {
        if let Some(cause) = &mut self.cause {
            cause.limit = Some(limit);
        }
        self
    }

    /// Writes the cause's one log line, if the answer has one.
    fn log(&self) {
        let Some(cause) = &self.cause else { return };
        let limit_ms = cause
            .limit
            .map(|limit| u64::try_from(limit.as_millis()).unwrap_or(u64::MAX));
        tracing::warn!(
            code = self.detail.code.as_str(),
            lock = cause.lock.map(tracing::field::display),
            error = cause.error.map(tracing::field::display),
            detail = cause.detail,
            limit_ms,
            "{}",
            cause.event
        );
    }
}

impl IntoResponse for Answer<'_> {
    fn into_response(self) -> Response {
        let code = self.detail.code;
        let status =
            StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorResponse { error: self.detail };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        if code == ErrorCode::Unauthorized {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"lockbroker\""),
            );
        }
        if let Some(secs) = self.retry_after_secs {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response.extensions_mut().insert(code);
        response
    }
}

/// What a failed lock store `step` answers: `internal` when the store could
/// not make sense of the backend's reply, else `backend_unavailable`.
fn store_failed(step: Step, error: &StoreError) -> Answer<'_> {
    let code = match error {
        StoreError::Protocol(_) => ErrorCode::Internal,
        StoreError::Overloaded(_) => ErrorCode::Overloaded,
        _ => ErrorCode::BackendUnavailable,
    };
    Answer::new(code, store_message(step, error))
}

/// What a `lock_busy` answer says is in the way: live leases, the
/// lock-delay of one that expired unreleased, or an earlier waiter.
fn busy_message(name: &LockName, blockers: &Blockers) -> String {
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
fn store_message(step: Step, cause: &StoreError) -> String {
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

impl From<ValidationError> for ApiError {
    fn from(error: ValidationError) -> Self {
        Self::Invalid(error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer = self.answer();
        answer.log();
        answer.into_response()
    }
}
