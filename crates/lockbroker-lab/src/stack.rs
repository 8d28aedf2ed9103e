//! [`Stack`]: a throwaway `redis-server` and brokers on free loopback ports,
//! for a run that was not pointed at a broker. Everything stops on drop.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::BrokerClient;

/// A `redis-server` without persistence and `brokers` broker processes on it.
pub struct Stack {
    redis: Child,
    brokers: Vec<Child>,
    dir: PathBuf,
    /// The brokers' base URLs, `http://127.0.0.1:<port>`.
    pub urls: Vec<String>,
    /// The Redis URL the brokers use.
    pub redis_url: String,
}

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
    /// Starts `redis-server` and `brokers` brokers (from `broker_bin`) and
    /// waits until every broker is ready.
    pub async fn start(brokers: usize, broker_bin: &PathBuf) -> Result<Self, String> {
        let port = free_port()?;
        let dir =
            std::env::temp_dir().join(format!("lockbroker-lab-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let redis = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server (apt-get install redis-server): {e}")
            })?;
        let mut stack = Self {
            redis,
            brokers: Vec::new(),
            dir,
            urls: Vec::new(),
            redis_url: format!("redis://127.0.0.1:{port}/0"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis_answers(port) {
            if Instant::now() > deadline {
                return Err(format!("redis-server did not answer on port {port}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for _ in 0..brokers {
            let port = free_port()?;
            let child = Command::new(broker_bin)
                .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
                .env("LOCKBROKER_REDIS_URL", &stack.redis_url)
                .env("LOCKBROKER_LOG_LEVEL", "error")
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
}

impl Drop for Stack {
    fn drop(&mut self) {
        for child in self
            .brokers
            .iter_mut()
            .chain(std::iter::once(&mut self.redis))
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
