//! The one workload behind `latency`, `throughput` and the memory load: each
//! caller loops acquire + release on a lock of its own until a deadline,
//! timing every pair and checking every fence, on every target alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use crate::client::{PairClient, Target};
use crate::meter::{Meter, Usage};

/// What one target did over one or more slices.
#[derive(Default)]
pub struct Outcome {
    /// Pairs completed.
    pub pairs: u64,
    /// Time spent measuring (sum of slices).
    pub elapsed: Duration,
    /// One sample per completed pair.
    pub samples: Vec<Duration>,
    /// Failed steps (each stops its caller for the rest of the slice).
    pub errors: u64,
    /// The first failure, for the report.
    pub first_error: Option<String>,
    /// Grants whose fence did not exceed the previous one on the same lock.
    pub fence_faults: u64,
    /// What the metered processes spent meanwhile (see [`compare`]).
    pub usage: Usage,
}

impl Outcome {
    /// Pairs per second.
    pub fn rate(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Whether what was measured is right: no errors, fences always grew.
    pub fn check(&self, what: &str) -> Result<(), String> {
        if self.errors > 0 {
            return Err(format!(
                "{what}: {} errors, first: {}",
                self.errors,
                self.first_error.as_deref().unwrap_or("?")
            ));
        }
        if self.fence_faults > 0 {
            return Err(format!(
                "{what}: {} fences did not increase",
                self.fence_faults
            ));
        }
        if self.pairs == 0 {
            return Err(format!("{what}: no pair completed"));
        }
        Ok(())
    }

    /// Microseconds per completed pair of `seconds` spent in all of them.
    pub fn per_pair_us(&self, seconds: f64) -> f64 {
        seconds * 1e6 / self.pairs.max(1) as f64
    }

    fn fail(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    fn absorb(&mut self, other: Outcome) {
        self.pairs += other.pairs;
        self.elapsed += other.elapsed;
        self.samples.extend(other.samples);
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.fence_faults += other.fence_faults;
    }
}

/// One caller per name in `locks`, all starting together, for `duration`.
pub async fn run(target: &Target, locks: &[String], duration: Duration) -> Outcome {
    let start = Arc::new(Barrier::new(locks.len() + 1));
    let mut callers = Vec::with_capacity(locks.len());
    for lock in locks {
        let (target, lock, start) = (target.clone(), lock.clone(), Arc::clone(&start));
        callers.push(tokio::spawn(async move {
            caller(target, lock, start, duration).await
        }));
    }
    start.wait().await;
    let began = Instant::now();
    let mut outcome = Outcome::default();
    for caller in callers {
        match caller.await {
            Ok(one) => outcome.absorb(one),
            Err(e) => outcome.fail(e.to_string()),
        }
    }
    outcome.elapsed = began.elapsed();
    outcome
}

/// Runs the workload on each of `targets` in turn, slice after slice, in
/// the order given, `duration` in total for each, so that noise on this
/// shared machine hits all of them alike. What `meter` reads over a slice is
/// charged to the target that ran in it. One outcome per target, in order.
pub async fn compare(
    targets: &[&Target],
    locks: &[String],
    duration: Duration,
    slices: u32,
    meter: &mut Meter,
) -> Vec<Outcome> {
    let slice = duration / slices.max(1);
    let mut results: Vec<Outcome> = targets.iter().map(|_| Outcome::default()).collect();
    for _ in 0..slices.max(1) {
        for (result, target) in results.iter_mut().zip(targets) {
            let before = meter.read().await;
            let outcome = run(target, locks, slice).await;
            match (before, meter.read().await) {
                (Ok(before), Ok(after)) => result.usage.add_span(&before, &after),
                (Err(error), _) | (_, Err(error)) => result.fail(format!("metering: {error}")),
            }
            result.absorb(outcome);
        }
    }
    results
}

/// [`compare`] of two targets, each named in `what` for the report; both
/// outcomes are checked (no errors, fences grew).
pub async fn compare_two(
    targets: [&Target; 2],
    what: [&str; 2],
    locks: &[String],
    settings: &crate::Settings,
    meter: &mut Meter,
) -> Result<[Outcome; 2], String> {
    let outcomes: [Outcome; 2] =
        compare(&targets, locks, settings.duration, settings.slices, meter)
            .await
            .try_into()
            .map_err(|_| "two targets, two outcomes")?;
    for (outcome, what) in outcomes.iter().zip(what) {
        outcome.check(what)?;
    }
    Ok(outcomes)
}

async fn caller(target: Target, lock: String, start: Arc<Barrier>, duration: Duration) -> Outcome {
    let mut outcome = Outcome::default();
    let mut client = match PairClient::connect(&target, &lock).await {
        Ok(client) => Some(client),
        Err(error) => {
            outcome.fail(error);
            None
        }
    };
    // One pair before the clock starts opens the connection.
    let mut last_fence = 0;
    if let Some(c) = &mut client {
        match pair(c).await {
            Ok(fence) => last_fence = fence,
            Err(error) => {
                outcome.fail(error);
                client = None;
            }
        }
    }
    start.wait().await;
    let Some(mut client) = client else {
        return outcome;
    };
    let deadline = Instant::now() + duration;
    outcome.samples.reserve(16_384);
    while Instant::now() < deadline {
        let began = Instant::now();
        match pair(&mut client).await {
            Ok(fence) => {
                outcome.samples.push(began.elapsed());
                outcome.pairs += 1;
                if fence <= last_fence {
                    outcome.fence_faults += 1;
                }
                last_fence = fence;
            }
            Err(error) => {
                outcome.fail(error);
                break;
            }
        }
    }
    if let Err(error) = client.close().await {
        outcome.fail(error);
    }
    outcome
}

/// One acquire + release; the lease's fence.
async fn pair(client: &mut PairClient) -> Result<u64, String> {
    let lease = client.acquire().await?;
    client.release(&lease).await?;
    Ok(lease.fence)
}
