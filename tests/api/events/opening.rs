//! A prefix stream's opening state, made page by page as its reader takes
//! it: what stalled readers cost the broker, and every lock's state and
//! every later change, in an order that applies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use lockbroker_tests::process::BrokerProcess;
use lockbroker_tests::sse::{parse_all, SseEvent};
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens `path` on `base` over a socket with a small receive window and
/// reads only the answer's head: the broker's buffers fill, then it waits.
/// A broker busy reading other streams' states answers `429`: try again
/// after its `Retry-After`.
async fn stalled_stream(base: &str, path: &str) -> TcpStream {
    for _ in 0..30 {
        let (stream, head) = open_stalled(base, path).await;
        if head.starts_with("HTTP/1.1 200") {
            return stream;
        }
        assert!(head.starts_with("HTTP/1.1 429"), "{head}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("{path}: refused 30 times");
}

async fn open_stalled(base: &str, path: &str) -> (TcpStream, String) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4_096).expect("buffer size");
    let address = base.trim_start_matches("http://").parse().expect("address");
    let mut stream = socket.connect(address).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await;
        match read {
            Ok(Ok(1)) => head.push(byte[0]),
            _ => panic!("no answer head: {}", String::from_utf8_lossy(&head)),
        }
    }
    (stream, String::from_utf8_lossy(&head).into_owned())
}

/// The marker that ends a prefix stream's opening state, as sent.
const MARKER: &[u8] = b"\"complete\":true";

/// Reads what `stream` has until the opening state's marker has come (a
/// busy store may take a while over a page) and then it stays quiet for half
/// a second.
async fn read_past_marker(stream: &mut TcpStream) -> String {
    let mut text = Vec::new();
    let mut chunk = [0u8; 65_536];
    loop {
        let marked = text.windows(MARKER.len()).any(|w| w == MARKER);
        let quiet = Duration::from_millis(if marked { 500 } else { 30_000 });
        let read = tokio::time::timeout(quiet, stream.read(&mut chunk)).await;
        match read {
            Ok(Ok(n)) if n > 0 => text.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Takes `count` locks named `{prefix}{i}` for ten minutes, eight callers
/// at a time.
async fn hold_many(base: &str, prefix: &str, count: usize) {
    let http = reqwest::Client::new();
    let callers: Vec<_> = (0..8)
        .map(|caller| {
            let (http, base, prefix) = (http.clone(), base.to_owned(), prefix.to_owned());
            tokio::spawn(async move {
                for i in (caller..count).step_by(8) {
                    let url = format!("{base}/v1/locks/{prefix}{i}/acquire");
                    let body = json!({
                        "ttl_ms": 600_000,
                        "owner": "holder-with-a-label",
                        "request_id": format!("hold-{i}"),
                    });
                    // A loaded machine may answer 503; the request id makes
                    // the retry safe.
                    let mut status = StatusCode::SERVICE_UNAVAILABLE;
                    for _ in 0..5 {
                        let answer = http.post(&url).json(&body).send().await;
                        status = answer.expect("acquire").status();
                        if !status.is_server_error() {
                            break;
                        }
                    }
                    assert_eq!(status, StatusCode::OK, "{url}");
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
}

/// The broker's memory once it stops growing (or after ten seconds).
async fn settled_rss(broker: &BrokerProcess) -> u64 {
    let mut last = broker.rss_bytes();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = broker.rss_bytes();
        if now.abs_diff(last) < 256 * 1024 {
            return now;
        }
        last = now;
    }
    last
}

const HELD: usize = 1_000;
const STALLED: usize = 100;
/// What one stalled prefix stream may cost the broker, as docs/election.md
/// and openapi.yaml state it: one page of states and the connection's
/// buffers.
const PER_STREAM: u64 = 256 * 1024;

#[tokio::test]
async fn stalled_prefix_streams_cost_the_broker_a_bounded_amount_each() {
    if std::env::var("LOCKBROKER_TEST_MODE").is_ok_and(|mode| mode != "single") {
        // The broker process runs in single mode; the streams are the same
        // in every mode.
        return;
    }
    let redis = RedisServer::start();
    let broker = BrokerProcess::start(&redis, &[("LOCKBROKER_LOG_LEVEL", "warn")]).await;
    hold_many(&broker.base, "mem:", HELD).await;
    // One stream read to its end first, so that what the broker allocates
    // once is counted before.
    let mut warm = stalled_stream(&broker.base, "/v1/events?prefix=mem:").await;
    let text = read_past_marker(&mut warm).await;
    assert_eq!(
        text.matches("event: state").count(),
        HELD + 1,
        "every lock, then the marker"
    );
    drop(warm);
    let before = settled_rss(&broker).await;

    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(stalled_stream(&broker.base, "/v1/events?prefix=mem:").await);
    }
    let after = settled_rss(&broker).await;
    let per_stream = after.saturating_sub(before) / STALLED as u64;
    assert!(
        per_stream <= PER_STREAM,
        "{STALLED} stalled streams over {HELD} locks took the broker from {} KiB to {} KiB: \
         {} KiB a stream",
        before / 1024,
        after / 1024,
        per_stream / 1024
    );
    // Stalled streams hold no read of the store: others still open.
    let mut late = stalled_stream(&broker.base, "/v1/events?prefix=mem:").await;
    assert!(read_past_marker(&mut late)
        .await
        .contains("\"complete\":true"));
    drop(stalled);
    broker.stop();
}

/// A lock's leases by fence, as a reader keeps them from a stream.
type Model = BTreeMap<String, BTreeSet<u64>>;

/// Applies the stream's events in order, the way docs/election.md tells a
/// reader to: a `state` replaces what was known of its lock; `acquired` and
/// `extended` hold the lease of their fence, the ends drop it.
fn apply(model: &mut Model, event: &SseEvent) {
    let name = event.data["name"].as_str().unwrap_or_default().to_owned();
    let fence = event.data["fence"].as_u64().unwrap_or_default();
    match event.event.as_str() {
        "state" if event.data["complete"] == json!(true) => {}
        "state" => {
            let holders = event.data["holders"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let fences = holders.iter().filter_map(|h| h["fence"].as_u64()).collect();
            model.insert(name, fences);
        }
        "acquired" | "extended" => {
            model.entry(name).or_default().insert(fence);
        }
        "released" | "expired" | "force_released" => {
            model.entry(name).or_default().remove(&fence);
        }
        other => panic!("unexpected event {other}: {}", event.raw),
    }
}

#[tokio::test]
async fn a_paged_opening_tells_every_lock_and_every_later_change_in_order() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    hold_many(&app.base, "page:", HELD).await;
    // The reader stalls after the answer's head, so the broker is somewhere
    // in the pages while the locks change.
    let mut reader = stalled_stream(&app.base, "/v1/events?prefix=page:").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut expected = Vec::new();
    for i in 0..40 {
        let name = format!("page:{}", i * 10);
        let forced = app
            .send(app.http.delete(app.url(&format!("/v1/locks/{name}"))))
            .await;
        assert_eq!(forced.status, StatusCode::OK);
        expected.push(("force_released", name.clone(), forced.body["fence"].clone()));
        let again = app.acquire(&name, 600_000).await;
        expected.push(("acquired", name, again.body["fence"].clone()));
    }
    for i in 0..20 {
        let name = format!("page:new-{i}");
        let lease = app.acquire(&name, 600_000).await;
        expected.push(("acquired", name.clone(), lease.body["fence"].clone()));
        app.release(&name, &lease.token()).await;
        expected.push(("released", name, lease.body["fence"].clone()));
    }

    let events = parse_all(&read_past_marker(&mut reader).await);
    let marker = (events.iter())
        .position(|e| e.data == json!({"prefix": "page:", "complete": true}))
        .expect("the marker that ends the opening state");
    let stated: BTreeSet<&str> = (events[..marker].iter())
        .filter(|e| e.event == "state")
        .filter_map(|e| e.data["name"].as_str())
        .collect();
    // The locks forced and taken again may show either lease.
    for i in (0..HELD).filter(|i| i % 10 != 0 || *i >= 400) {
        assert!(
            stated.contains(format!("page:{i}").as_str()),
            "page:{i} has its state"
        );
    }
    assert!(
        events[..marker].iter().any(|e| e.event != "state"),
        "changes made while the pages were read reach the reader among them"
    );
    // Every change made after the stream opened, once, in the order made.
    let changes: Vec<(&str, String, Value)> = (events.iter())
        .filter(|e| e.event != "state")
        .map(|e| {
            (
                e.event.as_str(),
                e.data["name"].as_str().unwrap_or_default().to_owned(),
                e.data["fence"].clone(),
            )
        })
        .collect();
    let expected: Vec<(&str, String, Value)> = expected;
    assert_eq!(
        changes, expected,
        "every change after the opening, in order"
    );

    // Applied in order, the stream leaves the reader with the locks as they are.
    let mut model = Model::new();
    for event in &events {
        apply(&mut model, event);
    }
    model.retain(|_, fences| !fences.is_empty());
    let mut truth = Model::new();
    for i in 0..HELD {
        let name = format!("page:{i}");
        let status = app.status(&name).await;
        assert_eq!(status.status, StatusCode::OK, "{name}: {}", status.body);
        let fences = (status.body["holders"].as_array().into_iter().flatten())
            .filter_map(|h| h["fence"].as_u64())
            .collect();
        truth.insert(name, fences);
    }
    assert_eq!(model, truth, "what the stream told is what is held");
}
