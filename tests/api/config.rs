//! Settings from the environment, as the `lockbroker` binary reads them: a
//! misspelt `LOCKBROKER_*` variable stops it, the clients' variables do not.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lockbroker_tests::redis::free_port;
use lockbroker_tests::{broker_binary, RedisServer};
use reqwest::StatusCode;

/// The broker binary with no `LOCKBROKER_*` variable inherited from the
/// environment running the tests.
fn broker() -> Command {
    let mut command = Command::new(broker_binary());
    for (key, _) in std::env::vars() {
        if key.starts_with("LOCKBROKER_") {
            command.env_remove(key);
        }
    }
    command
}

/// Runs `command` to its end, killing it (and failing) if it is still
/// running after ten seconds: a broker that started would never end.
fn run_to_exit(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockbroker");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("output");
            panic!(
                "lockbroker kept running: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn a_misspelt_setting_stops_the_broker_naming_the_variable() {
    let mut command = broker();
    command
        .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{}", free_port()))
        .env(
            "LOCKBROKER_REDIS_URl",
            "redis://:url-s3cret@10.0.0.1:6379/0",
        );

    let output = run_to_exit(command);

    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("unknown setting LOCKBROKER_REDIS_URl; did you mean LOCKBROKER_REDIS_URL?"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

/// Kills the broker when the test ends, pass or fail.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn client_variables_and_empty_optional_settings_do_not_stop_the_broker() {
    let redis = RedisServer::start();
    let port = free_port();
    let mut broker = Running(
        broker()
            .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
            .env("LOCKBROKER_REDIS_URL", redis.url())
            .env("LOCKBROKER_LOG_LEVEL", "warn")
            // Read by lockctl and the clients, often set beside the broker.
            .env("LOCKBROKER_URL", format!("http://127.0.0.1:{port}"))
            .env("LOCKBROKER_API_KEY", "a-client-token")
            .env("LOCKBROKER_CA_CERT", "/nonexistent/ca.pem")
            // Empty optional settings: plain HTTP, no metrics listener.
            .env("LOCKBROKER_HTTP_TLS_CERT_PATH", "")
            .env("LOCKBROKER_HTTP_TLS_KEY_PATH", "")
            .env("LOCKBROKER_METRICS_LISTEN", "")
            .env("LOCKBROKER_LOCKS_MAX_HOLD_MS", "")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockbroker"),
    );
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut status = None;
    while status != Some(StatusCode::OK) && Instant::now() < deadline {
        if let Some(exit) = broker.0.try_wait().expect("wait") {
            let mut stderr = String::new();
            if let Some(mut pipe) = broker.0.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
            }
            panic!("lockbroker exited ({exit}): {stderr}");
        }
        status = http
            .get(format!("http://127.0.0.1:{port}/readyz"))
            .send()
            .await
            .ok()
            .map(|reply| reply.status());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(status, Some(StatusCode::OK), "the broker serves plain HTTP");
}
