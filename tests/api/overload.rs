//! Bursts of expensive reads: a broker sheds what it cannot serve at once
//! and is ready again within seconds of the burst, with its Redis client
//! intact.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::{ClientLike, KeysInterface};
use fred::types::config::Config;
use fred::types::{Builder, Value};
use lockbroker_tests::sse::EventStream;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

/// How soon after a burst the broker must answer every probe again.
const RECOVERY: Duration = Duration::from_secs(5);

/// Takes `count` locks named `{prefix}{i}`, a few dozen requests at a time.
async fn hold_locks(app: &Arc<TestApp>, prefix: &str, count: usize) {
    let mut names = (0..count).map(|i| format!("{prefix}{i}"));
    loop {
        let batch: Vec<String> = names.by_ref().take(50).collect();
        if batch.is_empty() {
            return;
        }
        let mut grants = tokio::task::JoinSet::new();
        for name in batch {
            let app = Arc::clone(app);
            grants.spawn(async move { app.acquire(&name, 120_000).await.status });
        }
        while let Some(status) = grants.join_next().await {
            assert_eq!(status.expect("acquire task"), StatusCode::OK);
        }
    }
}

/// Sends `count` requests for `path` at once and counts their statuses.
async fn burst(app: &Arc<TestApp>, path: &str, count: usize) -> Vec<StatusCode> {
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..count {
        let app = Arc::clone(app);
        let path = path.to_owned();
        requests.spawn(async move { app.get(&path).await });
    }
    let mut statuses = Vec::new();
    while let Some(reply) = requests.join_next().await {
        let reply = reply.expect("request task");
        if reply.status != StatusCode::OK {
            assert!(
                [
                    StatusCode::TOO_MANY_REQUESTS,
                    StatusCode::SERVICE_UNAVAILABLE
                ]
                .contains(&reply.status),
                "a shed listing is a 429 or 503, not {}: {}",
                reply.status,
                reply.body
            );
            assert!(
                reply.headers.contains_key("retry-after"),
                "a shed listing says when to retry: {:?}",
                reply.headers
            );
        }
        statuses.push(reply.status);
    }
    statuses
}

/// Polls `path` until it answers 200, for at most [`RECOVERY`].
async fn answers_soon(app: &TestApp, path: &str) -> Duration {
    let started = Instant::now();
    loop {
        let reply = app.get(path).await;
        if reply.status == StatusCode::OK {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < RECOVERY,
            "{path} still answers {} {} {:?} after the burst",
            reply.status,
            reply.body,
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_burst_of_listings_is_shed_and_the_broker_is_ready_again_within_seconds() {
    let redis = RedisServer::start();
    let app = Arc::new(TestApp::spawn(&redis).await);
    hold_locks(&app, "billing:", 1_000).await;

    for _ in 0..2 {
        let statuses = burst(&app, "/v1/locks?prefix=billing:&limit=1000", 150).await;
        assert!(
            statuses.contains(&StatusCode::OK),
            "some listings of the burst are served: {statuses:?}"
        );
    }

    answers_soon(&app, "/readyz").await;
    answers_soon(&app, "/v1/locks?prefix=billing:&limit=1000").await;
    let page = app.get("/v1/locks?prefix=billing:&limit=1000").await;
    assert!(
        !page.body["locks"].as_array().expect("locks").is_empty(),
        "the listing after the burst finds the held locks: {}",
        page.body
    );
    let stream = EventStream::open(&app, "/v1/events?prefix=billing:", None).await;
    assert!(
        stream.is_ok(),
        "a prefix stream opens after the burst: {:?}",
        stream.err()
    );
    let grant = app
        .acquire_with("after-the-burst", json!({"ttl_ms": 10_000}))
        .await;
    assert_eq!(grant.status, StatusCode::OK, "{}", grant.body);
}

/// fred 10.1 with a bounded command queue (`max_command_buffer_len`): a
/// command refused with `Backpressure` still counts as queued, and a
/// connection that believes commands are queued behind the one it writes
/// leaves it unflushed. After one overflow a lone `GET` is never sent.
/// The store therefore keeps fred's queue unbounded and bounds its own
/// work instead; when this test fails, fred's queue bound is safe to use.
#[tokio::test]
async fn the_redis_client_leaves_commands_unsent_after_its_bounded_queue_overflowed() {
    let redis = RedisServer::start();
    let config = Config::from_url(&redis.url()).expect("redis url");
    let client: Client = Builder::from_config(config)
        .with_connection_config(|conn| conn.max_command_buffer_len = 16)
        .with_performance_config(|perf| {
            perf.default_command_timeout = Duration::from_millis(500);
        })
        .build()
        .expect("client");
    client.init().await.expect("connects");
    let _: Value = client
        .ping(None)
        .await
        .expect("answers before the overflow");

    let flood: Vec<_> = (0..2_000).map(|_| client.ping::<Value>(None)).collect();
    let answers = futures_util::future::join_all(flood).await;
    let refused = answers.iter().filter(|answer| answer.is_err()).count();

    assert!(refused > 0, "the flood overflowed the queue");

    // PING and FCALL flush the socket whatever the count says; GET, SCAN
    // and SCRIPT EXISTS (what the readiness check sent then) wait for a flush that never
    // comes.
    let after: Result<Value, _> = client.get("any-key").await;
    assert!(
        after.is_err(),
        "a lone command after the overflow was answered: fred now flushes it"
    );
    let _ = client.quit().await;
}
