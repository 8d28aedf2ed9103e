//! Every series the rules and the dashboard read exists from the broker's
//! start, and every dashboard panel's query returns data from Prometheus after
//! a short workload: each checked against a single-mode broker and against a
//! quorum-mode broker over three nodes, where the per-node series exist.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockbroker_server::auth::{hash_token, ApiKeyConfig};
use lockbroker_server::Settings;
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{metric_names, RedisServer, TestApp};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::prometheus::{deploy_file, Prometheus};
use super::{quorum_nodes, quorum_settings, target};

const KEY: &str = "dashboard-key-5e1f0c7a9b";

/// The backend mode a check runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One Redis.
    Single,
    /// Three Redis nodes: the per-node quorum series exist only here.
    Quorum,
}

/// What a single-mode broker's per-node quorum panels say of themselves.
const EMPTY_IN_SINGLE_MODE: &str = "Empty in single mode";

/// `base` with two families and one API key that may do everything (the
/// per-key request counter counts it; Prometheus scrapes with it).
fn settings(mut settings: Settings) -> Settings {
    settings.metrics.families = vec!["billing:*".into(), "nightly-report".into()];
    let key: ApiKeyConfig = serde_json::from_value(json!({
        "id": "dashboard",
        "sha256": hash_token(KEY),
        "scopes": ["lock", "admin", "metrics"],
        "prefixes": ["*"],
    }))
    .expect("key");
    settings.auth.keys = vec![key];
    settings
}

/// A broker and the Redis servers it runs on.
struct Broker {
    app: Arc<TestApp>,
    _redis: Vec<RedisServer>,
}

/// A broker in `mode` whose client sends the key with every request.
async fn spawn(mode: Mode) -> Broker {
    let (redis, base) = match mode {
        Mode::Single => {
            let redis = RedisServer::start();
            let base = test_settings(&redis);
            (vec![redis], base)
        }
        Mode::Quorum => {
            let nodes = quorum_nodes();
            let base = quorum_settings(&nodes);
            (nodes, base)
        }
    };
    let mut app = TestApp::spawn_with(settings(base)).await;
    let mut headers = HeaderMap::new();
    let bearer = HeaderValue::from_str(&format!("Bearer {KEY}")).expect("header");
    headers.insert(AUTHORIZATION, bearer);
    app.http = reqwest::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    Broker {
        app: Arc::new(app),
        _redis: redis,
    }
}

/// The text of a shipped file under `deploy/`.
fn shipped(path: &str) -> String {
    std::fs::read_to_string(deploy_file(path)).expect("read shipped file")
}

#[tokio::test]
async fn every_series_the_rules_and_panels_read_exists_at_zero_from_the_start() {
    series_exist_from_the_start(Mode::Single).await;
}

#[tokio::test]
async fn every_series_the_rules_and_panels_read_exists_from_the_start_in_quorum_mode() {
    series_exist_from_the_start(Mode::Quorum).await;
}

/// A broker in `mode` exports, before any request, every series a rule or
/// panel reads, each counter at 0.
async fn series_exist_from_the_start(mode: Mode) {
    let Broker { app, _redis } = spawn(mode).await;
    let mut text = app.metrics().await;
    // Quorum mode: the node gauges are set by a background check that runs
    // at the broker's start and every 5 seconds; the per-node series appear
    // at the first. Once that has run, they must all be there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mode == Mode::Quorum && !text.lines().any(|l| l == "lockbroker_quorum_majority 2") {
        assert!(Instant::now() < deadline, "no node check:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        text = app.metrics().await;
    }
    let has = |series: &str| text.lines().any(|line| line == series);

    // Each family and `other`, crossed with each outcome the alerts read.
    // Each family, and each kind of lease, crossed with each outcome the
    // alerts read.
    for family in ["billing:*", "nightly-report", "other"] {
        for kind in ["lock", "shared", "semaphore"] {
            for operation in ["extend", "release"] {
                let lost = format!(
                    r#"lockbroker_leases_lost_total{{family="{family}",kind="{kind}",operation="{operation}"}} 0"#
                );
                assert!(has(&lost), "{lost} missing:\n{text}");
            }
            for counter in ["acquires", "extends", "releases"] {
                let errors = format!(
                    r#"lockbroker_{counter}_total{{family="{family}",kind="{kind}",outcome="error"}} 0"#
                );
                assert!(has(&errors), "{errors} missing:\n{text}");
            }
            let waits =
                format!(r#"lockbroker_wait_seconds_count{{family="{family}",kind="{kind}"}} 0"#);
            assert!(has(&waits), "{waits} missing");
        }
    }
    // The scrapes that waited for the node check above count as requests.
    let requests = r#"lockbroker_requests_total{key="dashboard"} "#;
    assert!(
        text.lines().any(|line| line.starts_with(requests)),
        "{requests} missing"
    );
    for series in [
        "lockbroker_fence_floor_raises_total 0",
        r#"lockbroker_replica_acks_missed_total{step="acquire"} 0"#,
        r#"lockbroker_http_request_duration_seconds_count{method="POST",route="/v1/locks/{name}/acquire",status="200"} 0"#,
        "lockbroker_max_waiters 10000",
    ] {
        assert!(has(series), "{series} missing:\n{text}");
    }
    // No counter has counted anything yet: each starts at 0.
    let counters = text.lines().filter(|line| line.contains("_total"));
    for line in counters.filter(|line| !line.starts_with(requests)) {
        assert!(line.starts_with('#') || line.ends_with(" 0"), "{line}");
    }
    // Quorum mode: each node by its place in the list. (Its value depends on
    // whether the first check ran before the broker knew the nodes' standing.)
    if mode == Mode::Quorum {
        for node in 0..3 {
            let up = format!(r#"lockbroker_quorum_node_up{{node="{node}"}} "#);
            assert!(
                text.lines().any(|line| line.starts_with(&up)),
                "{up} missing:\n{text}"
            );
        }
    }

    // Every metric a rule or panel reads has samples already. Script
    // latencies appear per script (and per node) at its first run; only
    // panels read them. Single mode has no nodes, so no per-node series.
    let read = metric_names(&shipped("prometheus/lockbroker-alerts.yml"))
        .into_iter()
        .chain(metric_names(&shipped("grafana/lockbroker-dashboard.json")));
    let at_first_run = [
        "lockbroker_redis_script_duration_seconds",
        "lockbroker_quorum_node_script_duration_seconds",
    ];
    let per_node = |name: &str| name.starts_with("lockbroker_quorum_node_");
    for name in read
        .filter(|name| !at_first_run.contains(&name.as_str()))
        .filter(|name| mode == Mode::Quorum || !per_node(name))
    {
        let sampled = text.lines().any(|line| {
            line.strip_prefix(name.as_str())
                .is_some_and(|rest| rest.starts_with([' ', '{']) || rest.starts_with("_bucket{"))
        });
        assert!(sampled, "{name} has no series at startup:\n{text}");
    }
}

/// Each panel's title, description and expressions, with Grafana's interval
/// variables replaced by values that suit a one-second scrape. Rows hold no
/// queries of their own.
fn panels() -> Vec<(String, String, Vec<String>)> {
    let dashboard: Value =
        serde_json::from_str(&shipped("grafana/lockbroker-dashboard.json")).expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    panels
        .iter()
        .filter(|panel| panel["type"] != "row")
        .map(|panel| {
            let exprs = panel["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .map(|t| {
                    t["expr"]
                        .as_str()
                        .expect("expr")
                        .replace("$__rate_interval", "1m")
                })
                .collect();
            let text = |field: &str| panel[field].as_str().unwrap_or("").to_owned();
            (text("title"), text("description"), exprs)
        })
        .collect()
}

/// A workload that touches every panel: grants, busy answers, a wait, holds,
/// extends, a lost lease, and requests with the API key.
async fn workload(app: &Arc<TestApp>) {
    for i in 0..5 {
        let name = format!("billing:{i}");
        let lease = app.acquire(&name, 5_000).await;
        assert_eq!(lease.status, StatusCode::OK, "{}", lease.body);
        assert_eq!(app.acquire(&name, 5_000).await.code(), "lock_busy");
        app.extend(&name, &lease.token(), 5_000).await;
        app.release(&name, &lease.token()).await;
    }
    let holder = app.acquire("nightly-report", 5_000).await;
    let waiter = {
        let app = Arc::clone(app);
        tokio::spawn(async move {
            app.acquire_with("nightly-report", json!({"wait_ms": 5_000}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    app.release("nightly-report", &holder.token()).await;
    let waited = waiter.await.expect("waiter");
    assert_eq!(waited.status, StatusCode::OK, "{}", waited.body);
    app.release("nightly-report", &waited.token()).await;
    let stale = app.acquire("jobs:stale", 400).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        app.extend("jobs:stale", &stale.token(), 1_000).await.code(),
        "lease_lost"
    );
    assert_eq!(app.status("jobs:stale").await.status, StatusCode::OK);
    assert_eq!(app.get("/v1/locks").await.status, StatusCode::OK);
}

/// Each panel query (`title: expr`) that returns no finite value now, with
/// its panel's description.
async fn queries_without_data(prometheus: &Prometheus) -> Vec<(String, String)> {
    let mut empty = Vec::new();
    for (title, description, exprs) in panels() {
        for expr in exprs {
            let result = prometheus.query(&expr).await;
            let has_data = result.iter().any(|sample| {
                sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(f64::is_finite)
            });
            if !has_data {
                empty.push((format!("{title}: {expr}"), description.clone()));
            }
        }
    }
    empty
}

#[tokio::test]
async fn every_dashboard_panel_returns_data_after_a_workload() {
    panels_return_data_after_a_workload(Mode::Single).await;
}

#[tokio::test]
async fn every_dashboard_panel_returns_data_after_a_workload_in_quorum_mode() {
    panels_return_data_after_a_workload(Mode::Quorum).await;
}

/// Every panel of the dashboard shows data for a broker in `mode` after a
/// workload; while idle, only panels that say so are empty. A single-mode
/// broker has no nodes: the per-node quorum panels, which say so, are empty.
async fn panels_return_data_after_a_workload(mode: Mode) {
    let Broker { app, _redis } = spawn(mode).await;
    let prometheus = Prometheus::start_with(&[target(&app)], Some(KEY)).await;

    // An idle broker: a panel that shows nothing says so in its description.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for (query, description) in queries_without_data(&prometheus).await {
        assert!(
            description.to_lowercase().contains("empty"),
            "{query} is empty while idle, and its description does not say so"
        );
    }

    workload(&app).await;
    // Two scrapes later Prometheus has the workload's counts.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let empty: Vec<String> = queries_without_data(&prometheus)
        .await
        .into_iter()
        .filter(|(_, description)| {
            mode == Mode::Quorum || !description.contains(EMPTY_IN_SINGLE_MODE)
        })
        .map(|(query, _)| query)
        .collect();
    assert!(
        empty.is_empty(),
        "panels without data:\n{}",
        empty.join("\n")
    );
}
