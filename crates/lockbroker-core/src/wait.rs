//! In-process wake-ups for waiting acquires.
//!
//! A waiter registers interest in a lock *before* its acquire attempt, so a
//! release that lands between a failed attempt and the wait is never missed.
//! A release seen by this broker wakes the lock's waiters at once; a lease that
//! expires wakes nobody, so waiters also sleep until the holder's expiry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::error::LockError;
use crate::name::LockName;

/// Caps on how many acquires may wait at once.
#[derive(Clone, Copy, Debug)]
pub struct WaiterLimits {
    /// Waiters across all locks on this broker.
    pub max_waiters: usize,
    /// Waiters on any single lock.
    pub max_waiters_per_lock: usize,
}

struct Room {
    notify: Arc<Notify>,
    waiters: usize,
}

#[derive(Default)]
struct Rooms {
    by_lock: HashMap<LockName, Room>,
    total: usize,
}

/// The registry of locks that have waiters on this broker.
pub struct Waiters {
    limits: WaiterLimits,
    rooms: Mutex<Rooms>,
}

impl Waiters {
    /// An empty registry with the given caps.
    pub fn new(limits: WaiterLimits) -> Self {
        Self {
            limits,
            rooms: Mutex::new(Rooms::default()),
        }
    }

    /// Registers one waiter on `name`; it stays registered until the returned
    /// ticket is dropped.
    pub fn join(&self, name: &LockName) -> Result<WaitTicket<'_>, LockError> {
        let mut rooms = self.lock();
        if rooms.total >= self.limits.max_waiters {
            return Err(LockError::TooManyWaiters);
        }
        let room = rooms.by_lock.entry(name.clone()).or_insert_with(|| Room {
            notify: Arc::new(Notify::new()),
            waiters: 0,
        });
        if room.waiters >= self.limits.max_waiters_per_lock {
            return Err(LockError::TooManyWaiters);
        }
        room.waiters += 1;
        let notify = Arc::clone(&room.notify);
        rooms.total += 1;
        Ok(WaitTicket {
            waiters: self,
            name: name.clone(),
            notify,
        })
    }

    /// Wakes every waiter on `name`: the lock was just released.
    pub fn wake(&self, name: &LockName) {
        if let Some(room) = self.lock().by_lock.get(name) {
            room.notify.notify_waiters();
        }
    }

    /// How many acquires are waiting on this broker now.
    pub fn count(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> MutexGuard<'_, Rooms> {
        // A panic while holding this lock cannot leave the counts torn (each
        // update is a single statement), so a poisoned lock is still usable.
        self.rooms.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn leave(&self, name: &LockName) {
        let mut rooms = self.lock();
        rooms.total -= 1;
        if let Some(room) = rooms.by_lock.get_mut(name) {
            room.waiters -= 1;
            if room.waiters == 0 {
                rooms.by_lock.remove(name);
            }
        }
    }
}

/// One registered waiter; dropping it unregisters.
pub struct WaitTicket<'a> {
    waiters: &'a Waiters,
    name: LockName,
    notify: Arc<Notify>,
}

impl WaitTicket<'_> {
    /// The notification this waiter listens on.
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for WaitTicket<'_> {
    fn drop(&mut self) {
        self.waiters.leave(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::parse(s).expect("valid name")
    }

    #[test]
    fn limits_apply_per_lock_and_overall() {
        let waiters = Waiters::new(WaiterLimits {
            max_waiters: 3,
            max_waiters_per_lock: 2,
        });
        let a1 = waiters.join(&name("a")).expect("first");
        let _a2 = waiters.join(&name("a")).expect("second");
        assert!(matches!(
            waiters.join(&name("a")),
            Err(LockError::TooManyWaiters)
        ));
        let _b1 = waiters.join(&name("b")).expect("other lock");
        assert!(matches!(
            waiters.join(&name("c")),
            Err(LockError::TooManyWaiters)
        ));
        drop(a1);
        assert_eq!(waiters.count(), 2);
        assert!(waiters.join(&name("c")).is_ok());
    }

    #[test]
    fn last_ticket_removes_the_room() {
        let waiters = Waiters::new(WaiterLimits {
            max_waiters: 10,
            max_waiters_per_lock: 10,
        });
        drop(waiters.join(&name("a")).expect("join"));
        assert!(waiters.lock().by_lock.is_empty());
        assert_eq!(waiters.count(), 0);
    }
}
