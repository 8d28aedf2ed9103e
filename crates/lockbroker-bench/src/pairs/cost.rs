//! What a pair cost the servers, per target: Redis's CPU (from `INFO cpu`)
//! and its time inside commands (`INFO commandstats`), the broker's own CPU,
//! the thin broker's and etcd's, and the bench's own callers', each divided
//! by the pairs the target completed.

use serde_json::json;

use super::Runs;
use crate::meter::CommandUse;
use crate::stats::{Goal, Table};

/// Redis's CPU per pair through the broker over direct with the same scripts.
const REDIS_VS_DIRECT: f64 = 1.05;
/// Redis's CPU per pair through the broker over the minimal lock.
const REDIS_VS_MINIMAL: f64 = 1.3;
/// Redis's CPU per pair through the broker over the thin broker.
const REDIS_VS_THIN: f64 = 1.5;

/// The targets that drive Redis.
const ON_REDIS: [&str; 4] = ["broker", "direct", "minimal", "thin"];

/// The commands a target sends itself; `INFO commandstats` also counts each
/// command a script calls, inside the script's own time (and the brokers'
/// occasional housekeeping, such as `PING`, whichever target runs), so only
/// these add up to the time Redis spent on the target's requests.
fn top_level(label: &str) -> &'static [&'static str] {
    match label {
        "minimal" => &["set", "incr", "evalsha"],
        _ => &["fcall", "evalsha", "eval"],
    }
}

/// Prints the costs of `runs` and adds them to `table` under `what` (such as
/// `latency` or `throughput c=64`); `broker_goal` holds the broker's own CPU.
pub fn report(what: &str, runs: &Runs, broker_goal: Goal, table: &mut Table) {
    let redis_cpu = |label: &str| {
        runs.get(label)
            .map(|r| r.outcome.per_pair_us(r.outcome.usage.redis_cpu_s))
    };
    let own_cpu = |label: &str| {
        runs.get(label)
            .map(|r| r.outcome.per_pair_us(r.outcome.usage.cpu_of(label)))
    };
    let command_us = |label: &str| {
        runs.get(label).map(|r| {
            let commands = &r.outcome.usage.commands;
            let usec: u64 = top_level(label)
                .iter()
                .filter_map(|name| commands.get(*name))
                .map(|c| c.usec)
                .sum();
            r.outcome.per_pair_us(usec as f64 / 1e6)
        })
    };
    let show = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}x", a / b),
        _ => "-".to_owned(),
    };

    let (broker, direct, minimal, thin) = (
        redis_cpu("broker"),
        redis_cpu("direct"),
        redis_cpu("minimal"),
        redis_cpu("thin"),
    );
    println!(
        "{what}: Redis CPU per pair (µs): broker {}  direct {}  minimal {}  thin {}  \
         broker/direct {}  broker/minimal {}  broker/thin {}",
        show(broker),
        show(direct),
        show(minimal),
        show(thin),
        ratio(broker, direct),
        ratio(broker, minimal),
        ratio(broker, thin),
    );
    let (broker_own, thin_own) = (own_cpu("broker"), own_cpu("thin"));
    println!(
        "{what}: broker CPU per pair (µs): {}  thin {}",
        show(broker_own),
        show(thin_own)
    );
    // Every process a pair ran through, the bench's callers included: where
    // the cores are saturated (64 callers), pairs/s follows this total.
    let callers = |label: &str| {
        runs.get(label)
            .map(|r| r.outcome.per_pair_us(r.outcome.usage.cpu_of("bench")))
    };
    let path =
        |own: Option<f64>, redis: Option<f64>, label: &str| Some(own? + redis? + callers(label)?);
    let (broker_path, thin_path) = (
        path(broker_own, broker, "broker"),
        path(thin_own, thin, "thin"),
    );
    println!(
        "{what}: CPU per pair of every process (µs): broker, its Redis and the callers {} \
         (callers {})  thin, its Redis and the callers {} (callers {})  broker/thin {}",
        show(broker_path),
        show(callers("broker")),
        show(thin_path),
        show(callers("thin")),
        ratio(broker_path, thin_path),
    );
    let etcd_own = own_cpu("etcd");
    let broker_total = broker_own.zip(broker).map(|(a, b)| a + b);
    if etcd_own.is_some() {
        println!(
            "{what}: etcd CPU per pair (µs): {}; broker + its Redis: {}",
            show(etcd_own),
            show(broker_total)
        );
    }
    for label in ON_REDIS {
        let Some(run) = runs.get(label) else { continue };
        let pairs = run.outcome.pairs.max(1) as f64;
        let describe = |(name, c): (&String, &CommandUse)| {
            format!(
                "{name} {:.2}/pair {:.2} µs/call",
                c.calls as f64 / pairs,
                c.usec as f64 / c.calls.max(1) as f64
            )
        };
        let (sent, inner): (Vec<_>, Vec<_>) = run
            .outcome
            .usage
            .commands
            .iter()
            .partition(|(name, _)| top_level(label).contains(&name.as_str()));
        let sent: Vec<String> = sent.into_iter().map(describe).collect();
        let inner: Vec<String> = inner.into_iter().map(describe).collect();
        println!(
            "{what}: Redis commands of {label}: {} µs per pair in {}; also counted: {}",
            show(command_us(label)),
            sent.join(", "),
            inner.join(", ")
        );
    }
    let commands: serde_json::Map<String, serde_json::Value> = ON_REDIS
        .iter()
        .filter_map(|&label| {
            let run = runs.get(label)?;
            let stats: serde_json::Map<String, serde_json::Value> = run
                .outcome
                .usage
                .commands
                .iter()
                .map(|(name, c)| {
                    let per_call = c.usec as f64 / c.calls.max(1) as f64;
                    let per_pair = c.calls as f64 / run.outcome.pairs.max(1) as f64;
                    (
                        name.clone(),
                        json!({"calls_per_pair": per_pair, "usec_per_call": per_call}),
                    )
                })
                .collect();
            Some((label.to_owned(), stats.into()))
        })
        .collect();
    println!(
        "{}",
        json!({"bench": what, "case": "cost per pair",
               "redis_cpu_us": {"broker": broker, "direct": direct, "minimal": minimal,
                                "thin": thin},
               "redis_command_us": {"broker": command_us("broker"), "direct": command_us("direct"),
                                    "minimal": command_us("minimal"), "thin": command_us("thin")},
               "broker_cpu_us": broker_own, "thin_cpu_us": thin_own, "etcd_cpu_us": etcd_own,
               "commands": commands})
    );

    let nan = f64::NAN;
    table.add(
        format!("{what} Redis CPU per pair"),
        "µs",
        (broker.unwrap_or(nan), direct),
        Goal::RatioAtMost(REDIS_VS_DIRECT),
    );
    table.add(
        format!("{what} Redis CPU per pair (vs minimal)"),
        "µs",
        (broker.unwrap_or(nan), minimal),
        Goal::RatioAtMost(REDIS_VS_MINIMAL),
    );
    if thin.is_some() {
        table.add(
            format!("{what} Redis CPU per pair (vs thin)"),
            "µs",
            (broker.unwrap_or(nan), thin),
            Goal::RatioAtMost(REDIS_VS_THIN),
        );
        table.add(
            format!("{what} thin Redis CPU per pair (vs minimal)"),
            "µs",
            (thin.unwrap_or(nan), minimal),
            Goal::None,
        );
    }
    table.add(
        format!("{what} direct Redis CPU per pair (vs minimal)"),
        "µs",
        (direct.unwrap_or(nan), minimal),
        Goal::None,
    );
    table.add(
        format!("{what} Redis time in its commands per pair"),
        "µs",
        (command_us("broker").unwrap_or(nan), command_us("direct")),
        Goal::None,
    );
    table.add(
        format!("{what} broker CPU per pair"),
        "µs",
        (broker_own.unwrap_or(nan), None),
        broker_goal,
    );
    if thin_own.is_some() {
        table.add(
            format!("{what} broker CPU per pair (vs thin)"),
            "µs",
            (broker_own.unwrap_or(nan), thin_own),
            Goal::None,
        );
        table.add(
            format!("{what} CPU per pair of every process (vs thin)"),
            "µs",
            (broker_path.unwrap_or(nan), thin_path),
            Goal::None,
        );
    }
    if etcd_own.is_some() {
        table.add(
            format!("{what} broker+Redis CPU per pair (vs etcd)"),
            "µs",
            (broker_total.unwrap_or(nan), etcd_own),
            Goal::None,
        );
    }
}
