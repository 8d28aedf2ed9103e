//! A session's own event stream: opened, kept, closed, expired; and each
//! lease's end on its lock's stream. Never a token.

use std::time::Duration;

use lockbroker_tests::sse::{EventStream, SseEvent};
use lockbroker_tests::{RedisServer, TestApp};
use serde_json::json;

use super::{acquire_in, close, kept, open};

async fn next(stream: &mut EventStream, what: &str) -> SseEvent {
    stream
        .next(Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("no event: expected {what}"))
}

async fn watch(app: &TestApp, path: &str) -> EventStream {
    EventStream::open(app, path, None)
        .await
        .unwrap_or_else(|(status, body)| panic!("{path}: {status} {body}"))
}

#[tokio::test]
async fn a_session_stream_tells_it_kept_closed_or_expired_and_never_a_token() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let session = open(&app, json!({"ttl_ms": 10_000, "owner": "w1"})).await;
    let mut stream = watch(&app, &format!("/v1/sessions/{}/events", session.id)).await;
    let opening = next(&mut stream, "state").await;
    assert_eq!(opening.event, "state", "{}", opening.raw);
    assert_eq!(opening.data["held"], true);
    let lease = acquire_in(&app, &session, "jobs:watched", json!({})).await;
    let mut lock_stream = watch(&app, "/v1/locks/jobs:watched/events").await;
    next(&mut lock_stream, "state").await;
    kept(&app, &session).await;
    close(&app, &session).await;
    let mut seen = vec![opening];
    for expected in ["extended", "released"] {
        let event = next(&mut stream, expected).await;
        assert_eq!(event.event, expected, "{}", event.raw);
        assert_eq!(event.data["name"], session.id.as_str());
        seen.push(event);
    }
    for expected in ["extended", "released"] {
        let event = next(&mut lock_stream, expected).await;
        assert_eq!(event.event, expected, "{}", event.raw);
        assert_eq!(event.data["fence"], lease.fence());
        seen.push(event);
    }

    let short = open(&app, json!({"ttl_ms": 400})).await;
    acquire_in(&app, &short, "jobs:short", json!({})).await;
    let mut short_stream = watch(&app, &format!("/v1/sessions/{}/events", short.id)).await;
    let mut lock_stream = watch(&app, "/v1/locks/jobs:short/events").await;
    next(&mut short_stream, "state").await;
    next(&mut lock_stream, "state").await;
    let expired = next(&mut short_stream, "expired").await;
    assert_eq!(expired.event, "expired", "{}", expired.raw);
    let lease_expired = next(&mut lock_stream, "expired").await;
    assert_eq!(lease_expired.event, "expired", "{}", lease_expired.raw);
    seen.extend([expired, lease_expired]);
    for event in &seen {
        for token in [&session.token, &short.token, &lease.token()] {
            assert!(
                !event.raw.contains(token.as_str()),
                "a token in {}",
                event.raw
            );
        }
    }
}
