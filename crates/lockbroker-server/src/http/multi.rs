//! Routes over several locks at once: all-or-nothing acquire, and release
//! of several leases in one request.

use std::time::Instant;

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use lockbroker_api::{
    AcquireAllBody, AcquireAllResponse, AcquireBody, LeaseRefBody, LockAskBody, ReleaseAllBody,
    ReleaseAllResponse, ReleaseAllResult,
};
use lockbroker_core::{LeaseKind, LeaseToken, LockAsk, LockError, LockName, MAX_LOCKS_PER_ACQUIRE};

use super::delivery;
use super::error::{ApiError, Step};
use super::extract::JsonBody;
use super::locks::{acquire_request, lease_kind, release_lease};
use super::views::lease_response;
use super::AppState;
use crate::auth::Caller;

/// `POST /v1/locks/acquire-all`
pub async fn acquire_all(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<AcquireAllBody>,
) -> Result<Response, ApiError> {
    let (asks, places) = lock_asks(body.locks, &caller)?;
    // What every lease asks for; each lock's own mode is in its ask.
    let each = AcquireBody {
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        owner: body.owner,
        request_id: body.request_id,
        lock_delay_ms: body.lock_delay_ms,
        fair: None,
        session: body.session,
        mode: None,
    };
    let request = acquire_request(each, &caller);
    let started = Instant::now();
    let waits = request.wait_ms.is_some_and(|ms| ms > 0);
    let result = app.service.acquire_all(&asks, request).await;
    let waited = waits.then(|| started.elapsed());
    let grants = match result {
        Ok(grants) => grants,
        Err(failed) => {
            let Some(name) = failed.name else {
                return Err(match failed.error {
                    LockError::Invalid(error) => ApiError::Invalid(error),
                    other => ApiError::Lock(Step::Acquire, asks[0].name.clone(), other),
                });
            };
            let kind = asks
                .iter()
                .find(|ask| ask.name == name)
                .map_or(LeaseKind::Exclusive, |ask| ask.kind);
            app.metrics
                .acquire_finished(&name, kind, Err(&failed.error), waited);
            let error = ApiError::Lock(Step::Acquire, name.clone(), failed.error);
            return Err(ApiError::AllOrNothing(name, Box::new(error)));
        }
    };
    for grant in &grants {
        let lease = grant.lease();
        let kind = lease.token.kind();
        app.metrics
            .acquire_finished(&lease.name, kind, Ok(()), waited);
        tracing::info!(lock = %lease.name, kind = kind.as_str(), fence = %lease.fence, "lease granted");
    }
    delivery::grants_answer(grants, |leases| {
        serde_json::to_vec(&AcquireAllResponse {
            leases: places
                .iter()
                .map(|at| lease_response(leases[*at]))
                .collect(),
        })
    })
}

/// `POST /v1/locks/release-all`: releases each lease as a release of it
/// alone would, and answers what became of each.
pub async fn release_all(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<ReleaseAllBody>,
) -> Result<Json<ReleaseAllResponse>, ApiError> {
    let leases = body.leases.ok_or_else(|| required("leases"))?;
    if leases.is_empty() || leases.len() > MAX_LOCKS_PER_ACQUIRE {
        return Err(ApiError::BadBody {
            field: "leases".into(),
            message: format!("name 1 to {MAX_LOCKS_PER_ACQUIRE} leases"),
        });
    }
    let mut checked = Vec::with_capacity(leases.len());
    for (at, LeaseRefBody { name, token }) in leases.into_iter().enumerate() {
        let field = format!("leases[{at}].name");
        let name = lock_name(name, &field, &caller)?;
        let field = format!("leases[{at}].token");
        let raw = token.ok_or_else(|| required(&field))?;
        let token = LeaseToken::parse(&raw).map_err(|error| ApiError::BadBody {
            field: field.clone(),
            message: error.message.into_owned(),
        })?;
        if token.kind() == LeaseKind::Permit {
            return Err(ApiError::BadBody {
                field,
                message: "is a semaphore permit's token; release it at \
                          /v1/semaphores/{name}/release"
                    .into(),
            });
        }
        checked.push((name, raw));
    }
    let mut results = Vec::with_capacity(checked.len());
    for (name, token) in checked {
        let body = lockbroker_api::ReleaseBody::new(token);
        results.push(match release_lease(&app, &name, body).await {
            Ok(released) => ReleaseAllResult {
                name: released.name,
                released: true,
                fence: Some(released.fence),
                error: None,
            },
            Err(error) => ReleaseAllResult {
                name: name.to_string(),
                released: false,
                fence: None,
                error: Some(error.into_detail()),
            },
        });
    }
    Ok(Json(ReleaseAllResponse { results }))
}

/// The checked locks of an all-or-nothing acquire, each one the caller's
/// key may touch, and for each lock asked (in the order asked) its place
/// among them: a lock named twice is one lock, taken once, exclusively if
/// either place asks so, and its lease is answered at both places.
fn lock_asks(
    locks: Option<Vec<LockAskBody>>,
    caller: &Caller,
) -> Result<(Vec<LockAsk>, Vec<usize>), ApiError> {
    let locks = locks.ok_or_else(|| required("locks"))?;
    if locks.is_empty() || locks.len() > MAX_LOCKS_PER_ACQUIRE {
        return Err(ApiError::BadBody {
            field: "locks".into(),
            message: format!("name 1 to {MAX_LOCKS_PER_ACQUIRE} locks"),
        });
    }
    let mut asks: Vec<LockAsk> = Vec::with_capacity(locks.len());
    let mut places = Vec::with_capacity(locks.len());
    for (at, LockAskBody { name, mode }) in locks.into_iter().enumerate() {
        let name = lock_name(name, &format!("locks[{at}].name"), caller)?;
        let kind = lease_kind(mode);
        match asks.iter().position(|ask| ask.name == name) {
            Some(place) => {
                if kind == LeaseKind::Exclusive {
                    asks[place].kind = kind;
                }
                places.push(place);
            }
            None => {
                places.push(asks.len());
                asks.push(LockAsk { name, kind });
            }
        }
    }
    Ok((asks, places))
}

/// The lock named in `field`, which the caller's key must be allowed to touch.
fn lock_name(name: Option<String>, field: &str, caller: &Caller) -> Result<LockName, ApiError> {
    let raw = name.ok_or_else(|| required(field))?;
    let name = LockName::parse(&raw).map_err(|error| ApiError::BadBody {
        field: field.to_owned(),
        message: error.message.into_owned(),
    })?;
    if !caller.may_touch(&name) {
        return Err(ApiError::Forbidden(format!(
            "this API key may not touch lock {name:?}"
        )));
    }
    Ok(name)
}

fn required(field: &str) -> ApiError {
    ApiError::BadBody {
        field: field.to_owned(),
        message: "is required".into(),
    }
}
