//! `lockbroker-bench`: measures the broker on this machine, over loopback,
//! against processes it starts itself (a `redis-server` on a free port and
//! release builds of `lockbroker`), beside Redis driven directly with the
//! broker's own Lua scripts by the same client code, and beside the thinnest
//! correct HTTP broker (`thin`, [`thin`]), which this binary runs itself as
//! a hidden subcommand.
//!
//! Subcommands:
//! - `latency`: one caller, sequential acquire + release pairs on one lock,
//!   on the broker, on direct Redis, on the minimal Redis lock (`SET NX` +
//!   `INCR`, compare-and-delete), on the thin broker and on etcd when
//!   installed, in alternating slices: p50/p90/p99, and what a pair cost
//!   Redis and the broker in CPU.
//! - `throughput`: 1, 16 and 64 callers, each on a lock of its own, for a
//!   fixed duration: pairs/s, p50/p99 and cost per pair, on the same targets.
//! - `handoff`: time from a release's response to the next waiter's grant
//!   response, for a waiter on the same broker, on a second broker sharing the
//!   Redis, and for a client polling every 100 ms as redis-py's Lock does.
//! - `churn`: rounds of waiters arriving and leaving, and whether their memory
//!   comes back.
//! - `memory`: the broker's resident memory idle, under the 64-caller load
//!   and with many acquires waiting at once, a connection each (also 100,000
//!   when the open-files limit allows; the bench raises its soft limit to the
//!   hard one first) and 1,000 to an HTTP/2 connection (also 100,000).
//! - `quorum`: quorum mode over 3 and 5 local Redis nodes beside single mode,
//!   and five nodes with one stalled (SIGSTOP) beside five all up.
//! - `cluster`: cluster mode over a 3-primary Redis Cluster beside single
//!   mode, two brokers each.
//! - `semaphore`: 64 callers on the 8 permits of one semaphore beside 64
//!   callers on 8 exclusive locks: cycles/s and Redis CPU per cycle.
//! - `watch`: 1,000 event streams watching one prefix while 16 callers
//!   change locks under it at full rate: delivery latency p50/p99, events
//!   delivered per second, broker CPU per delivered event, and broker RSS
//!   idle, with the streams open, and under load with a stalled reader
//!   (needs `ulimit -n` above 1,200).
//! - `all`: each of the above in one run (`--huge` left out unless given),
//!   then one table.
//! - `compare A.json B.json`: the ratio B/A of every figure two `--json`
//!   documents share.
//!
//! Prints a human table and one JSON line per figure (`--json PATH` writes
//! them all as one document), and exits non-zero if anything it measured
//! went wrong (an error, a fence that did not grow, a waiter never granted).

mod client;
mod cluster;
mod compare;
mod handoff;
mod http1;
mod load;
mod memory;
mod meter;
mod pairs;
mod procs;
mod quorum;
mod resp;
mod semaphore;
mod stats;
mod thin;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pairs::Servers;
use stats::Table;

const USAGE: &str = "\
Usage: lockbroker-bench all|latency|throughput|handoff|memory|churn|quorum|cluster|semaphore|watch
                        [OPTIONS]
       lockbroker-bench compare A.json B.json

Options:
  --duration SECS   time per target for each latency/throughput case, for
                    the memory load and for the watch load (default 6)
  --slices N        alternate the targets in N slices (default 3)
  --rounds N        handoff rounds per case (default 200)
  --waiters N       waiting acquires in the memory and churn cases (default 10000)
  --waiter-rounds N rounds of waiters in the churn case (default 10)
  --huge            the memory case must also hold 100,000 waiting acquires,
                    one connection each (it does whenever the open-files
                    limit, raised to the hard limit, is above 101,000; with
                    --huge a lower limit is an error instead of a skip);
                    over HTTP/2, 1,000 to a connection, it always does
  --huge-waiters N  like --huge, with N waiting acquires
  --json PATH       also write every figure of the run to PATH as one JSON
                    document, for `compare`

Starts its own redis-server and lockbroker processes on free loopback ports,
the thin broker (this binary, as a process of its own), and an etcd when one
is on PATH (latency and throughput measure the thin broker and etcd too).
Build first: cargo build --release -p lockbroker-server -p lockbroker-bench
(scripts/bench.sh does both, then runs `all`).";

/// What the command line chose.
pub struct Settings {
    /// Time per target for each pair case, and for the memory load.
    pub duration: Duration,
    /// Alternating slices the pair cases are split into.
    pub slices: u32,
    /// Handoff rounds per case.
    pub rounds: usize,
    /// Waiting acquires in the memory and churn cases.
    pub waiters: usize,
    /// Rounds of waiters in the churn case.
    pub waiter_rounds: usize,
    /// Waiting acquires of the memory case's huge phase, when asked for
    /// (then a too-low open-files limit is an error, not a skip).
    pub huge_waiters: Option<usize>,
    /// Where to write the run's figures as one JSON document.
    pub json: Option<PathBuf>,
}

/// Waiting acquires of `--huge`, and of the memory case's huge phase when
/// the open-files limit allows it.
pub const HUGE_WAITERS: usize = 100_000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(thin::SUBCOMMAND) {
        return thin::main(&args[1..]);
    }
    // The broker's Functions library as it loads it, for scripts/script-costs.sh.
    if args.first().map(String::as_str) == Some("__library") {
        print!("{}", lockbroker_redis::scripts::Scripts::new().library());
        return ExitCode::SUCCESS;
    }
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(bench(args)),
        Err(error) => {
            eprintln!("lockbroker-bench: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The benchmarks, as the command line asks.
async fn bench(args: Vec<String>) -> ExitCode {
    if args.first().map(String::as_str) == Some("compare") {
        return match (args.get(1), args.get(2)) {
            (Some(a), Some(b)) => match compare::run(a.as_ref(), b.as_ref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("lockbroker-bench compare: {error}");
                    ExitCode::FAILURE
                }
            },
            _ => usage("compare needs two JSON files"),
        };
    }
    let number = |flag: &str, default: u64| -> Result<u64, String> {
        match args.iter().position(|a| a == flag) {
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or(format!("{flag} needs a positive number")),
            None => Ok(default),
        }
    };
    let settings = (|| {
        Ok::<_, String>(Settings {
            duration: Duration::from_secs(number("--duration", 6)?),
            slices: u32::try_from(number("--slices", 3)?).map_err(|e| e.to_string())?,
            rounds: usize::try_from(number("--rounds", 200)?).map_err(|e| e.to_string())?,
            waiters: usize::try_from(number("--waiters", 10_000)?).map_err(|e| e.to_string())?,
            waiter_rounds: usize::try_from(number("--waiter-rounds", 10)?)
                .map_err(|e| e.to_string())?,
            huge_waiters: if args.iter().any(|a| a == "--huge-waiters") {
                Some(usize::try_from(number("--huge-waiters", 1)?).map_err(|e| e.to_string())?)
            } else {
                args.iter().any(|a| a == "--huge").then_some(HUGE_WAITERS)
            },
            json: match args.iter().position(|a| a == "--json") {
                Some(i) => Some(args.get(i + 1).ok_or("--json needs a path")?.into()),
                None => None,
            },
        })
    })();
    let settings = match settings {
        Ok(settings) => settings,
        Err(problem) => return usage(&problem),
    };
    let benches: &[&str] = match args.first().map(String::as_str) {
        Some("all") => &[
            "latency",
            "throughput",
            "handoff",
            "memory",
            "churn",
            "quorum",
            "cluster",
            "semaphore",
            "watch",
        ],
        Some(
            one @ ("latency" | "throughput" | "handoff" | "memory" | "churn" | "quorum" | "cluster"
            | "semaphore" | "watch"),
        ) => &[one],
        Some("-h" | "--help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => return usage("name a benchmark"),
    };
    match run(benches, &settings, &args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(errors) => {
            for error in errors {
                eprintln!("lockbroker-bench: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Runs `benches` against one Redis, two brokers and (for the pair cases)
/// an etcd when installed, going on after a failed one so the table shows
/// what did run; every failure is returned.
async fn run(benches: &[&str], settings: &Settings, args: &[String]) -> Result<(), Vec<String>> {
    let one = |e: String| vec![e];
    let mut about = serde_json::json!({
        "benches": benches,
        "args": args,
        "started_unix_s": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "load_average_at_start": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "commit": procs::commit(),
    });
    // Before any process starts, so that every one inherits it.
    match procs::raise_open_files() {
        Ok(files) => {
            println!(
                "open files: soft limit {} (was {}, hard limit {})",
                files.now, files.before, files.hard
            );
            about["open_files"] = files.now.into();
        }
        Err(error) => println!("open files: limit not raised: {error}"),
    }
    let redis = procs::redis().map_err(one)?;
    let first = procs::broker(&redis).map_err(one)?;
    let second = procs::broker(&redis).map_err(one)?;
    let http = reqwest::Client::new();
    for broker in [&first, &second] {
        client::wait_ready(&format!("http://127.0.0.1:{}", broker.port))
            .await
            .map_err(one)?;
    }
    let pair_cases = ["latency", "throughput"];
    let thin = if benches.iter().any(|b| pair_cases.contains(b)) {
        // Its port opens once its Redis connection is up and the scripts
        // are loaded: listening is ready.
        let thin = procs::thin(&redis).map_err(one)?;
        println!("thin: 127.0.0.1:{}, one Redis connection", thin.port);
        Some(thin)
    } else {
        None
    };
    let etcd = if benches.iter().any(|b| pair_cases.contains(b)) {
        // A peer for context: without it the broker's own figures still stand.
        match start_etcd(&http).await {
            Ok((etcd, version)) => {
                println!(
                    "etcd: {version} on 127.0.0.1:{}, one member, data on tmpfs",
                    etcd.port
                );
                about["etcd"] = version.into();
                Some(etcd)
            }
            Err(reason) => {
                println!("etcd: skipped, {reason}");
                about["etcd"] = format!("skipped, {reason}").into();
                None
            }
        }
    } else {
        None
    };
    let servers = Servers {
        redis: &redis,
        broker: &first,
        thin: thin.as_ref(),
        etcd: etcd.as_ref(),
    };
    let mut table = Table::default();
    let mut errors = Vec::new();
    for &bench in benches {
        let result = match bench {
            "latency" => pairs::latency(&servers, settings, &mut table).await,
            "throughput" => pairs::throughput(&servers, settings, &mut table).await,
            "handoff" => handoff::run(&first, &second, settings.rounds, &mut table).await,
            "memory" => memory::run(&redis, settings, &mut table).await,
            "quorum" => quorum::run(&first, &redis, settings, &mut table).await,
            "cluster" => cluster::run(&redis, [&first, &second], settings, &mut table).await,
            "semaphore" => semaphore::run(&redis, &first, settings, &mut table).await,
            "watch" => watch::run(&redis, settings, &mut table).await,
            _ => memory::churn(&redis, settings, &mut table).await,
        };
        if let Err(error) = result {
            errors.push(format!("{bench}: {error}"));
        }
    }
    table.print();
    if let Some(path) = &settings.json {
        about["errors"] = errors.clone().into();
        match table.write_json(path, about) {
            Ok(()) => println!("figures written to {}", path.display()),
            Err(error) => errors.push(error),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// An etcd for the pair cases and its version, or why there is none.
async fn start_etcd(http: &reqwest::Client) -> Result<(procs::Proc, String), String> {
    let etcd = procs::etcd()
        .map_err(|e| format!("it did not start: {e}"))?
        .ok_or_else(|| procs::ETCD_MISSING.to_owned())?;
    client::wait_etcd(http, etcd.port)
        .await
        .map_err(|e| format!("it did not start: {e}"))?;
    Ok((etcd, procs::etcd_version()))
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("lockbroker-bench: {problem}\n\n{USAGE}");
    ExitCode::from(64)
}
