//! The client against a real broker: each test starts its own `redis-server`
//! on a free port and the broker in-process on port 0 (the harness of
//! `lockbroker-tests`).

mod auth;
mod front;
mod leader;
mod leases;
mod loss;
mod multi;
mod ready;
mod scenarios;
mod sessions;
mod verbatim;
mod watch;

use std::time::Duration;

use lockbroker_client::{AcquireOptions, Client};
use lockbroker_tests::TestApp;

/// A client of `app` with the default settings.
pub fn client(app: &TestApp) -> Client {
    Client::new(app.base.clone()).expect("client")
}

/// Options with `ttl` and an owner label, the rest defaults.
pub fn with_ttl(ttl: Duration, owner: &str) -> AcquireOptions {
    AcquireOptions {
        ttl,
        owner: Some(owner.to_owned()),
        ..AcquireOptions::default()
    }
}
