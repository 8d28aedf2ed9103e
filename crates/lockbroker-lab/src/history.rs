//! [`History`]: every request the load made and what it was told; [`check`]
//! (in `history/check.rs`): the broker's promises, tested against that record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::client::Timed;

mod check;

pub use check::{check, check_against, Backend, Drift, Report, Stats};

/// Identifies one lease (one successful acquire) within a history.
pub type LeaseId = u64;

/// The lock step a request asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `POST .../acquire`
    Acquire,
    /// `POST .../extend`
    Extend,
    /// `POST .../release`
    Release,
    /// `GET /v1/locks/{name}`
    Status,
}

/// One request and its answer.
#[derive(Clone, Debug)]
pub struct Event {
    /// The load client that sent it.
    pub client: usize,
    /// The lock it concerned.
    pub lock: String,
    /// What it asked for.
    pub op: Op,
    /// The lease it was granted (acquire) or acted for (extend, release, a
    /// holder's status read).
    pub lease: Option<LeaseId>,
    /// When it was sent and answered, and the answer.
    pub timed: Timed,
}

/// Events from many concurrent clients, safe to record from any task.
#[derive(Default)]
pub struct History {
    events: Mutex<Vec<Event>>,
    next_lease: AtomicU64,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh lease id for a grant about to be recorded.
    pub fn new_lease(&self) -> LeaseId {
        self.next_lease.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds one event.
    pub fn record(&self, event: Event) {
        self.lock().push(event);
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
