//! A keepalive's renewals: in one step where the store can (every lease on
//! one server), else the session's and then each lease's, all at once.

use std::sync::Arc;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{as_session, millis_since};
use crate::error::{LockError, StoreError};
use crate::lease::{LeaseToken, Renewal, Ttl};
use crate::name::LockName;
use crate::service::LockService;
use crate::session::{SessionMember, SessionToken};
use crate::store::{ExtendStep, LockStore};

/// The session's renewal and each lease's, by lease.
pub(super) type Renewals = (Renewal, Vec<(SessionMember, Result<Renewal, LockError>)>);

impl<S: LockStore> LockService<S> {
    /// A keepalive's renewals in one step, where the store can (every lease
    /// on one server): the session's and each lease's at one instant, to
    /// the same TTL. `None` when the store cannot.
    pub(super) async fn renew_together(
        self: &Arc<Self>,
        name: &LockName,
        token: &LeaseToken,
        members: Vec<SessionMember>,
        ttl: Ttl,
    ) -> Option<Result<(Renewal, Vec<(SessionMember, Result<Renewal, LockError>)>), LockError>>
    {
        let max_hold_ms = self.policy.max_hold_ms.unwrap_or(0);
        let steps: Vec<ExtendStep<'_>> = std::iter::once((name, token))
            .chain(members.iter().map(|m| (&m.name, &m.token)))
            .map(|(name, token)| ExtendStep {
                name,
                token,
                ttl,
                max_hold_ms,
            })
            .collect();
        let started = Instant::now();
        let outcomes = match self.store.extend_together(&steps).await? {
            Ok(outcomes) if outcomes.len() == steps.len() => outcomes,
            Ok(_) => return Some(Err(StoreError::Protocol("renewals missing".into()).into())),
            Err(error) => return Some(Err(error.into())),
        };
        let mut outcomes = outcomes.into_iter();
        let session = outcomes
            .next()
            .map(|o| self.extended(name, token, o, started));
        let renewal = match session {
            Some(Ok(renewal)) => renewal,
            Some(Err(error)) => return Some(Err(as_session(error))),
            None => return Some(Err(StoreError::Protocol("no session renewal".into()).into())),
        };
        let renewed = (members.into_iter().zip(outcomes))
            .map(|(member, outcome)| {
                let renewed = self.extended(&member.name, &member.token, outcome, started);
                (member, renewed)
            })
            .collect();
        Some(Ok((renewal, renewed)))
    }

    /// A keepalive's renewals one by one: the session's, then each lease's
    /// all at once, counted from the session's own step, so that none
    /// outlasts the session by more than the difference between the two
    /// steps' trips to the store.
    pub(super) async fn renew_one_by_one(
        self: &Arc<Self>,
        name: &LockName,
        token: &SessionToken,
        members: Vec<SessionMember>,
        ttl: Ttl,
    ) -> Result<Renewals, LockError> {
        let started = Instant::now();
        let renewal = self
            .extend_lease(name, token.lease(), Some(ttl.as_millis()))
            .await
            .map_err(as_session)?;
        let left = ttl.as_millis().saturating_sub(millis_since(started));
        let mut renewals = JoinSet::new();
        for member in members {
            let service = Arc::clone(self);
            renewals.spawn(async move {
                let renewed = service
                    .extend_lease(&member.name, &member.token, Some(left.max(1)))
                    .await;
                (member, renewed)
            });
        }
        let mut renewed = Vec::new();
        while let Some(joined) = renewals.join_next().await {
            if let Ok(one) = joined {
                renewed.push(one);
            }
        }
        Ok((renewal, renewed))
    }
}
