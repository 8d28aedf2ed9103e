//! [`BrokerProcess`]: the real `lockbroker` binary as a child process, for
//! tests of what only the process shows: its logs, its exit.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::broker_binary;
use crate::redis::{free_port, RedisServer};

/// A `lockbroker` process on a free loopback port, logging JSON.
pub struct BrokerProcess {
    /// `None` once stopped.
    child: Option<Child>,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl BrokerProcess {
    /// Starts the broker on `redis` with extra `LOCKBROKER_*` settings and
    /// waits until it is ready (or a few seconds have passed).
    pub async fn start(redis: &RedisServer, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let child = Command::new(broker_binary())
            .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
            .env("LOCKBROKER_REDIS_URL", redis.url())
            .env("LOCKBROKER_LOG_FORMAT", "json")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockbroker");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        for _ in 0..200 {
            let ready = http.get(format!("{base}/readyz")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Self {
            child: Some(child),
            base,
        }
    }

    /// The broker's resident memory now, in bytes (`VmRSS` in
    /// `/proc/<pid>/status`).
    pub fn rss_bytes(&self) -> u64 {
        let pid = self.child.as_ref().map_or(0, Child::id);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .expect("the broker's /proc status");
        let kib = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .expect("VmRSS in kB");
        kib * 1024
    }

    /// Stops the broker with SIGTERM and returns everything it logged.
    pub fn stop(mut self) -> String {
        let child = self.child.take().expect("running");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill");
        let output = child.wait_with_output().expect("broker exits");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }
}

/// A test that fails before stopping its broker leaves none behind.
impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
