//! Operator routes (`admin` scope): list held locks, force-release a lock.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use lockbroker_core::{Fence, ForceReleaseOutcome, ListCursor, ListLimit, ListRequest, LockPrefix};
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::extract::{LockPath, QueryParams};
use super::locks::StatusResponse;
use super::AppState;
use crate::auth::Caller;
use crate::metrics::Metrics;

/// Query of `GET /v1/locks`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    prefix: Option<String>,
    limit: Option<u64>,
    cursor: Option<String>,
}

/// One page of held locks.
#[derive(Serialize)]
pub struct ListResponse {
    locks: Vec<StatusResponse>,
    next_cursor: Option<String>,
}

/// The answer to a force release.
#[derive(Serialize)]
pub struct ForceReleaseResponse {
    name: String,
    released: bool,
    fence: Option<u64>,
    owner: Option<String>,
}

/// `GET /v1/locks?prefix=&limit=&cursor=`
pub async fn list(
    State(service): State<AppState>,
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
    let request = ListRequest {
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
    };
    let page = service.list(&request).await.map_err(ApiError::Store)?;
    Ok(Json(ListResponse {
        locks: page
            .locks
            .into_iter()
            .map(|entry| StatusResponse::new(&entry.name, entry.status))
            .collect(),
        next_cursor: page.next_cursor.map(|c| c.get().to_string()),
    }))
}

/// `DELETE /v1/locks/{name}`: ends whatever lease holds the lock, wakes its
/// waiters, and writes an audit line naming the key, the lock and the fence.
pub async fn force_release(
    State(service): State<AppState>,
    Extension(metrics): Extension<Arc<Metrics>>,
    caller: Caller,
    LockPath(name): LockPath,
) -> Result<Json<ForceReleaseResponse>, ApiError> {
    let outcome = service
        .force_release(&name)
        .await
        .map_err(|e| ApiError::Lock(name.clone(), e))?;
    let (fence, owner) = match outcome {
        ForceReleaseOutcome::Released { fence, owner } => (Some(fence), owner),
        ForceReleaseOutcome::NotHeld => (None, None),
    };
    if fence.is_some() {
        metrics.leases_held.dec();
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
