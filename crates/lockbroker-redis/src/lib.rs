//! The Redis lock store: connection pool and timeouts, key layout, and the Lua
//! scripts that make every change to lock state one atomic step.
//!
//! # Layout
//!
//! - [`keys`]: where a lock's state lives (`{prefix}:{<name>}:lease` and
//!   `{prefix}:{<name>}:fence`, the name in a Cluster hash tag).
//! - [`scripts`]: the Lua scripts, loaded once and run by SHA.
//! - [`store`]: [`RedisLockStore`], the [`lockbroker_core::LockStore`] for Redis.

pub mod keys;
pub mod scripts;
pub mod store;

pub use keys::KeyLayout;
pub use store::{RedisAuth, RedisLockStore, RedisSettings, StoreObserver};
