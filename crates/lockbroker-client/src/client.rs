//! [`Client`] and its builder: one HTTP connection pool per broker, the API
//! key, TLS roots, timeouts, and the one function every route goes through.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lockbroker_api::{
    ExtendBody, FenceCheckResponse, ForceReleaseResponse, HealthResponse, RenewalResponse,
    SemaphoreStatusResponse, StatusResponse,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::lock::{millis, LockHandle, SemaphoreHandle};
use crate::tls;

/// Per-request timeout when none is set: finite, like everything here.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything outside the lock-name alphabet (`A-Z a-z 0-9 . _ - :`) is
/// percent-encoded, so a bad name reaches the broker, which says what is
/// wrong, instead of another route.
const NAME_ESCAPES: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'.')
    .remove(b'_')
    .remove(b'-')
    .remove(b':');

/// Where a name lives: the lock routes or the semaphore routes. A token
/// works only in the family that issued it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// `/v1/locks/{name}`: exclusive and shared leases.
    Locks,
    /// `/v1/semaphores/{name}`: permits.
    Semaphores,
}

/// `/v1/{family}/{name}{suffix}` with the name percent-encoded.
pub(crate) fn route(family: Family, name: &str, suffix: &str) -> String {
    let family = match family {
        Family::Locks => "locks",
        Family::Semaphores => "semaphores",
    };
    format!("/v1/{family}/{}{suffix}", encode(name))
}

/// A name or prefix as one percent-encoded path segment or query value.
pub(crate) fn encode(name: &str) -> String {
    utf8_percent_encode(name, NAME_ESCAPES).to_string()
}

/// A client of one broker. Cheap to clone: clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    /// The base URL without a trailing slash, and without user or password.
    pub(crate) base: String,
    pub(crate) timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// How to build a [`Client`]; see [`Client::builder`].
#[derive(Clone)]
pub struct ClientBuilder {
    base: String,
    api_key: Option<String>,
    ca_pem: Vec<Vec<u8>>,
    timeout: Duration,
    connect_timeout: Duration,
    user_agent: String,
    http2: bool,
}

// The API key is a secret: Debug says only whether there is one.
impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A password in the URL is a secret too.
        let base = match Url::parse(&self.base) {
            Ok(mut url) => {
                let _ = url.set_password(None);
                url.to_string()
            }
            Err(_) => "<not a URL>".to_owned(),
        };
        f.debug_struct("ClientBuilder")
            .field("base", &base)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("ca_pem", &self.ca_pem.len())
            .field("timeout", &self.timeout)
            .field("http2", &self.http2)
            .finish()
    }
}

impl ClientBuilder {
    /// Sends `key` as `Authorization: Bearer <key>` on every request.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Trusts the certificates in `pem` (a private CA, or a self-signed
    /// broker's own certificate) besides the system's roots. A self-signed
    /// certificate marked `CA:TRUE`, as `openssl req -x509` makes them, is
    /// trusted as the broker's own when it is that very certificate.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem.push(pem.into());
        self
    }

    /// How long one exchange may take (a waiting acquire gets its wait on
    /// top). 10 s by default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long opening a connection may take. 5 s by default.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The `User-Agent` to send, `lockbroker-client/VERSION` by default: a
    /// tool built on the client names itself in the broker's logs.
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Speaks HTTP/2 to the broker, so the client's requests share one
    /// connection however many are in flight: a process holding many
    /// acquires waiting at once keeps one connection open, not one per
    /// acquire. To an `http://` broker it speaks HTTP/2 from the first byte
    /// (prior knowledge), to an `https://` one it offers only HTTP/2 in the
    /// TLS handshake. The broker serves both; HTTP/1.1 by default.
    ///
    /// The broker lets one connection have `http.max_streams_per_connection`
    /// requests in progress (1,000 by default) and the client queues the
    /// rest, releases included: a process that waits on more locks than that
    /// at once needs more than one client.
    pub fn http2(mut self) -> Self {
        self.http2 = true;
        self
    }

    /// The client, or [`Error::Config`] for a bad URL, key or certificate.
    pub fn build(self) -> Result<Client, Error> {
        let config = |message: String| Error::Config { message };
        let mut url = Url::parse(&self.base).map_err(|e| config(format!("broker URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(config(format!(
                "broker URL: unsupported scheme {:?}",
                url.scheme()
            )));
        }
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                config("the API key contains characters a header cannot carry".into())
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(self.user_agent)
            .connect_timeout(self.connect_timeout);
        let mut roots = Vec::new();
        for pem in &self.ca_pem {
            roots.extend(tls::read_pem(pem).map_err(config)?);
        }
        // Only https needs the system's roots: plain http skips reading them.
        if url.scheme() == "https" {
            let mut tls = tls::client_config(roots).map_err(config)?;
            if self.http2 {
                tls.alpn_protocols = vec![b"h2".to_vec()];
            }
            builder = builder.use_preconfigured_tls(tls);
        }
        if self.http2 {
            builder = builder.http2_prior_knowledge();
        }
        let http = builder
            .build()
            .map_err(|e| config(format!("HTTP client: {}", e.without_url())))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base: url.as_str().trim_end_matches('/').to_owned(),
                timeout: self.timeout,
            }),
        })
    }
}

impl Client {
    /// A builder for the broker at `base_url` (`http://host:port` or
    /// `https://host:port`). A user or password in the URL is not sent:
    /// the broker takes API keys ([`ClientBuilder::api_key`]).
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base_url.into(),
            api_key: None,
            ca_pem: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            user_agent: concat!("lockbroker-client/", env!("CARGO_PKG_VERSION")).to_owned(),
            http2: false,
        }
    }

    /// A client for `base_url` with the defaults.
    pub fn new(base_url: impl Into<String>) -> Result<Self, Error> {
        Self::builder(base_url).build()
    }

    /// The broker's base URL, without credentials.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    /// The lock `name`: acquire exclusive or shared leases on it.
    pub fn lock(&self, name: impl Into<String>) -> LockHandle {
        LockHandle::new(self.clone(), name.into())
    }

    /// The semaphore `name` with `limit` permits: acquire one of them.
    pub fn semaphore(&self, name: impl Into<String>, limit: u32) -> SemaphoreHandle {
        SemaphoreHandle::new(self.clone(), name.into(), limit)
    }

    /// `GET /v1/locks/{name}`: the lock's state now. Never a token.
    pub async fn status(&self, name: &str) -> Result<StatusResponse, Error> {
        let path = route(Family::Locks, name, "");
        self.call(Method::GET, &path, None::<&()>, self.inner.timeout)
            .await
    }

    /// `GET /readyz`: whether the broker takes lock requests now (its store
    /// answers and it is not shutting down). A broker that is not ready
    /// answers [`Error::Unavailable`]; one that is not up, a transport error.
    pub async fn ready(&self) -> Result<HealthResponse, Error> {
        self.call(Method::GET, "/readyz", None::<&()>, self.inner.timeout)
            .await
    }

    /// `GET /v1/semaphores/{name}`: the semaphore's state now.
    pub async fn semaphore_status(&self, name: &str) -> Result<SemaphoreStatusResponse, Error> {
        let path = route(Family::Semaphores, name, "");
        self.call(Method::GET, &path, None::<&()>, self.inner.timeout)
            .await
    }

    /// `GET /v1/locks/{name}/fence/{fence}`: whether a valid lease of the lock
    /// carries exactly `fence` right now, for a resource that keeps no fences
    /// of its own (Chubby's sequencer check). Never a token. The answer may
    /// be stale by the time the resource acts on it: check, act, and keep the
    /// action shorter than `expires_in_ms`.
    pub async fn check_fence(&self, name: &str, fence: u64) -> Result<FenceCheckResponse, Error> {
        self.fence_check(Family::Locks, name, fence).await
    }

    /// `GET /v1/semaphores/{name}/fence/{fence}`: whether a valid permit of
    /// the semaphore carries exactly `fence` right now.
    pub async fn check_semaphore_fence(
        &self,
        name: &str,
        fence: u64,
    ) -> Result<FenceCheckResponse, Error> {
        self.fence_check(Family::Semaphores, name, fence).await
    }

    pub(crate) async fn fence_check(
        &self,
        family: Family,
        name: &str,
        fence: u64,
    ) -> Result<FenceCheckResponse, Error> {
        let path = route(family, name, &format!("/fence/{fence}"));
        self.call(Method::GET, &path, None::<&()>, self.inner.timeout)
            .await
    }

    /// `POST /v1/locks/{name}/extend`: the lease that `token` holds stays
    /// valid `ttl` from now, for a process that kept the name and token
    /// rather than the [`Lease`](crate::Lease), whose own
    /// [`extend`](crate::Lease::extend) also moves its local deadline.
    pub async fn extend(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<RenewalResponse, Error> {
        let timeout = self.inner.timeout;
        self.extend_token(Family::Locks, name, token, ttl, timeout)
            .await
    }

    /// `POST /v1/semaphores/{name}/extend`: [`Client::extend`] for a permit.
    pub async fn extend_permit(
        &self,
        name: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<RenewalResponse, Error> {
        let timeout = self.inner.timeout;
        self.extend_token(Family::Semaphores, name, token, ttl, timeout)
            .await
    }

    /// One extend of the lease `token` holds, within `timeout`.
    pub(crate) async fn extend_token(
        &self,
        family: Family,
        name: &str,
        token: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<RenewalResponse, Error> {
        let path = route(family, name, "/extend");
        let body = ExtendBody::new(token, Some(millis(ttl)));
        self.call(Method::POST, &path, Some(&body), timeout).await
    }

    /// `DELETE /v1/locks/{name}`: ends every lease of the lock, whoever holds
    /// it (the `admin` scope). Their holders learn it at their next renewal.
    pub async fn force_release(&self, name: &str) -> Result<ForceReleaseResponse, Error> {
        let path = route(Family::Locks, name, "");
        self.call(Method::DELETE, &path, None::<&()>, self.inner.timeout)
            .await
    }

    /// One exchange with the broker: `path` under the base URL, `body` as
    /// JSON, the answer decoded as `T` or mapped to an [`Error`].
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
        timeout: Duration,
    ) -> Result<T, Error> {
        let url = format!("{}{path}", self.inner.base);
        let mut request = self.inner.http.request(method, url).timeout(timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(Error::transport)?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response.bytes().await.map_err(Error::transport)?;
        if !status.is_success() {
            return Err(Error::from_answer(status.as_u16(), retry_after, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::Protocol {
            message: format!(
                "HTTP {} with a body that does not decode: {e}",
                status.as_u16()
            ),
        })
    }
}

/// The `Retry-After` header in whole seconds, if any.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_percent_encode_the_name() {
        assert_eq!(
            route(Family::Locks, "billing:42", "/acquire"),
            "/v1/locks/billing:42/acquire"
        );
        assert_eq!(route(Family::Semaphores, "etl", ""), "/v1/semaphores/etl");
        assert_eq!(
            route(Family::Locks, "a b/../c", ""),
            "/v1/locks/a%20b%2F..%2Fc"
        );
        assert_eq!(route(Family::Locks, "é?#", ""), "/v1/locks/%C3%A9%3F%23");
    }

    #[test]
    fn the_builder_never_shows_its_key() {
        let builder = Client::builder("http://u:sekrit-pw@127.0.0.1:1").api_key("sekrit-key");
        assert!(!format!("{builder:?}").contains("sekrit"), "{builder:?}");
        let client = builder.build().expect("client");
        assert!(!format!("{client:?}").contains("sekrit"));
    }

    #[test]
    fn a_bad_url_or_ca_is_a_config_error() {
        assert!(matches!(Client::new("ftp://x"), Err(Error::Config { .. })));
        let bad_ca = Client::builder("https://127.0.0.1:1")
            .ca_pem("not a pem")
            .build();
        assert!(matches!(bad_ca, Err(Error::Config { .. })), "{bad_ca:?}");
    }
}
