//! Redis Cluster for tests: cluster nodes on free loopback ports, joined
//! with `redis-cli --cluster create`, and the moves a test makes on them.

use lockbroker_lab::stack::cluster;

use crate::redis::RedisServer;

/// A Redis Cluster the test started: every node a [`RedisServer`] the test
/// may kill, the first `primaries` started as primaries.
pub struct RedisCluster {
    /// Every node, primaries first as created; after a failover a replica
    /// may be a primary.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `primaries` primaries with `replicas` replicas each, every slot
    /// served once this returns.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        let nodes: Vec<RedisServer> = (0..primaries * (replicas + 1))
            .map(|_| RedisServer::start_cluster_node())
            .collect();
        let cluster = Self { nodes };
        cluster::create(&cluster.ports(), replicas).expect("create the cluster");
        cluster
    }

    /// Every node's port.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// Every node's URL, as `LOCKBROKER_REDIS_NODES` takes seed nodes.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The ports of the primaries serving slots now.
    pub fn primaries(&self) -> Vec<u16> {
        self.answering_port()
            .map(cluster::primaries)
            .unwrap_or_default()
    }

    /// The port of the primary serving `key` now.
    pub fn owner_of(&self, key: &str) -> u16 {
        self.answering_port()
            .and_then(|port| cluster::owner_of(port, key))
            .expect("a node names the key's primary")
    }

    /// The port of a replica of the primary on `primary`.
    pub fn replica_of(&self, primary: u16) -> u16 {
        let replicates = format!("master_port:{primary}\r\n");
        self.nodes
            .iter()
            .map(RedisServer::port)
            .find(|port| {
                crate::redis::Conn::open(*port).is_ok_and(|mut conn| {
                    conn.cmd(&["INFO", "replication"])
                        .as_text()
                        .is_some_and(|info| info.contains(&replicates))
                })
            })
            .expect("the primary has a replica")
    }

    /// The node on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|node| node.port() == port)
            .expect("a node of this cluster")
    }

    fn answering_port(&self) -> Option<u16> {
        self.nodes
            .iter()
            .map(RedisServer::port)
            .find(|port| crate::redis::Conn::open(*port).is_ok())
    }
}
