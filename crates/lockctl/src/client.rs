//! The broker's HTTP API from the client side: one method per route, each
//! answering the JSON body or a [`BrokerError`] that knows its exit code.
//!
//! Nothing here prints. Errors never carry the token or the API key: the
//! token travels only in request bodies, the key only in a sensitive header,
//! and transport errors name the broker's base URL without any user or
//! password in it, never a request's URL.

use std::fmt;
use std::time::{Duration, Instant};

use lockbroker_api::{AcquireBody, ExtendBody, ReleaseBody};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde_json::{json, Map, Value};

use crate::duration::millis;
use crate::exit;
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

/// Why a call did not return a success body.
#[derive(Debug)]
pub enum BrokerError {
    /// The broker answered with its `{"error": {...}}` body.
    Rejected {
        /// HTTP status.
        status: StatusCode,
        /// The `error` object as sent (code, message, holder details).
        error: Map<String, Value>,
        /// The `Retry-After` header, if any.
        retry_after: Option<Duration>,
    },
    /// No answer: connection refused, reset, or timed out.
    Unreachable {
        /// The broker's base URL, without credentials.
        url: String,
        /// What happened, in words.
        cause: String,
    },
    /// The TLS handshake failed: an untrusted or wrong certificate, or a
    /// broker that does not speak TLS.
    Tls {
        /// The broker's base URL, without credentials.
        url: String,
        /// Why, in words.
        reason: String,
    },
    /// An answer that is not this API (wrong URL, a proxy's error page).
    Unexpected(String),
}

/// How an acquire should ask for its lease.
#[derive(Clone, Debug)]
pub struct AcquireOptions {
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
    /// The `200` body: name, token, fence, ttl_ms, expires_at_ms, owner.
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

    /// `POST /v1/locks/{name}/acquire`, waiting up to `options.wait` in total.
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
        let mut failures = 0u32;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let body = wire(&AcquireBody {
                ttl_ms: Some(millis(options.ttl)),
                wait_ms: Some(millis(remaining)),
                owner: options.owner.clone(),
                request_id: request_id.clone(),
                lock_delay_ms: options.lock_delay.map(millis),
                fair: options.fair.then_some(true),
            });
            let sent = Instant::now();
            let error = match self
                .call(
                    Method::POST,
                    name,
                    "/acquire",
                    Some(body),
                    remaining + REQUEST_TIMEOUT,
                )
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
            if error.code() == "lock_busy" && !remaining.is_zero() {
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

    /// `POST /v1/locks/{name}/extend`: the remaining TTL becomes `ttl`.
    pub async fn extend(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = wire(&ExtendBody::new(token, Some(millis(ttl))));
        self.call(Method::POST, name, "/extend", Some(body), timeout)
            .await
    }

    /// `POST /v1/locks/{name}/release`.
    pub async fn release(
        &self,
        name: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = wire(&ReleaseBody::new(token));
        self.call(Method::POST, name, "/release", Some(body), timeout)
            .await
    }

    /// `GET /v1/locks/{name}`.
    pub async fn status(&self, name: &str) -> Result<Value, BrokerError> {
        self.call(Method::GET, name, "", None, REQUEST_TIMEOUT)
            .await
    }

    async fn call(
        &self,
        method: Method,
        name: &str,
        suffix: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let url = format!("{}/v1/locks/{}{suffix}", self.base(), encode_segment(name));
        let mut request = self.http.request(method, url).timeout(timeout);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = response.bytes().await.map_err(|e| self.transport(e))?;
        let body: Option<Value> = serde_json::from_slice(&bytes).ok();
        match body {
            Some(body) if status.is_success() && body.is_object() => Ok(body),
            Some(Value::Object(mut map)) if !status.is_success() => match map.remove("error") {
                Some(Value::Object(error)) => Err(BrokerError::Rejected {
                    status,
                    error,
                    retry_after,
                }),
                _ => Err(not_the_api(status)),
            },
            _ => Err(not_the_api(status)),
        }
    }
}

impl BrokerError {
    /// The broker's stable error code, or lockctl's own for failures with no answer.
    pub fn code(&self) -> &str {
        match self {
            Self::Rejected { error, .. } => error.get("code").and_then(Value::as_str).unwrap_or(""),
            Self::Unreachable { .. } => "broker_unreachable",
            Self::Tls { .. } => "tls_failure",
            Self::Unexpected(_) => "unexpected_reply",
        }
    }

    /// The exit code for this failure (see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        let status = match self {
            Self::Rejected { status, .. } => *status,
            Self::Unreachable { .. } | Self::Tls { .. } => return exit::UNAVAILABLE,
            Self::Unexpected(_) => return exit::SOFTWARE,
        };
        match self.code() {
            "lock_busy" => exit::BUSY,
            "lease_lost" => exit::LEASE_LOST,
            "max_hold_exceeded" => exit::MAX_HOLD,
            "invalid_request" | "payload_too_large" => exit::USAGE,
            _ if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN => {
                exit::NO_PERMISSION
            }
            _ if self.is_transient() => exit::UNAVAILABLE,
            _ => exit::SOFTWARE,
        }
    }

    /// Worth retrying: no answer, or an answer that says "not now". A
    /// certificate that is not trusted now will not be trusted in a second.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Tls { .. } | Self::Unexpected(_) => false,
            Self::Rejected { status, .. } => matches!(
                *status,
                StatusCode::TOO_MANY_REQUESTS
                    | StatusCode::BAD_GATEWAY
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::GATEWAY_TIMEOUT
            ),
        }
    }

    /// The `Retry-After` the broker asked for.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Rejected { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A number the error object carries, e.g. `expires_in_ms`.
    pub fn detail_u64(&self, key: &str) -> Option<u64> {
        match self {
            Self::Rejected { error, .. } => error.get(key).and_then(Value::as_u64),
            _ => None,
        }
    }

    /// The error in the API's own shape, for `--json` output.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Rejected { error, .. } => json!({ "error": error }),
            other => json!({ "error": { "code": other.code(), "message": other.to_string() } }),
        }
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected { status, error, .. } => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                write!(f, "{message} ({}, HTTP {})", self.code(), status.as_u16())?;
                if self.code() == "lock_busy" {
                    let owner = error
                        .get("owner")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown");
                    write!(f, "; holder: owner {owner}")?;
                    if let Some(fence) = self.detail_u64("fence") {
                        write!(f, ", fence {fence}")?;
                    }
                    if let Some(ms) = self.detail_u64("available_in_ms") {
                        write!(f, ", available in {ms} ms")?;
                    }
                }
                Ok(())
            }
            Self::Unreachable { url, cause } => write!(f, "broker unreachable at {url}: {cause}"),
            Self::Tls { url, reason } => {
                write!(f, "TLS failure with the broker at {url}: {reason}")
            }
            Self::Unexpected(what) => write!(f, "unexpected answer: {what}"),
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

fn not_the_api(status: StatusCode) -> BrokerError {
    BrokerError::Unexpected(format!(
        "HTTP {} without the broker's JSON body; is the URL a lockbroker?",
        status.as_u16()
    ))
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
