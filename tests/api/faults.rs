//! Faults on purpose: Redis killed, restarted, paused or slowed, brokers
//! killed or doubled, while clients hold and take locks. Each test's load is
//! bounded in time, stays on loopback, and ends with the history checker.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockbroker_lab::client::{now_us, BrokerClient, Outcome};
use lockbroker_lab::history::Event;
use lockbroker_lab::load::{self, LoadPlan, Mix};
use lockbroker_lab::{check, Report};
use lockbroker_tests::app::test_settings;
use lockbroker_tests::proxy::Proxy;
use lockbroker_tests::redis::free_port;
use lockbroker_tests::{broker_binary, RedisServer, Reply, TestApp};
use reqwest::StatusCode;
use serde_json::json;

/// Stalling clients on a few locks for `seconds`.
fn plan(clients: usize, seconds: f64) -> LoadPlan {
    LoadPlan {
        clients,
        locks: 3,
        duration: Duration::from_secs_f64(seconds),
        ttl_ms: 200,
        stall_rate: 0.1,
        seed: now_us().unsigned_abs(),
        lock_prefix: "load".into(),
    }
}

/// Runs the checker and fails the test with its report on any violation.
fn assert_history_holds(events: &[Event]) -> Report {
    let report = check(events);
    assert!(report.ok(), "{report}");
    assert!(
        report.stats.leases > 0,
        "the load got no lease at all:\n{report}"
    );
    report
}

/// Every request was answered, and the only errors are `503`s (the broker
/// failing closed), never a hang, a `500` or a dropped connection.
fn assert_only_unavailable_errors(events: &[Event]) {
    for e in events {
        if let Outcome::Failed { status, code } = &e.timed.outcome {
            assert_eq!(
                (*status, code.as_str()),
                (503, "backend_unavailable"),
                "{:?} on {}",
                e.op,
                e.lock
            );
        }
        let took = Duration::from_micros((e.timed.recv_us - e.timed.send_us).unsigned_abs());
        assert!(
            took < Duration::from_secs(10),
            "{:?} hung for {took:?}",
            e.op
        );
    }
}

/// Retries `request` while it answers `503`, for up to 20 s.
async fn when_back<F, Fut>(mut request: F) -> Reply
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Reply>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = request().await;
        if reply.status != StatusCode::SERVICE_UNAVAILABLE {
            return reply;
        }
        assert!(Instant::now() < deadline, "the broker never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn redis_restart_without_persistence_fails_closed_and_later_fences_exceed_all_before() {
    let mut redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let held = app.acquire("held", 60_000).await;
    assert_eq!(held.status, StatusCode::OK);

    let load = tokio::spawn({
        let urls = vec![app.base.clone()];
        async move { load::run(&urls, &plan(8, 5.0)).await }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    redis.kill();
    let down_from = now_us();
    // Down for longer than any lease granted before, so the checker may hold
    // the leases granted after the restart against those granted before.
    let outage = Duration::from_millis(1_500);
    tokio::time::sleep(outage).await;
    let down_until = now_us();
    redis.restart();
    let (history, _) = load.await.expect("load task");
    let events = history.events();

    let during: Vec<&Event> = events
        .iter()
        .filter(|e| e.timed.send_us > down_from && e.timed.recv_us < down_until)
        .collect();
    assert!(
        !during.is_empty(),
        "the load kept asking while Redis was down"
    );
    for e in &during {
        assert!(
            e.timed.outcome.is_unavailable(),
            "{:?} on {} while Redis was down: {:?}",
            e.op,
            e.lock,
            e.timed.outcome
        );
    }
    assert_only_unavailable_errors(&events);
    // Includes: every grant's fence exceeds every fence seen before it was
    // asked for, across the restart.
    assert_history_holds(&events);

    // The broker recovered on its own. The long lease died with Redis's data;
    // its lock is granted again, above it.
    let again = when_back(|| app.acquire("held", 1_000)).await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
    assert!(again.fence() > held.fence());
}

#[tokio::test]
async fn redis_with_appendfsync_always_keeps_leases_across_a_restart() {
    let mut redis = RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
    ]);
    let app = TestApp::spawn(&redis).await;
    let a = app.acquire("a", 60_000).await;
    let b = app.acquire("b", 60_000).await;
    let c = app.acquire("c", 60_000).await;
    assert_eq!(
        app.extend("b", &b.token(), 120_000).await.status,
        StatusCode::OK
    );
    assert_eq!(app.release("c", &c.token()).await.status, StatusCode::OK);

    redis.restart();

    let status = when_back(|| app.status("a")).await;
    assert_eq!(status.status, StatusCode::OK);
    assert_eq!(status.body["held"], true, "{:?}", status.body);
    assert_eq!(status.body["fence"], a.fence());
    let busy = app.acquire("a", 1_000).await;
    assert_eq!(busy.status, StatusCode::LOCKED, "the lease survived");
    assert_eq!(busy.body["error"]["fence"], a.fence());
    let b_status = app.status("b").await;
    assert!(
        b_status.body["expires_in_ms"]
            .as_u64()
            .expect("expires_in_ms")
            > 60_000,
        "the extend survived: {:?}",
        b_status.body
    );

    // The holders carry on.
    let extended = app.extend("a", &a.token(), 30_000).await;
    assert_eq!(extended.status, StatusCode::OK, "{:?}", extended.body);
    assert_eq!(extended.fence(), a.fence());
    for (name, lease) in [("a", &a), ("b", &b)] {
        let released = app.release(name, &lease.token()).await;
        assert_eq!(released.status, StatusCode::OK, "{:?}", released.body);
    }
    // The release before the restart survived too: c is free.
    let last = [a.fence(), b.fence(), c.fence()]
        .into_iter()
        .max()
        .unwrap_or(0);
    for name in ["a", "b", "c"] {
        let lease = app.acquire(name, 1_000).await;
        assert_eq!(lease.status, StatusCode::OK, "{name}: {:?}", lease.body);
        assert!(lease.fence() > last);
    }
}

#[tokio::test]
async fn redis_paused_past_the_command_timeout_answers_503_and_grants_nothing_twice() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await; // command timeout 500 ms
    let held = app.acquire("job", 60_000).await;
    assert_eq!(held.status, StatusCode::OK);
    let token = held.token();

    redis.pause();
    let paused_at = Instant::now();
    let mut requests = Vec::new();
    for i in 0..16 {
        let (base, http, token) = (app.base.clone(), app.http.clone(), token.clone());
        requests.push(tokio::spawn(async move {
            let url = |path: &str| format!("{base}/v1/locks/{path}");
            let started = Instant::now();
            let sent = match i % 4 {
                0 => http
                    .post(url("job/acquire"))
                    .json(&json!({"ttl_ms": 2_000})),
                1 => http
                    .post(url(&format!("free-{i}/acquire")))
                    .json(&json!({"ttl_ms": 2_000})),
                2 => http
                    .post(url("job/extend"))
                    .json(&json!({"token": token, "ttl_ms": 60_000})),
                _ => http.get(url("job")),
            }
            .send()
            .await
            .expect("answered, not cut");
            (i, sent.status(), started.elapsed())
        }));
    }
    for request in requests {
        let (i, status, took) = request.await.expect("request task");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "request {i}");
        assert!(
            took < Duration::from_secs(10),
            "request {i} hung for {took:?}"
        );
    }
    let pause = Duration::from_millis(1_500);
    tokio::time::sleep(pause.saturating_sub(paused_at.elapsed())).await;
    redis.resume();

    // The first lease still holds the lock, and only it.
    let status = when_back(|| app.status("job")).await;
    assert_eq!(status.body["held"], true, "{:?}", status.body);
    assert_eq!(status.body["fence"], held.fence());
    let busy = when_back(|| app.acquire("job", 1_000)).await;
    assert_eq!(busy.status, StatusCode::LOCKED, "{:?}", busy.body);
    assert_eq!(busy.body["error"]["fence"], held.fence());
    let extended = app.extend("job", &token, 60_000).await;
    assert_eq!(extended.status, StatusCode::OK, "{:?}", extended.body);

    // An acquire that timed out may still have run once Redis woke; its
    // lease is released for it or expires, and then exactly one holder gets in.
    for i in (1..16).step_by(4) {
        let name = format!("free-{i}");
        let lease = app
            .acquire_with(&name, json!({"ttl_ms": 10_000, "wait_ms": 5_000}))
            .await;
        assert_eq!(lease.status, StatusCode::OK, "{name}: {:?}", lease.body);
        assert!(lease.fence() > held.fence());
        let second = app.acquire(&name, 1_000).await;
        assert_eq!(second.status, StatusCode::LOCKED, "{name}: granted twice");
        assert_eq!(second.body["error"]["fence"], lease.fence());
        let status = app.status(&name).await;
        assert_eq!(status.body["fence"], lease.fence());
    }
    assert_eq!(app.release("job", &token).await.status, StatusCode::OK);
}

/// The real binary on a free port, sharing Redis and key prefix with a test app.
fn spawn_broker(redis: &RedisServer, prefix: &str) -> (Child, String) {
    let port = free_port();
    let child = Command::new(broker_binary())
        .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
        .env("LOCKBROKER_REDIS_URL", redis.url())
        .env("LOCKBROKER_REDIS_KEY_PREFIX", prefix)
        .env("LOCKBROKER_LOG_LEVEL", "error")
        .stdout(Stdio::null())
        .spawn()
        .expect("start lockbroker");
    (child, format!("http://127.0.0.1:{port}"))
}

#[tokio::test]
async fn a_broker_killed_mid_load_leaves_leases_a_second_broker_serves() {
    let redis = RedisServer::start();
    let settings = test_settings(&redis);
    let (mut first, base) = spawn_broker(&redis, &settings.redis.key_prefix);
    let client = BrokerClient::new(&base, Duration::from_secs(10)).expect("client");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !client.ready().await {
        assert!(Instant::now() < deadline, "the broker never became ready");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut held = HashMap::new();
    for name in ["h-0", "h-1", "h-2"] {
        let (timed, token) = client.acquire(name, 60_000, 0).await;
        let Outcome::Granted { fence, .. } = timed.outcome else {
            panic!("{name}: {:?}", timed.outcome);
        };
        held.insert(name, (token.expect("token"), fence));
    }

    let load = tokio::spawn({
        let urls = vec![base.clone()];
        async move { load::run(&urls, &plan(8, 2.5)).await }
    });
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    first.kill().expect("SIGKILL the broker");
    let _ = first.wait();
    let (history, _) = load.await.expect("load task");
    assert_history_holds(&history.events());

    let second = TestApp::spawn_with(settings).await;
    let mut last = 0;
    for (name, (token, fence)) in &held {
        let status = second.status(name).await;
        assert_eq!(status.body["held"], true, "{name}: {:?}", status.body);
        assert_eq!(status.body["fence"], *fence);
        let extended = second.extend(name, token, 60_000).await;
        assert_eq!(
            extended.status,
            StatusCode::OK,
            "{name}: {:?}",
            extended.body
        );
        assert_eq!(extended.fence(), *fence);
        let released = second.release(name, token).await;
        assert_eq!(
            released.status,
            StatusCode::OK,
            "{name}: {:?}",
            released.body
        );
        last = last.max(*fence);
    }
    for name in held.keys() {
        let lease = second.acquire(name, 1_000).await;
        assert_eq!(lease.status, StatusCode::OK, "{name}: {:?}", lease.body);
        assert!(lease.fence() > last);
    }
}

#[tokio::test]
async fn two_brokers_on_one_redis_never_grant_a_lock_twice() {
    let redis = RedisServer::start();
    let settings = test_settings(&redis);
    let one = TestApp::spawn_with(settings.clone()).await;
    let two = TestApp::spawn_with(settings).await;

    let urls = vec![one.base.clone(), two.base.clone()];
    let mut plan = plan(12, 4.0);
    plan.locks = 2;
    let (history, _) = load::run(&urls, &plan).await;
    let events = history.events();
    assert_only_unavailable_errors(&events);
    let report = assert_history_holds(&events);
    assert!(
        report.stats.leases >= 20,
        "enough grants to mean something:\n{report}"
    );
    // Each broker granted some of them.
    for base in &urls {
        let client = BrokerClient::new(base, Duration::from_secs(10)).expect("client");
        let (timed, token) = client.acquire("after", 1_000, 2_000).await;
        assert!(
            matches!(timed.outcome, Outcome::Granted { .. }),
            "{:?}",
            timed.outcome
        );
        client.release("after", &token.expect("token")).await;
    }
}

/// Shared leases and permits beside exclusive leases on two brokers, with
/// Redis paused past the command timeout mid-run: every answer is a grant, a
/// busy, or a 503, and the history keeps every promise of every kind.
#[tokio::test]
async fn a_mixed_load_of_shared_leases_and_permits_keeps_its_promises_through_a_redis_pause() {
    let redis = RedisServer::start();
    let settings = test_settings(&redis);
    let one = TestApp::spawn_with(settings.clone()).await;
    let two = TestApp::spawn_with(settings).await;
    let urls = vec![one.base.clone(), two.base.clone()];
    let mut plan = plan(15, 5.0);
    plan.locks = 2;
    let mix = Mix {
        shared_clients: 5,
        permit_clients: 5,
        limit: 2,
        ..Mix::default()
    };
    let load = tokio::spawn(async move { load::run_mixed(&urls, &plan, &mix).await });
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    redis.pause();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    redis.resume();
    let (history, _) = load.await.expect("load task");
    let events = history.events();
    assert_only_unavailable_errors(&events);
    let report = assert_history_holds(&events);
    let stats = &report.stats;
    assert!(
        stats.most_shared_at_once >= 2,
        "shared leases overlapped:\n{report}"
    );
    assert!(
        stats.most_permits_at_once == 2,
        "the semaphores filled up to their limit:\n{report}"
    );
}

#[tokio::test]
async fn latency_and_cuts_between_broker_and_redis_cause_errors_but_no_double_grant() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port()).await;
    let mut settings = test_settings(&redis);
    settings.redis.url = proxy.url();
    let app = TestApp::spawn_with(settings).await;

    let load = tokio::spawn({
        let urls = vec![app.base.clone()];
        async move { load::run(&urls, &plan(8, 7.0)).await }
    });
    let phase = |ms| tokio::time::sleep(Duration::from_millis(ms));
    phase(500).await;
    // Slower, but inside the 500 ms command timeout.
    proxy.delay(Duration::from_millis(50));
    phase(1_500).await;
    // Slower than the command timeout: answers come too late to count.
    proxy.delay(Duration::from_millis(700));
    phase(1_500).await;
    proxy.cut();
    phase(800).await;
    proxy.restore();
    proxy.blackhole();
    phase(800).await;
    proxy.restore();
    let (history, _) = load.await.expect("load task");
    let events = history.events();

    assert_only_unavailable_errors(&events);
    assert_history_holds(&events);
    assert!(
        events.iter().any(|e| e.timed.outcome.is_unavailable()),
        "the faults were felt"
    );
    let lease = when_back(|| app.acquire("after", 1_000)).await;
    assert_eq!(
        lease.status,
        StatusCode::OK,
        "served again after the proxy was restored"
    );
}

#[test]
fn the_history_checker_passes_a_short_run_on_two_brokers() {
    let broker = broker_binary();
    let checker = broker.with_file_name("lockbroker-check");
    assert!(
        checker.exists(),
        "{} is missing: build it with `cargo build --workspace` first",
        checker.display()
    );
    let run = std::env::temp_dir().join(format!(
        "lockbroker-check-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let (history, logs) = (run.join("history.jsonl"), run.join("logs"));
    std::fs::create_dir_all(&run).expect("a directory for the run");
    let output = Command::new(&checker)
        .arg("--broker-bin")
        .arg(&broker)
        .args(["--brokers", "2", "--clients", "12", "--locks", "2", "--mix"])
        .args(["--seconds", "6"])
        .arg("--history")
        .arg(&history)
        .arg("--logs")
        .arg(&logs)
        .output()
        .expect("run lockbroker-check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("violations: 0"), "{stdout}");

    // The logs it kept: each broker's from its start, at level info, and
    // the Redis server's.
    let read = |name: &str| std::fs::read_to_string(logs.join(name)).unwrap_or_default();
    for broker_log in ["broker-0.log", "broker-1.log"] {
        let text = read(broker_log);
        assert!(
            text.contains("lockbroker listening"),
            "{broker_log}: {text}"
        );
    }
    let node_logs: Vec<String> = (std::fs::read_dir(&logs).expect("the logs directory"))
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("node-"))
        .collect();
    // One, or more if a port was taken before a server could bind it.
    assert!(
        (node_logs.iter()).any(|name| read(name).contains("Ready to accept connections")),
        "the Redis server's log: {node_logs:?}"
    );

    // The history it wrote: one JSON object per request it counted, each
    // with its step and answer, in the order sent.
    let text = std::fs::read_to_string(&history).expect("the history file");
    let _ = std::fs::remove_dir_all(&run);
    let requests: usize = (stdout.lines())
        .find_map(|line| line.strip_prefix("requests: "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("the summary counts the requests");
    let lines: Vec<serde_json::Value> = (text.lines())
        .map(|line| serde_json::from_str(line).expect("a JSON object"))
        .collect();
    assert_eq!(lines.len(), requests, "{stdout}");
    assert!(lines
        .iter()
        .all(|l| l["op"].is_string() && l["answer"].is_string()));
    let sent: Vec<i64> = lines.iter().filter_map(|l| l["send_us"].as_i64()).collect();
    assert!(sent.windows(2).all(|w| w[0] <= w[1]), "in the order sent");
    assert!(
        lines
            .iter()
            .any(|l| l["op"] == "acquire" && l["answer"] == "granted"),
        "grants are in it"
    );
}

#[test]
fn a_lab_sentinel_given_a_logs_directory_logs_there() {
    let redis = RedisServer::start();
    let logs = std::env::temp_dir().join(format!(
        "lockbroker-sentinel-logs-{}-{}",
        std::process::id(),
        redis.port()
    ));
    std::fs::create_dir_all(&logs).expect("a logs directory");
    let sentinel = lockbroker_tests::sentinel::Sentinel::start(redis.port(), 1, Some(&logs))
        .expect("start a Sentinel");
    let log = logs.join(format!("sentinel-{}.log", sentinel.port()));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    while !text.contains("+monitor master") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        text = std::fs::read_to_string(&log).unwrap_or_default();
    }
    drop(sentinel);
    let _ = std::fs::remove_dir_all(&logs);
    assert!(
        text.contains("+monitor master"),
        "the Sentinel's log: {text}"
    );
}
