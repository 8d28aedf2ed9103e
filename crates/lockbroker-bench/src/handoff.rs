//! `handoff`: how long a waiter takes to get a lock after its holder releases.
//!
//! Each round: a waiter starts waiting (or polling), the holder releases, and
//! the sample is the time from the release's response to the waiter's grant
//! response, both seen by this process. The waiter then becomes the holder.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::procs;
use crate::stats::{report, Summary};

/// How the waiter waits.
#[derive(Clone, Copy)]
enum Waiting {
    /// Server-side: one acquire with `wait_ms`.
    Server,
    /// Client-side: an acquire without waiting every 100 ms, as redis-py's
    /// `Lock` does by default.
    Poll100ms,
}

struct Lease {
    token: String,
    fence: u64,
}

/// Runs the three cases side by side and prints their figures.
pub async fn run(rounds: usize) -> Result<(), String> {
    let redis = procs::redis()?;
    let first = procs::broker(&redis)?;
    let second = procs::broker(&redis)?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(16)
        .build()
        .map_err(|e| e.to_string())?;
    let url = |p: &procs::Proc| format!("http://127.0.0.1:{}", p.port);
    for broker in [&first, &second] {
        wait_ready(&http, &url(broker)).await?;
    }

    println!(
        "handoff: {rounds} rounds each (poller: {} rounds)",
        rounds.min(50)
    );
    let (one, two) = (url(&first), url(&second));
    let mut same = measure(&http, "same", (&one, &one), rounds, Waiting::Server).await?;
    let mut cross = measure(&http, "cross", (&one, &two), rounds, Waiting::Server).await?;
    let mut poll = measure(
        &http,
        "poll",
        (&one, &one),
        rounds.min(50),
        Waiting::Poll100ms,
    )
    .await?;
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
    Ok(())
}

/// Samples `rounds` handoffs on a lock of its own; releases go to the holder's
/// broker, waiters wait on the waiter's broker (`(holder_url, waiter_url)`).
async fn measure(
    http: &reqwest::Client,
    case: &str,
    (holder_url, waiter_url): (&str, &str),
    rounds: usize,
    waiting: Waiting,
) -> Result<Vec<Duration>, String> {
    let name = format!("bench-handoff-{case}");
    let mut held = acquire(http, holder_url, &name, 0)
        .await?
        .ok_or("the benchmark lock is unexpectedly busy")?;
    let mut samples = Vec::with_capacity(rounds);
    // A small deterministic spread of release moments across the poll period.
    let mut phase: u64 = 7;
    for _ in 0..rounds {
        let waiter = {
            let http = http.clone();
            let url = waiter_url.to_owned();
            let name = name.clone();
            tokio::spawn(async move { wait_for_grant(&http, &url, &name, waiting).await })
        };
        phase = (phase * 37 + 11) % 100;
        let settle = match waiting {
            Waiting::Server => 5,
            Waiting::Poll100ms => 20 + phase,
        };
        tokio::time::sleep(Duration::from_millis(settle)).await;
        release(http, holder_url, &name, &held.token).await?;
        let released_at = Instant::now();
        let (granted_at, lease) = waiter.await.map_err(|e| e.to_string())??;
        if lease.fence <= held.fence {
            return Err(format!("fence went from {} to {}", held.fence, lease.fence));
        }
        samples.push(granted_at.saturating_duration_since(released_at));
        held = lease;
    }
    release(http, holder_url, &name, &held.token).await?;
    Ok(samples)
}

async fn wait_for_grant(
    http: &reqwest::Client,
    url: &str,
    name: &str,
    waiting: Waiting,
) -> Result<(Instant, Lease), String> {
    match waiting {
        Waiting::Server => {
            let lease = acquire(http, url, name, 10_000)
                .await?
                .ok_or("waiter timed out")?;
            Ok((Instant::now(), lease))
        }
        Waiting::Poll100ms => {
            for _ in 0..200 {
                if let Some(lease) = acquire(http, url, name, 0).await? {
                    return Ok((Instant::now(), lease));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err("poller never got the lock".into())
        }
    }
}

/// `Ok(None)` when busy.
async fn acquire(
    http: &reqwest::Client,
    url: &str,
    name: &str,
    wait_ms: u64,
) -> Result<Option<Lease>, String> {
    let response = http
        .post(format!("{url}/v1/locks/{name}/acquire"))
        .json(&json!({"ttl_ms": 30_000, "wait_ms": wait_ms}))
        .send()
        .await
        .map_err(|e| format!("acquire: {e}"))?;
    let status = response.status();
    let body: Value = response
        .json()
        .await
        .map_err(|e| format!("acquire body: {e}"))?;
    match status.as_u16() {
        200 => Ok(Some(Lease {
            token: body["token"].as_str().ok_or("no token")?.to_owned(),
            fence: body["fence"].as_u64().ok_or("no fence")?,
        })),
        423 => Ok(None),
        other => Err(format!(
            "acquire answered {other}: {}",
            body["error"]["code"]
        )),
    }
}

async fn release(http: &reqwest::Client, url: &str, name: &str, token: &str) -> Result<(), String> {
    let response = http
        .post(format!("{url}/v1/locks/{name}/release"))
        .json(&json!({"token": token}))
        .send()
        .await
        .map_err(|e| format!("release: {e}"))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("release answered {}", response.status()))
    }
}

async fn wait_ready(http: &reqwest::Client, url: &str) -> Result<(), String> {
    for _ in 0..200 {
        if let Ok(response) = http.get(format!("{url}/readyz")).send().await {
            if response.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("{url} never became ready"))
}
