//! Acquire-all and release-all in the load: a client of locks takes two or
//! three at once, holds them, and gives them back together.

use std::time::Duration;

use rand::seq::SliceRandom;
use rand::Rng;
use tokio::time::sleep;

use super::Client;
use crate::client::{now_us, Outcome};
use crate::history::{LeaseId, LeaseKind, Op};

/// One lease of an acquire-all the load holds: its lock, kind, id and token.
pub(super) struct Held {
    lock: String,
    kind: LeaseKind,
    lease: LeaseId,
    token: String,
}

impl Client {
    /// One acquire-all of two (now and then three) of the locks, in a random
    /// order, each of this client's kind; the leases unless refused. After a
    /// refusal, a status read of a lock it did not name busy sometimes
    /// checks that nothing of the request was kept.
    pub(super) async fn acquire_all(&mut self, wait_ms: u64) -> Option<(Vec<Held>, i64)> {
        let count = if self.rng.gen_bool(0.25) { 3 } else { 2 }.min(self.plan.locks);
        let mut locks: Vec<usize> = (0..self.plan.locks).collect();
        locks.shuffle(&mut self.rng);
        let asks: Vec<(String, LeaseKind)> = (locks.into_iter().take(count))
            .map(|n| (self.lock_name(n), self.kind))
            .collect();
        let answers = (self.client)
            .acquire_all(&asks, self.plan.ttl_ms, wait_ms)
            .await;
        let granted = (answers.iter()).all(|(timed, token)| {
            matches!(timed.outcome, Outcome::Granted { .. }) && token.is_some()
        });
        let mut held = Vec::new();
        let mut refused = None;
        let mut failed = false;
        let mut answered_at = 0;
        for ((lock, kind), (timed, token)) in asks.into_iter().zip(answers) {
            let lease = granted.then(|| self.history.new_lease());
            self.record_kind(&lock, kind, Op::AcquireAll, lease, &timed);
            answered_at = timed.recv_us;
            match (lease, token) {
                (Some(lease), Some(token)) => held.push(Held {
                    lock,
                    kind,
                    lease,
                    token,
                }),
                _ if timed.outcome == Outcome::Refused => refused = Some(lock),
                _ => failed |= matches!(timed.outcome, Outcome::Failed { .. }),
            }
        }
        if granted {
            return Some((held, answered_at));
        }
        if failed {
            sleep(Duration::from_millis(20)).await;
        } else if let Some(lock) = refused.filter(|_| self.rng.gen_bool(0.5)) {
            let timed = self.client.status(&lock).await;
            self.record(&lock, Op::Status, None, &timed);
        }
        None
    }

    /// Holds the leases of one acquire-all as [`Client::hold`] holds one:
    /// stall past the TTL now and then, extend each, read one's status,
    /// walk away, or give them back, mostly with one release-all, then
    /// probe that the release took effect.
    pub(super) async fn hold_all(&mut self, held: &[Held], granted_at: i64) {
        let ttl = self.plan.ttl_ms;
        if self.rng.gen_bool(self.plan.stall_rate.clamp(0.0, 1.0)) {
            self.stalls += 1;
            sleep(Duration::from_millis(
                ttl + self.rng.gen_range(10..=ttl.max(10)),
            ))
            .await;
            self.extend_all(held).await;
            self.release_all(held).await;
            return;
        }
        sleep(Duration::from_millis(self.rng.gen_range(0..=ttl / 4))).await;
        if self.rng.gen_bool(0.5) && self.extend_all(held).await && self.rng.gen_bool(0.5) {
            // Outlive the grant's TTL, then extend again: this only works
            // if the first extends really moved the expiries.
            let past_first = granted_at + i64::try_from(ttl + 20).unwrap_or(0) * 1000;
            let wait_us = (past_first - now_us()).max(0);
            sleep(Duration::from_micros(wait_us.unsigned_abs())).await;
            self.extend_all(held).await;
        }
        if let Some(h) = held
            .choose(&mut self.rng)
            .filter(|_| self.rng.gen_bool(0.3))
        {
            let timed = self.client.status(&h.lock).await;
            self.record_kind(&h.lock, h.kind, Op::Status, Some(h.lease), &timed);
        }
        if self.rng.gen_bool(0.1) {
            return; // Walk away: the leases expire on their own.
        }
        let released = if self.rng.gen_bool(0.8) {
            self.release_all(held).await
        } else {
            let mut released = Vec::new();
            for h in held {
                let timed = self.client.release(&h.lock, &h.token).await;
                self.record_kind(&h.lock, h.kind, Op::Release, Some(h.lease), &timed);
                released.push(matches!(timed.outcome, Outcome::Released { .. }));
            }
            released
        };
        // Probe that each release took effect.
        for (h, released) in held.iter().zip(released) {
            if !released {
                continue;
            }
            match self.rng.gen_range(0..3) {
                0 => {
                    let timed = self.client.status(&h.lock).await;
                    self.record_kind(&h.lock, h.kind, Op::Status, Some(h.lease), &timed);
                }
                1 => {
                    let timed = self.client.extend(&h.lock, &h.token, ttl).await;
                    self.record_kind(&h.lock, h.kind, Op::Extend, Some(h.lease), &timed);
                }
                _ => {}
            }
        }
    }

    /// Extends every lease of `held` for twice the TTL, one by one; whether
    /// every extend was answered `Renewed`.
    async fn extend_all(&mut self, held: &[Held]) -> bool {
        let mut renewed = true;
        for h in held {
            let timed = (self.client)
                .extend(&h.lock, &h.token, 2 * self.plan.ttl_ms)
                .await;
            self.record_kind(&h.lock, h.kind, Op::Extend, Some(h.lease), &timed);
            renewed &= matches!(timed.outcome, Outcome::Renewed { .. });
        }
        renewed
    }

    /// One release-all of `held`, recorded per lease; which were released.
    async fn release_all(&mut self, held: &[Held]) -> Vec<bool> {
        let refs: Vec<(&str, &str)> = (held.iter())
            .map(|h| (h.lock.as_str(), h.token.as_str()))
            .collect();
        let answers = self.client.release_all(&refs).await;
        (held.iter().zip(answers))
            .map(|(h, timed)| {
                self.record_kind(&h.lock, h.kind, Op::ReleaseAll, Some(h.lease), &timed);
                matches!(timed.outcome, Outcome::Released { .. })
            })
            .collect()
    }
}
