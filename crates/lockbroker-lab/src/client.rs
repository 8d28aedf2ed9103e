//! [`BrokerClient`]: acquire, extend, release and status over HTTP, each answer
//! reduced to an [`Outcome`] with the local times it was sent and received.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// Microseconds since the Unix epoch by this machine's clock.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What one lock request came back with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `200` to an acquire: a new lease.
    Granted {
        /// The lease's fence.
        fence: u64,
        /// Its validity from the grant, in ms.
        ttl_ms: u64,
        /// When it expires, Unix ms by the Redis clock.
        expires_at_ms: u64,
    },
    /// `200` to an extend.
    Renewed {
        /// The lease's fence (unchanged by an extend).
        fence: u64,
        /// The new remaining validity, in ms.
        ttl_ms: u64,
        /// The new expiry, Unix ms by the Redis clock.
        expires_at_ms: u64,
    },
    /// `200` to a release.
    Released {
        /// The released lease's fence.
        fence: u64,
    },
    /// `423`: another lease (or its lock-delay) holds the lock.
    Busy {
        /// The holder's fence.
        fence: Option<u64>,
    },
    /// `409 lease_lost`: the token holds no valid lease.
    Lost,
    /// `200` to a status read.
    Status {
        /// Whether a valid lease holds the lock.
        held: bool,
        /// The last fence issued for the lock.
        fence: Option<u64>,
    },
    /// Anything else: `status` 0 when no HTTP answer came at all.
    Failed {
        /// HTTP status, or 0 for a transport error.
        status: u16,
        /// `error.code` of the body, if any.
        code: String,
    },
}

impl Outcome {
    /// Whether the broker said it could not reach Redis (`503`), the one
    /// error a healthy broker gives under a store fault.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Failed { status: 503, .. })
    }
}

/// One request's outcome with its local send and receive times.
#[derive(Clone, Debug)]
pub struct Timed {
    /// Local clock when the request was sent, µs.
    pub send_us: i64,
    /// Local clock when the answer arrived, µs.
    pub recv_us: i64,
    /// The answer.
    pub outcome: Outcome,
}

/// A client for one broker's lock routes.
#[derive(Clone)]
pub struct BrokerClient {
    http: reqwest::Client,
    base: String,
}

impl BrokerClient {
    /// A client for the broker at `base` (`http://host:port`) whose requests
    /// give up after `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .unwrap_or_default();
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    /// The broker's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/locks/{lock}/acquire`; on a grant, the token comes back too.
    pub async fn acquire(&self, lock: &str, ttl_ms: u64, wait_ms: u64) -> (Timed, Option<String>) {
        let body = json!({ "ttl_ms": ttl_ms, "wait_ms": wait_ms });
        let (timed, body) = self.post(lock, "acquire", body).await;
        let token = match timed.outcome {
            Outcome::Granted { .. } => body["token"].as_str().map(str::to_owned),
            _ => None,
        };
        (timed, token)
    }

    /// `POST /v1/locks/{lock}/extend`.
    pub async fn extend(&self, lock: &str, token: &str, ttl_ms: u64) -> Timed {
        let body = json!({ "token": token, "ttl_ms": ttl_ms });
        self.post(lock, "extend", body).await.0
    }

    /// `POST /v1/locks/{lock}/release`.
    pub async fn release(&self, lock: &str, token: &str) -> Timed {
        self.post(lock, "release", json!({ "token": token }))
            .await
            .0
    }

    /// `GET /v1/locks/{lock}`.
    pub async fn status(&self, lock: &str) -> Timed {
        let send_us = now_us();
        let sent = self
            .http
            .get(format!("{}/v1/locks/{lock}", self.base))
            .send()
            .await;
        let (status, body) = read(sent).await;
        let outcome = match status {
            200 => Outcome::Status {
                held: body["held"].as_bool().unwrap_or(false),
                fence: body["fence"].as_u64(),
            },
            _ => failed(status, &body),
        };
        Timed {
            send_us,
            recv_us: now_us(),
            outcome,
        }
    }

    /// `GET /readyz` answered `200`.
    pub async fn ready(&self) -> bool {
        matches!(
            self.http.get(format!("{}/readyz", self.base)).send().await,
            Ok(reply) if reply.status().is_success()
        )
    }

    async fn post(&self, lock: &str, step: &str, body: Value) -> (Timed, Value) {
        let send_us = now_us();
        let sent = self
            .http
            .post(format!("{}/v1/locks/{lock}/{step}", self.base))
            .json(&body)
            .send()
            .await;
        let (status, body) = read(sent).await;
        let outcome = match (status, step) {
            (200, "acquire") => Outcome::Granted {
                fence: body["fence"].as_u64().unwrap_or(0),
                ttl_ms: body["ttl_ms"].as_u64().unwrap_or(0),
                expires_at_ms: body["expires_at_ms"].as_u64().unwrap_or(0),
            },
            (200, "extend") => Outcome::Renewed {
                fence: body["fence"].as_u64().unwrap_or(0),
                ttl_ms: body["ttl_ms"].as_u64().unwrap_or(0),
                expires_at_ms: body["expires_at_ms"].as_u64().unwrap_or(0),
            },
            (200, _) => Outcome::Released {
                fence: body["fence"].as_u64().unwrap_or(0),
            },
            (423, _) => Outcome::Busy {
                fence: body["error"]["fence"].as_u64(),
            },
            (409, _) if body["error"]["code"] == "lease_lost" => Outcome::Lost,
            _ => failed(status, &body),
        };
        let recv_us = now_us();
        (
            Timed {
                send_us,
                recv_us,
                outcome,
            },
            body,
        )
    }
}

async fn read(sent: reqwest::Result<reqwest::Response>) -> (u16, Value) {
    match sent {
        Ok(reply) => {
            let status = reply.status().as_u16();
            match reply.bytes().await {
                Ok(bytes) => (
                    status,
                    serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                ),
                Err(_) => (0, Value::Null),
            }
        }
        Err(_) => (0, Value::Null),
    }
}

fn failed(status: u16, body: &Value) -> Outcome {
    Outcome::Failed {
        status,
        code: body["error"]["code"].as_str().unwrap_or("").to_owned(),
    }
}
