//! Request limits that answer with the one JSON error shape: the global
//! concurrency limit, the request timeout and the body read timeout.
//!
//! One middleware for all three: every layer boxes a future of its own per
//! request, which a waiting acquire holds for as long as it waits.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::error::ApiError;
use super::extract::BodyReadTimeout;

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
}

/// Refuses a request with `503 overloaded` when the broker already serves as
/// many as it allows, instead of queueing it behind waiting acquires, and
/// tells the body extractor its read timeout. Answers `503` when a request
/// outlives the request timeout.
pub async fn enforce(State(limits): State<Limits>, mut request: Request, next: Next) -> Response {
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
