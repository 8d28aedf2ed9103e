//! The broker's HTTP API from lockctl's side: one method per route, each
//! answering the JSON body as the broker sent it (printed by `--json`) or a
//! [`BrokerError`] that knows its exit code.
//!
//! The exchanges themselves are [`lockbroker_client`]'s: routes and
//! percent-encoding, the API key, TLS with `--ca-cert`, transport failures.
//! What stays here is lockctl's own: its retry rule for acquires, and its
//! words and exit codes for each failure.
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

mod bodies;
mod error;
mod events;

use std::time::{Duration, Instant};

use lockbroker_api::{
    ExtendBody, LeaseRefBody, ReleaseAllBody, ReleaseBody, Secret, SessionOpenBody,
    SessionTokenBody,
};
use lockbroker_client::{Attempt, Client, Route, TransportKind, VerbatimError};
use serde::Serialize;
use serde_json::Value;

pub use error::BrokerError;
pub use events::{EventStream, Watched};
pub use lockbroker_api::sse::Message;
pub use lockbroker_client::Family;

use crate::duration::millis;
use crate::tls;
use bodies::{acquire_all_body, lock_body, permit_body};

/// Timeout for a request that does not wait for a lock.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker at a base URL, with the API key to send if any.
#[derive(Clone)]
pub struct Broker {
    client: Client,
    /// The base URL as given, without a trailing slash.
    base: String,
    /// Whether `--ca-cert` was given (TLS advice depends on it).
    with_ca_cert: bool,
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
    /// The token of a session to take the lease under, instead of a TTL and
    /// lock-delay of its own (its `Debug` never shows it).
    pub session: Option<Secret>,
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
        let mut builder = Client::builder(base)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("lockctl/", env!("CARGO_PKG_VERSION")));
        if let Some(key) = api_key {
            builder = builder.api_key(key);
        }
        if let Some(pem) = ca_cert {
            builder = builder.ca_pem(pem);
        }
        let client = builder.build().map_err(|error| {
            let message = match error {
                lockbroker_client::Error::Config { message } => message,
                other => other.to_string(),
            };
            // Name the option at fault: the URL alone builds, or it is the URL.
            let url_alone = Client::builder(base).build();
            let option = if ca_cert.is_some() && url_alone.is_ok() {
                "--ca-cert"
            } else {
                "--url"
            };
            format!("{option}: {message}")
        })?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_owned(),
            with_ca_cert: ca_cert.is_some(),
        })
    }

    /// The base URL, as given.
    pub fn base(&self) -> &str {
        &self.base
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
        let route = Route::Acquire(options.kind.family(), name);
        match options.kind {
            LeaseKind::Permit { limit } => {
                self.acquire_at(route, options.wait, |request_id, wait| {
                    permit_body(options, limit, request_id, wait)
                })
                .await
            }
            LeaseKind::Exclusive | LeaseKind::Shared => {
                self.acquire_at(route, options.wait, |request_id, wait| {
                    lock_body(options, request_id, wait)
                })
                .await
            }
        }
    }

    /// `POST /v1/locks/acquire-all`: a lease on every lock of `names` or on
    /// none, each lease as `options` asks (a lock lease: exclusive, or shared
    /// with [`LeaseKind::Shared`]). The body of the grant lists the leases in
    /// the order of `names`; a busy answer names the busy lock in `lock`.
    /// Retried as [`Self::acquire`] is.
    pub async fn acquire_all(
        &self,
        names: &[String],
        options: &AcquireOptions,
    ) -> Result<Granted, BrokerError> {
        self.acquire_at(Route::AcquireAll, options.wait, |request_id, wait| {
            acquire_all_body(names, options, request_id, wait)
        })
        .await
    }

    /// Every acquire, through the client's loop (one `request_id` for all
    /// attempts) with lockctl's retry rule: a busy lock is asked again every
    /// 50 ms while the wait lasts; a transient failure is retried twice
    /// even without a wait, and for as long as the wait lasts, after the
    /// broker's `Retry-After` or a backoff from 400 ms, at most 2 s.
    /// `body` makes the request for a `request_id` and the wait left.
    async fn acquire_at<B: Serialize>(
        &self,
        route: Route<'_>,
        wait: Duration,
        body: impl Fn(String, Duration) -> B,
    ) -> Result<Granted, BrokerError> {
        let mut failures = 0u32;
        let rule = |error: &VerbatimError, attempt: Attempt| {
            let error = self.failure(error.clone());
            let remaining = attempt.left;
            if error.is_busy() && !remaining.is_zero() {
                // The broker ended its (capped) wait early: ask again, gently.
                Some(remaining.min(Duration::from_millis(50)))
            } else if error.is_transient() && (failures < 2 || !remaining.is_zero()) {
                failures += 1;
                let backoff = Duration::from_millis(200 << failures.min(3));
                let pause = error
                    .retry_after()
                    .unwrap_or(backoff)
                    .min(Duration::from_secs(2));
                Some(pause.min(remaining.max(backoff)))
            } else {
                None
            }
        };
        let body = |request_id: &str, wait| body(request_id.to_owned(), wait);
        match self.client.acquire_verbatim(route, wait, body, rule).await {
            Ok(grant) => Ok(Granted {
                body: Value::Object(grant.body),
                sent: grant.sent,
                received: grant.received,
            }),
            Err(error) => Err(self.failure(error)),
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
        let body = ExtendBody::new(token, Some(millis(ttl)));
        self.call(Route::Extend(family, name), Some(&body), timeout)
            .await
    }

    /// `POST /v1/{family}/{name}/release`.
    pub async fn release(
        &self,
        family: Family,
        name: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = ReleaseBody::new(token);
        self.call(Route::Release(family, name), Some(&body), timeout)
            .await
    }

    /// `POST /v1/locks/release-all`: releases each `(name, token)` lease, and
    /// answers what became of each (`results`, in the order given).
    pub async fn release_all(
        &self,
        leases: &[(&str, &str)],
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = ReleaseAllBody {
            leases: Some(
                leases
                    .iter()
                    .map(|(name, token)| LeaseRefBody {
                        name: Some((*name).to_owned()),
                        token: Some((*token).to_owned()),
                    })
                    .collect(),
            ),
        };
        self.call(Route::ReleaseAll, Some(&body), timeout).await
    }

    /// `POST /v1/sessions`: a session whose leases stay valid `ttl` after
    /// each keepalive (a Session, token included).
    pub async fn open_session(
        &self,
        ttl: Duration,
        owner: Option<String>,
        lock_delay: Option<Duration>,
    ) -> Result<Value, BrokerError> {
        let body = SessionOpenBody {
            ttl_ms: Some(millis(ttl)),
            owner,
            lock_delay_ms: lock_delay.map(millis),
        };
        self.call(Route::OpenSession, Some(&body), REQUEST_TIMEOUT)
            .await
    }

    /// `POST /v1/sessions/{id}/keepalive`: the session and every lease under
    /// it stay valid its TTL from now (a SessionRenewal).
    pub async fn keep_session(
        &self,
        id: &str,
        token: &Secret,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = SessionTokenBody::new(token.0.as_str());
        self.call(Route::KeepSession(id), Some(&body), timeout)
            .await
    }

    /// `POST /v1/sessions/{id}/close`: ends the session and releases every
    /// lease under it (a SessionClosed).
    pub async fn close_session(
        &self,
        id: &str,
        token: &Secret,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        let body = SessionTokenBody::new(token.0.as_str());
        self.call(Route::CloseSession(id), Some(&body), timeout)
            .await
    }

    /// `GET /v1/locks/{name}` (a LockStatus) or `GET /v1/semaphores/{name}`
    /// (a SemaphoreStatus).
    pub async fn status(&self, family: Family, name: &str) -> Result<Value, BrokerError> {
        self.call(Route::Status(family, name), None::<&()>, REQUEST_TIMEOUT)
            .await
    }

    /// `GET /v1/locks/{name}/fence/{fence}` or its semaphore twin (a FenceCheck).
    pub async fn check_fence(
        &self,
        family: Family,
        name: &str,
        fence: u64,
    ) -> Result<Value, BrokerError> {
        let route = Route::Fence(family, name, fence);
        self.call(route, None::<&()>, REQUEST_TIMEOUT).await
    }

    /// One request to `route`, answered as the broker sent it.
    async fn call(
        &self,
        route: Route<'_>,
        body: Option<&impl Serialize>,
        timeout: Duration,
    ) -> Result<Value, BrokerError> {
        self.client
            .send_verbatim(route, body, timeout)
            .await
            .map(Value::Object)
            .map_err(|error| self.failure(error))
    }

    /// Why a call has no success body, in lockctl's terms: a TLS failure
    /// told in words (with advice that names `--ca-cert`), an unreachable
    /// broker named by its base URL without credentials.
    fn failure(&self, error: VerbatimError) -> BrokerError {
        let url = self.client.base_url().to_owned();
        match error {
            VerbatimError::Refused {
                status,
                retry_after,
                error,
            } => BrokerError::Rejected {
                status,
                error,
                retry_after,
            },
            VerbatimError::NotTheApi { message } => BrokerError::Unexpected(message),
            VerbatimError::Transport {
                tls: Some(failure), ..
            } => BrokerError::Tls {
                url,
                reason: tls::explain(&failure, self.with_ca_cert),
            },
            VerbatimError::Transport { kind, message, .. } => {
                let cause = match kind {
                    TransportKind::Connect => format!("cannot connect: {message}"),
                    _ => message,
                };
                BrokerError::Unreachable { url, cause }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Family, LeaseKind};

    #[test]
    fn each_kind_has_its_family() {
        assert_eq!(LeaseKind::Exclusive.family(), Family::Locks);
        assert_eq!(LeaseKind::Shared.family(), Family::Locks);
        assert_eq!(LeaseKind::Permit { limit: 3 }.family(), Family::Semaphores);
    }
}
