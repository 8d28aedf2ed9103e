//! Operator routes (`admin` scope): list held locks, force-release a lock;
//! the semaphore routes share both.

use axum::extract::State;
use axum::Json;
use lockbroker_api::{ForceReleaseResponse, ListQuery, ListResponse};
use lockbroker_core::{
    Fence, ForceReleaseOutcome, ListCursor, ListLimit, ListRequest, LockName, LockPage, LockPrefix,
    Space,
};

use super::error::{ApiError, Step};
use super::extract::{LockPath, QueryParams};
use super::views::status_response;
use super::AppState;
use crate::auth::Caller;

/// `GET /v1/locks?prefix=&limit=&cursor=`
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<ListResponse>, ApiError> {
    let page = listed_page(&app, &caller, Space::Lock, &query).await?;
    Ok(Json(list_response(page)))
}

/// One page of the held names of `space` that `query` asks for, if the
/// caller may list under its prefix.
pub(super) async fn listed_page(
    app: &AppState,
    caller: &Caller,
    space: Space,
    query: &ListQuery,
) -> Result<LockPage, ApiError> {
    let prefix = LockPrefix::parse("prefix", query.prefix.as_deref().unwrap_or(""))?;
    if !caller.may_list(&prefix) {
        return Err(ApiError::Forbidden(format!(
            "this API key may not list {}s under {:?}",
            space.noun(),
            prefix.as_str()
        )));
    }
    let request = list_request(space, prefix, query)?;
    app.service.list(&request).await.map_err(ApiError::Store)
}

/// The rest of the listing's query, checked once the prefix is allowed.
fn list_request(
    space: Space,
    prefix: LockPrefix,
    query: &ListQuery,
) -> Result<ListRequest, ApiError> {
    Ok(ListRequest {
        space,
        prefix,
        limit: query
            .limit
            .map(ListLimit::parse)
            .transpose()?
            .unwrap_or_default(),
        cursor: query
            .cursor
            .as_deref()
            .map(ListCursor::parse)
            .transpose()?
            .unwrap_or(ListCursor::START),
    })
}

fn list_response(page: LockPage) -> ListResponse {
    ListResponse {
        locks: page
            .locks
            .into_iter()
            .map(|entry| status_response(&entry.name, entry.status))
            .collect(),
        next_cursor: page.next_cursor.map(|c| c.get().to_string()),
    }
}

/// `DELETE /v1/locks/{name}`: ends every lease that holds the lock, wakes
/// its waiters, and writes an audit line naming the key, the lock and the
/// fence.
pub async fn force_release(
    State(app): State<AppState>,
    caller: Caller,
    LockPath(name): LockPath,
) -> Result<Json<ForceReleaseResponse>, ApiError> {
    end_all(&app, &caller, &name).await.map(Json)
}

/// Ends every lease of `name` for the operator `caller`, with its audit line.
pub(super) async fn end_all(
    app: &AppState,
    caller: &Caller,
    name: &LockName,
) -> Result<ForceReleaseResponse, ApiError> {
    let outcome = app
        .service
        .force_release(name, &caller.principal())
        .await
        .map_err(|e| ApiError::Lock(Step::ForceRelease, name.clone(), e))?;
    let (fence, owner, leases_ended) = match outcome {
        ForceReleaseOutcome::Released {
            fence,
            owner,
            leases_ended,
            ..
        } => (Some(fence), owner, leases_ended),
        ForceReleaseOutcome::NotHeld => (None, None, 0),
    };
    app.metrics
        .leases_held
        .sub(i64::try_from(leases_ended).unwrap_or(i64::MAX));
    tracing::info!(
        target: "lockbroker::audit",
        key = caller.id(),
        space = name.space().noun(),
        lock = %name,
        fence = fence.map(Fence::get),
        holder = owner.as_deref(),
        leases_ended,
        released = fence.is_some(),
        "force release"
    );
    Ok(ForceReleaseResponse {
        name: name.to_string(),
        released: fence.is_some(),
        fence: fence.map(Fence::get),
        owner,
        leases_ended,
    })
}
