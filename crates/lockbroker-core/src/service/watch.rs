//! Watching locks through a [`LockService`]: the changes it makes are told
//! to this broker's streams and, while anyone watches, announced to every
//! broker; the changes other brokers announce reach this broker's streams.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use super::{spawn_detached, LockService};
use crate::events::{Announcement, Change, EventHub, StreamTicket};
use crate::store::LockStore;

/// How often a broker with streams open says so.
const WATCHING_EVERY: Duration = Duration::from_secs(1);
/// How many announced changes are remembered to tell repeats apart.
const SEEN: usize = 4_096;

impl<S: LockStore> LockService<S> {
    /// This broker's events, for its streams.
    pub fn events(&self) -> &Arc<EventHub> {
        &self.events
    }

    /// Opens an event stream, or `None` at the limit of streams. The first
    /// stream of a broker tells every broker at once that it watches, so
    /// that their changes are announced from then on.
    pub async fn open_stream(self: &Arc<Self>) -> Option<StreamTicket> {
        let ticket = self.events.open()?;
        if !self.heartbeat.swap(true, Ordering::AcqRel) {
            let service = Arc::clone(self);
            let watching = self.watching();
            self.store.announce(&watching).await;
            spawn_detached(async move { service.keep_saying_watching(watching).await });
        }
        Some(ticket)
    }

    fn watching(&self) -> Announcement {
        Announcement::Watching {
            origin: self.id.clone(),
        }
    }

    /// Says "watching" every second while streams are open here.
    async fn keep_saying_watching(self: Arc<Self>, watching: Announcement) {
        loop {
            tokio::time::sleep(WATCHING_EVERY).await;
            if !self.events.watched() {
                self.heartbeat.store(false, Ordering::Release);
                // A stream opened between the check and the store above
                // found the flag still set: keep going for it.
                if !self.events.watched() || self.heartbeat.swap(true, Ordering::AcqRel) {
                    return;
                }
            }
            self.store.announce(&watching).await;
        }
    }

    /// Tells this broker's streams of a change it made and, while anyone
    /// watches, every other broker, without delaying the caller. The change
    /// is made only then: a lock step nobody watches allocates nothing.
    pub(super) fn changed(self: &Arc<Self>, change: impl FnOnce() -> Change) {
        if !self.events.wanted() {
            return;
        }
        let change = change();
        self.events.apply(change.clone());
        let announcement = Announcement::Change {
            origin: self.id.clone(),
            seq: self.next_change.fetch_add(1, Ordering::Relaxed),
            change,
        };
        let service = Arc::clone(self);
        spawn_detached(async move { service.store.announce(&announcement).await });
    }
}

/// Feeds the announcements of other brokers to `events`: a change heard
/// more than once (from each node of a quorum) counts once; this broker's
/// own were told already.
pub(super) async fn listen(
    own: String,
    mut announcements: UnboundedReceiver<Announcement>,
    events: Arc<EventHub>,
) {
    let mut seen: HashSet<(String, u64)> = HashSet::new();
    let mut order: VecDeque<(String, u64)> = VecDeque::new();
    while let Some(announcement) = announcements.recv().await {
        match announcement {
            Announcement::Watching { origin } if origin != own => events.remote_watcher(),
            Announcement::Change {
                origin,
                seq,
                change,
            } if origin != own => {
                let key = (origin, seq);
                if !seen.insert(key.clone()) {
                    continue;
                }
                order.push_back(key);
                if order.len() > SEEN {
                    if let Some(old) = order.pop_front() {
                        seen.remove(&old);
                    }
                }
                events.apply(change);
            }
            _ => {}
        }
    }
}
