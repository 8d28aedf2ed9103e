//! Event streams: `GET /v1/locks/{name}/events`, `GET
//! /v1/semaphores/{name}/events` and `GET /v1/events?prefix=`, read as
//! Server-Sent Events one chunk at a time.

use std::collections::VecDeque;
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};

use super::{
    encode_segment, refusal, retry_after, route, Broker, BrokerError, Family, REQUEST_TIMEOUT,
};
use lockbroker_api::sse::{Message, Parser};

/// The broker sends a keep-alive every 15 s on an idle stream: a stream
/// silent for this long is taken for dropped.
const SILENCE_LIMIT: Duration = Duration::from_secs(45);

/// What to watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched<'a> {
    /// One lock, or one semaphore.
    Name(Family, &'a str),
    /// Every lock whose name starts with this (empty: every lock).
    Prefix(&'a str),
}

impl Watched<'_> {
    /// The stream's path and query under the base URL.
    pub fn path(self) -> String {
        match self {
            Self::Name(family, name) => route(family, name, "/events"),
            Self::Prefix(prefix) => format!("/v1/events?prefix={}", encode_segment(prefix)),
        }
    }
}

/// An open event stream.
pub struct EventStream<'a> {
    broker: &'a Broker,
    response: reqwest::Response,
    parser: Parser,
    ready: VecDeque<Message>,
}

impl Broker {
    /// Opens the stream of `watched`, resuming after `last_event_id` if the
    /// broker still has that event. Fails as a call does for an error
    /// answer, and as not the API for a success that is not an event stream.
    pub async fn events(
        &self,
        watched: Watched<'_>,
        last_event_id: Option<&str>,
    ) -> Result<EventStream<'_>, BrokerError> {
        let url = format!("{}{}", self.base(), watched.path());
        // No timeout on the request as a whole: it would end the stream.
        let mut request = self.http.get(url).header(ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id.filter(|id| id.bytes().all(|b| b.is_ascii_graphic())) {
            request = request.header("last-event-id", id);
        }
        let response = match tokio::time::timeout(REQUEST_TIMEOUT, request.send()).await {
            Ok(sent) => sent.map_err(|e| self.transport(e))?,
            Err(_) => return Err(self.silent("timed out")),
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let bytes = match tokio::time::timeout(REQUEST_TIMEOUT, response.bytes()).await {
                Ok(read) => read.map_err(|e| self.transport(e))?,
                Err(_) => return Err(self.silent("timed out")),
            };
            return Err(refusal(status, retry_after, &bytes));
        }
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if !is_stream {
            return Err(BrokerError::Unexpected(format!(
                "HTTP {} is not an event stream; is the URL a lockbroker that serves them?",
                status.as_u16()
            )));
        }
        Ok(EventStream {
            broker: self,
            response,
            parser: Parser::default(),
            ready: VecDeque::new(),
        })
    }

    /// A stream or request that went quiet, as an unreachable broker.
    fn silent(&self, cause: &str) -> BrokerError {
        BrokerError::Unreachable {
            url: self.shown.clone(),
            cause: cause.to_owned(),
        }
    }
}

impl EventStream<'_> {
    /// The next message; `None` when the broker ended the stream. A stream
    /// silent (not even a keep-alive) for 45 s fails as unreachable.
    pub async fn next(&mut self) -> Result<Option<Message>, BrokerError> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Ok(Some(message));
            }
            let chunk = match tokio::time::timeout(SILENCE_LIMIT, self.response.chunk()).await {
                Ok(chunk) => chunk.map_err(|e| self.broker.transport(e))?,
                Err(_) => {
                    let cause = format!("the stream was silent for {} s", SILENCE_LIMIT.as_secs());
                    return Err(self.broker.silent(&cause));
                }
            };
            match chunk {
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
    fn each_watch_has_its_route() {
        assert_eq!(
            Watched::Name(Family::Locks, "billing:42").path(),
            "/v1/locks/billing:42/events"
        );
        assert_eq!(
            Watched::Name(Family::Semaphores, "etl").path(),
            "/v1/semaphores/etl/events"
        );
        assert_eq!(
            Watched::Prefix("billing:").path(),
            "/v1/events?prefix=billing:"
        );
        assert_eq!(Watched::Prefix("").path(), "/v1/events?prefix=");
        assert_eq!(Watched::Prefix("a&b").path(), "/v1/events?prefix=a%26b");
    }
}
