//! Release announcements between brokers: one Pub/Sub subscription per
//! process (in cluster mode, one sharded channel per lock a waiter here
//! watches), and the one reader of the message the scripts' `announce`
//! (`scripts/prelude.lua`) writes.

use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClusterInterface, EventInterface, PubsubInterface};
use lockbroker_core::{Announcement, LockName, Wake};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::{interval, sleep, MissedTickBehavior};

use crate::store::watches::Watches;

mod hearing;

pub use hearing::Hearing;

/// Where the announcements about watching go: their channel, and the
/// stream the service reads.
pub struct Announcements {
    /// `{prefix}:events`.
    pub channel: String,
    /// Every announcement read from it.
    pub sender: UnboundedSender<Announcement>,
}

/// What this process subscribes to.
pub enum Subscription {
    /// One channel that carries every lock's announcements.
    Shared(String),
    /// Cluster mode: each lock's sharded channel, subscribed while this
    /// broker has waiters for it.
    PerLock(Watches),
}

/// How often cluster mode compares the slot map with the cluster's own.
const TOPOLOGY_CHECK: Duration = Duration::from_secs(1);

/// Keeps this process subscribed (fred subscribes again after every
/// reconnect) and turns announcements into [`Wake`]s. `hearing` proves the
/// subscription by a probe, after the start and after every reconnect.
///
/// In cluster mode it also follows the slot map: when slots move (a
/// resharding, a failover inside the cluster), a lock's channel moves with
/// its slot and the old shard drops its subscribers, so every channel is
/// subscribed again where it now lives, and every waiter looks again for
/// releases announced meanwhile.
pub async fn forward_wakes(
    subscriber: SubscriberClient,
    subscription: Subscription,
    broker_id: String,
    wakes: UnboundedSender<Wake>,
    announcements: Announcements,
    mut hearing: Hearing,
) {
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    let watches = match &subscription {
        Subscription::PerLock(watches) => Some(watches.clone()),
        Subscription::Shared(_) => None,
    };
    // fred's own resubscription sends every kind of subscription, and a
    // `SUBSCRIBE` without channels fails before it reaches the sharded
    // ones: in cluster mode they are subscribed again here instead.
    let _resubscribe = watches.is_none().then(|| subscriber.manage_subscriptions());
    if let Subscription::Shared(channel) = &subscription {
        subscribe(&subscriber, channel).await;
    }
    subscribe(&subscriber, &announcements.channel).await;
    let mut probes = interval(hearing::PROBE_EVERY);
    probes.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Subscribed again after a probe goes unheard; in cluster mode the lock
    // channels have their own refresh.
    let mut channels = vec![announcements.channel.clone()];
    if let Subscription::Shared(channel) = &subscription {
        channels.push(channel.clone());
    }
    let mut topology = interval(TOPOLOGY_CHECK);
    topology.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut slots = slot_map(&subscriber);
    loop {
        let wake = tokio::select! {
            message = messages.recv() => match message {
                Ok(message) if *message.channel == *announcements.channel => {
                    if let Some(text) = message.value.as_str() {
                        if !hearing.take(&text) {
                            if let Some(announcement) = crate::announcements::read(&text) {
                                let _ = announcements.sender.send(announcement);
                            }
                        }
                    }
                    None
                }
                Ok(message) => message.value.as_str().and_then(|text| parse_wake(&text, &broker_id)),
                // Announcements were dropped: every waiter looks again.
                Err(RecvError::Lagged(_)) => Some(Wake::Resync),
                Err(RecvError::Closed) => return,
            },
            reconnect = reconnects.recv() => match reconnect {
                // Releases announced while disconnected were missed.
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    hearing.reconnected();
                    match &watches {
                        Some(watches) => {
                            // Nobody resubscribes for this process in cluster mode.
                            let (subscriber, channel) = (subscriber.clone(), announcements.channel.clone());
                            tokio::spawn(async move { subscribe(&subscriber, &channel).await });
                            refresh_then_resync(watches.clone(), wakes.clone());
                            None
                        }
                        None => Some(Wake::Resync),
                    }
                }
                Err(RecvError::Closed) => return,
            },
            _ = probes.tick(), if !hearing.is_heard() => {
                hearing.send(&subscriber, &announcements.channel, channels.clone());
                None
            },
            _ = topology.tick(), if watches.is_some() => {
                let _ = subscriber.sync_cluster().await;
                let now = slot_map(&subscriber);
                if now == slots {
                    None
                } else {
                    slots = now;
                    if let Some(watches) = &watches {
                        refresh_then_resync(watches.clone(), wakes.clone());
                    }
                    None
                }
            },
        };
        if let Some(wake) = wake {
            if wakes.send(wake).is_err() {
                return;
            }
        }
    }
}

/// Subscribes to `channel`, trying again until it works.
async fn subscribe(subscriber: &SubscriberClient, channel: &str) {
    let mut backoff = Duration::from_millis(50);
    while subscriber.subscribe(channel).await.is_err() {
        sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Subscribes every watched lock's channel again, then has every waiter
/// look once more: a release announced before the subscription is back
/// is then seen by the look.
fn refresh_then_resync(watches: Watches, wakes: UnboundedSender<Wake>) {
    tokio::spawn(async move {
        watches.refresh().await;
        let _ = wakes.send(Wake::Resync);
    });
}

/// The slot ranges and the primary serving each, as the client knows them.
fn slot_map(subscriber: &SubscriberClient) -> Vec<(u16, u16, String)> {
    subscriber
        .cached_cluster_state()
        .map(|state| {
            state
                .slots()
                .iter()
                .map(|range| (range.start, range.end, range.primary.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads `<broker id> released|turn <lock name> <fair waiter id or ->`.
///
/// This broker's own releases already woke its local waiters, so from its
/// own announcement only the fair waiter named is woken.
pub fn parse_wake(text: &str, own_broker_id: &str) -> Option<Wake> {
    let mut parts = text.split(' ');
    let (origin, kind, name, head) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let next_fair = (head != "-").then(|| head.to_owned());
    match kind {
        "released" if origin != own_broker_id => Some(Wake::Released {
            name: LockName::from_wire(name).ok()?,
            next_fair,
        }),
        "released" | "turn" => next_fair.map(|waiter_id| Wake::Turn { waiter_id }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_read_as_wakes() {
        let name = LockName::parse("job").expect("valid");
        assert_eq!(
            parse_wake("b2 released job w7", "b1"),
            Some(Wake::Released {
                name,
                next_fair: Some("w7".into())
            })
        );
        assert_eq!(
            parse_wake("b1 released job w7", "b1"),
            Some(Wake::Turn {
                waiter_id: "w7".into()
            }),
            "from its own release a broker wakes only the fair waiter named"
        );
        assert_eq!(parse_wake("b1 released job -", "b1"), None);
        assert_eq!(
            parse_wake("b2 turn job w9", "b1"),
            Some(Wake::Turn {
                waiter_id: "w9".into()
            })
        );
        assert_eq!(parse_wake("b2 released", "b1"), None);
        assert_eq!(parse_wake("b2 renamed job w1", "b1"), None);
    }
}
