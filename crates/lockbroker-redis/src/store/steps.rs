//! The lock steps by the script of their lease's kind: an acquire (which
//! also keeps the store's fence floor), an extend and a release, each sent
//! with the text a quorum made once for every node when it made one.

use std::sync::atomic::Ordering;

use fred::clients::Client;
use lockbroker_core::{
    AcquireOutcome, AcquireParams, ExtendOutcome, FairEntry, Fence, LeaseKind, LeaseToken,
    LockName, ReleaseOutcome, StoreError,
};

use super::RedisLockStore;
use crate::scripts::calls::{
    AcquireCall, ExtendCall, HoldCall, HoldExtendCall, HoldReleaseCall, ReleaseCall,
};
use crate::scripts::CallText;

impl RedisLockStore {
    /// An acquire, in quorum mode as one node in `quorum`'s epoch with its
    /// proposal, and with the call's text made once for every node.
    pub(super) async fn acquire_in_epoch(
        &self,
        params: &AcquireParams<'_>,
        quorum: Option<(&str, u64)>,
        text: Option<CallText>,
    ) -> Result<AcquireOutcome, StoreError> {
        let floor = &self.inner.fence_floor;
        let epoch = quorum.map(|(epoch, _)| epoch);
        let call = AcquireCall {
            params,
            fence_floor: quorum.map_or_else(|| floor.load(Ordering::Relaxed), |(_, p)| p),
            epoch,
        };
        let client = self.client_for(params.name);
        let acquired = match params.kind {
            LeaseKind::Exclusive => self.call_with_text(client, &call, text).await?,
            LeaseKind::Shared | LeaseKind::Permit => {
                self.call_with_text(client, &HoldCall(call), text).await?
            }
        };
        let fence = match &acquired.outcome {
            AcquireOutcome::Granted(lease) => lease.fence,
            AcquireOutcome::Busy { blockers, .. } => blockers.holder.fence,
            AcquireOutcome::LimitConflict { .. } | AcquireOutcome::Contended => Fence::new(0),
        };
        floor.fetch_max(fence.get(), Ordering::Relaxed);
        if let Some(ahead) = acquired.fence_ahead {
            floor.fetch_max(ahead, Ordering::Relaxed);
        }
        // A quorum raises its nodes' floors on purpose (docs/quorum.md).
        if let (true, None, Some(observer)) = (acquired.floor_raised, epoch, &self.inner.observer) {
            observer.fence_floor_raised();
        }
        if self.inner.settings.replica_ack.is_none() {
            return Ok(acquired.outcome);
        }
        // Boxed: the wait for replicas holds fred command futures of several
        // KiB, and a waiting acquire carries this future's size for its whole
        // wait (docs/performance.md, memory).
        Box::pin(self.grant_acknowledged(client, params.name, acquired.outcome)).await
    }

    /// Releases `token`'s lease of `name` by the script of its kind, with
    /// the call's text when a quorum made it once for every node
    /// ([`Self::release_text`]).
    pub(super) async fn release_call(
        &self,
        client: &Client,
        name: &LockName,
        token: &LeaseToken,
        requeue: Option<FairEntry<'_>>,
        undo: bool,
        text: Option<CallText>,
    ) -> Result<ReleaseOutcome, StoreError> {
        let call = ReleaseCall {
            name,
            token,
            requeue,
            undo,
        };
        match token.kind() {
            LeaseKind::Exclusive => self.call_with_text(client, &call, text).await,
            LeaseKind::Shared | LeaseKind::Permit => {
                (self.call_with_text(client, &HoldReleaseCall(call), text)).await
            }
        }
    }

    /// Extends `call`'s lease by the script of its kind, sending `text` when
    /// a quorum made it once for every node ([`Self::extend_text`]).
    pub async fn extend_with_text(
        &self,
        call: &ExtendCall<'_>,
        text: Option<CallText>,
    ) -> Result<ExtendOutcome, StoreError> {
        let client = self.client_for(call.name);
        let outcome = match call.token.kind() {
            LeaseKind::Exclusive => self.call_with_text(client, call, text).await?,
            LeaseKind::Shared | LeaseKind::Permit => {
                let held = HoldExtendCall(ExtendCall { ..*call });
                self.call_with_text(client, &held, text).await?
            }
        };
        self.extend_acknowledged(client, call.name, outcome).await
    }

    /// The text of `call` by the script of its lease's kind, on this
    /// store's keys: a quorum makes it once and sends it to every node.
    pub fn extend_text(&self, call: &ExtendCall<'_>) -> CallText {
        let context = &self.inner.context;
        match call.token.kind() {
            LeaseKind::Exclusive => CallText::of(call, context),
            LeaseKind::Shared | LeaseKind::Permit => {
                CallText::of(&HoldExtendCall(ExtendCall { ..*call }), context)
            }
        }
    }

    /// A plain release of `token`'s lease of `name`, sending `text` when a
    /// quorum made it once for every node ([`Self::release_text`]), and
    /// waiting for replicas when the settings ask it to.
    pub async fn release_with_text(
        &self,
        name: &LockName,
        token: &LeaseToken,
        text: Option<CallText>,
    ) -> Result<ReleaseOutcome, StoreError> {
        let client = self.client_for(name);
        let outcome = (self.release_call(client, name, token, None, false, text)).await?;
        Ok(self.release_acknowledged(client, name, outcome).await)
    }

    /// The text of a plain release of `token`'s lease of `name` (the call
    /// [`Self::release_call`] makes without a requeue or undo), on this
    /// store's keys: a quorum makes it once and sends it to every node.
    pub fn release_text(&self, name: &LockName, token: &LeaseToken) -> CallText {
        let call = ReleaseCall {
            name,
            token,
            requeue: None,
            undo: false,
        };
        let context = &self.inner.context;
        match token.kind() {
            LeaseKind::Exclusive => CallText::of(&call, context),
            LeaseKind::Shared | LeaseKind::Permit => CallText::of(&HoldReleaseCall(call), context),
        }
    }
}
