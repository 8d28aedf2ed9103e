//! [`check`]: the broker's promises, tested against a recorded history.
//!
//! Times the broker reports (`expires_at_ms`, and the grant or extend instant
//! `expires_at_ms - ttl_ms`) are Redis clock. Send and receive instants are the
//! local clock. The checker never assumes the two agree: it bounds their offset
//! from the answers themselves (each Redis instant lies inside its request's
//! send..receive window) and judges an answer only when it is wrong for every
//! offset inside those bounds, so a slow machine can make it miss a violation
//! but never invent one.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::{Event, LeaseId, Op};
use crate::client::{Outcome, Timed};

/// Counts of what happened, for the summary.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests by step and answer kind.
    pub outcomes: BTreeMap<(Op, &'static str), u64>,
    /// Distinct locks.
    pub locks: usize,
    /// Leases granted.
    pub leases: usize,
    /// Acknowledged releases followed by a probe that confirmed they took effect.
    pub release_probes: u64,
    /// Acknowledged extends later confirmed by an extend past the old expiry.
    pub extend_probes: u64,
}

/// What [`check`] found.
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
        for op in [Op::Acquire, Op::Extend, Op::Release, Op::Status] {
            let parts: Vec<String> = s
                .outcomes
                .iter()
                .filter(|((o, _), _)| *o == op)
                .map(|((_, kind), n)| format!("{kind} {n}"))
                .collect();
            if !parts.is_empty() {
                writeln!(f, "{:<8} {}", format!("{op:?}:"), parts.join(", "))?;
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

fn kind(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Granted { .. } => "granted",
        Outcome::Renewed { .. } => "renewed",
        Outcome::Released { .. } => "released",
        Outcome::Busy { .. } => "busy",
        Outcome::Lost => "lease_lost",
        Outcome::Status { .. } => "status",
        Outcome::Failed { status: 503, .. } => "unavailable",
        Outcome::Failed { status: 0, .. } => "no_answer",
        Outcome::Failed { .. } => "other_error",
    }
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

/// One lease as the checker reconstructs it.
struct Lease<'a> {
    id: LeaseId,
    lock: &'a str,
    fence: u64,
    /// Grant instant, Redis ms (floor).
    start: i64,
    grant: &'a Timed,
    /// A lower bound on when the lease stopped being valid, Redis ms.
    end_lower: f64,
    /// Local µs when an acknowledged release came back.
    released_ack: Option<i64>,
}

/// Checks a history against the broker's promises:
///
/// 1. fences strictly increase in grant order per lock, and every grant's
///    fence exceeds every fence of that lock seen before it was asked for;
/// 2. no two leases of one lock were valid at the same Redis instant;
/// 3. an acknowledged release took effect: the released lease never again
///    blocks an acquire, shows as held, or extends;
/// 4. an acknowledged extend took effect: no other lease is granted before
///    the new expiry, and the holder can still extend after the old one;
/// 5. no step says a valid lease is lost, and none succeeds on a lease that
///    had certainly expired.
///
/// Assumes each lease is driven by one client at a time (its steps do not
/// overlap) and that extends of one lease never shorten its expiry.
pub fn check(events: &[Event]) -> Report {
    let mut report = Report::default();
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| (e.timed.send_us, e.timed.recv_us));

    // Bound the clock offset: every Redis instant the broker reported lies
    // within its request's window.
    let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
    for e in &events {
        if let Outcome::Granted {
            ttl_ms,
            expires_at_ms,
            ..
        }
        | Outcome::Renewed {
            ttl_ms,
            expires_at_ms,
            ..
        } = e.timed.outcome
        {
            let t = expires_at_ms as f64 - ttl_ms as f64;
            lo = lo.max(t - ms(e.timed.recv_us));
            hi = hi.min(t + 1.0 - ms(e.timed.send_us));
        }
    }
    if lo > hi {
        report.notes.push(format!(
            "reported Redis times do not fit one clock offset ({lo:.1} > {hi:.1} ms); \
             the clock stepped, so time-based checks use the widened range"
        ));
        std::mem::swap(&mut lo, &mut hi);
    }
    report.clock_offset_ms = (lo, hi);

    for e in &events {
        *report
            .stats
            .outcomes
            .entry((e.op, kind(&e.timed.outcome)))
            .or_default() += 1;
    }

    // The steps each lease went through, in order.
    let mut steps: HashMap<LeaseId, Vec<&Event>> = HashMap::new();
    let mut leases: Vec<Lease<'_>> = Vec::new();
    for e in &events {
        match (e.op, &e.timed.outcome, e.lease) {
            (
                Op::Acquire,
                Outcome::Granted {
                    fence,
                    ttl_ms,
                    expires_at_ms,
                },
                Some(id),
            ) => leases.push(Lease {
                id,
                lock: &e.lock,
                fence: *fence,
                start: *expires_at_ms as i64 - *ttl_ms as i64,
                grant: &e.timed,
                end_lower: *expires_at_ms as f64,
                released_ack: None,
            }),
            (Op::Extend | Op::Release | Op::Status, _, Some(id)) => {
                steps.entry(id).or_default().push(e);
            }
            _ => {}
        }
    }
    report.stats.leases = leases.len();

    let v = &mut report.violations;
    for lease in &mut leases {
        follow_lease(
            lease,
            steps.get(&lease.id).map_or(&[][..], Vec::as_slice),
            (lo, hi),
            &mut report.stats,
            v,
        );
    }

    // Per lock: fence order, overlap, and fences above everything seen before.
    let mut by_lock: HashMap<&str, Vec<&Lease<'_>>> = HashMap::new();
    for lease in &leases {
        by_lock.entry(lease.lock).or_default().push(lease);
    }
    report.stats.locks = by_lock.len();
    for (lock, list) in &mut by_lock {
        list.sort_by_key(|l| (l.fence, l.start));
        let mut latest_end: Option<&Lease<'_>> = None;
        for pair in list.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.fence == b.fence {
                v.push(format!("lock {lock}: two grants carry fence {}", a.fence));
            } else if b.start < a.start {
                v.push(format!(
                    "lock {lock}: fence {} was granted at {} ms, before fence {} at {} ms",
                    b.fence, b.start, a.fence, a.start
                ));
            }
        }
        for b in list.iter() {
            if let Some(a) = latest_end {
                if (b.start + 1) as f64 <= a.end_lower {
                    v.push(format!(
                        "lock {lock}: fence {} was granted at {} ms while fence {} was valid until at least {:.0} ms",
                        b.fence, b.start, a.fence, a.end_lower
                    ));
                }
            }
            if latest_end.is_none_or(|a| b.end_lower > a.end_lower) {
                latest_end = Some(b);
            }
        }
    }

    // Every grant's fence exceeds every fence of its lock already seen.
    let mut seen: HashMap<&str, Vec<(i64, u64)>> = HashMap::new();
    for e in &events {
        let fence = match e.timed.outcome {
            Outcome::Granted { fence, .. }
            | Outcome::Renewed { fence, .. }
            | Outcome::Released { fence } => Some(fence),
            Outcome::Busy { fence } | Outcome::Status { fence, .. } => fence,
            _ => None,
        };
        if let Some(fence) = fence {
            seen.entry(&e.lock)
                .or_default()
                .push((e.timed.recv_us, fence));
        }
    }
    for list in seen.values_mut() {
        list.sort_unstable();
    }
    for lease in &leases {
        let Some(list) = seen.get(lease.lock) else {
            continue;
        };
        let before = list.partition_point(|(recv, _)| *recv < lease.grant.send_us);
        if let Some(max) = list[..before].iter().map(|(_, f)| *f).max() {
            if max >= lease.fence {
                v.push(format!(
                    "lock {}: fence {} was granted after fence {max} had already been seen",
                    lease.lock, lease.fence
                ));
            }
        }
    }

    // A released lease never blocks an acquire again.
    let by_fence: HashMap<(&str, u64), &Lease<'_>> =
        leases.iter().map(|l| ((l.lock, l.fence), l)).collect();
    for e in &events {
        if let (Op::Acquire, Outcome::Busy { fence: Some(fence) }) = (e.op, &e.timed.outcome) {
            if let Some(holder) = by_fence.get(&(e.lock.as_str(), *fence)) {
                if holder.released_ack.is_some_and(|r| r < e.timed.send_us) {
                    v.push(format!(
                        "lock {}: an acquire sent after fence {fence} was released was told that lease holds the lock",
                        e.lock
                    ));
                }
            }
        }
    }
    report
}

/// Walks one lease's extends, releases and status reads in order, checking
/// each against what must be true of the lease at that moment, and settles
/// the lease's `end_lower` and `released_ack`.
fn follow_lease(
    lease: &mut Lease<'_>,
    steps: &[&Event],
    (lo, hi): (f64, f64),
    stats: &mut Stats,
    v: &mut Vec<String>,
) {
    let name = format!("lock {} fence {}", lease.lock, lease.fence);
    // The lease is certainly valid until `certain_end` (Redis ms) unless a
    // release landed; an extend with no answer may have moved it later.
    let mut certain_end = lease.end_lower;
    let mut original_end = certain_end;
    let mut ambiguous = false;
    let mut release_sent: Option<f64> = None;
    let mut renewed_once = false;
    for e in steps {
        let t = &e.timed;
        let (send, recv) = (ms(t.send_us), ms(t.recv_us));
        let released_before = lease.released_ack.is_some_and(|r| r < t.send_us);
        match (e.op, &t.outcome) {
            (
                Op::Extend,
                Outcome::Renewed {
                    fence,
                    ttl_ms,
                    expires_at_ms,
                },
            ) => {
                let at = *expires_at_ms as f64 - *ttl_ms as f64;
                if *fence != lease.fence {
                    v.push(format!("{name}: extend answered fence {fence}"));
                }
                if released_before {
                    v.push(format!(
                        "{name}: extended after its release was acknowledged"
                    ));
                } else if !ambiguous && release_sent.is_none() && at >= certain_end {
                    v.push(format!(
                        "{name}: extended at {at:.0} ms although it expired at {certain_end:.0} ms"
                    ));
                } else if renewed_once && at >= original_end {
                    stats.extend_probes += 1;
                }
                renewed_once = true;
                original_end = certain_end;
                certain_end = *expires_at_ms as f64;
            }
            (Op::Extend, Outcome::Lost) => {
                if released_before {
                    stats.release_probes += 1;
                } else if release_sent.is_none() && recv + hi < certain_end - 1.0 {
                    v.push(format!(
                        "{name}: extend answered lease_lost by {:.0} ms although the lease was valid until {certain_end:.0} ms",
                        recv + hi
                    ));
                }
            }
            (Op::Extend, Outcome::Failed { .. }) => ambiguous = true,
            (Op::Release, Outcome::Released { fence }) => {
                if *fence != lease.fence {
                    v.push(format!("{name}: release answered fence {fence}"));
                }
                if release_sent.is_none() && !ambiguous && send + lo > certain_end + 1.0 {
                    v.push(format!(
                        "{name}: release reported success at {:.0} ms or later although the lease expired at {certain_end:.0} ms",
                        send + lo
                    ));
                }
                release_sent.get_or_insert(send + lo);
                lease.released_ack.get_or_insert(t.recv_us);
            }
            (Op::Release, Outcome::Lost)
                if release_sent.is_none() && recv + hi < certain_end - 1.0 =>
            {
                v.push(format!(
                    "{name}: release answered lease_lost by {:.0} ms although the lease was valid until {certain_end:.0} ms",
                    recv + hi
                ));
            }
            (Op::Release, Outcome::Failed { .. }) => {
                release_sent.get_or_insert(send + lo);
            }
            (Op::Status, Outcome::Status { held, fence }) => {
                let shows_lease = *held && *fence == Some(lease.fence);
                if released_before {
                    if shows_lease {
                        v.push(format!(
                            "{name}: shown as held after its release was acknowledged"
                        ));
                    } else {
                        stats.release_probes += 1;
                    }
                } else if release_sent.is_none()
                    && t.send_us > lease.grant.recv_us
                    && recv + hi < certain_end - 1.0
                    && !shows_lease
                {
                    v.push(format!(
                        "{name}: status did not show the lease while it was valid (held {held}, fence {fence:?})"
                    ));
                }
            }
            _ => {}
        }
    }
    lease.end_lower = match release_sent {
        Some(at) => certain_end.min(at),
        None => certain_end,
    };
}

#[cfg(test)]
mod tests;
