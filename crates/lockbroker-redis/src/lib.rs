//! The Redis lock store: connections and timeouts, key layout, and the Lua
//! scripts that make every change to lock state one atomic step.
//!
//! # Layout
//!
//! - [`connection`]: settings, credentials, TLS, the client pool and the
//!   subscriber, and what a failed command means ([`connection::store_error`]).
//! - [`keys`]: where a lock's state lives (`{prefix}:{<name>}:lease`, which
//!   also keeps its last fence, beside its queue and holder set, the name in
//!   a Cluster hash tag).
//! - [`scripts`]: the Lua scripts, loaded as one Redis Functions library, and
//!   [`scripts::calls`], one typed definition of each script's keys,
//!   arguments and reply.
//! - [`wakes`]: release announcements between brokers, read in one place.
//! - [`cluster`]: what cluster mode asks the cluster (its primaries, their
//!   versions).
//! - [`store`]: [`RedisLockStore`], the [`lockbroker_core::LockStore`] for Redis.
//! - [`quorum`]: [`quorum::QuorumStore`], the store over a majority of
//!   independent Redis primaries (Redlock, with a fence a majority keeps).
//! - [`mode`]: [`RedisStore`], either of the two behind one type.
//! - [`topology`]: logs of a Sentinel failover and a Cluster slot map change.
//!
//! An acquire reads `store.rs` (`acquire`) -> `scripts/calls.rs`
//! (`AcquireCall`) -> `scripts/acquire.lua`.

pub mod announcements;
pub mod cluster;
pub mod connection;
pub mod keys;
pub mod mode;
pub mod quorum;
pub mod scripts;
pub mod store;
pub mod topology;
pub mod wakes;

pub use connection::{
    ClusterSettings, RedisAuth, RedisSettings, ReplicaAck, SentinelSettings, REPLICA_ACK_POOL_SIZE,
};
pub use keys::KeyLayout;
pub use mode::RedisStore;
pub use store::{QuorumEvent, RedisLockStore, StoreObserver};
