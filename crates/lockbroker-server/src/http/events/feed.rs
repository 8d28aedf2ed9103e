//! One stream's events, made as its reader takes them: a resume's missed
//! events, or the opening state one listing page at a time, then the
//! changes as they come.
//!
//! Nothing is made ahead of the reader: the next page is read only once the
//! reader has taken the last one, so a stream holds at most one page and
//! one change, however many locks its prefix has and however long its
//! reader stalls. Changes that happen while the pages are read are not
//! lost: the hub keeps them for the stream, and each goes out at its place
//! (see [`Feed::next`]).

use std::collections::VecDeque;
use std::sync::Arc;

use axum::response::sse::Event;
use lockbroker_core::{
    ListCursor, ListLimit, ListRequest, LockEvent, LockName, LockStatus, Space, StreamTicket,
};
use serde_json::json;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{watch, Semaphore};

use super::admission::StreamPass;
use super::{change_event, state_event, Watched};
use crate::http::error::{ApiError, Step};
use crate::Service;

/// Keys one page of a prefix's opening state visits: what bounds the states
/// a stream holds at once.
pub const STATE_PAGE: u64 = 100;

/// One page of the opening state.
pub struct StatePage {
    /// The hub's last event id before the page was read: the page shows
    /// every change up to it, and perhaps some after.
    as_of: u64,
    /// The names and their states, as read.
    entries: VecDeque<(LockName, LockStatus)>,
    /// Where the next page starts; `None` once this is the last.
    next: Option<ListCursor>,
}

/// Reads the page of `watched`'s opening state at `cursor`, and keeps the
/// expiries of the leases it shows.
pub async fn read_page(
    service: &Service,
    watched: &Watched,
    cursor: ListCursor,
) -> Result<StatePage, ApiError> {
    let as_of = service.events().last_id();
    let (entries, next) = match watched {
        Watched::Name(name) => {
            let status = (service.status(name).await)
                .map_err(|e| ApiError::Lock(Step::Read, name.clone(), e))?;
            (VecDeque::from([(name.clone(), status)]), None)
        }
        Watched::Prefix(prefix) => {
            let request = ListRequest {
                space: Space::Lock,
                prefix: prefix.clone(),
                limit: ListLimit::parse(STATE_PAGE).unwrap_or_default(),
                cursor,
            };
            let page = (service.read_page(&request).await).map_err(ApiError::Store)?;
            let entries = page.locks.into_iter().map(|e| (e.name, e.status));
            (entries.collect(), page.next_cursor)
        }
    };
    for (name, status) in &entries {
        service.events().learn(name, status);
    }
    Ok(StatePage {
        as_of,
        entries,
        next,
    })
}

/// What a stream sends next.
enum Phase {
    /// A resume's missed events, oldest first.
    Replay(VecDeque<Arc<LockEvent>>),
    /// The opening state: the page being sent (`None` before the first).
    State(Option<StatePage>),
    /// Changes as they come.
    Live,
}

/// One stream's source of events; [`Feed::next`] makes each.
pub struct Feed {
    service: Arc<Service>,
    watched: Watched,
    ticket: StreamTicket,
    state_reads: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
    _pass: StreamPass,
    phase: Phase,
    /// The id of the last change sent or skipped.
    last_id: u64,
    /// A change taken from the hub that is newer than the page being sent,
    /// to go out after its states.
    held: Option<Arc<LockEvent>>,
}

/// What a [`Feed`] starts from.
pub enum Start {
    /// A resume after `after`: the events that followed it.
    Resume {
        /// The id the reader resumes after.
        after: u64,
        /// What followed it.
        events: Vec<Arc<LockEvent>>,
    },
    /// A fresh opening state, its first page read.
    Opening(StatePage),
}

/// Everything a [`Feed`] is made of but where it starts.
pub struct FeedParts {
    /// The service the states are read from.
    pub service: Arc<Service>,
    /// What the stream watches.
    pub watched: Watched,
    /// The stream's place among the broker's streams.
    pub ticket: StreamTicket,
    /// Its place in its key's share.
    pub pass: StreamPass,
    /// The permits for reading pages.
    pub state_reads: Arc<Semaphore>,
}

impl Feed {
    /// A feed that starts at `start`.
    pub fn new(parts: FeedParts, start: Start) -> Self {
        let shutdown = parts.service.shutdown_signal();
        let (phase, last_id) = match start {
            Start::Resume { after, events } => {
                let last = events.last().map_or(after, |e| e.id);
                (Phase::Replay(events.into()), last)
            }
            // Every change the first page shows is skipped: the states the
            // opening sends all show it.
            Start::Opening(page) => {
                let last = page.as_of;
                (Phase::State(Some(page)), last)
            }
        };
        Self {
            service: parts.service,
            watched: parts.watched,
            ticket: parts.ticket,
            state_reads: parts.state_reads,
            shutdown,
            _pass: parts.pass,
            phase,
            last_id,
            held: None,
        }
    }

    /// The next event, once the reader wants it; `None` ends the stream
    /// (the reader went away, the broker shuts down, or the store failed a
    /// page).
    ///
    /// The order is the order of the changes: a page's states go out after
    /// every change up to the page's `as_of` and before every later change,
    /// so a state never overrides a newer change, and a change after a
    /// state may only repeat what the state shows.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if *self.shutdown.borrow() {
                return None;
            }
            match &mut self.phase {
                Phase::Replay(events) => match events.pop_front() {
                    Some(event) if self.watched.matches(&event.change) => {
                        return Some(change_event(&event));
                    }
                    Some(_) => {}
                    None => self.phase = Phase::Live,
                },
                Phase::State(None) => match self.read_page(ListCursor::START).await {
                    Ok(page) => {
                        self.last_id = self.last_id.max(page.as_of);
                        self.phase = Phase::State(Some(page));
                    }
                    Err(_) => return None,
                },
                Phase::State(Some(page)) => {
                    let as_of = page.as_of;
                    if self.last_id < as_of {
                        // The changes the page shows go out before it.
                        match self.catch_up(as_of) {
                            Ok(Some(event)) => return Some(event),
                            Ok(None) => continue,
                            Err(missed) => return Some(self.lagged(missed)),
                        }
                    }
                    let Phase::State(Some(page)) = &mut self.phase else {
                        continue;
                    };
                    if let Some((name, status)) = page.entries.pop_front() {
                        return self.state(&name, status);
                    }
                    match page.next.take() {
                        Some(cursor) => match self.read_page(cursor).await {
                            Ok(next) => self.phase = Phase::State(Some(next)),
                            Err(_) => return None,
                        },
                        None => {
                            self.phase = Phase::Live;
                            if let Watched::Prefix(prefix) = &self.watched {
                                let done = json!({ "prefix": prefix.as_str(), "complete": true });
                                let marker = Event::default().event("state");
                                let marker = marker.id(self.last_id.to_string());
                                return Some(marker.data(done.to_string()));
                            }
                        }
                    }
                }
                Phase::Live => {
                    let received = match self.held.take() {
                        Some(event) => Ok(event),
                        None => tokio::select! {
                            received = self.ticket.events.recv() => received,
                            () = stopping(&mut self.shutdown) => return None,
                        },
                    };
                    match received {
                        Ok(event) if event.id <= self.last_id => {}
                        Ok(event) => {
                            self.last_id = event.id;
                            if self.watched.matches(&event.change) {
                                return Some(change_event(&event));
                            }
                        }
                        Err(RecvError::Lagged(missed)) => return Some(self.lagged(missed)),
                        Err(RecvError::Closed) => return None,
                    }
                }
            }
        }
    }

    /// Takes the next change up to `as_of` off the hub: `Some` to send;
    /// `None` when there was nothing to send (the stream has caught up once
    /// `last_id` reaches `as_of`); `Err` with the count of changes missed.
    fn catch_up(&mut self, as_of: u64) -> Result<Option<Event>, u64> {
        let taken = match self.held.take() {
            Some(event) => Ok(event),
            None => self.ticket.events.try_recv(),
        };
        match taken {
            Ok(event) if event.id > as_of => {
                self.held = Some(event);
                self.last_id = as_of;
            }
            Ok(event) if event.id > self.last_id => {
                self.last_id = event.id;
                if self.watched.matches(&event.change) {
                    return Ok(Some(change_event(&event)));
                }
            }
            Ok(_) => {}
            // Every change up to `as_of` was in the receiver when the page
            // was read (the hub numbers and sends under one lock).
            Err(TryRecvError::Empty | TryRecvError::Closed) => self.last_id = as_of,
            Err(TryRecvError::Lagged(missed)) => return Err(missed),
        }
        Ok(None)
    }

    /// A state of the opening: a name's carries the id it is as of, so a
    /// resume after it misses nothing; a prefix's carry none until the
    /// marker that ends the list, so a resume never skips the rest of it.
    fn state(&self, name: &LockName, status: LockStatus) -> Option<Event> {
        let event = state_event(name, status)?;
        Some(match self.watched {
            Watched::Name(_) => event.id(self.last_id.to_string()),
            Watched::Prefix(_) => event,
        })
    }

    /// `lagged`, and a fresh opening state to follow.
    fn lagged(&mut self, missed: u64) -> Event {
        self.held = None;
        self.phase = Phase::State(None);
        Event::default()
            .event("lagged")
            .data(json!({ "missed": missed }).to_string())
    }

    /// Reads a page once a permit is free: the stream is open already, so
    /// it waits its turn rather than being refused.
    async fn read_page(&mut self, cursor: ListCursor) -> Result<StatePage, ApiError> {
        let _permit = tokio::select! {
            permit = Arc::clone(&self.state_reads).acquire_owned() => permit,
            () = stopping(&mut self.shutdown) => return Err(ApiError::ShuttingDown),
        };
        read_page(&self.service, &self.watched, cursor).await
    }
}

/// Completes when the broker begins to shut down.
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}
