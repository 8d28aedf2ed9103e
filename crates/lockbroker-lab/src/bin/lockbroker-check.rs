//! `lockbroker-check`: runs concurrent clients with random stalls against a
//! broker, records every answer, checks the history, prints a summary, and
//! exits 1 on any violation.

use std::process::ExitCode;
use std::time::Duration;

use lockbroker_lab::args::Args;
use lockbroker_lab::check_against;
use lockbroker_lab::client::{now_us, BrokerClient};
use lockbroker_lab::history::{json_lines, Backend, Drift};
use lockbroker_lab::load::{self, LoadPlan, Mix};
use lockbroker_lab::stack::{Launch, Stack};

const USAGE: &str = "\
lockbroker-check: load a broker with stalling clients and check the history

Usage: lockbroker-check [--url URL]... [options]

Without --url, starts its own redis-server and broker(s) on free loopback ports.
  --url URL          a broker to load (repeat, or comma-separate, for several)
  --brokers N        brokers to start when no --url is given (default 1)
  --nodes N          Redis servers to start: 1, or an odd N >= 3 for quorum mode
  --sentinel         start a primary, two replicas and three Sentinels, and the
                     brokers in sentinel mode; with --url: the brokers run in
                     sentinel mode (a failover may happen at any time)
  --cluster          start a Redis Cluster of three primaries and the brokers in
                     cluster mode (checked by single mode's rules: a resharding
                     moves every key with its state, so every promise holds)
  --chaos            in quorum mode, keep pausing (SIGSTOP) and restarting empty
                     a minority of the nodes while the load runs; in sentinel
                     mode, keep killing the primary (a failover every few s); in
                     cluster mode, keep moving every slot of one primary to
                     another (redis-cli --cluster reshard)
  --quorum           with --url: the brokers run in quorum mode (their nodes may
                     restart at any time); check by quorum mode's rules
  --drift-factor F   with --quorum: the brokers' redis.drift_factor (default 0.01)
  --drift-ms MS      with --quorum: the brokers' redis.drift_ms (default 2)
  --broker-bin PATH  the lockbroker binary (default: beside this tool, or PATH)
  --logs DIR         keep the logs of the servers it starts in DIR: each broker's
                     at level info in broker-<n>.log (from 0), each Redis
                     server's in node-<port>.log across its restarts, each
                     Sentinel's in sentinel-<port>.log
  --clients N        concurrent clients (default 16)
  --locks N          locks they share (default 3)
  --seconds S        how long to run (default 20)
  --ttl-ms MS        lease TTL (default 200)
  --stall-rate R     share of holders that stall past their TTL (default 0.1)
  --shared N         of the clients, N take shared leases of the locks (default 0)
  --permits N        of the clients, N take permits of semaphores named like the
                     locks (default 0)
  --limit L          the semaphores' limit (default 2)
  --all-at-once R    share of the rounds of clients of locks that take two or
                     three locks at once (acquire-all) and give them back
                     together (release-all) (default 0, or 0.3 with --mix)
  --sessions R       share of every client's rounds held under a session (open,
                     take one or two names under it, keepalives only, close or
                     walk away) (default 0, or 0.2 with --mix)
  --mix              a mixed load: a third of the clients shared, a third on
                     semaphores (unless --shared or --permits say otherwise),
                     some rounds on several locks at once, some under sessions
  --seed N           seed for the clients' choices (default: the time)
  --history FILE     also write every request and answer, in the order sent,
                     and the node restarts or failovers the run caused, to
                     FILE as one JSON object per line";

fn main() -> ExitCode {
    let args = match Args::parse(
        std::env::args().skip(1),
        &["help", "chaos", "quorum", "sentinel", "cluster", "mix"],
    ) {
        Ok(args) => args,
        Err(e) => return usage_error(&e),
    };
    if args.flag("help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let known = [
        "url",
        "brokers",
        "nodes",
        "chaos",
        "quorum",
        "sentinel",
        "cluster",
        "drift-factor",
        "drift-ms",
        "broker-bin",
        "logs",
        "clients",
        "locks",
        "seconds",
        "ttl-ms",
        "stall-rate",
        "shared",
        "permits",
        "limit",
        "all-at-once",
        "sessions",
        "mix",
        "seed",
        "history",
    ];
    if let Err(e) = args.only(&known) {
        return usage_error(&e);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("lockbroker-check: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("lockbroker-check: {e}");
            ExitCode::from(2)
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("lockbroker-check: {message}\n\n{USAGE}");
    ExitCode::from(2)
}

async fn run(args: &Args) -> Result<bool, String> {
    let seed = args.get("seed", now_us().unsigned_abs())?;
    let plan = LoadPlan {
        clients: args.get("clients", 16)?,
        locks: args.get("locks", 3)?,
        duration: Duration::from_secs_f64(args.get("seconds", 20.0)?),
        ttl_ms: args.get("ttl-ms", 200)?,
        stall_rate: args.get("stall-rate", 0.1)?,
        seed,
        lock_prefix: format!("check-{}-{}", std::process::id(), seed % 1_000_000),
    };
    if plan.clients == 0 || plan.ttl_ms < 20 {
        return Err("--clients must be at least 1 and --ttl-ms at least 20".into());
    }
    let (third, all_at_once, sessions) = if args.flag("mix") {
        (plan.clients / 3, 0.3, 0.2)
    } else {
        (0, 0.0, 0.0)
    };
    let mix = Mix {
        shared_clients: args.get("shared", third)?,
        permit_clients: args.get("permits", third)?,
        limit: args.get("limit", 2)?,
        all_at_once_rate: args.get("all-at-once", all_at_once)?,
        session_rate: args.get("sessions", sessions)?,
    };
    if mix.limit == 0 || mix.shared_clients + mix.permit_clients > plan.clients {
        return Err(
            "--limit must be at least 1, and --shared plus --permits at most --clients".into(),
        );
    }
    if !(0.0..=1.0).contains(&mix.all_at_once_rate) {
        return Err("--all-at-once must be between 0 and 1".into());
    }
    if !(0.0..=1.0).contains(&mix.session_rate) {
        return Err("--sessions must be between 0 and 1".into());
    }
    let mut urls: Vec<String> = args
        .raw("url")
        .map(|u| u.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let launch = Launch::from_args(args)?;
    let mut backend = if args.flag("quorum") {
        let drift = Drift {
            factor: args.get("drift-factor", Drift::BROKER_DEFAULT.factor)?,
            ms: args.get("drift-ms", Drift::BROKER_DEFAULT.ms)?,
        };
        Backend::Quorum {
            drift,
            restarts: None,
        }
    } else if args.flag("sentinel") {
        Backend::Sentinel { failovers: None }
    } else {
        Backend::Single
    };
    let stack = if urls.is_empty() {
        let brokers = args.get("brokers", 1)?;
        let stack = if args.flag("sentinel") {
            Stack::start_sentinel(brokers, &launch).await?
        } else if args.flag("cluster") {
            Stack::start_cluster(3, brokers, &launch).await?
        } else {
            Stack::start_with(args.get("nodes", 1)?, brokers, &launch).await?
        };
        println!(
            "started {} redis-server(s) and {} broker(s)",
            stack.node_count(),
            stack.urls.len()
        );
        urls.clone_from(&stack.urls);
        backend = stack.backend();
        Some(stack)
    } else {
        None
    };
    // The stack lives until the end of the run: in the chaos task, or here.
    let (chaos, mut stack) = match stack {
        Some(stack) if args.flag("chaos") && stack.is_sentinel() => {
            (Some(tokio::spawn(failovers(stack, plan.duration))), None)
        }
        Some(stack) if args.flag("chaos") && stack.is_cluster() => {
            (Some(tokio::spawn(reshards(stack, plan.duration))), None)
        }
        Some(stack) if args.flag("chaos") && stack.node_count() >= 3 => {
            (Some(tokio::spawn(chaos(stack, plan.duration))), None)
        }
        other => (None, other),
    };
    println!(
        "load: {}, {} locks, {:.0} s, ttl {} ms, stall rate {}, {} broker(s), seed {seed}",
        clients(&plan, &mix),
        plan.locks,
        plan.duration.as_secs_f64(),
        plan.ttl_ms,
        plan.stall_rate,
        urls.len()
    );
    if let Backend::Quorum { drift, .. } = &backend {
        println!(
            "rules: quorum mode, drift allowance {}% of the TTL + {} ms",
            drift.factor * 100.0,
            drift.ms
        );
    }
    if let Backend::Sentinel { .. } = &backend {
        println!(
            "rules: sentinel mode: exclusivity and acknowledged releases do not span a \
             failover; fences grow across it"
        );
    }
    for url in &urls {
        BrokerClient::new(url, Duration::from_secs(15))?;
    }
    let (history, stats) = load::run_mixed(&urls, &plan, &mix).await;
    if let Some(chaos) = chaos {
        let (faults, chaos_stack) = chaos.await.map_err(|e| e.to_string())??;
        println!("chaos: {faults}");
        stack = Some(chaos_stack);
    }
    if let Some(stack) = &stack {
        // Now with every node restart the chaos made.
        backend = stack.backend();
    }
    let events = history.events();
    if let Some(path) = args.raw("history") {
        std::fs::write(path, json_lines(&events, &backend))
            .map_err(|e| format!("cannot write the history to {path}: {e}"))?;
    }
    let report = check_against(&events, &backend);
    println!(
        "requests: {}  stalls past the TTL: {}",
        events.len(),
        stats.stalls
    );
    print!("{report}");
    if report.stats.leases == 0 {
        return Err("no lease was granted: nothing was checked".into());
    }
    println!("{}", if report.ok() { "PASS" } else { "FAIL" });
    Ok(report.ok())
}

/// The load's clients by kind, as the summary prints them.
fn clients(plan: &LoadPlan, mix: &Mix) -> String {
    let exclusive = plan.clients - mix.shared_clients - mix.permit_clients;
    let mut several = if mix.all_at_once_rate > 0.0 {
        format!(
            ", {:.0}% of the rounds on locks taking several at once",
            mix.all_at_once_rate * 100.0
        )
    } else {
        String::new()
    };
    if mix.session_rate > 0.0 {
        several.push_str(&format!(
            ", {:.0}% of the rounds under a session",
            mix.session_rate * 100.0
        ));
    }
    if exclusive == plan.clients {
        return format!("{} clients{several}", plan.clients);
    }
    format!(
        "{} clients ({exclusive} exclusive, {} shared, {} on semaphores of limit {}){several}",
        plan.clients, mix.shared_clients, mix.permit_clients, mix.limit
    )
}

/// For `duration`, disturbs a minority of the stack's nodes in turn: one is
/// frozen for 700 ms, the next is restarted without its data. A majority is
/// never touched, so the brokers must keep serving without a double grant.
/// Hands the stack back, which knows when each node restarted.
async fn chaos(mut stack: Stack, duration: Duration) -> Result<(String, Stack), String> {
    let minority = stack.node_count() / 2;
    let until = tokio::time::Instant::now() + duration;
    let (mut pauses, mut restarts) = (0, 0);
    let mut round = 0;
    while tokio::time::Instant::now() + Duration::from_secs(2) < until {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let frozen = round % minority;
        stack.pause_node(frozen);
        tokio::time::sleep(Duration::from_millis(700)).await;
        stack.resume_node(frozen);
        pauses += 1;
        tokio::time::sleep(Duration::from_millis(600)).await;
        stack.restart_node_empty((round + 1) % minority).await?;
        restarts += 1;
        round += 1;
    }
    let faults =
        format!("{pauses} pauses and {restarts} restarts without data, of nodes 1 to {minority}");
    Ok((faults, stack))
}

/// For `duration`, fails the primary over again and again: kills it, waits
/// for the Sentinels to promote a replica, and brings it back as a replica.
/// Hands the stack back, which knows when each failover began.
async fn failovers(mut stack: Stack, duration: Duration) -> Result<(String, Stack), String> {
    let until = tokio::time::Instant::now() + duration;
    let mut count = 0;
    while tokio::time::Instant::now() + Duration::from_secs(5) < until {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        stack.fail_over().await?;
        count += 1;
    }
    Ok((
        format!("{count} failovers (primary killed with SIGKILL)"),
        stack,
    ))
}

/// For `duration`, keeps moving slots: every slot of one primary to another,
/// then the next primary's, so the locks under load change shards again and
/// again. Hands the stack back.
async fn reshards(stack: Stack, duration: Duration) -> Result<(String, Stack), String> {
    let until = tokio::time::Instant::now() + duration;
    let (mut rounds, mut slots) = (0, 0u64);
    while tokio::time::Instant::now() + Duration::from_secs(3) < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        slots += u64::from(stack.reshard(rounds).await?);
        rounds += 1;
    }
    Ok((
        format!("{rounds} reshardings moving {slots} slots in all"),
        stack,
    ))
}
