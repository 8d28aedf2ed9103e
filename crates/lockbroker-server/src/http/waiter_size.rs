//! What a waiting acquire holds for its whole wait, pinned in bytes: the
//! observing layer's future (observe, limits, the origin guard, the gate and
//! the request timeout in one, boxed by the router with the route's future
//! inside it) and the acquire handler's boxed future (which holds the lock
//! service's wait). Each is allocated once per request and lives until the
//! answer, so 10,000 waiters hold 10,000 of each; a layer or a local that
//! grows them shows here before it shows in the memory benchmark.
//!
//! The bounds are for the test (debug) build, with some room; a release
//! build's futures are smaller.

use std::convert::Infallible;
use std::mem::size_of;

use axum::routing::future::RouteFuture;

use super::{locks, observe};

/// The size of the future `f` returns, without calling it.
fn future_size<F, A, B, C, D, Fut>(_: F) -> usize
where
    F: FnOnce(A, B, C, D) -> Fut,
{
    size_of::<Fut>()
}

#[test]
fn the_observing_layers_future_stays_small() {
    let size = size_of::<observe::ObservedFuture<RouteFuture<Infallible>>>();
    assert!(size <= OBSERVE_BOUND, "observe's future is {size} bytes");
}

#[test]
fn the_acquire_handler_future_stays_small() {
    let size = future_size(locks::acquire);
    assert!(size <= ACQUIRE_BOUND, "acquire's future is {size} bytes");
}

/// Measured at 608 bytes in the test build, the route's future inside it
/// (2,104 as an `async fn` middleware, which kept the request twice and the
/// route's future beside it, and was boxed again by `from_fn`).
const OBSERVE_BOUND: usize = 704;
/// Measured at 968 bytes in the test build (2,096 while the handler, the
/// answer and the lock service were `async fn`s, each keeping its arguments
/// twice; 3,080 before the store's future was boxed in the lock service:
/// only an attempt needs it, not the wait between attempts).
const ACQUIRE_BOUND: usize = 1_088;
