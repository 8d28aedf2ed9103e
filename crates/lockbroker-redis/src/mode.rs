//! [`RedisStore`]: the store of whichever mode the broker runs in, behind one
//! type, so the service and the server are written once for every mode.

use std::time::Duration;

use lockbroker_core::{
    AcquireOutcome, AcquireParams, Announcement, ExtendOutcome, ExtendStep, ForceReleaseOutcome,
    LeaseToken, ListRequest, LockName, LockPage, LockStatus, LockStore, Principal, ReleaseOutcome,
    SessionEntry, SessionRecord, SessionWrite, StoreError, Together, Ttl, Wake,
};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::quorum::QuorumStore;
use crate::store::RedisLockStore;

/// A lock store over one Redis, or over a quorum of independent ones.
#[derive(Clone)]
pub enum RedisStore {
    /// One Redis, at its URL or the primary Sentinel names, or a Redis
    /// Cluster.
    Single(RedisLockStore),
    /// A majority of N independent Redis primaries.
    Quorum(QuorumStore),
}

/// Runs the same call on whichever store this is.
macro_rules! each {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            RedisStore::Single($store) => $call,
            RedisStore::Quorum($store) => $call,
        }
    };
}

impl RedisStore {
    /// Closes every connection.
    pub async fn disconnect(&self) {
        each!(self, store => store.disconnect().await)
    }

    /// Why the servers cannot be used by this mode, when they answer that
    /// they cannot (see [`RedisLockStore::unsupported_server`]).
    pub async fn unsupported_server(&self) -> Option<String> {
        match self {
            RedisStore::Single(store) => store.unsupported_server().await,
            RedisStore::Quorum(_) => None,
        }
    }
}

impl LockStore for RedisStore {
    async fn acquire(&self, params: AcquireParams<'_>) -> Result<AcquireOutcome, StoreError> {
        each!(self, store => store.acquire(params).await)
    }

    async fn acquire_together(
        &self,
        all: &[AcquireParams<'_>],
    ) -> Option<Result<Together, StoreError>> {
        each!(self, store => store.acquire_together(all).await)
    }

    async fn extend_together(
        &self,
        all: &[ExtendStep<'_>],
    ) -> Option<Result<Vec<ExtendOutcome>, StoreError>> {
        each!(self, store => store.extend_together(all).await)
    }

    async fn extend(
        &self,
        name: &LockName,
        token: &LeaseToken,
        ttl: Ttl,
        max_hold_ms: u64,
    ) -> Result<ExtendOutcome, StoreError> {
        each!(self, store => store.extend(name, token, ttl, max_hold_ms).await)
    }

    async fn release(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        each!(self, store => store.release(name, token).await)
    }

    async fn status(&self, name: &LockName) -> Result<LockStatus, StoreError> {
        each!(self, store => store.status(name).await)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        each!(self, store => store.ping().await)
    }

    async fn list(&self, request: &ListRequest) -> Result<LockPage, StoreError> {
        each!(self, store => store.list(request).await)
    }

    async fn force_release(
        &self,
        name: &LockName,
        by: &Principal,
    ) -> Result<ForceReleaseOutcome, StoreError> {
        each!(self, store => store.force_release(name, by).await)
    }

    async fn leave_queue(&self, name: &LockName, waiter_id: &str) -> Result<(), StoreError> {
        each!(self, store => store.leave_queue(name, waiter_id).await)
    }

    async fn watch(&self, name: &LockName) {
        each!(self, store => store.watch(name).await)
    }

    fn unwatch(&self, name: &LockName) {
        each!(self, store => store.unwatch(name))
    }

    fn take_wakes(&self) -> Option<UnboundedReceiver<Wake>> {
        each!(self, store => store.take_wakes())
    }

    async fn announce(&self, announcement: &Announcement) {
        each!(self, store => store.announce(announcement).await)
    }

    fn take_announcements(&self) -> Option<UnboundedReceiver<Announcement>> {
        each!(self, store => store.take_announcements())
    }

    async fn session_write(
        &self,
        session: &LockName,
        token: &LeaseToken,
        entry: SessionEntry<'_>,
    ) -> Result<SessionWrite, StoreError> {
        each!(self, store => store.session_write(session, token, entry).await)
    }

    async fn session_read(
        &self,
        session: &LockName,
        token: Option<&LeaseToken>,
    ) -> Result<SessionRecord, StoreError> {
        each!(self, store => store.session_read(session, token).await)
    }

    async fn session_forget(
        &self,
        session: &LockName,
        tokens: Option<&[LeaseToken]>,
    ) -> Result<(), StoreError> {
        each!(self, store => store.session_forget(session, tokens).await)
    }

    fn orphan_window(&self) -> Duration {
        each!(self, store => store.orphan_window())
    }
}
