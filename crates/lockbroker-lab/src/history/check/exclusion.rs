//! Who may hold one name at once, judged per name over the leases as
//! [`follow`](super::lease::follow) settled them: fences in grant order; on a
//! lock, no exclusive lease beside any other lease while shared leases may
//! share; on a semaphore, never more valid permits than its limit.
//!
//! A lease is certainly valid from the latest its promise can have begun
//! (`start.upper`) to the earliest it can have ended (`end_lower`), both
//! Redis ms. Two leases certainly overlap when each began before the other
//! certainly ended, and a set of them all at once when the latest start
//! comes no later than the earliest end: only such sets are judged, so an
//! uncertain clock hides a violation rather than inventing one.

use std::collections::HashMap;

use super::lease::Lease;
use super::{Backend, Report};
use crate::history::{family, noun, Family, LeaseKind};

/// Judges every name's leases and counts names and concurrency for the
/// summary.
pub(super) fn judge(leases: &[Lease<'_>], backend: &Backend, report: &mut Report) {
    let mut by_name: HashMap<(Family, &str), Vec<&Lease<'_>>> = HashMap::new();
    for lease in leases {
        by_name.entry(lease.name()).or_default().push(lease);
    }
    let stats = &mut report.stats;
    stats.locks = by_name.keys().filter(|(s, _)| *s == Family::Locks).count();
    stats.semaphores = by_name.len() - stats.locks;
    stats.shared_leases = leases
        .iter()
        .filter(|l| l.kind == LeaseKind::Shared)
        .count();
    stats.permits = leases
        .iter()
        .filter(|l| family(l.kind) == Family::Semaphores)
        .count();
    for ((names, name), list) in &mut by_name {
        let name = format!("{} {name}", noun(*names));
        list.sort_by(|a, b| (a.fence.cmp(&b.fence)).then(a.start.lower.total_cmp(&b.start.lower)));
        fence_order(&name, list, report);
        match names {
            Family::Locks => {
                exclusivity(&name, list, backend, report);
                let shared = list.iter().copied().filter(|l| l.kind == LeaseKind::Shared);
                let most = most_at_once(shared.collect(), |_, _| {});
                report.stats.most_shared_at_once = report.stats.most_shared_at_once.max(most);
            }
            Family::Semaphores => {
                let most = most_at_once(list.clone(), |permit, valid| {
                    permit_limit(&name, permit, valid, backend, report);
                });
                report.stats.most_permits_at_once = report.stats.most_permits_at_once.max(most);
            }
        }
    }
}

/// Fences strictly increase in grant order: no two grants share one, and
/// none with a higher fence was certainly granted before a lower one. The
/// leases of every kind of a name are in one order.
fn fence_order(name: &str, by_fence: &[&Lease<'_>], report: &mut Report) {
    for pair in by_fence.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if a.fence == b.fence {
            report
                .violations
                .push(format!("{name}: two grants carry fence {}", a.fence));
        } else if b.start.upper <= a.start.lower {
            report.violations.push(format!(
                "{name}: {} was granted {}, before {} {}",
                b.label(),
                b.start,
                a.label(),
                a.start
            ));
        }
    }
}

/// On a lock, no lease is granted while an earlier one it excludes is
/// certainly valid: an exclusive lease excludes every other lease, a shared
/// one only exclusive leases. Earlier means a lower fence (fence order is
/// judged on its own), so each grant is held against the latest-ending
/// earlier lease it excludes; when fences went backwards, that lease may
/// have begun after the grant ended, which is no overlap.
fn exclusivity(name: &str, by_fence: &[&Lease<'_>], backend: &Backend, report: &mut Report) {
    let mut latest_end: Option<&Lease<'_>> = None;
    let mut latest_exclusive_end: Option<&Lease<'_>> = None;
    for &b in by_fence {
        let excluding = match b.kind {
            LeaseKind::Shared => latest_exclusive_end,
            LeaseKind::Exclusive | LeaseKind::Permit { .. } => latest_end,
        };
        let overlaps =
            |a: &&Lease<'_>| b.start.upper <= a.end_lower && a.start.upper <= b.end_lower;
        if let Some(a) = excluding.filter(overlaps) {
            if backend.failed_over_between(a.grant.send_us, b.grant.recv_us) {
                report.stats.undone_by_failover += 1;
            } else {
                report.violations.push(format!(
                    "{name}: {} was granted {} while {} was valid until at least {:.0} ms",
                    b.label(),
                    b.start,
                    a.label(),
                    a.end_lower
                ));
            }
        }
        let later = |kept: Option<&Lease<'_>>| kept.is_none_or(|a| b.end_lower > a.end_lower);
        if later(latest_end) {
            latest_end = Some(b);
        }
        if b.kind == LeaseKind::Exclusive && later(latest_exclusive_end) {
            latest_exclusive_end = Some(b);
        }
    }
}

/// A permit granted while its semaphore already had `limit` permits
/// certainly valid (counting the new one, more than the smallest limit any
/// of them was asked under: permits held under another limit should have
/// made the grant a `limit_conflict`). In sentinel mode a permit granted
/// before a failover since may have been lost by it, so the grant only
/// counts as undone by the failover when the others suffice.
fn permit_limit(
    name: &str,
    permit: &Lease<'_>,
    valid: &[&Lease<'_>],
    backend: &Backend,
    report: &mut Report,
) {
    let limit_of = |l: &Lease<'_>| match l.kind {
        LeaseKind::Permit { limit } => usize::try_from(limit).unwrap_or(usize::MAX),
        LeaseKind::Exclusive | LeaseKind::Shared => 1,
    };
    let limit = valid
        .iter()
        .map(|l| limit_of(l))
        .min()
        .unwrap_or(usize::MAX);
    if valid.len() <= limit {
        return;
    }
    let kept = valid
        .iter()
        .filter(|a| {
            a.id == permit.id || !backend.failed_over_between(a.grant.send_us, permit.grant.recv_us)
        })
        .count();
    if kept <= limit {
        report.stats.undone_by_failover += 1;
        return;
    }
    let mut fences: Vec<u64> = valid.iter().map(|l| l.fence).collect();
    fences.sort_unstable();
    report.violations.push(format!(
        "{name}: {} was granted {} while {} other permits were valid: {} valid at once \
         (fences {fences:?}), above the limit of {limit}",
        permit.label(),
        permit.start,
        valid.len() - 1,
        valid.len()
    ));
}

/// Sweeps `leases` in the order their promises certainly began. At each
/// grant, calls `at_grant` with the lease and every lease certainly valid
/// with it then (itself included), and returns the most ever certainly
/// valid at once.
fn most_at_once<'a>(
    mut leases: Vec<&'a Lease<'a>>,
    mut at_grant: impl FnMut(&Lease<'_>, &[&Lease<'_>]),
) -> usize {
    leases.sort_by(|a, b| (a.start.upper.total_cmp(&b.start.upper)).then(a.fence.cmp(&b.fence)));
    let mut valid: Vec<&Lease<'_>> = Vec::new();
    let mut most = 0;
    for lease in leases {
        let at = lease.start.upper;
        valid.retain(|l| l.end_lower >= at);
        // A lease released or lost before it was certainly valid never
        // counts.
        if lease.end_lower < at {
            continue;
        }
        valid.push(lease);
        most = most.max(valid.len());
        at_grant(lease, &valid);
    }
    most
}
