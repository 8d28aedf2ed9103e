//! `Client::ready`: the broker's readiness, as a load balancer sees it.

use lockbroker_client::{Client, Error, HealthStatus, TransportKind};
use lockbroker_tests::redis::free_port;
use lockbroker_tests::{RedisServer, TestApp};

use crate::client;

#[tokio::test]
async fn ready_while_redis_answers_unavailable_while_it_does_not() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let client = client(&app);
    let health = client.ready().await.expect("ready");
    assert_eq!(health.status, HealthStatus::Ready);

    // Redis frozen past the broker's command timeout: not ready, and said so.
    redis.pause();
    let paused = client.ready().await;
    redis.resume();
    assert!(
        matches!(paused, Err(Error::Unavailable { .. })),
        "{paused:?}"
    );
    client.ready().await.expect("ready again");

    // No broker at all: no answer.
    let nobody = Client::new(format!("http://127.0.0.1:{}", free_port())).expect("client");
    let refused = nobody.ready().await;
    assert!(
        matches!(
            refused,
            Err(Error::Transport {
                kind: TransportKind::Connect,
                ..
            })
        ),
        "{refused:?}"
    );
}
