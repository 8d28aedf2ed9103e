//! [`Answer`], a row of the error table: the JSON error body, its
//! `Retry-After`, and the cause logged for a 5xx, built up step by step;
//! and how a row becomes the HTTP response.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use lockbroker_api::{ErrorCode, ErrorDetail, ErrorResponse};
use lockbroker_core::{Blockers, LockName, StoreError};

use super::messages::store_message;
use super::Step;
use crate::http::views::holder_response;

/// What one error answers: a row of the table in [`ApiError::answer`].
pub(super) struct Answer<'a> {
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

impl<'a> Answer<'a> {
    /// The answer of a lease an operator force-released, naming who did:
    /// `by` is the key id, or `anonymous` for a broker without API keys.
    pub(super) fn force_released_by(mut self, by: String) -> Self {
        self.detail.force_released_by = Some(by);
        self
    }

    /// An answer with `code` and `message`. A caller told to come back later
    /// (`429`, `503`) is told to wait a second, unless the row says how long.
    pub(super) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            detail: ErrorDetail::new(code, message),
            retry_after_secs: matches!(code.status(), 429 | 503).then_some(1),
            cause: None,
        }
    }

    /// Names the lock of a step over several locks that the error is about,
    /// and says that the step took none of them.
    pub(super) fn of_lock(mut self, name: &LockName) -> Self {
        self.detail.lock = Some(name.as_str().to_owned());
        self.detail
            .message
            .push_str("; none of the locks asked for was taken");
        self
    }

    /// The body alone.
    pub(super) fn into_detail(self) -> ErrorDetail {
        self.detail
    }

    /// Names the request field that broke a rule.
    pub(super) fn field(mut self, field: &str) -> Self {
        self.detail.field = Some(field.to_owned());
        self
    }

    /// Describes the leases in the way; come back when the first that
    /// matters can free.
    pub(super) fn blockers(mut self, blockers: &Blockers) -> Self {
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
    pub(super) fn limit(mut self, limit: u32) -> Self {
        self.detail.limit = Some(limit);
        self
    }

    /// How long the caller's own lease stays valid as it is.
    pub(super) fn expires_in(mut self, expires_in_ms: u64) -> Self {
        self.detail.expires_in_ms = Some(expires_in_ms);
        self
    }

    /// `Retry-After` of `ms` rounded up to whole seconds, at least one.
    pub(super) fn retry_after(mut self, ms: u128) -> Self {
        self.retry_after_secs = Some(u64::try_from(ms.div_ceil(1000)).unwrap_or(1).max(1));
        self
    }

    /// Logs the answer as `event`, with the lock and the store's error.
    pub(super) fn logged(
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
    pub(super) fn logged_cause(mut self, event: &'static str, detail: &'a str) -> Self {
        self = self.logged(event, None, None);
        if let Some(cause) = &mut self.cause {
            cause.detail = Some(detail);
        }
        self
    }

    /// Adds the limit that was exceeded to the logged cause.
    pub(super) fn with_limit(mut self, limit: Duration) -> Self {
        if let Some(cause) = &mut self.cause {
            cause.limit = Some(limit);
        }
        self
    }

    /// Writes the cause's one log line, if the answer has one.
    pub(super) fn log(&self) {
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
pub(super) fn store_failed(step: Step, error: &StoreError) -> Answer<'_> {
    let code = match error {
        StoreError::Protocol(_) => ErrorCode::Internal,
        StoreError::Overloaded(_) => ErrorCode::Overloaded,
        _ => ErrorCode::BackendUnavailable,
    };
    Answer::new(code, store_message(step, error))
}
