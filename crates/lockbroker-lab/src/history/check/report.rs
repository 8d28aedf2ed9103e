//! [`Report`]: what [`check`](super::check) found, and how it prints.

use std::collections::BTreeMap;
use std::fmt;

use crate::client::Outcome;
use crate::history::Op;

/// Counts of what happened, for the summary.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests by step and answer kind (an acquire-all or release-all
    /// once per lock it concerned).
    pub outcomes: BTreeMap<(Op, &'static str), u64>,
    /// Distinct locks.
    pub locks: usize,
    /// Distinct semaphores (a semaphore named like a lock is another name).
    pub semaphores: usize,
    /// Leases granted, of every kind.
    pub leases: usize,
    /// Of those, shared lock leases.
    pub shared_leases: usize,
    /// Of those, semaphore permits.
    pub permits: usize,
    /// The most shared leases of one lock certainly valid at one instant:
    /// above 1, the load made shared leases overlap.
    pub most_shared_at_once: usize,
    /// The most permits of one semaphore certainly valid at one instant:
    /// at the limit, the load filled a semaphore.
    pub most_permits_at_once: usize,
    /// Acknowledged releases followed by a probe that confirmed they took effect.
    pub release_probes: u64,
    /// Acknowledged extends later confirmed by an extend past the old expiry.
    pub extend_probes: u64,
    /// Quorum mode: extends and releases answered `lease_lost`, and status
    /// reads that did not show the lease, before its expiry, after a node
    /// restarted empty (a lease left on a minority is lost: allowed); in
    /// sentinel mode, the same after a failover.
    pub lost_after_restart: u64,
    /// Sentinel mode: steps that broke exclusivity or an acknowledged
    /// release across a failover (a second grant while a lease the old
    /// primary granted was valid, a released lease back after it): what
    /// sentinel mode cannot promise, counted instead of reported.
    pub undone_by_failover: u64,
}

/// What [`check`](super::check) found.
#[derive(Debug, Default)]
pub struct Report {
    /// Counts for the summary.
    pub stats: Stats,
    /// Every broken promise, one line each.
    pub violations: Vec<String>,
    /// Bounds on (Redis clock - local clock), in ms.
    pub clock_offset_ms: (f64, f64),
    /// Things that limit how much the check can say (not violations).
    pub notes: Vec<String>,
}

impl Report {
    /// Whether the history kept every promise.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        writeln!(f, "locks: {}  leases granted: {}", s.locks, s.leases)?;
        if s.shared_leases > 0 || s.semaphores > 0 {
            writeln!(
                f,
                "shared leases: {} (at most {} valid at once)  semaphores: {}  permits: {} \
                 (at most {} valid at once)",
                s.shared_leases,
                s.most_shared_at_once,
                s.semaphores,
                s.permits,
                s.most_permits_at_once
            )?;
        }
        let ops = [
            Op::Acquire,
            Op::AcquireAll,
            Op::Extend,
            Op::Release,
            Op::ReleaseAll,
            Op::Keepalive,
            Op::Close,
            Op::Status,
        ];
        for op in ops {
            let parts: Vec<String> = s
                .outcomes
                .iter()
                .filter(|((o, _), _)| *o == op)
                .map(|((_, kind), n)| format!("{kind} {n}"))
                .collect();
            if !parts.is_empty() {
                writeln!(f, "{:<11} {}", format!("{op:?}:"), parts.join(", "))?;
            }
        }
        writeln!(
            f,
            "releases confirmed by a later probe: {}  extends confirmed by outliving the old expiry: {}",
            s.release_probes, s.extend_probes
        )?;
        let (lo, hi) = self.clock_offset_ms;
        writeln!(f, "redis clock - local clock: {lo:.1} .. {hi:.1} ms")?;
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        if self.violations.is_empty() {
            writeln!(f, "violations: 0")
        } else {
            writeln!(f, "violations: {}", self.violations.len())?;
            for v in self.violations.iter().take(50) {
                writeln!(f, "  VIOLATION {v}")?;
            }
            if self.violations.len() > 50 {
                writeln!(f, "  ... and {} more", self.violations.len() - 50)?;
            }
            Ok(())
        }
    }
}

/// The summary's name for an answer.
pub(super) fn kind(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Granted { .. } => "granted",
        Outcome::Renewed { .. } => "renewed",
        Outcome::Released { .. } => "released",
        Outcome::Busy { .. } => "busy",
        Outcome::Refused => "refused",
        Outcome::Lost => "lease_lost",
        Outcome::Status { .. } => "status",
        Outcome::Failed { status: 503, .. } => "unavailable",
        Outcome::Failed { status: 0, .. } => "no_answer",
        // Quorum mode's answer when acquires in flight split the nodes'
        // votes: nothing was granted and no holder is named.
        Outcome::Failed { status: 409, code } if code == "contended" => "contended",
        // An acquire under a session that ended (it expired, or its node
        // restarted empty): its leases ended with it.
        Outcome::Failed { status: 409, code } if code == "session_lost" => "session_lost",
        Outcome::Failed { .. } => "other_error",
    }
}
