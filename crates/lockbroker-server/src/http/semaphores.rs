//! Semaphore routes: a permit is a lease among at most `limit` valid at
//! once. Extend and release run as for locks; the rest maps the semaphore's
//! own shapes.

use std::future::Future;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use lockbroker_api::{
    ExtendBody, FenceCheckResponse, ForceReleaseResponse, ListQuery, ReleaseBody, ReleaseResponse,
    RenewalResponse, SemaphoreAcquireBody, SemaphoreListResponse, SemaphoreStatusResponse,
};
use lockbroker_core::{AcquireRequest, LeaseKind, Space};

use super::admin::{end_all, listed_page};
use super::error::{ApiError, Step};
use super::extract::{FencePath, JsonBody, QueryParams, SemaphorePath};
use super::locks::{extend_lease, grant_answer, in_step, release_lease};
use super::views::{fence_check_response, permit_response, semaphore_status_response};
use super::AppState;
use crate::auth::Caller;

/// `POST /v1/semaphores/{name}/acquire`
pub fn acquire(
    State(app): State<AppState>,
    caller: Caller,
    SemaphorePath(name): SemaphorePath,
    JsonBody(body): JsonBody<SemaphoreAcquireBody>,
) -> impl Future<Output = Result<Response, ApiError>> {
    // A grant is made under the limit asked for: under any other limit in
    // force, the answer is a conflict instead.
    let limit = body.limit.and_then(|l| u32::try_from(l).ok()).unwrap_or(0);
    let request = Box::new(AcquireRequest {
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        owner: body.owner,
        request_id: body.request_id,
        principal: caller.principal(),
        lock_delay_ms: body.lock_delay_ms,
        fair: body.fair.unwrap_or(false),
        kind: LeaseKind::Permit,
        limit: body.limit,
        session: body.session.map(|secret| secret.0),
    });
    grant_answer(app, name, request, move |lease| {
        serde_json::to_vec(&permit_response(lease, limit))
    })
}

/// `POST /v1/semaphores/{name}/extend`
pub async fn extend(
    State(app): State<AppState>,
    SemaphorePath(name): SemaphorePath,
    JsonBody(body): JsonBody<ExtendBody>,
) -> Result<Json<RenewalResponse>, ApiError> {
    extend_lease(&app, &name, body).await.map(Json)
}

/// `POST /v1/semaphores/{name}/release`
pub async fn release(
    State(app): State<AppState>,
    SemaphorePath(name): SemaphorePath,
    JsonBody(body): JsonBody<ReleaseBody>,
) -> Result<Json<ReleaseResponse>, ApiError> {
    release_lease(&app, &name, body).await.map(Json)
}

/// `GET /v1/semaphores/{name}`
pub async fn status(
    State(app): State<AppState>,
    SemaphorePath(name): SemaphorePath,
) -> Result<Json<SemaphoreStatusResponse>, ApiError> {
    let status = (app.service.status(&name).await).map_err(in_step(Step::Read, &name))?;
    Ok(Json(semaphore_status_response(&name, status)))
}

/// `GET /v1/semaphores/{name}/fence/{fence}`
pub async fn check_fence(
    State(app): State<AppState>,
    SemaphorePath(name): SemaphorePath,
    FencePath(fence): FencePath,
) -> Result<Json<FenceCheckResponse>, ApiError> {
    let check =
        (app.service.check_fence(&name, fence).await).map_err(in_step(Step::Read, &name))?;
    Ok(Json(fence_check_response(&name, check)))
}

/// `GET /v1/semaphores?prefix=&limit=&cursor=`
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<SemaphoreListResponse>, ApiError> {
    let page = listed_page(&app, &caller, Space::Semaphore, &query).await?;
    Ok(Json(SemaphoreListResponse {
        semaphores: (page.locks.into_iter())
            .map(|entry| semaphore_status_response(&entry.name, entry.status))
            .collect(),
        next_cursor: page.next_cursor.map(|c| c.get().to_string()),
    }))
}

/// `DELETE /v1/semaphores/{name}`: frees every permit, wakes the waiters,
/// and writes an audit line as a lock's force release does.
pub async fn force_release(
    State(app): State<AppState>,
    caller: Caller,
    SemaphorePath(name): SemaphorePath,
) -> Result<Json<ForceReleaseResponse>, ApiError> {
    end_all(&app, &caller, &name).await.map(Json)
}
