//! [`TestApp`]: the broker in-process on port 0, with HTTP helpers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockbroker_api::{
    AcquireBody, ErrorDetail, ErrorResponse, ExtendBody, LeaseResponse, ReleaseBody,
};
use lockbroker_server::{Application, Settings};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::modes::Peers;
use crate::redis::RedisServer;

static NEXT_PREFIX: AtomicU32 = AtomicU32::new(0);

/// Settings for a test broker on `redis`: port 0, a key prefix of its own,
/// short timeouts so outage tests run fast.
pub fn test_settings(redis: &RedisServer) -> Settings {
    let mut settings = Settings {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        shutdown_grace_ms: 2_000,
        ..Settings::default()
    };
    settings.redis.url = redis.url();
    settings.redis.key_prefix = format!("t{}", NEXT_PREFIX.fetch_add(1, Ordering::Relaxed));
    settings.redis.command_timeout_ms = 500;
    settings.redis.connect_timeout_ms = 500;
    settings.log.level = "warn".into();
    settings
}

/// A broker serving on a loopback port until dropped or shut down.
pub struct TestApp {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The key prefix this broker writes under.
    pub prefix: String,
    /// A client with a short timeout, so a hung request fails the test.
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    /// In quorum or sentinel mode, the servers besides the test's own Redis.
    _peers: Option<Peers>,
}

/// A response: status, headers and the JSON body (`Null` if none). The body
/// stays raw JSON so tests can look at exactly what was sent; the typed
/// accessors decode it with the API's own types, so a body that strays from
/// them fails the test.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// Decoded JSON body.
    pub body: Value,
}

impl Reply {
    /// The body as `T`; panics when it is not one.
    pub fn decode<T: DeserializeOwned>(&self) -> T {
        serde_json::from_value(self.body.clone()).unwrap_or_else(|e| {
            panic!(
                "reply body is not a {}: {e}: {}",
                std::any::type_name::<T>(),
                self.body
            )
        })
    }

    /// The error of an error reply.
    pub fn error(&self) -> ErrorDetail {
        self.decode::<ErrorResponse>().error
    }

    /// The error code of an error reply; empty for any other reply.
    pub fn code(&self) -> &'static str {
        if self.body.get("error").is_none() {
            return "";
        }
        self.error().code.as_str()
    }

    /// The lease of a granted acquire.
    pub fn lease(&self) -> LeaseResponse {
        self.decode()
    }

    /// The token of a granted acquire.
    pub fn token(&self) -> String {
        self.lease().token
    }

    /// `body.fence`.
    pub fn fence(&self) -> u64 {
        self.body["fence"].as_u64().expect("reply has a fence")
    }
}

impl TestApp {
    /// A broker with the default test settings on `redis`.
    pub async fn spawn(redis: &RedisServer) -> Self {
        Self::spawn_with(test_settings(redis)).await
    }

    /// A broker with settings the test adjusted, once it says it is ready.
    pub async fn spawn_with(settings: Settings) -> Self {
        let app = Self::start_with(settings).await;
        app.wait_ready().await;
        app
    }

    /// A broker with settings the test adjusted, serving at once, ready or
    /// not.
    pub async fn start_with(mut settings: Settings) -> Self {
        lockbroker_server::telemetry::init(&settings.log);
        let peers = crate::modes::apply_test_mode(&mut settings.redis);
        let prefix = settings.redis.key_prefix.clone();
        let app = Application::build(settings).await.expect("broker starts");
        let base = format!("http://{}", app.local_addr());
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(app.run_until(async {
            let _ = stopped.await;
        }));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("http client");
        Self {
            base,
            prefix,
            http,
            stop: Some(stop),
            task: Some(task),
            _peers: peers,
        }
    }

    /// Records a last fence for lock `name` ten minutes ahead of `redis`'s
    /// clock, as the primary a failover left behind with a clock running
    /// ahead leaves it, and returns it. A fence is never below Redis's time
    /// in µs, so only fences above the clock show that the fence counter
    /// (and, after a data loss, the broker's floor) keeps them growing.
    pub fn put_fence_ahead(&self, redis: &RedisServer, name: &str) -> u64 {
        let mut conn = redis.conn();
        let time = conn.cmd(&["TIME"]);
        let seconds: u64 = (time.as_array()[0].as_text())
            .and_then(|s| s.parse().ok())
            .expect("TIME answers seconds");
        let ahead = (seconds + 600) * 1_000_000;
        let key = format!("{}:{{{name}}}:lease", self.prefix);
        conn.cmd(&["HSET", &key, "f", &ahead.to_string()]);
        ahead
    }

    /// Waits up to about five seconds for `/readyz` to answer `200`; panics
    /// when it never does. After Redis comes back the broker is ready only
    /// once its subscription is proven again, a moment after its first
    /// successful step.
    pub async fn wait_ready(&self) {
        for _ in 0..200 {
            if self.get("/readyz").await.status == StatusCode::OK {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("broker never became ready");
    }

    /// Triggers graceful shutdown and waits for the server to finish.
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.expect("server task"),
            None => Ok(()),
        }
    }

    /// Triggers graceful shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) -> Option<JoinHandle<std::io::Result<()>>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take()
    }

    /// `base` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends a request built on [`TestApp::http`], e.g. one with a bearer token.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        into_reply(request.send().await).await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Reply {
        into_reply(self.http.get(format!("{}{path}", self.base)).send().await).await
    }

    /// `POST path` with a raw body.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Reply {
        into_reply(
            self.http
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await,
        )
        .await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.post_raw(path, body.to_string()).await
    }

    /// `POST path` with one of the API's request bodies.
    pub async fn post_body(&self, path: &str, body: &impl Serialize) -> Reply {
        let json = serde_json::to_string(body).expect("request body serializes");
        self.post_raw(path, json).await
    }

    /// `POST /v1/locks/{name}/acquire` with `ttl_ms`.
    pub async fn acquire(&self, name: &str, ttl_ms: u64) -> Reply {
        let body = AcquireBody {
            ttl_ms: Some(ttl_ms),
            ..AcquireBody::default()
        };
        self.post_body(&format!("/v1/locks/{name}/acquire"), &body)
            .await
    }

    /// `POST /v1/locks/{name}/acquire` with an explicit body.
    pub async fn acquire_with(&self, name: &str, body: Value) -> Reply {
        self.post(&format!("/v1/locks/{name}/acquire"), body).await
    }

    /// `POST /v1/locks/{name}/extend`.
    pub async fn extend(&self, name: &str, token: &str, ttl_ms: u64) -> Reply {
        let body = ExtendBody::new(token, Some(ttl_ms));
        self.post_body(&format!("/v1/locks/{name}/extend"), &body)
            .await
    }

    /// `POST /v1/locks/{name}/release`.
    pub async fn release(&self, name: &str, token: &str) -> Reply {
        let body = ReleaseBody::new(token);
        self.post_body(&format!("/v1/locks/{name}/release"), &body)
            .await
    }

    /// `GET /v1/locks/{name}`.
    pub async fn status(&self, name: &str) -> Reply {
        self.get(&format!("/v1/locks/{name}")).await
    }

    /// The `/metrics` text; panics unless the scrape answers 200.
    pub async fn metrics(&self) -> String {
        let scrape = self
            .http
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("scrape");
        assert_eq!(scrape.status(), StatusCode::OK);
        scrape.text().await.expect("metrics text")
    }

    /// Sends `request` as raw bytes on a new connection (for requests no HTTP
    /// client sends) and returns what the broker answered before closing the
    /// connection or before `limit`; `None` if it was still open then.
    pub async fn raw_exchange(&self, request: &[u8], limit: Duration) -> Option<String> {
        let addr = self.base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        // The broker may answer and close before reading all of a large request.
        let _ = stream.write_all(request).await;
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return Some(String::from_utf8_lossy(&received).into()),
                Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
                Err(_) => return None,
            }
        }
    }
}

/// The status code and JSON body of a raw HTTP/1.1 answer.
pub fn parse_raw(answer: &str) -> (u16, Value) {
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let body = serde_json::from_str(body)
        .unwrap_or_else(|_| panic!("answer body is not JSON: {answer:?}"));
    (status, body)
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn into_reply(response: reqwest::Result<reqwest::Response>) -> Reply {
    let response = response.expect("request reaches the broker");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("read body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| panic!("body is not JSON: {}", String::from_utf8_lossy(&bytes)))
    };
    Reply {
        status,
        headers,
        body,
    }
}
