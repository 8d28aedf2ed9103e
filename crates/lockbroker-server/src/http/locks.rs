//! Lock routes: extract, call the [`crate::Service`], map the result.

use std::future::Future;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use lockbroker_api::{
    AcquireBody, ExtendBody, FenceCheckResponse, LockMode, ReleaseBody, ReleaseResponse,
    RenewalResponse, StatusResponse,
};
use lockbroker_core::{AcquireRequest, Lease, LeaseKind, LeaseToken, LockError, LockName};

use super::delivery;
use super::error::{ApiError, Step};
use super::extract::{FencePath, JsonBody, LockPath};
use super::views::{fence_check_response, lease_response, renewal_response, status_response};
use super::AppState;
use crate::auth::Caller;

/// `POST /v1/locks/{name}/acquire`
pub fn acquire(
    State(app): State<AppState>,
    caller: Caller,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<AcquireBody>,
) -> impl Future<Output = Result<Response, ApiError>> {
    let request = Box::new(acquire_request(body, &caller));
    grant_answer(app, name, request, |lease| {
        serde_json::to_vec(&lease_response(lease))
    })
}

/// Acquires `name` as `request` asks, counts it, and answers the lease as
/// `json` writes it, confirming delivery (a grant whose answer never
/// reaches the caller is released).
///
/// Takes what it needs by value and returns its future rather than being an
/// `async fn`: a waiting acquire holds this future for its whole wait, and an
/// `async fn` (as the handler calling it) keeps its arguments twice. The
/// request comes boxed for the same reason: the future keeps the room of
/// what it was given after handing it on, and the lock service turns the
/// request into its attempt before its own future begins.
pub(super) fn grant_answer(
    app: AppState,
    name: LockName,
    request: Box<AcquireRequest>,
    json: impl FnOnce(&Lease) -> serde_json::Result<Vec<u8>>,
) -> impl Future<Output = Result<Response, ApiError>> {
    let started = Instant::now();
    let waits = request.wait_ms.is_some_and(|ms| ms > 0);
    let kind = request.kind;
    async move {
        // Out of its box, which is freed before the wait rather than after.
        let result = app.service.acquire(&name, unboxed(request)).await;
        let waited = waits.then(|| started.elapsed());
        app.metrics
            .acquire_finished(&name, kind, result.as_ref().map(|_| ()), waited);
        let grant = result.map_err(in_step(Step::Acquire, &name))?;
        let lease = grant.lease();
        tracing::info!(lock = %name, kind = kind.as_str(), fence = %lease.fence, "lease granted");
        delivery::grant_answer(grant, json)
    }
}

/// The value `boxed` holds, its box freed: moved out in place, it would
/// stay allocated until the future that holds the box ends.
#[allow(clippy::boxed_local)]
fn unboxed<T>(boxed: Box<T>) -> T {
    *boxed
}

/// `POST /v1/locks/{name}/extend`
pub async fn extend(
    State(app): State<AppState>,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Result<Json<RenewalResponse>, ApiError> {
    extend_lease(&app, &name, body).await.map(Json)
}

/// `POST /v1/locks/{name}/release`
pub async fn release(
    State(app): State<AppState>,
    LockPath(name): LockPath,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    release_lease(&app, &name, body).await.map(Json)
}

/// Extends the lease or permit of `body`'s token on `name`.
pub(super) async fn extend_lease(
    app: &AppState,
    name: &LockName,
    body: ExtendBody,
) -> Result<RenewalResponse, ApiError> {
    let token = required_token(body.token)?;
    let result = app.service.extend(name, &token, body.ttl_ms).await;
    app.metrics
        .extend_finished(name, token.kind(), result.as_ref().map(|_| ()));
    if let Err(LockError::LeaseLost) = &result {
        tracing::warn!(lock = %name, "extend found the lease lost: it expired before its holder renewed it, or an operator force-released it");
    }
    let renewal = result.map_err(in_step(Step::Extend, name))?;
    Ok(renewal_response(name, renewal))
}

/// Releases the lease or permit of `body`'s token on `name`.
pub(super) async fn release_lease(
    app: &AppState,
    name: &LockName,
    body: ReleaseBody,
) -> Result<ReleaseResponse, ApiError> {
    let token = required_token(body.token)?;
    let result = app.service.release(name, &token).await;
    let held = result
        .as_ref()
        .map(|r| r.held_ms.map(Duration::from_millis));
    app.metrics.release_finished(name, token.kind(), held);
    if let Err(LockError::LeaseLost) = &result {
        tracing::warn!(lock = %name, "release found the lease lost: it expired before its holder released it, or an operator force-released it");
    }
    let release = result.map_err(in_step(Step::Release, name))?;
    tracing::info!(lock = %name, fence = %release.fence, "lease released");
    Ok(ReleaseResponse {
        name: name.to_string(),
        released: true,
        fence: release.fence.get(),
        acknowledged: release.acknowledged,
    })
}

/// `GET /v1/locks/{name}`
pub async fn status(
    State(app): State<AppState>,
    LockPath(name): LockPath,
) -> Result<Json<StatusResponse>, ApiError> {
    let status = (app.service.status(&name).await).map_err(in_step(Step::Read, &name))?;
    Ok(Json(status_response(&name, status)))
}

/// `GET /v1/locks/{name}/fence/{fence}`
pub async fn check_fence(
    State(app): State<AppState>,
    LockPath(name): LockPath,
    FencePath(fence): FencePath,
) -> Result<Json<FenceCheckResponse>, ApiError> {
    let check =
        (app.service.check_fence(&name, fence).await).map_err(in_step(Step::Read, &name))?;
    Ok(Json(fence_check_response(&name, check)))
}

/// What the service is asked for: the body, under the caller's principal.
pub(super) fn acquire_request(body: AcquireBody, caller: &Caller) -> AcquireRequest {
    AcquireRequest {
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        owner: body.owner,
        request_id: body.request_id,
        principal: caller.principal(),
        lock_delay_ms: body.lock_delay_ms,
        fair: body.fair.unwrap_or(false),
        kind: lease_kind(body.mode),
        limit: None,
        session: body.session.map(|secret| secret.0),
    }
}

/// The kind of lease a lock's `mode` asks for: exclusive unless shared.
pub(super) fn lease_kind(mode: Option<LockMode>) -> LeaseKind {
    match mode.unwrap_or_default() {
        LockMode::Exclusive => LeaseKind::Exclusive,
        LockMode::Shared => LeaseKind::Shared,
    }
}

fn required_token(token: Option<String>) -> Result<LeaseToken, ApiError> {
    let token = token.ok_or_else(|| ApiError::BadBody {
        field: "token".into(),
        message: "is required".into(),
    })?;
    Ok(LeaseToken::parse(&token)?)
}

/// Maps a failure of `step` on `name` to its answer.
pub(super) fn in_step(step: Step, name: &LockName) -> impl FnOnce(LockError) -> ApiError + '_ {
    move |error| ApiError::Lock(step, name.clone(), error)
}
