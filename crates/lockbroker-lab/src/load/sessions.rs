//! Sessions in the load: a client opens a session, takes one or two names
//! under it, keeps only the session alive, and ends it with a close, or
//! walks away (the session expires), or stalls past its TTL first.
//!
//! A keepalive and a close answer for the session as a whole; each is
//! recorded once per lease of the session ([`Op::Keepalive`],
//! [`Op::Close`]), as what it means for that lease: renewed to the
//! session's expiry (or ended, when the answer names it), released, or lost
//! with the session. The checker then holds every lease under a session to
//! what a lease promises, through the steps that renewed and ended it.

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::Rng;
use tokio::time::sleep;

use super::Client;
use crate::client::{Kept, OpenSession, Outcome, Timed};
use crate::history::{LeaseId, Op};

/// One lease the load holds under a session.
#[derive(Clone, Debug, PartialEq)]
struct Member {
    lock: String,
    lease: LeaseId,
    fence: u64,
}

impl Client {
    /// One round under a session.
    pub(super) async fn session_round(&mut self) {
        let ttl = self.plan.ttl_ms;
        let Some(session) = self.client.open_session(ttl).await else {
            sleep(Duration::from_millis(20)).await;
            return;
        };
        let count = if self.rng.gen_bool(0.3) { 2 } else { 1 }.min(self.plan.locks.max(1));
        let mut names: Vec<usize> = (0..self.plan.locks.max(1)).collect();
        names.shuffle(&mut self.rng);
        let mut members = Vec::new();
        for n in names.into_iter().take(count) {
            let lock = self.lock_name(n);
            let wait = self.rng.gen_range(0..=ttl / 2);
            let (timed, token) = (self.client)
                .acquire_in_session(&lock, self.kind, &session.token, wait)
                .await;
            let fence = match timed.outcome {
                Outcome::Granted { fence, .. } if token.is_some() => Some(fence),
                _ => None,
            };
            let lease = fence.map(|_| self.history.new_lease());
            self.record(&lock, Op::Acquire, lease, &timed);
            if let (Some(lease), Some(fence)) = (lease, fence) {
                members.push(Member { lock, lease, fence });
            }
        }
        if members.is_empty() {
            let timed = self.client.close_session(&session).await;
            drop(timed);
            return;
        }
        if self.rng.gen_bool(self.plan.stall_rate.clamp(0.0, 1.0)) {
            // A holder that froze past its session's TTL: the session and
            // every lease under it must be gone when it wakes.
            self.stalls += 1;
            sleep(Duration::from_millis(
                ttl + self.rng.gen_range(10..=ttl.max(10)),
            ))
            .await;
            self.keep(&session, &mut members).await;
            self.close(&session, &members).await;
            return;
        }
        // Past the session's TTL more often than not: only the keepalives
        // keep the leases.
        for _ in 0..self.rng.gen_range(1..=3) {
            sleep(Duration::from_millis(self.rng.gen_range(ttl / 4..=ttl / 2))).await;
            let kept = self.keep(&session, &mut members).await;
            if !matches!(kept, Outcome::Renewed { .. }) {
                break;
            }
        }
        if let Some(member) = members.first().filter(|_| self.rng.gen_bool(0.3)) {
            let timed = self
                .client
                .status_in(super::family(self.kind), &member.lock)
                .await;
            self.record(&member.lock, Op::Status, Some(member.lease), &timed);
        }
        if self.rng.gen_bool(0.1) {
            return; // Walk away: the session, and every lease under it, expires.
        }
        self.close(&session, &members).await;
    }

    /// A keepalive, recorded for each lease of the session; the session's
    /// own outcome. A lease it names ended has left the session.
    async fn keep(&mut self, session: &OpenSession, members: &mut Vec<Member>) -> Outcome {
        let kept = self.client.keep_session(session).await;
        for (member, outcome) in each_member(members, &kept) {
            self.record_member(&member, Op::Keepalive, &kept.timed, outcome);
        }
        kept.timed.outcome
    }

    /// A close, recorded for each lease of the session as its release.
    async fn close(&mut self, session: &OpenSession, members: &[Member]) {
        let timed = self.client.close_session(session).await;
        for member in members {
            let outcome = match &timed.outcome {
                Outcome::Released { .. } => Outcome::Released {
                    fence: member.fence,
                },
                other => other.clone(),
            };
            self.record_member(member, Op::Close, &timed, outcome);
        }
    }

    fn record_member(&self, member: &Member, op: Op, timed: &Timed, outcome: Outcome) {
        let timed = Timed {
            outcome,
            ..timed.clone()
        };
        self.record(&member.lock, op, Some(member.lease), &timed);
    }
}

/// What one keepalive answer means for each lease of the session: renewed
/// to the session's expiry (with the lease's own fence), ended where the
/// answer names it, or the session's own failure. A lease named ended
/// leaves `members`: the session no longer renews or releases it, so the
/// keepalives and the close after this one do not speak for it.
fn each_member(members: &mut Vec<Member>, kept: &Kept) -> Vec<(Member, Outcome)> {
    let outcomes = (members.iter())
        .map(|member| {
            let outcome = match &kept.timed.outcome {
                _ if kept.ended.contains(&member.lock) => Outcome::Lost,
                Outcome::Renewed {
                    ttl_ms,
                    expires_at_ms,
                    ..
                } => Outcome::Renewed {
                    fence: member.fence,
                    ttl_ms: *ttl_ms,
                    expires_at_ms: *expires_at_ms,
                },
                other => other.clone(),
            };
            (member.clone(), outcome)
        })
        .collect();
    members.retain(|member| !kept.ended.contains(&member.lock));
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(lock: &str, lease: LeaseId, fence: u64) -> Member {
        Member {
            lock: lock.to_owned(),
            lease,
            fence,
        }
    }

    fn kept(expires_at_ms: u64, ended: &[&str]) -> Kept {
        Kept {
            timed: Timed {
                send_us: 0,
                recv_us: 1,
                outcome: Outcome::Renewed {
                    fence: 0,
                    ttl_ms: 200,
                    expires_at_ms,
                },
            },
            ended: ended.iter().map(|lock| (*lock).to_owned()).collect(),
        }
    }

    #[test]
    fn a_lease_a_keepalive_names_ended_is_lost_and_no_later_keepalive_renews_it() {
        let (a, b) = (member("a", 1, 10), member("b", 2, 20));
        let mut members = vec![a.clone(), b.clone()];
        let first = each_member(&mut members, &kept(1_000, &["a"]));
        assert_eq!(
            first,
            [
                (a, Outcome::Lost),
                (
                    b.clone(),
                    Outcome::Renewed {
                        fence: 20,
                        ttl_ms: 200,
                        expires_at_ms: 1_000
                    }
                ),
            ]
        );
        assert_eq!(members, std::slice::from_ref(&b));
        // The next keepalive renews the session and the lease left in it.
        let second = each_member(&mut members, &kept(1_200, &[]));
        assert_eq!(
            second,
            [(
                b,
                Outcome::Renewed {
                    fence: 20,
                    ttl_ms: 200,
                    expires_at_ms: 1_200
                }
            )]
        );
    }

    #[test]
    fn a_lost_session_is_every_leases_loss() {
        let mut members = vec![member("a", 1, 10), member("b", 2, 20)];
        let lost = Kept {
            timed: Timed {
                send_us: 0,
                recv_us: 1,
                outcome: Outcome::Lost,
            },
            ended: Vec::new(),
        };
        let outcomes = each_member(&mut members, &lost);
        assert!(outcomes
            .iter()
            .all(|(_, outcome)| *outcome == Outcome::Lost));
        assert_eq!(members.len(), 2);
    }
}
