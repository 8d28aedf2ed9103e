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

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{watch, Barrier};

use crate::client::{wait_ready, PairClient, Target};
use crate::meter::Meter;
use crate::procs::{self, Proc};
use crate::stats::{self, Goal, Summary, Table};
use crate::Settings;

/// Streams read at once.
const STREAMS: usize = 1_000;
/// One stream in this many records delivery latencies.
const SAMPLE_EVERY: usize = 20;
/// Latencies one stream keeps at most, to bound the benchmark's memory.
const MAX_SAMPLES: usize = 50_000;
/// Callers changing locks, each on a lock of its own.
const CALLERS: usize = 16;
/// The prefix every stream watches; caller `i` uses `bench-watch:<i>`.
const PREFIX: &str = "bench-watch";
/// Grants remembered per lock for the latency lookup.
const RING: usize = 8_192;
/// The stalled reader's socket receive buffer.
const STALLED_BUFFER: u32 = 4_096;
/// Time for every stream to open with its state.
const OPENING: Duration = Duration::from_secs(60);
/// Longest wait, after the load, for the streams to read what is in flight.
const DRAIN: Duration = Duration::from_secs(5);
/// The request each stream sends.
const REQUEST: &[u8] = b"GET /v1/events?prefix=bench-watch HTTP/1.1\r\nhost: 127.0.0.1\r\n\
accept: text/event-stream\r\n\r\n";

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

    fn slot(fence: u64) -> usize {
        (fence % RING as u64) as usize
    }

    fn record(&self, lock: usize, fence: u64, at: Instant) {
        if let Some(ring) = self.rings.get(lock) {
            ring.lock().unwrap_or_else(|e| e.into_inner())[Self::slot(fence)] = (fence, at);
        }
    }

    /// Time since the answer granting `fence` on `lock`: zero when the event
    /// came before the answer was recorded, `None` once it is forgotten.
    fn since(&self, lock: usize, fence: u64) -> Option<Duration> {
        let ring = self.rings.get(lock)?;
        let (known, at) = ring.lock().unwrap_or_else(|e| e.into_inner())[Self::slot(fence)];
        match known.cmp(&fence) {
            std::cmp::Ordering::Equal => Some(at.elapsed()),
            std::cmp::Ordering::Less => Some(Duration::ZERO),
            std::cmp::Ordering::Greater => None,
        }
    }
}

/// What one stream measured.
#[derive(Default)]
struct StreamOutcome {
    samples: Vec<Duration>,
    /// `acquired` events whose grant was no longer remembered.
    unmatched: u64,
    /// `acquired` events whose fence did not exceed the lock's previous one.
    fence_faults: u64,
}

/// The `data` of an `acquired` event, as far as it is read here.
#[derive(serde::Deserialize)]
struct Acquired<'a> {
    name: &'a str,
    fence: u64,
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
    let broker = procs::broker_with(
        redis,
        &[("LOCKBROKER_HTTP_MAX_EVENT_STREAMS", max_streams.as_str())],
    )?;
    let (port, pid) = (broker.port, broker.pid());
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    wait_ready(&http, &format!("http://127.0.0.1:{port}")).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = memory("idle, no stream", pid)?;

    let seen = Arc::new(Seen::default());
    let grants = Arc::new(Grants::new());
    let (stop, stopped) = watch::channel(false);
    let mut streams = Vec::with_capacity(STREAMS);
    let began = Instant::now();
    for i in 0..STREAMS {
        let reader = Reader {
            sampler: i % SAMPLE_EVERY == 0,
            seen: Arc::clone(&seen),
            grants: Arc::clone(&grants),
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
                "only {ready} of {STREAMS} streams opened within {OPENING:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "watch      {STREAMS} streams open with their state after {:.1} s",
        began.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let open = memory("1,000 idle streams", pid)?;

    // Held, never read, until the memory under load is read.
    let stalled = stalled(port).await?;
    let mut meter = Meter::new(vec![("broker", pid)], None).await?;
    let start = Arc::new(Barrier::new(CALLERS + 1));
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (grants, start) = (Arc::clone(&grants), Arc::clone(&start));
            tokio::spawn(caller(port, i, grants, start, settings.duration))
        })
        .collect();
    start.wait().await;
    let before = meter.read().await?;
    let counts_before = counts(&seen);
    let load_began = Instant::now();
    let mut pairs = 0;
    for caller in callers {
        pairs += caller.await.map_err(|e| e.to_string())??;
    }
    let elapsed = load_began.elapsed().as_secs_f64();
    let counts_after = counts(&seen);
    let mut usage = crate::meter::Usage::default();
    usage.add_span(&before, &meter.read().await?);
    let loaded = memory("under load, a stalled reader", pid)?;
    drop(stalled);

    // Let the streams read what was already on its way, then stop them.
    let drain_began = Instant::now();
    let mut last = seen.delivered.load(Ordering::Relaxed);
    while drain_began.elapsed() < DRAIN {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = seen.delivered.load(Ordering::Relaxed);
        if now == last {
            break;
        }
        last = now;
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

    let delivered = counts_after.0 - counts_before.0;
    let (lagged, missed) = (
        counts_after.1 - counts_before.1,
        counts_after.2 - counts_before.2,
    );
    let rate = delivered as f64 / elapsed.max(1e-9);
    let cpu_us = usage.cpu_of("broker") * 1e6 / delivered.max(1) as f64;
    let latency = Summary::of(&mut outcome.samples);
    stats::report("watch", "delivery, 1,000 streams", &latency);
    println!(
        "watch: {STREAMS} streams on one prefix, {:.0} changes/s from {CALLERS} callers; \
         {rate:.0} events/s delivered, {:.0}/s missed ({lagged} lagged notices); delivery \
         p50 {:.3} ms, p99 {:.3} ms (n={}, {} unmatched); broker {cpu_us:.2} µs CPU per \
         delivered event; RSS idle {:.1} / 1,000 streams {:.1} / under load with a stalled \
         reader {:.1} MiB",
        pairs as f64 * 2.0 / elapsed.max(1e-9),
        missed as f64 / elapsed.max(1e-9),
        latency.p50_ms,
        latency.p99_ms,
        latency.count,
        outcome.unmatched,
        idle,
        open,
        loaded,
    );
    let figures: [(&str, &'static str, f64); 8] = [
        ("watch delivery p50, 1,000 streams", "ms", latency.p50_ms),
        ("watch delivery p99, 1,000 streams", "ms", latency.p99_ms),
        ("watch events delivered per second", "/s", rate),
        (
            "watch events missed by lagging readers",
            "%",
            missed as f64 * 100.0 / (delivered + missed).max(1) as f64,
        ),
        ("watch broker CPU per delivered event", "µs", cpu_us),
        ("watch broker RSS idle", "MiB", idle),
        ("watch broker RSS, 1,000 idle streams", "MiB", open),
        ("watch broker RSS, load + a stalled reader", "MiB", loaded),
    ];
    for (name, unit, value) in figures {
        table.add(name, unit, (value, None), Goal::None);
    }
    if outcome.fence_faults > 0 {
        return Err(format!(
            "{} acquired events did not grow their lock's fence",
            outcome.fence_faults
        ));
    }
    if latency.count == 0 {
        return Err("no acquired event was timed".into());
    }
    Ok(())
}

/// The delivered, lagged and missed counts now.
fn counts(seen: &Seen) -> (u64, u64, u64) {
    (
        seen.delivered.load(Ordering::Relaxed),
        seen.lagged.load(Ordering::Relaxed),
        seen.missed.load(Ordering::Relaxed),
    )
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

/// One stream's reader.
struct Reader {
    /// Whether it times `acquired` events.
    sampler: bool,
    seen: Arc<Seen>,
    grants: Arc<Grants>,
}

impl Reader {
    /// Reads the stream until `stop` says so.
    async fn run(
        self,
        port: u16,
        mut stop: watch::Receiver<bool>,
    ) -> Result<StreamOutcome, String> {
        let mut reader = open(port).await?;
        let mut outcome = StreamOutcome::default();
        let mut fences = [0u64; CALLERS];
        let mut ready = false;
        let (mut line, mut body) = (String::with_capacity(16), Vec::with_capacity(4096));
        loop {
            tokio::select! {
                read = chunk(&mut reader, &mut line, &mut body) => read?,
                _ = stop.changed() => return Ok(outcome),
            }
            let mut done = 0;
            while let Some(end) = body[done..].windows(2).position(|w| w == b"\n\n") {
                let event = &body[done..done + end];
                done += end + 2;
                self.event(event, &mut ready, &mut fences, &mut outcome);
            }
            body.drain(..done);
        }
    }

    /// Takes in one event (its lines, without the blank line after them).
    fn event(
        &self,
        event: &[u8],
        ready: &mut bool,
        fences: &mut [u64; CALLERS],
        outcome: &mut StreamOutcome,
    ) {
        let (mut kind, mut data): (&[u8], &[u8]) = (b"", b"");
        for line in event.split(|&b| b == b'\n') {
            let field = |name: &[u8]| {
                let value = line.strip_prefix(name)?;
                Some(value.strip_prefix(b" ").unwrap_or(value))
            };
            if let Some(value) = field(b"event:") {
                kind = value;
            } else if let Some(value) = field(b"data:") {
                data = value;
            }
        }
        match kind {
            // A comment (keep-alive).
            b"" => {}
            b"state" => {
                let complete = data.windows(15).any(|w| w == b"\"complete\":true");
                if complete && !*ready {
                    *ready = true;
                    self.seen.ready.fetch_add(1, Ordering::AcqRel);
                }
            }
            b"lagged" => {
                self.seen.lagged.fetch_add(1, Ordering::Relaxed);
                let missed = serde_json::from_slice::<serde_json::Value>(data)
                    .ok()
                    .and_then(|v| v["missed"].as_u64())
                    .unwrap_or(0);
                self.seen.missed.fetch_add(missed, Ordering::Relaxed);
            }
            kind => {
                self.seen.delivered.fetch_add(1, Ordering::Relaxed);
                if kind == b"acquired" && self.sampler {
                    self.time(data, fences, outcome);
                }
            }
        }
    }

    /// Times an `acquired` event and checks that its lock's fence grew.
    fn time(&self, data: &[u8], fences: &mut [u64; CALLERS], outcome: &mut StreamOutcome) {
        let Ok(acquired) = serde_json::from_slice::<Acquired<'_>>(data) else {
            return;
        };
        let Some(lock) = (acquired.name.strip_prefix(PREFIX))
            .and_then(|rest| rest.strip_prefix(':')?.parse::<usize>().ok())
            .filter(|&lock| lock < CALLERS)
        else {
            return;
        };
        if acquired.fence <= fences[lock] {
            outcome.fence_faults += 1;
        }
        fences[lock] = acquired.fence;
        match self.grants.since(lock, acquired.fence) {
            Some(delay) if outcome.samples.len() < MAX_SAMPLES => outcome.samples.push(delay),
            Some(_) => {}
            None => outcome.unmatched += 1,
        }
    }
}

/// Opens a stream: sends the request and reads the answer's head, which
/// must be a `200` with a chunked event stream.
async fn open(port: u16) -> Result<BufReader<TcpStream>, String> {
    let io = |e: std::io::Error| format!("stream: {e}");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.map_err(io)?;
    stream.set_nodelay(true).map_err(io)?;
    stream.write_all(REQUEST).await.map_err(io)?;
    let mut reader = BufReader::with_capacity(8192, stream);
    let mut line = String::new();
    reader.read_line(&mut line).await.map_err(io)?;
    if line.split(' ').nth(1) != Some("200") {
        return Err(format!("the stream was answered {:?}", line.trim_end()));
    }
    let (mut chunked, mut events) = (false, false);
    loop {
        line.clear();
        if reader.read_line(&mut line).await.map_err(io)? == 0 {
            return Err("the broker closed a stream in its head".into());
        }
        let header = line.trim_end().to_ascii_lowercase();
        if header.is_empty() {
            break;
        }
        chunked |= header.starts_with("transfer-encoding:") && header.ends_with("chunked");
        events |= header.starts_with("content-type:") && header.contains("text/event-stream");
    }
    if !(chunked && events) {
        return Err("the stream is not a chunked text/event-stream".into());
    }
    Ok(reader)
}

/// Appends the next chunk of the body to `body`.
async fn chunk(
    reader: &mut BufReader<TcpStream>,
    line: &mut String,
    body: &mut Vec<u8>,
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("stream: {e}");
    line.clear();
    if reader.read_line(line).await.map_err(io)? == 0 {
        return Err("the broker closed a stream".into());
    }
    let size = line.trim_end().split(';').next().unwrap_or_default();
    let size = usize::from_str_radix(size.trim(), 16)
        .map_err(|_| format!("bad chunk size line {line:?}"))?;
    if size == 0 {
        return Err("the broker ended a stream".into());
    }
    let from = body.len();
    body.resize(from + size, 0);
    reader.read_exact(&mut body[from..]).await.map_err(io)?;
    let mut end = [0; 2];
    reader.read_exact(&mut end).await.map_err(io)?;
    Ok(())
}

/// Opens a stream with a small receive buffer, reads the start of its answer
/// to see that it is one, and never reads again.
async fn stalled(port: u16) -> Result<TcpStream, String> {
    let io = |e: std::io::Error| format!("stalled stream: {e}");
    let socket = TcpSocket::new_v4().map_err(io)?;
    socket.set_recv_buffer_size(STALLED_BUFFER).map_err(io)?;
    let mut stream = socket
        .connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .await
        .map_err(io)?;
    stream.write_all(REQUEST).await.map_err(io)?;
    let mut start = [0; 12];
    stream.read_exact(&mut start).await.map_err(io)?;
    if &start != b"HTTP/1.1 200" {
        return Err(format!(
            "the stalled stream was answered {:?}",
            String::from_utf8_lossy(&start)
        ));
    }
    Ok(stream)
}
