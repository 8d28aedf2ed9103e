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
            self.keep(&session, &members).await;
            self.close(&session, &members).await;
            return;
        }
        // Past the session's TTL more often than not: only the keepalives
        // keep the leases.
        for _ in 0..self.rng.gen_range(1..=3) {
            sleep(Duration::from_millis(self.rng.gen_range(ttl / 4..=ttl / 2))).await;
            let kept = self.keep(&session, &members).await;
            if !matches!(kept, Outcome::Renewed { .. }) {
                break;
            }
        }
        if self.rng.gen_bool(0.3) {
            let member = &members[0];
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
    /// own outcome.
    async fn keep(&mut self, session: &OpenSession, members: &[Member]) -> Outcome {
        let Kept { timed, ended } = self.client.keep_session(session).await;
        for member in members {
            let outcome = match &timed.outcome {
                _ if ended.contains(&member.lock) => Outcome::Lost,
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
            self.record_member(member, Op::Keepalive, &timed, outcome);
        }
        timed.outcome
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
