//! Cluster mode: the lock channels this broker subscribes to.
//!
//! In a Redis Cluster each lock announces its releases on a sharded channel
//! of its own, in its own slot ([`crate::keys::KeyLayout::lock_wake_channel`]),
//! so a release costs the one shard that serves the lock. A broker hears a
//! lock only while it subscribes to that channel: it subscribes when its
//! first waiter for the lock arrives, before that waiter's first attempt, and
//! unsubscribes when its last one leaves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::PubsubInterface;
use lockbroker_core::LockName;
use tokio::time::timeout;

use crate::keys::KeyLayout;

/// Which lock channels this broker subscribes to, and for how many waiters.
#[derive(Clone)]
pub struct Watches {
    shared: Arc<Shared>,
}

struct Shared {
    subscriber: SubscriberClient,
    keys: KeyLayout,
    /// The longest wait for a subscription to be confirmed.
    timeout: Duration,
    channels: Mutex<HashMap<LockName, Channel>>,
}

/// One lock's channel: how many waiters watch it, and whether it is
/// subscribed. Subscribing and unsubscribing one channel take turns under
/// its async lock, so they reach Redis in the order they were decided.
struct Channel {
    watchers: usize,
    subscribed: Arc<tokio::sync::Mutex<bool>>,
}

impl Watches {
    /// No channel yet; `timeout` bounds each subscription.
    pub fn new(subscriber: SubscriberClient, keys: KeyLayout, timeout: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                subscriber,
                keys,
                timeout,
                channels: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Counts one more waiter of `name` and returns once its channel is
    /// subscribed. A subscription that fails is tried again by the next
    /// waiter; meanwhile the waiter still wakes when the holder's lease ends.
    pub async fn watch(&self, name: &LockName) {
        let subscribed = {
            let mut channels = self.shared.lock();
            let channel = channels.entry(name.clone()).or_insert_with(|| Channel {
                watchers: 0,
                subscribed: Arc::default(),
            });
            channel.watchers += 1;
            Arc::clone(&channel.subscribed)
        };
        let mut subscribed = subscribed.lock().await;
        if !*subscribed {
            *subscribed = self.subscribe(name).await;
        }
    }

    /// Subscribes to `name`'s channel; whether Redis confirmed it in time.
    async fn subscribe(&self, name: &LockName) -> bool {
        let channel = self.shared.keys.lock_wake_channel(name);
        let done = timeout(
            self.shared.timeout,
            self.shared.subscriber.ssubscribe(channel),
        );
        let confirmed = matches!(done.await, Ok(Ok(())));
        if !confirmed {
            tracing::warn!(lock = %name, "cannot subscribe to the lock's wake channel");
        }
        confirmed
    }

    /// Counts one waiter of `name` less; after the last, unsubscribes in
    /// the background (unless a waiter came back meanwhile).
    pub fn unwatch(&self, name: &LockName) {
        let subscribed = {
            let mut channels = self.shared.lock();
            let Some(channel) = channels.get_mut(name) else {
                return;
            };
            channel.watchers -= 1;
            if channel.watchers > 0 {
                return;
            }
            Arc::clone(&channel.subscribed)
        };
        let (shared, name) = (Arc::clone(&self.shared), name.clone());
        tokio::spawn(async move {
            let mut state = subscribed.lock().await;
            if shared.watchers(&name) > 0 {
                return;
            }
            if *state {
                let channel = shared.keys.lock_wake_channel(&name);
                let _ = timeout(shared.timeout, shared.subscriber.sunsubscribe(channel)).await;
                *state = false;
            }
            // Forgotten only while nobody watches, under the channel's turn:
            // a waiter arriving later subscribes afresh.
            let mut channels = shared.lock();
            if channels
                .get(&name)
                .is_some_and(|c| c.watchers == 0 && Arc::ptr_eq(&c.subscribed, &subscribed))
            {
                channels.remove(&name);
            }
        });
    }
}

impl Watches {
    /// Subscribes again to the channel of every lock a waiter watches, on
    /// the shard now serving its slot: after a reconnection, after slots
    /// moved (the old shard drops its subscribers), and for channels whose
    /// subscription failed. Channels nobody watches are left alone.
    pub async fn refresh(&self) {
        let watched: Vec<(LockName, Arc<tokio::sync::Mutex<bool>>)> = self
            .shared
            .lock()
            .iter()
            .filter(|(_, channel)| channel.watchers > 0)
            .map(|(name, channel)| (name.clone(), Arc::clone(&channel.subscribed)))
            .collect();
        for (name, subscribed) in watched {
            let mut subscribed = subscribed.lock().await;
            if self.shared.watchers(&name) == 0 {
                continue;
            }
            *subscribed = self.subscribe(&name).await;
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<LockName, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watchers(&self, name: &LockName) -> usize {
        self.lock().get(name).map_or(0, |c| c.watchers)
    }
}
