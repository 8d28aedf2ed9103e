//! The lockbroker HTTP/JSON service as a library: tests and `main.rs` both run
//! it through [`Application`].
//!
//! # Layout
//!
//! - [`config`]: [`Settings`] in layers (defaults, file, environment).
//! - [`startup`]: [`Application`], which binds, serves and shuts down.
//! - [`telemetry`]: log output.
//! - [`auth`]: API keys, their scopes, lock-name prefixes and rate limits.
//! - [`serve`]: the accept loop (connection cap, TLS, header read timeout).
//! - [`tls`]: the HTTPS listener's certificate and key.
//! - [`http`]: the router and its handlers; [`http::error`] is the one place
//!   that turns errors into HTTP responses.

pub mod auth;
pub mod config;
pub mod http;
pub mod metrics;
pub mod serve;
pub mod startup;
pub mod telemetry;
pub mod tls;

pub use config::Settings;
pub use startup::{Application, StartupError};

/// The lock service as this binary runs it: over Redis.
pub type Service = lockbroker_core::LockService<lockbroker_redis::RedisStore>;
