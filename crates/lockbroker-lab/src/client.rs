//! [`BrokerClient`]: acquire, extend, release and status over HTTP, each answer
//! reduced to an [`Outcome`] with the local times it was sent and received.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockbroker_api::{
    AcquireBody, ErrorCode, ErrorResponse, ExtendBody, LeaseResponse, ReleaseBody, ReleaseResponse,
    RenewalResponse, StatusResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

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
        let body = AcquireBody {
            ttl_ms: Some(ttl_ms),
            wait_ms: Some(wait_ms),
            ..AcquireBody::default()
        };
        let mut token = None;
        let timed = self
            .post(lock, "acquire", &body, |lease: LeaseResponse| {
                let outcome = Outcome::Granted {
                    fence: lease.fence,
                    ttl_ms: lease.ttl_ms,
                    expires_at_ms: lease.expires_at_ms,
                };
                token = Some(lease.token);
                outcome
            })
            .await;
        (timed, token)
    }

    /// `POST /v1/locks/{lock}/extend`.
    pub async fn extend(&self, lock: &str, token: &str, ttl_ms: u64) -> Timed {
        let body = ExtendBody::new(token, Some(ttl_ms));
        self.post(lock, "extend", &body, |renewal: RenewalResponse| {
            Outcome::Renewed {
                fence: renewal.fence,
                ttl_ms: renewal.ttl_ms,
                expires_at_ms: renewal.expires_at_ms,
            }
        })
        .await
    }

    /// `POST /v1/locks/{lock}/release`.
    pub async fn release(&self, lock: &str, token: &str) -> Timed {
        let body = ReleaseBody::new(token);
        self.post(lock, "release", &body, |release: ReleaseResponse| {
            Outcome::Released {
                fence: release.fence,
            }
        })
        .await
    }

    /// `GET /v1/locks/{lock}`.
    pub async fn status(&self, lock: &str) -> Timed {
        let send_us = now_us();
        let sent = self
            .http
            .get(format!("{}/v1/locks/{lock}", self.base))
            .send()
            .await;
        let outcome = answer(sent, |status: StatusResponse| Outcome::Status {
            held: status.held,
            fence: status.fence,
        })
        .await;
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

    /// Sends `body` to the `step` route of `lock`; a `200` answer decodes
    /// as `T` and becomes an outcome through `granted`.
    async fn post<T: DeserializeOwned>(
        &self,
        lock: &str,
        step: &str,
        body: &impl Serialize,
        granted: impl FnOnce(T) -> Outcome,
    ) -> Timed {
        let send_us = now_us();
        let sent = self
            .http
            .post(format!("{}/v1/locks/{lock}/{step}", self.base))
            .json(body)
            .send()
            .await;
        let outcome = answer(sent, granted).await;
        Timed {
            send_us,
            recv_us: now_us(),
            outcome,
        }
    }
}

/// The outcome of one answer: `granted` of its body on `200`, else what the
/// error body says.
async fn answer<T: DeserializeOwned>(
    sent: reqwest::Result<reqwest::Response>,
    granted: impl FnOnce(T) -> Outcome,
) -> Outcome {
    let Ok(reply) = sent else {
        return failed(0, None);
    };
    let status = reply.status().as_u16();
    let Ok(bytes) = reply.bytes().await else {
        return failed(0, None);
    };
    if status == 200 {
        return match serde_json::from_slice(&bytes) {
            Ok(body) => granted(body),
            Err(_) => failed(status, None),
        };
    }
    let error = serde_json::from_slice::<ErrorResponse>(&bytes)
        .ok()
        .map(|body| body.error);
    match (status, error) {
        (423, error) => Outcome::Busy {
            fence: error.and_then(|e| e.fence),
        },
        (409, Some(error)) if error.code == ErrorCode::LeaseLost => Outcome::Lost,
        (status, error) => failed(status, error.map(|e| e.code)),
    }
}

fn failed(status: u16, code: Option<ErrorCode>) -> Outcome {
    Outcome::Failed {
        status,
        code: code.map_or("", ErrorCode::as_str).to_owned(),
    }
}
