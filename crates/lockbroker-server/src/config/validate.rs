//! The rules settings must follow, and their conversion into what the rest of
//! the broker takes: durations, the lock policy, the Redis settings, the key
//! ring. Rules are checked here rather than in the schema because most of them
//! span fields (a TTL default below its maximum, a request timeout above the
//! longest wait).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use lockbroker_core::wait::WaiterLimits;
use lockbroker_core::LockPolicy;
use lockbroker_redis::quorum::{Drift, QuorumSettings};
use lockbroker_redis::{ClusterSettings, RedisAuth, RedisSettings, ReplicaAck, SentinelSettings};

use super::schema::{HttpSettings, MetricsSettings, RedisMode, Settings};
use super::ConfigError;
use crate::auth::{KeyConfigError, KeyRing};
use crate::http::origin::Sources;

/// The one conversion from a `*_ms` setting to a [`Duration`].
fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

pub(super) fn invalid(message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        layer: "settings".into(),
        message: message.into(),
    }
}

impl Settings {
    /// Checks rules that span fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let locks = &self.locks;
        if locks.default_ttl_ms == 0 || locks.default_ttl_ms > locks.max_ttl_ms {
            return Err(invalid(format!(
                "locks.default_ttl_ms must be between 1 and locks.max_ttl_ms ({})",
                locks.max_ttl_ms
            )));
        }
        if locks.default_lock_delay_ms > locks.max_lock_delay_ms {
            return Err(invalid(
                "locks.default_lock_delay_ms must not exceed locks.max_lock_delay_ms",
            ));
        }
        // Written as 0 it reads back as "no limit"; in code it would refuse
        // every extend, so it is never what was meant.
        if locks.max_hold_ms == Some(0) {
            return Err(invalid("locks.max_hold_ms must be at least 1 ms when set"));
        }
        for family in &self.metrics.families {
            let literal = family.strip_suffix('*').unwrap_or(family);
            if literal.contains('*')
                || lockbroker_core::LockName::parse(literal).is_err() && !literal.is_empty()
            {
                return Err(invalid(format!(
                    "metrics.families: {family:?} is neither a lock name nor a name prefix followed by *"
                )));
            }
        }
        super::modes::check_redis_mode(&self.redis)?;
        if self.metrics.reconcile_interval_ms < 1_000 {
            return Err(invalid(
                "metrics.reconcile_interval_ms must be at least 1000",
            ));
        }
        if locks.fair_entry_ttl_ms < 30 {
            return Err(invalid("locks.fair_entry_ttl_ms must be at least 30"));
        }
        if !(1..=1_000).contains(&self.http.max_concurrent_listings) {
            return Err(invalid(
                "http.max_concurrent_listings must be between 1 and 1000",
            ));
        }
        if locks.max_semaphore_limit == 0 {
            return Err(invalid("locks.max_semaphore_limit must be at least 1"));
        }
        if locks.max_leases_per_session == 0 || locks.max_sessions_per_key == 0 {
            return Err(invalid(
                "locks.max_leases_per_session and locks.max_sessions_per_key must be at least 1",
            ));
        }
        if locks.max_waiters_per_lock > locks.max_waiters {
            return Err(invalid(
                "locks.max_waiters_per_lock must not exceed locks.max_waiters",
            ));
        }
        if self.http.request_timeout_ms <= locks.max_wait_ms {
            return Err(invalid(format!(
                "http.request_timeout_ms ({}) must exceed locks.max_wait_ms ({})",
                self.http.request_timeout_ms, locks.max_wait_ms
            )));
        }
        let redis = &self.redis;
        if redis.command_timeout_ms == 0 || redis.connect_timeout_ms == 0 {
            return Err(invalid("redis timeouts must be at least 1 ms"));
        }
        if redis.pool_size > 64 {
            return Err(invalid(
                "redis.pool_size must be between 1 and 64, or 0 for the broker's choice",
            ));
        }
        if !(100..=1_000_000).contains(&redis.max_commands_in_flight) {
            return Err(invalid(
                "redis.max_commands_in_flight must be between 100 and 1000000",
            ));
        }
        if redis.key_prefix.is_empty() || redis.key_prefix.contains(['{', '}']) {
            return Err(invalid(
                "redis.key_prefix must be non-empty and free of { and }",
            ));
        }
        if redis.fence_idle_ms < locks.max_ttl_ms {
            return Err(invalid(
                "redis.fence_idle_ms must be at least locks.max_ttl_ms",
            ));
        }
        self.check_security()?;
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return Err(invalid(format!(
                "log.level {:?} is not a valid filter",
                self.log.level
            )));
        }
        Ok(())
    }

    /// The secure-by-default rules: keys that parse, TLS files in pairs, HTTP
    /// limits, and no unauthenticated listener beyond loopback. Checked again
    /// at startup, since tests and embedders build settings in code.
    pub fn check_security(&self) -> Result<(), ConfigError> {
        let keys = self.key_ring().map_err(|e| invalid(e.to_string()))?;
        if !keys.enabled() && !self.listen.ip().is_loopback() && !self.auth.allow_insecure {
            return Err(invalid(format!(
                "refusing to listen on {} without API keys: configure auth.keys (see \
                 docs/security.md), listen on loopback, or set auth.allow_insecure = true",
                self.listen
            )));
        }
        let http = &self.http;
        self.request_sources().map_err(invalid)?;
        if http.tls_cert_path.is_some() != http.tls_key_path.is_some() {
            return Err(invalid(
                "http.tls_cert_path and http.tls_key_path must be set together",
            ));
        }
        if http.header_read_timeout_ms == 0 || http.body_read_timeout_ms == 0 {
            return Err(invalid("http read timeouts must be at least 1 ms"));
        }
        if http.max_connections == 0 {
            return Err(invalid("http.max_connections must be at least 1"));
        }
        if http.max_streams_per_connection == 0 {
            return Err(invalid(
                "http.max_streams_per_connection must be at least 1",
            ));
        }
        if !(1..=100).contains(&http.event_stream_share_percent) {
            return Err(invalid(
                "http.event_stream_share_percent must be between 1 and 100",
            ));
        }
        if http.event_stream_admin_reserve_percent > 50 {
            return Err(invalid(
                "http.event_stream_admin_reserve_percent must be between 0 and 50",
            ));
        }
        if http.max_stream_state_reads == 0 {
            return Err(invalid("http.max_stream_state_reads must be at least 1"));
        }
        if http.max_concurrent_requests <= self.locks.max_waiters {
            return Err(invalid(format!(
                "http.max_concurrent_requests ({}) must exceed locks.max_waiters ({})",
                http.max_concurrent_requests, self.locks.max_waiters
            )));
        }
        Ok(())
    }

    /// How long in-flight requests may take to finish after a shutdown signal.
    pub fn shutdown_grace(&self) -> Duration {
        millis(self.shutdown_grace_ms)
    }

    /// The host names and page origins the broker takes requests from.
    pub fn request_sources(&self) -> Result<Sources, String> {
        self.sources_on(self.listen)
    }

    /// The sources the metrics listener takes scrapes from, when there is
    /// one: the same rules on its own address. A scrape is a GET, which a
    /// page whose name was rebound to the listener could read.
    pub fn metrics_request_sources(&self) -> Result<Option<Sources>, String> {
        self.metrics
            .listen
            .map(|addr| self.sources_on(addr))
            .transpose()
    }

    /// The `Host` and `Origin` rules of `http` for a listener on `listen`.
    fn sources_on(&self, listen: SocketAddr) -> Result<Sources, String> {
        Sources::new(listen, &self.http.allowed_hosts, &self.http.allowed_origins)
    }

    /// The API keys the broker accepts.
    pub fn key_ring(&self) -> Result<KeyRing, KeyConfigError> {
        KeyRing::new(
            &self.auth.keys,
            self.auth.rate_limit_per_sec,
            self.auth.rate_limit_burst_secs,
        )
    }

    /// The lock rules for [`lockbroker_core::LockService`], which counts in
    /// milliseconds as the API does.
    pub fn lock_policy(&self) -> LockPolicy {
        let locks = &self.locks;
        LockPolicy {
            default_ttl_ms: locks.default_ttl_ms,
            max_ttl_ms: locks.max_ttl_ms,
            max_wait_ms: locks.max_wait_ms,
            default_lock_delay_ms: locks.default_lock_delay_ms,
            max_lock_delay_ms: locks.max_lock_delay_ms,
            max_hold_ms: locks.max_hold_ms,
            min_validity_ms: locks.min_validity_ms,
            fair_entry_ttl_ms: locks.fair_entry_ttl_ms,
            waiters: WaiterLimits {
                max_waiters: locks.max_waiters,
                max_waiters_per_lock: locks.max_waiters_per_lock,
            },
            max_semaphore_limit: locks.max_semaphore_limit,
            max_leases_per_session: locks.max_leases_per_session,
            max_sessions_per_key: locks.max_sessions_per_key,
            max_event_streams: self.http.max_event_streams,
            max_concurrent_listings: self.http.max_concurrent_listings,
            ..LockPolicy::default()
        }
    }

    /// Quorum mode: one node's settings per configured node (its URL, the
    /// node timeout as its command timeout, everything else shared), and the
    /// drift allowance. `None` in single mode.
    pub fn quorum_settings(&self) -> Option<QuorumSettings> {
        let redis = &self.redis;
        if redis.mode != RedisMode::Quorum {
            return None;
        }
        let shared = self.redis_settings();
        Some(QuorumSettings {
            nodes: redis
                .nodes
                .iter()
                .map(|url| RedisSettings {
                    url: url.clone(),
                    command_timeout: millis(redis.node_timeout_ms),
                    ..shared.clone()
                })
                .collect(),
            drift: Drift {
                factor: redis.drift_factor,
                ms: redis.drift_ms,
            },
        })
    }

    /// The Redis settings for [`lockbroker_redis::RedisLockStore`].
    pub fn redis_settings(&self) -> RedisSettings {
        let redis = &self.redis;
        let cluster = redis.mode == RedisMode::Cluster;
        RedisSettings {
            // A cluster's credentials, TLS and database come from its first seed.
            url: match redis.nodes.first() {
                Some(seed) if cluster => seed.clone(),
                _ => redis.url.clone(),
            },
            pool_size: redis.pool_size(),
            command_timeout: millis(redis.command_timeout_ms),
            max_commands_in_flight: redis.max_commands_in_flight,
            connect_timeout: millis(redis.connect_timeout_ms),
            key_prefix: redis.key_prefix.clone(),
            fence_idle: millis(redis.fence_idle_ms),
            release_memo: millis(redis.release_memo_ms),
            auth: RedisAuth {
                username: redis.username.clone(),
                password: redis.password.clone(),
            },
            tls_ca_path: redis.tls_ca_path.clone(),
            sentinel: (redis.mode == RedisMode::Sentinel).then(|| SentinelSettings {
                hosts: redis
                    .sentinels
                    .iter()
                    .filter_map(|at| super::modes::sentinel_address(at))
                    .collect(),
                service_name: redis.service_name.clone(),
                auth: RedisAuth {
                    username: redis.sentinel_username.clone(),
                    password: redis.sentinel_password.clone(),
                },
            }),
            cluster: cluster.then(|| ClusterSettings {
                seeds: super::modes::cluster_seeds(redis),
            }),
            replica_ack: (redis.min_replicas_acked > 0).then(|| ReplicaAck {
                replicas: redis.min_replicas_acked,
                timeout: millis(redis.replica_ack_timeout_ms),
            }),
        }
    }
}

impl HttpSettings {
    /// Longest time any request may take, waiting included.
    pub fn request_timeout(&self) -> Duration {
        millis(self.request_timeout_ms)
    }

    /// Longest time to receive a request's headers and finish the handshake.
    pub fn header_read_timeout(&self) -> Duration {
        millis(self.header_read_timeout_ms)
    }

    /// Longest time to receive a request body once its headers are in.
    pub fn body_read_timeout(&self) -> Duration {
        millis(self.body_read_timeout_ms)
    }

    /// The HTTPS certificate chain and key, when both are set
    /// ([`Settings::check_security`] refuses one without the other).
    pub fn tls_files(&self) -> Option<(&Path, &Path)> {
        Some((
            self.tls_cert_path.as_deref()?,
            self.tls_key_path.as_deref()?,
        ))
    }
}

impl MetricsSettings {
    /// How often the leases-held gauge is recounted.
    pub fn reconcile_interval(&self) -> Duration {
        millis(self.reconcile_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_files_come_in_pairs() {
        let mut settings = Settings::default();
        settings.http.tls_cert_path = Some("/etc/lockbroker/cert.pem".into());
        assert!(settings.validate().is_err());
        assert!(settings.http.tls_files().is_none());
        settings.http.tls_key_path = Some("/etc/lockbroker/key.pem".into());
        assert!(settings.validate().is_ok());
        let (cert, key) = settings.http.tls_files().expect("both set");
        assert_eq!(cert, Path::new("/etc/lockbroker/cert.pem"));
        assert_eq!(key, Path::new("/etc/lockbroker/key.pem"));
    }

    #[test]
    fn cross_field_rules() {
        let mut settings = Settings::default();
        settings.locks.default_ttl_ms = settings.locks.max_ttl_ms + 1;
        assert!(settings.validate().is_err());
        let mut settings = Settings::default();
        settings.http.request_timeout_ms = settings.locks.max_wait_ms;
        assert!(settings.validate().is_err());
    }

    #[test]
    fn a_max_hold_of_zero_set_in_code_is_refused() {
        let mut settings = Settings::default();
        settings.locks.max_hold_ms = Some(0);
        let err = settings.validate().expect_err("zero hold");
        assert!(err.to_string().contains("max_hold_ms"), "{err}");
        settings.locks.max_hold_ms = Some(1_000);
        assert!(settings.validate().is_ok());
        assert_eq!(settings.lock_policy().max_hold_ms, Some(1_000));
    }

    #[test]
    fn durations_and_redis_settings_convert_from_milliseconds() {
        let mut settings = Settings {
            shutdown_grace_ms: 1_500,
            ..Settings::default()
        };
        settings.http.header_read_timeout_ms = 250;
        settings.redis.command_timeout_ms = 700;
        settings.redis.password = Some("s3cret".into());
        assert_eq!(settings.shutdown_grace(), Duration::from_millis(1_500));
        assert_eq!(
            settings.http.header_read_timeout(),
            Duration::from_millis(250)
        );
        assert_eq!(
            settings.metrics.reconcile_interval(),
            Duration::from_secs(30)
        );
        let redis = settings.redis_settings();
        assert_eq!(redis.command_timeout, Duration::from_millis(700));
        assert_eq!(redis.auth.password.as_deref(), Some("s3cret"));
        assert_eq!(redis.auth.username, None);
        assert_eq!(redis.tls_ca_path, None);
    }
}
