//! The typed settings and their built-in defaults: what can be configured, and
//! nothing about where a value came from or whether it is sensible.
//!
//! TOML has no null, so an optional value is spelled as its empty form in the
//! file and in the environment: `""` for a path, name or address, `0` for
//! `locks.max_hold_ms`. Leaving the key out means the same. Defaults are
//! written back the same way, so the serialized defaults name every key (the
//! environment layer relies on that).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use lockbroker_core::LockPolicy;
use serde::{Deserialize, Serialize};

use crate::auth::ApiKeyConfig;

pub use super::redis::{RedisConfig, RedisMode};

/// Everything the broker can be configured with.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Address of the HTTP listener (`LOCKBROKER_LISTEN`).
    pub listen: SocketAddr,
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT.
    pub shutdown_grace_ms: u64,
    /// HTTP limits.
    pub http: HttpSettings,
    /// The Redis connection and key layout.
    pub redis: RedisConfig,
    /// Lease limits and defaults.
    pub locks: LockConfig,
    /// Log output.
    pub log: LogSettings,
    /// API keys and who may do what.
    pub auth: AuthConfig,
    /// Prometheus metrics.
    pub metrics: MetricsSettings,
}

/// Limits on HTTP requests (`LOCKBROKER_HTTP_*`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// Largest accepted request body; larger bodies get `413`.
    pub max_body_bytes: usize,
    /// Longest time any request may take, waiting included; must exceed
    /// `locks.max_wait_ms`.
    pub request_timeout_ms: u64,
    /// Longest time to receive a request's headers (and to finish the TLS
    /// handshake); slower connections are closed, against slowloris.
    pub header_read_timeout_ms: u64,
    /// Longest time to receive a request body once its headers are in;
    /// slower bodies get `408`.
    pub body_read_timeout_ms: u64,
    /// Requests served at once, waiting acquires included; more get `503`.
    /// Must exceed `locks.max_waiters` so waiters never crowd out the rest.
    pub max_concurrent_requests: usize,
    /// Open connections at once; further ones wait in the accept queue.
    pub max_connections: usize,
    /// Requests one HTTP/2 connection may have open at once (its
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`); a client queues the rest. Every
    /// request still counts in `max_concurrent_requests`.
    pub max_streams_per_connection: u32,
    /// Event streams (`/v1/.../events`) open at once; more get `429`.
    /// Streams are not counted in `max_concurrent_requests`.
    pub max_event_streams: usize,
    /// Listing pages (`GET /v1/locks`, `GET /v1/semaphores`) read at once;
    /// more get `503 overloaded` with `Retry-After`. Each page reads every
    /// name it finds, so this bounds the Redis work listings can take.
    pub max_concurrent_listings: usize,
    /// The most of `max_event_streams` one API key may hold, in percent
    /// (at least one stream); more get `429`. Without API keys there is no
    /// share: every caller is the same anonymous one.
    pub event_stream_share_percent: u32,
    /// The part of `max_event_streams`, in percent, kept for keys with the
    /// `admin` scope (the operator page): other keys get `429` once only
    /// that many are left.
    pub event_stream_admin_reserve_percent: u32,
    /// Opening states read from the store at once, one listing page each
    /// (every stream's first page, a prefix stream's next pages, the fresh
    /// state after `lagged`). A stream that would open beyond this gets
    /// `429`; a stream already open waits its turn for its next page.
    pub max_stream_state_reads: usize,
    /// PEM certificate chain of the HTTPS listener; with `tls_key_path`,
    /// the broker serves HTTPS only. `None` for plain HTTP.
    #[serde(with = "empty_is_none")]
    pub tls_cert_path: Option<PathBuf>,
    /// PEM private key of `tls_cert_path`.
    #[serde(with = "empty_is_none")]
    pub tls_key_path: Option<PathBuf>,
    /// Host names the broker answers to beside the ones its listen address
    /// implies (loopback names on loopback; those and any IP address on
    /// every address): `name`, `.domain` for every name under it, or `*`
    /// for any. Other `Host`s get `403`, against DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Web page origins (`https://ops.example.com`) whose requests the
    /// broker takes beside its own; requests of other origins get `403`.
    pub allowed_origins: Vec<String>,
}

/// Lease limits and defaults (`LOCKBROKER_LOCKS_*`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LockConfig {
    /// TTL of an acquire that names none.
    pub default_ttl_ms: u64,
    /// Longest TTL a request may ask for.
    pub max_ttl_ms: u64,
    /// Longer `wait_ms` values are shortened to this.
    pub max_wait_ms: u64,
    /// Lock-delay of an acquire that names none.
    pub default_lock_delay_ms: u64,
    /// Longest lock-delay a request may ask for.
    pub max_lock_delay_ms: u64,
    /// Longest total hold of one lease across extends; `None` (spelled `0`)
    /// for no limit.
    #[serde(with = "zero_is_none")]
    pub max_hold_ms: Option<u64>,
    /// A grant arriving with less validity left than this (Redis answered
    /// slowly) is released instead of handed out.
    pub min_validity_ms: u64,
    /// A fair waiter's queue entry in Redis expires this long after its broker
    /// last refreshed it, so a dead waiter stops blocking the line.
    pub fair_entry_ttl_ms: u64,
    /// Waiting acquires across all locks on this broker.
    pub max_waiters: usize,
    /// Waiting acquires on one lock on this broker.
    pub max_waiters_per_lock: usize,
    /// The highest limit a semaphore may have.
    pub max_semaphore_limit: u32,
    /// The most leases one session may hold at once.
    pub max_leases_per_session: u32,
    /// The most sessions one API key may hold open through this broker.
    pub max_sessions_per_key: u32,
}

/// Log output settings (`LOCKBROKER_LOG_*`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// `text` for people, `json` for log pipelines.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `lockbroker=debug,info`.
    pub level: String,
}

/// The shape of log lines.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Who may call the broker (`LOCKBROKER_AUTH_*`).
///
/// Keys can also come from the environment as TOML:
/// `LOCKBROKER_AUTH_KEYS_FILE=/run/secrets/keys.toml` names a file with
/// `[[keys]]` tables, and `LOCKBROKER_AUTH_KEYS` holds an inline array.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Serve without API keys on an address other than loopback. Off by
    /// default: such a broker refuses to start.
    pub allow_insecure: bool,
    /// Requests per second of a key that sets no `rate_limit_per_sec`; 0 for
    /// no limit (a key may also set 0, so this stays a number). More get `429`.
    pub rate_limit_per_sec: u32,
    /// How many seconds' worth of requests a key may send in one burst.
    pub rate_limit_burst_secs: u32,
    /// The accepted keys. Empty turns authentication off, which is allowed
    /// only on loopback (or with `allow_insecure`).
    pub keys: Vec<ApiKeyConfig>,
}

/// Prometheus metrics (`LOCKBROKER_METRICS_*`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// Lock-name families with a `family` label of their own: `prefix*`
    /// patterns or exact names, first match wins; other locks are `other`.
    /// Keep it short: every family multiplies the series.
    pub families: Vec<String>,
    /// A second listener serving only `/metrics` (e.g. `0.0.0.0:9700` on an
    /// internal network). `/metrics` is on the main listener either way.
    #[serde(with = "empty_is_none")]
    pub listen: Option<SocketAddr>,
    /// How often the leases-held gauge is recounted from Redis (bounded SCAN
    /// pages), correcting for leases that expired instead of being released.
    pub reconcile_interval_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7700)),
            shutdown_grace_ms: 10_000,
            http: HttpSettings::default(),
            redis: RedisConfig::default(),
            locks: LockConfig::default(),
            log: LogSettings::default(),
            auth: AuthConfig::default(),
            metrics: MetricsSettings::default(),
        }
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 * 1024,
            request_timeout_ms: 65_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            max_concurrent_requests: 16_384,
            max_connections: 20_000,
            max_streams_per_connection: 1_000,
            max_event_streams: LockPolicy::default().max_event_streams,
            max_concurrent_listings: LockPolicy::default().max_concurrent_listings,
            event_stream_share_percent: 25,
            event_stream_admin_reserve_percent: 5,
            max_stream_state_reads: 16,
            tls_cert_path: None,
            tls_key_path: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
        }
    }
}

/// The lock service's defaults, so the two never disagree.
impl Default for LockConfig {
    fn default() -> Self {
        let policy = LockPolicy::default();
        Self {
            default_ttl_ms: policy.default_ttl_ms,
            max_ttl_ms: policy.max_ttl_ms,
            max_wait_ms: policy.max_wait_ms,
            default_lock_delay_ms: policy.default_lock_delay_ms,
            max_lock_delay_ms: policy.max_lock_delay_ms,
            max_hold_ms: policy.max_hold_ms,
            min_validity_ms: policy.min_validity_ms,
            fair_entry_ttl_ms: policy.fair_entry_ttl_ms,
            max_waiters: policy.waiters.max_waiters,
            max_waiters_per_lock: policy.waiters.max_waiters_per_lock,
            max_semaphore_limit: policy.max_semaphore_limit,
            max_leases_per_session: policy.max_leases_per_session,
            max_sessions_per_key: policy.max_sessions_per_key,
        }
    }
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".to_owned(),
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            allow_insecure: false,
            rate_limit_per_sec: 1_000,
            rate_limit_burst_secs: 2,
            keys: Vec::new(),
        }
    }
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            families: Vec::new(),
            listen: None,
            reconcile_interval_ms: 30_000,
        }
    }
}

pub(super) fn as_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// An optional value written as a string, `""` meaning `None`; `Some` values
/// are parsed with `FromStr` so a bad address names its key.
pub(super) mod empty_is_none {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => value.serialize(serializer),
            None => serializer.serialize_str(""),
        }
    }

    pub fn deserialize<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(deserializer)?;
        if text.is_empty() {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|e| de::Error::custom(format!("{text:?}: {e}")))
    }
}

/// An optional number written as an integer, `0` meaning `None` (a limit of
/// zero would make every request fail, so zero has always meant "no limit").
/// An empty string, as from an empty environment variable, is `None` too.
mod zero_is_none {
    use std::fmt;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.unwrap_or(0))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        deserializer.deserialize_any(ZeroIsNone)
    }

    struct ZeroIsNone;

    impl Visitor<'_> for ZeroIsNone {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of milliseconds (0 or empty for none)")
        }

        fn visit_u64<E: de::Error>(self, ms: u64) -> Result<Self::Value, E> {
            Ok(Some(ms).filter(|&ms| ms > 0))
        }

        fn visit_i64<E: de::Error>(self, ms: i64) -> Result<Self::Value, E> {
            let ms = u64::try_from(ms)
                .map_err(|_| E::invalid_value(de::Unexpected::Signed(ms), &self))?;
            self.visit_u64(ms)
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            if text.is_empty() {
                Ok(None)
            } else {
                Err(E::invalid_value(de::Unexpected::Str(text), &self))
            }
        }
    }
}
