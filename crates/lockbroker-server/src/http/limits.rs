//! Request limits that answer with the one JSON error shape: the global
//! concurrency limit, the request timeout and the body read timeout, and the
//! host and origin rules of [`super::origin`].
//!
//! Not a layer of its own: [`super::observe`] awaits [`enforce`] inline. Every
//! layer boxes a future of its own per request (and `Next` one more), which a
//! waiting acquire holds for as long as it waits.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

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

/// Refuses a request with `503 overloaded` when the broker already serves as
/// many as it allows, instead of queueing it behind waiting acquires, and
/// tells the body extractor its read timeout. Refuses a request from a host
/// name or page origin the broker does not take (after the limits, before
/// authentication and before any body is read). Answers `503` when a
/// request outlives the request timeout.
pub async fn enforce(limits: &Limits, mut request: Request, next: Next) -> Response {
    let Ok(_permit) = Arc::clone(&limits.in_flight).try_acquire_owned() else {
        return ApiError::Overloaded.into_response();
    };
    // A body announced larger than the limit is refused from its header, at
    // once, rather than after waiting for bytes that will be refused anyway.
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limits.max_body_bytes as u64) {
        return ApiError::PayloadTooLarge.into_response();
    }
    if let Some(refusal) = limits.sources.refusal(request.uri(), request.headers()) {
        return refusal.into_response();
    }
    request
        .extensions_mut()
        .insert(BodyReadTimeout(limits.body_read_timeout));
    match tokio::time::timeout(limits.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout {
            limit: limits.request_timeout,
        }
        .into_response(),
    }
}
