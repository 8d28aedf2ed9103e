//! Event streams: `GET /v1/locks/{name}/events`, `GET
//! /v1/semaphores/{name}/events` and `GET /v1/events?prefix=`, read as
//! Server-Sent Events one message at a time.

use std::time::Duration;

use lockbroker_client::{Route, VerbatimEvents};

use super::{Broker, BrokerError, Family, Message};

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

impl<'a> Watched<'a> {
    /// The stream's route.
    fn route(self) -> Route<'a> {
        match self {
            Self::Name(family, name) => Route::Events(family, name),
            Self::Prefix(prefix) => Route::EventsUnder(prefix),
        }
    }
}

/// An open event stream.
pub struct EventStream<'a> {
    broker: &'a Broker,
    events: VerbatimEvents,
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
        let events = self
            .client
            .events_verbatim(watched.route(), last_event_id)
            .await
            .map_err(|error| self.failure(error))?;
        Ok(EventStream {
            broker: self,
            events,
        })
    }
}

impl EventStream<'_> {
    /// The next message; `None` when the broker ended the stream. A stream
    /// silent (not even a keep-alive) for 45 s fails as unreachable.
    pub async fn next(&mut self) -> Result<Option<Message>, BrokerError> {
        match tokio::time::timeout(SILENCE_LIMIT, self.events.next()).await {
            Ok(next) => next.map_err(|error| self.broker.failure(error)),
            Err(_) => Err(BrokerError::Unreachable {
                url: self.broker.client.base_url().to_owned(),
                cause: format!("the stream was silent for {} s", SILENCE_LIMIT.as_secs()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_watch_has_its_route() {
        assert_eq!(
            Watched::Name(Family::Locks, "billing:42").route().path(),
            "/v1/locks/billing:42/events"
        );
        assert_eq!(
            Watched::Name(Family::Semaphores, "etl").route().path(),
            "/v1/semaphores/etl/events"
        );
        assert_eq!(
            Watched::Prefix("billing:").route().path(),
            "/v1/events?prefix=billing:"
        );
        assert_eq!(Watched::Prefix("").route().path(), "/v1/events?prefix=");
        assert_eq!(
            Watched::Prefix("a&b").route().path(),
            "/v1/events?prefix=a%26b"
        );
    }
}
