//! One round of a quorum acquire, in four steps: propose (the acquire and a
//! fence proposal to every node at once), tally (as soon as the answers in
//! hand decide it), write back (the agreed fence to granting nodes that
//! issued another), and settle (in the background, the nodes that answered
//! after the decision: a late grant is given the agreed fence or undone).
//!
//! Why answering before the slowest node is safe for fences: the caller is
//! given the highest fence among the grants counted, and every node counted
//! carries it (as issued, or written back) before the answer. A node that
//! grants later, whatever fence it issued, is given that same fence or loses
//! its copy, so no node keeps a copy of the lease with another fence. A
//! later grant needs a majority too, which shares a node with this one's;
//! that node's mark is at least this fence, so the later fence is higher.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lockbroker_core::lease::unix_micros;
use lockbroker_core::{
    AcquireOutcome, AcquireParams, FairEntry, Fence, Lease, LeaseKind, LeaseToken, LockDelay,
    LockName, Owner, Principal, RequestId, StoreError, Ttl,
};
use tokio::time::Instant;

use super::fan_out::{in_hand, Answers, Late};
use super::tally::{self, decided, MajorityGrant};
use super::QuorumStore;
use crate::scripts::CallText;
use crate::store::{QuorumEvent, RedisLockStore};

/// How far ahead of this broker's clock (µs) a grant's fence is proposed, so
/// that it exceeds every node's clock and mark and the nodes agree on it at
/// once, unless a node's clock runs more than this ahead of the broker's.
const FENCE_LEAD_US: u64 = 1_000_000;

/// An acquire's parameters, owned: the answers of nodes slower than the
/// decision are awaited and settled after the caller was answered.
struct Proposal {
    name: LockName,
    kind: LeaseKind,
    limit: Option<u32>,
    token: LeaseToken,
    ttl: Ttl,
    owner: Option<Owner>,
    request_id: Option<RequestId>,
    principal: Principal,
    lock_delay: LockDelay,
    fair: Option<(String, FairEntry<'static>)>,
    waits: bool,
    /// The round's fence proposal. A lease of any kind is granted with
    /// exactly one above it on every node, or not at all on a node whose own
    /// fence runs ahead (acquire.lua, hold.lua): every copy carries the fence
    /// the grant returns, from the moment it is made, and neither a status
    /// nor a busy answer ever shows another.
    fence: u64,
    /// The acquire's keys and arguments, made once for every node.
    text: Option<CallText>,
}

impl Proposal {
    fn new(params: &AcquireParams<'_>, fence: u64, text: Option<CallText>) -> Self {
        Self {
            name: params.name.clone(),
            kind: params.kind,
            limit: params.limit,
            token: params.token.clone(),
            ttl: params.ttl,
            owner: params.owner.cloned(),
            request_id: params.request_id.cloned(),
            principal: params.principal.clone(),
            lock_delay: params.lock_delay,
            fair: params.fair.map(|fair| {
                let entry = FairEntry {
                    waiter_id: "",
                    ..fair
                };
                (fair.waiter_id.to_owned(), entry)
            }),
            waits: params.waits,
            fence,
            text,
        }
    }

    fn fair(&self) -> Option<FairEntry<'_>> {
        self.fair.as_ref().map(|(waiter_id, entry)| FairEntry {
            waiter_id,
            ..*entry
        })
    }

    fn params(&self) -> AcquireParams<'_> {
        AcquireParams {
            name: &self.name,
            kind: self.kind,
            limit: self.limit,
            token: &self.token,
            ttl: self.ttl,
            owner: self.owner.as_ref(),
            request_id: self.request_id.as_ref(),
            principal: &self.principal,
            lock_delay: self.lock_delay,
            fair: self.fair(),
            waits: self.waits,
        }
    }
}

impl QuorumStore {
    /// One round of an acquire on every node: granted when the needed nodes
    /// grant and keep the fence, else rolled back wherever it was made; and
    /// whether a node refused because its fence ran ahead of the proposal
    /// (the next round then proposes above it).
    pub(super) async fn acquire_once(
        &self,
        params: &AcquireParams<'_>,
    ) -> (Result<AcquireOutcome, StoreError>, bool) {
        let inner = &self.inner;
        let started = Instant::now();
        // Above every fence this broker saw, on any node, and ahead of the
        // nodes' clocks: every node can then issue exactly one above it.
        let nodes_floor = inner.nodes.iter().map(RedisLockStore::floor).max();
        let fence = (inner.fence_floor.load(Ordering::Relaxed))
            .max(nodes_floor.unwrap_or(0))
            .max(unix_micros().saturating_add(FENCE_LEAD_US));
        let text = (inner.nodes.first()).map(|node| node.acquire_text(params, fence));
        let proposal = Arc::new(Proposal::new(params, fence, text));
        let needed = self.needed(params.kind, params.limit);
        let (answers, late) = self.propose(&proposal, needed).await;
        let late_at: Vec<usize> = (answers.iter().enumerate())
            .filter(|(_, answer)| answer.is_none())
            .map(|(at, _)| at)
            .collect();
        let votes = tally::acquire(in_hand(answers), inner.majority, needed, params.token);
        let mut outcome = votes.busy_answer();
        if let Some(grant) = votes.granted() {
            match self.write_back(params, grant, needed, started).await {
                Ok(Some(lease)) => {
                    self.settle_late_grants(&proposal, lease.fence, late);
                    return (Ok(AcquireOutcome::Granted(lease)), false);
                }
                Ok(None) => {}
                Err(error) => outcome = Err(error),
            }
        }
        let partial = votes.to_roll_back();
        if !partial.is_empty() {
            self.observe(QuorumEvent::GrantRolledBack);
            self.roll_back(params, &partial).await;
        }
        self.undo_late_grants(&proposal, &late_at, late);
        if let Ok(AcquireOutcome::Busy { blockers, .. }) = &outcome {
            inner
                .fence_floor
                .fetch_max(blockers.holder.fence.get(), Ordering::Relaxed);
        }
        (outcome, votes.ran_ahead())
    }

    /// Propose: the acquire to every node at once, answered as soon as the
    /// needed grants are in, or too few nodes are left to make them.
    async fn propose(
        &self,
        proposal: &Arc<Proposal>,
        needed: usize,
    ) -> (Answers<AcquireOutcome>, Late<AcquireOutcome>) {
        let standing = &self.inner.standing;
        let unsettled = self.unsettled(&proposal.token);
        self.fan_out(
            |at, node| {
                let proposal = Arc::clone(proposal);
                let epoch = standing.epoch(at);
                let settling = unsettled.as_ref().is_some_and(|u| u.at(at));
                async move {
                    if settling {
                        return Err(StoreError::Unavailable(
                            "an earlier round of this acquire is still being undone there".into(),
                        ));
                    }
                    let epoch = epoch.ok_or_else(|| {
                        StoreError::Unavailable("the node's epoch is not known yet".into())
                    })?;
                    let text = proposal.text.as_ref();
                    (node.acquire_as_node(&proposal.params(), &epoch, proposal.fence, text)).await
                }
            },
            |progress| decided::acquire(progress, needed),
        )
        .await
    }

    /// Write back: the grant's fence to the granting nodes that issued a
    /// lower one. The lease when the needed nodes carry its fence with
    /// validity left; `None` when too few took it; an error when the nodes
    /// answered too slowly to leave any validity.
    async fn write_back(
        &self,
        params: &AcquireParams<'_>,
        grant: MajorityGrant,
        needed: usize,
        started: Instant,
    ) -> Result<Option<Lease>, StoreError> {
        let inner = &self.inner;
        let lease = grant.lease;
        let mut kept = grant.agreed.len();
        if kept < needed {
            self.observe(QuorumEvent::FenceWrittenBack);
            kept += self.adopt(params.name, lease.fence, &grant.behind).await;
        }
        let validity = inner.drift.validity(params.ttl, started.elapsed());
        if validity == 0 {
            return Err(StoreError::Unavailable(
                "the nodes answered too slowly to leave the lease any validity".into(),
            ));
        }
        if kept < needed {
            return Ok(None);
        }
        inner
            .fence_floor
            .fetch_max(lease.fence.get(), Ordering::Relaxed);
        if let Some(fair) = params.fair {
            let granted: Vec<usize> = (grant.agreed.iter().chain(&grant.behind))
                .map(|(at, _)| *at)
                .collect();
            self.leave_other_queues(params.name, fair.waiter_id, &granted);
        }
        // The earliest expiry among the nodes, less what drift may take.
        let expires_at_ms = lease
            .expires_at_ms
            .saturating_sub(inner.drift.allowance(params.ttl));
        Ok(Some(Lease {
            validity_ms: validity,
            expires_at_ms,
            ..lease
        }))
    }

    /// Settle after a grant: a node that grants late with another fence (or
    /// whose answer was lost) is given the lease's fence, or loses its copy
    /// when it will not take it; its queue entry was already taken out.
    fn settle_late_grants(
        &self,
        proposal: &Arc<Proposal>,
        fence: Fence,
        late: Late<AcquireOutcome>,
    ) {
        if late.is_empty() {
            return;
        }
        let (store, proposal) = (self.clone(), Arc::clone(proposal));
        drop(late.settle(move |at, answer| {
            let (store, proposal) = (store.clone(), Arc::clone(&proposal));
            async move {
                match answer {
                    Ok(AcquireOutcome::Granted(lease)) if lease.fence == fence => return,
                    Ok(AcquireOutcome::Granted(_)) | Err(StoreError::OutcomeUnknown(_)) => {}
                    _ => return,
                }
                store.observe(QuorumEvent::LateGrantSettled);
                let copy = [(at, proposal.token.clone())];
                if store.adopt(&proposal.name, fence, &copy).await == 0 {
                    let node = &store.inner.nodes[at];
                    let _ = node.undo_grant(&proposal.name, &proposal.token, None).await;
                }
            }
        }));
    }

    /// Settle after a refusal: a node that grants late (or whose answer was
    /// lost) has the grant undone, its fair waiter put back in line. Until
    /// then the nodes `late_at` are marked unsettled for this token, and a
    /// later round of it is not sent there: an undo of this round's grant
    /// could otherwise remove a grant that round counted.
    fn undo_late_grants(
        &self,
        proposal: &Arc<Proposal>,
        late_at: &[usize],
        late: Late<AcquireOutcome>,
    ) {
        if late.is_empty() {
            return;
        }
        let unsettled = {
            let mut settling = (self.inner.settling.lock()).unwrap_or_else(|e| e.into_inner());
            settling.retain(|_, unsettled| unsettled.any());
            let count = self.inner.nodes.len();
            let unsettled = settling
                .entry(proposal.token.expose().to_owned())
                .or_insert_with(|| Arc::new(Unsettled::new(count)));
            for &at in late_at {
                unsettled.mark(at, true);
            }
            Arc::clone(unsettled)
        };
        let (store, owned) = (self.clone(), Arc::clone(proposal));
        drop(late.settle(move |at, answer| {
            let (store, proposal) = (store.clone(), Arc::clone(&owned));
            let unsettled = Arc::clone(&unsettled);
            async move {
                if matches!(
                    answer,
                    Ok(AcquireOutcome::Granted(_)) | Err(StoreError::OutcomeUnknown(_))
                ) {
                    store.observe(QuorumEvent::LateGrantSettled);
                    let node = &store.inner.nodes[at];
                    let (name, token) = (&proposal.name, &proposal.token);
                    let _ = node.undo_grant(name, token, proposal.fair()).await;
                }
                unsettled.mark(at, false);
            }
        }));
    }

    /// The nodes where an earlier refused round of `token` is still being
    /// undone, if any.
    fn unsettled(&self, token: &LeaseToken) -> Option<Arc<Unsettled>> {
        let settling = (self.inner.settling.lock()).unwrap_or_else(|e| e.into_inner());
        settling.get(token.expose()).cloned()
    }
}

/// Per node: whether a refused round of one token may still hold a grant
/// there that the broker is about to undo.
pub(super) struct Unsettled(Vec<AtomicBool>);

impl Unsettled {
    fn new(nodes: usize) -> Self {
        Self((0..nodes).map(|_| AtomicBool::new(false)).collect())
    }

    fn at(&self, at: usize) -> bool {
        self.0
            .get(at)
            .is_some_and(|flag| flag.load(Ordering::Acquire))
    }

    fn mark(&self, at: usize, unsettled: bool) {
        if let Some(flag) = self.0.get(at) {
            flag.store(unsettled, Ordering::Release);
        }
    }

    fn any(&self) -> bool {
        self.0.iter().any(|flag| flag.load(Ordering::Acquire))
    }
}
