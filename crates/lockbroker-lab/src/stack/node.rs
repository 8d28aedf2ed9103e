//! One `redis-server` of a [`super::Stack`]: started on a free port with
//! nothing kept on disk, stopped, paused and restarted empty.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{cluster, exited, free_port, redis_answers};

/// One `redis-server` of the stack.
pub(super) struct Node {
    child: Option<Child>,
    pub(super) port: u16,
    dir: PathBuf,
    /// Arguments beyond the port and persistence, e.g. `--replicaof`.
    extra_args: Vec<String>,
    /// The directory its log goes to, if any (see [`Launch::logs`]).
    logs: Option<PathBuf>,
}

impl Node {
    /// Starts a `redis-server` on a free port, keeping nothing on disk.
    pub(super) async fn start(logs: Option<&Path>) -> Result<Self, String> {
        Self::start_with(Vec::new(), logs).await
    }

    /// Like [`Node::start`], with more `redis-server` arguments. A port
    /// free a moment ago can be taken before the server binds it (a cluster
    /// node also binds its port plus 10000), so a server that exits at once
    /// is started again on another port.
    pub(super) async fn start_with(
        extra_args: Vec<String>,
        logs: Option<&Path>,
    ) -> Result<Self, String> {
        let cluster_node = extra_args.iter().any(|a| a == "--cluster-enabled");
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port()?;
            if cluster_node && !cluster::bus_port_free(port) {
                continue;
            }
            let dir =
                std::env::temp_dir().join(format!("lockbroker-lab-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let mut node = Self {
                child: None,
                port,
                dir,
                extra_args: extra_args.clone(),
                logs: logs.map(Path::to_path_buf),
            };
            // A node that did not start takes its directory with it.
            match node.spawn().await {
                Ok(()) => return Ok(node),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    pub(super) async fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra_args);
        if let Some(logs) = &self.logs {
            // Redis appends: a restart's log follows the one before.
            command
                .arg("--logfile")
                .arg(logs.join(format!("node-{}.log", self.port)));
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server (apt-get install redis-server): {e}")
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis_answers(self.port) {
            if exited(&mut self.child) {
                return Err(format!(
                    "redis-server exited at start on port {}",
                    self.port
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server did not answer on port {}", self.port));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    pub(super) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(super) fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

/// A paused server is woken to be killed, and its directory goes with it.
impl Drop for Node {
    fn drop(&mut self) {
        self.signal("-CONT");
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
