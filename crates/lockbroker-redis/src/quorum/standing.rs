//! Which nodes may count toward a majority: those whose data this broker
//! trusts. A node that restarted without its data (Redlock's "delayed
//! restart") gets a new epoch, made by the first broker to notice, with a time
//! until which it stays out of every majority: until every lease that could
//! have been on it expired, as the other nodes' lease horizons say. Every
//! broker reads that time from the node itself, so all agree on it.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::join_all;
use lockbroker_core::lease::random_hex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::tally::Drift;
use crate::scripts::calls::{Epoch, EpochCall, ReadmitCall};
use crate::store::RedisLockStore;

/// How often every node's epoch is read.
const REFRESH: Duration = Duration::from_millis(250);

#[derive(Clone, Default)]
struct Node {
    up: bool,
    epoch: Option<String>,
    /// Out of every majority until then (after a restart without data).
    out_until: Option<Instant>,
    /// Restarted without data, and its fence floor not yet raised.
    pending_marks: bool,
}

/// What this broker knows of each node's standing.
pub struct Standing {
    nodes: Mutex<Vec<Node>>,
    majority: usize,
    drift: Drift,
    /// Wakes the watcher before its next round (a node answered that it is
    /// not in good standing).
    recheck: Notify,
}

impl Standing {
    /// Nothing known yet of `count` nodes.
    pub fn new(count: usize, drift: Drift) -> Self {
        Self {
            nodes: Mutex::new(vec![Node::default(); count]),
            majority: count / 2 + 1,
            drift,
            recheck: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The epoch of node `at` as this broker knows it, for a fence
    /// write-back (which the node refuses if it has another, or is still out
    /// of majorities). `None` while unknown; asks for a fresh look.
    pub fn epoch(&self, at: usize) -> Option<String> {
        let epoch = self.lock().get(at).and_then(|node| node.epoch.clone());
        if epoch.is_none() {
            self.recheck.notify_one();
        }
        epoch
    }

    /// Asks the watcher to look at every node again now.
    pub fn recheck(&self) {
        self.recheck.notify_one();
    }

    /// Nodes in good standing: answering, epoch known, not out of majorities.
    pub fn in_standing(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .iter()
            .filter(|n| n.up && n.epoch.is_some() && !n.pending_marks)
            .filter(|n| n.out_until.is_none_or(|t| t <= now))
            .count()
    }

    /// Which nodes answer, and how many of those are out of majorities.
    pub fn counts(&self) -> (Vec<bool>, usize) {
        let now = Instant::now();
        let nodes = self.lock();
        let up = nodes.iter().map(|n| n.up).collect();
        let out = nodes
            .iter()
            .filter(|n| n.up && (n.pending_marks || n.out_until.is_some_and(|t| t > now)))
            .count();
        (up, out)
    }

    /// Reads every node's epoch every [`REFRESH`] (or at once when asked),
    /// for as long as the store lives.
    pub async fn watch(self: std::sync::Arc<Self>, nodes: Vec<RedisLockStore>) {
        loop {
            self.refresh(&nodes).await;
            tokio::select! {
                () = tokio::time::sleep(REFRESH) => {}
                () = self.recheck.notified() => {}
            }
        }
    }

    async fn refresh(&self, nodes: &[RedisLockStore]) {
        let read = EpochCall {
            fresh_id: "",
            quarantine_ms: 0,
        };
        let mut epochs: Vec<Option<Epoch>> = join_all(nodes.iter().map(|node| node.epoch(&read)))
            .await
            .into_iter()
            .map(Result::ok)
            .collect();
        // How long a lease now on some node may still last: a node that lost
        // its data stays out of majorities that long.
        let horizon_ms = epochs
            .iter()
            .flatten()
            .map(|e| e.horizon_ms.saturating_sub(e.now_ms))
            .max()
            .unwrap_or(0);
        let quarantine_ms =
            horizon_ms + (horizon_ms as f64 * self.drift.factor).ceil() as u64 + self.drift.ms;
        // The horizon speaks for every lease only when a majority answered:
        // every valid lease lives on a majority, so on one of these.
        let answered = epochs.iter().flatten().count();
        for (at, epoch) in epochs.iter_mut().enumerate() {
            if answered >= self.majority && epoch.as_ref().is_some_and(|e| e.id.is_none()) {
                let fresh_id = random_hex::<8>();
                let make = EpochCall {
                    fresh_id: &fresh_id,
                    quarantine_ms,
                };
                *epoch = nodes[at].epoch(&make).await.ok();
            }
        }
        // Readmission: a node that came back empty takes, as its fence floor,
        // the highest fence the nodes that kept their data report. Every
        // fence that stood was issued or taken by a majority, and a majority
        // of nodes that kept their data includes one of those. When more than
        // a minority lost their data, what the others know is all there is
        // (the fences then rest on the time and broker floors as well).
        let pending = epochs.iter().flatten().filter(|e| e.pending_marks).count();
        let kept = answered - pending;
        if answered >= self.majority
            && (kept >= self.majority || pending > nodes.len() - self.majority)
        {
            let floor = epochs.iter().flatten().map(|e| e.max_fence).max();
            for (at, epoch) in epochs.iter_mut().enumerate() {
                let Some(pending) = epoch.as_mut().filter(|e| e.pending_marks) else {
                    continue;
                };
                let Some(id) = pending.id.clone() else {
                    continue;
                };
                let readmit = ReadmitCall {
                    epoch: &id,
                    floor: floor.unwrap_or(0),
                };
                if matches!(nodes[at].readmit(&readmit).await, Ok(true)) {
                    pending.pending_marks = false;
                }
            }
        }
        let now = Instant::now();
        let mut known = self.lock();
        for (node, epoch) in known.iter_mut().zip(epochs) {
            node.up = epoch.is_some();
            if let Some(epoch) = epoch {
                node.out_until = (epoch.until_ms > epoch.now_ms)
                    .then(|| now + Duration::from_millis(epoch.until_ms - epoch.now_ms));
                node.epoch = epoch.id;
                node.pending_marks = epoch.pending_marks;
            }
        }
    }
}
