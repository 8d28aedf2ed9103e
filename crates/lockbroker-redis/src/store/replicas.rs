//! Replica acknowledgement (`redis.min_replicas_acked`): after a script that
//! changed a lease, `WAIT` on the connection that ran it, so that the answer
//! says whether enough replicas have the change.
//!
//! `WAIT` counts the replicas that acknowledged every write the connection
//! sent before it, the script's included. That narrows what a failover can
//! lose, but it is not consensus: a replica that acknowledged can still lose
//! the write, or not be the one promoted (docs/sentinel.md).

use fred::clients::Client;
use fred::interfaces::{ClientLike, ServerInterface};
use fred::types::config::Options;
use fred::types::ClusterHash;
use fred::util::redis_keyslot;
use lockbroker_core::{
    AcquireOutcome, ExtendOutcome, LockName, Release, ReleaseOutcome, SessionWrite, StoreError,
    Unacknowledged,
};

use super::RedisLockStore;
use crate::connection::{store_error, ReplicaAck};

/// How many replicas acknowledged everything `client` wrote so far to the
/// server holding `key`, once `ack.replicas` of them did or `ack.timeout`
/// passed. In a cluster the `WAIT` goes to the shard serving `key`'s slot,
/// on the connection that ran the script.
async fn replicas_acknowledging(
    client: &Client,
    key: &str,
    ack: ReplicaAck,
) -> Result<u32, StoreError> {
    let timeout_ms = i64::try_from(ack.timeout.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    let shard = Options {
        cluster_hash: Some(ClusterHash::Custom(redis_keyslot(key.as_bytes()))),
        ..Options::default()
    };
    // fred's command future is about 7 KiB: boxed, it is built only when a
    // step waits for replicas, instead of making every acquire, extend and
    // release future that large (and copied whole each time one is moved,
    // five times over in a quorum's fan-out).
    let shard = client.with_options(&shard);
    let acked: i64 = Box::pin(shard.wait(i64::from(ack.replicas), timeout_ms))
        .await
        .map_err(store_error)?;
    Ok(u32::try_from(acked).unwrap_or(0))
}

impl RedisLockStore {
    /// After a `step` (`acquire`, `extend`, `release`) that changed a lease
    /// on `client`'s connection, waits for the replicas. `None` when no
    /// acknowledgement is required or enough replicas gave it; otherwise the
    /// miss is counted and described, e.g. "reached 0 of the 1 replicas
    /// required within 100 ms".
    async fn shortfall(
        &self,
        client: &Client,
        name: &LockName,
        step: &'static str,
    ) -> Option<String> {
        let ack = self.inner.settings.replica_ack?;
        let key = self.inner.context.keys.lease(name);
        let count = match replicas_acknowledging(client, &key, ack).await {
            Ok(count) if count >= ack.replicas => return None,
            Ok(count) => count.to_string(),
            Err(_) => "an unknown number".to_owned(),
        };
        if let Some(observer) = &self.inner.observer {
            observer.replica_ack_missed(step);
        }
        Some(format!(
            "reached {count} of the {} required within {} ms",
            match ack.replicas {
                1 => "1 replica".to_owned(),
                many => format!("{many} replicas"),
            },
            ack.timeout.as_millis()
        ))
    }

    /// A grant stands only once enough replicas have it; otherwise it is
    /// released again and the acquire fails closed, saying that the lock was
    /// held briefly (or, when the release failed, stays held until its TTL).
    pub(super) async fn grant_acknowledged(
        &self,
        client: &Client,
        name: &LockName,
        outcome: AcquireOutcome,
    ) -> Result<AcquireOutcome, StoreError> {
        let AcquireOutcome::Granted(lease) = &outcome else {
            return Ok(outcome);
        };
        let Some(shortfall) = self.shortfall(client, name, "acquire").await else {
            return Ok(outcome);
        };
        // Undone by the release script of the lease's kind. A lease already
        // gone (expired while the replicas were awaited) holds nothing either.
        let change = match self
            .release_call(client, name, &lease.token, None, false, None)
            .await
        {
            Ok(_) => Unacknowledged::GrantReleased,
            Err(_) => Unacknowledged::GrantLeftToExpire {
                ttl_ms: lease.ttl_ms,
            },
        };
        Err(StoreError::Unacknowledged {
            change,
            detail: shortfall,
        })
    }

    /// An extend that too few replicas have fails closed: a failover could
    /// bring back the earlier expiry, so the holder may count only on that.
    pub(super) async fn extend_acknowledged(
        &self,
        client: &Client,
        name: &LockName,
        outcome: ExtendOutcome,
    ) -> Result<ExtendOutcome, StoreError> {
        if !matches!(outcome, ExtendOutcome::Extended(_)) {
            return Ok(outcome);
        }
        match self.shortfall(client, name, "extend").await {
            None => Ok(outcome),
            Some(shortfall) => Err(StoreError::Unacknowledged {
                change: Unacknowledged::Extend,
                detail: shortfall,
            }),
        }
    }

    /// A release is done on the primary either way; with acknowledgement
    /// required, the answer says whether enough replicas have it.
    pub(super) async fn release_acknowledged(
        &self,
        client: &Client,
        name: &LockName,
        outcome: ReleaseOutcome,
    ) -> ReleaseOutcome {
        let ReleaseOutcome::Released(release) = outcome else {
            return outcome;
        };
        if self.inner.settings.replica_ack.is_none() {
            return outcome;
        }
        let missed = self.shortfall(client, name, "release").await.is_some();
        ReleaseOutcome::Released(Release {
            acknowledged: Some(!missed),
            ..release
        })
    }

    /// A lease joins a session only once enough replicas have the session's
    /// record of it: a failover that lost the record would leave the lease
    /// out of the session's keepalives while its holder counts on them. The
    /// caller gives the lease back.
    pub(super) async fn session_write_acknowledged(
        &self,
        client: &Client,
        session: &LockName,
        written: SessionWrite,
    ) -> Result<SessionWrite, StoreError> {
        if !matches!(written, SessionWrite::Written { .. }) {
            return Ok(written);
        }
        match self.shortfall(client, session, "session").await {
            None => Ok(written),
            Some(shortfall) => Err(StoreError::Unavailable(format!(
                "the session's record of the lease {shortfall}; the lease was given back"
            ))),
        }
    }

    /// Renewals made in one step stand only once enough replicas have them:
    /// one `WAIT` covers the step, as for a single extend.
    pub(super) async fn renewals_acknowledged(
        &self,
        client: &Client,
        name: &LockName,
        outcomes: Vec<ExtendOutcome>,
    ) -> Result<Vec<ExtendOutcome>, StoreError> {
        if !outcomes
            .iter()
            .any(|o| matches!(o, ExtendOutcome::Extended(_)))
        {
            return Ok(outcomes);
        }
        match self.shortfall(client, name, "extend").await {
            None => Ok(outcomes),
            Some(shortfall) => Err(StoreError::Unacknowledged {
                change: Unacknowledged::Extend,
                detail: shortfall,
            }),
        }
    }
}
