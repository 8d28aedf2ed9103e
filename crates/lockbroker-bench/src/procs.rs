//! The processes a benchmark runs against: a `redis-server`, brokers and
//! (when installed) an etcd, each on a free loopback port, killed when
//! dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed on drop.
pub struct Proc {
    child: Child,
    /// The loopback port it serves.
    pub port: u16,
    /// A directory of its own, removed after it stops.
    scratch: Option<PathBuf>,
}

impl Proc {
    /// The process id, for `/proc` readings.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
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
    redis_with(&[])
}

/// Like [`redis`], with more `redis-server` arguments, run in a scratch
/// directory of its own (a cluster node writes its node table there).
pub fn redis_with(args: &[&str]) -> Result<Proc, String> {
    let port = free_port()?;
    let dir = std::env::temp_dir().join(format!("lockbroker-bench-redis-{port}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
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
        .arg("--dir")
        .arg(&dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    let proc = Proc {
        child,
        port,
        scratch: Some(dir),
    };
    wait_for_port(port)?;
    Ok(proc)
}

/// Starts the release build of `lockbroker` on `redis`.
pub fn broker(redis: &Proc) -> Result<Proc, String> {
    broker_with(redis, &[])
}

/// Like [`broker`], with extra `LOCKBROKER_*` settings in `env`.
pub fn broker_with(redis: &Proc, env: &[(&str, &str)]) -> Result<Proc, String> {
    let port = free_port()?;
    let binary = sibling_binary("lockbroker")?;
    let child = Command::new(&binary)
        .envs(env.iter().copied())
        .env("LOCKBROKER_LISTEN", format!("127.0.0.1:{port}"))
        .env(
            "LOCKBROKER_REDIS_URL",
            format!("redis://127.0.0.1:{}/0", redis.port),
        )
        .env("LOCKBROKER_LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let proc = Proc {
        child,
        port,
        scratch: None,
    };
    wait_for_port(port)?;
    Ok(proc)
}

/// Starts the thin broker ([`crate::thin`]) on `redis`: this binary again,
/// as a process of its own.
pub fn thin(redis: &Proc) -> Result<Proc, String> {
    let port = free_port()?;
    let binary = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = Command::new(&binary)
        .arg(crate::thin::SUBCOMMAND)
        .args(["--port", &port.to_string()])
        .args(["--redis", &format!("redis://127.0.0.1:{}/0", redis.port)])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let proc = Proc {
        child,
        port,
        scratch: None,
    };
    wait_for_port(port)?;
    Ok(proc)
}

/// This process's open-files limit before and after raising the soft limit
/// to the hard one, and the hard limit. The processes it starts later
/// inherit it, so the memory case's waiters fit on both sides.
pub struct OpenFiles {
    /// The soft limit found.
    pub before: u64,
    /// The soft limit now.
    pub now: u64,
    /// The hard limit, the most `now` could reach.
    pub hard: u64,
}

/// Raises the soft limit on open files as far as the hard limit allows.
pub fn raise_open_files() -> Result<OpenFiles, String> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (before, hard) =
        getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit: {e}"))?;
    if before < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
            .map_err(|e| format!("setrlimit to {hard}: {e}"))?;
    }
    let (now, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit: {e}"))?;
    Ok(OpenFiles { before, now, hard })
}

/// Where etcd keeps its data: tmpfs when there is one, so that its write-ahead
/// log's fsyncs cost what they would on a fast disk at most (Redis here keeps
/// nothing on disk at all).
fn etcd_data_base() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// Why etcd is left out when it is.
pub const ETCD_MISSING: &str = "no `etcd` binary on PATH (Debian: apt-get install etcd-server)";

/// Starts a one-member etcd on free loopback ports with a fresh data
/// directory; `Ok(None)` when no `etcd` is on `PATH` ([`ETCD_MISSING`]).
pub fn etcd() -> Result<Option<Proc>, String> {
    let Some(binary) = on_path("etcd") else {
        return Ok(None);
    };
    let (port, peer) = (free_port()?, free_port()?);
    let dir = etcd_data_base().join(format!(
        "lockbroker-bench-etcd-{}-{port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let client_url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new(&binary)
        .args(["--name", "bench", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("bench={peer_url}")])
        .args(["--logger", "zap", "--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let proc = Proc {
        child,
        port,
        scratch: Some(dir),
    };
    wait_for_port(port)?;
    Ok(Some(proc))
}

/// `etcd --version`'s first line, for the report.
pub fn etcd_version() -> String {
    Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "etcd (version unknown)".to_owned())
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// The commit checked out where this runs (`-dirty` with uncommitted
/// changes to tracked files), for the `--json` document; `None` outside git.
pub fn commit() -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "HEAD"])?;
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|changes| !changes.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
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

/// CPU seconds (user + system) `pid` has used so far; 0 when unreadable.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is the first, utime the 12th, stime the 13th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Linux reports in USER_HZ, which is 100 on every supported architecture.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The soft limit on open files of `pid` ("self" for this process), from
/// `/proc/<pid>/limits`; `None` when unreadable or unlimited.
pub fn open_files_limit(pid: &str) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Resident memory of `pid`: `(VmRSS, VmHWM)` in MiB, from `/proc/<pid>/status`.
pub fn memory_mib(pid: u32) -> Result<(f64, f64), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .map(|kib| kib / 1024.0)
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}
