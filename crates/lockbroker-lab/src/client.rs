//! [`BrokerClient`]: the steps the load takes, through the project's Rust
//! client ([`lockbroker_client`]), each answer reduced to an [`Outcome`] with
//! the local times it was sent and received; acquire-all and release-all
//! answer one outcome per lock they concern. Locks (exclusive or shared
//! leases) and semaphores (permits) take the same steps on routes of their
//! own; a [`LeaseKind`] or [`Family`] says which.
//!
//! Every step is one request, never retried, and no lease is renewed or
//! released behind the load's back: the checker must see every answer, and
//! only those. Acquires and releases, single or several at once, are sent
//! with [`Client::send_verbatim`], which keeps the broker's status and
//! error detail; extends and status reads are the client's typed calls.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockbroker_api::{
    AcquireAllBody, AcquireAllResponse, AcquireBody, LeaseRefBody, LeaseResponse, LockAskBody,
    LockMode, PermitResponse, ReleaseAllBody, ReleaseAllResponse, ReleaseBody, ReleaseResponse,
    RenewalResponse, SemaphoreAcquireBody,
};
use lockbroker_client::{Client, Family, LeaseKind, Route, VerbatimError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::history::family;

mod answers;
mod sessions;

use answers::{decode, not_the_api, refusal, refused, release_result, status_outcome, timed};
pub use answers::{Outcome, Timed};
pub use sessions::{Kept, OpenSession};

/// Microseconds since the Unix epoch by this machine's clock.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// A client for one broker's lock and semaphore routes.
#[derive(Clone)]
pub struct BrokerClient {
    client: Client,
    timeout: Duration,
}

impl BrokerClient {
    /// A client for the broker at `base` (`http://host:port`) whose requests
    /// give up after `timeout` (a waiting acquire: after its wait too), or
    /// why there can be none.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, String> {
        let client = Client::builder(base)
            .timeout(timeout)
            .user_agent(concat!("lockbroker-lab/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("a client of {base}: {e}"))?;
        Ok(Self { client, timeout })
    }

    /// The broker's base URL.
    pub fn base(&self) -> &str {
        self.client.base_url()
    }

    /// `POST /v1/locks/{lock}/acquire` of an exclusive lease; on a grant,
    /// the token comes back too.
    pub async fn acquire(&self, lock: &str, ttl_ms: u64, wait_ms: u64) -> (Timed, Option<String>) {
        self.acquire_kind(lock, LeaseKind::Exclusive, ttl_ms, wait_ms)
            .await
    }

    /// Acquires a lease of `kind` on `name`: `POST /v1/locks/{name}/acquire`
    /// (with `"mode": "shared"` for a shared lease; an exclusive one sends
    /// no mode, as before shared leases existed) or
    /// `POST /v1/semaphores/{name}/acquire` with the permit's limit. On a
    /// grant, the token comes back too.
    pub async fn acquire_kind(
        &self,
        name: &str,
        kind: LeaseKind,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> (Timed, Option<String>) {
        let route = Route::Acquire(family(kind), name);
        let mut token = None;
        let timed = match kind {
            LeaseKind::Exclusive | LeaseKind::Shared => {
                let body = AcquireBody {
                    mode: (kind == LeaseKind::Shared).then_some(LockMode::Shared),
                    ttl_ms: Some(ttl_ms),
                    wait_ms: Some(wait_ms),
                    ..AcquireBody::default()
                };
                self.once(route, &body, wait_ms, |lease: LeaseResponse| {
                    token = Some(lease.token);
                    Outcome::Granted {
                        fence: lease.fence,
                        ttl_ms: lease.ttl_ms,
                        expires_at_ms: lease.expires_at_ms,
                    }
                })
                .await
            }
            LeaseKind::Permit { limit } => {
                let body = SemaphoreAcquireBody {
                    limit: Some(u64::from(limit)),
                    ttl_ms: Some(ttl_ms),
                    wait_ms: Some(wait_ms),
                    ..SemaphoreAcquireBody::default()
                };
                self.once(route, &body, wait_ms, |permit: PermitResponse| {
                    token = Some(permit.token);
                    Outcome::Granted {
                        fence: permit.fence,
                        ttl_ms: permit.ttl_ms,
                        expires_at_ms: permit.expires_at_ms,
                    }
                })
                .await
            }
        };
        (timed, token)
    }

    /// `POST /v1/locks/{lock}/extend`.
    pub async fn extend(&self, lock: &str, token: &str, ttl_ms: u64) -> Timed {
        self.extend_in(Family::Locks, lock, token, ttl_ms).await
    }

    /// `POST /v1/{locks|semaphores}/{name}/extend`.
    pub async fn extend_in(&self, family: Family, name: &str, token: &str, ttl_ms: u64) -> Timed {
        let ttl = Duration::from_millis(ttl_ms);
        let send_us = now_us();
        let answer = match family {
            Family::Locks => self.client.extend(name, token, ttl).await,
            Family::Semaphores => self.client.extend_permit(name, token, ttl).await,
        };
        let outcome = match answer {
            Ok(RenewalResponse {
                fence,
                ttl_ms,
                expires_at_ms,
                ..
            }) => Outcome::Renewed {
                fence,
                ttl_ms,
                expires_at_ms,
            },
            Err(error) => refused(&error),
        };
        timed(send_us, outcome)
    }

    /// `POST /v1/locks/{lock}/release`.
    pub async fn release(&self, lock: &str, token: &str) -> Timed {
        self.release_in(Family::Locks, lock, token).await
    }

    /// `POST /v1/{locks|semaphores}/{name}/release`.
    pub async fn release_in(&self, family: Family, name: &str, token: &str) -> Timed {
        let route = Route::Release(family, name);
        let body = ReleaseBody::new(token);
        self.once(route, &body, 0, |release: ReleaseResponse| {
            Outcome::Released {
                fence: release.fence,
            }
        })
        .await
    }

    /// `POST /v1/locks/acquire-all` of a lease on every lock of `locks` (each
    /// exclusive or shared), or none: one answer per lock in the order
    /// asked, each with the request's times. A grant answers every lock
    /// `Granted` with its token; `423` answers the lock it names `Busy` and
    /// the others `Refused`; any other answer (none at all included) is the
    /// same `Failed` for every lock, whose outcome is unknown.
    pub async fn acquire_all(
        &self,
        locks: &[(String, LeaseKind)],
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Vec<(Timed, Option<String>)> {
        let body = AcquireAllBody {
            locks: Some(
                (locks.iter())
                    .map(|(name, kind)| LockAskBody {
                        name: Some(name.clone()),
                        mode: (*kind == LeaseKind::Shared).then_some(LockMode::Shared),
                    })
                    .collect(),
            ),
            ttl_ms: Some(ttl_ms),
            wait_ms: Some(wait_ms),
            ..AcquireAllBody::default()
        };
        let send_us = now_us();
        let answer = self.send(Route::AcquireAll, &body, wait_ms).await;
        let answers: Vec<(Outcome, Option<String>)> = match answer {
            Ok(body) => match decode::<AcquireAllResponse>(body) {
                Some(AcquireAllResponse { leases })
                    if leases.len() == locks.len()
                        && (leases.iter().zip(locks)).all(|(l, (name, _))| l.name == *name) =>
                {
                    (leases.into_iter())
                        .map(|lease| {
                            let granted = Outcome::Granted {
                                fence: lease.fence,
                                ttl_ms: lease.ttl_ms,
                                expires_at_ms: lease.expires_at_ms,
                            };
                            (granted, Some(lease.token))
                        })
                        .collect()
                }
                _ => locks.iter().map(|_| (not_the_api(), None)).collect(),
            },
            Err(error) => {
                let (outcome, detail) = refusal(error);
                let named = detail.and_then(|d| d.lock);
                (locks.iter())
                    .map(|(name, _)| match (&outcome, &named) {
                        (Outcome::Busy { .. }, Some(lock)) if lock != name => {
                            (Outcome::Refused, None)
                        }
                        (Outcome::Busy { .. }, None) => (Outcome::Refused, None),
                        _ => (outcome.clone(), None),
                    })
                    .collect()
            }
        };
        let recv_us = now_us();
        (answers.into_iter())
            .map(|(outcome, token)| {
                let timed = Timed {
                    send_us,
                    recv_us,
                    outcome,
                };
                (timed, token)
            })
            .collect()
    }

    /// `POST /v1/locks/release-all` of the lock leases `leases` (name and
    /// token): one answer per lease in the order given, each read as a
    /// single release's would be, with the request's times. An answer for
    /// the whole request that is not `200` is every lease's.
    pub async fn release_all(&self, leases: &[(&str, &str)]) -> Vec<Timed> {
        let body = ReleaseAllBody {
            leases: Some(
                (leases.iter())
                    .map(|(name, token)| LeaseRefBody {
                        name: Some((*name).to_owned()),
                        token: Some((*token).to_owned()),
                    })
                    .collect(),
            ),
        };
        let send_us = now_us();
        let outcomes: Vec<Outcome> = match self.send(Route::ReleaseAll, &body, 0).await {
            Ok(body) => match decode::<ReleaseAllResponse>(body) {
                Some(ReleaseAllResponse { results })
                    if results.len() == leases.len()
                        && (results.iter().zip(leases)).all(|(r, (name, _))| r.name == *name) =>
                {
                    results.into_iter().map(release_result).collect()
                }
                _ => leases.iter().map(|_| not_the_api()).collect(),
            },
            Err(error) => {
                let (outcome, _) = refusal(error);
                leases.iter().map(|_| outcome.clone()).collect()
            }
        };
        let recv_us = now_us();
        (outcomes.into_iter())
            .map(|outcome| Timed {
                send_us,
                recv_us,
                outcome,
            })
            .collect()
    }

    /// `GET /v1/locks/{lock}`.
    pub async fn status(&self, lock: &str) -> Timed {
        self.status_in(Family::Locks, lock).await
    }

    /// `GET /v1/{locks|semaphores}/{name}`.
    pub async fn status_in(&self, family: Family, name: &str) -> Timed {
        let send_us = now_us();
        let outcome = match family {
            Family::Locks => match self.client.status(name).await {
                Ok(status) => status_outcome(
                    status.held,
                    status.fence,
                    &status.holders,
                    status.holder_count,
                ),
                Err(error) => refused(&error),
            },
            Family::Semaphores => match self.client.semaphore_status(name).await {
                Ok(status) => {
                    status_outcome(status.held > 0, status.fence, &status.holders, status.held)
                }
                Err(error) => refused(&error),
            },
        };
        timed(send_us, outcome)
    }

    /// `GET /readyz` answered `200`.
    pub async fn ready(&self) -> bool {
        self.client.ready().await.is_ok()
    }

    /// Sends `body` to `route` once; a `200` answer decodes as `T` and
    /// becomes an outcome through `granted`.
    async fn once<T: DeserializeOwned>(
        &self,
        route: Route<'_>,
        body: &impl Serialize,
        wait_ms: u64,
        granted: impl FnOnce(T) -> Outcome,
    ) -> Timed {
        let send_us = now_us();
        let outcome = match self.send(route, body, wait_ms).await {
            Ok(body) => decode(body).map_or_else(not_the_api, granted),
            Err(error) => refusal(error).0,
        };
        timed(send_us, outcome)
    }

    /// One exchange with the broker, answered as it sent it; a request that
    /// may wait `wait_ms` in the broker gets that on top of the timeout.
    async fn send(
        &self,
        route: Route<'_>,
        body: &impl Serialize,
        wait_ms: u64,
    ) -> Result<Map<String, Value>, VerbatimError> {
        let timeout = self.timeout + Duration::from_millis(wait_ms);
        self.client.send_verbatim(route, Some(body), timeout).await
    }
}
