//! The one workload behind `latency`, `throughput` and the memory load: each
//! caller loops acquire + release on a lock of its own until a deadline,
//! timing every pair and checking every fence.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use crate::client::{PairClient, Target};
use crate::procs;

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
    /// CPU seconds used meanwhile by the processes given to [`compare`], in order.
    pub cpu_s: Vec<f64>,
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
            Err(e) => {
                outcome.errors += 1;
                outcome.first_error.get_or_insert(e.to_string());
            }
        }
    }
    outcome.elapsed = began.elapsed();
    outcome
}

/// Runs the workload on `broker` and on `direct` in alternating slices (direct
/// first), `duration` in total for each, so that noise on this shared machine
/// hits both alike. CPU time of `pids` is charged to the target running.
pub async fn compare(
    (broker, direct): (&Target, &Target),
    locks: &[String],
    duration: Duration,
    slices: u32,
    pids: &[u32],
) -> (Outcome, Outcome) {
    let slice = duration / slices.max(1);
    let mut results = [Outcome::default(), Outcome::default()];
    for result in &mut results {
        result.cpu_s = vec![0.0; pids.len()];
    }
    for _ in 0..slices.max(1) {
        for (result, target) in results.iter_mut().zip([direct, broker]) {
            let before: Vec<f64> = pids.iter().map(|&p| procs::cpu_seconds(p)).collect();
            let outcome = run(target, locks, slice).await;
            for (i, &pid) in pids.iter().enumerate() {
                result.cpu_s[i] += procs::cpu_seconds(pid) - before[i];
            }
            result.absorb(outcome);
        }
    }
    let [direct, broker] = results;
    (broker, direct)
}

async fn caller(target: Target, lock: String, start: Arc<Barrier>, duration: Duration) -> Outcome {
    let mut outcome = Outcome::default();
    let fail = |outcome: &mut Outcome, error: String| {
        outcome.errors += 1;
        outcome.first_error.get_or_insert(error);
    };
    let mut client = match PairClient::connect(&target, &lock).await {
        Ok(client) => Some(client),
        Err(error) => {
            fail(&mut outcome, error);
            None
        }
    };
    // One pair before the clock starts opens the connection.
    let mut last_fence = 0;
    if let Some(c) = &mut client {
        match pair(c).await {
            Ok(fence) => last_fence = fence,
            Err(error) => {
                fail(&mut outcome, error);
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
                fail(&mut outcome, error);
                break;
            }
        }
    }
    outcome
}

/// One acquire + release; the lease's fence.
async fn pair(client: &mut PairClient) -> Result<u64, String> {
    let lease = client.acquire().await?;
    client.release(&lease).await?;
    Ok(lease.fence)
}
