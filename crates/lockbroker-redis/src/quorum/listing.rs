//! A name's state as a majority of nodes sees it, and the quorum's listing:
//! held locks, walked node by node, each listed once with that state.

use lockbroker_core::{
    ListCursor, ListRequest, LockEntry, LockName, LockPage, LockStatus, LockStore, StoreError,
};

use super::fan_out::{in_hand, Answers, Progress};
use super::{tally, QuorumStore};

impl QuorumStore {
    /// Every node's status of `name`, gathered until `decided` says the
    /// answers in hand are enough.
    pub(super) async fn statuses(
        &self,
        name: &LockName,
        decided: impl Fn(&Progress<'_, LockStatus>) -> bool,
    ) -> Answers<LockStatus> {
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let name = name.clone();
                    async move { node.status(&name).await }
                },
                decided,
            )
            .await;
        late.finish();
        answers
    }

    /// One page of [`LockStore::list`]: the locks of one node's keyspace
    /// page, each with the state a majority sees. A page not yet full goes
    /// on to the next node, so that a listing that fits one page ends on it
    /// (`next_cursor` null), as on one Redis.
    pub(super) async fn list_page(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        let nodes = &self.inner.nodes;
        // The cursor names a node (top byte) and a place in its keyspace. Nodes
        // are walked in order; a lock is listed from the first node that has it.
        let cursor = request.cursor.get();
        let (mut at, mut node_cursor) = (
            usize::try_from(cursor >> 56).unwrap_or(usize::MAX),
            cursor & NODE_CURSOR,
        );
        let mut locks = Vec::new();
        loop {
            let Some(node) = nodes.get(at) else {
                return Ok(LockPage::default());
            };
            // A node that does not answer, or is misconfigured, is passed over:
            // every lock a majority holds lives on other nodes too, and is
            // listed from one of them.
            let page = match self.inner.standing.is_misconfigured(at) {
                true => LockPage::default(),
                false => node
                    .list(&ListRequest {
                        cursor: ListCursor::new(node_cursor),
                        ..request.clone()
                    })
                    .await
                    .unwrap_or_default(),
            };
            for entry in page.locks {
                // Every node not known slow: whether a node before this one
                // listed the lock needs its own answer.
                let answers = in_hand(self.statuses(&entry.name, |_| false).await);
                let listed_before = answers[..at]
                    .iter()
                    .any(|a| a.as_ref().is_ok_and(|s| s.held || s.available_in_ms > 0));
                let status = tally::status(&answers, self.inner.majority)?;
                if !listed_before && (status.held || status.available_in_ms > 0) {
                    locks.push(LockEntry {
                        name: entry.name,
                        status,
                    });
                }
            }
            let next = match page.next_cursor {
                Some(next) => Some((at as u64) << 56 | (next.get() & NODE_CURSOR)),
                None if at + 1 < nodes.len() => Some(((at + 1) as u64) << 56),
                None => None,
            };
            if page.next_cursor.is_some() || next.is_none() || locks.len() >= request.limit.get() {
                return Ok(LockPage {
                    locks,
                    next_cursor: next.map(ListCursor::new),
                });
            }
            (at, node_cursor) = (at + 1, 0);
        }
    }
}

/// The bits of a listing cursor that hold a node's own `SCAN` cursor.
const NODE_CURSOR: u64 = (1 << 56) - 1;
