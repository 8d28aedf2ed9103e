//! Reliability tools for the broker: load that records what it was told, a
//! checker that holds the answers to the broker's promises, and the local
//! processes both need.
//!
//! # Layout
//!
//! - [`client`]: [`BrokerClient`], the lock and semaphore routes through the
//!   project's Rust client, one request per step, with every answer typed
//!   and timed (tokens stay inside; nothing here prints one).
//! - [`history`]: [`History`], what many clients were told about leases of
//!   every [`LeaseKind`] (exclusive, shared, permit), and [`check`] (or
//!   [`check_against`] a quorum-mode [`Backend`]), which finds every broken
//!   promise in it.
//! - [`load`]: the checker's load: clients that take, hold, stall past their
//!   TTL, extend, release and probe locks at random; exclusive leases by
//!   default, or a [`load::Mix`] of them with shared leases and permits, and
//!   several locks at once (acquire-all, release-all).
//! - [`stack`]: [`Stack`], a `redis-server` (or a quorum's nodes) and
//!   brokers started on free loopback ports for a run that was given no
//!   broker URL.
//! - [`args`]: the few command-line flags the tools share.
//! - `lostupdate` (feature `postgres`): the lost-update lab's workers and table.

pub mod args;
pub mod client;
pub mod history;
pub mod load;
#[cfg(feature = "postgres")]
pub mod lostupdate;
pub mod stack;

pub use client::BrokerClient;
pub use history::{check, check_against, Backend, History, LeaseKind, Report};
pub use stack::Stack;
