//! One lease as the checker reconstructs it, and [`follow`]: its extends,
//! releases and status reads, each checked against what must be true of the
//! lease at that moment.

use std::fmt;

use super::report::Stats;
use super::Backend;
use crate::client::{Outcome, Timed};
use crate::history::{family, noun, Event, Family, LeaseId, LeaseKind, Op};

/// Local µs to ms.
pub(super) fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

/// When a lease's promised interval began, Redis ms: at or after `lower`
/// and before `upper`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Start {
    pub lower: f64,
    pub upper: f64,
}

impl Start {
    /// Single mode: Redis reports the grant instant (floor ms) itself.
    pub fn exact(at_ms: f64) -> Self {
        Self {
            lower: at_ms,
            upper: at_ms + 1.0,
        }
    }

    /// Quorum mode: a quorum lease promises exclusivity from when its answer
    /// left the broker (after every node's grant and write-back) until its
    /// `expires_at_ms`. No reported figure dates that answer:
    /// `expires_at_ms - ttl_ms` is the earliest-expiring node's grant less the
    /// allowance, so before the answer by up to the allowance plus the
    /// fan-out; adding the allowance back still dates one node's grant, which
    /// may precede the grant on the node the previous lease shared by the
    /// fan-out; and the send instant dates a waiting acquire long before its
    /// grant. What the checker can justify is the request's own window: the
    /// answer left after the acquire was sent and before it arrived, mapped
    /// to Redis time through the offset bounds. Judging overlap by the latest
    /// of those instants flags only a grant answered while the previous lease
    /// was certainly valid, and still catches a double grant that overlaps by
    /// more than the answer's way back plus the offset's uncertainty.
    pub fn answered(grant: &Timed, (lo, hi): (f64, f64)) -> Self {
        Self {
            lower: ms(grant.send_us) + lo,
            upper: ms(grant.recv_us) + hi,
        }
    }
}

impl fmt::Display for Start {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.upper - self.lower == 1.0 {
            write!(f, "at {:.0} ms", self.lower)
        } else {
            write!(f, "between {:.0} and {:.0} ms", self.lower, self.upper)
        }
    }
}

/// One lease: a granted acquire and what became of it.
pub(super) struct Lease<'a> {
    pub id: LeaseId,
    /// The lock's or semaphore's name; `kind` says which.
    pub lock: &'a str,
    pub kind: LeaseKind,
    pub fence: u64,
    pub start: Start,
    pub grant: &'a Timed,
    /// The requested TTL.
    pub ttl_ms: u64,
    /// A lower bound on when the lease stopped being valid, Redis ms.
    pub end_lower: f64,
    /// Local µs when an acknowledged release came back.
    pub released_ack: Option<i64>,
}

impl<'a> Lease<'a> {
    /// The name the lease holds: a lock and a semaphore may share a name
    /// and still have fences and holders of their own.
    pub fn name(&self) -> (Family, &'a str) {
        (family(self.kind), self.lock)
    }

    /// How a violation names the lease among others of its name: by fence,
    /// with its kind when a lock's leases may be of either.
    pub fn label(&self) -> String {
        match self.kind {
            LeaseKind::Exclusive => format!("fence {}", self.fence),
            LeaseKind::Shared => format!("shared fence {}", self.fence),
            LeaseKind::Permit { .. } => format!("permit fence {}", self.fence),
        }
    }
}

/// How a violation names the request of `op` that renewed or ended a lease.
fn step(op: Op) -> &'static str {
    match op {
        Op::Keepalive => "its session's keepalive",
        Op::Close => "its session's close",
        Op::Release | Op::ReleaseAll => "release",
        _ => "extend",
    }
}

/// What [`follow`] needs besides the lease and its steps.
pub(super) struct Context<'a> {
    /// Bounds on (Redis clock - local clock), ms.
    pub offset: (f64, f64),
    pub backend: &'a Backend,
    pub stats: &'a mut Stats,
    pub violations: &'a mut Vec<String>,
}

impl Context<'_> {
    /// The latest instant (Redis ms) any node can hold a lease that an
    /// answer received at `recv_us` granted or extended for `ttl_ms`,
    /// ending at `expires_at_ms` as reported. One Redis reports its expiry
    /// exactly. Quorum nodes ran before the answer arrived, each counting
    /// the whole TTL; a node can hold the lease past the reported expiry
    /// (which the allowance moved earlier), so a late success there is
    /// judged against this bound instead.
    fn latest_hold(&self, recv_us: i64, ttl_ms: u64, expires_at_ms: u64) -> f64 {
        if self.backend.is_quorum() {
            ms(recv_us) + self.offset.1 + ttl_ms as f64
        } else {
            expires_at_ms as f64
        }
    }

    /// A step that found a lease lost (or not held) before its expiry: a
    /// violation, unless a quorum node restarted empty since the grant and
    /// may have taken the lease's majority with it.
    fn early_loss(&mut self, lease: &Lease<'_>, t: &Timed, violation: String) {
        if self
            .backend
            .restarted_between(lease.grant.send_us, t.recv_us)
        {
            self.stats.lost_after_restart += 1;
        } else {
            self.violations.push(violation);
        }
    }
}

/// Walks one lease's extends, releases and status reads in order, checking
/// each against what must be true of the lease at that moment (a
/// release-all's result for the lease as a release of it alone), and settles
/// the lease's `end_lower` and `released_ack`.
pub(super) fn follow(lease: &mut Lease<'_>, steps: &[&Event], cx: &mut Context<'_>) {
    let name = format!(
        "{} {} {}",
        noun(family(lease.kind)),
        lease.lock,
        lease.label()
    );
    let (lo, hi) = cx.offset;
    let quorum = cx.backend.is_quorum();
    // The lease is certainly valid until `certain_end` (Redis ms) unless a
    // release landed; an extend with no answer may have moved it later. No
    // node holds it past `latest_hold` unless such an extend moved it.
    let mut certain_end = lease.end_lower;
    let mut latest_hold = cx.latest_hold(lease.grant.recv_us, lease.ttl_ms, certain_end as u64);
    let mut original_hold = latest_hold;
    let mut ambiguous = false;
    let mut release_sent: Option<f64> = None;
    // Local µs when a step's answer said the lease was lost.
    let mut lost_ack: Option<i64> = None;
    let mut renewed_once = false;
    for e in steps {
        let t = &e.timed;
        let (send, recv) = (ms(t.send_us), ms(t.recv_us));
        let released_before = lease.released_ack.is_some_and(|r| r < t.send_us);
        // Sentinel mode: a failover since the release may have undone it.
        let release_undone = released_before
            && lease
                .released_ack
                .is_some_and(|r| cx.backend.failed_over_between(r, t.recv_us));
        let valid_at_recv = release_sent.is_none() && recv + hi < certain_end - 1.0;
        match (e.op.single(), &t.outcome) {
            (
                Op::Extend,
                Outcome::Renewed {
                    fence,
                    ttl_ms,
                    expires_at_ms,
                },
            ) => {
                let at = cx.backend.node_instant(*ttl_ms, *expires_at_ms);
                if *fence != lease.fence {
                    cx.violations
                        .push(format!("{name}: {} answered fence {fence}", step(e.op)));
                }
                // Sentinel mode: a failover since may have brought back a
                // primary that still had it.
                let lost_before = lost_ack.is_some_and(|lost| {
                    lost < t.send_us && !cx.backend.failed_over_between(lost, t.recv_us)
                });
                if lost_before {
                    cx.violations.push(format!(
                        "{name}: {} renewed it after an earlier step found it lost",
                        step(e.op)
                    ));
                }
                if release_undone {
                    cx.stats.undone_by_failover += 1;
                } else if released_before {
                    cx.violations.push(format!(
                        "{name}: extended after its release was acknowledged"
                    ));
                } else if !ambiguous && release_sent.is_none() && at >= latest_hold {
                    cx.violations.push(format!(
                        "{name}: extended at {at:.0} ms although it expired at {latest_hold:.0} ms"
                    ));
                } else if renewed_once && at >= original_hold {
                    cx.stats.extend_probes += 1;
                }
                renewed_once = true;
                original_hold = latest_hold;
                certain_end = *expires_at_ms as f64;
                latest_hold = cx.latest_hold(t.recv_us, *ttl_ms, *expires_at_ms);
            }
            (Op::Extend, Outcome::Lost) => {
                lost_ack.get_or_insert(t.recv_us);
                if released_before {
                    cx.stats.release_probes += 1;
                } else if valid_at_recv {
                    let violation = format!(
                        "{name}: {} answered lease_lost by {:.0} ms although the lease was valid until {certain_end:.0} ms",
                        step(e.op),
                        recv + hi
                    );
                    cx.early_loss(lease, t, violation);
                }
                // The nodes that still held the lease extended it.
                ambiguous |= quorum;
            }
            (Op::Extend, Outcome::Failed { .. }) => ambiguous = true,
            (Op::Release, Outcome::Released { fence }) => {
                if *fence != lease.fence {
                    cx.violations
                        .push(format!("{name}: {} answered fence {fence}", step(e.op)));
                }
                if release_sent.is_none() && !ambiguous && send + lo > latest_hold + 1.0 {
                    cx.violations.push(format!(
                        "{name}: release reported success at {:.0} ms or later although the lease expired at {latest_hold:.0} ms",
                        send + lo
                    ));
                }
                release_sent.get_or_insert(send + lo);
                lease.released_ack.get_or_insert(t.recv_us);
            }
            (Op::Release, Outcome::Lost) if valid_at_recv => {
                let violation = format!(
                    "{name}: {} answered lease_lost by {:.0} ms although the lease was valid until {certain_end:.0} ms",
                    step(e.op),
                    recv + hi
                );
                cx.early_loss(lease, t, violation);
            }
            (Op::Release, Outcome::Failed { .. }) => {
                release_sent.get_or_insert(send + lo);
            }
            (
                Op::Status,
                Outcome::Status {
                    held,
                    fence,
                    holders,
                    all_listed,
                },
            ) => {
                // An exclusive lease that holds its lock carries the last
                // fence issued; a shared lease or a permit need not, so only
                // the listed holders show it, and only a complete list shows
                // it is missing.
                let exclusive = lease.kind == LeaseKind::Exclusive;
                let shows_lease = holders.contains(&lease.fence)
                    || (exclusive && *held && *fence == Some(lease.fence));
                let shows_absence = !shows_lease && (exclusive || *all_listed);
                if release_undone && shows_lease {
                    cx.stats.undone_by_failover += 1;
                } else if released_before {
                    if shows_lease {
                        cx.violations.push(format!(
                            "{name}: shown as held after its release was acknowledged"
                        ));
                    } else {
                        cx.stats.release_probes += 1;
                    }
                } else if valid_at_recv && t.send_us > lease.grant.recv_us && shows_absence {
                    let violation = format!(
                        "{name}: status did not show the lease while it was valid (held {held}, fence {fence:?})"
                    );
                    cx.early_loss(lease, t, violation);
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
