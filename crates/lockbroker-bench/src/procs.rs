//! The processes a benchmark runs against: a `redis-server` and brokers, each
//! on a free loopback port, killed when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed on drop.
pub struct Proc {
    child: Child,
    /// The loopback port it serves.
    pub port: u16,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Starts a `redis-server` that keeps nothing on disk.
pub fn redis() -> Result<Proc, String> {
    let port = free_port()?;
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    let proc = Proc { child, port };
    wait_for_port(port)?;
    Ok(proc)
}

/// Starts the release build of `lockbroker` on `redis`.
pub fn broker(redis: &Proc) -> Result<Proc, String> {
    let port = free_port()?;
    let binary = sibling_binary("lockbroker")?;
    let child = Command::new(&binary)
        .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
        .env(
            "LOCKBROKER_REDIS_URL",
            format!("redis://127.0.0.1:{}/0", redis.port),
        )
        .env("LOCKBROKER_LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let proc = Proc { child, port };
    wait_for_port(port)?;
    Ok(proc)
}

/// A binary built next to this one (`target/release/...`).
fn sibling_binary(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = exe.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: cargo build --release -p lockbroker-server",
            path.display()
        ))
    }
}

fn wait_for_port(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("nothing listens on {port} after 10 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}
