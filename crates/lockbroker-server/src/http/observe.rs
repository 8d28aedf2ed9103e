//! One log line and one histogram sample per request, under a request id.
//!
//! The id comes from the caller's `x-request-id` header when it is sane
//! (1 to 128 visible ASCII characters), else it is made up here; either way it
//! goes back in the response's `x-request-id`. Every log line of the request
//! (grants, releases, errors) carries it through the request's span. An error
//! answer's line also carries its error code, as the body spells it.
//!
//! The one layer around the handlers: it runs [`super::limits`] and the
//! [`Gate`] inline, so that a request pays for one boxed middleware future
//! here, not one for each (a waiting acquire holds them all while it waits).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use lockbroker_api::ErrorCode;
use lockbroker_core::lease::random_hex;
use tracing::Instrument;

use super::auth::{Gate, Refusal};
use super::limits::{self, Limits};
use crate::auth::Caller;
use crate::metrics::Metrics;

/// What the layer needs: the metrics it reports to, the limits it enforces
/// and who may call which route.
#[derive(Clone)]
pub struct Front {
    /// The broker's metrics.
    pub metrics: Arc<Metrics>,
    /// The limits every request is held to.
    pub limits: Arc<Limits>,
    /// The API keys and the routes they guard.
    pub gate: Arc<Gate>,
}

/// The header that carries the request id both ways.
pub static REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Logs and measures one request, held to the limits and then to the gate
/// (whose refusals are logged and measured like any answer).
pub async fn observe(State(front): State<Front>, request: Request, next: Next) -> Response {
    let Front {
        metrics,
        limits,
        gate,
    } = front;
    let started = Instant::now();
    let request_id = request
        .headers()
        .get(&REQUEST_ID)
        .filter(|value| is_sane_id(value.as_bytes()))
        .and_then(|value| value.to_str().ok())
        .map_or_else(new_request_id, str::to_owned);
    // The router's own shared copy of the route, not a new string.
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let method = request.method().clone();
    let span =
        tracing::info_span!("request", request_id = %request_id, method = %method, route = %route);

    let (caller, mut response) = admitted(&limits, &gate, request, next)
        .instrument(span.clone())
        .await;

    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    metrics.request_finished(route, method.as_str(), status, elapsed);
    // The id of the API key that made the request, when one was presented and
    // accepted: operators rotating a key watch for its id to disappear.
    let key = match &caller {
        Some(caller @ Caller::Key(_)) => Some(caller.id()),
        _ => None,
    };
    if let Some(key) = key {
        metrics.request_by_key(key);
    }
    let code = response.extensions().get::<ErrorCode>().map(|c| c.as_str());
    span.in_scope(|| {
        tracing::info!(
            status,
            code,
            key,
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            "request finished"
        );
    });
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID.clone(), value);
    }
    response
}

/// The answer to `request` once the limits and the gate admit it, with its
/// caller when the gate knew it.
async fn admitted(
    limits: &Limits,
    gate: &Gate,
    mut request: Request,
    next: Next,
) -> (Option<Caller>, Response) {
    let _permit = match limits::admit(limits, &mut request) {
        Ok(permit) => permit,
        Err(refusal) => return (None, refusal.into_response()),
    };
    match gate.admit(&mut request) {
        Ok(caller) => (
            caller,
            limits::within_timeout(limits, next.run(request)).await,
        ),
        Err(Refusal { error, caller }) => (caller, error.into_response()),
    }
}

/// A fresh request id: 16 hex digits from the thread-local generator,
/// without a system call (or the formatting machinery) per request.
fn new_request_id() -> String {
    random_hex::<8>()
}

fn is_sane_id(bytes: &[u8]) -> bool {
    (1..=128).contains(&bytes.len()) && bytes.iter().all(|b| b.is_ascii_graphic())
}
