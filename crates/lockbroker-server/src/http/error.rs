//! The one place where errors become HTTP responses.
//!
//! Every error body has the shape `{"error": {"code": "...", "message": "..."}}`,
//! with a stable `code` per row of the table in [`ApiError::status_and_code`].
//! 5xx bodies stay generic; their cause is logged once, here.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockbroker_core::{Holder, LockError, LockName, StoreError, ValidationError};
use serde::Serialize;

/// Every way an HTTP request can fail.
#[derive(Debug)]
pub enum ApiError {
    /// The lock service refused or failed, for the named lock.
    Lock(LockName, LockError),
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
    /// The request body arrived too slowly.
    BodyTimeout {
        /// The configured limit.
        limit: Duration,
    },
}

/// The `{"error": {...}}` body.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'static str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    holder: Option<HolderDetail<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_in_ms: Option<u64>,
}

/// What a `lock_busy` answer says about the lease in the way.
#[derive(Serialize)]
struct HolderDetail<'a> {
    owner: Option<&'a str>,
    fence: u64,
    expires_in_ms: u64,
    available_in_ms: u64,
}

impl ApiError {
    /// The status and the stable error code of each kind of error.
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Invalid(_)
            | Self::BadBody { .. }
            | Self::RepeatedAuthorization
            | Self::Lock(_, LockError::Invalid(_)) => (StatusCode::BAD_REQUEST, "invalid_request"),
            Self::Lock(_, LockError::Busy(_)) => (StatusCode::LOCKED, "lock_busy"),
            Self::Lock(_, LockError::LeaseLost | LockError::LeaseReleased) => {
                (StatusCode::CONFLICT, "lease_lost")
            }
            Self::Lock(_, LockError::MaxHoldExceeded { .. }) => {
                (StatusCode::CONFLICT, "max_hold_exceeded")
            }
            Self::Lock(_, LockError::TooManyWaiters) => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_waiters")
            }
            Self::Lock(_, LockError::ShuttingDown) | Self::ShuttingDown => {
                (StatusCode::SERVICE_UNAVAILABLE, "shutting_down")
            }
            Self::Lock(_, LockError::Store(StoreError::Protocol(_))) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
            Self::Lock(_, LockError::Store(_)) | Self::Unavailable(_) | Self::Timeout { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable")
            }
            Self::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::Store(StoreError::Protocol(_)) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            Self::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable"),
            Self::MissingKey | Self::KeyNotAccepted => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::Overloaded => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            Self::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
        }
    }

    fn message(&self) -> String {
        match self {
            Self::Invalid(e) | Self::Lock(_, LockError::Invalid(e)) => e.to_string(),
            Self::BadBody { field, message } => format!("{field}: {message}"),
            Self::Lock(name, LockError::Busy(holder)) => busy_message(name, holder),
            Self::Lock(name, LockError::LeaseLost) => format!(
                "the lease on {name:?} expired or was taken by another holder; another holder may \
                 already have run, so treat the work done under this lease as possibly duplicated"
            ),
            Self::Lock(name, LockError::LeaseReleased) => format!(
                "the lease on {name:?} was already released by its holder; acquire the lock again"
            ),
            Self::Lock(name, LockError::MaxHoldExceeded { max_hold_ms, .. }) => format!(
                "the lease on {name:?} cannot be extended past its maximum hold of {max_hold_ms} ms; \
                 finish and release, or acquire again"
            ),
            Self::Lock(_, LockError::TooManyWaiters) => {
                "too many requests are already waiting; retry later".to_owned()
            }
            Self::Lock(_, LockError::ShuttingDown) | Self::ShuttingDown => {
                "this broker is shutting down; retry on another instance".to_owned()
            }
            Self::Lock(_, LockError::Store(cause)) | Self::Unavailable(cause) | Self::Store(cause) => {
                store_message(cause).to_owned()
            }
            Self::Timeout { limit } => format!(
                "the request did not complete within {} ms; retry later",
                limit.as_millis()
            ),
            Self::PayloadTooLarge => "the request body is larger than this broker accepts".to_owned(),
            Self::NotFound => "no such route".to_owned(),
            Self::MethodNotAllowed => "this route does not take that method".to_owned(),
            // Never echo the presented credential.
            Self::MissingKey => {
                "this route needs an API key: send `Authorization: Bearer <key>`".to_owned()
            }
            Self::KeyNotAccepted => {
                "the API key presented was not accepted: check that it is one the broker is \
                 configured with"
                    .to_owned()
            }
            Self::RepeatedAuthorization => {
                "Authorization: send one Authorization header, not several".to_owned()
            }
            Self::Forbidden(reason) => reason.clone(),
            Self::RateLimited { .. } => {
                "this API key sent more requests than its rate limit allows; retry later"
                    .to_owned()
            }
            Self::Overloaded => {
                "this broker is serving as many requests as it allows; retry later".to_owned()
            }
            Self::BodyTimeout { limit } => format!(
                "the request body did not arrive within {} ms",
                limit.as_millis()
            ),
        }
    }

    fn log(&self, status: StatusCode) {
        if !status.is_server_error() {
            return;
        }
        match self {
            Self::Lock(name, LockError::Store(cause)) => {
                tracing::warn!(lock = %name, error = %cause, "lock step failed");
            }
            Self::Unavailable(cause) => tracing::warn!(error = %cause, "readiness check failed"),
            Self::Store(cause) => tracing::warn!(error = %cause, "lock store step failed"),
            Self::Timeout { limit } => {
                tracing::warn!(limit_ms = limit.as_millis() as u64, "request timed out");
            }
            _ => {}
        }
    }
}

/// What a `lock_busy` answer says is in the way: a live lease, the
/// lock-delay of one that expired unreleased, or an earlier fair waiter.
fn busy_message(name: &LockName, holder: &Holder) -> String {
    if holder.expires_in_ms > 0 {
        format!("lock {name:?} is held by another lease")
    } else if holder.available_in_ms > 0 {
        format!(
            "lock {name:?} is in its lock-delay after a lease expired unreleased; it frees in {} ms",
            holder.available_in_ms
        )
    } else {
        format!(
            "lock {name:?} is free but promised to an earlier fair waiter; wait with \
             `\"fair\": true` to take a place in line"
        )
    }
}

/// What the caller is told when the lock store failed: what is known of the
/// outcome, never the cause (that is logged).
fn store_message(cause: &StoreError) -> &'static str {
    match cause {
        StoreError::Unavailable(_) => {
            "the lock store is unavailable; nothing was changed, retry later"
        }
        StoreError::RefusesWrites(_) => {
            "the lock store refuses writes (Redis is out of memory or read-only); nothing was \
             changed, retry later"
        }
        StoreError::OutcomeUnknown(_) => {
            "the lock store did not answer in time, so the outcome is unknown: the step may \
             still take effect, and a lease an acquire took this way is being released by the \
             broker; retrying with the same token or request_id is safe"
        }
        StoreError::Protocol(_) => "internal error",
    }
}

impl From<ValidationError> for ApiError {
    fn from(error: ValidationError) -> Self {
        Self::Invalid(error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        self.log(status);
        let holder = match &self {
            Self::Lock(_, LockError::Busy(holder)) => Some(holder),
            _ => None,
        };
        let field = match &self {
            Self::Invalid(e) | Self::Lock(_, LockError::Invalid(e)) => Some(e.field),
            Self::BadBody { field, .. } => Some(field.as_str()),
            _ => None,
        };
        let expires_in_ms = match &self {
            Self::Lock(_, LockError::MaxHoldExceeded { expires_in_ms, .. }) => Some(*expires_in_ms),
            _ => None,
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code,
                message: self.message(),
                field,
                holder: holder.map(|h: &Holder| HolderDetail {
                    owner: h.owner.as_deref(),
                    fence: h.fence.get(),
                    expires_in_ms: h.expires_in_ms,
                    available_in_ms: h.available_in_ms,
                }),
                expires_in_ms,
            },
        };
        let mut response = (status, Json(body)).into_response();
        let retry_after_secs = match (&self, status) {
            (Self::Lock(_, LockError::Busy(holder)), _) => {
                Some(holder.available_in_ms.div_ceil(1000).max(1))
            }
            (Self::RateLimited { retry_after }, _) => Some(
                u64::try_from(retry_after.as_millis().div_ceil(1000))
                    .unwrap_or(1)
                    .max(1),
            ),
            (_, StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS) => Some(1),
            _ => None,
        };
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"lockbroker\""),
            );
        }
        if let Some(secs) = retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
