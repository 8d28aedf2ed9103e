//! API keys as operators run them: every request's log line and a counter
//! name the key's id (so a rotation can be watched), a metrics-only key needs
//! no prefixes, and a bad key stops the broker with a message naming it.

use std::process::Command;

use lockbroker_server::auth::hash_token;
use lockbroker_tests::process::BrokerProcess;
use lockbroker_tests::redis::free_port;
use lockbroker_tests::{broker_binary, RedisServer};
use reqwest::StatusCode;
use serde_json::{json, Value};

const WORKER: &str = "worker-key-91ab3c7d";
const SCRAPER: &str = "scraper-key-4f0e2d6c";

fn keys_toml() -> String {
    format!(
        r#"[{{id = "worker", sha256 = "{}", scopes = ["lock"], prefixes = ["*"]}},
            {{id = "scraper", sha256 = "{}", scopes = ["metrics"]}}]"#,
        hash_token(WORKER),
        hash_token(SCRAPER)
    )
}

#[tokio::test]
async fn request_logs_and_a_counter_name_the_key_id() {
    let redis = RedisServer::start();
    let keys = keys_toml();
    let broker = BrokerProcess::start(&redis, &[("LOCKBROKER_AUTH_KEYS", &keys)]).await;
    let base = broker.base.clone();
    let http = reqwest::Client::new();

    let scrape = || async {
        http.get(format!("{base}/metrics"))
            .bearer_auth(SCRAPER)
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("text")
    };
    let before = scrape().await;
    assert!(
        before.contains("lockbroker_requests_total{key=\"worker\"} 0"),
        "every key's series exists from startup:\n{before}"
    );
    let acquire = http
        .post(format!("{base}/v1/locks/job/acquire"))
        .bearer_auth(WORKER)
        .json(&json!({"ttl_ms": 5_000}))
        .send()
        .await
        .expect("acquire");
    assert_eq!(acquire.status(), StatusCode::OK);
    let refused = http
        .get(format!("{base}/metrics"))
        .bearer_auth(WORKER)
        .send()
        .await
        .expect("scrape with the wrong scope");
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let after = scrape().await;
    assert!(
        after.contains("lockbroker_requests_total{key=\"worker\"} 2"),
        "the grant and the refusal, both by the worker key:\n{after}"
    );

    let logs = broker.stop();
    assert!(
        !logs.contains(WORKER) && !logs.contains(SCRAPER),
        "never a key"
    );
    let lines: Vec<Value> = logs
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|line: &Value| line["message"] == "request finished")
        .collect();
    let acquire_line = lines
        .iter()
        .find(|line| line["span"]["route"] == "/v1/locks/{name}/acquire")
        .unwrap_or_else(|| panic!("the acquire is logged:\n{logs}"));
    assert_eq!(acquire_line["key"], "worker", "{acquire_line}");
    assert!(
        lines
            .iter()
            .any(|line| line["status"] == 403 && line["key"] == "worker"),
        "a refused request names its key too:\n{logs}"
    );
}

/// Starts the broker with `keys` and returns its exit code and stderr,
/// expecting it to refuse to start.
fn refused_start(keys: &str) -> (Option<i32>, String) {
    let output = Command::new(broker_binary())
        .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env("LOCKBROKER_REDIS_URL", "redis://127.0.0.1:1/0")
        .env("LOCKBROKER_AUTH_KEYS", keys)
        .output()
        .expect("run lockbroker");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_bad_key_stops_startup_with_a_message_naming_it() {
    let hash = hash_token("t");
    for (keys, names) in [
        (
            r#"[{id = "broken", sha256 = "0", scopes = ["lock"], prefixes = ["*"]}]"#.to_owned(),
            "\"broken\"",
        ),
        (
            r#"[{id = "nohash", scopes = ["lock"], prefixes = ["*"]}]"#.to_owned(),
            "\"nohash\"",
        ),
        (
            format!(r#"[{{id = "noprefix", sha256 = "{hash}", scopes = ["lock"]}}]"#),
            "\"noprefix\"",
        ),
        (
            format!(r#"[{{sha256 = "{hash}", scopes = ["lock"], prefixes = ["*"]}}]"#),
            "key number 1",
        ),
    ] {
        let (code, stderr) = refused_start(&keys);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(names), "{names} in: {stderr}");
    }
}
