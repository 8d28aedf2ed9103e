//! Each API key's share of the event streams, and the streams kept for
//! admin keys: one key cannot take every stream.

use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::sse::EventStream;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;

const WORKER: &str = "worker-key-4f1c";
const OPERATOR: &str = "operator-key-9a2e";

/// A broker of 20 streams, with a `lock` key limited to `billing:` and an
/// admin key, each key allowed `share_percent` of them.
async fn broker(share_percent: u32) -> (RedisServer, TestApp) {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.max_event_streams = 20;
    settings.http.event_stream_share_percent = share_percent;
    settings.http.event_stream_admin_reserve_percent = 10;
    let key = |id: &str, token: &str, scopes: Vec<Scope>, prefix: &str| ApiKeyConfig {
        id: id.into(),
        sha256: hash_token(token),
        scopes,
        prefixes: vec![prefix.into()],
        rate_limit_per_sec: Some(0),
    };
    settings.auth.keys = vec![
        key("worker", WORKER, vec![Scope::Lock], "billing:"),
        key("operator", OPERATOR, vec![Scope::Lock, Scope::Admin], "*"),
    ];
    let app = TestApp::spawn_with(settings).await;
    (redis, app)
}

/// Opens streams of `key` until one is refused; the open ones and the
/// refusal's code.
async fn open_until_refused(app: &TestApp, key: &str) -> (Vec<EventStream>, String) {
    let mut open = Vec::new();
    for i in 0..30 {
        match EventStream::open_as(app, &format!("/v1/locks/billing:{i}/events"), key).await {
            Ok(stream) => open.push(stream),
            Err((status, body)) => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
                return (
                    open,
                    body["error"]["code"].as_str().unwrap_or("").to_owned(),
                );
            }
        }
    }
    panic!("30 streams and no refusal");
}

#[tokio::test]
async fn one_key_holds_its_share_of_the_streams_and_the_admin_still_gets_one() {
    let (_redis, app) = broker(25).await;
    let (worker, code) = open_until_refused(&app, WORKER).await;
    assert_eq!(
        (worker.len(), code.as_str()),
        (5, "too_many_streams"),
        "a quarter of 20"
    );
    let page = EventStream::open_as(&app, "/v1/events?prefix=", OPERATOR).await;
    assert!(page.is_ok(), "the operator's page opens: {:?}", page.err());
    drop(worker);
    // A closed stream gives its place back to its key.
    let mut again = None;
    for _ in 0..50 {
        if let Ok(stream) = EventStream::open_as(&app, "/v1/locks/billing:x/events", WORKER).await {
            again = Some(stream);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the key's share frees with its streams");
}

#[tokio::test]
async fn the_last_streams_are_kept_for_admin_keys() {
    let (_redis, app) = broker(100).await;
    let (worker, code) = open_until_refused(&app, WORKER).await;
    assert_eq!(
        (worker.len(), code.as_str()),
        (18, "too_many_streams"),
        "20 less the tenth kept for admin keys"
    );
    let mut operator = Vec::new();
    for _ in 0..2 {
        let stream = EventStream::open_as(&app, "/v1/events?prefix=", OPERATOR).await;
        operator.push(stream.expect("an admin key takes the kept streams"));
    }
    let past = EventStream::open_as(&app, "/v1/events?prefix=", OPERATOR).await;
    let (status, body) = past
        .err()
        .expect("the broker's limit holds for admin keys too");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_streams"))
    );
}
