//! Lock routes: extract, call the [`crate::Service`], map the result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Json};
use lockbroker_core::lease::Renewal;
use lockbroker_core::{AcquireRequest, Fence, Lease, LeaseToken, LockError, LockName, LockStatus};
use serde::{Deserialize, Serialize};

use super::delivery;
use super::error::ApiError;
use super::extract::{JsonBody, LockPath};
use super::AppState;
use crate::auth::Caller;
use crate::metrics::Metrics;

/// Body of `POST /v1/locks/{name}/acquire`; every field is optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    ttl_ms: Option<u64>,
    wait_ms: Option<u64>,
    owner: Option<String>,
    request_id: Option<String>,
    lock_delay_ms: Option<u64>,
    fair: Option<bool>,
}

/// Body of `POST /v1/locks/{name}/extend`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    token: Option<String>,
    ttl_ms: Option<u64>,
}

/// Body of `POST /v1/locks/{name}/release`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    token: Option<String>,
}

/// A granted lease: the only response that carries a token.
#[derive(Serialize)]
pub struct LeaseResponse {
    name: String,
    token: String,
    fence: u64,
    ttl_ms: u64,
    expires_at_ms: u64,
    owner: Option<String>,
}

/// An extended lease: same fence, new expiry.
#[derive(Serialize)]
pub struct RenewalResponse {
    name: String,
    fence: u64,
    ttl_ms: u64,
    expires_at_ms: u64,
    owner: Option<String>,
}

/// A released lease.
#[derive(Serialize)]
pub struct ReleaseResponse {
    name: String,
    released: bool,
    fence: u64,
}

/// A lock's state, for its holder's peers and for operators. Never a token.
#[derive(Serialize)]
pub struct StatusResponse {
    name: String,
    held: bool,
    owner: Option<String>,
    fence: Option<u64>,
    expires_in_ms: u64,
    available_in_ms: u64,
}

/// `POST /v1/locks/{name}/acquire`
pub async fn acquire(
    State(service): State<AppState>,
    Extension(metrics): Extension<Arc<Metrics>>,
    caller: Caller,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<AcquireBody>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let waits = body.wait_ms.is_some_and(|ms| ms > 0);
    let request = AcquireRequest {
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        owner: body.owner,
        request_id: body.request_id,
        principal: caller.principal(),
        lock_delay_ms: body.lock_delay_ms,
        fair: body.fair.unwrap_or(false),
    };
    let result = service.acquire(&name, request).await;
    let waited = waits.then(|| started.elapsed());
    metrics.acquire_finished(&name, result.as_ref().map(|_| ()), waited);
    let grant = result.map_err(in_lock(&name))?;
    let lease = grant.lease();
    tracing::info!(lock = %name, fence = %lease.fence, "lease granted");
    let json = serde_json::to_vec(&LeaseResponse::from(lease)).unwrap_or_default();
    Ok(delivery::json_confirming(json, grant))
}

/// `POST /v1/locks/{name}/extend`
pub async fn extend(
    State(service): State<AppState>,
    Extension(metrics): Extension<Arc<Metrics>>,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Result<Json<RenewalResponse>, ApiError> {
    let token = required_token(body.token)?;
    let result = service.extend(&name, &token, body.ttl_ms).await;
    metrics.extend_finished(&name, result.as_ref().map(|_| ()));
    if let Err(LockError::LeaseLost) = &result {
        tracing::warn!(lock = %name, "extend found the lease lost: its holder overran it");
    }
    let renewal = result.map_err(in_lock(&name))?;
    Ok(Json(RenewalResponse::new(&name, renewal)))
}

/// `POST /v1/locks/{name}/release`
pub async fn release(
    State(service): State<AppState>,
    Extension(metrics): Extension<Arc<Metrics>>,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    let token = required_token(body.token)?;
    let result = service.release(&name, &token).await;
    metrics.release_finished(
        &name,
        result
            .as_ref()
            .map(|release| release.held_ms.map(Duration::from_millis)),
    );
    if let Err(LockError::LeaseLost) = &result {
        tracing::warn!(lock = %name, "release found the lease lost: its holder overran it");
    }
    let release = result.map_err(in_lock(&name))?;
    tracing::info!(lock = %name, fence = %release.fence, "lease released");
    Ok(Json(ReleaseResponse {
        name: name.to_string(),
        released: true,
        fence: release.fence.get(),
    }))
}

/// `GET /v1/locks/{name}`
pub async fn status(
    State(service): State<AppState>,
    LockPath(name): LockPath,
) -> Result<Json<StatusResponse>, ApiError> {
    let status = service.status(&name).await.map_err(in_lock(&name))?;
    Ok(Json(StatusResponse::new(&name, status)))
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

impl From<&Lease> for LeaseResponse {
    fn from(lease: &Lease) -> Self {
        Self {
            name: lease.name.to_string(),
            token: lease.token.expose().to_owned(),
            fence: lease.fence.get(),
            ttl_ms: lease.ttl_ms,
            expires_at_ms: lease.expires_at_ms,
            owner: lease.owner.clone(),
        }
    }
}

impl RenewalResponse {
    fn new(name: &LockName, renewal: Renewal) -> Self {
        Self {
            name: name.to_string(),
            fence: renewal.fence.get(),
            ttl_ms: renewal.ttl_ms,
            expires_at_ms: renewal.expires_at_ms,
            owner: renewal.owner,
        }
    }
}

impl StatusResponse {
    /// The state of `name` as read from the store.
    pub(crate) fn new(name: &LockName, status: LockStatus) -> Self {
        Self {
            name: name.to_string(),
            held: status.held,
            owner: status.owner,
            fence: status.fence.map(Fence::get),
            expires_in_ms: status.expires_in_ms,
            available_in_ms: status.available_in_ms,
        }
    }
}
