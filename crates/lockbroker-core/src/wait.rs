//! In-process waiting: who waits for which lock, in what order, and how they
//! are woken.
//!
//! Waiters of one lock form a FIFO queue on this broker. Only the queue's head
//! talks to the store; the others sleep until they become head, so a thousand
//! waiters cost one store attempt per grant, not a thousand. A release (seen
//! locally, or announced by another broker) wakes the head; so does the
//! departure of the head before it.
//!
//! Fair waiters (queued in the store across brokers) are also registered by
//! their waiter id, so a release announcement naming the next fair waiter wakes
//! exactly that one.
//!
//! Every waiter has its own [`Notify`]. `notify_one` stores a permit when the
//! waiter is not sleeping yet, so a wake-up that lands between a failed attempt
//! and the sleep after it is never lost.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::Notify;

use crate::error::LockError;
use crate::name::LockName;

/// Caps on how many acquires may wait at once.
#[derive(Clone, Copy, Debug)]
pub struct WaiterLimits {
    /// Waiters across all locks on this broker.
    pub max_waiters: usize,
    /// Waiters on any single lock on this broker.
    pub max_waiters_per_lock: usize,
}

/// A release announcement: the lock freed, and possibly who is next in its
/// fair queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    /// `name` was released; wake its local head, and the fair waiter named.
    Released {
        /// The lock that freed.
        name: LockName,
        /// The waiter id at the head of the lock's fair queue, if any.
        next_fair: Option<String>,
    },
    /// A lease was granted and the fair waiter named is now first in line
    /// for the lock: it should sleep until that lease frees.
    Turn {
        /// The fair waiter's id.
        waiter_id: String,
    },
    /// Announcements may have been missed (the subscription reconnected):
    /// every waiter should look again.
    Resync,
}

/// A stream a store hands out once: to the service that owns the store
/// ([`crate::LockStore::take_wakes`], [`crate::LockStore::take_announcements`]).
pub struct TakeOnce<T>(Mutex<Option<UnboundedReceiver<T>>>);

/// A store's stream of release announcements.
pub type WakeStream = TakeOnce<Wake>;

impl<T> TakeOnce<T> {
    /// Holds `receiver` until it is taken.
    pub fn new(receiver: UnboundedReceiver<T>) -> Self {
        Self(Mutex::new(Some(receiver)))
    }

    /// The stream, the first time; `None` after.
    pub fn take(&self) -> Option<UnboundedReceiver<T>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

struct Waiter {
    id: u64,
    notify: Arc<Notify>,
    /// Holds a place in the store's queue too (it was turned away by shared
    /// leases), where the store counts it.
    in_store_queue: bool,
}

#[derive(Default)]
struct Line {
    /// Local FIFO order; the front is the head.
    queue: VecDeque<Waiter>,
    /// Fair waiters on this lock (they keep their order in the store).
    fair: usize,
}

#[derive(Default)]
struct State {
    lines: HashMap<LockName, Line>,
    fair_by_id: HashMap<String, Arc<Notify>>,
    total: usize,
    next_id: u64,
}

/// The registry of waiting acquires on this broker.
pub struct Waiters {
    limits: WaiterLimits,
    state: Mutex<State>,
}

/// How a waiter waits.
pub enum WaitMode {
    /// In this broker's FIFO line for the lock.
    Local,
    /// In the store's queue for the lock, under this waiter id.
    Fair(String),
}

impl Waiters {
    /// An empty registry with the given caps.
    pub fn new(limits: WaiterLimits) -> Self {
        Self {
            limits,
            state: Mutex::new(State::default()),
        }
    }

    /// Registers a waiter on `name`; it stays registered until the returned
    /// ticket is dropped. Refused beyond the configured limits.
    pub fn join(
        self: &Arc<Self>,
        name: &LockName,
        mode: WaitMode,
    ) -> Result<WaitTicket, LockError> {
        let mut state = self.lock();
        if state.total >= self.limits.max_waiters {
            return Err(LockError::TooManyWaiters);
        }
        let id = state.next_id;
        state.next_id += 1;
        let notify = Arc::new(Notify::new());
        let line = state.lines.entry(name.clone()).or_default();
        if line.queue.len() + line.fair >= self.limits.max_waiters_per_lock {
            return Err(LockError::TooManyWaiters);
        }
        let fair_id = match mode {
            WaitMode::Local => {
                line.queue.push_back(Waiter {
                    id,
                    notify: Arc::clone(&notify),
                    in_store_queue: false,
                });
                None
            }
            WaitMode::Fair(fair_id) => {
                line.fair += 1;
                Some(fair_id)
            }
        };
        if let Some(fair_id) = &fair_id {
            state
                .fair_by_id
                .insert(fair_id.clone(), Arc::clone(&notify));
        }
        state.total += 1;
        Ok(WaitTicket {
            waiters: Arc::clone(self),
            name: name.clone(),
            id,
            fair_id,
            notify,
        })
    }

    /// Acts on a release announcement.
    pub fn wake(&self, wake: &Wake) {
        let state = self.lock();
        match wake {
            Wake::Released { name, next_fair } => {
                if let Some(head) = state.lines.get(name).and_then(|line| line.queue.front()) {
                    head.notify.notify_one();
                }
                if let Some(notify) = next_fair.as_ref().and_then(|id| state.fair_by_id.get(id)) {
                    notify.notify_one();
                }
            }
            Wake::Turn { waiter_id } => {
                if let Some(notify) = state.fair_by_id.get(waiter_id) {
                    notify.notify_one();
                }
            }
            Wake::Resync => {
                for line in state.lines.values() {
                    if let Some(head) = line.queue.front() {
                        head.notify.notify_one();
                    }
                }
                for notify in state.fair_by_id.values() {
                    notify.notify_one();
                }
            }
        }
    }

    /// Whether any acquire waits for `name` on this broker.
    pub fn has_line(&self, name: &LockName) -> bool {
        self.lock().lines.contains_key(name)
    }

    /// How many acquires wait for `name` in this broker's own line: those
    /// not in the store's queue, which the store cannot count.
    pub fn in_line(&self, name: &LockName) -> usize {
        self.lock().lines.get(name).map_or(0, |line| {
            line.queue.iter().filter(|w| !w.in_store_queue).count()
        })
    }

    fn mark_in_store_queue(&self, ticket: &WaitTicket, queued: bool) {
        let mut state = self.lock();
        let waiter = (state.lines.get_mut(&ticket.name))
            .and_then(|line| line.queue.iter_mut().find(|w| w.id == ticket.id));
        if let Some(waiter) = waiter {
            waiter.in_store_queue = queued;
        }
    }

    /// How many acquires are waiting on this broker now.
    pub fn count(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update under this lock completes before it is released, so a
        // panic elsewhere cannot leave it torn; a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn leave(&self, ticket: &WaitTicket) {
        let mut state = self.lock();
        state.total -= 1;
        if let Some(fair_id) = &ticket.fair_id {
            state.fair_by_id.remove(fair_id);
        }
        let Some(line) = state.lines.get_mut(&ticket.name) else {
            return;
        };
        if ticket.fair_id.is_some() {
            line.fair -= 1;
        } else if let Some(at) = line.queue.iter().position(|w| w.id == ticket.id) {
            line.queue.remove(at);
            // The lock may be free right now with nobody looking: hand the
            // turn to the next waiter.
            if at == 0 {
                if let Some(next) = line.queue.front() {
                    next.notify.notify_one();
                }
            }
        }
        if line.queue.is_empty() && line.fair == 0 {
            state.lines.remove(&ticket.name);
        }
    }
}

/// One registered waiter; dropping it unregisters (and passes the turn on).
pub struct WaitTicket {
    waiters: Arc<Waiters>,
    name: LockName,
    id: u64,
    fair_id: Option<String>,
    notify: Arc<Notify>,
}

impl WaitTicket {
    /// Notes whether this waiter's last busy answer gave it a place in the
    /// store's queue, so the broker's own count leaves it to the store's.
    pub fn holds_store_place(&self, queued: bool) {
        if self.fair_id.is_none() {
            self.waiters.mark_in_store_queue(self, queued);
        }
    }

    /// Whether this waiter may try the store now: fair waiters always may (the
    /// store keeps their order); local ones only at the head of the line.
    pub fn may_attempt(&self) -> bool {
        if self.fair_id.is_some() {
            return true;
        }
        let state = self.waiters.lock();
        state
            .lines
            .get(&self.name)
            .and_then(|line| line.queue.front())
            .is_some_and(|head| head.id == self.id)
    }

    /// This waiter's wake-ups.
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let waiters = Arc::clone(&self.waiters);
        waiters.leave(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::parse(s).expect("valid name")
    }

    fn registry(max_waiters: usize, max_waiters_per_lock: usize) -> Arc<Waiters> {
        Arc::new(Waiters::new(WaiterLimits {
            max_waiters,
            max_waiters_per_lock,
        }))
    }

    #[test]
    fn limits_apply_per_lock_and_overall() {
        let waiters = registry(3, 2);
        let a1 = waiters.join(&name("a"), WaitMode::Local).expect("first");
        let _a2 = waiters
            .join(&name("a"), WaitMode::Fair("f".into()))
            .expect("second");
        assert!(matches!(
            waiters.join(&name("a"), WaitMode::Local),
            Err(LockError::TooManyWaiters)
        ));
        let _b1 = waiters
            .join(&name("b"), WaitMode::Local)
            .expect("other lock");
        assert!(matches!(
            waiters.join(&name("c"), WaitMode::Local),
            Err(LockError::TooManyWaiters)
        ));
        drop(a1);
        assert_eq!(waiters.count(), 2);
        assert!(waiters.join(&name("c"), WaitMode::Local).is_ok());
    }

    #[test]
    fn only_the_head_may_attempt_and_the_turn_passes_on() {
        let waiters = registry(10, 10);
        let first = waiters.join(&name("a"), WaitMode::Local).expect("join");
        let second = waiters.join(&name("a"), WaitMode::Local).expect("join");
        let third = waiters.join(&name("a"), WaitMode::Local).expect("join");
        assert!(first.may_attempt());
        assert!(!second.may_attempt() && !third.may_attempt());

        drop(second);
        assert!(
            !third.may_attempt(),
            "leaving from the middle changes no head"
        );
        drop(first);
        assert!(third.may_attempt());
    }

    #[tokio::test]
    async fn a_wake_before_the_sleep_is_not_lost() {
        let waiters = registry(10, 10);
        let head = waiters.join(&name("a"), WaitMode::Local).expect("join");
        waiters.wake(&Wake::Released {
            name: name("a"),
            next_fair: None,
        });
        tokio::time::timeout(std::time::Duration::from_secs(1), head.notify().notified())
            .await
            .expect("the stored permit wakes the head at once");
    }

    #[tokio::test]
    async fn fair_waiters_are_woken_by_id() {
        let waiters = registry(10, 10);
        let fair = waiters
            .join(&name("a"), WaitMode::Fair("w-1".into()))
            .expect("join");
        waiters.wake(&Wake::Released {
            name: name("a"),
            next_fair: Some("w-1".into()),
        });
        tokio::time::timeout(std::time::Duration::from_secs(1), fair.notify().notified())
            .await
            .expect("woken by id");
    }

    #[test]
    fn the_last_waiter_leaves_no_line_behind() {
        let waiters = registry(10, 10);
        drop(waiters.join(&name("a"), WaitMode::Local).expect("join"));
        drop(
            waiters
                .join(&name("a"), WaitMode::Fair("x".into()))
                .expect("join"),
        );
        let state = waiters.lock();
        assert!(state.lines.is_empty() && state.fair_by_id.is_empty());
        assert_eq!(state.total, 0);
    }
}
