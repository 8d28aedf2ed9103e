//! Whether this process hears the announcements channel: proven only by a
//! message it published itself coming back through its own subscription.
//!
//! A successful `SUBSCRIBE` is not proof: the Redis client reports one that
//! Redis refused (an ACL user without the channel) as done, and nothing
//! shows that a subscription made before a failover lives on the server
//! that now takes the broker's writes. Until the probe comes back the
//! broker is not ready: its waiters would sleep through other brokers'
//! releases and its event streams would miss their changes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::PubsubInterface;
use fred::types::Value;

/// How often an unheard probe is sent again.
pub const PROBE_EVERY: Duration = Duration::from_millis(200);

/// The probe and what it has shown.
pub struct Hearing {
    /// Publishes the probe, on a connection of the pool.
    publisher: Client,
    /// `probe <broker id>`: unique to this process, ignored by every reader
    /// of announcements (`crate::announcements::read` knows no `probe`).
    probe: String,
    /// Set once the probe came back; cleared when the subscriber reconnects.
    heard: Arc<AtomicBool>,
    /// Probes sent since the last one heard.
    unheard: u32,
}

impl Hearing {
    /// A probe for the process `broker_id`, published through `publisher`,
    /// that sets `heard` when it comes back.
    pub fn new(publisher: Client, broker_id: &str, heard: Arc<AtomicBool>) -> Self {
        Self {
            publisher,
            probe: format!("probe {broker_id}"),
            heard,
            unheard: 0,
        }
    }

    /// Whether the probe came back since the last reconnect.
    pub fn is_heard(&self) -> bool {
        self.heard.load(Ordering::Acquire)
    }

    /// Takes `text`, read from the announcements channel: true when it was
    /// this process's probe, which proves the subscription.
    pub fn take(&mut self, text: &str) -> bool {
        if text != self.probe {
            return false;
        }
        self.unheard = 0;
        self.heard.store(true, Ordering::Release);
        true
    }

    /// The subscriber reconnected: hearing must be proven again.
    pub fn reconnected(&mut self) {
        self.heard.store(false, Ordering::Release);
    }

    /// Publishes the probe on `channel`. After a probe went unheard, first
    /// subscribes to `channels` again, where a subscription Redis refused
    /// is then tried again.
    pub fn send(&mut self, subscriber: &SubscriberClient, channel: &str, channels: Vec<String>) {
        let resubscribe = self.unheard > 0;
        self.unheard += 1;
        let (subscriber, publisher) = (subscriber.clone(), self.publisher.clone());
        let (channel, probe) = (channel.to_owned(), self.probe.clone());
        tokio::spawn(async move {
            if resubscribe {
                for channel in channels {
                    let _ = subscriber.subscribe(channel).await;
                }
            }
            let published: Result<Value, _> = publisher.publish(channel, probe).await;
            if let Err(error) = published {
                tracing::debug!(%error, "the subscription probe was not published");
            }
        });
    }
}
