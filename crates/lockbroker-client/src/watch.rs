//! Watching: [`Watch`], a [`Stream`] of typed [`Event`]s read from a lock's,
//! a semaphore's, or a prefix's Server-Sent Events, opened again after a
//! disconnect with `Last-Event-ID`.
//!
//! The broker resumes after the last id it still has, or starts again with a
//! fresh `state` when it cannot (another broker, or one restarted). Changes a
//! resume repeats are left out. A dropped or silent stream, `429
//! too_many_streams`, `503` and an unreachable broker are retried with
//! growing pauses; any other refusal ends the stream with its error.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use lockbroker_api::{SemaphoreStatusResponse, StatusResponse};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Deserialize;

use crate::client::{encode, retry_after, route, Client, Family};
use crate::error::Error;
use lockbroker_api::sse::{Message, Parser};

/// The broker sends a keep-alive every 15 s: silent for longer than this,
/// a stream is taken for dropped.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(45);
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const LONGEST_PAUSE: Duration = Duration::from_secs(15);

/// One event of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The event's `id`, when it has one: what a resume starts after.
    pub id: Option<String>,
    /// What happened.
    pub kind: EventKind,
}

/// What an [`Event`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A lock's whole state: first, after `lagged`, and after a resume that
    /// was not possible. It replaces what the reader knew of the lock.
    State(StatusResponse),
    /// A semaphore's whole state, likewise.
    SemaphoreState(SemaphoreStatusResponse),
    /// A prefix stream's marker after one `State` per held lock.
    StateComplete {
        /// The prefix watched.
        prefix: String,
    },
    /// One change to one lease.
    Change(Change),
    /// The reader fell behind by `missed` events; a fresh state follows.
    Lagged {
        /// How many events it will not get.
        missed: u64,
    },
}

/// One change to one lease (`LockEvent` in the spec). Never a token.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Change {
    /// The lock or semaphore.
    pub name: String,
    /// What happened.
    #[serde(rename = "type")]
    pub kind: ChangeKind,
    /// `exclusive`, `shared` or `permit`.
    pub mode: String,
    /// The lease's fence.
    pub fence: u64,
    /// The holder's label.
    pub owner: Option<String>,
    /// How long the lease stays valid from the change (0 once it ended).
    pub expires_in_ms: u64,
    /// When it expires, in Unix ms of the Redis clock, if known.
    pub expires_at_ms: Option<u64>,
}

/// The kinds of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Granted.
    Acquired,
    /// Its TTL set anew.
    Extended,
    /// Given back by its holder.
    Released,
    /// Ran out unreleased.
    Expired,
    /// Ended by an operator.
    ForceReleased,
}

/// How to open a watch.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Resume after this id (from [`Watch::last_event_id`] of an earlier watch).
    pub last_event_id: Option<String>,
    /// A stream silent this long is opened again.
    pub idle_timeout: Duration,
}

impl Default for WatchOptions {
    fn default() -> Self {
        Self {
            last_event_id: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    Lock,
    Semaphore,
    Prefix,
}

/// A stream of [`Event`]s that goes on until dropped, or until a refusal
/// that retrying cannot change (then its error is the last item).
pub struct Watch {
    inner: Pin<Box<dyn Stream<Item = Result<Event, Error>> + Send>>,
    last_id: Arc<Mutex<Option<String>>>,
}

impl Watch {
    /// The id of the last event received: pass it as
    /// [`WatchOptions::last_event_id`] to resume later.
    pub fn last_event_id(&self) -> Option<String> {
        self.last_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Stream for Watch {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Client {
    /// `GET /v1/locks/{name}/events`: the lock's changes as they happen.
    pub fn watch(&self, name: &str) -> Watch {
        self.watch_with(name, WatchOptions::default())
    }

    /// [`Client::watch`] with options, e.g. to resume after an id.
    pub fn watch_with(&self, name: &str, options: WatchOptions) -> Watch {
        self.open_watch(
            route(Family::Locks, name, "/events"),
            Watched::Lock,
            options,
        )
    }

    /// `GET /v1/semaphores/{name}/events`.
    pub fn watch_semaphore(&self, name: &str, options: WatchOptions) -> Watch {
        let path = route(Family::Semaphores, name, "/events");
        self.open_watch(path, Watched::Semaphore, options)
    }

    /// `GET /v1/events?prefix=`: every lock whose name starts with `prefix`
    /// (`""`: every lock).
    pub fn watch_prefix(&self, prefix: &str, options: WatchOptions) -> Watch {
        let path = format!("/v1/events?prefix={}", encode(prefix));
        self.open_watch(path, Watched::Prefix, options)
    }

    fn open_watch(&self, path: String, watched: Watched, options: WatchOptions) -> Watch {
        let last_id = Arc::new(Mutex::new(options.last_event_id.clone()));
        let reader = Reader {
            client: self.clone(),
            path,
            watched,
            idle_timeout: options.idle_timeout,
            last_id: Arc::clone(&last_id),
            newest: options.last_event_id.as_deref().and_then(number),
            response: None,
            parser: Parser::default(),
            ready: VecDeque::new(),
            failures: 0,
            done: false,
        };
        let inner = futures_util::stream::unfold(reader, |mut reader| async move {
            let item = reader.next().await?;
            Some((item, reader))
        });
        Watch {
            inner: Box::pin(inner),
            last_id,
        }
    }
}

/// The state of one watch between events.
struct Reader {
    client: Client,
    path: String,
    watched: Watched,
    idle_timeout: Duration,
    last_id: Arc<Mutex<Option<String>>>,
    /// The largest change id since the last state: a resume's repeats are
    /// at or below it.
    newest: Option<u64>,
    response: Option<reqwest::Response>,
    parser: Parser,
    ready: VecDeque<Message>,
    failures: u32,
    done: bool,
}

impl Reader {
    async fn next(&mut self) -> Option<Result<Event, Error>> {
        loop {
            if self.done {
                return None;
            }
            if let Some(message) = self.ready.pop_front() {
                match self.decode(message) {
                    Ok(Some(event)) => return Some(Ok(event)),
                    Ok(None) => continue,
                    Err(error) => return Some(Err(error)),
                }
            }
            let Some(response) = self.response.as_mut() else {
                match self.open().await {
                    Ok(response) => self.response = Some(response),
                    Err(error) if error.is_transient() => self.pause(&error).await,
                    Err(error) => {
                        self.done = true;
                        return Some(Err(error));
                    }
                }
                continue;
            };
            match tokio::time::timeout(self.idle_timeout, response.chunk()).await {
                Ok(Ok(Some(bytes))) => {
                    self.failures = 0;
                    let messages = self.parser.feed(&bytes);
                    self.ready.extend(messages);
                }
                // Ended, broken or silent: open it again after the last id.
                _ => {
                    self.response = None;
                    self.parser = Parser::default();
                    let dropped = Error::Transport {
                        kind: crate::error::TransportKind::Other,
                        message: "the event stream ended".into(),
                    };
                    self.pause(&dropped).await;
                }
            }
        }
    }

    /// Opens the stream, sending the last id seen.
    async fn open(&self) -> Result<reqwest::Response, Error> {
        let url = format!("{}{}", self.client.inner.base, self.path);
        let mut request = self
            .client
            .inner
            .http
            .get(url)
            .header(ACCEPT, "text/event-stream");
        let last = self
            .last_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(id) = last.filter(|id| id.bytes().all(|b| b.is_ascii_graphic())) {
            request = request.header("last-event-id", id);
        }
        // No timeout on the whole exchange, which would end the stream; only
        // on its head.
        let sent = tokio::time::timeout(self.client.inner.timeout, request.send()).await;
        let response = match sent {
            Ok(sent) => sent.map_err(Error::transport)?,
            Err(_) => {
                return Err(Error::Transport {
                    kind: crate::error::TransportKind::Timeout,
                    message: "timed out".into(),
                })
            }
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let body = response.bytes().await.map_err(Error::transport)?;
            return Err(Error::from_answer(status.as_u16(), retry_after, &body));
        }
        let is_stream = (response.headers().get(CONTENT_TYPE))
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !is_stream {
            return Err(Error::Protocol {
                message: format!("HTTP {} is not an event stream", status.as_u16()),
            });
        }
        Ok(response)
    }

    /// Waits before opening again: 0.25 s doubling to 15 s, with jitter,
    /// never shorter than a `Retry-After`.
    async fn pause(&mut self, error: &Error) {
        let growth = 1u32 << self.failures.min(6);
        self.failures += 1;
        let backoff = (FIRST_PAUSE * growth).min(LONGEST_PAUSE);
        let jittered = backoff.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        let pause = error
            .retry_after()
            .map_or(jittered, |after| after.max(jittered));
        tokio::time::sleep(pause).await;
    }

    /// A message as an event; `None` for one left out (an unknown type, or
    /// a change a resume repeated).
    fn decode(&mut self, message: Message) -> Result<Option<Event>, Error> {
        let bad = |e: serde_json::Error| Error::Protocol {
            message: format!("a {:?} event that does not decode: {e}", message.event),
        };
        let kind = match message.event.as_str() {
            "state" => {
                // A state replaces what came before: repeats are judged anew.
                self.newest = None;
                match self.watched {
                    Watched::Semaphore => {
                        EventKind::SemaphoreState(serde_json::from_str(&message.data).map_err(bad)?)
                    }
                    Watched::Lock => {
                        EventKind::State(serde_json::from_str(&message.data).map_err(bad)?)
                    }
                    Watched::Prefix => {
                        #[derive(Deserialize)]
                        struct Complete {
                            prefix: String,
                            complete: bool,
                        }
                        match serde_json::from_str::<Complete>(&message.data) {
                            Ok(marker) if marker.complete => EventKind::StateComplete {
                                prefix: marker.prefix,
                            },
                            _ => {
                                EventKind::State(serde_json::from_str(&message.data).map_err(bad)?)
                            }
                        }
                    }
                }
            }
            "lagged" => {
                #[derive(Deserialize)]
                struct Lagged {
                    missed: u64,
                }
                let lagged: Lagged = serde_json::from_str(&message.data).map_err(bad)?;
                EventKind::Lagged {
                    missed: lagged.missed,
                }
            }
            "acquired" | "extended" | "released" | "expired" | "force_released" => {
                let change: Change = serde_json::from_str(&message.data).map_err(bad)?;
                let id = message.id.as_deref().and_then(number);
                if let (Some(id), Some(newest)) = (id, self.newest) {
                    if id <= newest {
                        return Ok(None);
                    }
                }
                self.newest = id.or(self.newest);
                EventKind::Change(change)
            }
            _ => return Ok(None),
        };
        if let Some(id) = &message.id {
            *self.last_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
        }
        if let (
            EventKind::State(_) | EventKind::SemaphoreState(_) | EventKind::StateComplete { .. },
            Some(id),
        ) = (&kind, message.id.as_deref().and_then(number))
        {
            self.newest = Some(id);
        }
        Ok(Some(Event {
            id: message.id,
            kind,
        }))
    }
}

/// An event id as the number it is; ids compare as numbers.
fn number(id: &str) -> Option<u64> {
    id.trim().parse().ok()
}

#[cfg(test)]
mod tests;
