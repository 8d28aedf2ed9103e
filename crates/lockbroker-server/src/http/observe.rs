//! One log line and one histogram sample per request, under a request id.
//!
//! The id comes from the caller's `x-request-id` header when it is sane
//! (1 to 128 visible ASCII characters), else it is made up here; either way it
//! goes back in the response's `x-request-id`. Every log line of the request
//! (grants, releases, errors) carries it through the request's span. An error
//! answer's line also carries its error code, as the body spells it.
//!
//! The one layer around the handlers: it runs [`super::limits`], the [`Gate`]
//! and the request timeout inline. It is a hand-written service with a future
//! of its own rather than an `async fn` middleware: a waiting acquire holds
//! this future for as long as it waits, and written out it keeps only what
//! the answer's log line and metrics need beside the route's future (about a
//! quarter of what the `async fn` kept, which stored the request twice and
//! the route's future with it).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use lockbroker_api::ErrorCode;
use lockbroker_core::lease::random_hex;
use pin_project_lite::pin_project;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Timeout;
use tower::{Layer, Service};
use tracing::Span;

use super::auth::{Gate, Refusal};
use super::error::ApiError;
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

/// Wraps each route in [`Observed`].
#[derive(Clone)]
pub struct ObserveLayer {
    front: Front,
}

impl ObserveLayer {
    /// The layer reporting to and enforcing what `front` holds.
    pub fn new(front: Front) -> Self {
        Self { front }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observed<S>;

    fn layer(&self, inner: S) -> Observed<S> {
        Observed {
            front: self.front.clone(),
            inner,
        }
    }
}

/// A route, logged and measured, held to the limits and then to the gate
/// (whose refusals are logged and measured like any answer).
#[derive(Clone)]
pub struct Observed<S> {
    front: Front,
    inner: S,
}

impl<S> Service<Request> for Observed<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = ObservedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let started = Instant::now();
        let request_id = request
            .headers()
            .get(&REQUEST_ID)
            .filter(|value| is_sane_id(value.as_bytes()))
            .and_then(|value| value.to_str().ok())
            .map_or_else(new_request_id, str::to_owned);
        // The router's own shared copy of the route, not a new string.
        let route = request.extensions().get::<MatchedPath>().cloned();
        let method = request.method().clone();
        let span = tracing::info_span!(
            "request",
            request_id = %request_id,
            method = %method,
            route = %route.as_ref().map_or("unmatched", MatchedPath::as_str),
        );
        let Front {
            metrics,
            limits,
            gate,
        } = &self.front;
        let admission = span.in_scope(|| admit(limits, gate, &mut request));
        let (stage, caller, permit) = match admission {
            Admission::Admitted(caller, permit) => {
                let answer = tokio::time::timeout(limits.request_timeout, self.inner.call(request));
                (Stage::Answering { answer }, caller, Some(permit))
            }
            Admission::Refused(caller, response) => (
                Stage::Refused {
                    response: Some(response),
                },
                caller,
                None,
            ),
        };
        ObservedFuture {
            stage,
            record: Record {
                metrics: Arc::clone(metrics),
                request_timeout: limits.request_timeout,
                started,
                request_id,
                route,
                method,
                span,
                caller,
                _permit: permit,
            },
        }
    }
}

/// What the limits and the gate make of a request.
enum Admission {
    /// Admitted, with its caller when the gate knew it and its place among
    /// the requests in progress.
    Admitted(Option<Caller>, OwnedSemaphorePermit),
    /// Turned away with this answer (and its caller when the gate knew it).
    Refused(Option<Caller>, Response),
}

fn admit(limits: &Limits, gate: &Gate, request: &mut Request) -> Admission {
    let permit = match limits::admit(limits, request) {
        Ok(permit) => permit,
        Err(refusal) => return Admission::Refused(None, refusal.into_response()),
    };
    match gate.admit(request) {
        Ok(caller) => Admission::Admitted(caller, permit),
        Err(Refusal { error, caller }) => Admission::Refused(caller, error.into_response()),
    }
}

pin_project! {
    /// The answer of one observed request: the route's, within the request
    /// timeout, or the limits' or the gate's refusal.
    pub struct ObservedFuture<F> {
        #[pin]
        stage: Stage<F>,
        record: Record,
    }
}

pin_project! {
    #[project = StageProjection]
    enum Stage<F> {
        Answering { #[pin] answer: Timeout<F> },
        Refused { response: Option<Response> },
    }
}

/// What the request's log line and metrics need once it is answered.
struct Record {
    metrics: Arc<Metrics>,
    request_timeout: Duration,
    started: Instant,
    request_id: String,
    route: Option<MatchedPath>,
    method: Method,
    span: Span,
    caller: Option<Caller>,
    /// Held until the answer: one of the requests in progress.
    _permit: Option<OwnedSemaphorePermit>,
}

impl<F> Future for ObservedFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let record = this.record;
        let response = match this.stage.project() {
            StageProjection::Answering { answer } => {
                let _entered = record.span.enter();
                match ready!(answer.poll(cx)) {
                    Ok(Ok(response)) => response,
                    Ok(Err(never)) => match never {},
                    Err(_elapsed) => ApiError::Timeout {
                        limit: record.request_timeout,
                    }
                    .into_response(),
                }
            }
            StageProjection::Refused { response } => response
                .take()
                .expect("an observed request polled after its answer"),
        };
        Poll::Ready(Ok(record.finish(response)))
    }
}

impl Record {
    /// Measures and logs the request answered with `response`, and gives
    /// that response its request id.
    fn finish(&mut self, mut response: Response) -> Response {
        self._permit = None;
        let elapsed = self.started.elapsed();
        let status = response.status().as_u16();
        let route = self.route.as_ref().map_or("unmatched", MatchedPath::as_str);
        self.metrics
            .request_finished(route, self.method.as_str(), status, elapsed);
        // The id of the API key that made the request, when one was presented
        // and accepted: operators rotating a key watch for its id to
        // disappear.
        let key = match &self.caller {
            Some(caller @ Caller::Key(_)) => Some(caller.id()),
            _ => None,
        };
        if let Some(key) = key {
            self.metrics.request_by_key(key);
        }
        let code = response.extensions().get::<ErrorCode>().map(|c| c.as_str());
        self.span.in_scope(|| {
            tracing::info!(
                status,
                code,
                key,
                duration_ms = elapsed.as_secs_f64() * 1000.0,
                "request finished"
            );
        });
        if let Ok(value) = HeaderValue::from_str(&self.request_id) {
            response.headers_mut().insert(REQUEST_ID.clone(), value);
        }
        response
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
