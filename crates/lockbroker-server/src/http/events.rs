//! Event streams (Server-Sent Events): a lock's changes, a semaphore's, or
//! every lock's under a prefix, each opened with the current `state`.
//!
//! Each stream's events are made as its reader takes them ([`feed`]): the
//! opening state one page at a time, then the changes from the broker's
//! [`lockbroker_core::EventHub`]. A reader that falls behind is told
//! `lagged`, then the current state, instead of being buffered for without
//! bound. Who may open one is [`admission`]'s to say.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use lockbroker_api::ListQuery;
use lockbroker_core::{Change, ListCursor, LockEvent, LockName, LockPrefix, LockStatus, Space};
use serde_json::json;

use super::error::{ApiError, StreamLimit};
use super::extract::{LockPath, QueryParams, SemaphorePath, SessionPath};
use super::views::{semaphore_status_response, status_response};
use super::AppState;
use crate::auth::Caller;

mod admission;
mod feed;

pub use admission::{StreamAdmission, StreamPass};
use feed::{Feed, FeedParts, Start};

/// How often an idle stream sends a comment, for proxies that cut quiet
/// connections.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What one stream watches.
#[derive(Clone)]
pub enum Watched {
    /// One lock or semaphore.
    Name(LockName),
    /// Every lock whose name starts with this.
    Prefix(LockPrefix),
}

impl Watched {
    fn matches(&self, change: &Change) -> bool {
        match self {
            Self::Name(name) => change.name == *name,
            Self::Prefix(prefix) => {
                change.name.space() == Space::Lock && prefix.matches(&change.name)
            }
        }
    }
}

/// `GET /v1/locks/{name}/events`
pub async fn lock_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    LockPath(name): LockPath,
) -> Result<Response, ApiError> {
    open(app, &caller, Watched::Name(name), &headers).await
}

/// `GET /v1/sessions/{id}/events`: the session's own lease, told as a
/// lock's is (`acquired` when it opened, `extended` at each keepalive,
/// `released` when it closed, `expired`).
pub async fn session_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    SessionPath(id): SessionPath,
) -> Result<Response, ApiError> {
    open(app, &caller, Watched::Name(id.lease_name()), &headers).await
}

/// `GET /v1/semaphores/{name}/events`
pub async fn semaphore_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    SemaphorePath(name): SemaphorePath,
) -> Result<Response, ApiError> {
    open(app, &caller, Watched::Name(name), &headers).await
}

/// `GET /v1/events?prefix=`
pub async fn prefix_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Response, ApiError> {
    let prefix = LockPrefix::parse("prefix", query.prefix.as_deref().unwrap_or(""))?;
    if !caller.may_list(&prefix) {
        return Err(ApiError::Forbidden(format!(
            "this API key may not watch locks under {:?}",
            prefix.as_str()
        )));
    }
    open(app, &caller, Watched::Prefix(prefix), &headers).await
}

/// Opens a stream of `watched`, resuming after `Last-Event-ID` when the
/// broker still has what followed it.
async fn open(
    app: AppState,
    caller: &Caller,
    watched: Watched,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let pass = app.streams.admit(caller, app.service.events().streams())?;
    let ticket =
        (app.service.open_stream().await).ok_or(ApiError::TooManyStreams(StreamLimit::Broker))?;
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let replay = resume.and_then(|id| app.service.events().since(id).map(|events| (id, events)));
    let start = match replay {
        Some((after, events)) => Start::Resume { after, events },
        // The first page is read before the answer goes out: a store that
        // cannot answer is a 503 now rather than a stream that ends.
        None => {
            let _permit = app.streams.try_read_state()?;
            Start::Opening(feed::read_page(&app.service, &watched, ListCursor::START).await?)
        }
    };
    let parts = FeedParts {
        service: Arc::clone(&app.service),
        watched,
        ticket,
        pass,
        state_reads: app.streams.state_reads(),
    };
    let body = stream::unfold(Feed::new(parts, start), |mut feed| async move {
        let event = feed.next().await?;
        Some((Ok::<_, Infallible>(event), feed))
    });
    Ok(Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response())
}

/// A `state` event: the status of `name`, as its own route answers it.
///
/// `None` when the state cannot be written: the stream then ends, rather
/// than tell an empty state (the cause is logged).
fn state_event(name: &LockName, status: LockStatus) -> Option<Event> {
    let data = match name.space() {
        Space::Lock | Space::Session => serde_json::to_string(&status_response(name, status)),
        Space::Semaphore => serde_json::to_string(&semaphore_status_response(name, status)),
    };
    match data {
        Ok(data) => Some(Event::default().event("state").data(data)),
        Err(error) => {
            tracing::error!(%error, "a state event could not be written; the stream ends");
            None
        }
    }
}

/// A change as a stream tells it: never a token.
fn change_event(event: &LockEvent) -> Event {
    let change = &event.change;
    let data = json!({
        "name": change.name.as_str(),
        "type": change.kind.as_str(),
        "mode": change.mode.as_str(),
        "fence": change.fence.get(),
        "owner": change.owner,
        "expires_in_ms": change.expires_in_ms,
        "expires_at_ms": change.expires_at_ms,
    });
    Event::default()
        .event(change.kind.as_str())
        .id(event.id.to_string())
        .data(data.to_string())
}
