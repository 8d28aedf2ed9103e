//! How the store reaches Redis: settings, credentials, TLS, the client pool and
//! the subscriber, and what a failed command means for the caller.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Pool, SubscriberClient};
use fred::error::{Error as RedisError, ErrorKind};
use fred::interfaces::ClientLike;
use fred::rustls::crypto::ring;
use fred::rustls::pki_types::pem::PemObject;
use fred::rustls::pki_types::CertificateDer;
use fred::rustls::{ClientConfig, RootCertStore};
use fred::types::config::{
    ClusterDiscoveryPolicy, Config, ReconnectPolicy, Server, ServerConfig, TlsConnector,
    UnresponsiveConfig,
};
use fred::types::Builder;
use lockbroker_core::StoreError;

/// The pool size when every step waits for replicas and none is given: a
/// connection is held for each step's replication round trip.
pub const REPLICA_ACK_POOL_SIZE: usize = 4;

/// How the store reaches Redis and lays out its keys.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port/db`; `rediss://` for TLS.
    pub url: String,
    /// Connections in the pool; each pipelines many commands. One serves
    /// best (every step batched with the others in one write and one
    /// read, on both sides) unless steps wait for replicas: fred sends
    /// nothing else on a connection while its `WAIT` is outstanding
    /// ([`REPLICA_ACK_POOL_SIZE`]).
    pub pool_size: usize,
    /// Longest wait for any one command's answer before failing closed.
    pub command_timeout: Duration,
    /// Commands this store has in flight at once, queued in the client or
    /// awaiting Redis's answer; more are refused at once as
    /// [`StoreError::Overloaded`] and never sent.
    pub max_commands_in_flight: usize,
    /// Longest wait for a new connection (including its handshake).
    pub connect_timeout: Duration,
    /// Prefix of every key the store writes.
    pub key_prefix: String,
    /// How long a lock's last fence is remembered after its last grant.
    /// Past it the time floor still keeps fences growing.
    pub fence_idle: Duration,
    /// How long a released lease is remembered so a re-sent release still
    /// reports success.
    pub release_memo: Duration,
    /// Credentials for Redis `AUTH` (ACL user and password); they replace any
    /// in the URL. `Debug` never prints the password.
    pub auth: RedisAuth,
    /// PEM file of the CA certificates that sign the Redis server certificate.
    /// Setting it turns TLS on even for a `redis://` URL; without it a
    /// `rediss://` URL trusts the system's roots.
    pub tls_ca_path: Option<PathBuf>,
    /// Set to find the primary through Redis Sentinel instead of at `url`
    /// (whose database number, credentials and TLS still apply).
    pub sentinel: Option<SentinelSettings>,
    /// Set to use a Redis Cluster found through these seed nodes instead of
    /// the one server at `url` (whose credentials and TLS still apply).
    pub cluster: Option<ClusterSettings>,
    /// Set to wait, after every script that changes a lease, for replicas
    /// to acknowledge it (`WAIT` on the same connection).
    pub replica_ack: Option<ReplicaAck>,
}

/// How many replicas must acknowledge a change to a lease, and how long to
/// wait for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAck {
    /// Replicas that must acknowledge; at least 1.
    pub replicas: u32,
    /// The longest wait for them.
    pub timeout: Duration,
}

/// The seed nodes of a Redis Cluster: the broker learns every primary and
/// the slots it serves from any one of them, and follows the cluster as it
/// changes (redirects, resharding, failovers).
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    /// Seed nodes, as host and port.
    pub seeds: Vec<(String, u16)>,
}

/// Where the Sentinels are and what they call the primary.
#[derive(Clone, Debug)]
pub struct SentinelSettings {
    /// The Sentinels, as host and port.
    pub hosts: Vec<(String, u16)>,
    /// The name the Sentinels monitor the primary under.
    pub service_name: String,
    /// Credentials the Sentinels ask for, when they differ from the
    /// primary's (Sentinel's own `requirepass`).
    pub auth: RedisAuth,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            pool_size: 1,
            command_timeout: Duration::from_secs(1),
            max_commands_in_flight: 10_000,
            connect_timeout: Duration::from_secs(1),
            key_prefix: "lockbroker".to_owned(),
            fence_idle: Duration::from_secs(7 * 24 * 3600),
            release_memo: Duration::from_secs(30),
            auth: RedisAuth::default(),
            tls_ca_path: None,
            sentinel: None,
            cluster: None,
            replica_ack: None,
        }
    }
}

/// Redis credentials. `Debug` redacts the password.
#[derive(Clone, Default)]
pub struct RedisAuth {
    /// The ACL user, `default` when only a password is set.
    pub username: Option<String>,
    /// The password.
    pub password: Option<String>,
}

impl fmt::Debug for RedisAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The clients of one store: a pool for lock steps and one subscriber for
/// release announcements. Both start connecting in the background.
pub struct Connections {
    /// Runs the scripts.
    pub pool: Pool,
    /// Holds this process's one subscription.
    pub subscriber: SubscriberClient,
}

impl Connections {
    /// Builds the clients and starts connecting, without waiting for Redis: a
    /// broker that starts while Redis is down answers `503` until Redis is
    /// back, then serves without a restart.
    pub fn open(settings: &RedisSettings) -> Result<Self, StoreError> {
        let mut config = Config::from_url(&settings.url)
            .map_err(|e| StoreError::Unavailable(format!("invalid Redis URL: {}", e.details())))?;
        if let Some(username) = &settings.auth.username {
            config.username = Some(username.clone());
        }
        if let Some(password) = &settings.auth.password {
            config.password = Some(password.clone());
        }
        if let Some(ca_path) = &settings.tls_ca_path {
            config.tls = Some(tls_connector(ca_path)?.into());
        }
        if let Some(sentinel) = &settings.sentinel {
            // fred asks the Sentinels for the primary on every (re)connect, so
            // a failover is followed without a restart.
            config.server = ServerConfig::Sentinel {
                hosts: sentinel
                    .hosts
                    .iter()
                    .map(|(host, port)| Server::new(host.as_str(), *port))
                    .collect(),
                service_name: sentinel.service_name.clone(),
                username: sentinel.auth.username.clone(),
                password: sentinel.auth.password.clone(),
            };
        }
        if let Some(cluster) = &settings.cluster {
            config.server = ServerConfig::Clustered {
                hosts: cluster
                    .seeds
                    .iter()
                    .map(|(host, port)| Server::new(host.as_str(), *port))
                    .collect(),
                policy: ClusterDiscoveryPolicy::default(),
            };
        }
        // Keep trying on the first connection too, instead of giving up.
        config.fail_fast = false;
        let command_timeout = settings.command_timeout;
        let mut builder = Builder::from_config(config);
        builder
            .with_performance_config(|perf| {
                perf.default_command_timeout = command_timeout;
            })
            .with_connection_config(|conn| {
                conn.connection_timeout = settings.connect_timeout;
                conn.internal_command_timeout = command_timeout;
                conn.max_command_attempts = MAX_COMMAND_ATTEMPTS;
                conn.tcp.nodelay = Some(true);
                // A connection whose answers stall (a paused Redis) is dropped
                // and rebuilt rather than kept forever.
                conn.unresponsive = UnresponsiveConfig {
                    max_timeout: Some(command_timeout * 2),
                    interval: command_timeout / 2,
                };
                // fred's own queue bound stays off (0, unbounded): a command
                // it refuses with `Backpressure` still counts as queued, and
                // a connection that believes commands follow the one it
                // writes never flushes a GET, SCAN or SCRIPT EXISTS again, so
                // one overflow leaves listings and readiness timing out until
                // a restart (reproduced in tests/api/overload.rs). The store
                // bounds its commands itself (`max_commands_in_flight`), so a
                // dead Redis still cannot make requests pile up in memory.
                conn.max_command_buffer_len = 0;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 1_000, 2));
        let build_error = |e: RedisError| {
            StoreError::Unavailable(format!("cannot build Redis client: {}", e.details()))
        };
        let pool = builder
            .build_pool(settings.pool_size.max(1))
            .map_err(build_error)?;
        // Release announcements arrive through a broadcast channel; room for
        // bursts, and a lag is answered with a resync. Only the subscriber
        // needs it: every client allocates all its event channels at this
        // capacity up front, about 3 MiB per client at 4,096.
        builder.with_performance_config(|perf| perf.broadcast_channel_capacity = 4_096);
        let subscriber = builder.build_subscriber_client().map_err(build_error)?;
        drop(pool.connect());
        drop(subscriber.connect());
        Ok(Self { pool, subscriber })
    }

    /// Closes every connection.
    pub async fn close(&self) {
        let _ = self.subscriber.quit().await;
        let _ = self.pool.quit().await;
    }
}

/// `url` without its credentials (`user:password@`), for logs and messages.
pub fn endpoint(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "an invalid Redis URL".to_owned();
    };
    // Credentials end at the last `@` before the path (a password may hold
    // `@` or `/`, a host never does).
    let server = rest.rsplit_once('@').map_or(rest, |(_, server)| server);
    format!("{scheme}://{server}")
}

/// How many times fred sends one command across reconnects.
const MAX_COMMAND_ATTEMPTS: u32 = 3;

/// How long after a command's answer was lost fred may still send it again:
/// it sends a command at most `MAX_COMMAND_ATTEMPTS` times, each attempt
/// bounded by the command timeout with a reconnect in between, so ten command
/// timeouts and five seconds bound it with room to spare.
pub fn redelivery_window(settings: &RedisSettings) -> Duration {
    settings.command_timeout * 10 + Duration::from_secs(5)
}

/// A TLS connector trusting only the CA certificates in `ca_path`.
fn tls_connector(ca_path: &Path) -> Result<TlsConnector, StoreError> {
    let invalid = |message: String| {
        StoreError::Unavailable(format!(
            "redis TLS CA file {}: {message}",
            ca_path.display()
        ))
    };
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_path).map_err(|e| invalid(e.to_string()))?;
    for cert in certs {
        let cert = cert.map_err(|e| invalid(e.to_string()))?;
        roots.add(cert).map_err(|e| invalid(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(invalid("holds no certificate".into()));
    }
    let config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(config))
}

/// Every Redis failure fails closed: the caller gets an error, never a grant.
/// A command whose answer was lost is told apart (it may have run), and so is
/// a Redis that answers but refuses writes, which Redis names by the error
/// code that opens its reply: `OOM` (out of memory) or `READONLY` (a replica).
pub fn store_error(error: RedisError) -> StoreError {
    let text = format!("{:?}: {}", error.kind(), error.details());
    if matches!(
        error.kind(),
        ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled
    ) {
        return StoreError::OutcomeUnknown(text);
    }
    match error.details().split_whitespace().next() {
        Some("OOM" | "READONLY") => StoreError::RefusesWrites(text),
        _ => StoreError::Unavailable(text),
    }
}

#[cfg(test)]
mod tests {
    use super::endpoint;

    #[test]
    fn an_endpoint_never_carries_credentials() {
        assert_eq!(
            endpoint("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            endpoint("rediss://user:p@ss/w0rd@redis.example:6380/2"),
            "rediss://redis.example:6380/2"
        );
        assert_eq!(endpoint("redis://:secret@host"), "redis://host");
        assert!(!endpoint("secret").contains("secret"));
    }
}
