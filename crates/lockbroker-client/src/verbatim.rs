//! Calls answered as the broker sent them, for a caller that shows the
//! answer itself: `lockctl` prints a success body with `--json`, and words
//! each refusal its own way, exit code included.
//!
//! Only the answer is left undecoded: routes, percent-encoding, the API key,
//! TLS and transport failures are the client's own, as for every typed call.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use lockbroker_api::sse::{Message, Parser};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::client::{encode, retry_after, route, Client, Family};
use crate::error::{Error, TransportKind};
use crate::lock::{new_request_id, retried, Attempt};

/// A route of the broker's API, its name percent-encoded into the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// `POST /v1/{family}/{name}/acquire`.
    Acquire(Family, &'a str),
    /// `POST /v1/locks/acquire-all`.
    AcquireAll,
    /// `POST /v1/{family}/{name}/extend`.
    Extend(Family, &'a str),
    /// `POST /v1/{family}/{name}/release`.
    Release(Family, &'a str),
    /// `POST /v1/locks/release-all`.
    ReleaseAll,
    /// `GET /v1/{family}/{name}`.
    Status(Family, &'a str),
    /// `GET /v1/{family}/{name}/fence/{fence}`.
    Fence(Family, &'a str, u64),
    /// `GET /v1/{family}/{name}/events`, for [`Client::events_verbatim`].
    Events(Family, &'a str),
    /// `GET /v1/events?prefix={prefix}`: every lock whose name starts with
    /// the prefix, for [`Client::events_verbatim`].
    EventsUnder(&'a str),
    /// `POST /v1/sessions`.
    OpenSession,
    /// `POST /v1/sessions/{id}/keepalive`.
    KeepSession(&'a str),
    /// `POST /v1/sessions/{id}/close`.
    CloseSession(&'a str),
    /// `GET /v1/sessions/{id}`.
    SessionStatus(&'a str),
}

impl Route<'_> {
    /// The path and query under the broker's base URL.
    pub fn path(self) -> String {
        match self {
            Self::Acquire(family, name) => route(family, name, "/acquire"),
            Self::AcquireAll => "/v1/locks/acquire-all".to_owned(),
            Self::Extend(family, name) => route(family, name, "/extend"),
            Self::Release(family, name) => route(family, name, "/release"),
            Self::ReleaseAll => "/v1/locks/release-all".to_owned(),
            Self::Status(family, name) => route(family, name, ""),
            Self::Fence(family, name, fence) => route(family, name, &format!("/fence/{fence}")),
            Self::Events(family, name) => route(family, name, "/events"),
            Self::EventsUnder(prefix) => format!("/v1/events?prefix={}", encode(prefix)),
            Self::OpenSession => "/v1/sessions".to_owned(),
            Self::KeepSession(id) => format!("/v1/sessions/{}/keepalive", encode(id)),
            Self::CloseSession(id) => format!("/v1/sessions/{}/close", encode(id)),
            Self::SessionStatus(id) => format!("/v1/sessions/{}", encode(id)),
        }
    }

    fn method(self) -> Method {
        match self {
            Self::Status(..)
            | Self::Fence(..)
            | Self::Events(..)
            | Self::EventsUnder(_)
            | Self::SessionStatus(_) => Method::GET,
            _ => Method::POST,
        }
    }
}

/// Why a verbatim call has no success body.
#[derive(Debug, Clone)]
pub enum VerbatimError {
    /// The broker refused with its `{"error": {...}}` body.
    Refused {
        /// The HTTP status.
        status: u16,
        /// The `Retry-After` header in whole seconds, if any.
        retry_after: Option<Duration>,
        /// The `error` object as sent: `code`, `message`, and every detail,
        /// known to this client or not.
        error: Map<String, Value>,
    },
    /// An answer that is not the broker's API (a wrong URL, a proxy's page):
    /// a refusal without the error body, a success that is not a JSON object,
    /// or a stream that is not an event stream.
    NotTheApi {
        /// What was wrong with it.
        message: String,
    },
    /// No answer, as [`Error::Transport`] tells it.
    Transport {
        /// What failed.
        kind: TransportKind,
        /// The innermost cause, in words, without the request's URL.
        message: String,
        /// The TLS failure itself, for a caller that explains it in its own
        /// words (and whose advice names its own options).
        tls: Option<rustls::Error>,
    },
}

impl VerbatimError {
    /// A failure of the exchange itself, with its TLS cause kept.
    fn transport(error: reqwest::Error) -> Self {
        let error = error.without_url();
        let tls = crate::tls::find_error(&error).cloned();
        match Error::transport(error) {
            Error::Transport { kind, message } => Self::Transport { kind, message, tls },
            other => Self::NotTheApi {
                message: other.to_string(),
            },
        }
    }

    /// An answer with `status` that has no body of this API.
    fn not_the_api(status: StatusCode) -> Self {
        Self::NotTheApi {
            message: format!(
                "HTTP {} without the broker's JSON body; is the URL a lockbroker?",
                status.as_u16()
            ),
        }
    }
}

impl fmt::Display for VerbatimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused { status, error, .. } => {
                let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or("");
                write!(f, "{} ({}, HTTP {status})", text("message"), text("code"))
            }
            Self::NotTheApi { message } => write!(f, "unexpected answer: {message}"),
            Self::Transport { kind, message, .. } => {
                let error = Error::Transport {
                    kind: *kind,
                    message: message.clone(),
                };
                error.fmt(f)
            }
        }
    }
}

impl std::error::Error for VerbatimError {}

/// A grant from [`Client::acquire_verbatim`]: the body as the broker sent it,
/// and when the attempt that got it was sent and answered. The lease cannot
/// expire before `sent + ttl` by the local monotonic clock; after a wait in
/// the broker, it was granted somewhere between `sent` and `received`.
/// Its `Debug` shows the body with every token redacted.
#[derive(Clone)]
pub struct VerbatimGrant {
    /// The `200` body: a lease, a permit, or the leases of an acquire-all.
    pub body: Map<String, Value>,
    /// When the successful attempt left.
    pub sent: std::time::Instant,
    /// When its answer arrived.
    pub received: std::time::Instant,
}

impl fmt::Debug for VerbatimGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbatimGrant")
            .field("body", &redacted(Value::Object(self.body.clone())))
            .field("sent", &self.sent)
            .field("received", &self.received)
            .finish()
    }
}

/// `value` with every `token` field, at any depth, shown as `<redacted>`.
fn redacted(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| match key.as_str() {
                    "token" => (key, Value::from("<redacted>")),
                    _ => (key, redacted(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(redacted).collect()),
        other => other,
    }
}

impl Client {
    /// An acquire at `route` ([`Route::Acquire`] or [`Route::AcquireAll`])
    /// asked until granted, every attempt with the same `request_id`, so one
    /// re-sent after a lost answer gets the same lease back. `body` makes an
    /// attempt's request from the `request_id` and the wait left, which the
    /// attempt may take on top of the client's timeout. After each failure,
    /// `rule` says how long to pause before asking again, or `None` to give
    /// up with that failure: the caller's own retry rule, where the typed
    /// acquires ([`LockHandle::acquire`](crate::LockHandle::acquire)) follow
    /// the client's.
    pub async fn acquire_verbatim<B: Serialize>(
        &self,
        route: Route<'_>,
        wait: Duration,
        body: impl Fn(&str, Duration) -> B,
        rule: impl FnMut(&VerbatimError, Attempt) -> Option<Duration>,
    ) -> Result<VerbatimGrant, VerbatimError> {
        let request_id = new_request_id();
        let send = |left: Duration| {
            let body = body(&request_id, left);
            async move {
                let timeout = self.inner.timeout + left;
                self.send_verbatim(route, Some(&body), timeout).await
            }
        };
        let (body, timing) = retried(wait, send, rule).await?;
        Ok(VerbatimGrant {
            body,
            sent: timing.sent.into_std(),
            received: timing.received.into_std(),
        })
    }

    /// One request to `route` with `body` as JSON, within `timeout`,
    /// answered as the broker sent it: the JSON object of a success, or the
    /// error object of a refusal. Nothing is retried; the typed calls
    /// ([`Client::status`], [`LockHandle::acquire`](crate::LockHandle::acquire),
    /// ...) are what most callers want.
    pub async fn send_verbatim(
        &self,
        route: Route<'_>,
        body: Option<&impl Serialize>,
        timeout: Duration,
    ) -> Result<Map<String, Value>, VerbatimError> {
        let url = format!("{}{}", self.inner.base, route.path());
        let mut request = self
            .inner
            .http
            .request(route.method(), url)
            .timeout(timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(VerbatimError::transport)?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response.bytes().await.map_err(VerbatimError::transport)?;
        let mut body = match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(body)) => body,
            _ => return Err(VerbatimError::not_the_api(status)),
        };
        if status.is_success() {
            return Ok(body);
        }
        match body.remove("error") {
            Some(Value::Object(error)) => Err(VerbatimError::Refused {
                status: status.as_u16(),
                retry_after,
                error,
            }),
            _ => Err(VerbatimError::not_the_api(status)),
        }
    }

    /// Opens the event stream at `route` ([`Route::Events`] or
    /// [`Route::EventsUnder`]), resuming after `last_event_id` if the broker
    /// still has that event. The client's timeout bounds the answer's head
    /// only; the stream is not opened again when it ends, unlike a
    /// [`Watch`](crate::Watch).
    pub async fn events_verbatim(
        &self,
        route: Route<'_>,
        last_event_id: Option<&str>,
    ) -> Result<VerbatimEvents, VerbatimError> {
        let timeout = self.inner.timeout;
        let timed_out = || VerbatimError::Transport {
            kind: TransportKind::Timeout,
            message: "timed out".to_owned(),
            tls: None,
        };
        let url = format!("{}{}", self.inner.base, route.path());
        // No timeout on the request as a whole: it would end the stream.
        let mut request = self
            .inner
            .http
            .request(route.method(), url)
            .header(ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id.filter(|id| id.bytes().all(|b| b.is_ascii_graphic())) {
            request = request.header("last-event-id", id);
        }
        let response = match tokio::time::timeout(timeout, request.send()).await {
            Ok(sent) => sent.map_err(VerbatimError::transport)?,
            Err(_) => return Err(timed_out()),
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let bytes = match tokio::time::timeout(timeout, response.bytes()).await {
                Ok(read) => read.map_err(VerbatimError::transport)?,
                Err(_) => return Err(timed_out()),
            };
            let error = match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(mut body)) => body.remove("error"),
                _ => None,
            };
            return Err(match error {
                Some(Value::Object(error)) => VerbatimError::Refused {
                    status: status.as_u16(),
                    retry_after,
                    error,
                },
                _ => VerbatimError::not_the_api(status),
            });
        }
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !is_stream {
            return Err(VerbatimError::NotTheApi {
                message: format!(
                    "HTTP {} is not an event stream; is the URL a lockbroker that serves them?",
                    status.as_u16()
                ),
            });
        }
        Ok(VerbatimEvents {
            response,
            parser: Parser::default(),
            ready: VecDeque::new(),
        })
    }
}

/// An event stream from [`Client::events_verbatim`], read one message at a
/// time as the broker sent it (keep-alives included).
pub struct VerbatimEvents {
    response: reqwest::Response,
    parser: Parser,
    ready: VecDeque<Message>,
}

impl fmt::Debug for VerbatimEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbatimEvents")
            .field("ready", &self.ready.len())
            .finish_non_exhaustive()
    }
}

impl VerbatimEvents {
    /// The next message; `None` when the broker ended the stream. It waits
    /// as long as the stream is silent: bound it with a timeout of your own.
    /// Cancelling it loses no message.
    pub async fn next(&mut self) -> Result<Option<Message>, VerbatimError> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Ok(Some(message));
            }
            match self
                .response
                .chunk()
                .await
                .map_err(VerbatimError::transport)?
            {
                Some(bytes) => self.ready.extend(self.parser.feed(&bytes)),
                None => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_never_shows_a_token() {
        let body = serde_json::json!({
            "name": "a", "token": "secret-1", "fence": 7,
            "leases": [{"name": "b", "token": "secret-2"}],
        });
        let Value::Object(body) = body else {
            unreachable!("an object")
        };
        let now = std::time::Instant::now();
        let grant = VerbatimGrant {
            body,
            sent: now,
            received: now,
        };
        let shown = format!("{grant:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(
            shown.contains("fence") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn each_route_has_its_path() {
        assert_eq!(
            Route::Acquire(Family::Semaphores, "etl").path(),
            "/v1/semaphores/etl/acquire"
        );
        assert_eq!(
            Route::Fence(Family::Locks, "a b", 7).path(),
            "/v1/locks/a%20b/fence/7"
        );
        assert_eq!(
            Route::Events(Family::Locks, "billing:42").path(),
            "/v1/locks/billing:42/events"
        );
        assert_eq!(Route::EventsUnder("").path(), "/v1/events?prefix=");
        assert_eq!(Route::EventsUnder("a&b").path(), "/v1/events?prefix=a%26b");
        assert_eq!(Route::Status(Family::Locks, "job").method(), Method::GET);
        assert_eq!(Route::ReleaseAll.method(), Method::POST);
        let id = "0123456789abcdef";
        assert_eq!(
            Route::KeepSession(id).path(),
            format!("/v1/sessions/{id}/keepalive")
        );
        assert_eq!(Route::SessionStatus(id).method(), Method::GET);
    }
}
