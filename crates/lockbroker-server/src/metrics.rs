//! Prometheus metrics in an owned registry (never the global one, so apps in
//! one test process do not share counters).
//!
//! Labels are bounded: a lock name is reported only through its configured
//! family (`billing:*`), everything else as `other`; the kind of lease as
//! `lock` (exclusive), `shared` or `semaphore`; routes by their template;
//! never a token.

mod labels;
mod quorum;
mod sessions;

use std::time::Duration;

use labels::{method_label, status_label};

use lockbroker_core::{LeaseKind, LockError, LockName};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

pub use quorum::QuorumMetrics;
pub use sessions::SessionMetrics;

/// The family label of locks that match no configured family.
pub const OTHER_FAMILY: &str = "other";

/// Lock-name families from configuration: `prefix*` patterns or exact names.
#[derive(Clone, Debug, Default)]
pub struct Families {
    patterns: Vec<String>,
}

impl Families {
    /// Families in match order (the first match wins).
    pub fn new(patterns: Vec<String>) -> Self {
        Self { patterns }
    }

    /// The family label of `name`: the first pattern it matches, or `other`.
    pub fn of(&self, name: &LockName) -> &str {
        let name = name.as_str();
        self.patterns
            .iter()
            .find(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern.as_str(),
            })
            .map_or(OTHER_FAMILY, String::as_str)
    }

    /// Every family label: the configured ones, then `other`.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.patterns
            .iter()
            .map(String::as_str)
            .chain([OTHER_FAMILY])
    }
}

/// Every outcome label each counter can carry. All are created at 0 for every
/// family on startup: a series first seen at 1 shows no increase in Prometheus,
/// so the first lost lease or error after a start would raise no alert.
const ACQUIRE_OUTCOMES: &[&str] = &["acquired", "busy", "wait_timeout", "rejected", "error"];
const EXTEND_OUTCOMES: &[&str] = &[
    "extended",
    "lease_lost",
    "max_hold_exceeded",
    "lease_released",
    "force_released",
    "error",
];
const RELEASE_OUTCOMES: &[&str] = &["released", "lease_lost", "force_released", "error"];
const LOST_OPERATIONS: &[&str] = &["extend", "release"];
const KINDS: [LeaseKind; 3] = [LeaseKind::Exclusive, LeaseKind::Shared, LeaseKind::Permit];

/// Every metric the broker exports.
pub struct Metrics {
    registry: Registry,
    families: Families,
    acquires: IntCounterVec,
    extends: IntCounterVec,
    releases: IntCounterVec,
    leases_lost: IntCounterVec,
    wait_seconds: HistogramVec,
    hold_seconds: HistogramVec,
    request_seconds: HistogramVec,
    script_seconds: HistogramVec,
    /// Acquires waiting on this broker now (set at scrape time).
    pub waiters: IntGauge,
    /// The most acquires that may wait on this broker (set at scrape time).
    pub max_waiters: IntGauge,
    /// Leases held now, across all brokers: counted up and down as this
    /// broker grants and releases, and reset from Redis periodically.
    pub leases_held: IntGauge,
    /// 1 while Redis answers this broker's health checks.
    pub redis_up: IntGauge,
    /// Quorum mode's metrics.
    pub quorum: QuorumMetrics,
    /// Sessions' metrics.
    pub sessions: SessionMetrics,
    fence_floor_raises: IntCounter,
    replica_acks_missed: IntCounterVec,
    /// Requests by the id of the API key that made them.
    requests_by_key: IntCounterVec,
}

const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0,
];
const HOLD_BUCKETS: &[f64] = &[
    0.01, 0.1, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14_400.0, 86_400.0,
];
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];
pub(crate) const SCRIPT_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new(families: Families) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let metric = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(metric.clone()))?;
                Ok(metric)
            };
        let histogram = |name: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            let metric = HistogramVec::new(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                labels,
            )?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let gauge = |name: &str, help: &str| {
            let metric = IntGauge::new(name, help)?;
            registry.register(Box::new(metric.clone()))?;
            Ok::<_, prometheus::Error>(metric)
        };
        let fence_floor_raises = IntCounter::new(
            "lockbroker_fence_floor_raises_total",
            "Grants whose fence was raised by this broker's floor above both Redis's counter and clock (Redis lost data and runs behind).",
        )?;
        registry.register(Box::new(fence_floor_raises.clone()))?;
        let replica_acks_missed = counter(
            "lockbroker_replica_acks_missed_total",
            "Acquires, extends and releases that fewer replicas than redis.min_replicas_acked acknowledged in time, by step.",
            &["step"],
        )?;
        for step in ["acquire", "extend", "release"] {
            replica_acks_missed.with_label_values(&[step]);
        }
        let metrics = Self {
            acquires: counter(
                "lockbroker_acquires_total",
                "Acquire requests by outcome: acquired, busy, wait_timeout, rejected (waiter limits, shutdown), error.",
                &["family", "kind", "outcome"],
            )?,
            extends: counter(
                "lockbroker_extends_total",
                "Extend requests by outcome: extended, lease_lost, max_hold_exceeded, lease_released, force_released, error.",
                &["family", "kind", "outcome"],
            )?,
            releases: counter(
                "lockbroker_releases_total",
                "Release requests by outcome: released, lease_lost, force_released, error.",
                &["family", "kind", "outcome"],
            )?,
            leases_lost: counter(
                "lockbroker_leases_lost_total",
                "Extends and releases that found their lease gone: the holder overran its lease while still working.",
                &["family", "kind", "operation"],
            )?,
            wait_seconds: histogram(
                "lockbroker_wait_seconds",
                "Time waiting acquires spent before their grant.",
                &["family", "kind"],
                WAIT_BUCKETS,
            )?,
            hold_seconds: histogram(
                "lockbroker_hold_seconds",
                "Time from grant to release of released leases, by Redis's clock.",
                &["family", "kind"],
                HOLD_BUCKETS,
            )?,
            request_seconds: histogram(
                "lockbroker_http_request_duration_seconds",
                "HTTP request duration by route template, method and status.",
                &["route", "method", "status"],
                REQUEST_BUCKETS,
            )?,
            script_seconds: histogram(
                "lockbroker_redis_script_duration_seconds",
                "Redis script latency by script, as seen by the broker.",
                &["script"],
                SCRIPT_BUCKETS,
            )?,
            waiters: gauge("lockbroker_waiters", "Acquires waiting on this broker now.")?,
            max_waiters: gauge(
                "lockbroker_max_waiters",
                "The most acquires that may wait on this broker at once (locks.max_waiters).",
            )?,
            leases_held: gauge(
                "lockbroker_leases_held",
                "Leases held now (maintained as leases are granted and released, reconciled with Redis periodically).",
            )?,
            redis_up: gauge("lockbroker_redis_up", "1 while Redis answers this broker, 0 otherwise.")?,
            quorum: QuorumMetrics::register(&registry)?,
            sessions: SessionMetrics::register(&registry)?,
            fence_floor_raises,
            replica_acks_missed,
            requests_by_key: counter(
                "lockbroker_requests_total",
                "Requests made with each API key, by key id (never the key), refused ones included.",
                &["key"],
            )?,
            families,
            registry,
        };
        metrics.create_family_series();
        Ok(metrics)
    }

    /// Creates every per-family series at 0 (see [`ACQUIRE_OUTCOMES`]).
    fn create_family_series(&self) {
        for family in self.families.labels() {
            for kind in KINDS.map(LeaseKind::metric_label) {
                for (counter, outcomes) in [
                    (&self.acquires, ACQUIRE_OUTCOMES),
                    (&self.extends, EXTEND_OUTCOMES),
                    (&self.releases, RELEASE_OUTCOMES),
                    (&self.leases_lost, LOST_OPERATIONS),
                ] {
                    for outcome in outcomes {
                        counter.with_label_values(&[family, kind, outcome]);
                    }
                }
                self.wait_seconds.with_label_values(&[family, kind]);
                self.hold_seconds.with_label_values(&[family, kind]);
            }
        }
    }

    /// Creates the request series of each `(method, route)` with status 200 at
    /// 0, so the latency of the first requests after a start is not lost.
    pub fn register_routes<'a>(&self, routes: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (method, route) in routes {
            self.request_seconds
                .with_label_values(&[route, method, "200"]);
        }
    }

    /// The family label of a lock.
    pub fn family(&self, name: &LockName) -> &str {
        self.families.of(name)
    }

    /// Counts an acquire; `waited` is set for requests that asked to wait.
    pub fn acquire_finished(
        &self,
        name: &LockName,
        kind: LeaseKind,
        result: Result<(), &LockError>,
        waited: Option<Duration>,
    ) {
        let family = self.family(name);
        let kind = kind.metric_label();
        let outcome = match result {
            Ok(()) => {
                self.leases_held.inc();
                if let Some(waited) = waited {
                    self.wait_seconds
                        .with_label_values(&[family, kind])
                        .observe(waited.as_secs_f64());
                }
                "acquired"
            }
            Err(LockError::Busy(_)) if waited.is_some() => "wait_timeout",
            Err(LockError::Busy(_)) => "busy",
            Err(LockError::Contended) => "contended",
            Err(LockError::TooManyWaiters | LockError::ShuttingDown) => "rejected",
            Err(LockError::Invalid(_) | LockError::LimitConflict { .. }) => return,
            Err(_) => "error",
        };
        self.acquires
            .with_label_values(&[family, kind, outcome])
            .inc();
    }

    /// Counts an extend.
    pub fn extend_finished(
        &self,
        name: &LockName,
        kind: LeaseKind,
        result: Result<(), &LockError>,
    ) {
        let family = self.family(name);
        let kind = kind.metric_label();
        let outcome = match result {
            Ok(()) => "extended",
            Err(LockError::LeaseLost) => {
                self.leases_lost
                    .with_label_values(&[family, kind, "extend"])
                    .inc();
                "lease_lost"
            }
            Err(LockError::MaxHoldExceeded { .. }) => "max_hold_exceeded",
            // The holder's own release came first: a caller's slip, not an overrun.
            Err(LockError::LeaseReleased) => "lease_released",
            // An operator ended the lease: no overrun of the holder's either.
            Err(LockError::LeaseForceReleased { .. }) => "force_released",
            Err(LockError::Invalid(_)) => return,
            Err(_) => "error",
        };
        self.extends
            .with_label_values(&[family, kind, outcome])
            .inc();
    }

    /// Counts a release; `held` is the lease's hold time when it was released.
    pub fn release_finished(
        &self,
        name: &LockName,
        kind: LeaseKind,
        result: Result<Option<Duration>, &LockError>,
    ) {
        let family = self.family(name);
        let kind = kind.metric_label();
        let outcome = match result {
            Ok(held) => {
                // A retried release reports no hold time: it was counted once.
                if let Some(held) = held {
                    self.leases_held.dec();
                    self.hold_seconds
                        .with_label_values(&[family, kind])
                        .observe(held.as_secs_f64());
                }
                "released"
            }
            Err(LockError::LeaseLost) => {
                self.leases_lost
                    .with_label_values(&[family, kind, "release"])
                    .inc();
                "lease_lost"
            }
            Err(LockError::LeaseForceReleased { .. }) => "force_released",
            Err(LockError::Invalid(_)) => return,
            Err(_) => "error",
        };
        self.releases
            .with_label_values(&[family, kind, outcome])
            .inc();
    }

    /// Records one HTTP request.
    pub fn request_finished(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.request_seconds
            .with_label_values(&[route, method_label(method), status_label(status)])
            .observe(elapsed.as_secs_f64());
    }

    /// Records one script run.
    pub fn script_finished(&self, script: &str, elapsed: Duration) {
        self.script_seconds
            .with_label_values(&[script])
            .observe(elapsed.as_secs_f64());
    }

    /// Creates the per-key request series at 0 for every configured key id,
    /// so the first request of a key shows as an increase.
    pub fn register_keys<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        for id in ids {
            self.requests_by_key.with_label_values(&[id]);
        }
    }

    /// Counts one request made with the API key `id`.
    pub fn request_by_key(&self, id: &str) {
        self.requests_by_key.with_label_values(&[id]).inc();
    }

    /// Counts a fence raised by the broker's floor.
    pub fn fence_floor_raised(&self) {
        self.fence_floor_raises.inc();
    }

    /// The registry in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let encoder = TextEncoder::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = encoder.encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl lockbroker_redis::StoreObserver for Metrics {
    fn script_finished(&self, script: &'static str, elapsed: Duration) {
        Metrics::script_finished(self, script, elapsed);
    }

    fn fence_floor_raised(&self) {
        Metrics::fence_floor_raised(self);
    }

    fn replica_ack_missed(&self, step: &'static str) {
        self.replica_acks_missed.with_label_values(&[step]).inc();
    }

    fn node_script_finished(&self, node: usize, elapsed: Duration) {
        self.quorum.node_script_finished(node, elapsed);
    }

    fn quorum_event(&self, event: lockbroker_redis::QuorumEvent) {
        self.quorum.event(event);
    }
}

#[cfg(test)]
mod tests;
