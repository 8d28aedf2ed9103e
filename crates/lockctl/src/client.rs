//! The broker's HTTP API from the client side: one method per route, each
//! answering the JSON body or a [`BrokerError`] that knows its exit code.
//!
//! Locks and semaphores have the same four routes under `/v1/locks` and
//! `/v1/semaphores` ([`Family`]); a token works only in the family that
//! issued it. What an acquire asks for is a [`LeaseKind`]. A lock's event
//! stream is opened with [`Broker::events`] and read as Server-Sent Events.
//!
//! Nothing here prints. Errors never carry the token or the API key: the
//! token travels only in request bodies, the key only in a sensitive header,
//! and transport errors name the broker's base URL without any user or
//! password in it, never a request's URL.

mod error;
mod events;

use std::time::{Duration, Instant};

use lockbroker_api::{AcquireBody, ExtendBody, ReleaseBody};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use reqwest::{Method, Url};
use serde_json::Value;

pub use error::BrokerError;
use error::{not_the_api, refusal, retry_after};
pub use events::{EventStream, Watched};
pub use lockbroker_api::sse::Message;

use crate::duration::millis;
use crate::tls;

/// Timeout for a request that does not wait for a lock.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker at a base URL, with the API key to send if any.
#[derive(Clone)]
pub struct Broker {
    http: reqwest::Client,
    base: Url,
    /// The base URL as errors show it: no user or password.
    shown: String,
    /// Whether `--ca-cert` was given (TLS advice depends on it).
    with_ca_cert: bool,
}

/// Where a name lives: the lock routes or the semaphore routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `/v1/locks/{name}`: exclusive and shared leases.
    Locks,
    /// `/v1/semaphores/{name}`: permits.
    Semaphores,
}

/// What an acquire asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// A lock lease that excludes every other lease of the lock (the
    /// broker's default).
    Exclusive,
    /// A lock lease that coexists with the lock's other shared leases.
    Shared,
    /// One permit of a semaphore that lets at most `limit` holders in at once.
    Permit {
        /// The semaphore's limit, 1 or more.
        limit: u64,
    },
}

impl LeaseKind {
    /// The routes this kind of lease is acquired, renewed and released on.
    pub fn family(self) -> Family {
        match self {
            Self::Exclusive | Self::Shared => Family::Locks,
            Self::Permit { .. } => Family::Semaphores,
        }
    }
}

/// How an acquire should ask for its lease.
#[derive(Clone, Debug)]
pub struct AcquireOptions {
    /// Exclusive, shared, or a semaphore permit.
    pub kind: LeaseKind,
    /// Lease TTL.
    pub ttl: Duration,
    /// How long to wait in total for a busy lock.
    pub wait: Duration,
    /// Who holds it, shown by `status` and in `lock_busy` answers.
    pub owner: Option<String>,
    /// Lock-delay after an expiry, if not the broker's default.
    pub lock_delay: Option<Duration>,
    /// Ask for first-come-first-served waiting (brokers that support it).
    pub fair: bool,
}

/// A granted lease and when the request that got it was sent: the lease
/// cannot expire before `sent + ttl` by the local monotonic clock. For a
/// request that waited, that bound may lie in the past although the lease
/// is fresh: it was granted somewhere between `sent` and `received`.
pub struct Granted {
    /// The `200` body: name, token, fence, ttl_ms, expires_at_ms, owner, and
    /// `mode` for a lock lease or `limit` for a permit.
    pub body: Value,
    /// When the successful request left.
    pub sent: Instant,
    /// When its answer arrived.
    pub received: Instant,
}

impl Broker {
    /// A client for `base` (`http://` or `https://host:port`), sending
    /// `api_key` as a bearer token and, for https, trusting the system's roots
    /// plus `ca_cert` (PEM) if given.
    pub fn new(base: &str, api_key: Option<&str>, ca_cert: Option<&[u8]>) -> Result<Self, String> {
        let base = Url::parse(base).map_err(|e| format!("broker URL {base:?}: {e}"))?;
        match base.scheme() {
            "http" | "https" => {}
            other => return Err(format!("broker URL: unsupported scheme {other:?}")),
        }
        let mut headers = HeaderMap::new();
        if let Some(key) = api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| "the API key contains characters a header cannot carry".to_owned())?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let extra = ca_cert.map(tls::read_pem).transpose()?.unwrap_or_default();
        let with_ca_cert = !extra.is_empty();
        let mut builder = reqwest::Client::builder();
        if base.scheme() == "https" {
            builder = builder.use_preconfigured_tls(tls::client_config(extra)?);
        }
        let http = builder
            .default_headers(headers)
            .user_agent(concat!("lockctl/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| format!("HTTP client: {}", e.without_url()))?;
        let mut shown = base.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        let shown = shown.as_str().trim_end_matches('/').to_owned();
        Ok(Self {
            http,
            base,
            shown,
            with_ca_cert,
        })
    }

    /// The base URL, as given.
    pub fn base(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// `POST /v1/locks/{name}/acquire`, or `/v1/semaphores/{name}/acquire`
    /// for a permit, waiting up to `options.wait` in total.
    ///
    /// Busy answers are re-asked until the local deadline (the broker caps one
    /// wait), and transient failures are retried with the same `request_id`,
    /// which the broker answers with the same lease if the first try got it.
    pub async fn acquire(
        &self,
        name: &str,
        options: &AcquireOptions,
    ) -> Result<Granted, BrokerError> {
        let request_id = random_id();
        let deadline = Instant::now() + options.wait;
        let path = route(options.kind.family(), name, "/acquire");
        let mut failures = 0u32;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let body = acquire_body(options, request_id.clone(), remaining);
            let sent = Instant::now();
            let error = match self
                .call(Method::POST, &path, Some(body), remaining + REQUEST_TIMEOUT)
                .await
            {
                Ok(body) => {
                    let received = Instant::now();
                    return Ok(Granted {
                        body,
                        sent,
                        received,
                    });
                }
                Err(error) => error,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if error.is_busy() && !remaining.is_zero() {
                // The broker ended its (capped) wait early: ask again, gently.
                tokio::time::sleep(remaining.min(Duration::from_millis(50))).await;
            } else if error.is_transient()
                && (failures < 2 || !remaining.is_zero())
                && request_id.is_some()
            {
                failures += 1;
                let backoff = Duration::from_millis(200 << failures.min(3));
                let pause = error
                    .retry_after()
                    .unwrap_or(backoff)
                    .min(Duration::from_secs(2));
                tokio::time::sleep(pause.min(remaining.max(backoff))).await;
            } else {
                return Err(error);
            }
        }
    }

    /// `POST /v1/{family}/{name}/extend`: the remaining TTL becomes `ttl`.
    pub async fn extend(
        &self,
        family: Family,
        name: &str,
        token: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = wire(&ExtendBody::new(token, Some(millis(ttl))));
        let path = route(family, name, "/extend");
        self.call(Method::POST, &path, Some(body), timeout).await
    }

    /// `POST /v1/{family}/{name}/release`.
    pub async fn release(
        &self,
        family: Family,
        name: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = wire(&ReleaseBody::new(token));
        let path = route(family, name, "/release");
        self.call(Method::POST, &path, Some(body), timeout).await
    }

    /// `GET /v1/locks/{name}` (a LockStatus) or `GET /v1/semaphores/{name}`
    /// (a SemaphoreStatus).
    pub async fn status(&self, family: Family, name: &str) -> Result<Value, BrokerError> {
        let path = route(family, name, "");
        self.call(Method::GET, &path, None, REQUEST_TIMEOUT).await
    }

    /// `GET /v1/locks/{name}/fence/{fence}` or its semaphore twin (a FenceCheck).
    pub async fn check_fence(
        &self,
        family: Family,
        name: &str,
        fence: u64,
    ) -> Result<Value, BrokerError> {
        let path = route(family, name, &format!("/fence/{fence}"));
        self.call(Method::GET, &path, None, REQUEST_TIMEOUT).await
    }

    /// One request to `path` (from [`route`]) under the base URL.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let url = format!("{}{path}", self.base());
        let mut request = self.http.request(method, url).timeout(timeout);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
        let body: Option<Value> = serde_json::from_slice(&bytes).ok();
        match body {
            Some(body) if status.is_success() && body.is_object() => Ok(body),
            _ if status.is_success() => Err(not_the_api(status)),
            _ => Err(refusal(status, retry_after, &bytes)),
        }
    }
}

impl Broker {
    /// A transport failure as a [`BrokerError`]: a TLS failure told in words,
    /// or the innermost cause of an unreachable broker (reqwest and hyper
    /// wrap it in layers that say only "error sending request").
    fn transport(&self, error: reqwest::Error) -> BrokerError {
        let error = error.without_url();
        let url = self.shown.clone();
        if let Some(failure) = tls::find_error(&error) {
            let reason = tls::explain(failure, self.with_ca_cert);
            return BrokerError::Tls { url, reason };
        }
        let cause = if error.is_timeout() {
            "timed out".to_owned()
        } else {
            let mut innermost: &dyn std::error::Error = &error;
            while let Some(next) = innermost.source() {
                innermost = next;
            }
            let text = innermost.to_string();
            if error.is_connect() {
                format!("cannot connect: {text}")
            } else {
                text
            }
        };
        BrokerError::Unreachable { url, cause }
    }
}

/// The path of `suffix` (`/acquire`, `/extend`, `/release`, or empty for
/// the status) for `name` in `family`, e.g. `/v1/semaphores/etl/acquire`.
fn route(family: Family, name: &str, suffix: &str) -> String {
    let family = match family {
        Family::Locks => "locks",
        Family::Semaphores => "semaphores",
    };
    format!("/v1/{family}/{}{suffix}", encode_segment(name))
}

/// The acquire body: the API's lock acquire body, plus `"mode": "shared"`
/// for a shared lease or `"limit"` for a permit. An exclusive acquire sends
/// no `mode` (the broker's default), so it still reaches a broker from before
/// shared locks, whose request types refuse fields they do not know.
// `..Default::default()` covers every field today, but keeps this building
// when the API crate's body gains fields (such as `mode`).
#[allow(clippy::needless_update)]
fn acquire_body(options: &AcquireOptions, request_id: Option<String>, wait: Duration) -> Value {
    let mut body = wire(&AcquireBody {
        ttl_ms: Some(millis(options.ttl)),
        wait_ms: Some(millis(wait)),
        owner: options.owner.clone(),
        request_id,
        lock_delay_ms: options.lock_delay.map(millis),
        fair: options.fair.then_some(true),
        ..AcquireBody::default()
    });
    if let Value::Object(fields) = &mut body {
        match options.kind {
            LeaseKind::Exclusive => {}
            LeaseKind::Shared => {
                fields.insert("mode".to_owned(), Value::from("shared"));
            }
            LeaseKind::Permit { limit } => {
                // A semaphore takes no mode, should the lock body ever send one.
                fields.remove("mode");
                fields.insert("limit".to_owned(), Value::from(limit));
            }
        }
    }
    body
}

/// Percent-encodes everything outside the lock-name alphabet, so a bad name
/// reaches the broker (which says what is wrong) instead of another route.
fn encode_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b':') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// 128 random bits as hex, for `request_id`; `None` without `/dev/urandom`,
/// in which case acquires are not retried (a retry could not be matched).
fn random_id() -> Option<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A request body as JSON, from the API's own wire type.
fn wire(body: &impl serde::Serialize) -> Value {
    serde_json::to_value(body).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(kind: LeaseKind) -> AcquireOptions {
        AcquireOptions {
            kind,
            ttl: Duration::from_secs(30),
            wait: Duration::ZERO,
            owner: Some("host:1".to_owned()),
            lock_delay: None,
            fair: false,
        }
    }

    #[test]
    fn each_family_has_its_own_routes() {
        assert_eq!(
            route(Family::Locks, "job", "/acquire"),
            "/v1/locks/job/acquire"
        );
        assert_eq!(
            route(Family::Semaphores, "etl", "/extend"),
            "/v1/semaphores/etl/extend"
        );
        assert_eq!(route(Family::Semaphores, "a b", ""), "/v1/semaphores/a%20b");
        assert_eq!(LeaseKind::Shared.family(), Family::Locks);
        assert_eq!(LeaseKind::Permit { limit: 3 }.family(), Family::Semaphores);
    }

    #[test]
    fn only_shared_and_permit_acquires_add_a_field() {
        let exclusive = acquire_body(&options(LeaseKind::Exclusive), None, Duration::ZERO);
        assert_eq!(exclusive["ttl_ms"], 30_000);
        assert_eq!(exclusive["owner"], "host:1");
        assert!(exclusive.get("mode").is_none(), "{exclusive}");
        assert!(exclusive.get("limit").is_none(), "{exclusive}");

        let shared = acquire_body(&options(LeaseKind::Shared), None, Duration::ZERO);
        assert_eq!(shared["mode"], "shared");
        assert!(shared.get("limit").is_none(), "{shared}");

        let id = Some("r1".to_owned());
        let wait = Duration::from_millis(1500);
        let permit = acquire_body(&options(LeaseKind::Permit { limit: 3 }), id, wait);
        assert_eq!(permit["limit"], 3);
        assert_eq!(permit["wait_ms"], 1500);
        assert_eq!(permit["request_id"], "r1");
        assert!(permit.get("mode").is_none(), "{permit}");
    }
}
