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
//! - **Secrets stay secret.** Neither the token nor the API key is in any
//!   Debug or Display output; names are percent-encoded into routes.
//!
//! # Layout
//!
//! - [`Client`], [`ClientBuilder`]: the broker, API key, TLS roots, timeouts.
//! - [`LockHandle`], [`SemaphoreHandle`], [`AcquireOptions`]: acquiring.
//! - [`Lease`]: a lease or permit; extend, release, loss, renewal.
//! - [`Watch`], [`Event`]: event streams that resume with `Last-Event-ID`.
//! - [`Election`], [`Leadership`]: leader election on one lock.
//! - [`Error`]: every failure, typed by what the caller does next.

mod client;
mod error;
mod leader;
mod lease;
mod lock;
mod renew;
mod watch;

pub use client::{Client, ClientBuilder, DEFAULT_TIMEOUT};
pub use error::{Error, LostReason, TransportKind};
pub use leader::{CurrentLeader, Election, Leadership};
pub use lease::{Lease, LeaseEnd, LeaseKind, Released};
pub use lock::{
    default_owner, AcquireOptions, LockHandle, SemaphoreHandle, DEFAULT_MAX_HOLD, DEFAULT_TTL,
};
pub use lockbroker_api::{
    FenceCheckResponse, HolderResponse, LockMode, SemaphoreStatusResponse, StatusResponse,
};
pub use watch::{Change, ChangeKind, Event, EventKind, Watch, WatchOptions, DEFAULT_IDLE_TIMEOUT};
