//! `cluster`: two brokers in cluster mode over a Redis Cluster of three
//! primaries, beside two brokers in single mode over one Redis, in one run
//! (alternating slices): pairs/s at 64 callers, and what each pair cost each
//! process, every primary on its own. docs/scaling.md builds its model for
//! N primaries and M brokers on these per-process costs.

use std::sync::Arc;

use crate::client::{wait_ready, Target};
use crate::load;
use crate::meter::Meter;
use crate::procs::{self, Proc};
use crate::stats::{Goal, Table};
use crate::Settings;

/// The primaries of the cluster case, as the meter names them.
const PRIMARIES: [&str; 3] = ["primary 1", "primary 2", "primary 3"];

/// Runs the cluster case against `single`, two single-mode brokers on
/// `redis`.
pub async fn run(
    redis: &Proc,
    single: [&Proc; 2],
    settings: &Settings,
    table: &mut Table,
) -> Result<(), String> {
    let nodes = PRIMARIES
        .iter()
        .map(|_| procs::redis_with(&lockbroker_lab::stack::cluster::NODE_ARGS))
        .collect::<Result<Vec<Proc>, String>>()?;
    let ports: Vec<u16> = nodes.iter().map(|node| node.port).collect();
    tokio::task::spawn_blocking(move || lockbroker_lab::stack::cluster::create(&ports, 0))
        .await
        .map_err(|e| e.to_string())??;
    let seeds = nodes
        .iter()
        .map(|node| format!("redis://127.0.0.1:{}", node.port))
        .collect::<Vec<_>>()
        .join(",");
    let env = [
        ("LOCKBROKER_REDIS_MODE", "cluster"),
        ("LOCKBROKER_REDIS_NODES", seeds.as_str()),
    ];
    let brokers = [
        procs::broker_with(&nodes[0], &env)?,
        procs::broker_with(&nodes[0], &env)?,
    ];
    for broker in &brokers {
        wait_ready(&format!("http://127.0.0.1:{}", broker.port)).await?;
    }
    let clustered = Target::Brokers {
        ports: brokers.iter().map(|b| b.port).collect::<Arc<[u16]>>(),
    };
    let one_redis = Target::Brokers {
        ports: single.iter().map(|b| b.port).collect::<Arc<[u16]>>(),
    };
    let mut processes = vec![
        ("single broker a", single[0].pid()),
        ("single broker b", single[1].pid()),
        ("single redis", redis.pid()),
        ("cluster broker a", brokers[0].pid()),
        ("cluster broker b", brokers[1].pid()),
    ];
    processes.extend(
        PRIMARIES
            .iter()
            .zip(&nodes)
            .map(|(name, node)| (*name, node.pid())),
    );
    let mut meter = Meter::new(processes, None).await?;

    let locks: Vec<String> = (0..64).map(|i| format!("bench-cluster-c64-{i}")).collect();
    let [on_single, on_cluster] = load::compare_two(
        [&one_redis, &clustered],
        ["throughput on single mode", "throughput on cluster mode"],
        &locks,
        settings,
        &mut meter,
    )
    .await?;

    let per_pair = |outcome: &load::Outcome, names: &[&str]| {
        let seconds: f64 = names.iter().map(|n| outcome.usage.cpu_of(n)).sum();
        outcome.per_pair_us(seconds)
    };
    let (single_brokers, cluster_brokers) = (
        per_pair(&on_single, &["single broker a", "single broker b"]),
        per_pair(&on_cluster, &["cluster broker a", "cluster broker b"]),
    );
    let (single_redis, cluster_redis) = (
        per_pair(&on_single, &["single redis"]),
        per_pair(&on_cluster, &PRIMARIES),
    );
    println!(
        "cluster: {:.0} pairs/s over 3 primaries and 2 brokers, {:.0} pairs/s over one Redis \
         and 2 brokers; per pair: brokers {cluster_brokers:.0} / {single_brokers:.0} µs, \
         Redis {cluster_redis:.0} / {single_redis:.0} µs",
        on_cluster.rate(),
        on_single.rate()
    );
    table.add(
        "cluster pairs/s at 64 callers, 3 primaries (vs single)",
        "/s",
        (on_cluster.rate(), Some(on_single.rate())),
        Goal::None,
    );
    table.add(
        "cluster broker CPU per pair (vs single)",
        "µs",
        (cluster_brokers, Some(single_brokers)),
        Goal::RatioAtMost(1.3),
    );
    // No goal: three primaries each at a third of the load take fewer
    // commands per wake-up than one Redis at all of it (docs/scaling.md).
    table.add(
        "cluster Redis CPU per pair, all primaries (vs single)",
        "µs",
        (cluster_redis, Some(single_redis)),
        Goal::None,
    );
    for primary in PRIMARIES {
        table.add(
            format!("cluster Redis CPU per pair, {primary}"),
            "µs",
            (per_pair(&on_cluster, &[primary]), None),
            Goal::None,
        );
    }
    Ok(())
}
