//! The `[redis]` settings (`LOCKBROKER_REDIS_*`): where locks live, in which
//! backend mode, and how the broker reaches it.

use std::path::PathBuf;

use lockbroker_redis::quorum::Drift;
use lockbroker_redis::{RedisSettings, REPLICA_ACK_POOL_SIZE};
use serde::{Deserialize, Serialize};

use super::schema::{as_ms, empty_is_none};

/// How to reach Redis (`LOCKBROKER_REDIS_*`). `Debug` leaves out the
/// password and the URL, which may carry one.
#[derive(Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port/db` (`LOCKBROKER_REDIS_URL`).
    pub url: String,
    /// Connections in the pool (per node in quorum mode); `0`, the default,
    /// for the broker's choice ([`RedisConfig::pool_size`]).
    pub pool_size: usize,
    /// Longest wait for one Redis answer before answering `503`.
    pub command_timeout_ms: u64,
    /// Redis commands in flight at once (per node in quorum mode); more are
    /// refused with `503 overloaded` and never sent.
    pub max_commands_in_flight: usize,
    /// Longest wait to open a connection.
    pub connect_timeout_ms: u64,
    /// Prefix of every key the broker writes.
    pub key_prefix: String,
    /// How long a lock's last fence is kept after its last grant.
    pub fence_idle_ms: u64,
    /// How long a released lease is remembered for retried releases.
    pub release_memo_ms: u64,
    /// Redis ACL user; replaces one in the URL.
    #[serde(with = "empty_is_none")]
    pub username: Option<String>,
    /// Redis password; replaces one in the URL. Best set through
    /// `LOCKBROKER_REDIS_PASSWORD_FILE`.
    #[serde(with = "empty_is_none")]
    pub password: Option<String>,
    /// PEM file of the CA certificates that sign the Redis server's
    /// certificate; setting it turns TLS on. `rediss://` URLs without it
    /// trust the system's roots.
    #[serde(with = "empty_is_none")]
    pub tls_ca_path: Option<PathBuf>,
    /// Where locks live: `single` (the Redis at `url`), `sentinel` (the
    /// primary that `sentinels` name for `service_name`), `quorum` (a
    /// majority of the independent Redis primaries in `nodes`) or `cluster`
    /// (the Redis Cluster that the seed nodes in `nodes` belong to).
    pub mode: RedisMode,
    /// Sentinel mode: the Sentinels, `host:port` each
    /// (`LOCKBROKER_REDIS_SENTINELS`, comma-separated).
    pub sentinels: Vec<String>,
    /// Sentinel mode: the name the Sentinels monitor the primary under.
    pub service_name: String,
    /// Sentinel mode: the Sentinels' ACL user, when they require one.
    #[serde(with = "empty_is_none")]
    pub sentinel_username: Option<String>,
    /// Sentinel mode: the Sentinels' password (`..._SENTINEL_PASSWORD_FILE`).
    #[serde(with = "empty_is_none")]
    pub sentinel_password: Option<String>,
    /// Quorum mode: the nodes, `redis://host:port/db` each; an odd number,
    /// at least 3. Cluster mode: seed nodes, `redis://host:port` each, the
    /// first of which also gives the credentials and TLS
    /// (`LOCKBROKER_REDIS_NODES`, comma-separated).
    pub nodes: Vec<String>,
    /// Quorum mode: each node's command timeout, well below any TTL.
    pub node_timeout_ms: u64,
    /// Quorum mode: clock drift allowance, a share of the TTL.
    pub drift_factor: f64,
    /// Quorum mode: clock drift allowance, a constant.
    pub drift_ms: u64,
    /// Single, sentinel and cluster mode: replicas that must acknowledge every
    /// change to a lease (Redis `WAIT`); 0 waits for none.
    pub min_replicas_acked: u32,
    /// How long to wait for those acknowledgements; below the command timeout.
    pub replica_ack_timeout_ms: u64,
}

/// Where the broker keeps its locks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisMode {
    /// One Redis at `redis.url`.
    #[default]
    Single,
    /// The primary that the Sentinels in `redis.sentinels` name, followed
    /// through failovers.
    Sentinel,
    /// A majority of the independent Redis primaries in `redis.nodes`.
    Quorum,
    /// A Redis Cluster found through the seed nodes in `redis.nodes`.
    Cluster,
}

impl RedisConfig {
    /// The connections of the pool: as set, else one (every step batched
    /// with the others into one write and one read, on both sides), or
    /// [`REPLICA_ACK_POOL_SIZE`] when every step waits for replicas (fred
    /// sends nothing else on a connection while its `WAIT` is outstanding).
    pub fn pool_size(&self) -> usize {
        match self.pool_size {
            0 if self.min_replicas_acked > 0 => REPLICA_ACK_POOL_SIZE,
            0 => 1,
            size => size,
        }
    }
}

impl RedisMode {
    /// The mode as `redis.mode` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::Sentinel => "sentinel",
            Self::Quorum => "quorum",
            Self::Cluster => "cluster",
        }
    }
}

/// The Redis crate's defaults, so the two never disagree.
impl Default for RedisConfig {
    fn default() -> Self {
        let redis = RedisSettings::default();
        Self {
            url: redis.url,
            pool_size: 0,
            command_timeout_ms: as_ms(redis.command_timeout),
            max_commands_in_flight: redis.max_commands_in_flight,
            connect_timeout_ms: as_ms(redis.connect_timeout),
            key_prefix: redis.key_prefix,
            fence_idle_ms: as_ms(redis.fence_idle),
            release_memo_ms: as_ms(redis.release_memo),
            username: None,
            password: None,
            tls_ca_path: None,
            mode: RedisMode::Single,
            sentinels: Vec::new(),
            service_name: "mymaster".to_owned(),
            sentinel_username: None,
            sentinel_password: None,
            nodes: Vec::new(),
            node_timeout_ms: 50,
            drift_factor: Drift::default().factor,
            drift_ms: Drift::default().ms,
            min_replicas_acked: 0,
            replica_ack_timeout_ms: 100,
        }
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &"<redacted>")
            .field("pool_size", &self.pool_size)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("max_commands_in_flight", &self.max_commands_in_flight)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("key_prefix", &self.key_prefix)
            .field("fence_idle_ms", &self.fence_idle_ms)
            .field("release_memo_ms", &self.release_memo_ms)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls_ca_path", &self.tls_ca_path)
            .field("mode", &self.mode)
            .field("sentinels", &self.sentinels)
            .field("service_name", &self.service_name)
            .field("sentinel_username", &self.sentinel_username)
            .field("sentinel_password", &self.sentinel_password.is_some())
            .field("nodes", &self.nodes.len())
            .field("node_timeout_ms", &self.node_timeout_ms)
            .field("drift_factor", &self.drift_factor)
            .field("drift_ms", &self.drift_ms)
            .field("min_replicas_acked", &self.min_replicas_acked)
            .field("replica_ack_timeout_ms", &self.replica_ack_timeout_ms)
            .finish()
    }
}
