//! `semaphore`: 64 callers sharing the 8 permits of one semaphore, beside 64
//! callers sharing 8 exclusive locks (8 callers a lock), every caller waiting
//! for its turn, on one broker and one Redis, in one run (alternating
//! slices): cycles/s, and what a cycle (grant + release) cost Redis and the
//! broker. Both keep 8 leases held at once; the semaphore's grant looks at a
//! holder set (O(log holders)) where the lock's looks at one lease.

use std::sync::Arc;

use crate::client::Target;
use crate::load;
use crate::meter::Meter;
use crate::procs::Proc;
use crate::stats::{Goal, Table};
use crate::Settings;

/// The semaphore's limit, and the number of exclusive locks beside it.
const LIMIT: u32 = 8;
/// Callers on each target.
const CALLERS: usize = 64;

/// Runs the semaphore case on `broker` over `redis`.
pub async fn run(
    redis: &Proc,
    broker: &Proc,
    settings: &Settings,
    table: &mut Table,
) -> Result<(), String> {
    let semaphore = Target::Semaphore {
        port: broker.port,
        name: Arc::from("bench-semaphore"),
        limit: LIMIT,
    };
    let locks_target = Target::Waiting { port: broker.port };
    let mut meter =
        Meter::new(vec![("broker", broker.pid()), ("redis", redis.pid())], None).await?;
    // Eight callers to each of eight locks; the semaphore's callers all take
    // permits of the one semaphore whatever their lock's name.
    let locks: Vec<String> = (0..CALLERS)
        .map(|i| format!("bench-semaphore-peer-{}", i % LIMIT as usize))
        .collect();
    let [on_locks, on_semaphore] = load::compare_two(
        [&locks_target, &semaphore],
        [
            "8 exclusive locks, 64 waiting callers",
            "a semaphore of limit 8, 64 waiting callers",
        ],
        &locks,
        settings,
        &mut meter,
    )
    .await?;
    let per_cycle =
        |outcome: &load::Outcome, name: &str| outcome.per_pair_us(outcome.usage.cpu_of(name));
    println!(
        "semaphore: {:.0} permit cycles/s (limit 8, 64 callers), {:.0} lock cycles/s (8 locks, \
         64 callers); Redis per cycle {:.0} / {:.0} µs, broker {:.0} / {:.0} µs",
        on_semaphore.rate(),
        on_locks.rate(),
        per_cycle(&on_semaphore, "redis"),
        per_cycle(&on_locks, "redis"),
        per_cycle(&on_semaphore, "broker"),
        per_cycle(&on_locks, "broker"),
    );
    table.add(
        "semaphore cycles/s, limit 8, 64 callers (vs 8 exclusive locks)",
        "/s",
        (on_semaphore.rate(), Some(on_locks.rate())),
        Goal::None,
    );
    table.add(
        "semaphore Redis CPU per permit cycle (vs exclusive lock cycle)",
        "µs",
        (
            per_cycle(&on_semaphore, "redis"),
            Some(per_cycle(&on_locks, "redis")),
        ),
        Goal::None,
    );
    table.add(
        "semaphore broker CPU per permit cycle (vs exclusive lock cycle)",
        "µs",
        (
            per_cycle(&on_semaphore, "broker"),
            Some(per_cycle(&on_locks, "broker")),
        ),
        Goal::None,
    );
    Ok(())
}
