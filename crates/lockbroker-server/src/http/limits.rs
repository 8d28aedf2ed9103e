//! Request limits that answer with the one JSON error shape: the global
//! concurrency limit, the request timeout and the body read timeout, and the
//! host and origin rules of [`super::origin`].
//!
//! Not a layer of its own: [`super::observe`] runs [`admit`] and the request
//! timeout inline. Every layer boxes a future of its own per request, which
//! a waiting acquire holds for as long as it waits.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;
use super::extract::BodyLimits;
use super::origin::Sources;

/// What the limits layer enforces on each request.
#[derive(Clone)]
pub struct Limits {
    /// One permit per request in progress.
    pub in_flight: Arc<Semaphore>,
    /// How long a body may take to arrive, and how large it may be.
    pub body: BodyLimits,
    /// How long a request may take in all, waiting included.
    pub request_timeout: Duration,
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
    if announced.is_some_and(|length| length > limits.body.max_bytes as u64) {
        return Err(ApiError::PayloadTooLarge);
    }
    if let Some(refusal) = limits.sources.refusal(request.uri(), request.headers()) {
        return Err(refusal);
    }
    request.extensions_mut().insert(limits.body);
    Ok(permit)
}
