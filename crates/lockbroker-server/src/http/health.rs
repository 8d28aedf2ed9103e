//! Liveness and readiness probes.

use axum::extract::State;
use axum::Json;
use lockbroker_api::{HealthResponse, HealthStatus};

use super::error::ApiError;
use super::AppState;

/// `GET /healthz`: the process is alive and serving HTTP. Says nothing of Redis,
/// so an orchestrator does not restart brokers because Redis is down.
pub async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: HealthStatus::Ok,
    })
}

/// `GET /readyz`: Redis answers, has the lock scripts loaded and takes
/// writes, the broker hears other brokers' announcements, and it is not
/// shutting down. `503` otherwise, so load balancers route elsewhere.
pub async fn readyz(State(app): State<AppState>) -> Result<Json<HealthResponse>, ApiError> {
    if app.service.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    app.service.ready().await.map_err(ApiError::Unavailable)?;
    Ok(Json(HealthResponse {
        status: HealthStatus::Ready,
    }))
}
