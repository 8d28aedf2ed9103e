//! Readiness: a broker says it is ready only once it can serve every step,
//! including hearing what other brokers on the same Redis do.

use std::time::{Duration, Instant};

use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;

/// A broker whose Redis user may not subscribe would sleep through other
/// brokers' releases (its waiters) and miss their changes (its event
/// streams): it stays unready until the subscription is in place, then
/// turns ready without a restart.
#[tokio::test]
async fn a_broker_is_not_ready_until_it_hears_other_brokers() {
    // The `broker` user may run every command on every key, but use no
    // Pub/Sub channel.
    let redis = RedisServer::start_with(&[
        "--user",
        "broker",
        "on",
        ">broker-s3cret",
        "~*",
        "resetchannels",
        "+@all",
    ]);
    let mut settings = test_settings(&redis);
    settings.redis.username = Some("broker".into());
    settings.redis.password = Some("broker-s3cret".into());
    let app = TestApp::start_with(settings).await;

    let unready_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < unready_until {
        let ready = app.get("/readyz").await;
        assert_eq!(
            ready.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            ready.body
        );
        assert_eq!(ready.code(), "backend_unavailable");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    redis
        .conn()
        .cmd(&["ACL", "SETUSER", "broker", "allchannels"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.get("/readyz").await.status != StatusCode::OK {
        assert!(
            Instant::now() < deadline,
            "never ready once it may subscribe"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
