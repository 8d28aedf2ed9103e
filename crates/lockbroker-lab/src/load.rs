//! The checker's load: clients that take locks and then hold, stall past
//! their TTL, extend, release, walk away or probe, at random, recording every
//! answer in a [`History`]. By default every client takes exclusive leases;
//! a [`Mix`] gives some of them shared leases of the same locks, or permits
//! of semaphores named like the locks, which they drive the same way, and
//! may have the clients of locks take two or three at once (acquire-all)
//! and give them back together (release-all), and any client hold some of
//! its rounds under a session.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::{sleep, Instant};

use crate::client::{now_us, BrokerClient, Outcome, Timed};
use crate::history::{family, Event, Family, History, LeaseId, LeaseKind, Op};

mod all;
mod sessions;

/// What the load does, and for how long.
#[derive(Clone, Debug)]
pub struct LoadPlan {
    /// Concurrent clients; client `i` talks to broker `i % brokers`.
    pub clients: usize,
    /// Locks the clients share.
    pub locks: usize,
    /// How long clients keep starting new rounds.
    pub duration: Duration,
    /// TTL of every grant; extends ask for twice this.
    pub ttl_ms: u64,
    /// Share of grants whose holder stalls past the TTL before acting again.
    pub stall_rate: f64,
    /// Seed for the clients' choices.
    pub seed: u64,
    /// Lock names are `<prefix>-<n>`.
    pub lock_prefix: String,
}

/// Which kinds of lease the load's clients take, out of the plan's
/// `clients`. The default, every client exclusive, is the load as it was
/// before shared leases and semaphores, so [`run`] keeps its callers' load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mix {
    /// Clients that take shared leases of the plan's locks, beside the
    /// exclusive ones: their leases must overlap only one another.
    pub shared_clients: usize,
    /// Clients that take permits of semaphores named like the plan's locks
    /// (`<prefix>-<n>`, another name than the lock), at most `limit` valid
    /// at once per semaphore. Counted before `shared_clients` when the two
    /// ask for more clients than the plan has.
    pub permit_clients: usize,
    /// Every semaphore's limit; 0 reads as 1, the lowest the broker takes.
    pub limit: u32,
    /// Share of the rounds of a client of locks (exclusive or shared) that
    /// take two or three of them at once with one acquire-all, hold them as
    /// one, and mostly give them back with one release-all. Needs two
    /// locks or more; 0 (the default) never does.
    pub all_at_once_rate: f64,
    /// Share of every client's rounds held under a session: one or two
    /// names taken under it, only the session kept alive, then closed (or
    /// left to expire). 0 (the default) never does.
    pub session_rate: f64,
}

impl Mix {
    /// The kind of lease client `i` of `clients` takes: the last
    /// `permit_clients` take permits, the `shared_clients` before them
    /// shared leases, and the rest exclusive leases. Kinds are contiguous
    /// while brokers go round (`i % brokers`), so each kind reaches every
    /// broker once it has as many clients as there are brokers.
    pub fn kind_of(&self, i: usize, clients: usize) -> LeaseKind {
        let permits = self.permit_clients.min(clients);
        let shared = self.shared_clients.min(clients - permits);
        if i >= clients - permits {
            LeaseKind::Permit {
                limit: self.limit.max(1),
            }
        } else if i >= clients - permits - shared {
            LeaseKind::Shared
        } else {
            LeaseKind::Exclusive
        }
    }
}

/// Stalls taken, alongside the history.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoadStats {
    /// Holders that stalled past their TTL.
    pub stalls: u64,
}

/// Runs `plan` against `brokers`, every client taking exclusive leases,
/// and returns what everyone was told.
pub async fn run(brokers: &[String], plan: &LoadPlan) -> (History, LoadStats) {
    run_mixed(brokers, plan, &Mix::default()).await
}

/// Runs `plan` against `brokers` with its clients taking the kinds of lease
/// `mix` gives them, and returns what everyone was told. Check the history
/// with [`check`](crate::check) as any other: it knows every kind.
pub async fn run_mixed(brokers: &[String], plan: &LoadPlan, mix: &Mix) -> (History, LoadStats) {
    let history = Arc::new(History::new());
    let deadline = Instant::now() + plan.duration;
    let mut tasks = Vec::new();
    for i in 0..plan.clients {
        // A URL that makes no client is a caller's mistake: lockbroker-check
        // tries each before the load starts.
        let client = BrokerClient::new(&brokers[i % brokers.len()], Duration::from_secs(15))
            .expect("a client of every broker URL");
        let worker = Client {
            id: i,
            kind: mix.kind_of(i, plan.clients),
            all_at_once_rate: mix.all_at_once_rate.clamp(0.0, 1.0),
            session_rate: mix.session_rate.clamp(0.0, 1.0),
            client,
            history: Arc::clone(&history),
            plan: plan.clone(),
            rng: StdRng::seed_from_u64(plan.seed.wrapping_add(i as u64)),
            stalls: 0,
        };
        tasks.push(tokio::spawn(worker.run(deadline)));
    }
    let mut stats = LoadStats::default();
    for task in tasks {
        stats.stalls += task.await.unwrap_or(0);
    }
    let history = Arc::try_unwrap(history).unwrap_or_else(|shared| {
        let copy = History::new();
        for e in shared.events() {
            copy.record(e);
        }
        copy
    });
    (history, stats)
}

struct Client {
    id: usize,
    /// The kind of lease this client takes, and so the routes it calls.
    kind: LeaseKind,
    /// Share of rounds that take several locks at once (clients of locks).
    all_at_once_rate: f64,
    /// Share of rounds held under a session.
    session_rate: f64,
    client: BrokerClient,
    history: Arc<History>,
    plan: LoadPlan,
    rng: StdRng,
    stalls: u64,
}

impl Client {
    fn record(&self, lock: &str, op: Op, lease: Option<LeaseId>, timed: &Timed) {
        self.record_kind(lock, self.kind, op, lease, timed);
    }

    fn record_kind(
        &self,
        lock: &str,
        kind: LeaseKind,
        op: Op,
        lease: Option<LeaseId>,
        timed: &Timed,
    ) {
        self.history.record(Event {
            client: self.id,
            lock: lock.to_owned(),
            kind,
            op,
            lease,
            timed: timed.clone(),
        });
    }

    async fn run(mut self, deadline: Instant) -> u64 {
        while Instant::now() < deadline {
            // (A load without several locks at once draws what it drew
            // before there were any, so a seed replays it.)
            let several = family(self.kind) == Family::Locks
                && self.plan.locks >= 2
                && self.all_at_once_rate > 0.0
                && self.rng.gen_bool(self.all_at_once_rate);
            // (Nor does one without sessions draw for them.)
            if !several && self.session_rate > 0.0 && self.rng.gen_bool(self.session_rate) {
                self.session_round().await;
                continue;
            }
            if several {
                // Every lock of the set must be free at once: wait longer,
                // or most are refused.
                let ttl = self.plan.ttl_ms;
                let wait = if self.rng.gen_bool(0.25) {
                    0
                } else {
                    self.rng.gen_range(ttl..=3 * ttl)
                };
                if let Some((held, granted_at)) = self.acquire_all(wait).await {
                    self.hold_all(&held, granted_at).await;
                }
                continue;
            }
            let n = self.rng.gen_range(0..self.plan.locks.max(1));
            let lock = self.lock_name(n);
            let wait = self.wait_ms();
            let Some((lease, token, granted_at)) = self.acquire(&lock, wait).await else {
                continue;
            };
            self.hold(&lock, lease, &token, granted_at).await;
        }
        self.stalls
    }

    fn lock_name(&self, n: usize) -> String {
        format!("{}-{n}", self.plan.lock_prefix)
    }

    /// No wait half the time, else up to twice the TTL.
    fn wait_ms(&mut self) -> u64 {
        if self.rng.gen_bool(0.5) {
            0
        } else {
            self.rng.gen_range(0..=2 * self.plan.ttl_ms)
        }
    }

    /// One acquire; `None` unless granted. Backs off a little after an error
    /// so a broker without Redis is not hammered.
    async fn acquire(&mut self, lock: &str, wait_ms: u64) -> Option<(LeaseId, String, i64)> {
        let (timed, token) = (self.client)
            .acquire_kind(lock, self.kind, self.plan.ttl_ms, wait_ms)
            .await;
        let lease =
            matches!(timed.outcome, Outcome::Granted { .. }).then(|| self.history.new_lease());
        self.record(lock, Op::Acquire, lease, &timed);
        match (lease, token) {
            (Some(lease), Some(token)) => Some((lease, token, timed.recv_us)),
            _ => {
                if matches!(timed.outcome, Outcome::Failed { .. }) {
                    sleep(Duration::from_millis(20)).await;
                }
                None
            }
        }
    }

    async fn hold(&mut self, lock: &str, lease: LeaseId, token: &str, granted_at: i64) {
        let ttl = self.plan.ttl_ms;
        let routes = family(self.kind);
        if self.rng.gen_bool(self.plan.stall_rate.clamp(0.0, 1.0)) {
            // A holder that froze past its TTL wakes and carries on as if it
            // still held the lock; the broker must tell it otherwise.
            self.stalls += 1;
            sleep(Duration::from_millis(
                ttl + self.rng.gen_range(10..=ttl.max(10)),
            ))
            .await;
            let timed = self.client.extend_in(routes, lock, token, 2 * ttl).await;
            self.record(lock, Op::Extend, Some(lease), &timed);
            let timed = self.client.release_in(routes, lock, token).await;
            self.record(lock, Op::Release, Some(lease), &timed);
            return;
        }
        sleep(Duration::from_millis(self.rng.gen_range(0..=ttl / 4))).await;
        if self.rng.gen_bool(0.5) {
            let timed = self.client.extend_in(routes, lock, token, 2 * ttl).await;
            self.record(lock, Op::Extend, Some(lease), &timed);
            if matches!(timed.outcome, Outcome::Renewed { .. }) && self.rng.gen_bool(0.5) {
                // Outlive the grant's TTL, then extend again: this only works
                // if the first extend really moved the expiry.
                let past_first = granted_at + i64::try_from(ttl + 20).unwrap_or(0) * 1000;
                let wait_us = (past_first - now_us()).max(0);
                sleep(Duration::from_micros(wait_us.unsigned_abs())).await;
                let timed = self.client.extend_in(routes, lock, token, 2 * ttl).await;
                self.record(lock, Op::Extend, Some(lease), &timed);
            }
        }
        if self.rng.gen_bool(0.3) {
            let timed = self.client.status_in(routes, lock).await;
            self.record(lock, Op::Status, Some(lease), &timed);
        }
        if self.rng.gen_bool(0.1) {
            return; // Walk away: the lease expires on its own.
        }
        let timed = self.client.release_in(routes, lock, token).await;
        self.record(lock, Op::Release, Some(lease), &timed);
        if !matches!(timed.outcome, Outcome::Released { .. }) {
            return;
        }
        // Probe that the release took effect.
        match self.rng.gen_range(0..3) {
            0 => {
                let timed = self.client.status_in(routes, lock).await;
                self.record(lock, Op::Status, Some(lease), &timed);
            }
            1 => {
                let timed = self.client.extend_in(routes, lock, token, ttl).await;
                self.record(lock, Op::Extend, Some(lease), &timed);
            }
            _ => {
                // An exclusive lease's lock is free at once after its
                // release: take it again. Another kind may find the name
                // still held, or owed to a waiter: a busy answer must then
                // not name the released lease.
                if let Some((again, token, _)) = self.acquire(lock, 0).await {
                    let timed = self.client.release_in(routes, lock, &token).await;
                    self.record(lock, Op::Release, Some(again), &timed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_mix_is_all_exclusive() {
        let mix = Mix::default();
        assert!((0..8).all(|i| mix.kind_of(i, 8) == LeaseKind::Exclusive));
    }

    #[test]
    fn a_mix_gives_the_last_clients_permits_and_those_before_shared_leases() {
        let mix = Mix {
            shared_clients: 2,
            permit_clients: 3,
            limit: 2,
            ..Mix::default()
        };
        let kinds: Vec<LeaseKind> = (0..6).map(|i| mix.kind_of(i, 6)).collect();
        let permit = LeaseKind::Permit { limit: 2 };
        assert_eq!(
            kinds,
            [
                LeaseKind::Exclusive,
                LeaseKind::Shared,
                LeaseKind::Shared,
                permit,
                permit,
                permit
            ]
        );
        // Asking for more than there are: permits first, limit at least 1.
        let greedy = Mix {
            shared_clients: 5,
            permit_clients: 1,
            limit: 0,
            ..Mix::default()
        };
        let kinds: Vec<LeaseKind> = (0..3).map(|i| greedy.kind_of(i, 3)).collect();
        assert_eq!(
            kinds,
            [
                LeaseKind::Shared,
                LeaseKind::Shared,
                LeaseKind::Permit { limit: 1 }
            ]
        );
    }
}
