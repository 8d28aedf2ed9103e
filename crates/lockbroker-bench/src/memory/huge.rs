//! `memory`'s huge phase: the broker's resident memory with 100,000 acquires
//! waiting at once (`--huge-waiters N` for another count), each on a
//! connection of its own, as a caller of a blocking acquire has.
//!
//! Run when this process may open more files than the count (the bench
//! raises its soft limit to the hard one at start, and the broker inherits
//! it), or asked for with `--huge`. It needs more source ports than
//! one loopback address has, so the connections come from 127.0.0.2 onwards,
//! `PER_SOURCE` at most from each. Every step is bounded in time.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockbroker_api::{AcquireBody, LeaseResponse, ReleaseBody, ReleaseResponse};

use super::{phase, roomy_broker, waiting_gauge, HOLD_TTL_MS, WAITED_LOCKS};
use crate::client::{acquire, broker_client, release, success};
use crate::http1;
use crate::procs::{self, Proc};
use crate::stats::{Goal, Table};

/// Connections from one source address, well inside the ephemeral range.
const PER_SOURCE: usize = 16_000;
/// File descriptors beyond one per waiter that each process may need.
const SPARE_FILES: u64 = 1_000;
/// How long a waiter waits; the broker is started allowing that long.
const WAIT_MS: u64 = 280_000;
/// Time for every waiter to be in place.
const ARRIVAL: Duration = Duration::from_secs(180);
/// Time for every waiter to be granted and release, after the holders left.
const DRAIN: Duration = Duration::from_secs(270);
/// Read buffer of each waiter's connection: one response fits.
const WAITER_BUFFER: usize = 1024;
/// The broker's resident memory it is held to with the waiters in place.
const GOAL_MIB: f64 = 1024.0;

/// Whether this process may open the files `count` waiters need; if not,
/// why, with the limit it reached.
pub fn room(count: usize) -> Result<(), String> {
    check_files("this process", "self", count as u64 + SPARE_FILES)
}

/// Measures one broker of its own holding `count` waiting acquires.
pub async fn run(redis: &Proc, count: usize, table: &mut Table) -> Result<(), String> {
    let needed = count as u64 + SPARE_FILES;
    room(count)?;
    let wait_ms = WAIT_MS.to_string();
    let timeout_ms = (WAIT_MS + 10_000).to_string();
    let (broker, url, http) = roomy_broker(
        redis,
        count,
        &[
            ("LOCKBROKER_LOCKS_MAX_WAIT_MS", &wait_ms),
            ("LOCKBROKER_HTTP_REQUEST_TIMEOUT_MS", &timeout_ms),
        ],
    )
    .await?;
    check_files("the broker", &broker.pid().to_string(), needed)?;

    let client = broker_client(&url)?;
    let mut held = Vec::new();
    for i in 0..WAITED_LOCKS {
        let name = format!("bench-huge-{i}");
        let lease = acquire(&client, &name, HOLD_TTL_MS, 0)
            .await?
            .ok_or("a lock to wait on is unexpectedly busy")?;
        held.push((name, lease));
    }
    let body = AcquireBody {
        ttl_ms: Some(HOLD_TTL_MS),
        wait_ms: Some(WAIT_MS),
        ..AcquireBody::default()
    };
    let body = Arc::new(serde_json::to_vec(&body).map_err(|e| e.to_string())?);
    let failed = Arc::new(AtomicUsize::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let began = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let lock = i % WAITED_LOCKS;
        let from = source(i);
        let path = format!("/v1/locks/{}", held[lock].0);
        let (body, failed, first_error) = (
            Arc::clone(&body),
            Arc::clone(&failed),
            Arc::clone(&first_error),
        );
        let port = broker.port;
        tasks.push(tokio::spawn(async move {
            let result = waiter(from, port, &path, &body).await;
            if let Err(error) = &result {
                failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = first_error.lock() {
                    first.get_or_insert_with(|| error.clone());
                }
            }
            result.map(|fence| (lock, fence))
        }));
        // Paced so the connections do not overflow the listen backlog.
        if i % 250 == 249 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = began + ARRIVAL;
    loop {
        if failed.load(Ordering::Relaxed) > 0 {
            let first = first_error.lock().ok().and_then(|e| e.clone());
            return Err(format!(
                "{} waiters failed before any lock was released; first: {}",
                failed.load(Ordering::Relaxed),
                first.unwrap_or_default()
            ));
        }
        let waiting = waiting_gauge(&http, &url).await?;
        if waiting >= count as u64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "only {waiting} of {count} acquires waited after {ARRIVAL:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "memory     {count} waiters in place after {:.1} s, from {} source addresses",
        began.elapsed().as_secs_f64(),
        count.div_ceil(PER_SOURCE)
    );
    let (_, peak) = phase(&format!("{count} waiters"), broker.pid())?;
    table.add(
        format!("broker peak RSS with {count} waiters"),
        "MiB",
        (peak, None),
        Goal::AtMost(GOAL_MIB),
    );

    for (_, lease) in &held {
        release(lease).await?;
    }
    let mut fences: HashMap<usize, Vec<u64>> = HashMap::new();
    let drain = tokio::time::timeout(DRAIN, async {
        for task in tasks {
            let (lock, fence) = task.await.map_err(|e| e.to_string())??;
            fences.entry(lock).or_default().push(fence);
        }
        Ok::<_, String>(())
    });
    drain
        .await
        .map_err(|_| format!("the waiters were not all served within {DRAIN:?}"))??;
    for (lock, mut list) in fences {
        list.sort_unstable();
        let distinct = list.windows(2).all(|w| w[0] < w[1]);
        if !distinct || list.first().is_some_and(|&f| f <= held[lock].1.fence()) {
            return Err(format!(
                "fences of {} are not all new and distinct",
                held[lock].0
            ));
        }
    }
    println!(
        "memory     all {count} waiters granted in turn after {:.1} s",
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The loopback address the `i`th connection comes from.
fn source(i: usize) -> Ipv4Addr {
    let n = u8::try_from(i / PER_SOURCE).unwrap_or(u8::MAX - 2);
    Ipv4Addr::new(127, 0, 0, 2 + n.min(250))
}

/// One waiting acquire on its own connection, then the release of its
/// lease on the same connection; the fence it was granted.
async fn waiter(from: Ipv4Addr, port: u16, path: &str, body: &[u8]) -> Result<u64, String> {
    let mut connection = http1::Connection::connect_from(from, port, WAITER_BUFFER).await?;
    let (status, reply) = connection.post(&format!("{path}/acquire"), body).await?;
    let lease: LeaseResponse = success("acquire", status, &reply)?;
    let release =
        serde_json::to_vec(&ReleaseBody::new(&*lease.token)).map_err(|e| e.to_string())?;
    let (status, reply) = connection
        .post(&format!("{path}/release"), &release)
        .await?;
    let released: ReleaseResponse = success("release", status, &reply)?;
    if !released.released {
        return Err("release answered released: false".into());
    }
    Ok(lease.fence)
}

/// Fails early, with what to do, when `who` may not open `needed` files.
fn check_files(who: &str, pid: &str, needed: u64) -> Result<(), String> {
    match procs::open_files_limit(pid) {
        Some(limit) if limit < needed => Err(format!(
            "{who} may open {limit} files (ulimit -n, raised to the hard limit), and one \
             connection per waiter needs about {needed}: raise the hard limit (`ulimit -Hn`, \
             LimitNOFILE= or limits.conf, for example to 262144) and run again"
        )),
        _ => Ok(()),
    }
}
