//! [`Stack`]: a throwaway `redis-server` and brokers on free loopback ports,
//! for a run that was not pointed at a broker. Everything stops on drop.
//! Single mode runs one Redis, quorum mode several, sentinel mode a
//! primary, two replicas and three Sentinels (`stack/sentinel.rs`), and
//! cluster mode a Redis Cluster of three primaries (`stack/cluster.rs`).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::client::{now_us, BrokerClient};
use crate::history::{Backend, Drift};

pub mod cluster;
mod node;
pub mod sentinel;

use node::Node;

use sentinel::{Sentinel, SERVICE_NAME};

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
    /// Sentinel mode: the Sentinels watching the nodes.
    sentinels: Vec<Sentinel>,
    /// Sentinel mode: local µs at which [`Stack::fail_over`] killed the primary.
    failovers: Vec<i64>,
    /// Cluster mode: the nodes are a Redis Cluster.
    clustered: bool,
}

/// How a stack starts its processes: the broker binary, and where their
/// logs go.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `lockbroker` binary.
    pub broker_bin: PathBuf,
    /// A directory for the logs: each broker's at level `info` in
    /// `broker-<n>.log` (from 0, in start order), each Redis server's in
    /// `node-<port>.log`, kept across its restarts, and each Sentinel's in
    /// `sentinel-<port>.log`. Without it, a broker's log (errors only) is
    /// discarded, and Redis servers and Sentinels log nothing.
    pub logs: Option<PathBuf>,
}

impl Launch {
    /// What a lab tool's `--broker-bin` and `--logs` say. `--logs` keeps
    /// the logs of the servers the tool starts, so it is refused beside
    /// `--url` (a broker started elsewhere) rather than ignored.
    pub fn from_args(args: &Args) -> Result<Self, String> {
        let logs = args.raw("logs").map(PathBuf::from);
        if logs.is_some() && args.raw("url").is_some() {
            return Err(
                "--logs keeps the logs of the servers this tool starts; not with --url".into(),
            );
        }
        Ok(Self {
            broker_bin: broker_binary(args.raw("broker-bin")),
            logs,
        })
    }

    /// The logs directory, created if missing.
    fn log_dir(&self) -> Result<Option<&Path>, String> {
        let Some(dir) = &self.logs else {
            return Ok(None);
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the logs directory {}: {e}", dir.display()))?;
        Ok(Some(dir))
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

pub(crate) fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Whether the server in `child` has exited (a port taken before it bound
/// it); forgets it if so.
pub fn exited(child: &mut Option<Child>) -> bool {
    let gone = child
        .as_mut()
        .is_some_and(|child| child.try_wait().is_ok_and(|status| status.is_some()));
    if gone {
        *child = None;
    }
    gone
}

/// Whether a Redis answers `PING` on `port` (not some other server there).
pub fn redis_answers(port: u16) -> bool {
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
    /// Starts one `redis-server` and `brokers` brokers (as `launch` says) and
    /// waits until every broker is ready.
    pub async fn start(brokers: usize, launch: &Launch) -> Result<Self, String> {
        Self::start_with(1, brokers, launch).await
    }

    /// Like [`Stack::start`] with `nodes` Redis servers: 1, or an odd number
    /// of at least 3, which runs the brokers in quorum mode over all of them.
    pub async fn start_with(nodes: usize, brokers: usize, launch: &Launch) -> Result<Self, String> {
        if nodes == 0 || (nodes > 1 && (nodes < 3 || nodes % 2 == 0)) {
            return Err(format!(
                "--nodes must be 1, or an odd number of at least 3 for quorum mode (not {nodes})"
            ));
        }
        let logs = launch.log_dir()?;
        let mut stack = Self::empty();
        for _ in 0..nodes {
            stack.nodes.push(Node::start(logs).await?);
        }
        stack.redis_url = stack.nodes[0].url();
        let node_urls: Vec<String> = stack.nodes.iter().map(Node::url).collect();
        let mut mode = Vec::new();
        if nodes > 1 {
            mode = vec![
                ("LOCKBROKER_REDIS_MODE", "quorum".to_owned()),
                ("LOCKBROKER_REDIS_NODES", node_urls.join(",")),
                // Set, not inherited: the checker reads answers by them.
                ("LOCKBROKER_REDIS_DRIFT_FACTOR", DRIFT.factor.to_string()),
                ("LOCKBROKER_REDIS_DRIFT_MS", DRIFT.ms.to_string()),
                // Room for a loaded machine: a slower node is a refusal.
                ("LOCKBROKER_REDIS_NODE_TIMEOUT_MS", "200".to_owned()),
            ];
        }
        stack.start_brokers(brokers, launch, &mode).await?;
        Ok(stack)
    }

    /// Sentinel mode: a primary, two replicas of it and three Sentinels
    /// (quorum 2) watching them, and `brokers` brokers that find the primary
    /// through the Sentinels.
    pub async fn start_sentinel(brokers: usize, launch: &Launch) -> Result<Self, String> {
        let mut stack = Self::start_with(1, 0, launch).await?;
        let logs = launch.log_dir()?;
        let primary = stack.nodes[0].port.to_string();
        for _ in 0..2 {
            let replica_of = vec!["--replicaof".into(), "127.0.0.1".into(), primary.clone()];
            stack.nodes.push(Node::start_with(replica_of, logs).await?);
        }
        for _ in 0..3 {
            stack
                .sentinels
                .push(Sentinel::start(stack.nodes[0].port, 2, logs)?);
        }
        sentinel::wait_until_watching(&stack.sentinels, 2).await?;
        let addresses: Vec<String> = stack.sentinels.iter().map(Sentinel::address).collect();
        let mode = [
            ("LOCKBROKER_REDIS_MODE", "sentinel".to_owned()),
            ("LOCKBROKER_REDIS_SENTINELS", addresses.join(",")),
            ("LOCKBROKER_REDIS_SERVICE_NAME", SERVICE_NAME.to_owned()),
        ];
        stack.start_brokers(brokers, launch, &mode).await?;
        Ok(stack)
    }

    /// Cluster mode: a Redis Cluster of `primaries` primaries (no
    /// replicas), created with `redis-cli --cluster create`, and `brokers`
    /// brokers that know it by its nodes.
    pub async fn start_cluster(
        primaries: usize,
        brokers: usize,
        launch: &Launch,
    ) -> Result<Self, String> {
        let logs = launch.log_dir()?;
        let mut stack = Self::empty();
        let node_args: Vec<String> = cluster::NODE_ARGS.iter().map(|a| (*a).to_owned()).collect();
        for _ in 0..primaries {
            stack
                .nodes
                .push(Node::start_with(node_args.clone(), logs).await?);
        }
        let ports = stack.ports();
        tokio::task::spawn_blocking(move || cluster::create(&ports, 0))
            .await
            .map_err(|e| e.to_string())??;
        stack.clustered = true;
        stack.redis_url = stack.nodes[0].url();
        let seeds: Vec<String> = stack.nodes.iter().map(Node::url).collect();
        let mode = [
            ("LOCKBROKER_REDIS_MODE", "cluster".to_owned()),
            ("LOCKBROKER_REDIS_NODES", seeds.join(",")),
        ];
        stack.start_brokers(brokers, launch, &mode).await?;
        Ok(stack)
    }

    /// Cluster mode: moves every slot of one primary (the `round`-th of
    /// those serving slots) to the node after it with `redis-cli --cluster
    /// reshard`, while the load runs; how many slots moved.
    pub async fn reshard(&self, round: usize) -> Result<u16, String> {
        let ports = self.ports();
        tokio::task::spawn_blocking(move || {
            let primaries = cluster::primaries(ports[0]);
            let Some(from) = primaries.get(round % primaries.len().max(1)).copied() else {
                return Err("the cluster names no primary".to_owned());
            };
            // The next node after it, which may hold no slot yet.
            let at = ports.iter().position(|port| *port == from).unwrap_or(0);
            let to = ports[(at + 1) % ports.len()];
            cluster::drain(&ports, from, to)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// Whether the nodes are a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.clustered
    }

    fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }

    /// No server and no broker yet.
    fn empty() -> Self {
        Self {
            nodes: Vec::new(),
            brokers: Vec::new(),
            urls: Vec::new(),
            redis_url: String::new(),
            restarts: Vec::new(),
            sentinels: Vec::new(),
            failovers: Vec::new(),
            clustered: false,
        }
    }

    /// Starts `brokers` brokers on the stack's Redis with the mode settings
    /// `mode`, and waits until each is ready.
    async fn start_brokers(
        &mut self,
        brokers: usize,
        launch: &Launch,
        mode: &[(&str, String)],
    ) -> Result<(), String> {
        let stack = self;
        let logs = launch.log_dir()?;
        for _ in 0..brokers {
            let port = free_port()?;
            let mut command = Command::new(&launch.broker_bin);
            command
                .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
                .env("LOCKBROKER_REDIS_URL", &stack.redis_url)
                .env("LOCKBROKER_LOG_LEVEL", "error")
                .envs(mode.iter().map(|(name, value)| (name, value)))
                .stdout(Stdio::null());
            if let Some(logs) = logs {
                let path = logs.join(format!("broker-{}.log", stack.brokers.len()));
                let log = File::create(&path)
                    .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
                let errors = log
                    .try_clone()
                    .map_err(|e| format!("cannot share {}: {e}", path.display()))?;
                command
                    .env("LOCKBROKER_LOG_LEVEL", "info")
                    .stdout(log)
                    .stderr(errors);
            }
            let child = command
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", launch.broker_bin.display()))?;
            stack.brokers.push(child);
            stack.urls.push(format!("http://127.0.0.1:{port}"));
        }
        for url in &stack.urls {
            let client = BrokerClient::new(url, Duration::from_secs(2))?;
            let deadline = Instant::now() + Duration::from_secs(20);
            while !client.ready().await {
                if Instant::now() > deadline {
                    return Err(format!("the broker at {url} never became ready"));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// The store the brokers run on, as the history checker must read their
    /// answers: quorum mode over several nodes, with every restart so far.
    pub fn backend(&self) -> Backend {
        if self.is_sentinel() {
            Backend::Sentinel {
                failovers: Some(self.failovers.clone()),
            }
        } else if self.nodes.len() > 1 && !self.clustered {
            Backend::Quorum {
                drift: DRIFT,
                restarts: Some(self.restarts.clone()),
            }
        } else {
            Backend::Single
        }
    }

    /// Whether the brokers find their primary through Sentinels.
    pub fn is_sentinel(&self) -> bool {
        !self.sentinels.is_empty()
    }

    /// Sentinel mode: kills the primary, waits until every Sentinel names
    /// the replica they promoted, and starts the old primary again empty, to
    /// be made a replica of the new one; returns once a replica is in sync
    /// with the new primary, ready for the next failover.
    pub async fn fail_over(&mut self) -> Result<(), String> {
        let old = sentinel::primary_port(&self.sentinels).ok_or("no Sentinel names a primary")?;
        let at = self
            .nodes
            .iter()
            .position(|node| node.port == old)
            .ok_or("the primary is not one of the stack's nodes")?;
        self.failovers.push(now_us());
        self.nodes[at].stop();
        sentinel::wait_for_promotion(&self.sentinels, old).await?;
        self.nodes[at].spawn().await?;
        let ports: Vec<u16> = self.nodes.iter().map(|node| node.port).collect();
        sentinel::wait_until_replicas_in_sync(&ports, 1).await
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
        // Then the nodes, each as it is dropped.
    }
}
