//! Which nodes may count toward a majority: those whose data this broker
//! trusts, and that are independent primaries. A node that restarted without
//! its data (Redlock's "delayed restart") gets a new epoch, made by the first
//! broker to notice, with a time until which it stays out of every majority:
//! until every lease that could have been on it expired, as the other nodes'
//! lease horizons say. Every broker reads that time from the node itself, so
//! all agree on it. A node that turns out to be a replica, or the same server
//! as a node before it, counts toward nothing until that is mended
//! ([`super::identity`]). Each change of a node's standing is logged once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::join_all;
use lockbroker_core::lease::random_hex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::identity::misconfigurations;
use super::tally::Drift;
use crate::scripts::calls::{Epoch, EpochCall, ReadmitCall};
use crate::store::{NodeIdentity, RedisLockStore};

/// How often every node's epoch is read.
const REFRESH: Duration = Duration::from_millis(250);

/// How often an answering node is asked again which server it is (it is
/// asked at once when it answers after not answering, or gets a new epoch).
const IDENTIFY_EVERY: Duration = Duration::from_secs(5);

#[derive(Clone, Default)]
struct Node {
    /// Looked at least once.
    seen: bool,
    up: bool,
    epoch: Option<String>,
    /// The last epoch seen at the node, kept while the node is down or not
    /// to be used (`epoch` is then `None`), so that a new one is known as a
    /// restart however the looks around the restart went.
    last_epoch: Option<String>,
    /// Out of every majority until then (after a restart without data).
    out_until: Option<Instant>,
    /// Restarted without data, and its fence floor not yet raised.
    pending_marks: bool,
    /// Which server answered, while the node answers.
    identity: Option<NodeIdentity>,
    identified_at: Option<Instant>,
    /// Why the node is no independent primary.
    misconfigured: Option<String>,
}

impl Node {
    fn needs_identity(&self, now: Instant) -> bool {
        !self.up
            || self.identity.is_none()
            || self
                .identified_at
                .is_none_or(|at| now.duration_since(at) >= IDENTIFY_EVERY)
    }
}

/// What this broker knows of each node's standing.
pub struct Standing {
    nodes: Mutex<Vec<Node>>,
    /// Per node: a replica or a second place of one server. Read on every
    /// step, so kept apart from the lock.
    misconfigured: Vec<AtomicBool>,
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
            misconfigured: (0..count).map(|_| AtomicBool::new(false)).collect(),
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
        // A misconfigured node stays out until the next look finds it mended.
        if self.is_misconfigured(at) {
            return None;
        }
        let epoch = self.lock().get(at).and_then(|node| node.epoch.clone());
        if epoch.is_none() {
            self.recheck.notify_one();
        }
        epoch
    }

    /// Whether node `at` was found to be a replica or the same server as a
    /// node before it: it counts toward no majority.
    pub fn is_misconfigured(&self, at: usize) -> bool {
        self.misconfigured
            .get(at)
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
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
            .filter(|n| n.identity.is_some() && n.misconfigured.is_none())
            .filter(|n| n.out_until.is_none_or(|t| t <= now))
            .count()
    }

    /// Which nodes answer, which are misconfigured, and how many answering
    /// nodes are out of majorities after a restart.
    pub fn counts(&self) -> (Vec<bool>, Vec<bool>, usize) {
        let now = Instant::now();
        let nodes = self.lock();
        let up = nodes.iter().map(|n| n.up).collect();
        let misconfigured = nodes.iter().map(|n| n.misconfigured.is_some()).collect();
        let out = nodes
            .iter()
            .filter(|n| n.up && (n.pending_marks || n.out_until.is_some_and(|t| t > now)))
            .count();
        (up, misconfigured, out)
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

    /// One look at every node: what each answers, new epochs for nodes
    /// that lost theirs, readmission of nodes that came back empty, and
    /// what changed, recorded and logged.
    async fn refresh(&self, nodes: &[RedisLockStore]) {
        let mut look = self.look(nodes).await;
        self.stamp_new_epochs(nodes, &mut look.epochs).await;
        self.readmit(nodes, &mut look.epochs).await;
        self.record(look);
    }

    /// Reads every node's epoch, and asks the nodes due for it which server
    /// they are. A node not known to be an independent primary takes no
    /// part in the decisions that follow: a second place of one server
    /// would count its epoch and horizon twice.
    async fn look(&self, nodes: &[RedisLockStore]) -> Look {
        let read = EpochCall {
            fresh_id: "",
            quarantine_ms: 0,
        };
        let now = Instant::now();
        let ask: Vec<bool> = self.lock().iter().map(|n| n.needs_identity(now)).collect();
        let (epochs, asked) = tokio::join!(
            join_all(nodes.iter().map(|node| node.epoch(&read))),
            join_all(nodes.iter().zip(&ask).map(|(node, ask)| async move {
                match ask {
                    true => Some(node.identity().await.ok()),
                    false => None,
                }
            })),
        );
        let mut epochs: Vec<Option<Epoch>> = epochs.into_iter().map(Result::ok).collect();
        let identities: Vec<Option<NodeIdentity>> = {
            let known = self.lock();
            (asked.iter().zip(known.iter()))
                .map(|(asked, node)| match asked {
                    Some(answer) => answer.clone(),
                    None => node.identity.clone(),
                })
                .collect()
        };
        // Answering now: to this look's epoch read or identity question (a
        // known identity is no answer).
        let up: Vec<bool> = (epochs.iter().zip(&asked))
            .map(|(epoch, asked)| epoch.is_some() || matches!(asked, Some(Some(_))))
            .collect();
        let endpoints: Vec<String> = nodes.iter().map(RedisLockStore::endpoint).collect();
        let misconfigured = misconfigurations(&identities, &endpoints);
        for (at, epoch) in epochs.iter_mut().enumerate() {
            if identities[at].is_none() || misconfigured[at].is_some() {
                *epoch = None;
            }
        }
        Look {
            epochs,
            identified: asked.iter().map(Option::is_some).collect(),
            identities,
            up,
            endpoints,
            misconfigured,
        }
    }

    /// Gives a new epoch to every node that has none (it restarted without
    /// its data), keeping it out of majorities for as long as a lease now on
    /// some node may last, drift included.
    ///
    /// The horizons speak for every valid lease only when a majority of the
    /// nodes that answered kept their data through every such lease's life
    /// ([`speaks_for_its_leases`]): every valid lease lives on a majority,
    /// so its copies that remain are on one of those. A node that came back
    /// empty, or is still pending or in quarantine, lost what it held: had
    /// it been counted, a lease left on the nodes that did not answer could
    /// outlive the new epoch's quarantine, and the node would then help grant
    /// the lock again while that lease is valid. When more than a minority of
    /// the nodes that answered lost their data, no such majority will come
    /// back: what the others know is all there is.
    async fn stamp_new_epochs(&self, nodes: &[RedisLockStore], epochs: &mut [Option<Epoch>]) {
        if !horizons_cover_every_lease(epochs, self.majority) {
            return;
        }
        let horizon_ms = epochs
            .iter()
            .flatten()
            .map(|e| e.horizon_ms.saturating_sub(e.now_ms))
            .max()
            .unwrap_or(0);
        let quarantine_ms = horizon_ms + self.drift.allowance_ms(horizon_ms);
        for (at, epoch) in epochs.iter_mut().enumerate() {
            if epoch.as_ref().is_some_and(|e| e.id.is_none()) {
                let fresh_id = random_hex::<8>();
                let make = EpochCall {
                    fresh_id: &fresh_id,
                    quarantine_ms,
                };
                *epoch = nodes[at].epoch(&make).await.ok();
            }
        }
    }

    /// Readmission: a node that came back empty takes, as its fence floor,
    /// the highest fence the nodes that kept their data report. Every fence
    /// that stood was issued or taken by a majority, and a majority of nodes
    /// that kept their data includes one of those. When more than a
    /// minority lost their data, what the others know is all there is (the
    /// fences then rest on the time and broker floors as well).
    async fn readmit(&self, nodes: &[RedisLockStore], epochs: &mut [Option<Epoch>]) {
        let answered = epochs.iter().flatten().count();
        let pending = epochs.iter().flatten().filter(|e| e.pending_marks).count();
        let kept = answered - pending;
        if answered < self.majority
            || (kept < self.majority && pending <= nodes.len() - self.majority)
        {
            return;
        }
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

    /// Keeps what the look found of each node, logging each change once.
    fn record(&self, look: Look) {
        let now = Instant::now();
        let mut known = self.lock();
        for (at, (node, epoch)) in known.iter_mut().zip(look.epochs).enumerate() {
            let up = look.up[at];
            let change = Change {
                at,
                endpoint: &look.endpoints[at],
                up,
                misconfigured: look.misconfigured[at].as_deref(),
                new_epoch: epoch.as_ref().and_then(|e| e.id.as_deref()),
            };
            change.log(node);
            self.misconfigured[at].store(look.misconfigured[at].is_some(), Ordering::Relaxed);
            node.seen = true;
            node.up = up;
            if look.identified[at] {
                node.identified_at = look.identities[at].as_ref().map(|_| now);
            }
            node.identity = look.identities[at].clone().filter(|_| up);
            node.misconfigured = look.misconfigured[at].clone();
            if let Some(epoch) = epoch {
                if node.epoch.is_some() && node.epoch != epoch.id {
                    // A new epoch is a new server at the node: ask who it is.
                    node.identified_at = None;
                }
                node.out_until = (epoch.until_ms > epoch.now_ms)
                    .then(|| now + Duration::from_millis(epoch.until_ms - epoch.now_ms));
                if epoch.id.is_some() {
                    node.last_epoch.clone_from(&epoch.id);
                }
                node.epoch = epoch.id;
                node.pending_marks = epoch.pending_marks;
            } else if up {
                // Answering, yet not to be used: no epoch to grant in.
                node.epoch = None;
            }
        }
    }
}

/// What one look at every node found, by node.
struct Look {
    /// The epoch each node answered, `None` for a node that did not or that
    /// is not known to be an independent primary.
    epochs: Vec<Option<Epoch>>,
    /// Which nodes were asked which server they are in this look.
    identified: Vec<bool>,
    /// Which server each node is, asked now or known from before.
    identities: Vec<Option<NodeIdentity>>,
    /// Which nodes answered this look.
    up: Vec<bool>,
    endpoints: Vec<String>,
    /// Why each node is no independent primary, if it is not.
    misconfigured: Vec<Option<String>>,
}

/// What one look found of one node, to log against what was known before.
struct Change<'a> {
    at: usize,
    endpoint: &'a str,
    up: bool,
    misconfigured: Option<&'a str>,
    new_epoch: Option<&'a str>,
}

impl Change<'_> {
    /// Logs what changed since `before`, once per change.
    fn log(&self, before: &Node) {
        let (node, endpoint) = (self.at, self.endpoint);
        match (before.seen, before.up, self.up) {
            (false, _, false) => {
                tracing::warn!(node, endpoint, "quorum node does not answer");
            }
            (true, true, false) => {
                tracing::warn!(node, endpoint, "quorum node stopped answering");
            }
            (true, false, true) => {
                tracing::info!(node, endpoint, "quorum node answers again");
            }
            _ => {}
        }
        match (before.misconfigured.as_deref(), self.misconfigured) {
            (None, Some(why)) => {
                tracing::error!(
                    node,
                    endpoint,
                    "quorum node misconfigured, counted toward no majority: {why}"
                );
            }
            (Some(_), None) if self.up => {
                tracing::info!(
                    node,
                    endpoint,
                    "quorum node is an independent primary again"
                );
            }
            _ => {}
        }
        if let (Some(old), Some(new)) = (before.last_epoch.as_deref(), self.new_epoch) {
            if old != new {
                tracing::warn!(
                    node,
                    endpoint,
                    "quorum node restarted without its data; it stays out of every majority \
                     until every lease it may have held has expired"
                );
            }
        }
    }
}

/// Whether the horizons of the nodes that answered (`epochs`, `None` for a
/// node that did not) speak for every lease that may still be valid, so a
/// new epoch's quarantine can be set from them: see
/// [`Standing::stamp_new_epochs`].
fn horizons_cover_every_lease(epochs: &[Option<Epoch>], majority: usize) -> bool {
    let answered = epochs.iter().flatten().count();
    let speaking = (epochs.iter().flatten())
        .filter(|epoch| speaks_for_its_leases(epoch))
        .count();
    let lost = answered - speaking;
    answered >= majority && (speaking >= majority || lost > epochs.len() - majority)
}

/// Whether a node kept its data through the life of every lease that may
/// still be valid on it: it has an epoch, with its fence marks in place,
/// and is past the quarantine that began it (which outlasted every lease
/// granted before it came back empty).
fn speaks_for_its_leases(epoch: &Epoch) -> bool {
    epoch.id.is_some() && !epoch.pending_marks && epoch.until_ms <= epoch.now_ms
}

#[cfg(test)]
mod tests;
