//! [`History`]: every request the load made and what it was told; [`check`]
//! (in `history/check.rs`): the broker's promises, tested against that record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::client::Timed;

mod check;
mod record;

pub use check::{check, check_against, Backend, Drift, Report, Stats};
pub use record::json_lines;

/// Identifies one lease (one successful acquire) within a history.
pub type LeaseId = u64;

/// The lock step a request asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// `POST .../acquire`
    Acquire,
    /// `POST .../extend`
    Extend,
    /// `POST .../release`
    Release,
    /// `GET /v1/locks/{name}` or `GET /v1/semaphores/{name}`
    Status,
    /// `POST /v1/locks/acquire-all`, as seen by one of its locks: the same
    /// request is recorded once per lock asked, each with its own answer.
    AcquireAll,
    /// `POST /v1/locks/release-all`, as seen by one of its leases.
    ReleaseAll,
    /// `POST /v1/sessions/{id}/keepalive`, as seen by one lease of the
    /// session: the same request is recorded once per lease the session
    /// held when it was sent, as that lease's extend (renewed to the
    /// session's expiry, found ended, or lost with the session).
    Keepalive,
    /// `POST /v1/sessions/{id}/close`, as seen by one lease of the session:
    /// that lease's release.
    Close,
}

impl Op {
    /// The step on one lock that this is (or is one lock's part of): a
    /// lease of an acquire-all is held to what a single acquire promises,
    /// and a release-all's result to what a single release would answer.
    pub fn single(self) -> Self {
        match self {
            Self::AcquireAll => Self::Acquire,
            Self::ReleaseAll | Self::Close => Self::Release,
            Self::Keepalive => Self::Extend,
            op => op,
        }
    }
}

// Which names a name is among (`Family`: a lock and a semaphore may carry
// the same name and are still two names, with fences and holders of their
// own), and the kind of lease a request asked for or acted on (`LeaseKind`),
// which decides what may hold the name beside it: the client's own words.
pub use lockbroker_client::{Family, LeaseKind};

/// The names a lease of `kind` is taken among.
pub fn family(kind: LeaseKind) -> Family {
    match kind {
        LeaseKind::Exclusive | LeaseKind::Shared => Family::Locks,
        LeaseKind::Permit { .. } => Family::Semaphores,
    }
}

/// What a report calls a name of `family`: `lock` or `semaphore`.
pub fn noun(family: Family) -> &'static str {
    match family {
        Family::Locks => "lock",
        Family::Semaphores => "semaphore",
    }
}

/// One request and its answer.
#[derive(Clone, Debug)]
pub struct Event {
    /// The load client that sent it.
    pub client: usize,
    /// The lock or semaphore it concerned (which one: `kind`'s family).
    pub lock: String,
    /// The kind of lease it asked for or acted on.
    pub kind: LeaseKind,
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
