//! Redis Sentinel for tests: `redis-server --sentinel` child processes on
//! free loopback ports, watching a primary the test started, and a
//! replication group (a primary and its replicas) to fail over.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis::{free_port, Conn, RedisServer};

/// The name every test Sentinel monitors its primary under.
pub const SERVICE_NAME: &str = "lockbroker-test";

/// A Sentinel watching one primary. Killed on drop.
pub struct Sentinel {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Sentinel {
    /// A Sentinel that monitors the primary at `primary_port`, and agrees
    /// it is down with `quorum` Sentinels (itself included). It declares the
    /// primary down after 1 s without an answer, so failovers in tests take
    /// seconds, not the default half minute.
    pub fn start(primary_port: u16, quorum: usize) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("lockbroker-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create sentinel dir");
        // Sentinel rewrites its configuration file, so each has its own.
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {SERVICE_NAME} 127.0.0.1 {primary_port} {quorum}\n\
                 sentinel down-after-milliseconds {SERVICE_NAME} 1000\n\
                 sentinel failover-timeout {SERVICE_NAME} 5000\n\
                 sentinel parallel-syncs {SERVICE_NAME} 2\n",
                dir = dir.display()
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)");
        let sentinel = Self { port, dir, child };
        sentinel.wait_until(Duration::from_secs(10), |sentinel| {
            sentinel.primary_port() == Some(primary_port)
        });
        sentinel
    }

    /// The port the Sentinel listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, as `redis.sentinels` takes it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port of the primary this Sentinel names now, if it answers.
    pub fn primary_port(&self) -> Option<u16> {
        let mut conn = Conn::open(self.port).ok()?;
        let reply = conn.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE_NAME]);
        reply.as_array().get(1)?.as_text()?.parse().ok()
    }

    /// Waits up to `limit` for `done`; panics past it.
    pub fn wait_until(&self, limit: Duration, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "sentinel on {} did not get there within {limit:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A primary, its replicas and three Sentinels (quorum 2) watching them.
pub struct ReplicatedRedis {
    /// Every server, the primary first as started; after a failover any of
    /// them may be the primary.
    pub servers: Vec<RedisServer>,
    /// The Sentinels.
    pub sentinels: Vec<Sentinel>,
}

impl ReplicatedRedis {
    /// Starts a primary with `replicas` replicas in sync with it, and three
    /// Sentinels that know them all.
    pub fn start(replicas: usize) -> Self {
        let primary = RedisServer::start();
        // Redis waits 5 s before a first diskless sync, for more replicas.
        primary
            .conn()
            .cmd(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
        let mut servers = vec![primary];
        for _ in 0..replicas {
            let port = servers[0].port().to_string();
            servers.push(RedisServer::start_with(&[
                "--save",
                "",
                "--appendonly",
                "no",
                "--replicaof",
                "127.0.0.1",
                &port,
            ]));
        }
        let primary_port = servers[0].port();
        for replica in &servers[1..] {
            wait_for(Duration::from_secs(10), "replica in sync", || {
                info_field(&mut replica.conn(), "replication", "master_link_status")
                    .is_some_and(|status| status == "up")
            });
        }
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(primary_port, 2)).collect();
        // Every Sentinel must know the replicas (and the other Sentinels)
        // before a failover can pick one.
        for sentinel in &sentinels {
            sentinel.wait_until(Duration::from_secs(20), |sentinel| {
                let Ok(mut conn) = Conn::open(sentinel.port) else {
                    return false;
                };
                let master = conn.cmd(&["SENTINEL", "MASTER", SERVICE_NAME]);
                let field = |name: &str| -> usize {
                    let fields = master.as_array();
                    fields
                        .chunks(2)
                        .find(|pair| pair[0].as_text() == Some(name))
                        .and_then(|pair| pair[1].as_text()?.parse().ok())
                        .unwrap_or(0)
                };
                field("num-slaves") == replicas && field("num-other-sentinels") == 2
            });
        }
        Self { servers, sentinels }
    }

    /// The Sentinels' addresses, as `redis.sentinels` takes them.
    pub fn sentinel_addresses(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::address).collect()
    }

    /// The port of the primary the Sentinels name now.
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(Sentinel::primary_port)
    }

    /// The server the Sentinels name as primary now.
    pub fn primary(&mut self) -> &mut RedisServer {
        let port = self.primary_port().expect("the Sentinels name a primary");
        self.servers
            .iter_mut()
            .find(|server| server.port() == port)
            .expect("the primary is one of ours")
    }
}

/// One field of `INFO <section>`.
pub fn info_field(conn: &mut Conn, section: &str, field: &str) -> Option<String> {
    let info = conn.cmd(&["INFO", section]);
    let text = info.as_text()?.to_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(|value| value.trim().to_owned())
}

fn wait_for(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl ReplicatedRedis {
    /// SIGKILLs the primary; the port it had.
    pub fn kill_primary(&mut self) -> u16 {
        let old = self.primary_port().expect("a primary");
        self.primary().kill();
        old
    }

    /// After the primary at `old` was killed: waits until the Sentinels
    /// promoted a replica, then starts the killed server again (empty) and
    /// waits until the Sentinels made it a replica in sync, so the group is
    /// whole for the next failover.
    pub fn heal(&mut self, old: u16) {
        wait_for(Duration::from_secs(30), "a replica promoted", || {
            self.primary_port().is_some_and(|port| port != old)
        });
        let killed = self
            .servers
            .iter_mut()
            .find(|server| server.port() == old)
            .expect("ours");
        killed.restart();
        let replicas = self.servers.len() - 1;
        wait_for(Duration::from_secs(60), "the group whole again", || {
            self.servers
                .iter()
                .filter(|server| {
                    info_field(&mut server.conn(), "replication", "master_link_status")
                        .is_some_and(|status| status == "up")
                })
                .count()
                == replicas
        });
    }
}
