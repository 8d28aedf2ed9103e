//! `latency` and `throughput`: acquire + release pairs on the broker and on
//! Redis directly with the broker's scripts, side by side in one run.

use serde_json::json;

use crate::client::Target;
use crate::load::{self, Outcome};
use crate::procs::Proc;
use crate::stats::{report, Goal, Summary, Table};
use crate::Settings;

/// The concurrency levels of `throughput`.
const CALLERS: [usize; 3] = [1, 16, 64];

/// One caller, sequential pairs on one lock.
pub async fn latency(
    redis: &Proc,
    broker: &Proc,
    settings: &Settings,
    table: &mut Table,
) -> Result<(), String> {
    let (broker_target, direct) = targets(redis, broker).await?;
    println!(
        "latency: 1 caller, {:?} per target in {} alternating slices",
        settings.duration, settings.slices
    );
    let locks = ["bench-latency".to_owned()];
    let (mut on_broker, mut on_direct) = load::compare(
        (&broker_target, &direct),
        &locks,
        settings.duration,
        settings.slices,
        &[broker.pid(), redis.pid()],
    )
    .await;
    on_broker.check("latency on the broker")?;
    on_direct.check("latency on direct Redis")?;
    let b = Summary::of(&mut on_broker.samples);
    let d = Summary::of(&mut on_direct.samples);
    report("latency", "broker pair", &b);
    report("latency", "direct pair", &d);
    cpu_report("latency", "c=1", &on_broker, &on_direct);
    table.add(
        "latency pair p50",
        "ms",
        (b.p50_ms, Some(d.p50_ms)),
        Goal::RatioAtMost(2.0),
    );
    table.add(
        "latency pair p90",
        "ms",
        (b.p90_ms, Some(d.p90_ms)),
        Goal::None,
    );
    table.add(
        "latency pair p99",
        "ms",
        (b.p99_ms, Some(d.p99_ms)),
        Goal::None,
    );
    Ok(())
}

/// C callers at once, each on its own lock, for C in 1, 16 and 64.
pub async fn throughput(
    redis: &Proc,
    broker: &Proc,
    settings: &Settings,
    table: &mut Table,
) -> Result<(), String> {
    let (broker_target, direct) = targets(redis, broker).await?;
    println!(
        "throughput: {:?} per target and level in {} alternating slices",
        settings.duration, settings.slices
    );
    for callers in CALLERS {
        let locks: Vec<String> = (0..callers)
            .map(|i| format!("bench-throughput-{callers}-{i}"))
            .collect();
        let (mut on_broker, mut on_direct) = load::compare(
            (&broker_target, &direct),
            &locks,
            settings.duration,
            settings.slices,
            &[broker.pid(), redis.pid()],
        )
        .await;
        on_broker.check(&format!("throughput c={callers} on the broker"))?;
        on_direct.check(&format!("throughput c={callers} on direct Redis"))?;
        let (b_rate, d_rate) = (on_broker.rate(), on_direct.rate());
        let b = Summary::of(&mut on_broker.samples);
        let d = Summary::of(&mut on_direct.samples);
        let case = format!("c={callers}");
        report("throughput", &format!("{case} broker pair"), &b);
        report("throughput", &format!("{case} direct pair"), &d);
        println!(
            "throughput {case:<5} broker {b_rate:>8.0} pairs/s  direct {d_rate:>8.0} pairs/s  broker/direct {:>5.1}%",
            100.0 * b_rate / d_rate
        );
        println!(
            "{}",
            json!({"bench": "throughput", "case": case, "broker_pairs_per_s": b_rate,
                   "direct_pairs_per_s": d_rate, "ratio": b_rate / d_rate})
        );
        cpu_report("throughput", &case, &on_broker, &on_direct);
        let goal = if callers == 64 {
            Goal::RatioAtLeast(0.5)
        } else {
            Goal::None
        };
        table.add(
            format!("throughput {case}"),
            "pairs/s",
            (b_rate, Some(d_rate)),
            goal,
        );
        table.add(
            format!("throughput {case} p50"),
            "ms",
            (b.p50_ms, Some(d.p50_ms)),
            Goal::None,
        );
        table.add(
            format!("throughput {case} p99"),
            "ms",
            (b.p99_ms, Some(d.p99_ms)),
            Goal::None,
        );
    }
    Ok(())
}

async fn targets(redis: &Proc, broker: &Proc) -> Result<(Target, Target), String> {
    Ok((
        Target::Broker { port: broker.port },
        Target::direct(redis.port).await?,
    ))
}

/// CPU time per pair of the broker and of Redis, while each target ran: the
/// figure least disturbed by other work on a shared machine.
fn cpu_report(bench: &str, case: &str, on_broker: &Outcome, on_direct: &Outcome) {
    let per_pair = |outcome: &Outcome, i: usize| {
        outcome.cpu_s.get(i).copied().unwrap_or(0.0) * 1e6 / outcome.pairs.max(1) as f64
    };
    let broker_cpu = per_pair(on_broker, 0);
    let redis_cpu_broker = per_pair(on_broker, 1);
    let redis_cpu_direct = per_pair(on_direct, 1);
    println!(
        "{bench:<10} {case:<5} CPU per pair: broker {broker_cpu:.1} us + redis {redis_cpu_broker:.1} us; direct: redis {redis_cpu_direct:.1} us"
    );
    println!(
        "{}",
        json!({"bench": bench, "case": format!("{case} cpu"),
               "broker_cpu_us_per_pair": broker_cpu,
               "redis_cpu_us_per_pair_broker": redis_cpu_broker,
               "redis_cpu_us_per_pair_direct": redis_cpu_direct})
    );
}
