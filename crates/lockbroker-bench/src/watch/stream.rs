//! One event stream of the `watch` case, read over raw HTTP/1.1 by a
//! minimal reader: the response head, a chunked body, events split on blank
//! lines, of which only `event:` and `data:` are read (`data` only where
//! needed); and the stalled reader, which never reads.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;

use super::{Grants, Seen, CALLERS, PREFIX};

/// Latencies one stream keeps at most, to bound the benchmark's memory.
const MAX_SAMPLES: usize = 50_000;
/// The stalled reader's socket receive buffer.
const STALLED_BUFFER: u32 = 4_096;
/// The request each stream sends.
const REQUEST: &[u8] = b"GET /v1/events?prefix=bench-watch HTTP/1.1\r\nhost: 127.0.0.1\r\n\
accept: text/event-stream\r\n\r\n";

/// What one stream measured.
#[derive(Default)]
pub struct StreamOutcome {
    /// Delivery latencies of `acquired` events.
    pub samples: Vec<Duration>,
    /// `acquired` events whose grant was no longer remembered.
    pub unmatched: u64,
    /// `acquired` events whose fence did not exceed the lock's previous one.
    pub fence_faults: u64,
}

/// The `data` of an `acquired` event, as far as it is read here.
#[derive(serde::Deserialize)]
struct Acquired<'a> {
    name: &'a str,
    fence: u64,
}

/// One stream's reader.
pub struct Reader {
    /// Whether it times `acquired` events.
    pub sampler: bool,
    /// The counts of all streams.
    pub seen: Arc<Seen>,
    /// When the grants were answered.
    pub grants: Arc<Grants>,
}

impl Reader {
    /// Reads the stream until `stop` says so.
    pub async fn run(
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
pub async fn stalled(port: u16) -> Result<TcpStream, String> {
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
