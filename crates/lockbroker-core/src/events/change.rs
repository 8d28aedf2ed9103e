//! What a change to a lease looks like: as brokers announce it to each
//! other through the store, and as this broker numbers it for its streams.
//! Never a token.

use crate::lease::{Fence, LeaseKind};
use crate::name::LockName;

/// What happened to a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Granted.
    Acquired,
    /// Its TTL was set anew.
    Extended,
    /// Given back by its holder.
    Released,
    /// Ran out unreleased (told by each watching broker itself).
    Expired,
    /// Ended by an operator.
    ForceReleased,
}

impl ChangeKind {
    /// The event type as streams name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquired => "acquired",
            Self::Extended => "extended",
            Self::Released => "released",
            Self::Expired => "expired",
            Self::ForceReleased => "force_released",
        }
    }

    /// Reads back [`ChangeKind::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Acquired,
            Self::Extended,
            Self::Released,
            Self::Expired,
            Self::ForceReleased,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == text)
    }
}

/// One change to one lease. Never a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The lock or semaphore.
    pub name: LockName,
    /// What happened.
    pub kind: ChangeKind,
    /// The kind of lease.
    pub mode: LeaseKind,
    /// The lease's fence (for a force release of several, the highest).
    pub fence: Fence,
    /// The holder's label.
    pub owner: Option<String>,
    /// How long the lease stays valid from the change, ms (0 once it ended).
    pub expires_in_ms: u64,
    /// When it expires, in Unix ms of the store's clock, when known.
    pub expires_at_ms: Option<u64>,
}

/// What brokers tell each other about watching.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Announcement {
    /// A broker changed a lease: `seq` numbers the changes of `origin`, so
    /// a change heard twice (from several nodes of a quorum) counts once.
    Change {
        /// The announcing broker.
        origin: String,
        /// Its number for this change.
        seq: u64,
        /// The change.
        change: Change,
    },
    /// A broker has streams open: every broker announces its changes for
    /// the next few seconds.
    Watching {
        /// The announcing broker.
        origin: String,
    },
}

/// One numbered event on this broker: a change as streams see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockEvent {
    /// Grows with every event of this broker (and across its restarts: it
    /// starts at the broker's start time in µs).
    pub id: u64,
    /// The change.
    pub change: Change,
}
