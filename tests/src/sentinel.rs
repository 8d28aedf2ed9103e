//! Redis Sentinel for tests: `redis-server --sentinel` child processes on
//! free loopback ports, watching a primary the test started, and a
//! replication group (a primary and its replicas) to fail over.

use std::time::{Duration, Instant};

use crate::redis::{Conn, RedisServer};

pub use lockbroker_lab::stack::sentinel::{Sentinel, SERVICE_NAME};

/// A Sentinel that monitors the primary at `primary_port` and agrees it is
/// down with `quorum` Sentinels (itself included), once it answers. It
/// declares the primary down after 1 s without an answer, so failovers in
/// tests take seconds, not the default half minute.
pub fn start_sentinel(primary_port: u16, quorum: usize) -> Sentinel {
    let sentinel = Sentinel::start(primary_port, quorum, None).expect("start a Sentinel");
    wait_for(Duration::from_secs(10), "the Sentinel to answer", || {
        sentinel.primary_port() == Some(primary_port)
    });
    sentinel
}

/// Starts a replica of `primary` and waits until the primary counts it in
/// `WAIT` (the replication link shows up a moment before that).
pub fn start_replica(primary: &RedisServer) -> RedisServer {
    // Redis waits 5 s before a first diskless sync, for more replicas.
    primary
        .conn()
        .cmd(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&[
        "--save",
        "",
        "--appendonly",
        "no",
        "--replicaof",
        "127.0.0.1",
        &port,
    ]);
    let mut conn = primary.conn();
    wait_for(
        Duration::from_secs(10),
        "the replica to acknowledge",
        || {
            conn.cmd(&["SET", "replica-probe", "1"]);
            conn.cmd(&["WAIT", "1", "100"]).as_int() == Some(1)
        },
    );
    conn.cmd(&["DEL", "replica-probe"]);
    replica
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
        let mut servers = vec![RedisServer::start()];
        for _ in 0..replicas {
            let replica = start_replica(&servers[0]);
            servers.push(replica);
        }
        let primary_port = servers[0].port();
        let sentinels: Vec<Sentinel> = (0..3).map(|_| start_sentinel(primary_port, 2)).collect();
        // Every Sentinel must know the replicas (and the other Sentinels)
        // before a failover can pick one.
        wait_for(
            Duration::from_secs(30),
            "the Sentinels to know every replica",
            || lockbroker_lab::stack::sentinel::watching(&sentinels, replicas),
        );
        Self { servers, sentinels }
    }

    /// The Sentinels' addresses, as `redis.sentinels` takes them.
    pub fn sentinel_addresses(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::address).collect()
    }

    /// The port of the primary the Sentinels name now.
    pub fn primary_port(&self) -> Option<u16> {
        lockbroker_lab::stack::sentinel::primary_port(&self.sentinels)
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

fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
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
