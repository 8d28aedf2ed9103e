//! The HTTP surface: one table of routes, shared extractors and limits.

pub mod error;
pub mod extract;
pub mod health;
pub mod locks;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;

use crate::config::HttpSettings;
use crate::Service;
use error::ApiError;

/// What every handler gets: the lock service.
pub type AppState = Arc<Service>;

/// Every route the broker serves, as `(method, path template, handler)`.
/// `openapi.yaml` documents exactly these; a test holds the two together.
pub fn routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    vec![
        (
            Method::POST,
            "/v1/locks/{name}/acquire",
            post(locks::acquire),
        ),
        (Method::POST, "/v1/locks/{name}/extend", post(locks::extend)),
        (
            Method::POST,
            "/v1/locks/{name}/release",
            post(locks::release),
        ),
        (Method::GET, "/v1/locks/{name}", get(locks::status)),
        (Method::GET, "/healthz", get(health::healthz)),
        (Method::GET, "/readyz", get(health::readyz)),
    ]
}

/// The `(method, path)` pairs of [`routes`].
pub fn served_routes() -> Vec<(Method, &'static str)> {
    routes()
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
}

/// The complete router with its limits.
pub fn router(service: AppState, settings: &HttpSettings) -> Router {
    let timeout = Duration::from_millis(settings.request_timeout_ms);
    routes()
        .into_iter()
        .fold(Router::new(), |router, (_, path, handler)| {
            router.route(path, handler)
        })
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(settings.max_body_bytes))
        .layer(middleware::from_fn_with_state(timeout, request_timeout))
        .with_state(service)
}

/// Answers `503` when a request outlives the configured request timeout.
async fn request_timeout(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout { limit }.into_response(),
    }
}
