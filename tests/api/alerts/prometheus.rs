//! [`Prometheus`]: Debian's `prometheus` as a child process on a free loopback
//! port, scraping brokers every second with the shipped rules loaded.
//!
//! The scrape configuration is the shipped `deploy/prometheus/prometheus.yml`
//! with its intervals shortened and its targets replaced; the rules are the
//! shipped files with every `for:` shortened to [`FOR`]. Nothing else is
//! rewritten: [`rules_for_test`] checks that every expression is untouched.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockbroker_tests::redis::free_port;
use serde_json::Value;
use serde_yaml::Value as Yaml;

/// The `for:` duration every rule gets in tests (shipped: minutes).
pub const FOR: &str = "2s";

/// How long an alert may take to change state before the test fails.
const ALERT_DEADLINE: Duration = Duration::from_secs(60);

/// A file under the repository's `deploy/` folder.
pub fn deploy_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path)
}

/// The shipped alert rules with every `for:` set to [`FOR`].
pub fn rules_for_test() -> String {
    let shipped =
        std::fs::read_to_string(deploy_file("prometheus/lockbroker-alerts.yml")).expect("rules");
    let rewritten: String = shipped
        .lines()
        .map(|line| {
            let body = line.trim_start();
            match body.strip_prefix("for:") {
                Some(_) => format!("{}for: {FOR}\n", &line[..line.len() - body.len()]),
                None => format!("{line}\n"),
            }
        })
        .collect();
    // Everything but `for:` is as shipped, expressions above all.
    let without_for = |text: &str| {
        let mut rules: Yaml = serde_yaml::from_str(text).expect("rules parse");
        for group in rules["groups"].as_sequence_mut().expect("groups") {
            for rule in group["rules"].as_sequence_mut().expect("rules") {
                rule.as_mapping_mut().expect("rule").remove("for");
            }
        }
        rules
    };
    assert_eq!(without_for(&shipped), without_for(&rewritten));
    rewritten
}

/// The shipped scrape configuration, scraping `targets` every second as the
/// `lockbroker` job (with a bearer `key` if given) and evaluating `rules`.
fn config(targets: &[String], key: Option<&str>, rules: &Path) -> String {
    let shipped = std::fs::read_to_string(deploy_file("prometheus/prometheus.yml")).expect("read");
    let mut config: Yaml = serde_yaml::from_str(&shipped).expect("prometheus.yml parses");
    for field in ["scrape_interval", "evaluation_interval", "scrape_timeout"] {
        config["global"][field] = "1s".into();
    }
    config["rule_files"] = vec![Yaml::from(rules.to_str().expect("utf-8 path"))].into();
    let jobs = config["scrape_configs"].as_sequence_mut().expect("jobs");
    jobs.retain(|job| job["job_name"] == "lockbroker");
    assert_eq!(
        jobs.len(),
        1,
        "the shipped config scrapes the lockbroker job"
    );
    let job = &mut jobs[0];
    job["scrape_interval"] = "1s".into();
    job["static_configs"][0]["targets"] = targets.iter().map(|t| Yaml::from(t.as_str())).collect();
    if let Some(key) = key {
        let mut auth = serde_yaml::Mapping::new();
        auth.insert("type".into(), "Bearer".into());
        auth.insert("credentials".into(), key.into());
        job["authorization"] = auth.into();
    }
    serde_yaml::to_string(&config).expect("config")
}

/// What an alert is expected to become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Active past its `for:` duration.
    Firing,
    /// Neither pending nor firing.
    Inactive,
}

/// A Prometheus server the test owns. Killed on drop.
pub struct Prometheus {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    http: reqwest::Client,
    child: Child,
    dir: PathBuf,
}

impl Prometheus {
    /// Scrapes the brokers at `targets` (`host:port`) without credentials.
    pub async fn start(targets: &[String]) -> Self {
        Self::start_with(targets, None).await
    }

    /// Scrapes `targets` with `key` as a bearer token, if given.
    pub async fn start_with(targets: &[String], key: Option<&str>) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "lockbroker-prometheus-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(dir.join("data")).expect("create prometheus dir");
        let rules = dir.join("lockbroker-alerts.yml");
        std::fs::write(&rules, rules_for_test()).expect("write rules");
        std::fs::write(dir.join("prometheus.yml"), config(targets, key, &rules))
            .expect("write config");
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("prometheus must be installed (apt-get install prometheus)");
        let server = Self {
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
            child,
            dir,
        };
        server.wait_ready(targets.len()).await;
        server
    }

    /// Waits until Prometheus serves and has scraped every target once, so
    /// each broker's series are known at their starting values.
    async fn wait_ready(&self, targets: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let up = self.query_or_none(r#"up{job="lockbroker"} == 1"#).await;
            if up.is_some_and(|up| up.len() == targets) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus never scraped the brokers:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Prometheus's own log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Option<Value> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await
            .ok()?;
        let body: Value = response.json().await.ok()?;
        (body["status"] == "success").then(|| body["data"].clone())
    }

    async fn query_or_none(&self, expr: &str) -> Option<Vec<Value>> {
        let data = self.get("/api/v1/query", &[("query", expr)]).await?;
        data["result"].as_array().cloned()
    }

    /// The instant vector `expr` evaluates to now.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        self.query_or_none(expr)
            .await
            .unwrap_or_else(|| panic!("query failed: {expr}"))
    }

    /// Waits until `expr` returns a sample, e.g. until Prometheus has scraped
    /// a gauge the broker sets in the background at the value a test needs.
    pub async fn wait_until(&self, expr: &str) {
        let deadline = Instant::now() + ALERT_DEADLINE;
        while self.query(expr).await.is_empty() {
            assert!(
                Instant::now() < deadline,
                "{expr} returned nothing within {ALERT_DEADLINE:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The active instances of alert `name`, as the alerts API reports them.
    pub async fn alerts(&self, name: &str) -> Vec<Value> {
        let data = self.get("/api/v1/alerts", &[]).await.expect("alerts API");
        data["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .filter(|alert| alert["labels"]["alertname"] == name)
            .cloned()
            .collect()
    }

    /// Waits until alert `name` is in `state`; returns its instances then and
    /// the time since `since` (when the test caused or ended its condition).
    pub async fn wait_for(&self, name: &str, state: State, since: Instant) -> (Vec<Value>, f64) {
        loop {
            let alerts = self.alerts(name).await;
            let firing = alerts.iter().any(|alert| alert["state"] == "firing");
            let reached = match state {
                State::Firing => firing,
                State::Inactive => alerts.is_empty(),
            };
            if reached {
                return (alerts, since.elapsed().as_secs_f64());
            }
            if since.elapsed() > ALERT_DEADLINE {
                let rules = self.get("/api/v1/rules", &[]).await;
                panic!(
                    "{name} did not become {state:?} within {ALERT_DEADLINE:?}: {alerts:?}\nrules: {rules:?}\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An alert's value: the value of its expression when last evaluated.
pub fn value(alert: &Value) -> f64 {
    alert["value"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("alert without a value: {alert}"))
}
