//! [`QuorumStore`]: Redlock over N independent Redis primaries, with a fence
//! that a majority keeps.
//!
//! Every step runs on all nodes at once, each bounded by the per-node timeout,
//! and is answered as soon as the answers in hand decide it ([`fan_out`]): a
//! node that is down or slow counts as a refusal, never as an error of the
//! request, and is not waited for. A grant needs a majority of nodes to grant it, then a majority of
//! them, in good standing, to take the grant's fence as their own (the
//! write-back), all within the lease's validity. Two majorities share a node,
//! and on that node the second grant happens only after the first lease is
//! gone, by which time the first fence was written there: so every fence
//! exceeds all before it without trusting any clock. See docs/quorum.md.

mod acquire;
mod fan_out;
mod holding;
mod identity;
mod listing;
mod permits;
mod repair;
mod sessions;
mod standing;
mod tally;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use lockbroker_core::lease::random_hex;
use lockbroker_core::{
    contended_back_off, AcquireOutcome, AcquireParams, Announcement, ExtendOutcome,
    ForceReleaseOutcome, LeaseKind, LeaseToken, ListRequest, LockName, LockPage, LockStatus,
    LockStore, Principal, ReleaseOutcome, SessionEntry, SessionRecord, SessionWrite, StoreError,
    TakeOnce, Ttl, Wake, WakeStream,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

use crate::connection::{redelivery_window, RedisSettings};
use crate::scripts::calls::ExtendCall;
use crate::store::{QuorumEvent, RedisLockStore, StoreObserver};
use fan_out::in_hand;
use permits::permit_quorum;
use standing::Standing;
use tally::decided;
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
    /// Which nodes timed out last time: decisions do not wait for them.
    slowness: Arc<fan_out::Slowness>,
    /// Acquires refused while some nodes had not answered, by token: the
    /// nodes where a late grant is still to be undone, to which the next
    /// round of the same token is not sent.
    settling: Mutex<HashMap<String, Arc<acquire::Unsettled>>>,
}

impl QuorumStore {
    /// Builds a client per node and starts connecting, watching each node's
    /// epoch, and listening to every node's release announcements.
    pub fn connect(
        settings: QuorumSettings,
        observer: Option<Arc<dyn StoreObserver>>,
    ) -> Result<Self, StoreError> {
        let broker_id = random_hex::<8>();
        let nodes = (settings.nodes.iter().enumerate())
            .map(|(at, node)| {
                RedisLockStore::quorum_node(node.clone(), observer.clone(), at, &broker_id)
            })
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
        let node_timeout = settings
            .nodes
            .first()
            .map_or(Duration::from_secs(1), |node| node.command_timeout);
        let endpoints = nodes.iter().map(RedisLockStore::endpoint).collect();
        let slowness = Arc::new(fan_out::Slowness::new(endpoints, node_timeout));
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
                slowness,
                settling: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// What this broker knows of its nodes, for the node gauges.
    pub fn node_counts(&self) -> NodeCounts {
        let (up, misconfigured, restarting) = self.inner.standing.counts();
        NodeCounts {
            up,
            misconfigured,
            slow: self.inner.slowness.flags(),
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

impl LockStore for QuorumStore {
    /// Rounds of [`Self::acquire_once`] while other acquires in flight
    /// split the votes, each after a random back-off, for a few
    /// milliseconds: a waiting acquire's own wait retries after that
    /// (docs/quorum.md, "Contended acquires").
    async fn acquire(&self, params: AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        let until = Instant::now() + CONTENDED_RETRY;
        let mut asked_above = 0;
        for tries in 0.. {
            // Boxed: a waiting acquire carries this future's size for its
            // whole wait, in every mode (docs/performance.md, memory).
            let (outcome, ran_ahead) = Box::pin(self.acquire_once(&params)).await;
            if !matches!(outcome, Ok(AcquireOutcome::Contended)) {
                return outcome;
            }
            // A node whose fence ran ahead of the proposal raised its floor:
            // the next round proposes above it, at once, whatever the time.
            if ran_ahead && asked_above < AHEAD_RETRIES {
                asked_above += 1;
                continue;
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
        (self.extend_on_nodes(&ExtendCall::new(name, token, ttl, max_hold_ms))).await
    }

    async fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.release_on_nodes(name, token).await
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, StoreError> {
        let majority = self.inner.majority;
        let answers = self
            .statuses(name, |progress| decided::status(progress, majority))
            .await;
        tally::status(&in_hand(answers), majority)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        let (answers, late) = self
            .fan_out(
                |_, node| async move { node.ping().await },
                |progress| progress.answered() >= inner.majority,
            )
            .await;
        late.finish();
        let up = answers.iter().filter(|a| matches!(a, Some(Ok(())))).count();
        let standing = inner.standing.in_standing();
        if up >= inner.majority && standing >= inner.majority {
            return Ok(());
        }
        if let Some(Some(Err(StoreError::RefusesWrites(cause)))) = answers
            .iter()
            .find(|a| matches!(a, Some(Err(StoreError::RefusesWrites(_)))))
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
        let majority = self.inner.majority;
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let (name, by) = (name.clone(), by.clone());
                    async move { node.force_release(&name, &by).await }
                },
                |progress| decided::force_release(progress, majority),
            )
            .await;
        late.finish();
        tally::force_release(in_hand(answers), majority)
    }

    async fn leave_queue(&self, name: &LockName, waiter_id: &str) -> Result<(), StoreError> {
        let majority = self.inner.majority;
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let (name, waiter_id) = (name.clone(), waiter_id.to_owned());
                    async move { node.leave_queue(&name, &waiter_id).await }
                },
                |progress| progress.answered() >= majority,
            )
            .await;
        late.finish();
        let done = answers.iter().filter(|a| matches!(a, Some(Ok(())))).count();
        if done >= majority {
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

    async fn session_write(
        &self,
        session: &LockName,
        token: &LeaseToken,
        entry: SessionEntry<'_>,
    ) -> Result<SessionWrite, StoreError> {
        self.write_session(session, token, entry).await
    }

    async fn session_read(
        &self,
        session: &LockName,
        token: Option<&LeaseToken>,
    ) -> Result<SessionRecord, StoreError> {
        self.read_session(session, token).await
    }

    async fn session_forget(
        &self,
        session: &LockName,
        tokens: Option<&[LeaseToken]>,
    ) -> Result<(), StoreError> {
        self.forget_session(session, tokens).await
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
    /// Per node: whether its last step timed out, so steps do not wait for
    /// it until it answers in time again.
    pub slow: Vec<bool>,
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

/// How many rounds one acquire asks again at once, above the fence a node
/// reported running ahead of the proposal.
const AHEAD_RETRIES: u32 = 3;

/// How long one acquire keeps trying again after split votes before it
/// answers contended: a few milliseconds, a few rounds on a local network.
const CONTENDED_RETRY: Duration = Duration::from_millis(20);
