//! Leader election on one lock: [`Election::campaign`] waits until this
//! process holds the lock and answers a [`Leadership`] whose term is the
//! lease's fence, renewed in the background until lost or resigned.
//!
//! A term ends for good when its lease is lost: campaign again for a new one
//! (with a larger term). Pass the term to what the leader writes, so a leader
//! that stalled past its lease is refused once the next one wrote.

use std::time::Duration;

use reqwest::Method;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::client::{route, Client, Family};
use crate::error::{Error, LostReason};
use crate::lease::{Lease, LeaseEnd, Released};
use crate::lock::AcquireOptions;

/// The longest pause while the broker is unavailable.
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// The election on lock `name`; from [`Client::election`].
#[derive(Debug, Clone)]
pub struct Election {
    client: Client,
    name: String,
    options: AcquireOptions,
}

/// Who leads now, as the lock's status tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLeader {
    /// The leader's owner label.
    pub owner: Option<String>,
    /// The leader's term (its lease's fence).
    pub term: u64,
}

impl Client {
    /// The election on lock `name`: a 10 s TTL renewed every 3.3 s, owner
    /// `host:pid`, and terms of at most a day unless `options` say otherwise
    /// (see [`Election::with_options`]).
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election {
            client: self.clone(),
            name: name.into(),
            options: AcquireOptions {
                ttl: Duration::from_secs(10),
                max_hold: Duration::from_secs(24 * 3600),
                ..AcquireOptions::default()
            },
        }
    }
}

impl Election {
    /// Campaigns with these options (`ttl`, `owner`, `max_hold`, `fair`,
    /// `lock_delay`); `wait`, `mode` and `request_id` are the campaign's own.
    pub fn with_options(mut self, options: AcquireOptions) -> Self {
        self.options = options;
        self
    }

    /// Waits until this process leads, however long it takes: waiting
    /// acquires (each as long as the TTL) sent one after another, pausing
    /// while the broker is unavailable. Fails only for a refusal that waiting
    /// cannot change (a refused key, a bad name). Cancel it by dropping the
    /// future.
    pub async fn campaign(&self) -> Result<Leadership, Error> {
        let lock = self.client.lock(self.name.clone());
        let mut failures = 0u32;
        loop {
            let options = AcquireOptions {
                wait: self.options.ttl,
                mode: lockbroker_api::LockMode::Exclusive,
                request_id: None,
                ..self.options.clone()
            };
            match lock.lock(options).await {
                Ok(lease) => return Ok(Leadership { lease }),
                // The wait is over and another still leads: campaign on.
                Err(Error::Busy { .. }) => failures = 0,
                Err(error) if error.is_transient() => {
                    failures += 1;
                    let pause = Duration::from_millis(250) * (1 << failures.min(5));
                    let pause = error.retry_after().unwrap_or(pause).min(LONGEST_PAUSE);
                    tokio::time::sleep(pause).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Who leads now, if anyone: the exclusive holder of the lock.
    pub async fn leader(&self) -> Result<Option<CurrentLeader>, Error> {
        let path = route(Family::Locks, &self.name, "");
        let timeout = self.client.inner.timeout;
        let status: lockbroker_api::StatusResponse = self
            .client
            .call(Method::GET, &path, None::<&()>, timeout)
            .await?;
        let exclusive = status.mode.as_deref() == Some("exclusive");
        Ok(match (status.held && exclusive, status.fence) {
            (true, Some(term)) => Some(CurrentLeader {
                owner: status.owner,
                term,
            }),
            _ => None,
        })
    }
}

/// One term of leadership.
#[derive(Debug)]
pub struct Leadership {
    lease: Lease,
}

impl Leadership {
    /// The term: the lease's fence, larger for every new term.
    pub fn term(&self) -> u64 {
        self.lease.fence()
    }

    /// Whether this process still leads: false as soon as the lease is lost
    /// or past its local deadline.
    pub fn is_leader(&self) -> bool {
        self.lease.end().is_none() && !self.lease.remaining().is_zero()
    }

    /// Completes the moment the term ends.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lease.lost()
    }

    /// A token cancelled the moment the term ends.
    pub fn cancellation(&self) -> CancellationToken {
        self.lease.cancellation()
    }

    /// Why the term ended, once lost.
    pub fn lost_reason(&self) -> Option<LostReason> {
        match self.lease.end() {
            Some(LeaseEnd::Lost(reason)) => Some(reason),
            _ => None,
        }
    }

    /// The lease behind the term.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Steps down: releases the lease, so another campaign wins at once.
    pub async fn resign(self) -> Result<Released, Error> {
        self.lease.release().await
    }
}
