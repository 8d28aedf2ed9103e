//! Quorum mode's metrics: each node's standing and latency, and the steps off
//! a grant's fast path. Registered in every mode (at 0 in single mode), so
//! dashboards and alert rules need no mode of their own.

use std::sync::OnceLock;
use std::time::Duration;

use lockbroker_redis::quorum::NodeCounts;
use lockbroker_redis::QuorumEvent;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntGauge, IntGaugeVec, Opts, Registry,
};

use super::SCRIPT_BUCKETS;

/// Quorum mode's metrics.
pub struct QuorumMetrics {
    /// Nodes that answer this broker.
    pub nodes_up: IntGauge,
    /// Answering nodes kept out of every majority after they restarted
    /// without their data.
    pub nodes_restarting: IntGauge,
    /// How many nodes a majority is (0 in single mode).
    pub majority: IntGauge,
    /// 1 per node that answers, by its place in `redis.nodes`.
    node_up: IntGaugeVec,
    /// 1 per node found to be a replica or a server listed before it.
    node_misconfigured: IntGaugeVec,
    /// Script latency per node.
    node_seconds: HistogramVec,
    /// Each node's series of `node_seconds`, looked up once, when the nodes
    /// are first counted: every script on every node is timed into one.
    node_series: OnceLock<Vec<Histogram>>,
    /// 1 per node whose last step timed out: not waited for.
    node_slow: IntGaugeVec,
    fence_write_backs: IntCounter,
    rollbacks: IntCounter,
    late_grants: IntCounter,
}

impl QuorumMetrics {
    /// Registers quorum mode's metrics in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            nodes_up: IntGauge::new(
                "lockbroker_quorum_nodes_up",
                "Quorum mode: nodes that answer this broker (0 in single mode).",
            )?,
            nodes_restarting: IntGauge::new(
                "lockbroker_quorum_nodes_restarting",
                "Quorum mode: answering nodes kept out of every majority after restarting without their data.",
            )?,
            majority: IntGauge::new(
                "lockbroker_quorum_majority",
                "Quorum mode: how many nodes a majority is (0 in single mode).",
            )?,
            node_up: IntGaugeVec::new(
                Opts::new(
                    "lockbroker_quorum_node_up",
                    "Quorum mode: 1 while the node (its place in redis.nodes, from 0) answers this broker.",
                ),
                &["node"],
            )?,
            node_misconfigured: IntGaugeVec::new(
                Opts::new(
                    "lockbroker_quorum_node_misconfigured",
                    "Quorum mode: 1 while the node (its place in redis.nodes, from 0) is a replica or the same Redis server as a node before it; it counts toward no majority.",
                ),
                &["node"],
            )?,
            node_slow: IntGaugeVec::new(
                Opts::new(
                    "lockbroker_quorum_node_slow",
                    "Quorum mode: 1 while the node (its place in redis.nodes, from 0) timed out on its last step; steps are still sent to it but not waited for until it answers in time again.",
                ),
                &["node"],
            )?,
            node_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "lockbroker_quorum_node_script_duration_seconds",
                    "Quorum mode: script latency on each node (its place in redis.nodes, from 0), as seen by the broker.",
                )
                .buckets(SCRIPT_BUCKETS.to_vec()),
                &["node"],
            )?,
            node_series: OnceLock::new(),
            fence_write_backs: IntCounter::new(
                "lockbroker_quorum_fence_write_backs_total",
                "Quorum mode: shared leases and permits whose fence too few granting nodes issued, written back to the others in a second round trip (an exclusive lease carries one fence on every node, or its round is asked again).",
            )?,
            rollbacks: IntCounter::new(
                "lockbroker_quorum_rollbacks_total",
                "Quorum mode: acquires whose grants on some nodes were undone because no majority grant stood.",
            )?,
            late_grants: IntCounter::new(
                "lockbroker_quorum_late_grants_settled_total",
                "Quorum mode: grants a node made after its acquire was answered, given the lease's fence or undone in the background.",
            )?,
        };
        registry.register(Box::new(metrics.nodes_up.clone()))?;
        registry.register(Box::new(metrics.nodes_restarting.clone()))?;
        registry.register(Box::new(metrics.majority.clone()))?;
        registry.register(Box::new(metrics.node_up.clone()))?;
        registry.register(Box::new(metrics.node_misconfigured.clone()))?;
        registry.register(Box::new(metrics.node_seconds.clone()))?;
        registry.register(Box::new(metrics.fence_write_backs.clone()))?;
        registry.register(Box::new(metrics.rollbacks.clone()))?;
        registry.register(Box::new(metrics.node_slow.clone()))?;
        registry.register(Box::new(metrics.late_grants.clone()))?;
        Ok(metrics)
    }

    /// Sets the node gauges from what the store knows: which nodes answer,
    /// which are misconfigured or slow, how many are restarting, and how
    /// many a majority is.
    pub fn set_nodes(&self, nodes: &NodeCounts) {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.node_series.get_or_init(|| {
            (0..nodes.up.len())
                .map(|at| (self.node_seconds).with_label_values(&[node_label(at).as_str()]))
                .collect()
        });
        for (at, up) in nodes.up.iter().enumerate() {
            let label = node_label(at);
            self.node_up
                .with_label_values(&[label.as_str()])
                .set(i64::from(*up));
            let misconfigured = nodes.misconfigured.get(at).copied().unwrap_or(false);
            self.node_misconfigured
                .with_label_values(&[label.as_str()])
                .set(i64::from(misconfigured));
            let slow = nodes.slow.get(at).copied().unwrap_or(false);
            self.node_slow
                .with_label_values(&[label.as_str()])
                .set(i64::from(slow));
        }
        self.nodes_up
            .set(count(nodes.up.iter().filter(|up| **up).count()));
        self.nodes_restarting.set(count(nodes.restarting));
        self.majority.set(count(nodes.majority));
    }

    /// Records one script's latency on node `node`.
    pub fn node_script_finished(&self, node: usize, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        match self.node_series.get().and_then(|series| series.get(node)) {
            Some(series) => series.observe(seconds),
            None => (self.node_seconds)
                .with_label_values(&[node_label(node).as_str()])
                .observe(seconds),
        }
    }

    /// Counts a step off a grant's fast path.
    pub fn event(&self, event: QuorumEvent) {
        match event {
            QuorumEvent::FenceWrittenBack => self.fence_write_backs.inc(),
            QuorumEvent::GrantRolledBack => self.rollbacks.inc(),
            QuorumEvent::LateGrantSettled => self.late_grants.inc(),
        }
    }
}

/// A node's label: its place in `redis.nodes`, never its URL (which may
/// carry credentials).
fn node_label(at: usize) -> String {
    at.to_string()
}
