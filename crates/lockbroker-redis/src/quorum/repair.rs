//! Quorum mode: what follows a grant on some of the nodes: undoing one no
//! majority made, taking a granted waiter out of the other nodes' queues, and
//! writing a grant's fence back to the nodes behind it.

use futures_util::future::join_all;
use lockbroker_core::{AcquireParams, Fence, LeaseToken, LockName, LockStore};

use super::QuorumStore;
use crate::scripts::calls::{AdoptFenceCall, Adoption};
use crate::store::RedisLockStore;

impl QuorumStore {
    /// Undoes a grant that did not reach a majority on the nodes `at` where
    /// it may have been made, putting a fair waiter back in line there;
    /// best effort, each within its timeout.
    pub(super) async fn roll_back(
        &self,
        params: &AcquireParams<'_>,
        tokens: &[(usize, LeaseToken)],
    ) {
        let nodes = &self.inner.nodes;
        join_all(
            tokens
                .iter()
                .map(|(at, token)| nodes[*at].undo_grant(params.name, token, params.fair)),
        )
        .await;
    }

    /// Takes a fair waiter that a majority granted out of the queues of the
    /// nodes that did not grant it, in the background, so its entry does not
    /// stand first in line there until it expires.
    pub(super) fn leave_other_queues(&self, name: &LockName, waiter_id: &str, granted: &[usize]) {
        let others: Vec<RedisLockStore> = (self.inner.nodes.iter().enumerate())
            .filter(|(at, _)| !granted.contains(at))
            .map(|(_, node)| node.clone())
            .collect();
        if others.is_empty() {
            return;
        }
        let (name, waiter_id) = (name.clone(), waiter_id.to_owned());
        tokio::spawn(async move {
            join_all(
                others
                    .iter()
                    .map(|node| node.leave_queue(&name, &waiter_id)),
            )
            .await;
        });
    }

    /// Writes `fence` back to the nodes that granted; how many in good
    /// standing took it.
    pub(super) async fn adopt(
        &self,
        name: &LockName,
        fence: Fence,
        grants: &[(usize, LeaseToken)],
    ) -> usize {
        let inner = &self.inner;
        let adoptions = join_all(grants.iter().map(|(at, token)| async move {
            let epoch = inner.standing.epoch(*at)?;
            let call = AdoptFenceCall {
                name,
                token,
                fence,
                epoch: &epoch,
            };
            inner.nodes[*at].adopt_fence(&call).await.ok()
        }))
        .await;
        if adoptions.contains(&Some(Adoption::NotInStanding)) {
            inner.standing.recheck();
        }
        adoptions
            .into_iter()
            .filter(|adoption| *adoption == Some(Adoption::Adopted))
            .count()
    }
}
