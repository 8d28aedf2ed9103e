//! Lock routes: extract, call the [`crate::Service`], map the result.

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use lockbroker_api::{
    AcquireBody, ExtendBody, LeaseResponse, ReleaseBody, ReleaseResponse, RenewalResponse,
    StatusResponse,
};
use lockbroker_core::lease::Renewal;
use lockbroker_core::{AcquireRequest, Fence, Lease, LeaseToken, LockError, LockName, LockStatus};

use super::delivery;
use super::error::ApiError;
use super::extract::{JsonBody, LockPath};
use super::AppState;
use crate::auth::Caller;

/// `POST /v1/locks/{name}/acquire`
pub async fn acquire(
    State(app): State<AppState>,
    caller: Caller,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let waits = body.wait_ms.is_some_and(|ms| ms > 0);
    let result = app
        .service
        .acquire(&name, acquire_request(body, &caller))
        .await;
    let waited = waits.then(|| started.elapsed());
    app.metrics
        .acquire_finished(&name, result.as_ref().map(|_| ()), waited);
    let grant = result.map_err(in_lock(&name))?;
    let lease = grant.lease();
    tracing::info!(lock = %name, fence = %lease.fence, "lease granted");
    let json = serde_json::to_vec(&lease_response(lease)).unwrap_or_default();
    Ok(delivery::json_confirming(json, grant))
}

/// `POST /v1/locks/{name}/extend`
pub async fn extend(
    State(app): State<AppState>,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Result<Json<RenewalResponse>, ApiError> {
    let token = required_token(body.token)?;
    let result = app.service.extend(&name, &token, body.ttl_ms).await;
    app.metrics
        .extend_finished(&name, result.as_ref().map(|_| ()));
    if let Err(LockError::LeaseLost) = &result {
        tracing::warn!(lock = %name, "extend found the lease lost: its holder overran it");
    }
    let renewal = result.map_err(in_lock(&name))?;
    Ok(Json(renewal_response(&name, renewal)))
}

/// `POST /v1/locks/{name}/release`
pub async fn release(
    State(app): State<AppState>,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    let token = required_token(body.token)?;
    let result = app.service.release(&name, &token).await;
    let held = result
        .as_ref()
        .map(|r| r.held_ms.map(Duration::from_millis));
    app.metrics.release_finished(&name, held);
    if let Err(LockError::LeaseLost) = &result {
        tracing::warn!(lock = %name, "release found the lease lost: its holder overran it");
    }
    let release = result.map_err(in_lock(&name))?;
    tracing::info!(lock = %name, fence = %release.fence, "lease released");
    Ok(Json(ReleaseResponse {
        name: name.to_string(),
        released: true,
        fence: release.fence.get(),
        acknowledged: release.acknowledged,
    }))
}

/// `GET /v1/locks/{name}`
pub async fn status(
    State(app): State<AppState>,
    LockPath(name): LockPath,
) -> Result<Json<StatusResponse>, ApiError> {
    let status = app.service.status(&name).await.map_err(in_lock(&name))?;
    Ok(Json(status_response(&name, status)))
}

/// What the service is asked for: the body, under the caller's principal.
fn acquire_request(body: AcquireBody, caller: &Caller) -> AcquireRequest {
    AcquireRequest {
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        owner: body.owner,
        request_id: body.request_id,
        principal: caller.principal(),
        lock_delay_ms: body.lock_delay_ms,
        fair: body.fair.unwrap_or(false),
    }
}

fn required_token(token: Option<String>) -> Result<LeaseToken, ApiError> {
    let token = token.ok_or_else(|| ApiError::BadBody {
        field: "token".into(),
        message: "is required".into(),
    })?;
    Ok(LeaseToken::parse(&token)?)
}

fn in_lock(name: &LockName) -> impl FnOnce(LockError) -> ApiError + '_ {
    move |error| ApiError::Lock(name.clone(), error)
}

/// A granted lease as its acquirer sees it: the only answer with a token.
fn lease_response(lease: &Lease) -> LeaseResponse {
    LeaseResponse {
        name: lease.name.to_string(),
        token: lease.token.expose().to_owned(),
        fence: lease.fence.get(),
        ttl_ms: lease.ttl_ms,
        expires_at_ms: lease.expires_at_ms,
        validity_ms: lease.validity_ms,
        owner: lease.owner.clone(),
    }
}

fn renewal_response(name: &LockName, renewal: Renewal) -> RenewalResponse {
    RenewalResponse {
        name: name.to_string(),
        fence: renewal.fence.get(),
        ttl_ms: renewal.ttl_ms,
        expires_at_ms: renewal.expires_at_ms,
        validity_ms: renewal.validity_ms,
        owner: renewal.owner,
    }
}

/// The state of `name` as read from the store.
pub(super) fn status_response(name: &LockName, status: LockStatus) -> StatusResponse {
    StatusResponse {
        name: name.to_string(),
        held: status.held,
        owner: status.owner,
        fence: status.fence.map(Fence::get),
        expires_in_ms: status.expires_in_ms,
        available_in_ms: status.available_in_ms,
    }
}
