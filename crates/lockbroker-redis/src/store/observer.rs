//! What the store measures for metrics, and hands to an observer.

use std::time::Duration;

/// Receives what the store measures, for metrics. Called on the request path:
/// implementations must be cheap and must not block.
pub trait StoreObserver: Send + Sync + 'static {
    /// A script finished (successfully or not) after `elapsed`.
    fn script_finished(&self, script: &'static str, elapsed: Duration);
    /// A grant's fence was raised by this broker's floor above both Redis's
    /// counter and clock: Redis lost its data and its clock runs behind.
    fn fence_floor_raised(&self);
    /// Quorum mode: a script on node `node` (its place in the node list)
    /// finished after `elapsed`.
    fn node_script_finished(&self, node: usize, elapsed: Duration) {
        let _ = (node, elapsed);
    }
    /// Quorum mode: something happened that an operator counts.
    fn quorum_event(&self, event: QuorumEvent) {
        let _ = event;
    }
    /// Fewer replicas than `redis.min_replicas_acked` acknowledged a `step`
    /// (`acquire`, `extend` or `release`) in time.
    fn replica_ack_missed(&self, step: &'static str) {
        let _ = step;
    }
}

/// Quorum mode: the steps off the fast path of a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuorumEvent {
    /// A majority granted, but fewer than a majority issued the grant's
    /// fence: it was written back to the others.
    FenceWrittenBack,
    /// An acquire left grants (or possible grants) on some nodes without a
    /// majority grant standing, and they were undone.
    GrantRolledBack,
    /// A node answered an acquire after it was decided, with a grant that
    /// did not stand as it was (another fence, or no grant was made): given
    /// the lease's fence, or undone, in the background.
    LateGrantSettled,
}
