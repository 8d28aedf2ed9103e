//! [`check`]: the broker's promises, tested against a recorded history.
//!
//! Times the broker reports (`expires_at_ms`, and the instant a node ran the
//! grant or extend, `expires_at_ms - ttl_ms` in single mode) are Redis clock.
//! Send and receive instants are the local clock. The checker never assumes
//! the two agree: it bounds their offset from the answers themselves (each
//! Redis instant lies inside its request's send..receive window) and judges an
//! answer only when it is wrong for every offset inside those bounds, so a
//! slow machine can make it miss a violation but never invent one.
//!
//! Quorum mode ([`Backend::Quorum`]) reads the answers differently and holds
//! three rules to what a quorum lease promises; see [`check_against`].
//!
//! Every kind of lease (exclusive, shared, permit) is followed the same way;
//! only who may hold a name beside whom differs (`check/exclusion.rs`). A
//! lock and a semaphore of the same name are two names.

use std::collections::HashMap;

use super::{family, noun, Event, Family, Op};
use crate::client::Outcome;

mod backend;
mod exclusion;
mod lease;
mod report;

pub use backend::{Backend, Drift};
use lease::{follow, ms, Context, Lease, Start};
pub use report::{Report, Stats};

/// [`check_against`] a single-mode broker.
pub fn check(events: &[Event]) -> Report {
    check_against(events, &Backend::Single)
}

/// Checks a history against the broker's promises:
///
/// 1. fences strictly increase in grant order per name, whatever the kinds
///    of its leases, and every grant's fence exceeds every fence of that
///    name seen before it was asked for;
/// 2. no exclusive lease of a lock was valid at the same Redis instant as
///    any other lease of it (shared leases may share the lock), and no more
///    permits of a semaphore than its limit were;
/// 3. an acknowledged release took effect: the released lease never again
///    stands in the way of an acquire, shows as held, or extends;
/// 4. an acknowledged extend took effect: no other lease is granted before
///    the new expiry, and the holder can still extend after the old one;
/// 5. no step says a valid lease is lost, and none succeeds on a lease that
///    had certainly expired;
/// 6. every lease a busy answer says is in the way, and every holder a
///    status read lists, was granted: a grant returned its fence, or an
///    acquire of that name whose answer never came (or came as an error)
///    was sent before the read was answered and may have taken it (and its
///    lease may still have lasted, a TTL past a late grant), or an
///    acquire-all of that name was in flight during the read and may have
///    held it for a moment. A quorum that showed a node's own fence for a
///    grant in flight, or named the lease of an acquire it then rolled
///    back, breaks this rule, and so does a refused acquire-all whose lease
///    a read sent after its answer still sees.
///
/// An acquire-all is recorded once per lock it asked for: each lease it
/// granted is held to every rule above as a single grant's, each
/// release-all result as a single release of that lease, and an
/// acquire-all with no answer is an acquire of unknown outcome of each of
/// its locks.
///
/// In quorum mode a lease promises exclusivity from its grant's answer to
/// its `expires_at_ms` (the allowance already taken off), so rule 2 dates
/// each grant by its request's window (`Start::answered` in
/// `check/lease.rs`), not by `expires_at_ms - ttl_ms`. Its nodes may hold it up to a TTL past the
/// answer, so "succeeds on an expired lease" is judged against that. And a
/// lease that a node restarting empty left on a minority is lost before its
/// expiry, safely: rule 5's "lost" side then counts it in
/// [`Stats::lost_after_restart`] instead of reporting it.
///
/// Assumes each lease is driven by one client at a time (its steps do not
/// overlap) and that extends of one lease never shorten its expiry.
pub fn check_against(events: &[Event], backend: &Backend) -> Report {
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
            let t = backend.node_instant(ttl_ms, expires_at_ms);
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
            .entry((e.op, report::kind(&e.timed.outcome)))
            .or_default() += 1;
    }

    // The steps each lease went through, in order.
    let mut steps: HashMap<super::LeaseId, Vec<&Event>> = HashMap::new();
    let mut leases: Vec<Lease<'_>> = Vec::new();
    for e in &events {
        match (e.op.single(), &e.timed.outcome, e.lease) {
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
                kind: e.kind,
                fence: *fence,
                start: if backend.is_quorum() {
                    Start::answered(&e.timed, (lo, hi))
                } else {
                    Start::exact(backend.node_instant(*ttl_ms, *expires_at_ms))
                },
                grant: &e.timed,
                ttl_ms: *ttl_ms,
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

    let mut cx = Context {
        offset: (lo, hi),
        backend,
        stats: &mut report.stats,
        violations: &mut report.violations,
    };
    for lease in &mut leases {
        follow(
            lease,
            steps.get(&lease.id).map_or(&[][..], Vec::as_slice),
            &mut cx,
        );
    }
    match report.stats.lost_after_restart {
        0 => {}
        n => report.notes.push(format!(
            "{n} step{} found the lease lost early after node restarts or failovers (extend or \
             release lease_lost, or status not held): allowed in quorum and sentinel mode",
            if n == 1 { "" } else { "s" }
        )),
    }
    exclusion::judge(&leases, backend, &mut report);
    let v = &mut report.violations;

    // Every grant's fence exceeds every fence of its name already seen.
    let mut seen: HashMap<(Family, &str), Vec<(i64, u64)>> = HashMap::new();
    for e in &events {
        let fence = match e.timed.outcome {
            Outcome::Granted { fence, .. }
            | Outcome::Renewed { fence, .. }
            | Outcome::Released { fence } => Some(fence),
            Outcome::Busy { fence, .. } | Outcome::Status { fence, .. } => fence,
            _ => None,
        };
        if let Some(fence) = fence {
            seen.entry((family(e.kind), &e.lock))
                .or_default()
                .push((e.timed.recv_us, fence));
        }
    }
    for list in seen.values_mut() {
        list.sort_unstable();
    }
    for lease in &leases {
        let Some(list) = seen.get(&lease.name()) else {
            continue;
        };
        let before = list.partition_point(|(recv, _)| *recv < lease.grant.send_us);
        if let Some(max) = list[..before].iter().map(|(_, f)| *f).max() {
            if max >= lease.fence {
                v.push(format!(
                    "{} {}: {} was granted after fence {max} had already been seen",
                    noun(family(lease.kind)),
                    lease.lock,
                    lease.label()
                ));
            }
        }
    }

    // A released lease never stands in the way of an acquire again. Only
    // the leases a busy answer says are in the way are judged: the fence it
    // names for an earlier waiter in the queue is the last one issued, which
    // may well be a released lease's.
    let by_fence: HashMap<((Family, &str), u64), &Lease<'_>> =
        leases.iter().map(|l| ((l.name(), l.fence), l)).collect();
    for e in &events {
        let (Op::Acquire, Outcome::Busy { in_the_way, .. }) = (e.op.single(), &e.timed.outcome)
        else {
            continue;
        };
        let name = (family(e.kind), e.lock.as_str());
        for fence in in_the_way {
            let Some(holder) = by_fence.get(&(name, *fence)) else {
                continue;
            };
            let released = holder.released_ack.filter(|r| *r < e.timed.send_us);
            if released.is_some_and(|r| backend.failed_over_between(r, e.timed.recv_us)) {
                report.stats.undone_by_failover += 1;
            } else if released.is_some() {
                v.push(format!(
                    "{} {}: an acquire sent after {} was released was told that lease is in its way",
                    noun(name.0),
                    e.lock,
                    holder.label()
                ));
            }
        }
    }
    never_granted_leases_shown(&events, &leases, backend, &mut report.violations);
    if report.stats.undone_by_failover > 0 {
        report.notes.push(format!(
            "{} step{} broke exclusivity or an acknowledged release across a failover: what \
             sentinel mode cannot promise (docs/sentinel.md)",
            report.stats.undone_by_failover,
            if report.stats.undone_by_failover == 1 {
                ""
            } else {
                "s"
            }
        ));
    }
    report
}

/// How long after its answer an acquire of unknown outcome may still have
/// been granted (single, cluster and quorum mode): a quorum settles a node
/// that answered late within its timeout, and a cluster client follows a
/// moved slot within its command timeout.
const LATE_GRANT_US: i64 = 1_000_000;

/// When an acquire of unknown outcome may have held a lease: from its send
/// until `until_us`, or with no end.
struct Unsettled {
    sent_us: i64,
    until_us: Option<i64>,
}

/// Rule 6: a read names only leases some grant may have made.
///
/// An acquire of unknown outcome (no answer, or an error) may have taken a
/// lease no answer returns. That lease lasts at most a TTL (the longest any
/// grant of the history had), from no later than [`LATE_GRANT_US`] after
/// the answer; a read overlapping that window may show it. Without an
/// answer at all, or in sentinel mode (where the Redis client may run a
/// command again after a failover, long after its answer), it may show it
/// at any later time.
///
/// An acquire-all answered (granted or refused) may also have taken a lock
/// of it for a moment and given it back, a lease no answer returns: a read
/// of that lock whose window overlaps the acquire-all's may show it. A read
/// sent after the answer arrived may not: what a refused acquire-all took
/// was given back before it answered.
fn never_granted_leases_shown(
    events: &[&Event],
    leases: &[Lease<'_>],
    backend: &Backend,
    v: &mut Vec<String>,
) {
    let granted: std::collections::HashSet<((Family, &str), u64)> =
        leases.iter().map(|l| (l.name(), l.fence)).collect();
    let longest_ttl_us = (events.iter())
        .filter_map(|e| match e.timed.outcome {
            Outcome::Granted { ttl_ms, .. } => Some(ttl_ms),
            _ => None,
        })
        .max()
        .map(|ms| i64::try_from(ms.saturating_mul(1_000)).unwrap_or(i64::MAX));
    let mut unsettled: HashMap<(Family, &str), Vec<Unsettled>> = HashMap::new();
    // The answered acquire-alls per name.
    let mut all_at_once: HashMap<(Family, &str), Vec<&Event>> = HashMap::new();
    for e in events {
        let name = (family(e.kind), e.lock.as_str());
        match (e.op, &e.timed.outcome) {
            (Op::Acquire | Op::AcquireAll, Outcome::Failed { status, .. }) => {
                let answered = *status != 0 && !backend.may_run_steps_late();
                let until = longest_ttl_us
                    .filter(|_| answered)
                    .map(|ttl| e.timed.recv_us + LATE_GRANT_US + ttl);
                let window = Unsettled {
                    sent_us: e.timed.send_us,
                    until_us: until,
                };
                unsettled.entry(name).or_default().push(window);
            }
            (Op::AcquireAll, _) => all_at_once.entry(name).or_default().push(e),
            _ => {}
        }
    }
    for e in events {
        let (shown, what) = match &e.timed.outcome {
            Outcome::Busy { in_the_way, .. } if e.op.single() == Op::Acquire => {
                (in_the_way, "a busy answer said a lease was in the way")
            }
            Outcome::Status { holders, .. } => (holders, "a status read listed a holder"),
            _ => continue,
        };
        let name = (family(e.kind), e.lock.as_str());
        let maybe_unseen = unsettled.get(&name).is_some_and(|windows| {
            (windows.iter()).any(|w| {
                w.sent_us < e.timed.recv_us
                    && w.until_us.is_none_or(|until| e.timed.send_us < until)
            })
        });
        // Another acquire-all than the read itself, in flight during it.
        let taken_for_a_moment = all_at_once.get(&name).is_some_and(|others| {
            others.iter().any(|other| {
                !std::ptr::eq(*other, *e)
                    && other.timed.send_us < e.timed.recv_us
                    && e.timed.send_us < other.timed.recv_us
            })
        });
        for fence in shown {
            if !granted.contains(&(name, *fence)) && !maybe_unseen && !taken_for_a_moment {
                v.push(format!(
                    "{} {}: {what} with fence {fence}, which no grant returned, no acquire \
                     of unknown outcome could have taken, and no acquire-all in flight \
                     could have held for a moment",
                    noun(name.0),
                    e.lock
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
