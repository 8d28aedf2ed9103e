//! Quorum mode: the steps a [`crate::quorum::QuorumStore`] takes on one
//! node besides the common lock steps: an acquire in the node's epoch with
//! the round's fence proposal, a fence write-back, undoing a grant no
//! majority made, the node's epoch and its readmission, and which server
//! the node is.

use fred::interfaces::ClientLike;
use fred::types::InfoKind;
use std::sync::atomic::Ordering;

use lockbroker_core::{
    AcquireOutcome, AcquireParams, FairEntry, LeaseToken, LockName, ReleaseOutcome, StoreError,
};

use super::RedisLockStore;
use crate::connection::{endpoint, store_error};
use crate::scripts::calls::{
    quorum_acquire_text, with_epoch, AdoptFenceCall, Adoption, Epoch, EpochCall, ReadmitCall,
};
use crate::scripts::CallText;

impl RedisLockStore {
    /// The highest fence this store has seen on its node (or been told of):
    /// a quorum's proposals start above every node's.
    pub fn floor(&self) -> u64 {
        self.inner.fence_floor.load(Ordering::Relaxed)
    }

    /// Quorum mode: an acquire on this node, which grants only while the
    /// node is in `epoch` and not out of majorities after a restart, and
    /// then raises the node's lease horizon. An exclusive lease is granted
    /// with exactly `proposal + 1` as its fence, or not at all (the answer
    /// is then `Contended`, and this store's floor rises to the fence the
    /// node would have issued, for the next round's proposal).
    ///
    /// `text`, made once for every node ([`Self::acquire_text`]), is sent
    /// with this node's epoch in it.
    pub async fn acquire_as_node(
        &self,
        params: &AcquireParams<'_>,
        epoch: &str,
        proposal: u64,
        text: Option<&CallText>,
    ) -> Result<AcquireOutcome, StoreError> {
        let text = text.map(|text| with_epoch(text, epoch));
        (self.acquire_in_epoch(params, Some((epoch, proposal)), text)).await
    }

    /// Quorum mode: the text of an acquire of `params` with the round's
    /// `proposal`, on this store's keys, made once for every node; each
    /// node's copy differs only by its epoch, which [`Self::acquire_as_node`]
    /// puts in.
    pub fn acquire_text(&self, params: &AcquireParams<'_>, proposal: u64) -> CallText {
        quorum_acquire_text(params, proposal, &self.inner.context)
    }

    /// Quorum mode: writes a majority grant's `fence` back to this node, if
    /// it still holds the lease; whether it did.
    pub async fn adopt_fence(&self, call: &AdoptFenceCall<'_>) -> Result<Adoption, StoreError> {
        self.call_on(self.client_for(call.name), call).await
    }

    /// Quorum mode: undoes a grant that no majority made: releases `token`
    /// and puts the fair waiter it went to back in line at its arrival.
    pub async fn undo_grant(
        &self,
        name: &LockName,
        token: &LeaseToken,
        waiter: Option<FairEntry<'_>>,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.release_call(self.client_for(name), name, token, waiter, true, None)
            .await
    }

    /// Quorum mode: raises this node's fence floor after it restarted
    /// without its data; whether the node's epoch was still `call.epoch`.
    pub async fn readmit(&self, call: &ReadmitCall<'_>) -> Result<bool, StoreError> {
        self.call(call).await
    }

    /// Quorum mode: this node's epoch (made now, as `call` says, if it has
    /// none) and lease horizon.
    pub async fn epoch(&self, call: &EpochCall<'_>) -> Result<Epoch, StoreError> {
        self.call(call).await
    }

    /// Quorum mode: which Redis server answers at this node's URL (its
    /// `run_id`, new at every server start) and whether it is a primary.
    pub async fn identity(&self) -> Result<NodeIdentity, StoreError> {
        let client = self.client();
        let (server, replication) = tokio::try_join!(
            client.info::<String>(Some(InfoKind::Server)),
            client.info::<String>(Some(InfoKind::Replication)),
        )
        .map_err(store_error)?;
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(|value| value.trim().to_owned())
        };
        let run_id = field(&server, "run_id")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| StoreError::Unavailable("INFO server names no run_id".into()))?;
        let primary_of = match field(&replication, "role").as_deref() {
            Some("master") => None,
            _ => Some(
                match (
                    field(&replication, "master_host"),
                    field(&replication, "master_port"),
                ) {
                    (Some(host), Some(port)) => format!("{host}:{port}"),
                    _ => "an unknown primary".to_owned(),
                },
            ),
        };
        Ok(NodeIdentity { run_id, primary_of })
    }

    /// How long a first answer may take: a connection, then a command.
    pub fn first_answer_limit(&self) -> std::time::Duration {
        let settings = &self.inner.settings;
        settings.connect_timeout + settings.command_timeout
    }

    /// This store's Redis URL without credentials, for logs and messages.
    pub fn endpoint(&self) -> String {
        endpoint(&self.inner.settings.url)
    }
}

/// Which Redis server answers at a node's URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    /// The server's `run_id`: two URLs with one are one server.
    pub run_id: String,
    /// Set when the server is a replica: the primary it copies, as
    /// `host:port`. A replica refuses every write, so it is no node.
    pub primary_of: Option<String>,
}
