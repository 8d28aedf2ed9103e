//! Quorum mode under contention: acquires of one free name that split the
//! nodes' votes, and what a status read shows while a grant is in flight.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use lockbroker_core::{AcquireOutcome, LeaseKind, LeaseToken, LockStore};

use lockbroker_redis::quorum::QuorumStore;
use lockbroker_tests::proxy::Proxy;

use super::{name, plain, Quorum};

/// How many acquires race in each round, and how many rounds.
pub(super) const CONTENDERS: usize = 16;
const ROUNDS: usize = 20;

/// How much later a broker's commands reach the nodes it is not near.
const FAR: Duration = Duration::from_millis(1);

/// Three brokers over three nodes, broker `b` near node `b` and reaching
/// the other two through proxies that delay every byte by [`FAR`]: acquires
/// sent at once by the three brokers reach each node in a different order,
/// so each node grants a different one first and no majority forms.
async fn brokers_near_one_node_each(quorum: &mut Quorum) -> (Vec<QuorumStore>, Vec<Proxy>) {
    let direct = quorum.urls.clone();
    let mut proxies = Vec::new();
    for server in &quorum.servers {
        let proxy = Proxy::start(server.port()).await;
        proxy.delay(FAR);
        proxies.push(proxy);
    }
    let mut brokers = Vec::new();
    for near in 0..direct.len() {
        quorum.urls = (0..direct.len())
            .map(|at| match at == near {
                true => direct[at].clone(),
                false => proxies[at].url(),
            })
            .collect();
        brokers.push(quorum.connect().await);
    }
    (brokers, proxies)
}

/// What one racing acquire got back.
#[derive(Debug)]
enum Answer {
    Granted(u64, LeaseToken),
    /// Busy, naming this fence.
    Busy(u64),
    Contended,
}

#[tokio::test]
async fn split_votes_end_in_one_grant_and_never_name_a_holder_no_majority_held() {
    let mut quorum = Quorum::start(3);
    let (brokers, _proxies) = brokers_near_one_node_each(&mut quorum).await;
    let brokers = Arc::new(brokers);
    let lock = name("quorum-split");
    for round in 0..ROUNDS {
        let answers = join_all((0..CONTENDERS).map(|at| {
            let (brokers, lock) = (Arc::clone(&brokers), lock.clone());
            async move {
                let token = LeaseToken::generate();
                let params = plain(&lock, LeaseKind::Exclusive, None, &token, 10_000);
                let outcome = (brokers[at % brokers.len()].acquire(params))
                    .await
                    .expect("every node answers");
                match outcome {
                    AcquireOutcome::Granted(lease) => {
                        Answer::Granted(lease.fence.get(), lease.token)
                    }
                    AcquireOutcome::Busy { blockers, .. } => {
                        Answer::Busy(blockers.holder.fence.get())
                    }
                    AcquireOutcome::Contended => Answer::Contended,
                    other => panic!("round {round}: {other:?}"),
                }
            }
        }))
        .await;
        let grants: Vec<(u64, &LeaseToken)> = (answers.iter())
            .filter_map(|answer| match answer {
                Answer::Granted(fence, token) => Some((*fence, token)),
                _ => None,
            })
            .collect();
        assert!(grants.len() <= 1, "round {round}: two holders: {answers:?}");
        // Without a grant, nobody held the lock: every answer says contended.
        if grants.is_empty() {
            assert!(
                answers.iter().all(|a| matches!(a, Answer::Contended)),
                "round {round}: {answers:?}"
            );
        }
        // A busy answer names the one lease a majority holds: this round's.
        for answer in &answers {
            if let Answer::Busy(fence) = answer {
                assert_eq!(
                    Some(*fence),
                    grants.first().map(|(f, _)| *f),
                    "round {round}: busy naming a holder no majority held: {answers:?}"
                );
            }
        }
        if let Some((_, token)) = grants.first() {
            brokers[0].release(&lock, token).await.expect("release");
        }
    }
    // Every round splits the first votes; the retries within a non-waiting
    // acquire's few milliseconds win some rounds, not all (the waiting
    // acquires below win every one).
}

/// Through brokers' HTTP APIs, as callers see it.
mod http {
    use futures_util::future::join_all;
    use lockbroker_server::config::RedisMode;
    use lockbroker_tests::app::test_settings;
    use lockbroker_tests::proxy::Proxy;
    use lockbroker_tests::{RedisServer, TestApp};
    use reqwest::StatusCode;
    use serde_json::json;

    use super::FAR;

    /// Three brokers over three nodes, each near one node (as
    /// [`super::brokers_near_one_node_each`]), sharing one key prefix.
    async fn apps_near_one_node_each(servers: &[RedisServer]) -> (Vec<TestApp>, Vec<Proxy>) {
        let mut proxies = Vec::new();
        for server in servers {
            let proxy = Proxy::start(server.port()).await;
            proxy.delay(FAR);
            proxies.push(proxy);
        }
        let prefix = test_settings(&servers[0]).redis.key_prefix;
        let mut apps = Vec::new();
        for near in 0..servers.len() {
            let mut settings = test_settings(&servers[0]);
            settings.redis.mode = RedisMode::Quorum;
            settings.redis.key_prefix = prefix.clone();
            settings.redis.node_timeout_ms = 200;
            settings.redis.nodes = (0..servers.len())
                .map(|at| match at == near {
                    true => servers[at].url(),
                    false => proxies[at].url(),
                })
                .collect();
            apps.push(TestApp::spawn_with(settings).await);
        }
        (apps, proxies)
    }

    #[tokio::test]
    async fn waiting_acquires_that_split_the_votes_end_in_one_grant_every_round() {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let (apps, _proxies) = apps_near_one_node_each(&servers).await;
        for round in 0..5 {
            let replies = join_all((0..super::CONTENDERS).map(|at| {
                apps[at % apps.len()]
                    .acquire_with("split", json!({"ttl_ms": 10_000, "wait_ms": 1_500}))
            }))
            .await;
            let granted: Vec<_> = replies
                .iter()
                .filter(|r| r.status == StatusCode::OK)
                .collect();
            assert_eq!(granted.len(), 1, "round {round}: {replies:?}");
            let fence = &granted[0].body["fence"];
            for reply in replies.iter().filter(|r| r.status != StatusCode::OK) {
                // The others waited for the one holder, and name it.
                assert_eq!(reply.status, StatusCode::LOCKED, "round {round}: {reply:?}");
                assert_eq!(
                    &reply.body["error"]["fence"], fence,
                    "round {round}: {reply:?}"
                );
            }
            let token = granted[0].body["token"].as_str().expect("token");
            assert_eq!(apps[0].release("split", token).await.status, StatusCode::OK);
        }
    }
}
