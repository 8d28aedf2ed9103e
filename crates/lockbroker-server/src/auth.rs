//! API keys: who may call the broker, for which routes and which lock names.
//!
//! Keys are bearer tokens. The configuration holds only their SHA-256 hashes,
//! so a leaked config file does not leak a key. A presented token is hashed and
//! compared in constant time against every configured hash, without an early
//! exit, so response timing says nothing about how close a guess was.
//! Each key carries scopes (`lock`, `admin`, `metrics`), the lock-name prefixes
//! it may touch, and its own rate limit.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockbroker_core::{LockName, LockPrefix, Principal};
use ring::digest::{digest, SHA256};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// What a key may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Acquire, extend, release and inspect locks.
    Lock,
    /// Operator routes: list locks, force-release.
    Admin,
    /// Read the metrics.
    Metrics,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Lock => "lock",
            Self::Admin => "admin",
            Self::Metrics => "metrics",
        })
    }
}

/// One configured key, as written in the settings.
///
/// Missing fields read as empty, so that the check of the key (rather than the
/// settings parser) reports them, naming the key.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// A name for the key, used in audit and log lines (never the key itself).
    #[serde(default)]
    pub id: String,
    /// Lowercase hex SHA-256 of the token, e.g. from
    /// `printf %s "$TOKEN" | sha256sum`.
    #[serde(default)]
    pub sha256: String,
    /// What the key may do.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Lock-name prefixes the key may touch; `"*"` (or `""`) for every lock.
    /// Not needed by a key with only the `metrics` scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefixes: Vec<String>,
    /// Requests per second for this key; the `auth.rate_limit_per_sec`
    /// default when absent, 0 for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_per_sec: Option<u32>,
}

/// Why the configured keys cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("auth.keys: {0}")]
pub struct KeyConfigError(String);

/// A key the broker accepts.
pub struct ApiKey {
    id: String,
    hash: [u8; 32],
    scopes: Vec<Scope>,
    /// Empty when the key may touch every lock.
    prefixes: Vec<LockPrefix>,
    all_locks: bool,
    limiter: Option<RateLimiter>,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("id", &self.id)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl ApiKey {
    /// The key's name, for logs.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Every key the broker accepts. Empty means authentication is off.
#[derive(Debug, Default)]
pub struct KeyRing {
    keys: Vec<Arc<ApiKey>>,
}

/// The longest bearer token accepted; longer input cannot be a key.
const MAX_TOKEN_LEN: usize = 512;

impl KeyRing {
    /// Builds the ring from configured keys, checking each. `default_rate`
    /// and `burst_secs` set the rate limits of keys that name none.
    pub fn new(
        configs: &[ApiKeyConfig],
        default_rate: u32,
        burst_secs: u32,
    ) -> Result<Self, KeyConfigError> {
        let mut keys: Vec<Arc<ApiKey>> = Vec::with_capacity(configs.len());
        for (position, config) in configs.iter().enumerate() {
            let key = parse_key(config, default_rate, burst_secs).map_err(|error| {
                if config.id.trim().is_empty() {
                    KeyConfigError(format!("key number {} (no id): {}", position + 1, error.0))
                } else {
                    error
                }
            })?;
            if keys.iter().any(|k| k.id == key.id) {
                return Err(KeyConfigError(format!("duplicate id {:?}", key.id)));
            }
            if keys.iter().any(|k| k.hash == key.hash) {
                return Err(KeyConfigError(format!(
                    "key {:?} has the same hash as another key",
                    key.id
                )));
            }
            keys.push(Arc::new(key));
        }
        Ok(Self { keys })
    }

    /// The ids of every accepted key, for logs and metrics.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|key| key.id.as_str())
    }

    /// Whether callers must present a key.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The key whose hash matches `token`, if any.
    pub fn authenticate(&self, token: &str) -> Option<Arc<ApiKey>> {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let presented = digest(&SHA256, token.as_bytes());
        let mut found = None;
        // Compare against every key, without stopping at a match.
        for key in &self.keys {
            if bool::from(key.hash[..].ct_eq(presented.as_ref())) {
                found = Some(Arc::clone(key));
            }
        }
        found
    }
}

fn parse_key(
    config: &ApiKeyConfig,
    default_rate: u32,
    burst_secs: u32,
) -> Result<ApiKey, KeyConfigError> {
    let id = config.id.trim();
    let fail = |message: &str| KeyConfigError(format!("key {id:?}: {message}"));
    if id.is_empty() || id.len() > 64 || id.chars().any(char::is_control) {
        return Err(KeyConfigError(
            "every key needs an id of 1 to 64 printable characters".into(),
        ));
    }
    let hash = parse_sha256(&config.sha256)
        .ok_or_else(|| fail("sha256 must be 64 hex digits (the SHA-256 of the token)"))?;
    if config.scopes.is_empty() {
        return Err(fail(
            "scopes must name at least one of lock, admin, metrics",
        ));
    }
    let all_locks = config.prefixes.iter().any(|p| p == "*" || p.is_empty());
    let mut prefixes = Vec::new();
    if !all_locks {
        for raw in &config.prefixes {
            prefixes.push(
                LockPrefix::parse("prefixes", raw)
                    .map_err(|e| fail(&format!("prefix {raw:?} {}", e.message)))?,
            );
        }
    }
    let touches_locks = config
        .scopes
        .iter()
        .any(|s| matches!(s, Scope::Lock | Scope::Admin));
    if touches_locks && !all_locks && prefixes.is_empty() {
        return Err(fail(
            "prefixes must list the lock-name prefixes the key may touch (\"*\" for all)",
        ));
    }
    let rate = config.rate_limit_per_sec.unwrap_or(default_rate);
    Ok(ApiKey {
        id: id.to_owned(),
        hash,
        scopes: config.scopes.clone(),
        prefixes,
        all_locks,
        limiter: (rate > 0).then(|| RateLimiter::new(rate, burst_secs)),
    })
}

fn parse_sha256(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        out[i] = u8::try_from(high * 16 + low).ok()?;
    }
    Some(out)
}

/// Lowercase hex SHA-256 of `token`: what goes into `auth.keys[].sha256`.
pub fn hash_token(token: &str) -> String {
    digest(&SHA256, token.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// How logs and answers name the caller of a broker without API keys.
pub const ANONYMOUS_ID: &str = "anonymous";

/// Who is calling: a key, or anybody when authentication is off.
#[derive(Clone, Debug)]
pub enum Caller {
    /// Authentication is off (loopback only, or explicitly insecure).
    Anonymous,
    /// A caller that presented this key.
    Key(Arc<ApiKey>),
}

impl Caller {
    /// Who asks, for `request_id` retries: the key's id, or the one
    /// anonymous principal without authentication.
    pub fn principal(&self) -> Principal {
        match self {
            Self::Anonymous => Principal::ANONYMOUS,
            Self::Key(key) => Principal::key(&key.id),
        }
    }

    /// The key id for logs, [`ANONYMOUS_ID`] without authentication.
    pub fn id(&self) -> &str {
        match self {
            Self::Anonymous => ANONYMOUS_ID,
            Self::Key(key) => &key.id,
        }
    }

    /// Whether the caller may use routes that need `scope`.
    pub fn has_scope(&self, scope: Scope) -> bool {
        match self {
            Self::Anonymous => true,
            Self::Key(key) => key.scopes.contains(&scope),
        }
    }

    /// Whether the caller may touch the lock `name`.
    pub fn may_touch(&self, name: &LockName) -> bool {
        match self {
            Self::Anonymous => true,
            Self::Key(key) => key.all_locks || key.prefixes.iter().any(|p| p.matches(name)),
        }
    }

    /// Whether every lock `prefix` matches is one the caller may touch.
    pub fn may_list(&self, prefix: &LockPrefix) -> bool {
        match self {
            Self::Anonymous => true,
            Self::Key(key) => key.all_locks || key.prefixes.iter().any(|p| prefix.within(p)),
        }
    }

    /// Takes one request from the caller's rate limit, or says how long to
    /// wait before the next one is allowed.
    pub fn take_request(&self) -> Result<(), Duration> {
        match self {
            Self::Key(key) => key.limiter.as_ref().map_or(Ok(()), RateLimiter::take),
            Self::Anonymous => Ok(()),
        }
    }
}

/// A token bucket: `rate` requests per second on average, bursts of up to
/// `rate * burst_secs`.
struct RateLimiter {
    rate: f64,
    capacity: f64,
    bucket: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl RateLimiter {
    fn new(rate: u32, burst_secs: u32) -> Self {
        let rate = f64::from(rate);
        let capacity = rate * f64::from(burst_secs.max(1));
        Self {
            rate,
            capacity,
            bucket: Mutex::new(Bucket {
                tokens: capacity,
                refilled: Instant::now(),
            }),
        }
    }

    fn take(&self) -> Result<(), Duration> {
        // A poisoned bucket still holds valid numbers: each update is whole.
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.capacity);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, token: &str, scopes: &[Scope], prefixes: &[&str]) -> ApiKeyConfig {
        ApiKeyConfig {
            id: id.into(),
            sha256: hash_token(token),
            scopes: scopes.to_vec(),
            prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            rate_limit_per_sec: None,
        }
    }

    fn name(s: &str) -> LockName {
        LockName::parse(s).expect("valid")
    }

    #[test]
    fn a_token_finds_its_key_and_nothing_else() {
        let ring = KeyRing::new(
            &[
                key("worker", "t-worker", &[Scope::Lock], &["a:"]),
                key("ops", "t-ops", &[Scope::Admin], &["*"]),
            ],
            0,
            1,
        )
        .expect("valid");
        let worker = Caller::Key(ring.authenticate("t-worker").expect("known"));
        assert_eq!(worker.id(), "worker");
        assert!(worker.has_scope(Scope::Lock) && !worker.has_scope(Scope::Admin));
        assert!(worker.may_touch(&name("a:1")) && !worker.may_touch(&name("b:x")));
        let within = LockPrefix::parse("prefix", "a:x").expect("valid");
        let outside = LockPrefix::parse("prefix", "").expect("valid");
        assert!(worker.may_list(&within) && !worker.may_list(&outside));
        let ops = Caller::Key(ring.authenticate("t-ops").expect("known"));
        assert!(ops.may_touch(&name("b:x")));
        assert!(ring.authenticate("t-worke").is_none());
        assert!(ring.authenticate("").is_none());
        assert!(ring.authenticate(&"x".repeat(10_000)).is_none());
    }

    #[test]
    fn bad_key_configs_are_refused() {
        let good = key("a", "t", &[Scope::Lock], &["a:"]);
        let cases = [
            ApiKeyConfig {
                sha256: "abc".into(),
                ..good.clone()
            },
            ApiKeyConfig {
                scopes: vec![],
                ..good.clone()
            },
            ApiKeyConfig {
                prefixes: vec![],
                ..good.clone()
            },
            ApiKeyConfig {
                prefixes: vec!["a*".into()],
                ..good.clone()
            },
            ApiKeyConfig {
                id: String::new(),
                ..good.clone()
            },
        ];
        for bad in &cases {
            assert!(
                KeyRing::new(std::slice::from_ref(bad), 0, 1).is_err(),
                "{bad:?}"
            );
        }
        assert!(KeyRing::new(&[good.clone(), good.clone()], 0, 1).is_err());
        let metrics_only = key("m", "t2", &[Scope::Metrics], &[]);
        assert!(KeyRing::new(&[metrics_only], 0, 1).is_ok());
    }

    #[test]
    fn the_rate_limit_allows_a_burst_then_refuses() {
        let limiter = RateLimiter::new(2, 2);
        for _ in 0..4 {
            assert!(limiter.take().is_ok());
        }
        let wait = limiter.take().expect_err("bucket is empty");
        assert!(wait <= Duration::from_millis(500), "{wait:?}");
    }
}
