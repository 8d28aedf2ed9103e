//! Cluster mode: the broker over a Redis Cluster of three primaries, each
//! lock on the shard serving its slot. Locks spread over every primary, the
//! listing pages across them, a release is announced on the lock's own
//! shard, and neither a resharding nor a primary failover inside the
//! cluster makes the broker guess; `coverage` covers primaries without
//! replicas, one of them down. (The whole API suite also runs in this
//! mode: `LOCKBROKER_TEST_MODE=cluster`, and the store conformance suite in
//! `conformance::cluster`.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_lab::load::{self, LoadPlan};
use lockbroker_lab::stack::cluster;
use lockbroker_server::config::RedisMode;
use lockbroker_server::Settings;
use lockbroker_tests::app::test_settings;
use lockbroker_tests::cluster::RedisCluster;
use lockbroker_tests::failover::{
    assert_a_release_wakes_the_other_broker, assert_fences_grow_across, wait_until_serving, Cycling,
};
use lockbroker_tests::redis::Conn;
use lockbroker_tests::TestApp;
use reqwest::StatusCode;
use serde_json::json;

mod coverage;

/// A broker's settings for `cluster`, known by one seed node.
fn cluster_settings(cluster: &RedisCluster) -> Settings {
    let mut settings = test_settings(&cluster.nodes[0]);
    settings.redis.mode = RedisMode::Cluster;
    settings.redis.nodes = cluster.seeds()[..1].to_vec();
    settings
}

/// Two brokers sharing `cluster` and one key prefix.
async fn two_brokers(cluster: &RedisCluster) -> [Arc<TestApp>; 2] {
    let settings = cluster_settings(cluster);
    let first = TestApp::spawn_with(settings.clone()).await;
    let second = TestApp::spawn_with(settings).await;
    [Arc::new(first), Arc::new(second)]
}

#[tokio::test]
async fn locks_spread_over_every_primary_and_the_listing_pages_across_them() {
    let cluster = RedisCluster::start(3, 0);
    let app = TestApp::spawn_with(cluster_settings(&cluster)).await;
    let names: BTreeSet<String> = (0..60).map(|i| format!("spread-{i}")).collect();
    for name in &names {
        assert_eq!(app.acquire(name, 60_000).await.status, StatusCode::OK);
    }
    for port in cluster.primaries() {
        let keys = Conn::open(port).expect("connect").cmd(&["DBSIZE"]);
        assert!(
            keys.as_int().is_some_and(|n| n > 0),
            "the primary on {port} holds locks too"
        );
    }

    let mut listed = Vec::new();
    let mut cursor = "0".to_owned();
    let mut pages = 0;
    loop {
        let page = app
            .get(&format!("/v1/locks?prefix=spread-&limit=7&cursor={cursor}"))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{:?}", page.body);
        pages += 1;
        for lock in page.body["locks"].as_array().expect("locks") {
            listed.push(lock["name"].as_str().expect("name").to_owned());
        }
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
        assert!(pages < 100, "the listing ends");
    }
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(unique, names, "every held lock, on whichever primary");
    assert!(pages >= 3, "a page per primary at least, got {pages}");
}

#[tokio::test]
async fn a_release_is_announced_on_the_locks_shard_to_the_broker_that_waits() {
    let cluster = RedisCluster::start(3, 0);
    let brokers = two_brokers(&cluster).await;
    let prefix = brokers[0].prefix.clone();
    let channel = format!("{prefix}:{{handoff}}:wake");
    let owner = cluster.owner_of(&channel);
    let subscribers = |port: u16| {
        let reply = Conn::open(port)
            .expect("connect")
            .cmd(&["PUBSUB", "SHARDNUMSUB", &channel]);
        reply.as_array().get(1).and_then(|n| n.as_int())
    };

    let held = brokers[0].acquire("handoff", 30_000).await;
    assert_eq!(held.status, StatusCode::OK);
    let waiting = {
        let app = Arc::clone(&brokers[1]);
        tokio::spawn(async move {
            app.acquire_with("handoff", json!({"ttl_ms": 5_000, "wait_ms": 20_000}))
                .await
                .status
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while subscribers(owner) != Some(1) {
        assert!(Instant::now() < deadline, "the waiter's broker subscribes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for port in cluster.primaries().into_iter().filter(|p| *p != owner) {
        assert_eq!(
            subscribers(port),
            Some(0),
            "only the lock's shard carries it"
        );
    }
    let global =
        Conn::open(owner)
            .expect("connect")
            .cmd(&["PUBSUB", "NUMSUB", &format!("{prefix}:wake")]);
    assert_eq!(
        global.as_array().get(1).and_then(|n| n.as_int()),
        Some(0),
        "no broker listens to every lock's releases"
    );

    let released_at = Instant::now();
    assert_eq!(
        brokers[0].release("handoff", &held.token()).await.status,
        StatusCode::OK
    );
    assert_eq!(waiting.await.expect("waiter"), StatusCode::OK);
    assert!(
        released_at.elapsed() < Duration::from_secs(5),
        "woken by the release, not by the holder's expiry"
    );
    // With no waiter left, the broker lets go of the channel.
    let deadline = Instant::now() + Duration::from_secs(5);
    while subscribers(owner) != Some(0) {
        assert!(Instant::now() < deadline, "the broker unsubscribes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharding_under_load_moves_a_live_lock_without_a_double_grant() {
    let cluster = RedisCluster::start(3, 0);
    let brokers = two_brokers(&cluster).await;
    let prefix = brokers[0].prefix.clone();
    // A lock among the lowest slots of its primary, which `redis-cli
    // --cluster reshard` moves first: a short move takes it along.
    let port = cluster.ports()[0];
    let (lock, owner, slots) = (0..2_000)
        .find_map(|k| {
            let lock = format!("moving{k}");
            let key = format!("{prefix}:{{{lock}-0}}:lease");
            let (owner, slots) = cluster::slots_to_move(port, &key)?;
            (slots <= 100).then_some((lock, owner, slots))
        })
        .expect("a lock name among the lowest slots of a primary");
    let plan = LoadPlan {
        clients: 8,
        locks: 1,
        duration: Duration::from_secs(5),
        ttl_ms: 300,
        stall_rate: 0.1,
        seed: 7,
        lock_prefix: lock.clone(),
    };

    // Mid-load, the lock's slot moves to another primary with its keys.
    let ports = cluster.ports();
    let to = *ports
        .iter()
        .find(|p| **p != owner)
        .expect("another primary");
    let resharding = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(1_500));
        cluster::reshard(&ports, owner, to, slots).expect("reshard");
    });
    let urls: Vec<String> = brokers.iter().map(|app| app.base.clone()).collect();
    let (history, _) = load::run(&urls, &plan).await;
    resharding.await.expect("resharding");

    assert_eq!(
        cluster.owner_of(&format!("{prefix}:{{{lock}-0}}:lease")),
        to,
        "the lock changed shards"
    );
    let report = lockbroker_lab::check(&history.events());
    assert!(report.stats.leases >= 10, "a real load: {report}");
    assert!(report.ok(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_failover_inside_the_cluster_is_followed_and_fences_keep_growing() {
    let mut cluster = RedisCluster::start(3, 1);
    let brokers = two_brokers(&cluster).await;
    let prefix = brokers[0].prefix.clone();
    let failed = cluster.owner_of(&format!("{prefix}:{{job-0}}:lease"));
    // A lease on a shard that does not fail over, held across the failover.
    let kept = (0..200)
        .map(|i| format!("kept-{i}"))
        .find(|name| cluster.owner_of(&format!("{prefix}:{{{name}}}:lease")) != failed)
        .expect("a lock on another shard");
    let held = brokers[0].acquire(&kept, 60_000).await;
    assert_eq!(held.status, StatusCode::OK, "{:?}", held.body);

    let load = Cycling::start(&brokers, 2);
    // Long enough for every loop's first grant, even on a loaded machine.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let killed_at = Instant::now();
    cluster.node(failed).kill();
    // How long the lock on a shard that did not fail over is unavailable too
    // (docs/cluster.md: the client serves no shard while a node is down).
    let elsewhere = {
        let (app, kept) = (Arc::clone(&brokers[1]), kept.clone());
        tokio::spawn(async move {
            let mut last_refused = None;
            while killed_at.elapsed() < Duration::from_secs(8) {
                if app.status(&kept).await.status != StatusCode::OK {
                    last_refused = Some(killed_at.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            last_refused
        })
    };

    // The primary's replica takes over its slots; the brokers follow.
    let recovered = wait_until_serving(&brokers[0], "job-0-probe", killed_at, || {
        let primaries = cluster.primaries();
        primaries.len() == 3 && !primaries.contains(&failed)
    })
    .await;
    println!("kill to serving again: {recovered:?}");
    let elsewhere = elsewhere.await.expect("the other shard's probe");
    println!("kill to the last refusal on another shard: {elsewhere:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let unavailable = assert_fences_grow_across(&load.stop().await, killed_at);
    assert!(
        unavailable > 0,
        "requests to the failed shard were answered 503, not guessed"
    );
    // A lock on the shard that failed over, as `job-0` may still be held by
    // a lease whose release was refused during the switch.
    let shard = cluster.owner_of(&format!("{prefix}:{{job-0}}:lease"));
    let handoff = (0..200)
        .map(|i| format!("handoff-{i}"))
        .find(|name| cluster.owner_of(&format!("{prefix}:{{{name}}}:lease")) == shard)
        .expect("a lock on the promoted primary");
    assert_a_release_wakes_the_other_broker(&brokers[0], &brokers[1], &handoff).await;

    // Every lock is served again: the lease on the shard that did not fail
    // over is still its holder's, and every primary grants.
    let extended = brokers[1].extend(&kept, &held.token(), 60_000).await;
    assert_eq!(extended.status, StatusCode::OK, "{:?}", extended.body);
    assert_eq!(
        brokers[1].release(&kept, &held.token()).await.status,
        StatusCode::OK
    );
    for port in cluster.primaries() {
        let name = (0..200)
            .map(|i| format!("after-{i}"))
            .find(|name| cluster.owner_of(&format!("{prefix}:{{{name}}}:lease")) == port)
            .expect("a lock on every primary");
        let granted = brokers[0].acquire(&name, 5_000).await;
        assert_eq!(
            granted.status,
            StatusCode::OK,
            "on {port}: {:?}",
            granted.body
        );
    }
}

#[tokio::test]
async fn replica_acknowledgement_waits_on_the_shard_that_holds_the_lock() {
    let mut cluster = RedisCluster::start(3, 1);
    let mut settings = cluster_settings(&cluster);
    settings.redis.min_replicas_acked = 1;
    // Room for a loaded machine: a slow acknowledgement is a refusal.
    settings.redis.replica_ack_timeout_ms = 400;
    let app = TestApp::spawn_with(settings).await;
    let prefix = app.prefix.clone();
    let lease = app.acquire("job", 10_000).await;
    assert_eq!(lease.status, StatusCode::OK, "{:?}", lease.body);
    let released = app.release("job", &lease.token()).await;
    assert_eq!(released.body["acknowledged"], true, "{:?}", released.body);

    // Pause the replica of the shard serving `job`: its grants can no longer
    // be acknowledged, while a lock on another shard still can.
    let shard = cluster.owner_of(&format!("{prefix}:{{job}}:lease"));
    let replica = cluster.replica_of(shard);
    let elsewhere = (0..100)
        .map(|i| format!("other-{i}"))
        .find(|name| cluster.owner_of(&format!("{prefix}:{{{name}}}:lease")) != shard)
        .expect("a lock on another shard");
    cluster.node(replica).pause();
    let refused = app.acquire("job", 10_000).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        refused.body
    );
    assert_eq!(
        app.acquire(&elsewhere, 10_000).await.status,
        StatusCode::OK,
        "the other shard's replica acknowledges"
    );
    cluster.node(replica).resume();
    assert_eq!(
        app.status("job").await.body["held"],
        false,
        "the refused grant was undone"
    );
}
