//! `latency` and `throughput`: acquire + release pairs on the broker, on
//! Redis driven directly with the broker's scripts (`direct`), on the
//! smallest correct Redis lock (`minimal`), on the thinnest correct HTTP
//! broker (`thin`) and, when installed, on etcd, side by side in one run;
//! and what each pair cost Redis and the broker.

mod cost;

use std::time::Duration;

use crate::client::Target;
use crate::load::{self, Outcome};
use crate::meter::{Meter, Usage};
use crate::procs::Proc;
use crate::stats::{report, Goal, Summary, Table};
use crate::Settings;

/// One percentile of a summary.
type Pick = fn(&Summary) -> f64;

/// The concurrency levels of `throughput`.
const CALLERS: [usize; 3] = [1, 16, 64];

/// Pair latency p50 the broker is held to, over the thin broker's.
const P50_VS_THIN: f64 = 1.25;
/// Pairs per second at 64 callers the broker is held to, over the thin
/// broker's.
const RATE_VS_THIN: f64 = 0.75;

/// The broker's own CPU per pair it is held to, by callers.
fn broker_cpu_goal(callers: usize) -> Goal {
    match callers {
        1 => Goal::AtMost(120.0),
        64 => Goal::AtMost(40.0),
        _ => Goal::None,
    }
}

/// The processes a pair comparison runs against.
pub struct Servers<'a> {
    /// The Redis behind the broker, also driven directly.
    pub redis: &'a Proc,
    /// The broker.
    pub broker: &'a Proc,
    /// The thin broker on the same Redis.
    pub thin: Option<&'a Proc>,
    /// An etcd, when one is installed.
    pub etcd: Option<&'a Proc>,
}

/// What one target did in one case, checked and summarised.
pub struct Run {
    /// `broker`, `direct`, `minimal`, `thin` or `etcd`.
    pub label: &'static str,
    /// Pairs, errors, samples and costs.
    pub outcome: Outcome,
    /// Percentiles of its pairs.
    pub summary: Summary,
}

/// The runs of one case, by label.
pub struct Runs(Vec<Run>);

impl Runs {
    /// The run of `label`, if that target took part.
    pub fn get(&self, label: &str) -> Option<&Run> {
        self.0.iter().find(|run| run.label == label)
    }

    fn all(&self) -> &[Run] {
        &self.0
    }
}

/// One caller, sequential pairs on one lock.
pub async fn latency(
    servers: &Servers<'_>,
    settings: &Settings,
    table: &mut Table,
) -> Result<(), String> {
    let (targets, mut meter) = prepare(servers).await?;
    println!(
        "latency: 1 caller, {:?} per target in {} alternating slices ({})",
        settings.duration,
        settings.slices,
        labels(&targets)
    );
    idle(&mut meter, "latency").await?;
    let locks = ["bench-latency".to_owned()];
    let runs = measure(&targets, &locks, settings, &mut meter, "latency").await?;
    for run in runs.all() {
        report("latency", &format!("{} pair", run.label), &run.summary);
    }
    let p = |label: &str, pick: Pick| runs.get(label).map(|r| pick(&r.summary));
    let broker = |pick: Pick| p("broker", pick).unwrap_or(f64::NAN);
    let rows: [(&str, Pick, Goal); 3] = [
        ("p50", |s| s.p50_ms, Goal::RatioAtMost(1.5)),
        ("p90", |s| s.p90_ms, Goal::None),
        ("p99", |s| s.p99_ms, Goal::None),
    ];
    for (name, pick, goal) in rows {
        table.add(
            format!("latency pair {name}"),
            "ms",
            (broker(pick), p("direct", pick)),
            goal,
        );
    }
    let peers = [
        ("thin", Goal::RatioAtMost(P50_VS_THIN)),
        ("minimal", Goal::None),
        ("etcd", Goal::None),
    ];
    for (peer, goal) in peers {
        if let Some(value) = p(peer, |s| s.p50_ms) {
            table.add(
                format!("latency pair p50 (vs {peer})"),
                "ms",
                (broker(|s| s.p50_ms), Some(value)),
                goal,
            );
        }
    }
    cost::report("latency", &runs, broker_cpu_goal(1), table);
    Ok(())
}

/// C callers at once, each on its own lock, for C in 1, 16 and 64.
pub async fn throughput(
    servers: &Servers<'_>,
    settings: &Settings,
    table: &mut Table,
) -> Result<(), String> {
    let (targets, mut meter) = prepare(servers).await?;
    println!(
        "throughput: {:?} per target and level in {} alternating slices ({})",
        settings.duration,
        settings.slices,
        labels(&targets)
    );
    idle(&mut meter, "throughput").await?;
    for callers in CALLERS {
        let locks: Vec<String> = (0..callers)
            .map(|i| format!("bench-throughput-{callers}-{i}"))
            .collect();
        let case = format!("c={callers}");
        let what = format!("throughput {case}");
        let runs = measure(&targets, &locks, settings, &mut meter, &what).await?;
        let rate = |label: &str| runs.get(label).map(|r| r.outcome.rate());
        let broker_rate = rate("broker").unwrap_or(f64::NAN);
        let mut line = format!("throughput {case:<5}");
        for run in runs.all() {
            report(
                "throughput",
                &format!("{case} {} pair", run.label),
                &run.summary,
            );
            line += &format!("  {} {:>8.0} pairs/s", run.label, run.outcome.rate());
        }
        println!("{line}");
        let rates: serde_json::Map<String, serde_json::Value> = runs
            .all()
            .iter()
            .map(|run| {
                (
                    format!("{}_pairs_per_s", run.label),
                    run.outcome.rate().into(),
                )
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"bench": "throughput", "case": case, "rates": rates})
        );
        let goal = if callers == 64 {
            Goal::RatioAtLeast(0.7)
        } else {
            Goal::None
        };
        table.add(what.clone(), "pairs/s", (broker_rate, rate("direct")), goal);
        let thin_goal = if callers == 64 {
            Goal::RatioAtLeast(RATE_VS_THIN)
        } else {
            Goal::None
        };
        for (peer, goal) in [
            ("thin", thin_goal),
            ("minimal", Goal::None),
            ("etcd", Goal::None),
        ] {
            if let Some(value) = rate(peer) {
                table.add(
                    format!("{what} (vs {peer})"),
                    "pairs/s",
                    (broker_rate, Some(value)),
                    goal,
                );
            }
        }
        let p = |label: &str, pick: Pick| runs.get(label).map(|r| pick(&r.summary));
        for (name, pick) in [("p50", (|s| s.p50_ms) as Pick), ("p99", |s| s.p99_ms)] {
            table.add(
                format!("{what} {name}"),
                "ms",
                (p("broker", pick).unwrap_or(f64::NAN), p("direct", pick)),
                Goal::None,
            );
        }
        cost::report(&what, &runs, broker_cpu_goal(callers), table);
    }
    Ok(())
}

/// The targets in the order each slice visits them (the baselines first, as
/// before), and a meter of the broker, the thin broker, etcd, Redis and the
/// bench itself (its callers).
async fn prepare(servers: &Servers<'_>) -> Result<(Vec<(&'static str, Target)>, Meter), String> {
    let redis = servers.redis.port;
    let mut targets = vec![
        ("direct", Target::direct(redis).await?),
        ("minimal", Target::minimal(redis).await?),
    ];
    let mut pids = vec![
        ("broker", servers.broker.pid()),
        ("bench", std::process::id()),
    ];
    if let Some(thin) = servers.thin {
        targets.push(("thin", Target::Broker { port: thin.port }));
        pids.push(("thin", thin.pid()));
    }
    if let Some(etcd) = servers.etcd {
        targets.push(("etcd", Target::Etcd { port: etcd.port }));
        pids.push(("etcd", etcd.pid()));
    }
    targets.push((
        "broker",
        Target::Broker {
            port: servers.broker.port,
        },
    ));
    let meter = Meter::new(pids, Some(redis)).await?;
    Ok((targets, meter))
}

/// Prints what Redis and the broker spend per second with no target running:
/// a part of every cost per pair that the pairs did not cause, larger per
/// pair for a target that completes fewer pairs.
async fn idle(meter: &mut Meter, what: &str) -> Result<(), String> {
    let before = meter.read().await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut span = Usage::default();
    span.add_span(&before, &meter.read().await?);
    let (redis, broker) = (span.redis_cpu_s * 1e6, span.cpu_of("broker") * 1e6);
    let thin = span.cpu_of("thin") * 1e6;
    println!("{what}: CPU while idle (µs/s): Redis {redis:.0}, broker {broker:.0}, thin {thin:.0}");
    println!(
        "{}",
        serde_json::json!({"bench": what, "case": "idle",
                           "redis_cpu_us_per_s": redis, "broker_cpu_us_per_s": broker,
                           "thin_cpu_us_per_s": thin})
    );
    Ok(())
}

fn labels(targets: &[(&'static str, Target)]) -> String {
    targets
        .iter()
        .map(|(label, _)| *label)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the workload on every target in alternating slices and checks each.
async fn measure(
    targets: &[(&'static str, Target)],
    locks: &[String],
    settings: &Settings,
    meter: &mut Meter,
    what: &str,
) -> Result<Runs, String> {
    let list: Vec<&Target> = targets.iter().map(|(_, target)| target).collect();
    let outcomes = load::compare(&list, locks, settings.duration, settings.slices, meter).await;
    let mut runs = Vec::with_capacity(targets.len());
    for (&(label, _), mut outcome) in targets.iter().zip(outcomes) {
        outcome.check(&format!("{what} on {label}"))?;
        let summary = Summary::of(&mut outcome.samples);
        runs.push(Run {
            label,
            outcome,
            summary,
        });
    }
    Ok(Runs(runs))
}
