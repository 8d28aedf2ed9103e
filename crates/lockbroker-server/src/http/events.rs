//! Event streams (Server-Sent Events): a lock's changes, a semaphore's, or
//! every lock's under a prefix, each opened with the current `state`.
//!
//! A stream is fed by a task of its own from the broker's [`EventHub`]
//! through a short buffer: a reader that falls behind is told `lagged`, then
//! the current state, instead of being buffered for without bound.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};
use lockbroker_api::ListQuery;
use lockbroker_core::{
    Change, ListCursor, ListLimit, ListRequest, LockEvent, LockName, LockPrefix, LockStatus, Space,
    StreamTicket,
};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::error::{ApiError, Step};
use super::extract::{LockPath, QueryParams, SemaphorePath};
use super::views::{semaphore_status_response, status_response};
use super::AppState;
use crate::auth::Caller;
use crate::Service;

/// Events a stream holds for a reader before it counts as lagging.
const READER_BUFFER: usize = 64;
/// How often an idle stream sends a comment, for proxies that cut quiet
/// connections.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What one stream watches.
#[derive(Clone)]
enum Watched {
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
    headers: HeaderMap,
    LockPath(name): LockPath,
) -> Result<Response, ApiError> {
    open(app, Watched::Name(name), &headers).await
}

/// `GET /v1/semaphores/{name}/events`
pub async fn semaphore_events(
    State(app): State<AppState>,
    headers: HeaderMap,
    SemaphorePath(name): SemaphorePath,
) -> Result<Response, ApiError> {
    open(app, Watched::Name(name), &headers).await
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
    open(app, Watched::Prefix(prefix), &headers).await
}

/// Opens a stream of `watched`, resuming after `Last-Event-ID` when the
/// broker still has what followed it.
async fn open(app: AppState, watched: Watched, headers: &HeaderMap) -> Result<Response, ApiError> {
    let ticket = app
        .service
        .open_stream()
        .await
        .ok_or(ApiError::TooManyStreams)?;
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let replay = resume.and_then(|id| app.service.events().since(id));
    // The first events are read before the answer goes out: a store that
    // cannot answer is a 503 now rather than a stream that ends.
    let (mut last_id, first) = match replay {
        Some(events) => {
            let last = events.last().map_or(resume.unwrap_or(0), |e| e.id);
            let sent = (events.iter())
                .filter(|e| watched.matches(&e.change))
                .map(|e| change_event(e))
                .collect();
            (last, sent)
        }
        None => {
            let last = app.service.events().last_id();
            (last, state_events(&app.service, &watched, last).await?)
        }
    };
    let (sender, receiver) = mpsc::channel(READER_BUFFER);
    let service = Arc::clone(&app.service);
    tokio::spawn(async move {
        // The first events wait for the reader, however many a prefix has.
        for event in first {
            if sender.send(event).await.is_err() {
                return;
            }
        }
        feed(service, watched, ticket, sender, &mut last_id).await;
    });
    let body = stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.recv().await?;
        Some((Ok::<_, Infallible>(event), receiver))
    });
    Ok(sse(body).into_response())
}

fn sse(body: impl Stream<Item = Result<Event, Infallible>> + Send + 'static) -> Response {
    Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
        .into_response()
}

/// Passes the hub's events for `watched` to the reader until it goes away
/// or the broker shuts down; a reader that falls behind gets `lagged` and
/// the state again.
async fn feed(
    service: Arc<Service>,
    watched: Watched,
    mut ticket: StreamTicket,
    sender: mpsc::Sender<Event>,
    last_id: &mut u64,
) {
    let mut shutdown = service.shutdown_signal();
    // Events dropped since the reader last kept up.
    let mut missed: u64 = 0;
    loop {
        tokio::select! {
            received = ticket.events.recv() => match received {
                Ok(event) if event.id <= *last_id || !watched.matches(&event.change) => {}
                Ok(event) => {
                    *last_id = event.id;
                    if missed > 0 || sender.try_send(change_event(&event)).is_err() {
                        missed += 1;
                    }
                }
                Err(RecvError::Lagged(n)) => missed += n,
                Err(RecvError::Closed) => return,
            },
            // Once there is room again: `lagged`, then the state as it is.
            room = sender.reserve(), if missed > 0 => {
                let Ok(room) = room else {
                    return;
                };
                room.send(
                    Event::default()
                        .event("lagged")
                        .id(last_id.to_string())
                        .data(json!({ "missed": missed }).to_string()),
                );
                missed = 0;
                let Ok(state) = state_events(&service, &watched, *last_id).await else {
                    return;
                };
                for event in state {
                    if sender.send(event).await.is_err() {
                        return;
                    }
                }
            },
            () = stopping(&mut shutdown) => return,
            () = sender.closed() => return,
        }
    }
}

/// Completes when the broker begins to shut down.
async fn stopping(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}

/// The `state` events that open a stream: the name's state, or one per
/// held lock under the prefix, then a marker that the list is complete.
/// Each carries `id`, the last event before the state was read: a stream
/// resumed after it misses nothing that followed.
async fn state_events(
    service: &Service,
    watched: &Watched,
    id: u64,
) -> Result<Vec<Event>, ApiError> {
    match watched {
        Watched::Name(name) => {
            let status = (service.status(name).await)
                .map_err(|e| ApiError::Lock(Step::Read, name.clone(), e))?;
            service.events().learn(name, &status);
            Ok(vec![state_event(name, status, id)?])
        }
        Watched::Prefix(prefix) => {
            let mut request = ListRequest {
                space: Space::Lock,
                prefix: prefix.clone(),
                limit: ListLimit::parse(1_000).unwrap_or_default(),
                cursor: ListCursor::START,
            };
            let mut events = Vec::new();
            loop {
                let page = service.list(&request).await.map_err(ApiError::Store)?;
                for entry in page.locks {
                    service.events().learn(&entry.name, &entry.status);
                    events.push(state_event(&entry.name, entry.status, id)?);
                }
                match page.next_cursor {
                    Some(cursor) => request.cursor = cursor,
                    None => break,
                }
            }
            let done_data = json!({ "prefix": prefix.as_str(), "complete": true });
            let done = Event::default().event("state").id(id.to_string());
            events.push(done.data(done_data.to_string()));
            Ok(events)
        }
    }
}

/// The `state` event of `name`; an error rather than an empty event when
/// the state cannot be written.
fn state_event(name: &LockName, status: LockStatus, id: u64) -> Result<Event, ApiError> {
    let data = match name.space() {
        Space::Lock => serde_json::to_string(&status_response(name, status)),
        Space::Semaphore => serde_json::to_string(&semaphore_status_response(name, status)),
    };
    let data = data.map_err(|error| ApiError::Internal {
        event: "a state event could not be written",
        cause: error.to_string(),
    })?;
    Ok(Event::default()
        .event("state")
        .id(id.to_string())
        .data(data))
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
