//! Settings in layers: defaults built in, then a `--config` TOML file, then
//! `LOCKBROKER_*` environment variables. Unknown keys in the file are errors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lockbroker_core::wait::WaiterLimits;
use lockbroker_core::LockPolicy;
use lockbroker_redis::{RedisAuth, RedisSettings};
use serde::{Deserialize, Serialize};

use crate::auth::{ApiKeyConfig, KeyConfigError, KeyRing};

/// The prefix of every environment variable the broker reads.
pub const ENV_PREFIX: &str = "LOCKBROKER_";

/// Why settings could not be loaded. Printed as one line before exiting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file named on the command line.
        path: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A layer is not valid TOML or has keys or values the broker rejects.
    #[error("invalid config ({layer}): {message}")]
    Invalid {
        /// Which layer: the file name or the environment variable.
        layer: String,
        /// What is wrong.
        message: String,
    },
}

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

/// Prometheus metrics (`LOCKBROKER_METRICS_*`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSettings {
    /// Lock-name families with a `family` label of their own: `prefix*`
    /// patterns or exact names, first match wins; other locks are `other`.
    /// Keep it short: every family multiplies the series.
    pub families: Vec<String>,
    /// A second listener serving only `/metrics` (e.g. `0.0.0.0:9700` on an
    /// internal network); empty for none. `/metrics` is on the main listener
    /// either way.
    pub listen: String,
    /// How often the leases-held gauge is recounted from Redis (bounded SCAN
    /// pages), correcting for leases that expired instead of being released.
    pub reconcile_interval_ms: u64,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        Self {
            families: Vec::new(),
            listen: String::new(),
            reconcile_interval_ms: 30_000,
        }
    }
}

/// Limits on HTTP requests.
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
    /// PEM certificate chain of the HTTPS listener; with `tls_key_path`,
    /// the broker serves HTTPS only. Empty for plain HTTP.
    pub tls_cert_path: String,
    /// PEM private key of `tls_cert_path`.
    pub tls_key_path: String,
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
    /// no limit. More get `429`.
    pub rate_limit_per_sec: u32,
    /// How many seconds' worth of requests a key may send in one burst.
    pub rate_limit_burst_secs: u32,
    /// The accepted keys. Empty turns authentication off, which is allowed
    /// only on loopback (or with `allow_insecure`).
    pub keys: Vec<ApiKeyConfig>,
}

/// How to reach Redis (`LOCKBROKER_REDIS_*`). `Debug` leaves out the
/// password and the URL, which may carry one.
#[derive(Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port/db` (`LOCKBROKER_REDIS_URL`).
    pub url: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Longest wait for one Redis answer before answering `503`.
    pub command_timeout_ms: u64,
    /// Longest wait to open a connection.
    pub connect_timeout_ms: u64,
    /// Prefix of every key the broker writes.
    pub key_prefix: String,
    /// How long a lock's last fence is kept after its last grant.
    pub fence_idle_ms: u64,
    /// How long a released lease is remembered for retried releases.
    pub release_memo_ms: u64,
    /// Redis ACL user; replaces one in the URL. Empty for none.
    pub username: String,
    /// Redis password; replaces one in the URL. Empty for none. Best set
    /// through `LOCKBROKER_REDIS_PASSWORD_FILE`.
    pub password: String,
    /// PEM file of the CA certificates that sign the Redis server's
    /// certificate; setting it turns TLS on. `rediss://` URLs without it
    /// trust the system's roots.
    pub tls_ca_path: String,
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
    /// Longest total hold of one lease across extends; 0 for no limit.
    pub max_hold_ms: u64,
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
            tls_cert_path: String::new(),
            tls_key_path: String::new(),
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

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &"<redacted>")
            .field("pool_size", &self.pool_size)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("key_prefix", &self.key_prefix)
            .field("fence_idle_ms", &self.fence_idle_ms)
            .field("release_memo_ms", &self.release_memo_ms)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("tls_ca_path", &self.tls_ca_path)
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        let redis = RedisSettings::default();
        Self {
            url: redis.url,
            pool_size: redis.pool_size,
            command_timeout_ms: as_ms(redis.command_timeout),
            connect_timeout_ms: as_ms(redis.connect_timeout),
            key_prefix: redis.key_prefix,
            fence_idle_ms: as_ms(redis.fence_idle),
            release_memo_ms: as_ms(redis.release_memo),
            username: String::new(),
            password: String::new(),
            tls_ca_path: String::new(),
        }
    }
}

impl Default for LockConfig {
    fn default() -> Self {
        let policy = LockPolicy::default();
        Self {
            default_ttl_ms: policy.default_ttl_ms,
            max_ttl_ms: policy.max_ttl_ms,
            max_wait_ms: policy.max_wait_ms,
            default_lock_delay_ms: policy.default_lock_delay_ms,
            max_lock_delay_ms: policy.max_lock_delay_ms,
            max_hold_ms: policy.max_hold_ms.unwrap_or(0),
            min_validity_ms: policy.min_validity_ms,
            fair_entry_ttl_ms: policy.fair_entry_ttl_ms,
            max_waiters: policy.waiters.max_waiters,
            max_waiters_per_lock: policy.waiters.max_waiters_per_lock,
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

fn as_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Settings {
    /// Builds settings from the defaults, then `file` (if any), then the
    /// `LOCKBROKER_*` variables among `env`, and checks them.
    ///
    /// An environment variable names a key by its path in upper case with `_`
    /// between the parts (`LOCKBROKER_REDIS_URL` is `redis.url`); with a `_FILE`
    /// suffix its value is read from that file (for secrets). Variables that
    /// name no key are ignored, since clients share the prefix
    /// (`LOCKBROKER_URL`).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let defaults =
            toml::Table::try_from(Settings::default()).map_err(|e| ConfigError::Invalid {
                layer: "defaults".into(),
                message: e.to_string(),
            })?;
        let mut merged = toml::Table::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Invalid {
                        layer: path.display().to_string(),
                        message: e.message().to_owned(),
                    })?;
            merge(&mut merged, table);
        }
        merge(&mut merged, env_layer(&defaults, env)?);
        let settings: Settings =
            toml::Value::Table(merged)
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    layer: file.map_or("environment".into(), |p| p.display().to_string()),
                    message: e.message().to_owned(),
                })?;
        settings.validate()?;
        Ok(settings)
    }

    /// Checks rules that span fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            layer: "settings".into(),
            message,
        };
        let locks = &self.locks;
        if locks.default_ttl_ms == 0 || locks.default_ttl_ms > locks.max_ttl_ms {
            return Err(invalid(format!(
                "locks.default_ttl_ms must be between 1 and locks.max_ttl_ms ({})",
                locks.max_ttl_ms
            )));
        }
        if locks.default_lock_delay_ms > locks.max_lock_delay_ms {
            return Err(invalid(
                "locks.default_lock_delay_ms must not exceed locks.max_lock_delay_ms".into(),
            ));
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
        if !self.metrics.listen.is_empty() && self.metrics.listen.parse::<SocketAddr>().is_err() {
            return Err(invalid(format!(
                "metrics.listen {:?} is not an address",
                self.metrics.listen
            )));
        }
        if self.metrics.reconcile_interval_ms < 1_000 {
            return Err(invalid(
                "metrics.reconcile_interval_ms must be at least 1000".into(),
            ));
        }
        if locks.fair_entry_ttl_ms < 30 {
            return Err(invalid(
                "locks.fair_entry_ttl_ms must be at least 30".into(),
            ));
        }
        if locks.max_waiters_per_lock > locks.max_waiters {
            return Err(invalid(
                "locks.max_waiters_per_lock must not exceed locks.max_waiters".into(),
            ));
        }
        if self.http.request_timeout_ms <= locks.max_wait_ms {
            return Err(invalid(format!(
                "http.request_timeout_ms ({}) must exceed locks.max_wait_ms ({})",
                self.http.request_timeout_ms, locks.max_wait_ms
            )));
        }
        if self.redis.command_timeout_ms == 0 || self.redis.connect_timeout_ms == 0 {
            return Err(invalid("redis timeouts must be at least 1 ms".into()));
        }
        if !(1..=64).contains(&self.redis.pool_size) {
            return Err(invalid("redis.pool_size must be between 1 and 64".into()));
        }
        let prefix = &self.redis.key_prefix;
        if prefix.is_empty() || prefix.contains(['{', '}']) {
            return Err(invalid(
                "redis.key_prefix must be non-empty and free of { and }".into(),
            ));
        }
        if self.redis.fence_idle_ms < locks.max_ttl_ms {
            return Err(invalid(
                "redis.fence_idle_ms must be at least locks.max_ttl_ms".into(),
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
    /// limits, and no unauthenticated listener beyond loopback.
    pub fn check_security(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            layer: "settings".into(),
            message,
        };
        let keys = self.key_ring().map_err(|e| invalid(e.to_string()))?;
        if !keys.enabled() && !self.listen.ip().is_loopback() && !self.auth.allow_insecure {
            return Err(invalid(format!(
                "refusing to listen on {} without API keys: configure auth.keys (see \
                 docs/security.md), listen on loopback, or set auth.allow_insecure = true",
                self.listen
            )));
        }
        let http = &self.http;
        if http.tls_cert_path.is_empty() != http.tls_key_path.is_empty() {
            return Err(invalid(
                "http.tls_cert_path and http.tls_key_path must be set together".into(),
            ));
        }
        if http.header_read_timeout_ms == 0 || http.body_read_timeout_ms == 0 {
            return Err(invalid("http read timeouts must be at least 1 ms".into()));
        }
        if http.max_connections == 0 {
            return Err(invalid("http.max_connections must be at least 1".into()));
        }
        if http.max_concurrent_requests <= self.locks.max_waiters {
            return Err(invalid(format!(
                "http.max_concurrent_requests ({}) must exceed locks.max_waiters ({})",
                http.max_concurrent_requests, self.locks.max_waiters
            )));
        }
        Ok(())
    }

    /// The API keys the broker accepts.
    pub fn key_ring(&self) -> Result<KeyRing, KeyConfigError> {
        KeyRing::new(
            &self.auth.keys,
            self.auth.rate_limit_per_sec,
            self.auth.rate_limit_burst_secs,
        )
    }

    /// The lock rules for [`lockbroker_core::LockService`].
    pub fn lock_policy(&self) -> LockPolicy {
        let locks = &self.locks;
        LockPolicy {
            default_ttl_ms: locks.default_ttl_ms,
            max_ttl_ms: locks.max_ttl_ms,
            max_wait_ms: locks.max_wait_ms,
            default_lock_delay_ms: locks.default_lock_delay_ms,
            max_lock_delay_ms: locks.max_lock_delay_ms,
            max_hold_ms: (locks.max_hold_ms > 0).then_some(locks.max_hold_ms),
            min_validity_ms: locks.min_validity_ms,
            fair_entry_ttl_ms: locks.fair_entry_ttl_ms,
            waiters: WaiterLimits {
                max_waiters: locks.max_waiters,
                max_waiters_per_lock: locks.max_waiters_per_lock,
            },
        }
    }

    /// The Redis settings for [`lockbroker_redis::RedisLockStore`].
    pub fn redis_settings(&self) -> RedisSettings {
        let redis = &self.redis;
        RedisSettings {
            url: redis.url.clone(),
            pool_size: redis.pool_size,
            command_timeout: Duration::from_millis(redis.command_timeout_ms),
            connect_timeout: Duration::from_millis(redis.connect_timeout_ms),
            key_prefix: redis.key_prefix.clone(),
            fence_idle: Duration::from_millis(redis.fence_idle_ms),
            release_memo: Duration::from_millis(redis.release_memo_ms),
            auth: RedisAuth {
                username: non_empty(&redis.username),
                password: non_empty(&redis.password),
            },
            tls_ca_path: non_empty(&redis.tls_ca_path).map(PathBuf::from),
        }
    }
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

/// Overlays `top` on `base`, table by table.
fn merge(base: &mut toml::Table, top: toml::Table) {
    for (key, value) in top {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base_table)), toml::Value::Table(top_table)) => {
                merge(base_table, top_table);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Turns `LOCKBROKER_*` variables into a table shaped like the defaults, typing
/// each value like the default it replaces.
fn env_layer(
    defaults: &toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<toml::Table, ConfigError> {
    let mut layer = toml::Table::new();
    for (var, raw) in env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let rest = rest.to_ascii_lowercase();
        let (path, from_file) = match rest.strip_suffix("_file") {
            Some(base) if find_key(defaults, base).is_some() => (base.to_owned(), true),
            _ => (rest, false),
        };
        let Some((section, key, default)) = find_key(defaults, &path) else {
            continue;
        };
        let text = if from_file {
            std::fs::read_to_string(&raw)
                .map_err(|e| ConfigError::Invalid {
                    layer: var.clone(),
                    message: format!("cannot read {raw}: {e}"),
                })?
                .trim_end_matches(['\n', '\r'])
                .to_owned()
        } else {
            raw
        };
        let value = typed_like(&key, default, &text).ok_or_else(|| ConfigError::Invalid {
            layer: var.clone(),
            message: format!("expected {}", default.type_str()),
        })?;
        match section {
            None => {
                layer.insert(key, value);
            }
            Some(section) => {
                let table = layer
                    .entry(section)
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(table) = table {
                    table.insert(key, value);
                }
            }
        }
    }
    Ok(layer)
}

/// Finds the key `path` names (`listen`, or `redis_url` for `redis.url`).
fn find_key<'a>(
    defaults: &'a toml::Table,
    path: &str,
) -> Option<(Option<String>, String, &'a toml::Value)> {
    for (name, value) in defaults {
        match value {
            toml::Value::Table(section) => {
                let Some(key) = path
                    .strip_prefix(name.as_str())
                    .and_then(|r| r.strip_prefix('_'))
                else {
                    continue;
                };
                if let Some(default) = section.get(key) {
                    return Some((Some(name.clone()), key.to_owned(), default));
                }
            }
            scalar if name == path => return Some((None, name.clone(), scalar)),
            _ => {}
        }
    }
    None
}

/// Reads `text` as a value of the type of `default`. A list (such as
/// `auth.keys`) is TOML: an inline array, or a document holding the list
/// under its own name (`[[keys]]` tables), as in a keys file.
fn typed_like(key: &str, default: &toml::Value, text: &str) -> Option<toml::Value> {
    Some(match default {
        toml::Value::Array(_) => {
            if let Ok(mut document) = text.parse::<toml::Table>() {
                if let Some(list @ toml::Value::Array(_)) = document.remove(key) {
                    return Some(list);
                }
            }
            let mut wrapped = format!("{key} = {text}").parse::<toml::Table>().ok()?;
            match wrapped.remove(key)? {
                list @ toml::Value::Array(_) => list,
                _ => return None,
            }
        }
        toml::Value::Integer(_) => toml::Value::Integer(text.trim().parse().ok()?),
        toml::Value::Boolean(_) => toml::Value::Boolean(text.trim().parse().ok()?),
        toml::Value::Float(_) => toml::Value::Float(text.trim().parse().ok()?),
        _ => toml::Value::String(text.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn documented_config_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/lockbroker.toml");
        let from_file = Settings::load(Some(&path), []).expect("config/lockbroker.toml loads");
        let defaults = Settings::default();
        assert_eq!(
            toml::Table::try_from(from_file).expect("serialize"),
            toml::Table::try_from(defaults).expect("serialize"),
        );
    }

    #[test]
    fn environment_overrides_with_typed_values() {
        let settings = Settings::load(
            None,
            env(&[
                ("LOCKBROKER_LISTEN", "0.0.0.0:9000"),
                ("LOCKBROKER_AUTH_ALLOW_INSECURE", "true"),
                ("LOCKBROKER_REDIS_URL", "redis://10.0.0.1:6380/2"),
                ("LOCKBROKER_LOCKS_MAX_HOLD_MS", "7200000"),
                ("LOCKBROKER_URL", "http://ignored-client-setting"),
                ("PATH", "/bin"),
            ]),
        )
        .expect("loads");
        assert_eq!(settings.listen.port(), 9000);
        assert_eq!(settings.redis.url, "redis://10.0.0.1:6380/2");
        assert_eq!(settings.lock_policy().max_hold_ms, Some(7_200_000));
    }

    #[test]
    fn environment_secret_from_file() {
        let dir = std::env::temp_dir().join(format!("lockbroker-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let file = dir.join("url");
        std::fs::write(&file, "redis://:s3cret@127.0.0.1:6379/0\n").expect("write");
        let settings = Settings::load(
            None,
            env(&[("LOCKBROKER_REDIS_URL_FILE", file.to_str().expect("utf-8"))]),
        )
        .expect("loads");
        assert_eq!(settings.redis.url, "redis://:s3cret@127.0.0.1:6379/0");
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = Settings::load(None, env(&[("LOCKBROKER_REDIS_POOL_SIZE", "many")]))
            .expect_err("not a number");
        assert!(
            err.to_string().contains("LOCKBROKER_REDIS_POOL_SIZE"),
            "{err}"
        );
        let err =
            Settings::load(None, env(&[("LOCKBROKER_LISTEN", "nowhere")])).expect_err("bad addr");
        assert!(err.to_string().contains("invalid"), "{err}");
    }

    #[test]
    fn unknown_file_keys_are_rejected() {
        let dir =
            std::env::temp_dir().join(format!("lockbroker-cfg-unknown-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let file = dir.join("bad.toml");
        std::fs::write(&file, "[redis]\nurll = \"redis://x\"\n").expect("write");
        let err = Settings::load(Some(&file), []).expect_err("unknown key");
        assert!(err.to_string().contains("urll"), "{err}");
    }

    #[test]
    fn a_public_listener_needs_keys_or_an_explicit_opt_out() {
        let err = Settings::load(None, env(&[("LOCKBROKER_LISTEN", "0.0.0.0:7700")]))
            .expect_err("no keys beyond loopback");
        assert!(err.to_string().contains("allow_insecure"), "{err}");
        let keys = format!(
            r#"[{{id = "ops", sha256 = "{}", scopes = ["admin"], prefixes = ["*"]}}]"#,
            crate::auth::hash_token("secret")
        );
        let settings = Settings::load(
            None,
            env(&[
                ("LOCKBROKER_LISTEN", "[::]:7700"),
                ("LOCKBROKER_AUTH_KEYS", &keys),
            ]),
        )
        .expect("keys make it secure");
        assert!(settings.key_ring().expect("valid").enabled());
    }

    #[test]
    fn keys_load_from_a_file_of_tables() {
        let dir = std::env::temp_dir().join(format!("lockbroker-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let file = dir.join("keys.toml");
        let text = format!(
            "[[keys]]\nid = \"worker\"\nsha256 = \"{}\"\nscopes = [\"lock\"]\nprefixes = [\"billing:\"]\nrate_limit_per_sec = 5\n",
            crate::auth::hash_token("worker-secret")
        );
        std::fs::write(&file, text).expect("write");
        let settings = Settings::load(
            None,
            env(&[("LOCKBROKER_AUTH_KEYS_FILE", file.to_str().expect("utf-8"))]),
        )
        .expect("loads");
        assert_eq!(settings.auth.keys.len(), 1);
        assert_eq!(settings.auth.keys[0].rate_limit_per_sec, Some(5));
        let ring = settings.key_ring().expect("valid");
        assert!(ring.authenticate("worker-secret").is_some());
        assert!(ring.authenticate("worker-secre").is_none());

        std::fs::write(
            &file,
            "[[keys]]\nid = \"bad\"\nsha256 = \"0\"\nscopes = [\"lock\"]\nprefixes = [\"*\"]\n",
        )
        .expect("write");
        let err = Settings::load(
            None,
            env(&[("LOCKBROKER_AUTH_KEYS_FILE", file.to_str().expect("utf-8"))]),
        )
        .expect_err("bad hash");
        assert!(err.to_string().contains("sha256"), "{err}");
    }

    #[test]
    fn debug_output_hides_redis_secrets() {
        let mut settings = Settings::default();
        settings.redis.url = "redis://:url-s3cret@10.0.0.1:6379/0".into();
        settings.redis.password = "field-s3cret".into();
        let text = format!("{settings:?}");
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn tls_files_come_in_pairs() {
        let mut settings = Settings::default();
        settings.http.tls_cert_path = "/etc/lockbroker/cert.pem".into();
        assert!(settings.validate().is_err());
        settings.http.tls_key_path = "/etc/lockbroker/key.pem".into();
        assert!(settings.validate().is_ok());
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
}
