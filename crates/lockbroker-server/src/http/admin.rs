//! Operator routes (`admin` scope): list held locks, force-release a lock.

use axum::extract::State;
use axum::Json;
use lockbroker_api::{ForceReleaseResponse, ListQuery, ListResponse};
use lockbroker_core::{
    Fence, ForceReleaseOutcome, ListCursor, ListLimit, ListRequest, LockPage, LockPrefix,
};

use super::error::ApiError;
use super::extract::{LockPath, QueryParams};
use super::locks::status_response;
use super::AppState;
use crate::auth::Caller;

/// `GET /v1/locks?prefix=&limit=&cursor=`
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<ListResponse>, ApiError> {
    let prefix = LockPrefix::parse("prefix", query.prefix.as_deref().unwrap_or(""))?;
    if !caller.may_list(&prefix) {
        return Err(ApiError::Forbidden(format!(
            "this API key may not list locks under {:?}",
            prefix.as_str()
        )));
    }
    let request = list_request(prefix, &query)?;
    let page = app.service.list(&request).await.map_err(ApiError::Store)?;
    Ok(Json(list_response(page)))
}

/// The rest of the listing's query, checked once the prefix is allowed.
fn list_request(prefix: LockPrefix, query: &ListQuery) -> Result<ListRequest, ApiError> {
    Ok(ListRequest {
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

/// `DELETE /v1/locks/{name}`: ends whatever lease holds the lock, wakes its
/// waiters, and writes an audit line naming the key, the lock and the fence.
pub async fn force_release(
    State(app): State<AppState>,
    caller: Caller,
    LockPath(name): LockPath,
) -> Result<Json<ForceReleaseResponse>, ApiError> {
    let outcome = app
        .service
        .force_release(&name)
        .await
        .map_err(|e| ApiError::Lock(name.clone(), e))?;
    let (fence, owner) = match outcome {
        ForceReleaseOutcome::Released { fence, owner } => (Some(fence), owner),
        ForceReleaseOutcome::NotHeld => (None, None),
    };
    if fence.is_some() {
        app.metrics.leases_held.dec();
    }
    tracing::info!(
        target: "lockbroker::audit",
        key = caller.id(),
        lock = %name,
        fence = fence.map(Fence::get),
        holder = owner.as_deref(),
        released = fence.is_some(),
        "force release"
    );
    Ok(Json(ForceReleaseResponse {
        name: name.to_string(),
        released: fence.is_some(),
        fence: fence.map(Fence::get),
        owner,
    }))
}
