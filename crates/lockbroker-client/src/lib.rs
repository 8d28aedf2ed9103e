//! An async client for lockbroker: locks as
//! leases with a TTL and a fence number that only grows, on the wire types of
//! [`lockbroker_api`].
//!
//! ```no_run
//! use std::time::Duration;
//! use lockbroker_client::{AcquireOptions, Client, Error};
//!
//! # async fn write_report(fence: u64) {}
//! # async fn run() -> Result<(), Error> {
//! let mut builder = Client::builder("http://127.0.0.1:7700").timeout(Duration::from_secs(10));
//! if let Ok(key) = std::env::var("LOCKBROKER_API_KEY") {
//!     builder = builder.api_key(key);
//! }
//! let client = builder.build()?;
//!
//! let options = AcquireOptions {
//!     ttl: Duration::from_secs(30),
//!     wait: Duration::from_secs(10),
//!     ..AcquireOptions::default()
//! };
//! let lease = match client.lock("nightly-report").lock(options).await {
//!     Ok(lease) => lease, // renewed every ttl / 3 in the background
//!     Err(Error::Busy { owner, .. }) => {
//!         println!("held by {owner:?}");
//!         return Ok(());
//!     }
//!     Err(error) => return Err(error),
//! };
//! tokio::select! {
//!     () = write_report(lease.fence()) => {
//!         lease.release().await?;
//!     }
//!     // Completes the moment the lease is lost: the body above is dropped.
//!     () = lease.lost() => {
//!         eprintln!("lost the lock mid-run: {:?}", lease.lost_reason());
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What it does for you
//!
//! - **Finite everything.** TTL 30 s, no wait, a maximum hold of one hour,
//!   10 s per exchange, as the Python, Go and TypeScript clients.
//! - **Renewal** ([`Lease::keep_alive`], or [`LockHandle::lock`]): every
//!   TTL / 3, never past `max_hold` from the grant. The local deadline counts
//!   from when each request was *sent*, so it never outlasts the broker's.
//! - **Loss is a cancellation.** [`Lease::lost`] completes, and every
//!   [`Lease::cancellation`] token is cancelled, when the broker says the
//!   lease is gone (`lease_lost`), when it runs out unrenewed, or at its
//!   maximum hold; [`Lease::lost_reason`] says which.
//! - **Safe retries.** Every attempt of one acquire carries the same
//!   `request_id`, so one re-sent after a lost answer gets the same lease.
//! - **Several locks at once.** [`Client::acquire_all`] (or
//!   [`Client::lock_all`], renewed) takes a lease on every lock named or on
//!   none, in one request; a busy answer names the lock in [`Error::Busy`].
//!   [`Client::release_all`] gives them back in one request and says what
//!   became of each.
//! - **One keepalive for many leases.** [`Client::session`] opens a
//!   [`Session`] kept alive every TTL / 3 in the background; leases, permits
//!   and acquire-alls under it have no renewal of their own, and are lost
//!   with it ([`LostReason::SessionLost`]) or released when it closes.
//! - **Secrets stay secret.** Neither the token nor the API key is in any
//!   Debug or Display output; names are percent-encoded into routes.
//!
//! # Layout
//!
//! - [`Client`], [`ClientBuilder`]: the broker, API key, TLS roots, timeouts.
//! - [`LockHandle`], [`SemaphoreHandle`], [`AcquireOptions`]: acquiring.
//! - [`LockAsk`], [`Client::acquire_all`], [`Client::release_all`]: several
//!   locks at once.
//! - [`Lease`]: a lease or permit; extend, release, loss, renewal.
//! - [`Watch`], [`Event`]: event streams that resume with `Last-Event-ID`.
//! - [`Election`], [`Leadership`]: leader election on one lock.
//! - [`Session`], [`SessionOptions`], [`SessionLock`], [`SessionSemaphore`]:
//!   sessions, and leases under them.
//! - [`Error`]: every failure, typed by what the caller does next.
//! - [`Client::send_verbatim`], [`Client::acquire_verbatim`],
//!   [`Client::events_verbatim`], [`Route`]: calls answered as the broker
//!   sent them, for a tool that shows the answer itself (`lockctl --json`).
//! - [`tls`]: which certificates HTTPS trusts, and telling a self-signed
//!   certificate's refusal apart.

// `Error` is returned by value so that callers match it as it is
// (`Err(Error::Busy { lock, owner, .. })`); next to the HTTP exchange that
// produced it, its 128 bytes cost nothing a `Box` would save.
#![allow(clippy::result_large_err)]

mod client;
mod error;
mod leader;
mod lease;
mod lock;
mod multi;
mod renew;
mod session;
pub mod tls;
mod verbatim;
mod watch;

pub use client::{Client, ClientBuilder, Family, DEFAULT_TIMEOUT};
pub use error::{Error, LostReason, TransportKind};
pub use leader::{CurrentLeader, Election, Leadership};
pub use lease::{Lease, LeaseEnd, LeaseKind, Released};
pub use lock::{
    default_owner, new_request_id, AcquireOptions, Attempt, LockHandle, SemaphoreHandle,
    DEFAULT_MAX_HOLD, DEFAULT_TTL,
};
pub use lockbroker_api::{
    FenceCheckResponse, HealthResponse, HealthStatus, HolderResponse, LockMode, RenewalResponse,
    SemaphoreStatusResponse, SessionClosedResponse, SessionLeaseRef, SessionRenewalResponse,
    SessionResponse, SessionStatusResponse, StatusResponse,
};
pub use multi::{first_lost, LockAsk};
pub use session::{
    Session, SessionAcquireOptions, SessionEnd, SessionLock, SessionOptions, SessionSemaphore,
};
pub use verbatim::{Route, VerbatimError, VerbatimEvents, VerbatimGrant};
pub use watch::{Change, ChangeKind, Event, EventKind, Watch, WatchOptions, DEFAULT_IDLE_TIMEOUT};
