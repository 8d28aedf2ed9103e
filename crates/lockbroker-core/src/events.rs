//! Watching locks: the changes brokers tell each other, and [`EventHub`],
//! which numbers them into events for this broker's streams.
//!
//! A change is announced by the broker that made it, through the store, to
//! every broker sharing the store, while any broker has a stream open (a
//! broker with streams says so every second, see [`Announcement::Watching`]);
//! with nobody watching, a lock step costs nothing more. A lease that ends
//! by running out is announced by nobody: every broker that watches it
//! keeps its expiry and tells its own streams when it passes, without
//! asking the store.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use crate::lease::{unix_micros, Fence, LeaseKind, LockStatus};
use crate::name::LockName;

mod change;
mod expiry;

pub use change::{Announcement, Change, ChangeKind, LockEvent};

/// How many events the hub keeps for streams that resume.
const REPLAY: usize = 4_096;
/// How long a broker announces its changes after another said it watches.
const REMOTE_WATCH: Duration = Duration::from_secs(3);
/// How long a broker goes on keeping events after its last stream closed,
/// so that a stream that reconnects meanwhile resumes where it was.
const LINGER: Duration = Duration::from_secs(30);
/// How close to its expiry by this broker's timer a lease must be for a
/// newer lease that excludes it to count as proof that it expired. The
/// timer starts when the broker hears of the lease, a little after the
/// store granted it, so it fires a little after the store's expiry, and a
/// waiter granted at that expiry can be heard first.
const EXPIRY_SLACK: Duration = Duration::from_millis(250);

/// Numbers the changes this broker hears into events, fans them out to its
/// streams, keeps the last few for resumes, and tells the expiries of the
/// leases its streams watch.
pub struct EventHub {
    sender: broadcast::Sender<Arc<LockEvent>>,
    next_id: AtomicU64,
    streams: AtomicUsize,
    max_streams: usize,
    state: Mutex<HubState>,
    expiries_changed: Notify,
    /// What the two times below count from: atomics, so that a lock step
    /// asks "does anyone watch?" without taking a lock.
    started: Instant,
    /// Until when (ms after `started`) another broker said it watches.
    remote_watch_until: AtomicU64,
    /// Until when (ms after `started`) events are kept after the last
    /// stream here closed.
    linger_until: AtomicU64,
}

#[derive(Default)]
struct HubState {
    recent: VecDeque<Arc<LockEvent>>,
    /// The leases streams watch, with their expiry timer's deadline.
    leases: HashMap<(LockName, Fence), Known>,
    deadlines: BTreeMap<(Instant, u64), (LockName, Fence)>,
    timer_seq: u64,
}

/// A lease the hub keeps the expiry of.
#[derive(Clone, Debug)]
struct Known {
    mode: LeaseKind,
    owner: Option<String>,
    expires_at_ms: Option<u64>,
    deadline: (Instant, u64),
}

impl Known {
    /// The `expired` change of this lease.
    fn expired(self, name: LockName, fence: Fence) -> Change {
        Change {
            name,
            kind: ChangeKind::Expired,
            mode: self.mode,
            fence,
            owner: self.owner,
            expires_in_ms: 0,
            expires_at_ms: self.expires_at_ms,
        }
    }
}

/// One open stream; counted until dropped.
pub struct StreamTicket {
    hub: Arc<EventHub>,
    /// The events from the moment of opening.
    pub events: broadcast::Receiver<Arc<LockEvent>>,
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        if self.hub.streams.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.hub
                .linger_until
                .store(self.hub.clock_ms() + millis(LINGER), Ordering::Release);
        }
    }
}

impl EventHub {
    /// A hub for at most `max_streams` streams, buffering `per_stream`
    /// events for each before it lags. Inside a Tokio runtime it also
    /// starts telling expiries.
    pub fn new(max_streams: usize, per_stream: usize) -> Arc<Self> {
        let hub = Arc::new(Self {
            sender: broadcast::channel(per_stream.max(1)).0,
            next_id: AtomicU64::new(unix_micros()),
            streams: AtomicUsize::new(0),
            max_streams,
            state: Mutex::new(HubState::default()),
            started: Instant::now(),
            // A broker that just started may have missed the last "watching"
            // of the others: it announces its changes until it has heard.
            remote_watch_until: AtomicU64::new(millis(REMOTE_WATCH)),
            linger_until: AtomicU64::new(0),
            expiries_changed: Notify::new(),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(expiry::tell_expiries(Arc::downgrade(&hub)));
        }
        hub
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a stream, or `None` at the limit of streams.
    pub fn open(self: &Arc<Self>) -> Option<StreamTicket> {
        let open = self.streams.fetch_add(1, Ordering::AcqRel);
        if open >= self.max_streams {
            self.streams.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(StreamTicket {
            hub: Arc::clone(self),
            events: self.sender.subscribe(),
        })
    }

    /// How many streams are open on this broker.
    pub fn streams(&self) -> usize {
        self.streams.load(Ordering::Acquire)
    }

    /// Whether this broker keeps events: a stream is open here, or one
    /// closed so recently that it may come back to resume.
    pub fn watched(&self) -> bool {
        self.streams() > 0 || self.clock_ms() < self.linger_until.load(Ordering::Acquire)
    }

    /// Whether changes must be announced: this broker keeps events, or
    /// another broker said it does, within the last few seconds.
    pub fn wanted(&self) -> bool {
        if self.streams() > 0 {
            return true;
        }
        let now = self.clock_ms();
        now < self.linger_until.load(Ordering::Acquire)
            || now < self.remote_watch_until.load(Ordering::Acquire)
    }

    /// Another broker has streams open.
    pub fn remote_watcher(&self) {
        let until = self.clock_ms() + millis(REMOTE_WATCH);
        self.remote_watch_until.fetch_max(until, Ordering::AcqRel);
    }

    /// The events after `id` still kept, oldest first; `None` when some of
    /// them are no longer known (or `id` is not one of this broker's).
    pub fn since(&self, id: u64) -> Option<Vec<Arc<LockEvent>>> {
        let state = self.lock();
        let next = self.next_id();
        let oldest = state.recent.front().map_or(next, |e| e.id);
        // Ids at or past the next are not this broker's; below the one
        // before the oldest kept, some events after them are gone.
        if id >= next || id.saturating_add(1) < oldest {
            return None;
        }
        Some(state.recent.iter().filter(|e| e.id > id).cloned().collect())
    }

    /// Milliseconds since the hub started.
    fn clock_ms(&self) -> u64 {
        millis(self.started.elapsed())
    }

    fn next_id(&self) -> u64 {
        self.next_id.load(Ordering::Acquire)
    }

    /// The id of the last event so far: a state read after this call is at
    /// least as new, and a stream resumed after it misses nothing later.
    /// Read under the lock that numbers and sends events, so every event up
    /// to it is already in every stream's receiver.
    pub fn last_id(&self) -> u64 {
        let _numbering = self.lock();
        self.next_id() - 1
    }

    /// Numbers `change` into an event for every stream here, and keeps (or
    /// drops) the expiry of its lease. Nothing when no stream is open.
    pub fn apply(&self, change: Change) {
        let mut state = self.lock();
        if !self.watched() {
            // Nobody watches here any more: forget the expiries too.
            state.leases.clear();
            state.deadlines.clear();
            return;
        }
        let key = (change.name.clone(), change.fence);
        if change.kind == ChangeKind::Acquired {
            self.expire_excluded(&mut state, &change);
        }
        match change.kind {
            ChangeKind::Acquired | ChangeKind::Extended => {
                let expires_in = Duration::from_millis(change.expires_in_ms);
                state.watch(key, &change, Instant::now() + expires_in);
                self.expiries_changed.notify_one();
            }
            ChangeKind::Released | ChangeKind::Expired => {
                // A release names no holder: the one streams knew of.
                if let Some(known) = state.forget(&key) {
                    let change = Change {
                        owner: change.owner.clone().or(known.owner),
                        ..change
                    };
                    self.emit(&mut state, change);
                    return;
                }
            }
            ChangeKind::ForceReleased => {
                // One event per lease ended, for every lease streams knew.
                let ended = state.forget_name(&change.name);
                if !ended.is_empty() {
                    for (fence, known) in ended {
                        let each = Change {
                            mode: known.mode,
                            fence,
                            owner: known.owner,
                            ..change.clone()
                        };
                        self.emit(&mut state, each);
                    }
                    return;
                }
            }
        }
        self.emit(&mut state, change);
    }

    /// Keeps the expiries of the leases `status` shows for `name`, read for
    /// a stream's first `state`: leases granted before any stream watched
    /// also end with an `expired` event.
    pub fn learn(&self, name: &LockName, status: &LockStatus) {
        let mut state = self.lock();
        let now = Instant::now();
        for holder in status.holders.iter().filter(|h| h.expires_in_ms > 0) {
            let key = (name.clone(), holder.fence);
            if state.leases.contains_key(&key) {
                continue;
            }
            let change = Change {
                name: name.clone(),
                kind: ChangeKind::Acquired,
                mode: holder.mode,
                fence: holder.fence,
                owner: holder.owner.clone(),
                expires_in_ms: holder.expires_in_ms,
                expires_at_ms: None,
            };
            state.watch(
                key,
                &change,
                now + Duration::from_millis(holder.expires_in_ms),
            );
        }
        self.expiries_changed.notify_one();
    }

    /// Tells, before a lease granted in the same moment, the `expired` of
    /// every lease it proves ended: an older lease of the lock that the new
    /// one excludes (an exclusive lease excludes every other, a shared one
    /// the exclusive ones), due to expire by this broker's timer. Followers
    /// of an election then see a term end before the next one begins. A
    /// semaphore's permits prove nothing of each other.
    fn expire_excluded(&self, state: &mut HubState, granted: &Change) {
        if granted.mode == LeaseKind::Permit {
            return;
        }
        let due = Instant::now() + EXPIRY_SLACK;
        let ended: Vec<_> = (state.deadlines.range(..=(due, u64::MAX)))
            .filter(|(_, (name, fence))| *name == granted.name && *fence < granted.fence)
            .map(|(_, key)| key.clone())
            .collect();
        for key in ended {
            let excluded = (state.leases.get(&key)).is_some_and(|known| {
                granted.mode == LeaseKind::Exclusive || known.mode == LeaseKind::Exclusive
            });
            if !excluded {
                continue;
            }
            if let Some(known) = state.forget(&key) {
                let (name, fence) = key;
                let expired = known.expired(name, fence);
                self.emit(state, expired);
            }
        }
    }

    fn emit(&self, state: &mut HubState, change: Change) {
        let id = self.next_id.fetch_add(1, Ordering::AcqRel);
        let event = Arc::new(LockEvent { id, change });
        if state.recent.len() == REPLAY {
            state.recent.pop_front();
        }
        state.recent.push_back(Arc::clone(&event));
        // No receiver is not an error: the last stream just closed.
        let _ = self.sender.send(event);
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl HubState {
    fn watch(&mut self, key: (LockName, Fence), change: &Change, deadline: Instant) {
        self.forget(&key);
        self.timer_seq += 1;
        let at = (deadline, self.timer_seq);
        self.deadlines.insert(at, key.clone());
        self.leases.insert(
            key,
            Known {
                mode: change.mode,
                owner: change.owner.clone(),
                expires_at_ms: change.expires_at_ms,
                deadline: at,
            },
        );
    }

    fn forget(&mut self, key: &(LockName, Fence)) -> Option<Known> {
        let known = self.leases.remove(key)?;
        self.deadlines.remove(&known.deadline);
        Some(known)
    }

    /// Forgets every lease of `name`; those it knew, by fence.
    fn forget_name(&mut self, name: &LockName) -> Vec<(Fence, Known)> {
        let keys: Vec<_> = (self.leases.keys())
            .filter(|(n, _)| n == name)
            .cloned()
            .collect();
        let mut ended = Vec::new();
        for key in keys {
            if let Some(known) = self.leases.remove(&key) {
                self.deadlines.remove(&known.deadline);
                ended.push((key.1, known));
            }
        }
        ended.sort_by_key(|(fence, _)| *fence);
        ended
    }
}

#[cfg(test)]
mod tests;
