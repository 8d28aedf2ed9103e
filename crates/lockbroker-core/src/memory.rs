//! [`MemoryStore`]: a [`LockStore`] in process memory, for unit tests of the
//! service logic only (the `testing` feature). It is never a production mode.
//!
//! It follows the Redis scripts step for step (the same grant, retry, fence,
//! lock-delay, memo and fair-queue rules), so it passes the same conformance
//! suite, and it keeps time with Tokio's clock, so tests may pause time. Several
//! handles on one store act as several brokers sharing a backend: each has its
//! own id, fence floor and stream of release announcements.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::time::Instant;

use crate::error::StoreError;
use crate::events::Announcement;
use crate::lease::{random_hex, LeaseKind, LockStatus, Principal};
use crate::listing::{ListRequest, LockPage};
use crate::name::LockName;
use crate::session::{SessionEntry, SessionRecord, SessionWrite};
use crate::store::{
    AcquireOutcome, AcquireParams, ExtendOutcome, ForceReleaseOutcome, LockStore, ReleaseOutcome,
};
use crate::wait::{TakeOnce, Wake, WakeStream};
use crate::{LeaseToken, Ttl};

mod backend;
mod exclusive;
mod holders;
mod inspect;
mod sessions;

use backend::Backend;

/// How long a released lease is remembered, as the Redis store's default.
const RELEASE_MEMO_MS: u64 = 30_000;

struct Shared {
    backend: Mutex<Backend>,
    /// Unix ms at `started`, so the clock follows Tokio's (pausable) time.
    epoch_ms: u64,
    started: Instant,
}

/// A lock store in memory; see the module documentation.
pub struct MemoryStore {
    shared: Arc<Shared>,
    broker_id: String,
    fence_floor: AtomicU64,
    wakes: WakeStream,
    announcements: TakeOnce<Announcement>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A new, empty store with one handle.
    pub fn new() -> Self {
        let epoch_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
        let shared = Arc::new(Shared {
            backend: Mutex::new(Backend::default()),
            epoch_ms,
            started: Instant::now(),
        });
        Self::attach(shared)
    }

    /// Another handle on the same store: a second broker sharing the backend.
    pub fn peer(&self) -> Self {
        Self::attach(Arc::clone(&self.shared))
    }

    fn attach(shared: Arc<Shared>) -> Self {
        let broker_id = random_hex::<8>();
        let (raw_tx, mut raw_rx) = unbounded_channel::<(String, Wake)>();
        let (tx, rx) = unbounded_channel();
        let (announce_tx, announce_rx) = unbounded_channel();
        {
            let mut backend = lock(&shared.backend);
            backend.subscribers.push((broker_id.clone(), raw_tx));
            backend.watchers.push(announce_tx);
        }
        // This handle's own releases already woke its local waiters: from its
        // own announcements only the fair waiter named is woken, as in Redis.
        let own = broker_id.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                while let Some((origin, wake)) = raw_rx.recv().await {
                    let wake = match wake {
                        Wake::Released { next_fair, .. } if origin == own => {
                            next_fair.map(|waiter_id| Wake::Turn { waiter_id })
                        }
                        other => Some(other),
                    };
                    if let Some(wake) = wake {
                        if tx.send(wake).is_err() {
                            return;
                        }
                    }
                }
            });
        }
        Self {
            shared,
            broker_id,
            fence_floor: AtomicU64::new(0),
            wakes: WakeStream::new(rx),
            announcements: TakeOnce::new(announce_rx),
        }
    }

    /// Forgets every lock, fence and queue, as a backend restarted without
    /// persistence does. Fences still grow afterwards: from the clock and from
    /// each handle's floor.
    pub fn lose_data(&self) {
        let mut backend = lock(&self.shared.backend);
        backend.leases.clear();
        backend.holder_sets.clear();
        backend.fences.clear();
        backend.memos.clear();
        backend.queues.clear();
        backend.sessions.clear();
    }

    /// Records `fence` as the last fence issued for `name`, as a backend
    /// whose clock ran ahead leaves it.
    pub fn put_last_fence(&self, name: &LockName, fence: u64) {
        lock(&self.shared.backend)
            .fences
            .insert(name.clone(), fence);
    }

    /// Makes every step fail as unreachable (`true`) or work again (`false`).
    pub fn set_unavailable(&self, unavailable: bool) {
        lock(&self.shared.backend).unavailable = unavailable;
    }

    /// The fence of a grant now: above the last one issued, the clock and
    /// this handle's floor, as the scripts make it.
    fn next_fence(&self, last: u64, now_us: u64) -> u64 {
        let floor = self.fence_floor.load(Ordering::Relaxed);
        let fence = (last + 1).max(now_us).max(floor + 1);
        self.fence_floor.fetch_max(fence, Ordering::Relaxed);
        fence
    }

    /// The store's clock in Unix microseconds.
    fn now_us(&self) -> u64 {
        let elapsed = u64::try_from(self.shared.started.elapsed().as_micros()).unwrap_or(0);
        self.shared.epoch_ms * 1_000 + elapsed
    }

    /// The backend, with forgotten records pruned, or unavailable.
    fn backend(&self, now_ms: u64) -> Result<MutexGuard<'_, Backend>, StoreError> {
        let mut backend = lock(&self.shared.backend);
        if backend.unavailable {
            return Err(StoreError::Unavailable(
                "the memory store is set unavailable".into(),
            ));
        }
        backend.leases.retain(|_, r| r.kept_until_ms > now_ms);
        backend.memos.retain(|_, m| m.until_ms > now_ms);
        backend.holder_sets.retain(|_, set| {
            set.prune(now_ms);
            !set.leases.is_empty()
        });
        Ok(backend)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn owner_of(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

impl LockStore for MemoryStore {
    async fn acquire(&self, params: AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        let now_us = self.now_us();
        let mut backend = self.backend(now_us / 1_000)?;
        if params.kind != LeaseKind::Exclusive {
            return self.acquire_place(&mut backend, &params, now_us);
        }
        self.acquire_exclusive(&mut backend, &params, now_us)
    }

    async fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl: Ttl,
        max_hold_ms: u64,
    ) -> Result<ExtendOutcome, StoreError> {
        let now_ms = self.now_us() / 1_000;
        let mut backend = self.backend(now_ms)?;
        let ttl_ms = ttl.as_millis();
        Ok(match token.kind() {
            LeaseKind::Exclusive => {
                Self::extend_exclusive(&mut backend, name, token, ttl_ms, max_hold_ms, now_ms)
            }
            _ => Self::extend_place(&mut backend, name, token, ttl_ms, max_hold_ms, now_ms),
        })
    }

    async fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let now_ms = self.now_us() / 1_000;
        let mut backend = self.backend(now_ms)?;
        Ok(match token.kind() {
            LeaseKind::Exclusive => self.release_exclusive(&mut backend, name, token, now_ms),
            _ => self.release_place(&mut backend, name, token, now_ms),
        })
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, StoreError> {
        let now_ms = self.now_us() / 1_000;
        let backend = self.backend(now_ms)?;
        Ok(Self::status_of(&backend, name, now_ms))
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.backend(0).map(drop)
    }

    async fn list(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        let now_ms = self.now_us() / 1_000;
        let backend = self.backend(now_ms)?;
        Ok(Self::page(&backend, request, now_ms))
    }

    async fn force_release(
        &self,
        name: &LockName,
        by: &Principal,
    ) -> Result<ForceReleaseOutcome, StoreError> {
        let now_ms = self.now_us() / 1_000;
        let mut backend = self.backend(now_ms)?;
        Ok(self.end_all(&mut backend, name, by, now_ms))
    }

    async fn leave_queue(&self, name: &LockName, waiter_id: &str) -> Result<(), StoreError> {
        let now_ms = self.now_us() / 1_000;
        let mut backend = self.backend(now_ms)?;
        backend.queue_leave(name, waiter_id);
        let free = backend
            .leases
            .get(name)
            .is_none_or(|r| r.released || r.expires_ms <= now_ms);
        if free {
            if let Some(next) = backend.queue_head(name, now_ms) {
                backend.announce(&self.broker_id, &Wake::Turn { waiter_id: next });
            }
        }
        Ok(())
    }

    fn take_wakes(&self) -> Option<UnboundedReceiver<Wake>> {
        self.wakes.take()
    }

    async fn announce(&self, announcement: &Announcement) {
        let backend = lock(&self.shared.backend);
        for watcher in &backend.watchers {
            let _ = watcher.send(announcement.clone());
        }
    }

    fn take_announcements(&self) -> Option<UnboundedReceiver<Announcement>> {
        self.announcements.take()
    }

    async fn session_write(
        &self,
        session: &LockName,
        token: &LeaseToken,
        entry: SessionEntry<'_>,
    ) -> Result<SessionWrite, StoreError> {
        let now_ms = self.now_us() / 1_000;
        let mut backend = self.backend(now_ms)?;
        Ok(sessions::write(&mut backend, session, token, entry, now_ms))
    }

    async fn session_read(
        &self,
        session: &LockName,
        token: Option<&LeaseToken>,
    ) -> Result<SessionRecord, StoreError> {
        let now_ms = self.now_us() / 1_000;
        let mut backend = self.backend(now_ms)?;
        Ok(sessions::read(&mut backend, session, token, now_ms))
    }

    async fn session_forget(
        &self,
        session: &LockName,
        tokens: Option<&[LeaseToken]>,
    ) -> Result<(), StoreError> {
        let now_ms = self.now_us() / 1_000;
        let mut backend = self.backend(now_ms)?;
        sessions::forget(&mut backend, session, tokens);
        Ok(())
    }

    fn orphan_window(&self) -> Duration {
        Duration::ZERO
    }
}
