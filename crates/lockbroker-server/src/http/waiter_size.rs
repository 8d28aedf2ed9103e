//! What a waiting acquire holds for its whole wait, pinned in bytes: the
//! middleware's boxed future (observe, limits, the origin guard and the gate
//! in one) and the acquire handler's boxed future (which holds the lock
//! service's wait). Each is allocated once per request and lives until the
//! answer, so 10,000 waiters hold 10,000 of each; a layer or a local that
//! grows them shows here before it shows in the memory benchmark.
//!
//! The bounds are for the test (debug) build, with some room; a release
//! build's futures are smaller.

use std::mem::size_of;

use super::{locks, observe};

/// The size of the future `f` returns, without calling it.
fn future_size<F, A, B, C, D, Fut>(_: F) -> usize
where
    F: FnOnce(A, B, C, D) -> Fut,
{
    size_of::<Fut>()
}

/// The same for a three-argument function (a middleware).
fn middleware_future_size<F, A, B, C, Fut>(_: F) -> usize
where
    F: FnOnce(A, B, C) -> Fut,
{
    size_of::<Fut>()
}

#[test]
fn the_outer_middleware_future_stays_small() {
    let size = middleware_future_size(observe::observe);
    assert!(size <= OBSERVE_BOUND, "observe's future is {size} bytes");
}

#[test]
fn the_acquire_handler_future_stays_small() {
    let size = future_size(locks::acquire);
    assert!(size <= ACQUIRE_BOUND, "acquire's future is {size} bytes");
}

/// Measured at 2,104 bytes in the test build, with the limits, the origin
/// guard and the gate awaited inline (1,648 before the gate moved in, which
/// took away a middleware future of its own and two boxed `Next`s).
const OBSERVE_BOUND: usize = 2_304;
/// Measured at 2,096 bytes in the test build (3,080 before the store's
/// future was boxed in the lock service: only an attempt needs it, not the
/// wait between attempts).
const ACQUIRE_BOUND: usize = 2_304;
