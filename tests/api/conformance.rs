//! The Redis store passes the store conformance suite, against a real
//! `redis-server` of its own, reached directly and through a Sentinel, and
//! against a Redis Cluster of three primaries.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockbroker_core::conformance::Backend;
use lockbroker_core::{LockName, LockStore};
use lockbroker_redis::{
    ClusterSettings, KeyLayout, RedisLockStore, RedisSettings, SentinelSettings,
};
use lockbroker_tests::cluster::RedisCluster;
use lockbroker_tests::sentinel::{start_sentinel, Sentinel, SERVICE_NAME};
use lockbroker_tests::RedisServer;

/// Brokers on one `redis-server`, each a store with its own connections,
/// finding it at its URL or through a Sentinel; or brokers on a cluster.
struct Redis {
    server: RedisServer,
    sentinel: Option<Sentinel>,
    cluster: Option<RedisCluster>,
    prefix: String,
    brokers: AtomicU32,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Redis {
    fn start() -> Self {
        Self {
            server: RedisServer::start(),
            sentinel: None,
            cluster: None,
            prefix: format!("conf{}", NEXT.fetch_add(1, Ordering::Relaxed)),
            brokers: AtomicU32::new(0),
        }
    }

    fn behind_sentinel() -> Self {
        let redis = Self::start();
        Self {
            sentinel: Some(start_sentinel(redis.server.port(), 1)),
            ..redis
        }
    }

    fn cluster() -> Self {
        let cluster = RedisCluster::start(3, 0);
        Self {
            server: RedisServer::start_cluster_node(),
            cluster: Some(cluster),
            ..Self::start()
        }
    }
}

impl Backend for Redis {
    type Store = RedisLockStore;

    async fn broker(&self) -> RedisLockStore {
        let settings = RedisSettings {
            url: self.server.url(),
            key_prefix: self.prefix.clone(),
            command_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_millis(500),
            sentinel: self.sentinel.as_ref().map(|sentinel| SentinelSettings {
                hosts: vec![("127.0.0.1".to_owned(), sentinel.port())],
                service_name: SERVICE_NAME.to_owned(),
                auth: Default::default(),
            }),
            cluster: self.cluster.as_ref().map(|cluster| ClusterSettings {
                seeds: vec![("127.0.0.1".to_owned(), cluster.ports()[0])],
            }),
            ..RedisSettings::default()
        };
        let store = RedisLockStore::connect(settings).expect("store");
        if self.cluster.is_some() {
            // Subscribed lock by lock, as waiters watch them.
            wait_until_ready(&store).await;
            return store;
        }
        let brokers = i64::from(self.brokers.fetch_add(1, Ordering::Relaxed) + 1);
        // Ready, and subscribed to the wake channel, before the case begins.
        let channel = format!("{}:wake", self.prefix);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let subscribed = self.server.conn().cmd(&["PUBSUB", "NUMSUB", &channel]);
            let count = subscribed.as_array().get(1).and_then(|c| c.as_int());
            if store.ping().await.is_ok() && count >= Some(brokers) {
                return store;
            }
            assert!(Instant::now() < deadline, "the store never became ready");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn put_last_fence(&self, name: &LockName, fence: u64) {
        let key = KeyLayout::new(self.prefix.clone()).fence(name);
        // A cluster connection follows MOVED to the key's shard.
        let mut conn = match &self.cluster {
            Some(cluster) => {
                lockbroker_tests::redis::Conn::open(cluster.primaries()[0]).expect("connect")
            }
            None => self.server.conn(),
        };
        conn.cmd(&["SET", &key, &fence.to_string()]);
    }

    async fn lose_data(&self) {
        match &self.cluster {
            Some(cluster) => {
                for port in cluster.primaries() {
                    lockbroker_tests::redis::Conn::open(port)
                        .expect("connect")
                        .cmd(&["FLUSHALL"]);
                }
            }
            None => {
                self.server.conn().cmd(&["FLUSHALL"]);
            }
        }
    }
}

async fn wait_until_ready(store: &RedisLockStore) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.ping().await.is_err() {
        assert!(Instant::now() < deadline, "the store never became ready");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

lockbroker_core::store_conformance!(Redis::start());

mod sentinel {
    use super::Redis;

    lockbroker_core::store_conformance!(Redis::behind_sentinel());
}

mod cluster {
    use super::Redis;

    lockbroker_core::store_conformance!(Redis::cluster());
}
