//! Session routes: open, keep alive, close and read a session. Its events
//! are [`super::events::session_events`]; leases join it through the
//! acquire routes' `session` field.

use axum::extract::State;
use axum::Json;
use lockbroker_api::{
    SessionClosedResponse, SessionLeaseRef, SessionOpenBody, SessionRenewalResponse,
    SessionResponse, SessionStatusResponse, SessionTokenBody,
};
use lockbroker_core::{EndedLease, LeaseEnd, SessionId, SessionRequest, SessionToken};

use super::error::{ApiError, Step};
use super::extract::{JsonBody, SessionPath};
use super::locks::in_step;
use super::AppState;
use crate::auth::{Caller, ANONYMOUS_ID};

/// `POST /v1/sessions`
pub async fn open(
    State(app): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody<SessionOpenBody>,
) -> Result<Json<SessionResponse>, ApiError> {
    let id = SessionId::generate();
    let name = id.lease_name();
    let request = SessionRequest {
        ttl_ms: body.ttl_ms,
        owner: body.owner,
        lock_delay_ms: body.lock_delay_ms,
        principal: caller.principal(),
    };
    let result = app.service.open_session(id, request).await;
    (app.metrics.sessions).step_finished("open", result.as_ref().map(|_| ()));
    let opened = result.map_err(in_step(Step::Acquire, &name))?;
    tracing::info!(session = %opened.id, ttl_ms = opened.ttl_ms, "session opened");
    Ok(Json(SessionResponse {
        id: opened.id.to_string(),
        token: opened.token.expose(),
        ttl_ms: opened.ttl_ms,
        expires_at_ms: opened.expires_at_ms,
        validity_ms: opened.validity_ms,
        lock_delay_ms: opened.lock_delay_ms,
        owner: opened.owner,
    }))
}

/// `POST /v1/sessions/{id}/keepalive`
pub async fn keepalive(
    State(app): State<AppState>,
    caller: Caller,
    SessionPath(id): SessionPath,
    JsonBody(body): JsonBody<SessionTokenBody>,
) -> Result<Json<SessionRenewalResponse>, ApiError> {
    let token = required_token(body)?;
    let name = id.lease_name();
    let result = app
        .service
        .keep_session(&id, &token, &caller.principal())
        .await;
    (app.metrics.sessions).step_finished("keepalive", result.as_ref().map(|_| ()));
    let kept = result.map_err(in_step(Step::Extend, &name))?;
    app.metrics.sessions.kept(kept.leases);
    Ok(Json(SessionRenewalResponse {
        id: id.to_string(),
        ttl_ms: kept.ttl_ms,
        expires_at_ms: kept.expires_at_ms,
        validity_ms: kept.validity_ms,
        leases: kept.leases,
        ended: kept.ended.iter().map(ended_lease).collect(),
    }))
}

/// `POST /v1/sessions/{id}/close`
pub async fn close(
    State(app): State<AppState>,
    SessionPath(id): SessionPath,
    JsonBody(body): JsonBody<SessionTokenBody>,
) -> Result<Json<SessionClosedResponse>, ApiError> {
    let token = required_token(body)?;
    let name = id.lease_name();
    let result = app.service.close_session(&id, &token).await;
    (app.metrics.sessions).step_finished("close", result.as_ref().map(|_| ()));
    let released = result.map_err(in_step(Step::Release, &name))?;
    tracing::info!(session = %id, leases_released = released, "session closed");
    Ok(Json(SessionClosedResponse {
        id: id.to_string(),
        closed: true,
        leases_released: released,
    }))
}

/// `GET /v1/sessions/{id}`
pub async fn status(
    State(app): State<AppState>,
    SessionPath(id): SessionPath,
) -> Result<Json<SessionStatusResponse>, ApiError> {
    let name = id.lease_name();
    let state = (app.service.session_state(&id).await).map_err(in_step(Step::Read, &name))?;
    Ok(Json(SessionStatusResponse {
        id: id.to_string(),
        open: state.open,
        owner: state.owner,
        expires_in_ms: state.expires_in_ms,
        ttl_ms: state.terms.map(|terms| terms.ttl.as_millis()),
        lock_delay_ms: state.terms.map(|terms| terms.lock_delay.as_millis()),
        leases: state.leases,
    }))
}

fn required_token(body: SessionTokenBody) -> Result<SessionToken, ApiError> {
    let token = body.token.ok_or_else(|| ApiError::BadBody {
        field: "token".into(),
        message: "is required".into(),
    })?;
    Ok(SessionToken::parse("token", &token)?)
}

/// A lease a keepalive found ended, as the answer names it.
fn ended_lease(ended: &EndedLease) -> SessionLeaseRef {
    let (reason, by) = match &ended.end {
        LeaseEnd::Released => ("released", None),
        LeaseEnd::ForceReleased { by } => ("force_released", Some(by)),
        LeaseEnd::MaxHoldExceeded => ("max_hold_exceeded", None),
        LeaseEnd::Lost => ("lost", None),
    };
    SessionLeaseRef {
        name: ended.name.as_str().to_owned(),
        space: ended.name.space().noun().to_owned(),
        reason: Some(reason.to_owned()),
        force_released_by: by.map(|by| {
            (if by.is_anonymous() {
                ANONYMOUS_ID
            } else {
                by.as_str()
            })
            .to_owned()
        }),
    }
}
