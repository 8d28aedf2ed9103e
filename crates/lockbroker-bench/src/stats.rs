//! Percentiles over a sample of durations, and the output rows.

use std::time::Duration;

/// Nearest-rank percentiles of a sample, in milliseconds.
pub struct Summary {
    /// Sample size.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
}

impl Summary {
    /// Summarises `samples` (sorted in place).
    pub fn of(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            if samples.is_empty() {
                return f64::NAN;
            }
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1000.0
        };
        Self {
            count: samples.len(),
            p50_ms: at(0.50),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
        }
    }
}

/// Prints one figure as a table row and as a JSON line.
pub fn report(bench: &str, case: &str, summary: &Summary) {
    println!(
        "{bench:<10} {case:<28} n={:<5} p50={:>8.3} ms  p95={:>8.3} ms  p99={:>8.3} ms",
        summary.count, summary.p50_ms, summary.p95_ms, summary.p99_ms
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": bench,
            "case": case,
            "n": summary.count,
            "p50_ms": summary.p50_ms,
            "p95_ms": summary.p95_ms,
            "p99_ms": summary.p99_ms,
        })
    );
}
