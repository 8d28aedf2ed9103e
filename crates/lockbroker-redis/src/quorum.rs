//! [`QuorumStore`]: Redlock over N independent Redis primaries, with a fence
//! that a majority keeps.
//!
//! Every step runs on all nodes at once, each bounded by the per-node timeout;
//! a node that is down or slow counts as a refusal, never as an error of the
//! request. A grant needs a majority of nodes to grant it, then a majority of
//! them, in good standing, to take the grant's fence as their own (the
//! write-back), all within the lease's validity. Two majorities share a node,
//! and on that node the second grant happens only after the first lease is
//! gone, by which time the first fence was written there: so every fence
//! exceeds all before it without trusting any clock. See docs/quorum.md.

mod identity;
mod listing;
mod permits;
mod repair;
mod standing;
mod tally;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use lockbroker_core::lease::unix_micros;
use lockbroker_core::{
    contended_back_off, AcquireOutcome, AcquireParams, Announcement, ExtendOutcome,
    ForceReleaseOutcome, Lease, LeaseKind, LeaseToken, ListRequest, LockName, LockPage, LockStatus,
    LockStore, Principal, ReleaseOutcome, StoreError, TakeOnce, Ttl, Wake, WakeStream,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

use crate::connection::{redelivery_window, RedisSettings};
use crate::store::{QuorumEvent, RedisLockStore, StoreObserver};
use permits::permit_quorum;
use standing::Standing;
pub use tally::Drift;

/// How a quorum of independent Redis primaries is reached.
#[derive(Clone, Debug)]
pub struct QuorumSettings {
    /// One entry per node: its URL and credentials, the shared key prefix and
    /// script settings, and the per-node timeout as its command timeout.
    pub nodes: Vec<RedisSettings>,
    /// How much clocks may disagree, subtracted from every validity.
    pub drift: Drift,
}

/// A [`LockStore`] over a majority of N independent Redis primaries.
#[derive(Clone)]
pub struct QuorumStore {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<RedisLockStore>,
    standing: Arc<Standing>,
    majority: usize,
    drift: Drift,
    /// The highest fence this broker has seen on any node, passed to every
    /// node's acquire so a grant exceeds it even where that node lost data.
    fence_floor: AtomicU64,
    wakes: WakeStream,
    announcements: TakeOnce<Announcement>,
    orphan_window: Duration,
    observer: Option<Arc<dyn StoreObserver>>,
}

impl QuorumStore {
    /// Builds a client per node and starts connecting, watching each node's
    /// epoch, and listening to every node's release announcements.
    pub fn connect(
        settings: QuorumSettings,
        observer: Option<Arc<dyn StoreObserver>>,
    ) -> Result<Self, StoreError> {
        let nodes = settings
            .nodes
            .iter()
            .enumerate()
            .map(|(at, node)| RedisLockStore::quorum_node(node.clone(), observer.clone(), at))
            .collect::<Result<Vec<_>, _>>()?;
        let (wake_tx, wake_rx) = unbounded_channel();
        let (announce_tx, announce_rx) = unbounded_channel();
        let standing = Arc::new(Standing::new(nodes.len(), settings.drift));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            for node in &nodes {
                if let Some(wakes) = node.take_wakes() {
                    runtime.spawn(forward(wakes, wake_tx.clone()));
                }
                if let Some(announcements) = node.take_announcements() {
                    runtime.spawn(forward(announcements, announce_tx.clone()));
                }
            }
            runtime.spawn(Arc::clone(&standing).watch(nodes.clone()));
        }
        let orphan_window = settings
            .nodes
            .first()
            .map_or(Duration::from_secs(5), redelivery_window);
        Ok(Self {
            inner: Arc::new(Inner {
                majority: nodes.len() / 2 + 1,
                nodes,
                standing,
                drift: settings.drift,
                fence_floor: AtomicU64::new(0),
                wakes: WakeStream::new(wake_rx),
                announcements: TakeOnce::new(announce_rx),
                orphan_window,
                observer,
            }),
        })
    }

    /// What this broker knows of its nodes, for the node gauges.
    pub fn node_counts(&self) -> NodeCounts {
        let (up, misconfigured, restarting) = self.inner.standing.counts();
        NodeCounts {
            up,
            misconfigured,
            restarting,
            majority: self.inner.majority,
        }
    }

    /// Why some nodes that answer in time are not independent primaries (a
    /// replica, or one server listed twice, whatever the spelling of its
    /// URLs), one reason per misconfigured node; empty when every node that
    /// answered is one. A node that does not answer is checked once it does.
    pub async fn misconfigured_nodes(&self) -> Vec<String> {
        identity::check_at_start(&self.inner.nodes).await
    }

    /// The nodes' URLs without credentials, in the order of the node list.
    pub fn endpoints(&self) -> Vec<String> {
        self.inner
            .nodes
            .iter()
            .map(RedisLockStore::endpoint)
            .collect()
    }

    /// Runs `step` on every node at once. A misconfigured node is not asked:
    /// it answers as a node that is down, so it counts toward no majority.
    async fn on_nodes<'s, T, Fut>(
        &'s self,
        step: impl Fn(&'s RedisLockStore) -> Fut,
    ) -> Vec<Result<T, StoreError>>
    where
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let standing = &self.inner.standing;
        join_all(self.inner.nodes.iter().enumerate().map(|(at, node)| {
            let asked = (!standing.is_misconfigured(at)).then(|| step(node));
            async move {
                match asked {
                    Some(answer) => answer.await,
                    None => Err(StoreError::Unavailable(
                        "the node is misconfigured (a replica, or a server listed twice)".into(),
                    )),
                }
            }
        }))
        .await
    }

    /// Closes every node's connections.
    pub async fn disconnect(&self) {
        join_all(self.inner.nodes.iter().map(RedisLockStore::disconnect)).await;
    }

    /// How many nodes must grant (and keep) a lease of `kind`: a majority,
    /// so that two exclusive leases, or an exclusive and a shared one, meet
    /// on a node that refuses the second. A permit of a semaphore with limit
    /// N needs more: with N + 1 permits each on q nodes of M, some node would
    /// hold N + 1 of them, which no node allows, once (N + 1) q > N M; so
    /// q = floor(N M / (N + 1)) + 1, a majority for N = 1 and every node
    /// once N >= M - 1 (docs/semaphores.md).
    fn needed(&self, kind: LeaseKind, limit: Option<u32>) -> usize {
        let nodes = self.inner.nodes.len();
        match (kind, limit) {
            (LeaseKind::Permit, Some(limit)) => permit_quorum(limit, nodes),
            _ => self.inner.majority,
        }
    }

    fn observe(&self, event: QuorumEvent) {
        if let Some(observer) = &self.inner.observer {
            observer.quorum_event(event);
        }
    }
}

impl QuorumStore {
    /// One round of an acquire on every node: granted when the needed nodes
    /// grant and keep the fence, else rolled back wherever it was made.
    async fn acquire_once(&self, params: &AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        let inner = &self.inner;
        let started = Instant::now();
        // Every node issues a fence above this proposal. When it also exceeds
        // a node's mark and clock, all granting nodes issue the same fence and
        // already carry it: no write-back round trip is needed.
        let proposal = inner
            .fence_floor
            .load(Ordering::Relaxed)
            .max(unix_micros().saturating_add(FENCE_LEAD_US));
        let answers = join_all(inner.nodes.iter().enumerate().map(|(at, node)| async move {
            let epoch = inner.standing.epoch(at).ok_or_else(|| {
                StoreError::Unavailable("the node's epoch is not known yet".into())
            })?;
            node.raise_floor(proposal);
            node.acquire_as_node(params, &epoch).await
        }))
        .await;
        let needed = self.needed(params.kind, params.limit);
        let votes = tally::acquire(answers, inner.majority, needed, params.token);
        let mut outcome = votes.busy_answer();
        if let Some(grant) = votes.granted() {
            let lease = grant.lease;
            let mut kept = grant.agreed.len();
            if kept < needed {
                self.observe(QuorumEvent::FenceWrittenBack);
                kept += self.adopt(params.name, lease.fence, &grant.behind).await;
            }
            let validity = inner.drift.validity(params.ttl, started.elapsed());
            if kept >= needed && validity > 0 {
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
                let lease = Lease {
                    validity_ms: validity,
                    expires_at_ms,
                    ..lease
                };
                return Ok(AcquireOutcome::Granted(lease));
            }
            if validity == 0 {
                outcome = Err(StoreError::Unavailable(
                    "the nodes answered too slowly to leave the lease any validity".into(),
                ));
            }
        }
        let partial = votes.to_roll_back();
        if !partial.is_empty() {
            self.observe(QuorumEvent::GrantRolledBack);
            self.roll_back(params, &partial).await;
        }
        if let Ok(AcquireOutcome::Busy { blockers, .. }) = &outcome {
            inner
                .fence_floor
                .fetch_max(blockers.holder.fence.get(), Ordering::Relaxed);
        }
        outcome
    }
}

impl LockStore for QuorumStore {
    /// Rounds of [`Self::acquire_once`] while other acquires in flight
    /// split the votes, each after a random back-off, for a few
    /// milliseconds: a waiting acquire's own wait retries after that
    /// (docs/quorum.md, "Contended acquires").
    async fn acquire(&self, params: AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        let until = Instant::now() + CONTENDED_RETRY;
        for tries in 0.. {
            let outcome = self.acquire_once(&params).await;
            if !matches!(outcome, Ok(AcquireOutcome::Contended)) {
                return outcome;
            }
            let back_off = contended_back_off(tries);
            if Instant::now() + back_off >= until {
                return outcome;
            }
            tokio::time::sleep(back_off).await;
        }
        unreachable!("the tries are counted without end")
    }

    async fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl: Ttl,
        max_hold_ms: u64,
    ) -> Result<ExtendOutcome, StoreError> {
        let inner = &self.inner;
        let started = Instant::now();
        let answers = self
            .on_nodes(|node| node.extend(name, token, ttl, max_hold_ms))
            .await;
        let validity = inner.drift.validity(ttl, started.elapsed());
        // A permit must stay on as many nodes as its grant needed.
        let limit = (answers.iter().flatten())
            .filter_map(|answer| match answer {
                ExtendOutcome::Extended(renewal) => renewal.limit,
                _ => None,
            })
            .max();
        let needed = self.needed(token.kind(), limit);
        let mut outcome = tally::extend(answers, inner.majority, needed, validity)?;
        if let ExtendOutcome::Extended(renewal) = &mut outcome {
            renewal.expires_at_ms = renewal
                .expires_at_ms
                .saturating_sub(inner.drift.allowance(ttl));
        }
        Ok(outcome)
    }

    async fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let answers = self.on_nodes(|node| node.release(name, token)).await;
        tally::release(answers, self.inner.majority)
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, StoreError> {
        let answers = self.on_nodes(|node| node.status(name)).await;
        tally::status(&answers, self.inner.majority)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let answers = self.on_nodes(RedisLockStore::ping).await;
        let up = answers.iter().filter(|answer| answer.is_ok()).count();
        let standing = inner.standing.in_standing();
        if up >= inner.majority && standing >= inner.majority {
            return Ok(());
        }
        if let Some(Err(StoreError::RefusesWrites(cause))) = answers
            .iter()
            .find(|a| matches!(a, Err(StoreError::RefusesWrites(_))))
        {
            return Err(StoreError::RefusesWrites(cause.clone()));
        }
        Err(StoreError::Unavailable(format!(
            "{up} of {} answer{} and {standing} {} in good standing (answering, not \
             misconfigured, not restarting); a majority is {}",
            nodes(inner.nodes.len()),
            if up == 1 { "s" } else { "" },
            if standing == 1 { "is" } else { "are" },
            inner.majority
        )))
    }

    async fn list(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        self.list_page(request).await
    }

    async fn force_release(
        &self,
        name: &LockName,
        by: &Principal,
    ) -> Result<ForceReleaseOutcome, StoreError> {
        let answers = self.on_nodes(|node| node.force_release(name, by)).await;
        tally::force_release(answers, self.inner.majority)
    }

    async fn leave_queue(&self, name: &LockName, waiter_id: &str) -> Result<(), StoreError> {
        let answers = self
            .on_nodes(|node| node.leave_queue(name, waiter_id))
            .await;
        let done = answers.iter().filter(|answer| answer.is_ok()).count();
        if done >= self.inner.majority {
            Ok(())
        } else {
            Err(StoreError::Unavailable(format!(
                "only {} took the waiter out of the queue",
                nodes(done)
            )))
        }
    }

    fn take_wakes(&self) -> Option<UnboundedReceiver<Wake>> {
        self.inner.wakes.take()
    }

    /// On every node: a node that is down misses it, and the service counts
    /// a change heard from several nodes once.
    async fn announce(&self, announcement: &Announcement) {
        let nodes = &self.inner.nodes;
        join_all(nodes.iter().map(|node| node.announce(announcement))).await;
    }

    fn take_announcements(&self) -> Option<UnboundedReceiver<Announcement>> {
        self.inner.announcements.take()
    }

    fn orphan_window(&self) -> Duration {
        self.inner.orphan_window
    }
}

/// What a broker knows of its nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCounts {
    /// Per node, in the order of the node list: whether it answers.
    pub up: Vec<bool>,
    /// Per node: whether it is a replica or a server listed before it.
    pub misconfigured: Vec<bool>,
    /// Answering nodes out of majorities after a restart without data.
    pub restarting: usize,
    /// How many nodes a majority is.
    pub majority: usize,
}

/// `count` followed by "node" or "nodes".
pub(crate) fn nodes(count: usize) -> String {
    match count {
        1 => "1 node".to_owned(),
        _ => format!("{count} nodes"),
    }
}

/// Passes every message of one node's stream on to the quorum's.
async fn forward<T>(mut from: UnboundedReceiver<T>, to: UnboundedSender<T>) {
    while let Some(message) = from.recv().await {
        if to.send(message).is_err() {
            return;
        }
    }
}

/// How far ahead of this broker's clock (µs) a grant's fence is proposed, so
/// that it exceeds every node's clock and mark and the nodes agree on it at
/// once, unless a node's clock runs more than this ahead of the broker's.
const FENCE_LEAD_US: u64 = 1_000_000;

/// How long one acquire keeps trying again after split votes before it
/// answers contended: a few milliseconds, a few rounds on a local network.
const CONTENDED_RETRY: Duration = Duration::from_millis(20);
