//! Event streams: the first `state`, one event per change in order, from
//! every broker, `expired` at the TTL, resume with `Last-Event-ID`, `lagged`
//! for a reader that stops reading, the stream limit, shutdown, and never a
//! token.

use std::time::{Duration, Instant};

use lockbroker_tests::app::test_settings;
use lockbroker_tests::sse::{EventStream, SseEvent};
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod opening;
mod shares;

const SOON: Duration = Duration::from_secs(5);

/// A second broker on the same Redis and key prefix as `app`.
async fn second_broker(redis: &RedisServer, app: &TestApp) -> TestApp {
    let mut settings = test_settings(redis);
    settings.redis.key_prefix = app.prefix.clone();
    TestApp::spawn_with(settings).await
}

async fn open(app: &TestApp, path: &str) -> EventStream {
    EventStream::open(app, path, None)
        .await
        .unwrap_or_else(|(status, body)| panic!("{path}: {status} {body}"))
}

/// The next event but keep-alives' absence; panics when none comes soon.
async fn next(stream: &mut EventStream, what: &str) -> SseEvent {
    stream
        .next(SOON)
        .await
        .unwrap_or_else(|| panic!("no event: expected {what}"))
}

#[tokio::test]
async fn a_lock_stream_tells_its_state_then_every_change_in_order_and_never_a_token() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let mut stream = open(&app, "/v1/locks/job/events").await;
    let state = next(&mut stream, "state").await;
    assert_eq!(
        (state.event.as_str(), &state.data["held"]),
        ("state", &json!(false))
    );

    let mut tokens = Vec::new();
    let first = json!({"ttl_ms": 30_000, "owner": "w1", "request_id": "r1"});
    let lease = app.acquire_with("job", first.clone()).await;
    tokens.push(lease.token());
    // A retry gets the same lease back, and no second `acquired`.
    let retried = app.acquire_with("job", first).await;
    assert_eq!(retried.fence(), lease.fence());
    let extended = app.extend("job", &lease.token(), 60_000).await;
    assert_eq!(extended.status, StatusCode::OK);
    assert_eq!(
        app.release("job", &lease.token()).await.status,
        StatusCode::OK
    );
    let forced = app.acquire_with("job", json!({"ttl_ms": 30_000})).await;
    tokens.push(forced.token());
    let deleted = app.send(app.http.delete(app.url("/v1/locks/job"))).await;
    assert_eq!(deleted.status, StatusCode::OK);

    let mut seen = Vec::new();
    for expected in [
        "acquired",
        "extended",
        "released",
        "acquired",
        "force_released",
    ] {
        let event = next(&mut stream, expected).await;
        assert_eq!(event.event, expected, "{}", event.raw);
        assert_eq!(event.data["type"], expected);
        assert_eq!(event.data["name"], "job");
        assert_eq!(event.data["mode"], "exclusive");
        seen.push(event);
    }
    assert_eq!(seen[0].data["fence"], lease.fence());
    assert_eq!(seen[0].data["owner"], "w1");
    assert!(
        seen[1].data["expires_in_ms"].as_u64() > Some(30_000),
        "the new TTL"
    );
    assert_eq!(seen[2].data["fence"], lease.fence());
    assert_eq!(seen[4].data["fence"], forced.fence());
    let ids: Vec<u64> = seen.iter().map(|e| e.id.expect("an id")).collect();
    assert!(
        ids.windows(2).all(|pair| pair[0] < pair[1]),
        "ids grow: {ids:?}"
    );
    for event in std::iter::once(&state).chain(&seen) {
        for token in &tokens {
            assert!(
                !event.raw.contains(token.as_str()),
                "a token in {}",
                event.raw
            );
        }
    }
}

#[tokio::test]
async fn changes_on_another_broker_reach_the_stream_and_expiry_is_told_at_the_ttl() {
    let redis = RedisServer::start();
    let watcher = TestApp::spawn(&redis).await;
    let other = second_broker(&redis, &watcher).await;
    let mut stream = open(&watcher, "/v1/locks/job/events").await;
    next(&mut stream, "state").await;

    let lease = other
        .acquire_with("job", json!({"ttl_ms": 30_000, "owner": "b"}))
        .await;
    assert_eq!(next(&mut stream, "acquired").await.data["owner"], "b");
    other.release("job", &lease.token()).await;
    assert_eq!(
        next(&mut stream, "released").await.data["fence"],
        lease.fence()
    );

    // A lease that runs out, taken on the other broker: each watching broker
    // tells its expiry by its own clock. The best of three within 50 ms of
    // the TTL; none before it.
    let mut lateness = Vec::new();
    for _ in 0..3 {
        let sent = Instant::now();
        let short = other.acquire_with("job", json!({"ttl_ms": 500})).await;
        assert_eq!(short.status, StatusCode::OK);
        let answered = Instant::now();
        assert_eq!(next(&mut stream, "acquired").await.event, "acquired");
        let expired = next(&mut stream, "expired").await;
        let at = Instant::now();
        assert_eq!(
            (expired.event.as_str(), &expired.data["fence"]),
            ("expired", &json!(short.fence()))
        );
        assert!(
            at >= sent + Duration::from_millis(500),
            "not before the TTL"
        );
        lateness.push(at.saturating_duration_since(answered + Duration::from_millis(500)));
    }
    lateness.sort();
    assert!(
        lateness[0] <= Duration::from_millis(50),
        "expired late: {lateness:?}"
    );
    assert!(
        lateness[2] <= Duration::from_millis(500),
        "expired late: {lateness:?}"
    );
}

#[tokio::test]
async fn a_stream_resumes_after_its_last_event_id_or_starts_from_a_fresh_state() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let mut stream = open(&app, "/v1/locks/job/events").await;
    next(&mut stream, "state").await;
    let first = app.acquire("job", 30_000).await;
    let acquired = next(&mut stream, "acquired").await;
    drop(stream);

    app.release("job", &first.token()).await;
    let second = app.acquire("job", 30_000).await;
    let mut resumed = EventStream::open(&app, "/v1/locks/job/events", acquired.id)
        .await
        .expect("resumed");
    let missed = [
        next(&mut resumed, "released").await,
        next(&mut resumed, "acquired").await,
    ];
    assert_eq!(
        (missed[0].event.as_str(), missed[1].event.as_str()),
        ("released", "acquired"),
        "the missed events, and no state"
    );
    assert_eq!(missed[1].data["fence"], second.fence());

    // An id this broker no longer knows (or never issued) starts over.
    let mut fresh = EventStream::open(&app, "/v1/locks/job/events", Some(1))
        .await
        .expect("opened");
    let state = next(&mut fresh, "state").await;
    assert_eq!(
        (state.event.as_str(), &state.data["fence"]),
        ("state", &json!(second.fence()))
    );
}

#[tokio::test]
async fn a_prefix_stream_tells_every_lock_under_it_and_nothing_else() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("billing:1", 30_000).await;
    let mut stream = open(&app, "/v1/events?prefix=billing:").await;
    let state = next(&mut stream, "state").await;
    assert_eq!(
        (state.data["name"].as_str(), &state.data["fence"]),
        (Some("billing:1"), &json!(held.fence()))
    );
    let done = next(&mut stream, "the end of the first state").await;
    assert_eq!(done.data, json!({"prefix": "billing:", "complete": true}));
    app.acquire("other:1", 30_000).await;
    let permit = app
        .post("/v1/semaphores/billing:2/acquire", json!({"limit": 2}))
        .await;
    assert_eq!(permit.status, StatusCode::OK);
    let shared = app
        .acquire_with("billing:2", json!({"mode": "shared"}))
        .await;
    let event = next(&mut stream, "acquired").await;
    assert_eq!(
        (event.data["name"].as_str(), event.data["mode"].as_str()),
        (Some("billing:2"), Some("shared"))
    );
    assert_eq!(
        event.data["fence"],
        shared.fence(),
        "not the semaphore's, not other:1's"
    );

    let mut permits = open(&app, "/v1/semaphores/billing:2/events").await;
    let state = next(&mut permits, "state").await;
    assert_eq!(
        (state.data["limit"].as_u64(), state.data["held"].as_u64()),
        (Some(2), Some(1))
    );
    let second = app
        .post("/v1/semaphores/billing:2/acquire", json!({"limit": 2}))
        .await;
    let event = next(&mut permits, "acquired").await;
    assert_eq!(
        (event.data["mode"].as_str(), &event.data["fence"]),
        (Some("permit"), &second.body["fence"])
    );
}

#[tokio::test]
async fn a_reader_that_stops_reading_is_told_it_lagged_then_the_state() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    // A small receive window, and nothing read: the broker's buffers fill.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4_096).expect("buffer size");
    let address = app
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let mut stalled = socket.connect(address).await.expect("connect");
    stalled
        .write_all(b"GET /v1/events?prefix=busy: HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("request");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Eight callers, 600 lock cycles each: 9,600 events, more than the
    // broker and the connection buffer for one reader.
    let app = std::sync::Arc::new(app);
    let callers: Vec<_> = (0..8)
        .map(|i| {
            let app = std::sync::Arc::clone(&app);
            tokio::spawn(async move {
                let name = format!("busy:{i}");
                for _ in 0..600 {
                    let lease = app.acquire(&name, 30_000).await;
                    app.release(&name, &lease.token()).await;
                }
            })
        })
        .collect();
    for caller in callers {
        caller.await.expect("caller");
    }
    let status = app.get("/readyz").await;
    assert_eq!(
        status.status,
        StatusCode::OK,
        "the broker serves the others meanwhile"
    );
    // Now read until `lagged` and a fresh `state` after it have come. A
    // pause between reads is not the end: after a long zero window the
    // kernel may wait for its next probe before sending again.
    let mut text = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut chunk = [0u8; 65_536];
    while Instant::now() < deadline && !lagged_then_state(&text) {
        let read = tokio::time::timeout(Duration::from_millis(500), stalled.read(&mut chunk)).await;
        match read {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => text.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
    // What is already on its way is part of what was buffered.
    while let Ok(Ok(n @ 1..)) =
        tokio::time::timeout(Duration::from_millis(200), stalled.read(&mut chunk)).await
    {
        text.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&text);
    let lagged = text.find("event: lagged").unwrap_or_else(|| {
        panic!(
            "no lagged event in {} bytes, {} events",
            text.len(),
            text.matches("event: ").count()
        )
    });
    assert!(
        text[lagged..].contains("event: state"),
        "a state after lagged"
    );
    assert!(
        text.matches("event: released").count() < 1_500,
        "events were dropped, not buffered"
    );
}

/// Whether `text` holds a `lagged` event with a `state` event after it.
fn lagged_then_state(text: &[u8]) -> bool {
    let text = String::from_utf8_lossy(text);
    text.find("event: lagged")
        .is_some_and(|at| text[at..].contains("event: state"))
}

#[tokio::test]
async fn streams_past_the_limit_get_429_and_shutdown_ends_every_stream() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.max_event_streams = 2;
    let mut app = TestApp::spawn_with(settings).await;
    let mut first = open(&app, "/v1/locks/a/events").await;
    let second = open(&app, "/v1/locks/b/events").await;
    let refused = EventStream::open(&app, "/v1/locks/c/events", None).await;
    let (status, body) = refused.err().expect("a third stream is refused");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_streams"))
    );
    drop(second);
    let mut third = None;
    for _ in 0..50 {
        if let Ok(stream) = EventStream::open(&app, "/v1/locks/c/events", None).await {
            third = Some(stream);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(third.is_some(), "a closed stream frees its place");

    next(&mut first, "state").await;
    let stopping = app.begin_shutdown();
    let started = Instant::now();
    assert!(
        first.next(Duration::from_secs(10)).await.is_none(),
        "the stream ends"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    drop((first, third));
    if let Some(stopping) = stopping {
        stopping.await.expect("join").expect("a clean shutdown");
    }
}
