//! The lock domain of lockbroker, free of HTTP and of Redis.
//!
//! # Layout
//!
//! - [`name`]: [`LockName`], the only way a lock name enters the system.
//! - [`lease`]: the values a lease is made of ([`Ttl`], [`Fence`], [`LeaseToken`],
//!   [`Owner`], [`RequestId`]) and what the store hands back ([`Lease`], [`Holder`]).
//! - [`listing`]: what an operator's listing of locks asks for and gets back.
//! - [`store`]: the [`LockStore`] trait, the atomic steps a backend must provide.
//! - [`policy`]: [`LockPolicy`], the limits and defaults, and the check of an
//!   [`AcquireRequest`].
//! - [`service`]: [`LockService`], the rules around those steps (limits, waiting,
//!   max hold) that every transport shares.
//! - [`session`]: sessions, one heartbeat for many leases: their ids,
//!   tokens, terms and records.
//! - [`wait`]: the in-process registry that wakes waiting acquires when a lock frees.
//! - [`events`]: the changes brokers announce to each other while anyone
//!   watches, and [`EventHub`], which turns them into this broker's events.
//! - [`validation`]: [`ValidationError`], what every checked constructor returns.
//! - [`error`]: [`LockError`] and [`StoreError`].
//! - `memory` and `conformance` (feature `testing`): an in-memory store for
//!   unit tests of the service, and the suite of tests every store must pass.
//!
//! A request travels `handler -> LockService -> LockStore -> script`, one hop each.

#[cfg(feature = "testing")]
pub mod conformance;
pub mod error;
pub mod events;
pub mod lease;
pub mod listing;
#[cfg(feature = "testing")]
pub mod memory;
pub mod name;
pub mod policy;
pub mod service;
pub mod session;
pub mod store;
pub mod validation;
pub mod wait;

pub use error::{LockError, StoreError, Unacknowledged, ValidationError};
pub use events::{Announcement, Change, ChangeKind, EventHub, LockEvent, StreamTicket};
pub use lease::{
    Blockers, Fence, FenceCheck, Holder, Lease, LeaseKind, LeaseToken, LockDelay, LockStatus,
    Owner, Principal, RequestId, Ttl,
};
pub use listing::{ListCursor, ListLimit, ListRequest, LockEntry, LockPage};
pub use name::{LockName, LockPrefix, Space};
pub use policy::{AcquireRequest, LockPolicy};
pub use service::{
    AcquireAllError, EndedLease, Grant, KeptSession, LeaseEnd, LockAsk, LockService, OpenedSession,
    SessionRequest, SessionState, MAX_LOCKS_PER_ACQUIRE,
};
pub use session::{
    SessionEntry, SessionId, SessionMember, SessionRecord, SessionTerms, SessionToken, SessionWrite,
};
pub use store::{contended_back_off, ForceReleaseOutcome};
pub use store::{
    AcquireOutcome, AcquireParams, ExtendOutcome, ExtendStep, FairEntry, LockStore, Release,
    ReleaseOutcome, Together, Watch,
};
pub use wait::{TakeOnce, Wake, WakeStream};
