//! Sessions' metrics. A broker sees the sessions it opened or last kept
//! alive, so each gauge is this broker's share: sum them over brokers.

use lockbroker_core::LockError;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// How many leases a session renews at a keepalive.
const LEASE_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
];

/// Sessions' metrics.
pub struct SessionMetrics {
    /// Sessions this broker opened or last kept alive, not yet expired or
    /// closed: set at scrape time.
    open: IntGauge,
    /// Sessions this broker last kept alive that then expired: brought up
    /// to the broker's count at scrape time.
    expired: IntCounter,
    steps: IntCounterVec,
    leases: Histogram,
}

impl SessionMetrics {
    /// Registers sessions' metrics in `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let metrics = Self {
            open: IntGauge::new(
                "lockbroker_sessions_open",
                "Sessions this broker opened or last kept alive that have neither expired nor closed (sum over brokers).",
            )?,
            expired: IntCounter::new(
                "lockbroker_session_expiries_total",
                "Sessions this broker last kept alive that then expired without a close, since it started.",
            )?,
            steps: IntCounterVec::new(
                Opts::new(
                    "lockbroker_session_steps_total",
                    "Session opens, keepalives and closes, by outcome (ok, session_lost, error).",
                ),
                &["step", "outcome"],
            )?,
            leases: Histogram::with_opts(
                HistogramOpts::new(
                    "lockbroker_session_leases",
                    "Leases per session, as each keepalive renews them.",
                )
                .buckets(LEASE_BUCKETS.to_vec()),
            )?,
        };
        registry.register(Box::new(metrics.open.clone()))?;
        registry.register(Box::new(metrics.expired.clone()))?;
        registry.register(Box::new(metrics.steps.clone()))?;
        registry.register(Box::new(metrics.leases.clone()))?;
        for step in ["open", "keepalive", "close"] {
            for outcome in ["ok", "session_lost", "error"] {
                metrics.steps.with_label_values(&[step, outcome]);
            }
        }
        Ok(metrics)
    }

    /// Shows the sessions this broker knows of: `open` now, `expired` since
    /// it started.
    pub fn observe(&self, open: u64, expired: u64) {
        self.open.set(i64::try_from(open).unwrap_or(i64::MAX));
        self.expired
            .inc_by(expired.saturating_sub(self.expired.get()));
    }

    /// Counts one session step and how it ended.
    pub fn step_finished(&self, step: &str, result: Result<(), &LockError>) {
        let outcome = match result {
            Ok(()) => "ok",
            Err(LockError::SessionLost) => "session_lost",
            Err(LockError::Invalid(_)) => return,
            Err(_) => "error",
        };
        self.steps.with_label_values(&[step, outcome]).inc();
    }

    /// Records a keepalive that renewed `leases` leases.
    pub fn kept(&self, leases: u64) {
        self.leases.observe(leases as f64);
    }
}
