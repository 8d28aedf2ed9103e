//! Which backend mode test brokers run in. `LOCKBROKER_TEST_MODE=quorum`
//! runs every broker the harness starts in quorum mode, over the test's own
//! Redis and two more started here; `LOCKBROKER_TEST_MODE=sentinel` finds the
//! test's Redis through a Sentinel started here; `LOCKBROKER_TEST_MODE=cluster`
//! makes the test's Redis a cluster node and joins it with two more into a
//! cluster of three primaries. So one suite tests every mode.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use lockbroker_server::config::{RedisConfig, RedisMode};

use crate::redis::RedisServer;
use crate::sentinel::{start_sentinel, Sentinel, SERVICE_NAME};

/// What a broker in a test mode needs running besides the test's Redis; it
/// stays up while any broker of the test uses it.
#[derive(Clone)]
pub enum Peers {
    /// The two nodes that make a quorum of three with the test's Redis.
    Quorum(Arc<[RedisServer; 2]>),
    /// The Sentinel that names the test's Redis as its primary.
    Sentinel(Arc<Sentinel>),
    /// The two primaries that make a cluster with the test's Redis.
    Cluster(Arc<[RedisServer; 2]>),
}

/// What was started for each test Redis (by URL), while a broker uses it:
/// every broker a test starts on one Redis shares it, as brokers sharing a
/// Redis share its locks in single mode.
type Registry<T> = Mutex<Vec<(String, Weak<T>)>>;

static QUORUMS: Registry<[RedisServer; 2]> = Mutex::new(Vec::new());
static SENTINELS: Registry<Sentinel> = Mutex::new(Vec::new());
static CLUSTERS: Registry<[RedisServer; 2]> = Mutex::new(Vec::new());

/// Whether `LOCKBROKER_TEST_MODE` is `cluster`: test Redis servers start as
/// cluster nodes.
pub fn cluster_mode() -> bool {
    std::env::var("LOCKBROKER_TEST_MODE").is_ok_and(|mode| mode == "cluster")
}

/// Whether every test broker keeps all its locks on one server: single mode
/// (no `LOCKBROKER_TEST_MODE`) and Sentinel mode.
pub fn one_server_mode() -> bool {
    std::env::var("LOCKBROKER_TEST_MODE").map_or(true, |mode| mode == "sentinel")
}

/// The `T` running for `url`, or a new one from `start`.
fn shared<T>(registry: &Registry<T>, url: &str, start: impl FnOnce() -> T) -> Arc<T> {
    let mut all = registry.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|(_, started)| started.strong_count() > 0);
    if let Some(running) = all
        .iter()
        .filter(|(at, _)| at == url)
        .find_map(|(_, started)| started.upgrade())
    {
        return running;
    }
    let started = Arc::new(start());
    all.push((url.to_owned(), Arc::downgrade(&started)));
    started
}

/// Puts a single-mode broker's Redis settings into the mode
/// `LOCKBROKER_TEST_MODE` names, starting what that mode needs; `None` when
/// the broker stays as the test configured it.
pub fn apply_test_mode(redis: &mut RedisConfig) -> Option<Peers> {
    if redis.mode != RedisMode::Single {
        return None;
    }
    match std::env::var("LOCKBROKER_TEST_MODE").ok()?.as_str() {
        "quorum" => {
            let peers = quorum_peers(&redis.url);
            redis.nodes = std::iter::once(redis.url.clone())
                .chain(peers.iter().map(RedisServer::url))
                .collect();
            redis.mode = RedisMode::Quorum;
            redis.node_timeout_ms = redis.command_timeout_ms;
            Some(Peers::Quorum(peers))
        }
        "sentinel" => {
            let sentinel = sentinel_of(&redis.url);
            redis.sentinels = vec![sentinel.address()];
            redis.service_name = SERVICE_NAME.to_owned();
            redis.mode = RedisMode::Sentinel;
            Some(Peers::Sentinel(sentinel))
        }
        "cluster" => {
            let peers = cluster_peers(&redis.url);
            redis.nodes = std::iter::once(redis.url.clone())
                .chain(peers.iter().map(RedisServer::url))
                .collect();
            redis.mode = RedisMode::Cluster;
            Some(Peers::Cluster(peers))
        }
        _ => None,
    }
}

fn quorum_peers(url: &str) -> Arc<[RedisServer; 2]> {
    shared(&QUORUMS, url, || {
        [RedisServer::start(), RedisServer::start()]
    })
}

fn sentinel_of(url: &str) -> Arc<Sentinel> {
    // The test's URL may point at a proxy in front of its Redis: the
    // Sentinel watches whatever the URL names, so the broker's path to the
    // primary goes through the same proxy.
    let port = port_of(url);
    shared(&SENTINELS, url, || start_sentinel(port, 1))
}

fn port_of(url: &str) -> u16 {
    url.rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next()?.parse().ok())
        .expect("a test Redis URL has a port")
}

fn cluster_peers(url: &str) -> Arc<[RedisServer; 2]> {
    shared(&CLUSTERS, url, || {
        let port = port_of(url);
        let peers = [
            RedisServer::start_cluster_node(),
            RedisServer::start_cluster_node(),
        ];
        lockbroker_lab::stack::cluster::create(&[port, peers[0].port(), peers[1].port()], 0)
            .expect("a cluster of the test's Redis and two more nodes");
        peers
    })
}
