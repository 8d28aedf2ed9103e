//! `memory`: the broker's resident memory (`VmRSS`, and the peak `VmHWM`, from
//! `/proc/<pid>/status`) idle, under the 64-caller pair load, and holding many
//! waiting acquires at once: each on a connection of its own (HTTP/1.1), and
//! again on a broker of its own with up to [`STREAMS_PER_CONNECTION`] of them
//! sharing each connection (HTTP/2); then 100,000 of them, one connection
//! each when the open-files limit allows or with `--huge` ([`huge`]), and
//! over HTTP/2 always;
//! and (`churn`) whether the memory of many waiters comes back after they
//! leave. A broker of its own, so the peak is its peak.

mod huge;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::client::{acquire, broker_client, release, wait_ready, Target};
use crate::load;
use crate::procs::{self, Proc};
use crate::stats::{Goal, Table};
use crate::Settings;

/// Locks the waiters spread over, to stay under the per-lock waiter limit.
const WAITED_LOCKS: usize = 20;
/// Outlasts the whole phase, so no lease expires under its waiters.
const HOLD_TTL_MS: u64 = 300_000;
/// Waiting acquires per HTTP/2 connection: the broker's default
/// `http.max_streams_per_connection`.
const STREAMS_PER_CONNECTION: usize = 1_000;

/// How the waiters reach the broker.
#[derive(Clone, Copy)]
enum Transport {
    /// A connection per waiting acquire.
    Http1,
    /// [`STREAMS_PER_CONNECTION`] waiting acquires per connection.
    Http2,
}

/// A broker of its own with room for `waiters` waiting acquires (and
/// requests beyond them) and the settings in `extra`, ready, with a client
/// for it.
async fn roomy_broker(
    redis: &Proc,
    waiters: usize,
    extra: &[(&str, &str)],
) -> Result<(Proc, String, reqwest::Client), String> {
    let max_waiters = (waiters + 1_000).to_string();
    let per_lock = waiters.div_ceil(WAITED_LOCKS) + 100;
    let max_requests = (waiters + 4_000).max(16_384).to_string();
    let max_connections = (waiters + 4_000).max(20_000).to_string();
    let per_lock = per_lock.to_string();
    let mut env = vec![
        ("LOCKBROKER_LOCKS_MAX_WAITERS", max_waiters.as_str()),
        ("LOCKBROKER_LOCKS_MAX_WAITERS_PER_LOCK", per_lock.as_str()),
        (
            "LOCKBROKER_HTTP_MAX_CONCURRENT_REQUESTS",
            max_requests.as_str(),
        ),
        ("LOCKBROKER_HTTP_MAX_CONNECTIONS", max_connections.as_str()),
    ];
    env.extend_from_slice(extra);
    let broker = procs::broker_with(redis, &env)?;
    let url = format!("http://127.0.0.1:{}", broker.port);
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    wait_ready(&url).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok((broker, url, http))
}

/// Measures one broker through the three phases.
pub async fn run(redis: &Proc, settings: &Settings, table: &mut Table) -> Result<(), String> {
    let (broker, url, http) = roomy_broker(redis, settings.waiters, &[]).await?;

    let idle = phase("idle", broker.pid())?;
    table.add(
        "broker peak RSS idle",
        "MiB",
        (idle.1, None),
        Goal::Below(30.0),
    );

    let locks: Vec<String> = (0..64).map(|i| format!("bench-memory-{i}")).collect();
    let outcome = load::run(
        &Target::Broker { port: broker.port },
        &locks,
        settings.duration,
    )
    .await;
    outcome.check("memory load on the broker")?;
    let loaded = phase("load c=64", broker.pid())?;
    table.add(
        "broker peak RSS under c=64 load",
        "MiB",
        (loaded.1, None),
        Goal::Below(80.0),
    );

    let waiting = waiters(
        &http,
        &url,
        broker.pid(),
        settings.waiters,
        Transport::Http1,
    )
    .await?;
    table.add(
        format!("broker peak RSS with {} waiters", settings.waiters),
        "MiB",
        (waiting.1, None),
        // The goal: 100 MiB for 10,000 waiters, 1 GiB for 100,000.
        Goal::AtMost(settings.waiters as f64 / 100.0),
    );
    drop(broker);

    http2_waiters(redis, settings.waiters, table).await?;
    println!("memory     thin skipped: it answers a busy lock at once, so no acquire waits on it");
    // Asked for, a limit too low for it is an error; otherwise a skip.
    let (count, asked) = match settings.huge_waiters {
        Some(count) => (count, true),
        None => (crate::HUGE_WAITERS, false),
    };
    match huge::room(count) {
        Ok(()) => huge::run(redis, count, table).await?,
        Err(why) if !asked => println!("memory     {count} waiters skipped: {why}"),
        Err(why) => return Err(why),
    }
    // Over HTTP/2 the huge count needs a connection per thousand waiters,
    // so it runs whatever the open-files limit.
    http2_waiters(redis, count, table).await
}

/// The peak RSS of a broker of its own (so its peak is theirs alone) with
/// `count` acquires waiting, [`STREAMS_PER_CONNECTION`] to a connection.
async fn http2_waiters(redis: &Proc, count: usize, table: &mut Table) -> Result<(), String> {
    let (broker, url, http) = roomy_broker(redis, count, &[]).await?;
    let waiting = waiters(&http, &url, broker.pid(), count, Transport::Http2).await?;
    table.add(
        format!(
            "broker peak RSS with {count} waiters, {STREAMS_PER_CONNECTION} per HTTP/2 connection"
        ),
        "MiB",
        (waiting.1, None),
        // The goal: 100 MiB for 10,000 waiters, 1 GiB for 100,000.
        Goal::AtMost(count as f64 / 100.0),
    );
    Ok(())
}

/// How long the broker idles after the last round before memory is read
/// again: what it keeps when nothing happens.
const IDLE_AFTER_ROUNDS: Duration = Duration::from_secs(5);

/// `churn`: round after round of `settings.waiters` acquires that wait and
/// then leave, on one broker. Memory after each round must level off (the
/// last round at most 1.25x the first), and after idling the broker must have
/// given most of its peak back to the operating system (at most half).
pub async fn churn(redis: &Proc, settings: &Settings, table: &mut Table) -> Result<(), String> {
    let (broker, url, http) = roomy_broker(redis, settings.waiters, &[]).await?;
    let mut after = Vec::new();
    for round in 1..=settings.waiter_rounds {
        waiters(
            &http,
            &url,
            broker.pid(),
            settings.waiters,
            Transport::Http1,
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        after.push(phase(&format!("after round {round}"), broker.pid())?);
    }
    tokio::time::sleep(IDLE_AFTER_ROUNDS).await;
    let (idle_rss, peak) = phase("idle after the rounds", broker.pid())?;
    let first = after.first().map_or(0.0, |r| r.0);
    let last = after.last().map_or(0.0, |r| r.0);
    table.add(
        format!("broker RSS after round {} / after round 1", after.len()),
        "x",
        (last / first.max(f64::MIN_POSITIVE), None),
        Goal::Below(1.25),
    );
    table.add(
        "broker RSS idle after the rounds / peak",
        "x",
        (idle_rss / peak.max(f64::MIN_POSITIVE), None),
        Goal::Below(0.5),
    );
    Ok(())
}

/// Prints and returns `(VmRSS, VmHWM)` in MiB.
fn phase(case: &str, pid: u32) -> Result<(f64, f64), String> {
    let (rss, hwm) = procs::memory_mib(pid)?;
    println!("memory     {case:<28} VmRSS={rss:>7.1} MiB  VmHWM={hwm:>7.1} MiB");
    println!(
        "{}",
        json!({"bench": "memory", "case": case, "vm_rss_mib": rss, "vm_hwm_mib": hwm})
    );
    Ok((rss, hwm))
}

/// Holds `WAITED_LOCKS` locks, sends `count` acquires that wait for them
/// over `transport`, reads memory once all of them wait, then releases the
/// locks and checks that every waiter got its lock in turn, with a fence
/// above all before it.
async fn waiters(
    http: &reqwest::Client,
    url: &str,
    pid: u32,
    count: usize,
    transport: Transport,
) -> Result<(f64, f64), String> {
    let client = broker_client(url)?;
    let mut held = Vec::new();
    for i in 0..WAITED_LOCKS {
        let name = format!("bench-waited-{i}");
        let lease = acquire(&client, &name, HOLD_TTL_MS, 0)
            .await?
            .ok_or("a lock to wait on is unexpectedly busy")?;
        held.push(lease);
    }
    // Over HTTP/1.1 one client for every waiter (a client per waiter would
    // be a connection pool each), with as many connections as requests in
    // flight; over HTTP/2 one client, so one connection, per
    // STREAMS_PER_CONNECTION waiters.
    let clients = match transport {
        Transport::Http1 => vec![client],
        Transport::Http2 => (0..count.div_ceil(STREAMS_PER_CONNECTION))
            .map(|_| {
                lockbroker_client::Client::builder(url)
                    .http2()
                    .build()
                    .map_err(|e| format!("HTTP/2 client for {url}: {e}"))
            })
            .collect::<Result<_, _>>()?,
    };
    let began = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let client = clients[i % clients.len()].clone();
        let name = held[i % WAITED_LOCKS].name().to_owned();
        tasks.push(tokio::spawn(async move {
            let granted = acquire(&client, &name, HOLD_TTL_MS, 60_000).await?;
            let lease = granted.ok_or("a waiter timed out")?;
            release(&lease).await?;
            Ok::<_, String>((name, lease.fence()))
        }));
        // Paced so the connections do not overflow the listen backlog.
        if i % 250 == 249 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let waiting = waiting_gauge(http, url).await?;
        if waiting >= count as u64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("only {waiting} of {count} acquires ever waited"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let over = match transport {
        Transport::Http1 => "",
        Transport::Http2 => " over HTTP/2",
    };
    println!(
        "memory     {count} waiters{over} in place after {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let reading = phase(&format!("{count} waiters{over}"), pid)?;

    let mut floor: HashMap<String, u64> = HashMap::new();
    for lease in &held {
        release(lease).await?;
        floor.insert(lease.name().to_owned(), lease.fence());
    }
    let mut fences: HashMap<String, Vec<u64>> = HashMap::new();
    let drain = tokio::time::timeout(Duration::from_secs(120), async {
        for task in tasks {
            let (name, fence) = task.await.map_err(|e| e.to_string())??;
            fences.entry(name).or_default().push(fence);
        }
        Ok::<_, String>(())
    });
    drain
        .await
        .map_err(|_| "the waiters were not all served within 120 s".to_owned())??;
    for (name, mut list) in fences {
        let first = floor.get(&name).copied().unwrap_or(0);
        list.sort_unstable();
        let distinct = list.windows(2).all(|w| w[0] < w[1]);
        if !distinct || list.first().is_some_and(|&f| f <= first) {
            return Err(format!("fences of {name} are not all new and distinct"));
        }
    }
    println!(
        "memory     all {count} waiters granted in turn after {:.1} s",
        began.elapsed().as_secs_f64()
    );
    Ok(reading)
}

/// The broker's `lockbroker_waiters` gauge.
async fn waiting_gauge(http: &reqwest::Client, url: &str) -> Result<u64, String> {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .map_err(|e| format!("metrics: {e}"))?
        .text()
        .await
        .map_err(|e| format!("metrics: {e}"))?;
    text.lines()
        .find_map(|line| line.strip_prefix("lockbroker_waiters "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .ok_or_else(|| "no lockbroker_waiters in /metrics".to_owned())
}
