//! `watch`: 1,000 event streams on one broker, all watching the prefix
//! `bench-watch`, while 16 callers each loop acquire + release on a lock of
//! their own under it as fast as they can: how soon a change reaches a stream
//! (p50 / p99, from the acquire's answer to the `acquired` event), events
//! delivered per second over all streams (and how many the broker reported
//! missed to readers that fell behind), the broker's CPU per delivered event
//! (all of it, the callers' requests included), and its resident memory idle,
//! with the 1,000 streams open, and at the end of the load with one more
//! stream whose reader never reads.
//!
//! The streams are read over raw HTTP/1.1 by a minimal reader (a chunked
//! body, events split on blank lines), as the pair cases' client is; one
//! stream in [`SAMPLE_EVERY`] times its `acquired` events and checks that
//! each lock's fences grow. A broker of its own, allowed more streams than
//! the default 1,000.

mod stream;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Barrier};
use tokio::task::JoinHandle;

use stream::{stalled, Reader, StreamOutcome};

use crate::client::{wait_ready, PairClient, Target};
use crate::meter::Meter;
use crate::procs::{self, Proc};
use crate::stats::{self, Goal, Summary, Table};
use crate::Settings;

/// Streams read at once.
const STREAMS: usize = 1_000;
/// One stream in this many records delivery latencies.
const SAMPLE_EVERY: usize = 20;
/// Callers changing locks, each on a lock of its own.
const CALLERS: usize = 16;
/// The prefix every stream watches; caller `i` uses `bench-watch:<i>`.
const PREFIX: &str = "bench-watch";
/// Grants remembered per lock for the latency lookup.
const RING: usize = 8_192;
/// Time for every stream to open with its state.
const OPENING: Duration = Duration::from_secs(60);
/// Longest wait, after the load, for the streams to read what is in flight.
const DRAIN: Duration = Duration::from_secs(5);

/// What the streams have seen, over all of them.
#[derive(Default)]
struct Seen {
    /// Streams whose opening state is complete.
    ready: AtomicUsize,
    /// Change events read.
    delivered: AtomicU64,
    /// `lagged` notices read.
    lagged: AtomicU64,
    /// Events those notices said were missed.
    missed: AtomicU64,
}

impl Seen {
    /// The delivered, lagged and missed counts now.
    fn counts(&self) -> [u64; 3] {
        [&self.delivered, &self.lagged, &self.missed].map(|n| n.load(Ordering::Relaxed))
    }
}

/// When each caller's grants were answered, by fence: a ring per lock.
struct Grants {
    rings: Vec<Mutex<Vec<(u64, Instant)>>>,
}

impl Grants {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            rings: (0..CALLERS)
                .map(|_| Mutex::new(vec![(0, now); RING]))
                .collect(),
        }
    }

    fn record(&self, lock: usize, fence: u64, at: Instant) {
        if let Some(ring) = self.rings.get(lock) {
            let slot = (fence % RING as u64) as usize;
            ring.lock().unwrap_or_else(|e| e.into_inner())[slot] = (fence, at);
        }
    }

    /// Time since the answer granting `fence` on `lock`: zero when the event
    /// came before the answer was recorded, `None` once it is forgotten.
    fn since(&self, lock: usize, fence: u64) -> Option<Duration> {
        let ring = self.rings.get(lock)?;
        let slot = (fence % RING as u64) as usize;
        let (known, at) = ring.lock().unwrap_or_else(|e| e.into_inner())[slot];
        match known.cmp(&fence) {
            std::cmp::Ordering::Equal => Some(at.elapsed()),
            std::cmp::Ordering::Less => Some(Duration::ZERO),
            std::cmp::Ordering::Greater => None,
        }
    }
}

/// Runs the watch case on a broker of its own over `redis`.
pub async fn run(redis: &Proc, settings: &Settings, table: &mut Table) -> Result<(), String> {
    let needed = (STREAMS + 200) as u64;
    if let Some(limit) = procs::open_files_limit("self").filter(|&l| l < needed) {
        return Err(format!(
            "this process may open {limit} files and {STREAMS} streams need about {needed} \
             here and in the broker: raise `ulimit -n` and run again"
        ));
    }
    let max_streams = (STREAMS + 100).to_string();
    let env = [("LOCKBROKER_HTTP_MAX_EVENT_STREAMS", max_streams.as_str())];
    let broker = procs::broker_with(redis, &env)?;
    let (port, pid) = (broker.port, broker.pid());
    wait_ready(&format!("http://127.0.0.1:{port}")).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = memory("idle, no stream", pid)?;

    let seen = Arc::new(Seen::default());
    let grants = Arc::new(Grants::new());
    let (stop, stopped) = watch::channel(false);
    let streams = open_streams(port, &seen, &grants, &stopped).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let open = memory("1,000 idle streams", pid)?;

    // Held, never read, until the memory under load is read.
    let stalled = stalled(port).await?;
    let me = std::process::id();
    let mut meter = Meter::new(vec![("broker", pid), ("bench", me)], None).await?;
    let start = Arc::new(Barrier::new(CALLERS + 1));
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (grants, start) = (Arc::clone(&grants), Arc::clone(&start));
            tokio::spawn(caller(port, i, grants, start, settings.duration))
        })
        .collect();
    start.wait().await;
    let (before, counts_before) = (meter.read().await?, seen.counts());
    let began = Instant::now();
    let mut pairs = 0;
    for caller in callers {
        pairs += caller.await.map_err(|e| e.to_string())??;
    }
    let elapsed = began.elapsed().as_secs_f64().max(1e-9);
    let counts_after = seen.counts();
    let mut usage = crate::meter::Usage::default();
    usage.add_span(&before, &meter.read().await?);
    let loaded = memory("under load, a stalled reader", pid)?;
    drop(stalled);

    // Let the streams read what was already on its way, then stop them.
    let mut last = seen.counts()[0];
    for _ in 0..DRAIN.as_millis() / 300 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = seen.counts()[0];
        if std::mem::replace(&mut last, now) == now {
            break;
        }
    }
    let _ = stop.send(true);
    let mut outcome = StreamOutcome::default();
    for stream in streams {
        let one = stream.await.map_err(|e| e.to_string())??;
        outcome.samples.extend(one.samples);
        outcome.unmatched += one.unmatched;
        outcome.fence_faults += one.fence_faults;
    }
    drop(broker);

    let [delivered, lagged, missed] = [0, 1, 2].map(|i| counts_after[i] - counts_before[i]);
    let rate = delivered as f64 / elapsed;
    let changes = pairs as f64 * 2.0 / elapsed;
    let missed_share = missed as f64 * 100.0 / (delivered + missed).max(1) as f64;
    let [cpu_us, bench_us] =
        ["broker", "bench"].map(|p| usage.cpu_of(p) * 1e6 / delivered.max(1) as f64);
    let latency = Summary::of(&mut outcome.samples);
    stats::report("watch", "delivery, 1,000 streams", &latency);
    let (p50, p99, n, unmatched) = (
        latency.p50_ms,
        latency.p99_ms,
        latency.count,
        outcome.unmatched,
    );
    println!(
        "watch: {STREAMS} streams on one prefix, {changes:.0} changes/s from {CALLERS} callers; \
         {rate:.0} events/s delivered, {missed_share:.2}% missed ({lagged} lagged notices); \
         delivery p50 {p50:.3} ms, p99 {p99:.3} ms (n={n}, {unmatched} unmatched); CPU per \
         delivered event: broker {cpu_us:.2} µs, this process {bench_us:.2} µs; broker RSS idle \
         {idle:.1} / {STREAMS} streams {open:.1} / under load with a stalled reader {loaded:.1} MiB"
    );
    let figures: [(&str, &'static str, f64); 8] = [
        ("watch delivery p50, 1,000 streams", "ms", p50),
        ("watch delivery p99, 1,000 streams", "ms", p99),
        ("watch events delivered per second", "/s", rate),
        ("watch events missed by lagging readers", "%", missed_share),
        ("watch broker CPU per delivered event", "µs", cpu_us),
        ("watch broker RSS idle", "MiB", idle),
        ("watch broker RSS, 1,000 idle streams", "MiB", open),
        ("watch broker RSS, load + a stalled reader", "MiB", loaded),
    ];
    for (name, unit, value) in figures {
        table.add(name, unit, (value, None), Goal::None);
    }
    if outcome.fence_faults > 0 {
        let faults = outcome.fence_faults;
        return Err(format!(
            "{faults} acquired events did not grow their lock's fence"
        ));
    }
    if n == 0 {
        return Err("no acquired event was timed".into());
    }
    Ok(())
}

/// Opens the [`STREAMS`] streams, each read by a task of its own until
/// `stopped`, and waits until each has had its opening state.
async fn open_streams(
    port: u16,
    seen: &Arc<Seen>,
    grants: &Arc<Grants>,
    stopped: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<Result<StreamOutcome, String>>>, String> {
    let began = Instant::now();
    let mut streams = Vec::with_capacity(STREAMS);
    for i in 0..STREAMS {
        let reader = Reader {
            sampler: i % SAMPLE_EVERY == 0,
            seen: Arc::clone(seen),
            grants: Arc::clone(grants),
        };
        streams.push(tokio::spawn(reader.run(port, stopped.clone())));
        // Paced so the connections do not overflow the listen backlog.
        if i % 250 == 249 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    while seen.ready.load(Ordering::Acquire) < STREAMS {
        if let Some(ended) = streams.iter_mut().find(|s| s.is_finished()) {
            let error = match ended.await {
                Ok(Err(error)) => error,
                Ok(Ok(_)) => "a stream stopped early".to_owned(),
                Err(error) => error.to_string(),
            };
            return Err(format!("opening the streams: {error}"));
        }
        if began.elapsed() > OPENING {
            let ready = seen.ready.load(Ordering::Acquire);
            return Err(format!(
                "{ready} of {STREAMS} streams opened in {OPENING:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = began.elapsed().as_secs_f64();
    println!("watch      {STREAMS} streams open with their state after {after:.1} s");
    Ok(streams)
}

/// Prints and returns the broker's `VmRSS` in MiB.
fn memory(case: &str, pid: u32) -> Result<f64, String> {
    let (rss, hwm) = procs::memory_mib(pid)?;
    println!("watch      {case:<28} VmRSS={rss:>7.1} MiB  VmHWM={hwm:>7.1} MiB");
    println!(
        "{}",
        serde_json::json!({"bench": "watch", "case": case, "vm_rss_mib": rss, "vm_hwm_mib": hwm})
    );
    Ok(rss)
}

/// Caller `index`: acquire + release on `bench-watch:<index>` until
/// `duration` has passed, noting when each grant was answered; the pairs.
async fn caller(
    port: u16,
    index: usize,
    grants: Arc<Grants>,
    start: Arc<Barrier>,
    duration: Duration,
) -> Result<u64, String> {
    let client = PairClient::connect(&Target::Broker { port }, &format!("{PREFIX}:{index}")).await;
    start.wait().await;
    let mut client = client?;
    let deadline = Instant::now() + duration;
    let mut pairs = 0;
    while Instant::now() < deadline {
        let lease = client.acquire().await?;
        grants.record(index, lease.fence, Instant::now());
        client.release(&lease).await?;
        pairs += 1;
    }
    Ok(pairs)
}
