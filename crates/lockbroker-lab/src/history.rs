//! [`History`]: every request the load made and what it was told; [`check`]
//! (in `history/check.rs`): the broker's promises, tested against that record.

use std::fmt;
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
    /// `GET /v1/locks/{name}` or `GET /v1/semaphores/{name}`
    Status,
}

/// Which names a name is among. A lock and a semaphore may carry the same
/// name and are still two names, with fences and holders of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    /// `/v1/locks/{name}`: exclusive and shared leases.
    Lock,
    /// `/v1/semaphores/{name}`: permits.
    Semaphore,
}

impl Space {
    /// The path segment of the space's routes.
    pub fn route(self) -> &'static str {
        match self {
            Self::Lock => "locks",
            Self::Semaphore => "semaphores",
        }
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Lock => "lock",
            Self::Semaphore => "semaphore",
        })
    }
}

/// The kind of lease a request asked for or acted on, which decides what
/// may hold the name beside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A lock lease that nothing else holds meanwhile (the default).
    #[default]
    Exclusive,
    /// A lock lease that coexists with other shared ones, never with an
    /// exclusive one.
    Shared,
    /// A semaphore permit, among at most `limit` valid at once.
    Permit {
        /// The limit the acquire asked for.
        limit: u32,
    },
}

impl Kind {
    /// The names this kind of lease is taken among.
    pub fn space(self) -> Space {
        match self {
            Self::Exclusive | Self::Shared => Space::Lock,
            Self::Permit { .. } => Space::Semaphore,
        }
    }
}

/// One request and its answer.
#[derive(Clone, Debug)]
pub struct Event {
    /// The load client that sent it.
    pub client: usize,
    /// The lock or semaphore it concerned (which one: `kind`'s space).
    pub lock: String,
    /// The kind of lease it asked for or acted on.
    pub kind: Kind,
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
