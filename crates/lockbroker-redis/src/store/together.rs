//! Every lease of an acquire-all in one step (`acquire_together.lua`), and
//! a session's renewals in one step (`extend_together.lua`), where every
//! name lives on one server: single and Sentinel mode.

use std::sync::atomic::Ordering;

use lockbroker_core::{
    AcquireOutcome, AcquireParams, ExtendOutcome, ExtendStep, StoreError, Together,
};

use super::RedisLockStore;
use crate::scripts::calls::{
    AcquireCall, AcquireTogetherCall, Acquired, AcquiredTogether, ExtendCall, ExtendPart,
    ExtendTogetherCall, Part,
};

impl RedisLockStore {
    /// `None` in Cluster mode (the names live on several shards) and for a
    /// quorum's node (the quorum takes them one by one on every node).
    pub(super) async fn grant_together(
        &self,
        all: &[AcquireParams<'_>],
    ) -> Option<Result<Together, StoreError>> {
        if self.inner.settings.cluster.is_some() || self.inner.node_index.is_some() {
            return None;
        }
        let first = all.first()?;
        Some(self.run_together(first, all).await)
    }

    async fn run_together(
        &self,
        first: &AcquireParams<'_>,
        all: &[AcquireParams<'_>],
    ) -> Result<Together, StoreError> {
        let floor = &self.inner.fence_floor;
        let fence_floor = floor.load(Ordering::Relaxed);
        let parts = (all.iter())
            .map(|params| {
                Part::of(AcquireCall {
                    params,
                    fence_floor,
                    epoch: None,
                })
            })
            .collect();
        // One connection, so that the replicas' acknowledgement below
        // counts this step.
        let client = self.client_for(first.name);
        let answer = self.call_on(client, &AcquireTogetherCall { parts }).await?;
        let acquired = match answer {
            AcquiredTogether::Refused { at, acquired } => {
                self.saw(&acquired);
                return Ok(Together::Refused {
                    at,
                    outcome: acquired.outcome,
                });
            }
            AcquiredTogether::Granted(acquired) => acquired,
        };
        let mut leases = Vec::with_capacity(acquired.len());
        for one in acquired {
            self.saw(&one);
            match one.outcome {
                AcquireOutcome::Granted(lease) => leases.push(lease),
                _ => {
                    return Err(StoreError::Protocol(
                        "a part of a grant was not granted".into(),
                    ))
                }
            }
        }
        if self.inner.settings.replica_ack.is_none() {
            return Ok(Together::Granted(leases));
        }
        // Every grant stands only once enough replicas have them all: one
        // `WAIT` covers the step; a shortfall gives every lease back.
        for (at, lease) in leases.iter().enumerate() {
            let outcome = AcquireOutcome::Granted(lease.clone());
            if let Err(error) =
                Box::pin(self.grant_acknowledged(client, &lease.name, outcome)).await
            {
                for other in (leases.iter()).enumerate().filter(|(i, _)| *i != at) {
                    let _ = (self.release_call(
                        client,
                        &other.1.name,
                        &other.1.token,
                        None,
                        false,
                        None,
                    ))
                    .await;
                }
                return Err(error);
            }
        }
        Ok(Together::Granted(leases))
    }

    /// `None` where the leases live on several servers, as for
    /// [`RedisLockStore::grant_together`].
    pub(super) async fn renew_together(
        &self,
        all: &[ExtendStep<'_>],
    ) -> Option<Result<Vec<ExtendOutcome>, StoreError>> {
        if self.inner.settings.cluster.is_some() || self.inner.node_index.is_some() {
            return None;
        }
        let first = all.first()?;
        let parts = (all.iter())
            .map(|step| {
                ExtendPart::of(ExtendCall {
                    name: step.name,
                    token: step.token,
                    ttl: step.ttl,
                    max_hold_ms: step.max_hold_ms,
                })
            })
            .collect();
        let client = self.client_for(first.name);
        let outcomes = match self.call_on(client, &ExtendTogetherCall { parts }).await {
            Ok(outcomes) => outcomes,
            Err(error) => return Some(Err(error)),
        };
        Some(
            self.renewals_acknowledged(client, first.name, outcomes)
                .await,
        )
    }

    /// Keeps the broker's fence floor above every fence a part reported.
    fn saw(&self, acquired: &Acquired) {
        let fence = match &acquired.outcome {
            AcquireOutcome::Granted(lease) => lease.fence,
            AcquireOutcome::Busy { blockers, .. } => blockers.holder.fence,
            AcquireOutcome::LimitConflict { .. } | AcquireOutcome::Contended => return,
        };
        self.inner
            .fence_floor
            .fetch_max(fence.get(), Ordering::Relaxed);
        if let (true, Some(observer)) = (acquired.floor_raised, &self.inner.observer) {
            observer.fence_floor_raised();
        }
    }
}
