//! [`Stack`]: a throwaway `redis-server` and brokers on free loopback ports,
//! for a run that was not pointed at a broker. Everything stops on drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::{now_us, BrokerClient};
use crate::history::{Backend, Drift};

/// `redis-server`s without persistence (one, or a quorum's nodes) and
/// `brokers` broker processes on them.
pub struct Stack {
    nodes: Vec<Node>,
    brokers: Vec<Child>,
    /// The brokers' base URLs, `http://127.0.0.1:<port>`.
    pub urls: Vec<String>,
    /// The Redis URL the brokers use (the first node's, in quorum mode).
    pub redis_url: String,
    /// Local µs at which a node was killed by [`Stack::restart_node_empty`].
    restarts: Vec<i64>,
}

/// One `redis-server` of the stack.
struct Node {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl Node {
    /// Starts a `redis-server` on a free port, keeping nothing on disk.
    async fn start() -> Result<Self, String> {
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("lockbroker-lab-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut node = Self {
            child: None,
            port,
            dir,
        };
        node.spawn().await?;
        Ok(node)
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server (apt-get install redis-server): {e}")
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis_answers(self.port) {
            if Instant::now() > deadline {
                return Err(format!("redis-server did not answer on port {}", self.port));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// The drift allowance quorum-mode brokers of a stack run with: the
/// broker's defaults, passed explicitly.
const DRIFT: Drift = Drift::BROKER_DEFAULT;

/// Finds the `lockbroker` binary: `explicit` if given, else the one built
/// beside this tool, else `lockbroker` on the `PATH`.
pub fn broker_binary(explicit: Option<&str>) -> PathBuf {
    if let Some(path) = explicit {
        return PathBuf::from(path);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("lockbroker")));
    match beside {
        Some(path) if path.exists() => path,
        _ => PathBuf::from("lockbroker"),
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

fn redis_answers(port: u16) -> bool {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    conn.write_all(b"PING\r\n").is_ok()
        && conn.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

impl Stack {
    /// Starts one `redis-server` and `brokers` brokers (from `broker_bin`) and
    /// waits until every broker is ready.
    pub async fn start(brokers: usize, broker_bin: &PathBuf) -> Result<Self, String> {
        Self::start_with(1, brokers, broker_bin).await
    }

    /// Like [`Stack::start`] with `nodes` Redis servers: 1, or an odd number
    /// of at least 3, which runs the brokers in quorum mode over all of them.
    pub async fn start_with(
        nodes: usize,
        brokers: usize,
        broker_bin: &PathBuf,
    ) -> Result<Self, String> {
        if nodes == 0 || (nodes > 1 && (nodes < 3 || nodes % 2 == 0)) {
            return Err(format!(
                "--nodes must be 1, or an odd number of at least 3 for quorum mode (not {nodes})"
            ));
        }
        let mut stack = Self {
            nodes: Vec::new(),
            brokers: Vec::new(),
            urls: Vec::new(),
            redis_url: String::new(),
            restarts: Vec::new(),
        };
        for _ in 0..nodes {
            stack.nodes.push(Node::start().await?);
        }
        stack.redis_url = stack.nodes[0].url();
        let node_urls: Vec<String> = stack.nodes.iter().map(Node::url).collect();
        for _ in 0..brokers {
            let port = free_port()?;
            let mut command = Command::new(broker_bin);
            command
                .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
                .env("LOCKBROKER_REDIS_URL", &stack.redis_url)
                .env("LOCKBROKER_LOG_LEVEL", "error");
            if nodes > 1 {
                command
                    .env("LOCKBROKER_REDIS_MODE", "quorum")
                    .env("LOCKBROKER_REDIS_NODES", node_urls.join(","))
                    // Set, not inherited: the checker reads answers by them.
                    .env("LOCKBROKER_REDIS_DRIFT_FACTOR", DRIFT.factor.to_string())
                    .env("LOCKBROKER_REDIS_DRIFT_MS", DRIFT.ms.to_string())
                    // Room for a loaded machine: a slower node is a refusal.
                    .env("LOCKBROKER_REDIS_NODE_TIMEOUT_MS", "200");
            }
            let child = command
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", broker_bin.display()))?;
            stack.brokers.push(child);
            stack.urls.push(format!("http://127.0.0.1:{port}"));
        }
        for url in &stack.urls {
            let client = BrokerClient::new(url, Duration::from_secs(2));
            let deadline = Instant::now() + Duration::from_secs(20);
            while !client.ready().await {
                if Instant::now() > deadline {
                    return Err(format!("the broker at {url} never became ready"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(stack)
    }

    /// The store the brokers run on, as the history checker must read their
    /// answers: quorum mode over several nodes, with every restart so far.
    pub fn backend(&self) -> Backend {
        if self.nodes.len() > 1 {
            Backend::Quorum {
                drift: DRIFT,
                restarts: Some(self.restarts.clone()),
            }
        } else {
            Backend::Single
        }
    }

    /// How many Redis servers the stack runs.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Freezes node `at` (SIGSTOP): connections stay open, nothing answers.
    pub fn pause_node(&self, at: usize) {
        self.nodes[at].signal("-STOP");
    }

    /// Thaws node `at` (SIGCONT).
    pub fn resume_node(&self, at: usize) {
        self.nodes[at].signal("-CONT");
    }

    /// Kills node `at` and starts it again on its port, empty.
    pub async fn restart_node_empty(&mut self, at: usize) -> Result<(), String> {
        let node = &mut self.nodes[at];
        self.restarts.push(now_us());
        node.stop();
        node.spawn().await
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for child in &mut self.brokers {
            let _ = child.kill();
            let _ = child.wait();
        }
        for node in &mut self.nodes {
            node.signal("-CONT");
            node.stop();
            let _ = std::fs::remove_dir_all(&node.dir);
        }
    }
}
