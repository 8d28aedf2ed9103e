//! The HTTP surface: one table of routes, shared extractors and limits.

pub mod admin;
pub mod auth;
pub mod delivery;
pub mod error;
pub mod events;
pub mod extract;
pub mod health;
pub mod limits;
pub mod locks;
pub mod multi;
pub mod observe;
pub mod origin;
pub mod scrape;
pub mod semaphores;
pub mod sessions;
pub mod ui;
mod views;

use std::sync::Arc;

use axum::extract::FromRef;
use axum::http::Method;
use axum::middleware;
use axum::routing::{delete, get, post, MethodRouter};
use axum::Router;

use crate::auth::KeyRing;
use crate::config::HttpSettings;
use crate::metrics::Metrics;
use crate::Service;
use error::ApiError;

/// What every handler gets: the lock service, the metrics it reports to
/// and who may open an event stream. State rather than request extensions:
/// an extension costs every request an allocation and a map insert. One
/// shared pointer: a waiting acquire's future keeps its copy for the whole
/// wait.
#[derive(Clone)]
pub struct AppState(Arc<App>);

/// What [`AppState`] shares.
pub struct App {
    /// The lock service.
    pub service: Arc<Service>,
    /// The broker's metrics.
    pub metrics: Arc<Metrics>,
    /// The event streams' limits.
    pub streams: Arc<events::StreamAdmission>,
}

impl std::ops::Deref for AppState {
    type Target = App;

    fn deref(&self) -> &App {
        &self.0
    }
}

/// What `GET /metrics` reads, on the main listener and the metrics one.
#[derive(Clone)]
pub struct ScrapeState {
    /// The lock service, for the gauges read at scrape time.
    pub service: Arc<Service>,
    /// The broker's metrics.
    pub metrics: Arc<Metrics>,
}

impl FromRef<AppState> for ScrapeState {
    fn from_ref(app: &AppState) -> Self {
        Self {
            service: Arc::clone(&app.service),
            metrics: Arc::clone(&app.metrics),
        }
    }
}

/// Every route the broker serves, as `(method, path template, handler)`.
/// `openapi.yaml` documents exactly these; a test holds the two together.
pub fn routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    vec![
        (
            Method::POST,
            "/v1/locks/acquire-all",
            post(multi::acquire_all),
        ),
        (
            Method::POST,
            "/v1/locks/release-all",
            post(multi::release_all),
        ),
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
        (
            Method::GET,
            "/v1/locks/{name}/fence/{fence}",
            get(locks::check_fence),
        ),
        (
            Method::GET,
            "/v1/locks/{name}/events",
            get(events::lock_events),
        ),
        (Method::GET, "/v1/events", get(events::prefix_events)),
        (Method::GET, "/v1/locks", get(admin::list)),
        (
            Method::DELETE,
            "/v1/locks/{name}",
            delete(admin::force_release),
        ),
        (
            Method::POST,
            "/v1/semaphores/{name}/acquire",
            post(semaphores::acquire),
        ),
        (
            Method::POST,
            "/v1/semaphores/{name}/extend",
            post(semaphores::extend),
        ),
        (
            Method::POST,
            "/v1/semaphores/{name}/release",
            post(semaphores::release),
        ),
        (
            Method::GET,
            "/v1/semaphores/{name}",
            get(semaphores::status),
        ),
        (
            Method::GET,
            "/v1/semaphores/{name}/fence/{fence}",
            get(semaphores::check_fence),
        ),
        (
            Method::GET,
            "/v1/semaphores/{name}/events",
            get(events::semaphore_events),
        ),
        (Method::GET, "/v1/semaphores", get(semaphores::list)),
        (
            Method::DELETE,
            "/v1/semaphores/{name}",
            delete(semaphores::force_release),
        ),
        (Method::POST, "/v1/sessions", post(sessions::open)),
        (
            Method::POST,
            "/v1/sessions/{id}/keepalive",
            post(sessions::keepalive),
        ),
        (
            Method::POST,
            "/v1/sessions/{id}/close",
            post(sessions::close),
        ),
        (Method::GET, "/v1/sessions/{id}", get(sessions::status)),
        (
            Method::GET,
            "/v1/sessions/{id}/events",
            get(events::session_events),
        ),
        (Method::GET, "/metrics", get(scrape::metrics)),
        (Method::GET, "/healthz", get(health::healthz)),
        (Method::GET, "/ui", get(ui::to_page)),
        (Method::GET, "/ui/", get(ui::page)),
        (Method::GET, "/ui/app.js", get(ui::script)),
        (Method::GET, "/ui/app.css", get(ui::style)),
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

/// The complete router with its limits, taking requests only from `sources`
/// and behind the API keys in `keys`, logging and measuring every request
/// into `metrics`.
pub fn router(
    service: Arc<Service>,
    settings: &HttpSettings,
    sources: Arc<origin::Sources>,
    keys: Arc<KeyRing>,
    metrics: Arc<Metrics>,
) -> Router {
    let limits = Arc::new(limits::Limits {
        in_flight: Arc::new(tokio::sync::Semaphore::new(
            settings.max_concurrent_requests,
        )),
        body: extract::BodyLimits {
            read_timeout: settings.body_read_timeout(),
            max_bytes: settings.max_body_bytes,
        },
        request_timeout: settings.request_timeout(),
        sources,
    });
    let front = observe::Front {
        metrics: Arc::clone(&metrics),
        limits,
        gate: Arc::new(auth::Gate::new(keys, served_routes())),
    };
    // One layer: each `Router::layer` boxes every request's future once
    // more, and a waiting acquire holds them all for as long as it waits.
    // The limits (the body's too), the origin guard and the gate run inside
    // `observe`.
    routes()
        .into_iter()
        .fold(Router::new(), |router, (_, path, handler)| {
            router.route(path, handler)
        })
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(observe::ObserveLayer::new(front))
        .with_state(AppState(Arc::new(App {
            service,
            metrics,
            streams: Arc::new(events::StreamAdmission::new(settings)),
        })))
}

/// The router of the optional metrics listener: `/metrics` only, behind the
/// same API keys and the same `Host` and `Origin` rules (for the metrics
/// listener's own address) as the main listener.
pub fn metrics_router(
    service: Arc<Service>,
    sources: Arc<origin::Sources>,
    keys: Arc<KeyRing>,
    metrics: Arc<Metrics>,
) -> Router {
    Router::new()
        .route("/metrics", get(scrape::metrics))
        .route_layer(middleware::from_fn_with_state(keys, auth::authenticate))
        .fallback(|| async { ApiError::NotFound })
        .layer(middleware::from_fn_with_state(sources, origin::guard))
        .with_state(ScrapeState { service, metrics })
}

#[cfg(test)]
mod waiter_size;
