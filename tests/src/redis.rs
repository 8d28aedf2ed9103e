//! A `redis-server` child process per test, and a minimal RESP client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockbroker_lab::stack;

/// A `redis-server` the test started on a free loopback port. Killed on drop.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    extra_args: Vec<String>,
}

impl RedisServer {
    /// Starts a server that keeps nothing on disk. With
    /// `LOCKBROKER_TEST_MODE=cluster` it is a cluster node, which the first
    /// broker on it joins into a cluster ([`crate::modes`]).
    pub fn start() -> Self {
        if crate::modes::cluster_mode() {
            return Self::start_cluster_node();
        }
        Self::start_with(&["--save", "", "--appendonly", "no"])
    }

    /// Starts an empty Redis Cluster node that keeps nothing on disk.
    pub fn start_cluster_node() -> Self {
        let mut args = vec!["--save", "", "--appendonly", "no"];
        args.extend(stack::cluster::NODE_ARGS);
        Self::start_with(&args)
    }

    /// Starts a server with extra `redis-server` arguments (e.g. AOF settings).
    ///
    /// A port free a moment ago can be taken before the server binds it
    /// (tests run side by side, and a cluster node also binds its port plus
    /// 10000 for the cluster bus), so a server that exits at once is started
    /// again on another port.
    pub fn start_with(args: &[&str]) -> Self {
        let cluster_node = args.contains(&"--cluster-enabled");
        for _ in 0..5 {
            let port = if cluster_node {
                free_cluster_port()
            } else {
                free_port()
            };
            let dir = std::env::temp_dir()
                .join(format!("lockbroker-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create redis dir");
            let mut server = Self {
                port,
                dir,
                child: None,
                extra_args: args.iter().map(|a| (*a).to_owned()).collect(),
            };
            if server.try_spawn() {
                return server;
            }
        }
        panic!("redis-server did not start on any of five free ports");
    }

    fn spawn(&mut self) {
        assert!(
            self.try_spawn(),
            "redis-server did not start on {}",
            self.port
        );
    }

    /// Starts the server on its port and waits until it answers; `false`
    /// if it exited first (its port was taken).
    fn try_spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if stack::exited(&mut self.child) {
                return false;
            }
            if stack::redis_answers(self.port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A fresh connection for inspecting or changing data directly.
    pub fn conn(&self) -> Conn {
        Conn::open(self.port).expect("connect to test redis")
    }

    /// Kills the server with SIGKILL: everything not persisted is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port after [`RedisServer::kill`].
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a paused server with SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port that was free a moment ago, as was the cluster bus port 10000
/// above it.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if stack::cluster::bus_port_free(port) {
            return port;
        }
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("find a free port")
}

/// One RESP reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    /// `+OK` style text.
    Simple(String),
    /// `-ERR` style error.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` bulk text; `None` for nil.
    Bulk(Option<String>),
    /// `*n` array; `None` for a nil array.
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// The text of a simple or bulk reply.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Simple(s) | Self::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Self::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The items of an array reply.
    pub fn as_array(&self) -> &[Resp] {
        match self {
            Self::Array(Some(items)) => items,
            _ => &[],
        }
    }
}

/// A blocking RESP2 connection, for test assertions on what is in Redis.
/// On a cluster node it follows `MOVED` to the node serving a key, and
/// [`Conn::keys`] asks every primary.
pub struct Conn {
    port: u16,
    reader: BufReader<TcpStream>,
}

impl Conn {
    /// Connects to a loopback port.
    pub fn open(port: u16) -> std::io::Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Self {
            port,
            reader: BufReader::new(stream),
        })
    }

    /// Sends one command and reads its reply.
    pub fn cmd(&mut self, args: &[&str]) -> Resp {
        let mut out = format!("*{}\r\n", args.len());
        for arg in args {
            out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        self.reader
            .get_mut()
            .write_all(out.as_bytes())
            .expect("write to redis");
        match self.read() {
            Resp::Error(moved) if moved.starts_with("MOVED ") => {
                let port = moved
                    .rsplit(':')
                    .next()
                    .and_then(|port| port.parse().ok())
                    .expect("MOVED names host:port");
                Conn::open(port).expect("connect to the node").cmd(args)
            }
            reply => reply,
        }
    }

    /// All keys matching `pattern` (tests only: KEYS is fine on a tiny dataset).
    pub fn keys(&mut self, pattern: &str) -> Vec<String> {
        let mut primaries = stack::cluster::primaries(self.port);
        if primaries.is_empty() {
            primaries.push(self.port);
        }
        let mut keys: Vec<String> = primaries
            .into_iter()
            .flat_map(|port| {
                Conn::open(port)
                    .expect("connect to the node")
                    .cmd(&["KEYS", pattern])
                    .as_array()
                    .iter()
                    .filter_map(|r| r.as_text().map(str::to_owned))
                    .collect::<Vec<_>>()
            })
            .collect();
        keys.sort();
        keys
    }

    fn read(&mut self) -> Resp {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read from redis");
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" => Resp::Simple(rest.to_owned()),
            "-" => Resp::Error(rest.to_owned()),
            ":" => Resp::Int(rest.parse().expect("integer reply")),
            "$" => {
                let len: i64 = rest.parse().expect("bulk length");
                if len < 0 {
                    return Resp::Bulk(None);
                }
                let mut buf = vec![0; usize::try_from(len).expect("length") + 2];
                self.reader.read_exact(&mut buf).expect("bulk body");
                buf.truncate(buf.len() - 2);
                Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
            "*" => {
                let len: i64 = rest.parse().expect("array length");
                if len < 0 {
                    return Resp::Array(None);
                }
                Resp::Array(Some((0..len).map(|_| self.read()).collect()))
            }
            other => panic!("unexpected RESP type {other:?}"),
        }
    }
}
