//! Percentiles over a sample of durations, the output rows, and the closing
//! table of figures held to their targets.

use std::path::Path;
use std::time::Duration;

/// Nearest-rank percentiles of a sample, in milliseconds.
pub struct Summary {
    /// Sample size.
    pub count: usize,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
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
            p90_ms: at(0.90),
            p95_ms: at(0.95),
            p99_ms: at(0.99),
        }
    }
}

/// Prints one figure as a table row and as a JSON line.
pub fn report(bench: &str, case: &str, summary: &Summary) {
    println!(
        "{bench:<10} {case:<28} n={:<7} p50={:>8.3} ms  p90={:>8.3} ms  p99={:>8.3} ms",
        summary.count, summary.p50_ms, summary.p90_ms, summary.p99_ms
    );
    println!(
        "{}",
        serde_json::json!({
            "bench": bench,
            "case": case,
            "n": summary.count,
            "p50_ms": summary.p50_ms,
            "p90_ms": summary.p90_ms,
            "p95_ms": summary.p95_ms,
            "p99_ms": summary.p99_ms,
        })
    );
}

/// What a figure is held to.
#[derive(Clone, Copy)]
pub enum Goal {
    /// Shown for context only.
    None,
    /// figure / baseline must not exceed this.
    RatioAtMost(f64),
    /// figure / baseline must reach this.
    RatioAtLeast(f64),
    /// The broker's figure must stay below this.
    Below(f64),
    /// The broker's figure must not exceed this.
    AtMost(f64),
}

/// One line of the closing table.
struct Figure {
    name: String,
    unit: &'static str,
    broker: f64,
    /// What it is compared with: direct Redis unless the name says.
    baseline: Option<f64>,
    goal: Goal,
}

impl Figure {
    fn ratio(&self) -> Option<f64> {
        self.baseline.map(|baseline| self.broker / baseline)
    }

    /// `None` when the figure has no target.
    fn met(&self) -> Option<bool> {
        match (self.goal, self.ratio()) {
            (Goal::None, _) => None,
            (Goal::RatioAtMost(limit), Some(ratio)) => Some(ratio <= limit),
            (Goal::RatioAtLeast(limit), Some(ratio)) => Some(ratio >= limit),
            (Goal::Below(limit), _) => Some(self.broker < limit),
            (Goal::AtMost(limit), _) => Some(self.broker <= limit),
            (_, None) => Some(false),
        }
    }

    fn goal_text(&self) -> String {
        match self.goal {
            Goal::None => String::new(),
            Goal::RatioAtMost(limit) => format!("ratio <= {limit}x"),
            Goal::RatioAtLeast(limit) => format!("ratio >= {:.0}%", limit * 100.0),
            Goal::Below(limit) => format!("< {limit} {}", self.unit),
            Goal::AtMost(limit) => format!("<= {limit} {}", self.unit),
        }
    }

    /// The figure as one entry of the `--json` document.
    fn entry(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "unit": self.unit,
            "value": self.broker,
            "baseline": self.baseline,
            "ratio": self.ratio(),
            "goal": self.goal_text(),
            "met": self.met(),
            "better": if self.unit.ends_with("/s") { "higher" } else { "lower" },
        })
    }
}

/// The figures of a run, printed together at the end.
#[derive(Default)]
pub struct Table {
    figures: Vec<Figure>,
}

impl Table {
    /// Adds a figure and prints it as a JSON line.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        unit: &'static str,
        (broker, baseline): (f64, Option<f64>),
        goal: Goal,
    ) {
        let figure = Figure {
            name: name.into(),
            unit,
            broker,
            baseline,
            goal,
        };
        println!(
            "{}",
            serde_json::json!({
                "bench": "summary",
                "figure": figure.name,
                "unit": unit,
                "broker": broker,
                "direct": baseline,
                "ratio": figure.ratio(),
                "target": figure.goal_text(),
                "met": figure.met(),
            })
        );
        self.figures.push(figure);
    }

    /// Writes every figure to `path` as one JSON document (see
    /// [`crate::compare`] for its shape), with `about` describing the run.
    pub fn write_json(&self, path: &Path, about: serde_json::Value) -> Result<(), String> {
        let document = serde_json::json!({
            "lockbroker_bench": 1,
            "about": about,
            "figures": self.figures.iter().map(Figure::entry).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&document).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Prints the human table: each figure of the broker (or the target the
    /// name says), the baseline it is compared with where the name says
    /// "(vs ...)" or else direct Redis, their ratio, and its goal.
    pub fn print(&self) {
        println!();
        println!(
            "{:<56} {:>12} {:>12} {:>8}  {:<16} result",
            "figure", "value", "baseline", "ratio", "target"
        );
        for figure in &self.figures {
            let baseline = figure
                .baseline
                .map_or_else(|| "-".to_owned(), |d| format!("{d:.3}"));
            let ratio = figure
                .ratio()
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"));
            let result = match figure.met() {
                None => "",
                Some(true) => "met",
                Some(false) => "MISSED",
            };
            println!(
                "{:<56} {:>12.3} {:>12} {:>8}  {:<16} {}",
                format!("{} ({})", figure.name, figure.unit),
                figure.broker,
                baseline,
                ratio,
                figure.goal_text(),
                result
            );
        }
    }
}
