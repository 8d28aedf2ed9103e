//! `quorum`: the broker in quorum mode over 3 and over 5 local Redis nodes,
//! beside single mode, in one run: pair latency at one caller, pairs/s at 64
//! callers (quorum / single, in alternating slices), and handoff between
//! waiters on one quorum broker, with what each pair cost every process in
//! CPU: the broker, its nodes (or single mode's Redis) and the bench's own
//! callers. Then five nodes with one stalled (SIGSTOP: its connections open,
//! nothing answered) beside five all up.

use crate::client::{broker_client, wait_ready, Target};
use crate::handoff::{measure, Waiting};
use crate::load::{self, Outcome};
use crate::meter::Meter;
use crate::procs::{self, Proc};
use crate::stats::{report, Goal, Summary, Table};
use crate::Settings;

/// The quorum's nodes, as the meter names them.
const NODES: [&str; 5] = ["node 1", "node 2", "node 3", "node 4", "node 5"];

/// Runs every quorum case against `single`, a single-mode broker on `redis`.
pub async fn run(
    single: &Proc,
    redis: &Proc,
    settings: &Settings,
    table: &mut Table,
) -> Result<(), String> {
    for nodes in [3, 5] {
        let (servers, broker) = start_quorum(nodes).await?;
        let url = format!("http://127.0.0.1:{}", broker.port);
        let case = format!("quorum-{nodes}");
        let (quorum, single_target) = (
            Target::Broker { port: broker.port },
            Target::Broker { port: single.port },
        );
        let mut processes = vec![
            ("quorum broker", broker.pid()),
            ("single broker", single.pid()),
            ("single redis", redis.pid()),
            ("bench", std::process::id()),
        ];
        processes.extend(NODES.iter().zip(&servers).map(|(n, s)| (*n, s.pid())));
        let mut meter = Meter::new(processes, None).await?;

        let locks = [format!("bench-{case}-latency")];
        let [mut on_single, mut on_quorum] = load::compare_two(
            [&single_target, &quorum],
            ["latency on single mode", &format!("latency on {case}")],
            &locks,
            settings,
            &mut meter,
        )
        .await?;
        let q = Summary::of(&mut on_quorum.samples);
        let s = Summary::of(&mut on_single.samples);
        report("quorum", &format!("{case} pair"), &q);
        report("quorum", "single pair", &s);
        table.add(
            format!("{case} latency pair p50 (vs single)"),
            "ms",
            (q.p50_ms, Some(s.p50_ms)),
            Goal::RatioAtMost(1.5),
        );
        let costs = [
            Costs::of(&on_quorum, Some(nodes)),
            Costs::of(&on_single, None),
        ];
        costs[0].report(&case, "one caller", &costs[1], Some((q.p50_ms, s.p50_ms)));
        table.add(
            format!("{case} CPU per pair of every process, one caller (vs single)"),
            "µs",
            (costs[0].total(), Some(costs[1].total())),
            Goal::None,
        );

        let locks: Vec<String> = (0..64).map(|i| format!("bench-{case}-c64-{i}")).collect();
        let [on_single, on_quorum] = load::compare_two(
            [&single_target, &quorum],
            [
                "throughput on single mode",
                &format!("throughput on {case}"),
            ],
            &locks,
            settings,
            &mut meter,
        )
        .await?;
        table.add(
            format!("{case} pairs/s at 64 callers (vs single)"),
            "/s",
            (on_quorum.rate(), Some(on_single.rate())),
            Goal::RatioAtLeast(0.5),
        );
        let costs = [
            Costs::of(&on_quorum, Some(nodes)),
            Costs::of(&on_single, None),
        ];
        costs[0].report(&case, "64 callers", &costs[1], None);

        let client = broker_client(&url)?;
        let mut handoffs =
            measure(&case, (&client, &client), settings.rounds, Waiting::Server).await?;
        let handoff = Summary::of(&mut handoffs);
        report("quorum", &format!("{case} handoff"), &handoff);
        table.add(
            format!("{case} handoff p99"),
            "ms",
            (handoff.p99_ms, None),
            Goal::Below(5.0),
        );
    }
    stalled(settings, table).await
}

/// What a pair cost each kind of process, in CPU µs: the broker, its Redis
/// (every node of a quorum, summed), and the bench's own callers.
struct Costs {
    broker: f64,
    redis: f64,
    bench: f64,
}

impl Costs {
    /// The costs of the quorum broker over `nodes` nodes in `outcome`, or
    /// with `None` of the single-mode broker and its Redis.
    fn of(outcome: &Outcome, nodes: Option<usize>) -> Self {
        let usage = &outcome.usage;
        let (broker, redis) = match nodes {
            Some(nodes) => (
                usage.cpu_of("quorum broker"),
                NODES[..nodes].iter().map(|n| usage.cpu_of(n)).sum(),
            ),
            None => (usage.cpu_of("single broker"), usage.cpu_of("single redis")),
        };
        Self {
            broker: outcome.per_pair_us(broker),
            redis: outcome.per_pair_us(redis),
            bench: outcome.per_pair_us(usage.cpu_of("bench")),
        }
    }

    fn total(&self) -> f64 {
        self.broker + self.redis + self.bench
    }

    /// Prints these costs beside single mode's; with the p50 of a pair
    /// (ms, this case's and single mode's), also the least time a pair could
    /// take if every process's CPU were spread evenly over this machine's
    /// cores, against both.
    fn report(&self, case: &str, load: &str, single: &Costs, p50_ms: Option<(f64, f64)>) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let floor_ms = self.total() / cores as f64 / 1e3;
        let floor = match p50_ms {
            Some((p50, single_p50)) => format!(
                "; spread over {cores} cores at least {floor_ms:.3} ms a pair: {:.0}% of its \
                 p50, {:.2}x single mode's p50",
                floor_ms / p50 * 100.0,
                floor_ms / single_p50
            ),
            None => String::new(),
        };
        println!(
            "quorum     {case} CPU per pair, {load}: broker {:.0} µs (single {:.0}), Redis {:.0} µs \
             over its nodes (single {:.0}), bench {:.0} µs (single {:.0}), all {:.0} µs \
             (single {:.0}){floor}",
            self.broker,
            single.broker,
            self.redis,
            single.redis,
            self.bench,
            single.bench,
            self.total(),
            single.total()
        );
    }
}

/// Two quorum brokers over five nodes each, one with a node stopped by
/// SIGSTOP, in alternating slices: what a stalled minority costs.
async fn stalled(settings: &Settings, table: &mut Table) -> Result<(), String> {
    let mut brokers = Vec::new();
    let mut nodes = Vec::new();
    for _ in 0..2 {
        let (servers, broker) = start_quorum(5).await?;
        brokers.push(broker);
        nodes.push(servers);
    }
    let stalled_node = &nodes[1][4];
    signal(stalled_node, "STOP")?;
    let (up, stalled) = (
        Target::Broker {
            port: brokers[0].port,
        },
        Target::Broker {
            port: brokers[1].port,
        },
    );
    let mut meter = Meter::new(
        vec![
            ("all-up broker", brokers[0].pid()),
            ("stalled-node broker", brokers[1].pid()),
        ],
        None,
    )
    .await?;
    let measured = measure_stalled([&up, &stalled], settings, &mut meter, table).await;
    signal(stalled_node, "CONT")?;
    measured
}

async fn measure_stalled(
    targets: [&Target; 2],
    settings: &Settings,
    meter: &mut Meter,
    table: &mut Table,
) -> Result<(), String> {
    let locks = ["bench-stalled-latency".to_owned()];
    let [mut up, mut stalled] = load::compare_two(
        targets,
        ["latency, 5 nodes up", "latency, 1 of 5 stalled"],
        &locks,
        settings,
        meter,
    )
    .await?;
    let (up, stalled) = (
        Summary::of(&mut up.samples),
        Summary::of(&mut stalled.samples),
    );
    report("quorum", "quorum-5 pair, all up", &up);
    report("quorum", "quorum-5 pair, 1 stalled", &stalled);
    table.add(
        "quorum-5, 1 node stalled: latency pair p50 (vs all up)",
        "ms",
        (stalled.p50_ms, Some(up.p50_ms)),
        Goal::RatioAtMost(1.3),
    );
    let locks: Vec<String> = (0..64).map(|i| format!("bench-stalled-c64-{i}")).collect();
    let [up, stalled] = load::compare_two(
        targets,
        ["throughput, 5 nodes up", "throughput, 1 of 5 stalled"],
        &locks,
        settings,
        meter,
    )
    .await?;
    table.add(
        "quorum-5, 1 node stalled: pairs/s at 64 callers (vs all up)",
        "/s",
        (stalled.rate(), Some(up.rate())),
        Goal::RatioAtLeast(0.8),
    );
    Ok(())
}

/// `count` Redis nodes and a quorum-mode broker over them, once it is ready.
async fn start_quorum(count: usize) -> Result<(Vec<Proc>, Proc), String> {
    let servers = (0..count)
        .map(|_| procs::redis())
        .collect::<Result<Vec<Proc>, String>>()?;
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("redis://127.0.0.1:{}/0", s.port))
        .collect();
    let broker = procs::broker_with(
        &servers[0],
        &[
            ("LOCKBROKER_REDIS_MODE", "quorum"),
            ("LOCKBROKER_REDIS_NODES", &urls.join(",")),
        ],
    )?;
    wait_ready(&format!("http://127.0.0.1:{}", broker.port)).await?;
    Ok((servers, broker))
}

/// Sends `SIG<name>` to a node.
fn signal(node: &Proc, name: &str) -> Result<(), String> {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), node.pid().to_string()])
        .status()
        .map_err(|e| format!("kill -{name}: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("kill -{name} {} failed", node.pid())),
    }
}
