//! The shipped alerts fire for real. Each test starts its own broker, Redis and
//! Prometheus (scraping every second, with the shipped rules and every `for:`
//! shortened to [`prometheus::FOR`]), causes one alert's condition, and waits
//! through Prometheus's alerts API for `firing`, then for the alert to clear
//! once the condition ends. Alerts on an increase over a window clear only
//! once the window has passed (5 or 15 minutes): `promtool test rules` checks
//! their clearing in virtual time, against the shipped rules unchanged. The
//! quorum alerts run against a quorum-mode broker over three Redis servers.
//! Each test prints how long its alert took (`--no-capture` shows it).

mod dashboard;
mod prometheus;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockbroker_server::config::RedisMode;
use lockbroker_server::Settings;
use lockbroker_tests::app::test_settings;
use lockbroker_tests::proxy::Proxy;
use lockbroker_tests::redis::free_port;
use lockbroker_tests::sentinel::start_replica;
use lockbroker_tests::{broker_binary, RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

use prometheus::{deploy_file, value, Prometheus, State};

/// The `host:port` Prometheus scrapes for `app`.
fn target(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// Three Redis servers for a quorum-mode broker: node `i` of
/// [`quorum_settings`] is `nodes[i]`, and its `node` label is `i`.
fn quorum_nodes() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

/// Settings for a broker in quorum mode over `nodes`, with a node timeout
/// short enough that a killed node costs a request little.
fn quorum_settings(nodes: &[RedisServer]) -> Settings {
    let mut settings = test_settings(&nodes[0]);
    settings.redis.mode = RedisMode::Quorum;
    settings.redis.nodes = nodes.iter().map(RedisServer::url).collect();
    settings.redis.node_timeout_ms = 200;
    settings
}

/// The alerts on quorum nodes.
const QUORUM_ALERTS: [&str; 4] = [
    "LockbrokerQuorumNodeDown",
    "LockbrokerQuorumLost",
    "LockbrokerQuorumNodeRestarting",
    "LockbrokerQuorumNodeMisconfigured",
];

/// Waits until Prometheus reads all three nodes up and in good standing and
/// no quorum alert is active. The broker sets its node gauges every 5
/// seconds, the first time at its start, possibly before it has read the
/// nodes: a test starts from a reading of them.
async fn wait_for_three_nodes_in_good_standing(prometheus: &Prometheus) {
    prometheus
        .wait_until(
            "lockbroker_quorum_nodes_up - lockbroker_quorum_nodes_restarting == 3 \
             and lockbroker_quorum_majority == 2",
        )
        .await;
    for alert in QUORUM_ALERTS {
        prometheus
            .wait_for(alert, State::Inactive, Instant::now())
            .await;
    }
}

/// Prints one line of the timing report.
fn report(alert: &str, what: &str, seconds: f64) {
    eprintln!("{alert}: {what} after {seconds:.1} s");
}

#[tokio::test]
async fn the_first_lost_lease_after_a_start_fires_lease_lost_while_held() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.metrics.families = vec!["billing:*".into()];
    let app = TestApp::spawn_with(settings).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;

    // The holder overruns its lease, then tries to extend it: the only lost
    // lease since the broker started.
    let lease = app.acquire("billing:invoice-7", 400).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let caused = Instant::now();
    let extended = app.extend("billing:invoice-7", &lease.token(), 1_000).await;
    assert_eq!(extended.code(), "lease_lost");

    let alert = "LockbrokerLeaseLostWhileHeld";
    let (alerts, seconds) = prometheus.wait_for(alert, State::Firing, caused).await;
    assert_eq!(alerts.len(), 1, "only the billing family: {alerts:?}");
    assert_eq!(alerts[0]["labels"]["family"], "billing:*");
    report(alert, "firing, one extend of an expired lease", seconds);
}

#[tokio::test]
async fn redis_down_fires_while_redis_is_dead_and_clears_when_it_is_back() {
    let mut redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;
    let alert = "LockbrokerRedisDown";

    let killed = Instant::now();
    redis.kill();
    let (alerts, seconds) = prometheus.wait_for(alert, State::Firing, killed).await;
    assert_eq!(alerts[0]["labels"]["instance"], target(&app).as_str());
    report(alert, "firing, Redis killed", seconds);

    let restarted = Instant::now();
    redis.restart();
    let (_, seconds) = prometheus.wait_for(alert, State::Inactive, restarted).await;
    report(alert, "cleared, Redis restarted", seconds);
}

/// The broker binary on `port`, as a child the test can kill.
fn spawn_broker(redis: &RedisServer, port: u16) -> Child {
    Command::new(broker_binary())
        .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
        .env("LOCKBROKER_REDIS_URL", redis.url())
        .env("LOCKBROKER_LOG_LEVEL", "error")
        .stdout(Stdio::null())
        .spawn()
        .expect("start lockbroker")
}

#[tokio::test]
async fn a_killed_broker_fires_lockbroker_down_until_it_is_back() {
    let redis = RedisServer::start();
    let port = free_port();
    let mut broker = spawn_broker(&redis, port);
    let prometheus = Prometheus::start(&[format!("127.0.0.1:{port}")]).await;
    let alert = "LockbrokerDown";

    let killed = Instant::now();
    broker.kill().expect("kill the broker");
    broker.wait().expect("reap the broker");
    let (_, seconds) = prometheus.wait_for(alert, State::Firing, killed).await;
    report(alert, "firing, broker killed with SIGKILL", seconds);

    let restarted = Instant::now();
    let mut broker = spawn_broker(&redis, port);
    let (_, seconds) = prometheus.wait_for(alert, State::Inactive, restarted).await;
    report(alert, "cleared, broker restarted", seconds);
    let _ = broker.kill();
    let _ = broker.wait();
}

#[tokio::test]
async fn a_burst_of_503s_fires_lockbroker_errors() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;

    // Redis out of memory refuses every acquire: 60 answers of 503 within a
    // few seconds, above the rule's 0.1 per second over 5 minutes.
    let mut conn = redis.conn();
    conn.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    conn.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    let caused = Instant::now();
    for i in 0..60 {
        let refused = app.acquire(&format!("job-{i}"), 1_000).await;
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    conn.cmd(&["CONFIG", "SET", "maxmemory", "0"]);

    let alert = "LockbrokerErrors";
    let (_, seconds) = prometheus.wait_for(alert, State::Firing, caused).await;
    report(alert, "firing, 60 acquires refused with 503", seconds);
}

#[tokio::test]
async fn waiters_near_the_limit_fire_until_they_are_served() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.locks.max_waiters = 10;
    settings.locks.max_waiters_per_lock = 10;
    let app = std::sync::Arc::new(TestApp::spawn_with(settings).await);
    let prometheus = Prometheus::start(&[target(&app)]).await;
    let alert = "LockbrokerWaitersNearLimit";

    // Nine waiters of ten allowed queue behind a holder; each releases the
    // lock as soon as it gets it.
    let holder = app.acquire("job", 60_000).await;
    let caused = Instant::now();
    let waiters: Vec<_> = (0..9)
        .map(|_| {
            let app = std::sync::Arc::clone(&app);
            tokio::spawn(async move {
                let lease = app.acquire_with("job", json!({"wait_ms": 60_000})).await;
                assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
                app.release("job", &lease.token()).await;
            })
        })
        .collect();
    let (alerts, seconds) = prometheus.wait_for(alert, State::Firing, caused).await;
    let ratio = value(&alerts[0]);
    assert!((ratio - 0.9).abs() < 1e-9, "9 of 10 waiting: {alerts:?}");
    report(alert, "firing, 9 waiters with a limit of 10", seconds);

    let ended = Instant::now();
    app.release("job", &holder.token()).await;
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    let (_, seconds) = prometheus.wait_for(alert, State::Inactive, ended).await;
    report(alert, "cleared, every waiter served", seconds);
}

#[tokio::test]
async fn slow_redis_fires_acquire_latency_high_until_fast_requests_dominate() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port()).await;
    let mut settings = test_settings(&redis);
    settings.redis.url = proxy.url();
    let app = std::sync::Arc::new(TestApp::spawn_with(settings).await);
    let prometheus = Prometheus::start(&[target(&app)]).await;
    let alert = "LockbrokerAcquireLatencyHigh";

    // 40 ms each way: every lock request takes over the rule's 50 ms. These
    // are the broker's first lock requests since it started.
    proxy.delay(Duration::from_millis(40));
    let caused = Instant::now();
    for i in 0..5 {
        let name = format!("slow-{i}");
        let lease = app.acquire(&name, 30_000).await;
        assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
        app.release(&name, &lease.token()).await;
    }
    let (_, seconds) = prometheus.wait_for(alert, State::Firing, caused).await;
    report(alert, "firing, 10 requests through a 40 ms proxy", seconds);

    // Redis is fast again; the p99 over the window falls back under 50 ms
    // once the slow requests are under 1% of it.
    proxy.restore();
    let ended = Instant::now();
    while !prometheus.alerts(alert).await.is_empty() && ended.elapsed() < Duration::from_secs(50) {
        fast_cycles(&app, 400).await;
    }
    let (_, seconds) = prometheus.wait_for(alert, State::Inactive, ended).await;
    report(alert, "cleared, fast requests after Redis sped up", seconds);
}

/// `count` acquire and release cycles over 8 connections in parallel.
async fn fast_cycles(app: &std::sync::Arc<TestApp>, count: usize) {
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let app = std::sync::Arc::clone(app);
            tokio::spawn(async move {
                for i in 0..count / 8 {
                    let name = format!("fast-{task}-{i}");
                    let lease = app.acquire(&name, 30_000).await;
                    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
                    app.release(&name, &lease.token()).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("fast cycles");
    }
}

#[tokio::test]
async fn a_fence_floor_raise_after_flushall_fires_fence_floor_raised() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;

    // The last fence is ahead of the clock, then Redis loses every key: the
    // broker's floor sets the next fence (fences.rs checks that it does).
    app.put_fence_ahead(&redis, "job");
    app.acquire("job", 5_000).await;
    redis.conn().cmd(&["FLUSHALL"]);
    let caused = Instant::now();
    app.acquire("job", 5_000).await;

    let alert = "LockbrokerFenceFloorRaised";
    let (_, seconds) = prometheus.wait_for(alert, State::Firing, caused).await;
    report(
        alert,
        "firing, an acquire after FLUSHALL with fences ahead of the clock",
        seconds,
    );
}

#[tokio::test]
async fn a_replica_that_stops_acknowledging_fires_replica_acks_missed_for_that_step() {
    let primary = RedisServer::start();
    let replica = start_replica(&primary);
    let mut settings = test_settings(&primary);
    settings.redis.min_replicas_acked = 1;
    let app = TestApp::spawn_with(settings).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;

    replica.pause();
    let caused = Instant::now();
    let refused = app.acquire("job", 5_000).await;
    replica.resume();
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.body
    );

    let alert = "LockbrokerReplicaAcksMissed";
    let (alerts, seconds) = prometheus.wait_for(alert, State::Firing, caused).await;
    assert_eq!(alerts.len(), 1, "only the acquire step: {alerts:?}");
    assert_eq!(alerts[0]["labels"]["step"], "acquire");
    report(
        alert,
        "firing, an acquire while the one replica was paused",
        seconds,
    );
}

#[tokio::test]
async fn killed_quorum_nodes_fire_node_down_then_quorum_lost_until_they_are_back() {
    let mut nodes = quorum_nodes();
    let app = TestApp::spawn_with(quorum_settings(&nodes)).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;
    wait_for_three_nodes_in_good_standing(&prometheus).await;
    let [down, lost, _, _] = QUORUM_ALERTS;

    // One node of three down: no more may fail.
    let killed = Instant::now();
    nodes[2].kill();
    let (alerts, seconds) = prometheus.wait_for(down, State::Firing, killed).await;
    assert_eq!(alerts.len(), 1, "only node 2: {alerts:?}");
    assert_eq!(alerts[0]["labels"]["node"], "2");
    assert_eq!(alerts[0]["labels"]["instance"], target(&app).as_str());
    assert_eq!(value(&alerts[0]), 0.0, "no more may fail: {alerts:?}");
    report(down, "firing, node 2 of 3 killed", seconds);
    assert!(prometheus.alerts(lost).await.is_empty());
    // The other two still grant. The lease is short and released, so the
    // nodes restarted below find no lease to sit out for.
    let lease = app.acquire("report", 1_000).await;
    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
    app.release("report", &lease.token()).await;

    // Two of three down: no majority, every lock request answers 503.
    let killed = Instant::now();
    nodes[1].kill();
    let (alerts, seconds) = prometheus.wait_for(lost, State::Firing, killed).await;
    assert_eq!(alerts[0]["labels"]["instance"], target(&app).as_str());
    assert_eq!(value(&alerts[0]), 1.0, "one in good standing: {alerts:?}");
    report(lost, "firing, node 1 of 3 killed as well", seconds);
    let refused = app.acquire("report", 1_000).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);

    // Both back, empty: no lease could have been on them, so they sit out
    // only the drift allowance and count again at once.
    let restarted = Instant::now();
    nodes[1].restart();
    nodes[2].restart();
    let (_, seconds) = prometheus.wait_for(lost, State::Inactive, restarted).await;
    report(lost, "cleared, nodes 1 and 2 restarted empty", seconds);
    let (_, seconds) = prometheus.wait_for(down, State::Inactive, restarted).await;
    report(down, "cleared, nodes 1 and 2 restarted empty", seconds);
    let lease = app.acquire("report", 1_000).await;
    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
}

#[tokio::test]
async fn a_node_restarted_empty_under_a_lease_fires_node_restarting_until_the_lease_expires() {
    let mut nodes = quorum_nodes();
    let app = TestApp::spawn_with(quorum_settings(&nodes)).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;
    wait_for_three_nodes_in_good_standing(&prometheus).await;
    let [_, lost, alert, _] = QUORUM_ALERTS;

    // A lease on all three nodes; node 2 loses it in a restart without its
    // data, so it sits out of majorities until the lease could have expired.
    let lease = app.acquire("report", 15_000).await;
    assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
    let granted = Instant::now();
    nodes[2].restart();
    let (alerts, seconds) = prometheus.wait_for(alert, State::Firing, granted).await;
    assert_eq!(alerts[0]["labels"]["instance"], target(&app).as_str());
    assert_eq!(value(&alerts[0]), 1.0, "one node sits out: {alerts:?}");
    report(alert, "firing, node 2 restarted empty, 15 s lease", seconds);
    // Nodes 0 and 1 are a majority: the quorum holds.
    assert!(prometheus.alerts(lost).await.is_empty());

    let (_, seconds) = prometheus.wait_for(alert, State::Inactive, granted).await;
    assert!(seconds >= 15.0, "cleared {seconds:.1} s after the grant");
    report(alert, "cleared, the lease's 15 s over", seconds);
}

#[tokio::test]
async fn a_node_turned_replica_fires_node_misconfigured_until_it_is_a_primary_again() {
    let nodes = quorum_nodes();
    let app = TestApp::spawn_with(quorum_settings(&nodes)).await;
    let prometheus = Prometheus::start(&[target(&app)]).await;
    wait_for_three_nodes_in_good_standing(&prometheus).await;
    let [down, _, _, alert] = QUORUM_ALERTS;

    // Node 2 becomes a replica of node 0 while the broker runs (as a
    // failover or an operator's REPLICAOF can make it): it still answers.
    let turned = Instant::now();
    let port = nodes[0].port().to_string();
    let reply = nodes[2].conn().cmd(&["REPLICAOF", "127.0.0.1", &port]);
    assert_eq!(reply.as_text(), Some("OK"), "{reply:?}");
    let (alerts, seconds) = prometheus.wait_for(alert, State::Firing, turned).await;
    assert_eq!(alerts.len(), 1, "only node 2: {alerts:?}");
    assert_eq!(alerts[0]["labels"]["node"], "2");
    assert_eq!(alerts[0]["labels"]["instance"], target(&app).as_str());
    report(alert, "firing, node 2 of 3 made a replica", seconds);
    // While it loads its primary's data it may not answer, and may count as
    // down for that long; a replica that answers is misconfigured, not down.
    prometheus.wait_for(down, State::Inactive, turned).await;
    assert_eq!(
        prometheus.alerts(alert).await.len(),
        1,
        "still misconfigured while it answers"
    );

    let promoted = Instant::now();
    let reply = nodes[2].conn().cmd(&["REPLICAOF", "NO", "ONE"]);
    assert_eq!(reply.as_text(), Some("OK"), "{reply:?}");
    let (_, seconds) = prometheus.wait_for(alert, State::Inactive, promoted).await;
    report(alert, "cleared, node 2 a primary again", seconds);
}

#[test]
fn the_alerts_clear_once_their_window_has_passed() {
    // The shipped rules and their real `for:` durations, in virtual time.
    let tests = deploy_file("prometheus/tests/lockbroker-alerts-test.yml");
    let output = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&tests)
        .output()
        .expect("promtool must be installed (apt-get install prometheus)");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
