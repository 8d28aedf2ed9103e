//! `GET /metrics`: the registry in the Prometheus text format.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::ScrapeState;

/// Renders every metric; the waiter and session gauges are read at scrape
/// time.
pub async fn metrics(
    State(ScrapeState { service, metrics }): State<ScrapeState>,
) -> impl IntoResponse {
    metrics
        .waiters
        .set(i64::try_from(service.waiting()).unwrap_or(i64::MAX));
    metrics
        .max_waiters
        .set(i64::try_from(service.policy().waiters.max_waiters).unwrap_or(i64::MAX));
    let (open, expired) = service.session_counts();
    metrics.sessions.observe(open, expired);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.render(),
    )
}
