//! Request limits that answer with the one JSON error shape: the global
//! concurrency limit, the request timeout and the body read timeout, and the
//! host and origin rules of [`super::origin`].
//!
//! Not a layer of its own: [`super::observe`] runs [`admit`] and
//! [`within_timeout`] inline. Every layer boxes a future of its own per
//! request (and `Next` one more), which a waiting acquire holds for as long
//! as it waits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;
use super::extract::BodyReadTimeout;
use super::origin::Sources;

/// What the limits layer enforces on each request.
#[derive(Clone)]
pub struct Limits {
    /// One permit per request in progress.
    pub in_flight: Arc<Semaphore>,
    /// How long a body may take to arrive.
    pub body_read_timeout: Duration,
    /// How long a request may take in all, waiting included.
    pub request_timeout: Duration,
    /// The largest body accepted, in bytes.
    pub max_body_bytes: usize,
    /// The host names and page origins requests may come from.
    pub sources: Arc<Sources>,
}

/// Admits a request under the limits, or refuses it: `503 overloaded` when
/// the broker already serves as many as it allows (instead of queueing it
/// behind waiting acquires), `413` for a body announced over the limit, and
/// a request from a host name or page origin the broker does not take
/// (before authentication and before any body is read). An admitted request
/// is told its body read timeout and holds the returned permit until it is
/// answered.
pub fn admit(limits: &Limits, request: &mut Request) -> Result<OwnedSemaphorePermit, ApiError> {
    let Ok(permit) = Arc::clone(&limits.in_flight).try_acquire_owned() else {
        return Err(ApiError::Overloaded);
    };
    // A body announced larger than the limit is refused from its header, at
    // once, rather than after waiting for bytes that will be refused anyway.
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limits.max_body_bytes as u64) {
        return Err(ApiError::PayloadTooLarge);
    }
    if let Some(refusal) = limits.sources.refusal(request.uri(), request.headers()) {
        return Err(refusal);
    }
    request
        .extensions_mut()
        .insert(BodyReadTimeout(limits.body_read_timeout));
    Ok(permit)
}

/// `answer`, or `503` when it outlives the request timeout.
pub async fn within_timeout(limits: &Limits, answer: impl Future<Output = Response>) -> Response {
    match tokio::time::timeout(limits.request_timeout, answer).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout {
            limit: limits.request_timeout,
        }
        .into_response(),
    }
}
