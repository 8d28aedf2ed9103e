//! Extending and releasing a lease on every node: the step's text is made
//! once for all of them (`CallText`), and the step is answered as soon as
//! the answers in hand decide it (`tally/decided.rs`).

use std::sync::Arc;

use lockbroker_core::{ExtendOutcome, LeaseToken, LockName, ReleaseOutcome, StoreError};
use tokio::time::Instant;

use super::fan_out::in_hand;
use super::permits::extended_limit;
use super::tally::{self, decided};
use super::QuorumStore;
use crate::scripts::calls::ExtendCall;

impl QuorumStore {
    /// `call`'s extend on every node, answered as soon as the answers
    /// decide it.
    pub(super) async fn extend_on_nodes(
        &self,
        call: &ExtendCall<'_>,
    ) -> Result<ExtendOutcome, StoreError> {
        let inner = &self.inner;
        let started = Instant::now();
        let (kind, ttl, max_hold_ms) = (call.token.kind(), call.ttl, call.max_hold_ms);
        // One copy of the step for every node: its name, token and text.
        let text = (inner.nodes.first()).map(|node| node.extend_text(call));
        let step = Arc::new((call.name.clone(), call.token.clone()));
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let (step, text) = (Arc::clone(&step), text.clone());
                    async move {
                        let call = ExtendCall::new(&step.0, &step.1, ttl, max_hold_ms);
                        node.extend_with_text(&call, text).await
                    }
                },
                |progress| {
                    let needed = self.needed(kind, extended_limit(progress.answers));
                    decided::extend(progress, inner.majority, needed)
                },
            )
            .await;
        late.finish();
        let validity = inner.drift.validity(ttl, started.elapsed());
        // A permit must stay on as many nodes as its grant needed.
        let needed = self.needed(kind, extended_limit(&answers));
        let mut outcome = tally::extend(in_hand(answers), inner.majority, needed, validity)?;
        if let ExtendOutcome::Extended(renewal) = &mut outcome {
            renewal.expires_at_ms = renewal
                .expires_at_ms
                .saturating_sub(inner.drift.allowance(ttl));
        }
        Ok(outcome)
    }

    /// A release on every node, answered once a majority answered.
    pub(super) async fn release_on_nodes(
        &self,
        name: &LockName,
        token: &LeaseToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        let majority = self.inner.majority;
        // One copy of the step for every node: its name, token and text.
        let text = (self.inner.nodes.first()).map(|node| node.release_text(name, token));
        let step = Arc::new((name.clone(), token.clone()));
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let (step, text) = (Arc::clone(&step), text.clone());
                    async move { node.release_with_text(&step.0, &step.1, text).await }
                },
                |progress| decided::release(progress, majority),
            )
            .await;
        late.finish();
        tally::release(in_hand(answers), majority)
    }
}
