//! `handoff`: how long a waiter takes to get a lock after its holder releases.
//!
//! Each round: a waiter starts waiting (or polling), the holder releases, and
//! the sample is the time from the release's response to the waiter's grant
//! response, both seen by this process. The waiter then becomes the holder.

use std::time::{Duration, Instant};

use serde_json::json;

use lockbroker_client::{Client, Lease};

use crate::client::{acquire, broker_client, release, wait_ready};
use crate::procs::Proc;
use crate::stats::{report, Goal, Summary, Table};

/// Long enough for any round; every lease is released well before.
const HANDOFF_TTL_MS: u64 = 30_000;

/// How the waiter waits.
#[derive(Clone, Copy)]
pub enum Waiting {
    /// Server-side: one acquire with `wait_ms`.
    Server,
    /// Client-side: an acquire without waiting every 100 ms, as redis-py's
    /// `Lock` does by default.
    Poll100ms,
}

/// Runs the three cases side by side on two brokers sharing one Redis, and
/// prints their figures.
pub async fn run(
    first: &Proc,
    second: &Proc,
    rounds: usize,
    table: &mut Table,
) -> Result<(), String> {
    let url = |p: &Proc| format!("http://127.0.0.1:{}", p.port);
    for broker in [first, second] {
        wait_ready(&url(broker)).await?;
    }

    println!(
        "handoff: {rounds} rounds each (poller: {} rounds)",
        rounds.min(50)
    );
    let (one, two) = (broker_client(&url(first))?, broker_client(&url(second))?);
    let mut same = measure("same", (&one, &one), rounds, Waiting::Server).await?;
    let mut cross = measure("cross", (&one, &two), rounds, Waiting::Server).await?;
    let mut poll = measure("poll", (&one, &one), rounds.min(50), Waiting::Poll100ms).await?;
    let same = Summary::of(&mut same);
    let cross = Summary::of(&mut cross);
    let poll = Summary::of(&mut poll);
    report("handoff", "same-broker", &same);
    report("handoff", "cross-broker", &cross);
    report("handoff", "poll-every-100ms", &poll);
    println!(
        "handoff    poller p50 / same-broker p50 = {:.1}x; / cross-broker p50 = {:.1}x",
        poll.p50_ms / same.p50_ms,
        poll.p50_ms / cross.p50_ms
    );
    println!(
        "{}",
        json!({"bench": "handoff", "case": "ratio",
               "poll_over_same_p50": poll.p50_ms / same.p50_ms,
               "poll_over_cross_p50": poll.p50_ms / cross.p50_ms})
    );
    for (case, summary) in [("same-broker", &same), ("cross-broker", &cross)] {
        table.add(
            format!("handoff {case} p50"),
            "ms",
            (summary.p50_ms, None),
            Goal::Below(1.0),
        );
        table.add(
            format!("handoff {case} p99"),
            "ms",
            (summary.p99_ms, None),
            Goal::Below(5.0),
        );
    }
    table.add(
        "handoff poll-every-100ms p50",
        "ms",
        (poll.p50_ms, None),
        Goal::None,
    );
    Ok(())
}

/// Samples `rounds` handoffs on a lock of its own; releases go to the holder's
/// broker, waiters wait on the waiter's broker (`(holder, waiter)`).
pub async fn measure(
    case: &str,
    (holder, waiter): (&Client, &Client),
    rounds: usize,
    waiting: Waiting,
) -> Result<Vec<Duration>, String> {
    let name = format!("bench-handoff-{case}");
    let mut held = acquire(holder, &name, HANDOFF_TTL_MS, 0)
        .await?
        .ok_or("the benchmark lock is unexpectedly busy")?;
    let mut samples = Vec::with_capacity(rounds);
    // A small deterministic spread of release moments across the poll period.
    let mut phase: u64 = 7;
    for _ in 0..rounds {
        let waiting_for = {
            let waiter = waiter.clone();
            let name = name.clone();
            tokio::spawn(async move { wait_for_grant(&waiter, &name, waiting).await })
        };
        phase = (phase * 37 + 11) % 100;
        let settle = match waiting {
            Waiting::Server => 5,
            Waiting::Poll100ms => 20 + phase,
        };
        tokio::time::sleep(Duration::from_millis(settle)).await;
        release(&held).await?;
        let released_at = Instant::now();
        let (granted_at, lease) = waiting_for.await.map_err(|e| e.to_string())??;
        if lease.fence() <= held.fence() {
            let (before, after) = (held.fence(), lease.fence());
            return Err(format!("fence went from {before} to {after}"));
        }
        samples.push(granted_at.saturating_duration_since(released_at));
        held = lease;
    }
    release(&held).await?;
    Ok(samples)
}

async fn wait_for_grant(
    client: &Client,
    name: &str,
    waiting: Waiting,
) -> Result<(Instant, Lease), String> {
    match waiting {
        Waiting::Server => {
            let lease = acquire(client, name, HANDOFF_TTL_MS, 10_000)
                .await?
                .ok_or("waiter timed out")?;
            Ok((Instant::now(), lease))
        }
        Waiting::Poll100ms => {
            for _ in 0..200 {
                if let Some(lease) = acquire(client, name, HANDOFF_TTL_MS, 0).await? {
                    return Ok((Instant::now(), lease));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err("poller never got the lock".into())
        }
    }
}
