//! Liveness and readiness probes.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;

/// `GET /healthz`: the process is alive and serving HTTP. Says nothing of Redis,
/// so an orchestrator does not restart brokers because Redis is down.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: Redis answers and has the lock scripts loaded, and the broker
/// is not shutting down. `503` otherwise, so load balancers route elsewhere.
pub async fn readyz(State(service): State<AppState>) -> Result<Json<Value>, ApiError> {
    if service.is_shutting_down() {
        return Err(ApiError::ShuttingDown);
    }
    service.ready().await.map_err(ApiError::Unavailable)?;
    Ok(Json(json!({"status": "ready"})))
}
