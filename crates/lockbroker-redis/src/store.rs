//! [`RedisLockStore`]: the [`LockStore`] for Redis. Each step is one script
//! call through its typed definition in [`crate::scripts::calls`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, ClusterInterface, PubsubInterface};
use fred::types::Value;
use lockbroker_core::lease::random_hex;
use lockbroker_core::{
    AcquireOutcome, AcquireParams, Announcement, ExtendOutcome, ExtendStep, ForceReleaseOutcome,
    LeaseToken, ListRequest, LockName, LockPage, LockStatus, LockStore, Principal, ReleaseOutcome,
    SessionEntry, SessionRecord, SessionWrite, StoreError, TakeOnce, Together, Ttl, Wake,
    WakeStream,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::cluster::{self, Versions};
use crate::connection::{redelivery_window, store_error, Connections, RedisSettings};
use crate::keys::KeyLayout;
use crate::scripts::calls::{
    ExtendCall, ForceReleaseCall, LeaveQueueCall, ProbeCall, SessionForgetCall, SessionReadCall,
    SessionWriteCall, StatusCall,
};
use crate::scripts::{ScriptContext, Scripts};
use crate::wakes::{forward_wakes, Announcements, Hearing, Subscription};
use watches::Watches;

mod calling;
mod listing;
mod node;
pub use node::NodeIdentity;
mod observer;
pub use observer::{QuorumEvent, StoreObserver};
mod replicas;
mod steps;
mod together;
pub(crate) mod watches;

/// A [`LockStore`] over one Redis, the primary Sentinel names, or a Redis
/// Cluster (every lock's keys share a hash tag, so each script runs on the
/// one shard serving the lock).
///
/// Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct RedisLockStore {
    inner: Arc<Inner>,
}

struct Inner {
    connections: Connections,
    scripts: Scripts,
    context: ScriptContext,
    settings: RedisSettings,
    /// The highest fence this process has seen. Passed to every acquire as a
    /// floor, so a Redis that lost its data *and* runs on a clock behind the
    /// old one still issues fences above those this broker handed out.
    fence_floor: AtomicU64,
    /// The one subscription of this process, feeding the announcements here
    /// until the service takes them.
    wakes: WakeStream,
    /// Every broker's announcements about watching, read from the same
    /// subscription.
    announcements: TakeOnce<Announcement>,
    observer: Option<Arc<dyn StoreObserver>>,
    /// Quorum mode: this node's place in the node list.
    node_index: Option<usize>,
    /// Cluster mode: the lock channels this broker subscribes to.
    watches: Option<Watches>,
    /// Cluster mode: every primary was seen to run a Redis new enough.
    versions_checked: AtomicBool,
    /// The subscription of this process was proven by a probe
    /// ([`Hearing`]): until it is, another broker's releases and changes
    /// would go unheard (a waiter here would sleep through them, an event
    /// stream here would miss them), so the broker is not ready.
    subscribed: Arc<AtomicBool>,
    /// One permit per command in flight (`max_commands_in_flight`).
    in_flight: Semaphore,
}

impl RedisLockStore {
    /// Builds the clients and starts connecting in the background.
    pub fn connect(settings: RedisSettings) -> Result<Self, StoreError> {
        Self::connect_observed(settings, None)
    }

    /// Like [`RedisLockStore::connect`], reporting script latencies and fence
    /// floor raises to `observer`.
    pub fn connect_observed(
        settings: RedisSettings,
        observer: Option<Arc<dyn StoreObserver>>,
    ) -> Result<Self, StoreError> {
        Self::open(settings, observer, None)
    }

    /// Node `index` of a quorum: a store whose grants and extends also keep
    /// the node's lease horizon, for [`crate::quorum::QuorumStore`]. Every
    /// node of one quorum announces as the one broker `broker_id`, so that a
    /// step's keys and arguments are the same for every node, and made once.
    pub fn quorum_node(
        settings: RedisSettings,
        observer: Option<Arc<dyn StoreObserver>>,
        index: usize,
        broker_id: &str,
    ) -> Result<Self, StoreError> {
        Self::open(settings, observer, Some((index, broker_id.to_owned())))
    }

    fn open(
        settings: RedisSettings,
        observer: Option<Arc<dyn StoreObserver>>,
        quorum_node: Option<(usize, String)>,
    ) -> Result<Self, StoreError> {
        let (node_index, broker_id) = match quorum_node {
            Some((index, broker_id)) => (Some(index), broker_id),
            None => (None, random_hex::<8>()),
        };
        let connections = Connections::open(&settings)?;
        let keys = KeyLayout::new(settings.key_prefix.clone());
        let clustered = settings.cluster.is_some();
        let watches = clustered.then(|| {
            Watches::new(
                connections.subscriber.clone(),
                keys.clone(),
                settings.command_timeout,
            )
        });
        let context = ScriptContext {
            wake_channel: keys.wake_channel(),
            wakes_per_lock: clustered,
            keys,
            fence_idle_ms: millis(settings.fence_idle),
            release_memo_ms: millis(settings.release_memo),
            broker_id,
            quorum_node: node_index.is_some(),
        };
        let (wake_tx, wake_rx) = unbounded_channel();
        let (announce_tx, announce_rx) = unbounded_channel();
        let runtime = tokio::runtime::Handle::try_current();
        // Without a runtime nothing subscribes, and nothing can wait for it.
        let subscribed = Arc::new(AtomicBool::new(runtime.is_err()));
        if let Ok(runtime) = runtime {
            let subscription = match &watches {
                Some(watches) => Subscription::PerLock(watches.clone()),
                None => Subscription::Shared(context.wake_channel.clone()),
            };
            if settings.sentinel.is_some() {
                let subscriber = connections.subscriber.clone();
                runtime.spawn(crate::topology::log_primary_moves(subscriber));
            }
            if clustered {
                let client = connections.pool.next().clone();
                runtime.spawn(crate::topology::log_slot_map_changes(client));
            }
            runtime.spawn(forward_wakes(
                connections.subscriber.clone(),
                subscription,
                context.broker_id.clone(),
                wake_tx,
                Announcements {
                    channel: context.keys.events_channel(),
                    sender: announce_tx,
                },
                Hearing::new(
                    connections.pool.next().clone(),
                    &context.broker_id,
                    subscribed.clone(),
                ),
            ));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                in_flight: Semaphore::new(settings.max_commands_in_flight.max(1)),
                connections,
                scripts: Scripts::new(),
                context,
                settings,
                fence_floor: AtomicU64::new(0),
                wakes: WakeStream::new(wake_rx),
                announcements: TakeOnce::new(announce_rx),
                observer,
                node_index,
                watches,
                versions_checked: AtomicBool::new(false),
                subscribed,
            }),
        })
    }

    /// Closes every connection.
    pub async fn disconnect(&self) {
        self.inner.connections.close().await;
    }

    /// Cluster mode: why this cluster cannot be used (a primary runs Redis
    /// older than [`cluster::MIN_VERSION`]), if it answers within the
    /// connect and command timeouts. `None` when it can, when it does not
    /// answer in time (readiness keeps asking), and outside cluster mode.
    pub async fn unsupported_server(&self) -> Option<String> {
        self.inner.settings.cluster.as_ref()?;
        let settings = &self.inner.settings;
        let limit = settings.connect_timeout + settings.command_timeout;
        match tokio::time::timeout(limit, cluster::check_versions(self.client())).await {
            Ok(Ok(Versions::TooOld(why))) => Some(why),
            _ => None,
        }
    }

    pub(super) fn client(&self) -> &Client {
        self.inner.connections.pool.next()
    }

    /// A place for one more command in flight, or `Overloaded` when the
    /// store has as many as it allows: the command is then not sent at all,
    /// so a burst is refused at once instead of queueing without bound.
    pub(super) fn admit(&self) -> Result<SemaphorePermit<'_>, StoreError> {
        self.inner.in_flight.try_acquire().map_err(|_| {
            StoreError::Overloaded(format!(
                "{} Redis commands are in flight already",
                self.inner.settings.max_commands_in_flight
            ))
        })
    }
}

impl LockStore for RedisLockStore {
    async fn acquire(&self, params: AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        self.acquire_in_epoch(&params, None, None).await
    }

    async fn acquire_together(
        &self,
        all: &[AcquireParams<'_>],
    ) -> Option<Result<Together, StoreError>> {
        self.grant_together(all).await
    }

    async fn extend_together(
        &self,
        all: &[ExtendStep<'_>],
    ) -> Option<Result<Vec<ExtendOutcome>, StoreError>> {
        self.renew_together(all).await
    }

    async fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl: Ttl,
        max_hold_ms: u64,
    ) -> Result<ExtendOutcome, StoreError> {
        (self.extend_with_text(&ExtendCall::new(name, token, ttl, max_hold_ms), None)).await
    }

    async fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.release_with_text(name, token, None).await
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, StoreError> {
        self.call_on(self.client_for(name), &StatusCall { name })
            .await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client();
        let _: Value = Box::pin(client.ping(None)).await.map_err(store_error)?;
        if !self.inner.subscribed.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable(
                "not subscribed to other brokers' announcements yet".into(),
            ));
        }
        // Each client of the pool routes by its own copy of the slot map,
        // and refuses commands until it has one.
        let pool = &self.inner.connections.pool;
        if self.inner.settings.cluster.is_some()
            && pool
                .clients()
                .iter()
                .any(|c| c.num_primary_cluster_nodes() == 0)
        {
            return Err(StoreError::Unavailable(
                "not connected to the Redis Cluster yet".into(),
            ));
        }
        if self.inner.settings.cluster.is_some()
            && !self.inner.versions_checked.load(Ordering::Relaxed)
        {
            if let Versions::TooOld(why) = cluster::check_versions(client).await? {
                return Err(StoreError::Unavailable(why));
            }
            self.inner.versions_checked.store(true, Ordering::Relaxed);
        }
        // A Redis that answers but refuses writes (out of memory under
        // noeviction, or a replica) cannot grant: only a real write tells.
        // The probe also loads the scripts' library where Redis lacks it.
        self.call(&ProbeCall).await
    }

    async fn list(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        self.list_page(request).await
    }

    async fn force_release(
        &self,
        name: &LockName,
        by: &Principal,
    ) -> Result<ForceReleaseOutcome, StoreError> {
        self.call_on(self.client_for(name), &ForceReleaseCall { name, by })
            .await
    }

    async fn leave_queue(&self, name: &LockName, waiter_id: &str) -> Result<(), StoreError> {
        self.call_on(self.client_for(name), &LeaveQueueCall { name, waiter_id })
            .await
    }

    async fn watch(&self, name: &LockName) {
        if let Some(watches) = &self.inner.watches {
            // Boxed: fred's subscribe future is several KiB, and every
            // waiting acquire would otherwise carry its size for its whole
            // wait, in every mode (docs/performance.md, memory).
            Box::pin(watches.watch(name)).await;
        }
    }

    fn unwatch(&self, name: &LockName) {
        if let Some(watches) = &self.inner.watches {
            watches.unwatch(name);
        }
    }

    fn take_wakes(&self) -> Option<UnboundedReceiver<Wake>> {
        self.inner.wakes.take()
    }

    async fn announce(&self, announcement: &Announcement) {
        let channel = self.inner.context.keys.events_channel();
        let message = crate::announcements::write(announcement);
        let Ok(_admitted) = self.admit() else {
            return;
        };
        let published: Result<Value, _> = Box::pin(self.client().publish(channel, message)).await;
        if let Err(error) = published {
            tracing::debug!(%error, "an announcement about watching was not published");
        }
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
        let client = self.client_for(session);
        let call = SessionWriteCall {
            session,
            token,
            entry,
        };
        let written = self.call_on(client, &call).await?;
        self.session_write_acknowledged(client, session, written)
            .await
    }

    async fn session_read(
        &self,
        session: &LockName,
        token: Option<&LeaseToken>,
    ) -> Result<SessionRecord, StoreError> {
        let call = SessionReadCall { session, token };
        self.call_on(self.client_for(session), &call).await
    }

    async fn session_forget(
        &self,
        session: &LockName,
        tokens: Option<&[LeaseToken]>,
    ) -> Result<(), StoreError> {
        if tokens.is_some_and(<[LeaseToken]>::is_empty) {
            return Ok(());
        }
        let call = SessionForgetCall { session, tokens };
        self.call_on(self.client_for(session), &call).await
    }

    fn orphan_window(&self) -> Duration {
        redelivery_window(&self.inner.settings)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
