//! Metrics count exactly what happened; logs carry request ids and never tokens.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use lockbroker_tests::app::test_settings;
use lockbroker_tests::process::BrokerProcess;
use lockbroker_tests::{metric_names, RedisServer, TestApp};
use reqwest::StatusCode;
use serde_json::json;

/// The value of the sample `series` (name with labels, as printed) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

async fn scrape(app: &TestApp) -> String {
    let response = app
        .http
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .expect("scrape");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    response.text().await.expect("text")
}

#[tokio::test]
async fn counters_and_histograms_count_exactly_what_happened() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.metrics.families = vec!["billing:*".into()];
    let app = std::sync::Arc::new(TestApp::spawn_with(settings).await);

    // billing: one grant, one busy answer, one wait that times out.
    let invoice = app.acquire("billing:invoice-1", 30_000).await;
    assert_eq!(
        app.acquire("billing:invoice-1", 1_000).await.code(),
        "lock_busy"
    );
    let timed_out = app
        .acquire_with("billing:invoice-1", json!({"wait_ms": 100}))
        .await;
    assert_eq!(timed_out.code(), "lock_busy");
    // billing: a waiter granted after a release.
    let waiter = {
        let app = std::sync::Arc::clone(&app);
        tokio::spawn(async move {
            app.acquire_with("billing:invoice-1", json!({"wait_ms": 10_000}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        app.release("billing:invoice-1", &invoice.token())
            .await
            .status,
        StatusCode::OK
    );
    let waited = waiter.await.expect("waiter");
    assert_eq!(waited.status, StatusCode::OK);
    // other: a lease that expires under its holder, who then extends and releases.
    let stale = app.acquire("jobs:nightly", 400).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        app.extend("jobs:nightly", &stale.token(), 1_000)
            .await
            .code(),
        "lease_lost"
    );
    assert_eq!(
        app.release("jobs:nightly", &stale.token()).await.code(),
        "lease_lost"
    );
    // other: a clean cycle.
    let clean = app.acquire("jobs:hourly", 5_000).await;
    assert_eq!(
        app.extend("jobs:hourly", &clean.token(), 5_000)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        app.release("jobs:hourly", &clean.token()).await.status,
        StatusCode::OK
    );
    // Bad input is not an acquire at all.
    assert_eq!(
        app.acquire("jobs:hourly", 0).await.status,
        StatusCode::BAD_REQUEST
    );

    let text = scrape(&app).await;
    let expect = [
        (
            r#"lockbroker_acquires_total{family="billing:*",kind="lock",outcome="acquired"}"#,
            2.0,
        ),
        (
            r#"lockbroker_acquires_total{family="billing:*",kind="lock",outcome="busy"}"#,
            1.0,
        ),
        (
            r#"lockbroker_acquires_total{family="billing:*",kind="lock",outcome="wait_timeout"}"#,
            1.0,
        ),
        (
            r#"lockbroker_acquires_total{family="other",kind="lock",outcome="acquired"}"#,
            2.0,
        ),
        (
            r#"lockbroker_extends_total{family="other",kind="lock",outcome="extended"}"#,
            1.0,
        ),
        (
            r#"lockbroker_extends_total{family="other",kind="lock",outcome="lease_lost"}"#,
            1.0,
        ),
        (
            r#"lockbroker_releases_total{family="billing:*",kind="lock",outcome="released"}"#,
            1.0,
        ),
        (
            r#"lockbroker_releases_total{family="other",kind="lock",outcome="released"}"#,
            1.0,
        ),
        (
            r#"lockbroker_releases_total{family="other",kind="lock",outcome="lease_lost"}"#,
            1.0,
        ),
        (
            r#"lockbroker_leases_lost_total{family="other",kind="lock",operation="extend"}"#,
            1.0,
        ),
        (
            r#"lockbroker_leases_lost_total{family="other",kind="lock",operation="release"}"#,
            1.0,
        ),
        (
            r#"lockbroker_wait_seconds_count{family="billing:*",kind="lock"}"#,
            1.0,
        ),
        (
            r#"lockbroker_hold_seconds_count{family="billing:*",kind="lock"}"#,
            1.0,
        ),
        (
            r#"lockbroker_hold_seconds_count{family="other",kind="lock"}"#,
            1.0,
        ),
        (
            r#"lockbroker_http_request_duration_seconds_count{method="POST",route="/v1/locks/{name}/acquire",status="423"}"#,
            2.0,
        ),
        (
            r#"lockbroker_http_request_duration_seconds_count{method="POST",route="/v1/locks/{name}/acquire",status="400"}"#,
            1.0,
        ),
        (r#"lockbroker_waiters"#, 0.0),
    ];
    for (series, value) in expect {
        assert_eq!(sample(&text, series), value, "{series}\n{text}");
    }
    assert!(
        sample(
            &text,
            r#"lockbroker_redis_script_duration_seconds_count{script="acquire"}"#
        ) >= 7.0,
        "every acquire attempt ran the acquire script"
    );
    assert!(
        !text.contains("invoice-1") && !text.contains("nightly"),
        "no raw lock names"
    );
    for token in [
        invoice.token(),
        waited.token(),
        stale.token(),
        clean.token(),
    ] {
        assert!(!text.contains(&token), "no tokens in metrics");
    }
}

#[tokio::test]
async fn the_scrape_passes_promtool() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let lease = app.acquire("job", 5_000).await;
    app.acquire("job", 5_000).await;
    app.release("job", &lease.token()).await;
    let text = scrape(&app).await;

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool must be installed (apt-get install prometheus)");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let output = promtool.wait_with_output().expect("promtool runs");
    assert!(
        output.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn methods_of_the_callers_own_making_share_one_label() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    for (method, path) in [
        ("PROBEONE", "/v1/locks/metered/acquire"),
        ("PROBETWO", "/nowhere"),
        ("PROBETHREE", "/v1/locks"),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method token");
        let response = app
            .http
            .request(method, format!("{}{path}", app.base))
            .send()
            .await
            .expect("send");
        assert!(response.status().is_client_error(), "{}", response.status());
    }
    let text = scrape(&app).await;
    assert!(
        !text.contains("PROBE"),
        "a caller's method became a label:\n{text}"
    );
    let others: f64 = text
        .lines()
        .filter(|line| {
            line.starts_with("lockbroker_http_request_duration_seconds_count{")
                && line.contains(r#"method="other""#)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(others, 3.0, "{text}");
}

#[tokio::test]
async fn leases_held_and_redis_up_follow_the_store() {
    let mut redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.metrics.reconcile_interval_ms = 1_000;
    let app = TestApp::spawn_with(settings).await;
    app.acquire("a", 30_000).await;
    app.acquire("b", 1_500).await;
    // Counted up on grant. A recount that read Redis between the two grants
    // may set it back to 1 for a moment; the next one (every second) sees both.
    let mut held = 0.0;
    for _ in 0..20 {
        held = sample(&scrape(&app).await, "lockbroker_leases_held");
        if held == 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(held, 2.0, "counted up on grant");

    // "b" expires without a release; the periodic recount notices.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let text = scrape(&app).await;
    assert_eq!(
        sample(&text, "lockbroker_leases_held"),
        1.0,
        "reconciled with Redis"
    );
    assert_eq!(sample(&text, "lockbroker_redis_up"), 1.0);

    redis.kill();
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    assert_eq!(sample(&scrape(&app).await, "lockbroker_redis_up"), 0.0);
}

#[tokio::test]
async fn logs_carry_request_ids_and_never_a_token() {
    let redis = RedisServer::start();
    let broker = BrokerProcess::start(&redis, &[("LOCKBROKER_LOG_LEVEL", "debug")]).await;
    let base = broker.base.clone();
    let http = reqwest::Client::new();

    let mut tokens = Vec::new();
    let acquire = http
        .post(format!("{base}/v1/locks/job/acquire"))
        .header("x-request-id", "trace-me-42")
        .json(&json!({"ttl_ms": 5_000}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(
        acquire.headers()["x-request-id"],
        "trace-me-42",
        "the caller's id comes back"
    );
    let lease: serde_json::Value = acquire.json().await.expect("json");
    let token = lease["token"].as_str().expect("token").to_owned();
    tokens.push(token.clone());
    for verb in ["extend", "release", "release"] {
        let reply = http
            .post(format!("{base}/v1/locks/job/{verb}"))
            .json(&json!({"token": token, "ttl_ms": 5_000}))
            .send()
            .await
            .expect(verb);
        assert!(
            reply.headers().contains_key("x-request-id"),
            "an id is made up when none is sent"
        );
    }
    // A token used on the wrong lock, and a malformed one, end up in errors.
    let other = http
        .post(format!("{base}/v1/locks/other/release"))
        .json(&json!({"token": token}))
        .send()
        .await
        .expect("release other");
    assert_eq!(other.status(), StatusCode::CONFLICT);
    let wrong = http
        .post(format!("{base}/v1/locks/job/extend"))
        .json(&json!({"token": "secret value with spaces", "ttl_ms": 5_000}))
        .send()
        .await
        .expect("extend");
    let wrong_body = wrong.text().await.expect("body");
    assert!(
        !wrong_body.contains("secret value"),
        "errors never echo a token"
    );

    let logs = broker.stop();
    for token in tokens.iter().map(String::as_str).chain(["secret value"]) {
        assert!(!logs.contains(token), "a token leaked into the logs");
    }
    let request_lines: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|line: &serde_json::Value| line["message"] == "request finished")
        .collect();
    assert!(request_lines.len() >= 6, "one line per request:\n{logs}");
    let traced = request_lines
        .iter()
        .find(|line| line["span"]["request_id"] == "trace-me-42")
        .unwrap_or_else(|| panic!("the acquire's line carries its id:\n{logs}"));
    assert_eq!(traced["span"]["route"], "/v1/locks/{name}/acquire");
    assert_eq!(traced["status"], 200);
    assert!(traced["duration_ms"].is_number());
    assert!(
        logs.lines()
            .any(|line| line.contains("lease granted") && line.contains("\"fence\"")),
        "lock events carry the fence:\n{logs}"
    );
}

#[test]
fn the_alert_rules_pass_promtool() {
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/prometheus/lockbroker-alerts.yml"
    );
    let output = Command::new("promtool")
        .args(["check", "rules", rules])
        .output()
        .expect("promtool must be installed (apt-get install prometheus)");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn the_dashboard_and_alerts_query_only_exported_metrics() {
    let redis = RedisServer::start();
    let app = std::sync::Arc::new(TestApp::spawn(&redis).await);
    // Touch every metric family once so each is exported.
    let lease = app.acquire("job", 5_000).await;
    let waiter = {
        let app = std::sync::Arc::clone(&app);
        tokio::spawn(async move { app.acquire_with("job", json!({"wait_ms": 5_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    app.extend("job", &lease.token(), 5_000).await;
    app.release("job", &lease.token()).await;
    app.release("job", &lease.token()).await;
    let second = waiter.await.expect("waiter");
    app.extend("job", "not-the-token", 5_000).await;
    app.release("job", &second.token()).await;
    let exported: std::collections::BTreeSet<String> = scrape(&app)
        .await
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split(' ').next())
        .map(str::to_owned)
        .collect();

    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
    for file in [
        "grafana/lockbroker-dashboard.json",
        "prometheus/lockbroker-alerts.yml",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).expect("read");
        if file.ends_with(".json") {
            let _: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
        }
        let used = metric_names(&text);
        assert!(!used.is_empty(), "{file} queries lockbroker metrics");
        // The per-node quorum series exist only in quorum mode: the dashboard
        // tests in alerts::dashboard check them against a quorum-mode broker.
        let in_quorum_mode_only = |name: &str| name.starts_with("lockbroker_quorum_node_");
        for name in used.into_iter().filter(|name| !in_quorum_mode_only(name)) {
            assert!(
                exported.contains(&name),
                "{file} queries {name}, which is not exported"
            );
        }
    }
}

/// The JSON lines of `logs` whose message is `message`.
fn log_lines<'a>(logs: &'a str, message: &'a str) -> impl Iterator<Item = serde_json::Value> + 'a {
    logs.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(move |line| line["message"] == message)
}

#[tokio::test]
async fn the_log_names_the_mode_and_endpoints_and_each_node_change_once() {
    let password = "s3cret-pw";
    // The default user has no password, so it takes any: the URL carries one.
    let first = RedisServer::start();
    let (mut second, third) = (RedisServer::start(), RedisServer::start());
    let nodes = [
        format!("redis://default:{password}@127.0.0.1:{}/0", first.port()),
        second.url(),
        third.url(),
    ]
    .join(",");
    let broker = BrokerProcess::start(
        &second,
        &[
            ("LOCKBROKER_REDIS_MODE", "quorum"),
            ("LOCKBROKER_REDIS_NODES", &nodes),
            ("LOCKBROKER_REDIS_NODE_TIMEOUT_MS", "200"),
        ],
    )
    .await;
    second.kill();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    second.restart();
    // The node's standing is asked again at least every 5 s: by then its
    // empty restart is known, with room for a loaded machine.
    tokio::time::sleep(Duration::from_millis(8_000)).await;
    let logs = broker.stop();

    assert!(
        !logs.contains(password),
        "a password leaked into the logs:\n{logs}"
    );
    let start: Vec<_> = log_lines(&logs, "lockbroker store").collect();
    assert_eq!(start.len(), 1, "{logs}");
    assert_eq!(start[0]["mode"], "quorum");
    let endpoints = start[0]["endpoints"].as_str().expect("endpoints");
    assert_eq!(
        endpoints,
        format!(
            "redis://127.0.0.1:{}/0,{},{}",
            first.port(),
            second.url(),
            third.url()
        )
    );
    for message in [
        "quorum node stopped answering",
        "quorum node answers again",
        "quorum node restarted without its data; it stays out of every majority until every \
         lease it may have held has expired",
    ] {
        let lines: Vec<_> = log_lines(&logs, message).collect();
        assert_eq!(lines.len(), 1, "{message:?} once:\n{logs}");
        assert_eq!(lines[0]["node"], 1, "{message}");
        assert_eq!(lines[0]["endpoint"], second.url(), "{message}");
    }
}
