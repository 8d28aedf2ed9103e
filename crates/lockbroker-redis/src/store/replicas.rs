//! Replica acknowledgement (`redis.min_replicas_acked`): after a script that
//! changed a lease, `WAIT` on the connection that ran it, so that the answer
//! says whether enough replicas have the change.
//!
//! `WAIT` counts the replicas that acknowledged every write the connection
//! sent before it, the script's included. That narrows what a failover can
//! lose, but it is not consensus: a replica that acknowledged can still lose
//! the write, or not be the one promoted (docs/sentinel.md).

use fred::clients::Client;
use fred::interfaces::ServerInterface;
use lockbroker_core::{
    AcquireOutcome, ExtendOutcome, LockName, Release, ReleaseOutcome, StoreError,
};

use super::RedisLockStore;
use crate::connection::{store_error, ReplicaAck};
use crate::scripts::calls::ReleaseCall;

/// How many replicas acknowledged everything `client` wrote so far, once
/// `ack.replicas` of them did or `ack.timeout` passed.
async fn replicas_acknowledging(client: &Client, ack: ReplicaAck) -> Result<u32, StoreError> {
    let timeout_ms = i64::try_from(ack.timeout.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let acked: i64 = client
        .wait(i64::from(ack.replicas), timeout_ms)
        .await
        .map_err(store_error)?;
    Ok(u32::try_from(acked).unwrap_or(0))
}

/// Whether enough replicas acknowledged, and how many did, for messages.
fn tally(acked: &Result<u32, StoreError>, ack: ReplicaAck) -> (bool, String) {
    match acked {
        Ok(count) => (*count >= ack.replicas, count.to_string()),
        Err(_) => (false, "an unknown number".to_owned()),
    }
}

impl RedisLockStore {
    fn ack_missed(&self, step: &'static str) {
        if let Some(observer) = &self.inner.observer {
            observer.replica_ack_missed(step);
        }
    }

    /// A grant stands only once enough replicas have it; otherwise it is
    /// released again and the acquire fails closed.
    pub(super) async fn grant_acknowledged(
        &self,
        client: &Client,
        name: &LockName,
        outcome: AcquireOutcome,
    ) -> Result<AcquireOutcome, StoreError> {
        let (Some(ack), AcquireOutcome::Granted(lease)) =
            (self.inner.settings.replica_ack, &outcome)
        else {
            return Ok(outcome);
        };
        let (enough, count) = tally(&replicas_acknowledging(client, ack).await, ack);
        if enough {
            return Ok(outcome);
        }
        self.ack_missed("acquire");
        let release = ReleaseCall {
            name,
            token: &lease.token,
            requeue: None,
        };
        let undone = match self.call_on(client, &release).await {
            Ok(_) => "undone",
            Err(_) => "left to expire at its TTL",
        };
        Err(StoreError::Unavailable(format!(
            "the grant reached {count} of the {} replicas required within {} ms and was {undone}",
            ack.replicas,
            ack.timeout.as_millis()
        )))
    }

    /// An extend that too few replicas have fails closed: a failover could
    /// bring back the earlier expiry, so the holder may count only on that.
    pub(super) async fn extend_acknowledged(
        &self,
        client: &Client,
        outcome: ExtendOutcome,
    ) -> Result<ExtendOutcome, StoreError> {
        let (Some(ack), ExtendOutcome::Extended(_)) = (self.inner.settings.replica_ack, &outcome)
        else {
            return Ok(outcome);
        };
        let (enough, count) = tally(&replicas_acknowledging(client, ack).await, ack);
        if enough {
            return Ok(outcome);
        }
        self.ack_missed("extend");
        Err(StoreError::Unavailable(format!(
            "the extend reached {count} of the {} replicas required within {} ms: count only on \
             the lease's earlier expiry",
            ack.replicas,
            ack.timeout.as_millis()
        )))
    }

    /// A release is done on the primary either way; the answer says whether
    /// enough replicas have it.
    pub(super) async fn release_acknowledged(
        &self,
        client: &Client,
        outcome: ReleaseOutcome,
    ) -> ReleaseOutcome {
        let (Some(ack), ReleaseOutcome::Released(release)) =
            (self.inner.settings.replica_ack, &outcome)
        else {
            return outcome;
        };
        let (enough, _) = tally(&replicas_acknowledging(client, ack).await, ack);
        if !enough {
            self.ack_missed("release");
        }
        ReleaseOutcome::Released(Release {
            acknowledged: Some(enough),
            ..*release
        })
    }
}
