//! `lockbroker-lostupdate`: the lost-update lab. Starts (or is pointed at) a
//! broker, runs worker processes against one PostgreSQL counter row for each
//! stall rate and fencing mode, and prints how many accepted updates were lost.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use lockbroker_lab::args::Args;
use lockbroker_lab::client::now_us;
use lockbroker_lab::lostupdate::{self, Mode, WorkerPlan, WorkerTally};
use lockbroker_lab::stack::{Launch, Stack};

const USAGE: &str = "\
lockbroker-lostupdate: do fences stop lost updates? Measured against PostgreSQL.

Usage: lockbroker-lostupdate [options]

Without --url, starts its own redis-server and broker on free loopback ports.
  --url URL          the broker to use
  --nodes N          Redis servers to start: 1, or an odd N >= 3 for a broker in
                     quorum mode over them (default 1)
  --sentinel         start a primary, two replicas and three Sentinels, and the
                     broker in sentinel mode
  --cluster          start a Redis Cluster of three primaries and the broker in
                     cluster mode
  --broker-bin PATH  the lockbroker binary (default: beside this tool, or PATH)
  --logs DIR         keep the logs of the servers it starts in DIR: the broker's
                     at level info in broker-0.log, each Redis server's in
                     node-<port>.log, each Sentinel's in sentinel-<port>.log
  --pg CONN          PostgreSQL (default: host=127.0.0.1 port=5432 user=postgres dbname=test)
  --sections N       critical sections per run, split over the workers (default 10000)
  --workers N        worker processes (default 8)
  --rates LIST       stall rates (default 0.001,0.01,0.05)
  --modes LIST       none,write-only,claim-first (default: all three)
  --runs N           runs per rate and mode (default 1)
  --ttl-ms MS        lease TTL (default 200)
  --stall-ms MS      stall after reading (default 300)
  --work-ms MS       work between read and write (default 5)
  --seed N           seed for the stall rolls (default: the time)
  --check            exit 1 unless claim-first lost nothing in every run and
                     no fencing lost something at the highest rate";

const DEFAULT_PG: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

fn main() -> ExitCode {
    let args = match Args::parse(
        std::env::args().skip(1),
        &["help", "check", "sentinel", "cluster"],
    ) {
        Ok(args) => args,
        Err(e) => return fail(&e, 2),
    };
    if args.flag("help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start the runtime: {e}"), 1),
    };
    let result = match args.command.as_deref() {
        Some("worker") => runtime.block_on(worker(&args)),
        Some(other) => Err(format!("unknown command {other:?}")),
        None => runtime.block_on(lab(&args)),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => fail(&e, 2),
    }
}

fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("lockbroker-lostupdate: {message}");
    if code == 2 && !message.contains("database") {
        eprintln!("\n{USAGE}");
    }
    ExitCode::from(code)
}

/// The `worker` subcommand: one worker process, reporting one JSON line.
async fn worker(args: &Args) -> Result<bool, String> {
    let need = |name: &str| {
        args.raw(name)
            .map(str::to_owned)
            .ok_or(format!("worker needs --{name}"))
    };
    let plan = WorkerPlan {
        url: need("url")?,
        pg: need("pg")?,
        lock: need("lock")?,
        table: need("table")?,
        mode: need("mode")?.parse()?,
        sections: args.get("sections", 0)?,
        stall_rate: args.get("stall-rate", 0.0)?,
        ttl_ms: args.get("ttl-ms", 200)?,
        stall_ms: args.get("stall-ms", 300)?,
        work_ms: args.get("work-ms", 5)?,
        seed: args.get("seed", 0)?,
    };
    let tally = lostupdate::run_worker(&plan).await?;
    println!("{}", tally.to_json());
    Ok(true)
}

struct Settings {
    url: String,
    pg: String,
    sections: u64,
    workers: u64,
    ttl_ms: u64,
    stall_ms: u64,
    work_ms: u64,
}

/// One run's result.
#[derive(Clone, Copy)]
struct RunResult {
    tally: WorkerTally,
    final_value: u64,
    seconds: f64,
}

impl RunResult {
    fn lost(&self) -> u64 {
        self.tally.accepted.saturating_sub(self.final_value)
    }
}

async fn lab(args: &Args) -> Result<bool, String> {
    let known = [
        "url",
        "nodes",
        "sentinel",
        "cluster",
        "broker-bin",
        "logs",
        "pg",
        "sections",
        "workers",
        "rates",
        "modes",
        "runs",
        "ttl-ms",
        "stall-ms",
        "work-ms",
        "seed",
        "check",
    ];
    args.only(&known)?;
    let rates: Vec<f64> = list(args.raw("rates").unwrap_or("0.001,0.01,0.05"))?;
    let modes: Vec<Mode> = list(args.raw("modes").unwrap_or("none,write-only,claim-first"))?;
    let runs: u64 = args.get("runs", 1)?;
    let seed: u64 = args.get("seed", now_us().unsigned_abs())?;
    let mut settings = Settings {
        url: String::new(),
        pg: args.raw("pg").unwrap_or(DEFAULT_PG).to_owned(),
        sections: args.get("sections", 10_000)?,
        workers: args.get("workers", 8)?,
        ttl_ms: args.get("ttl-ms", 200)?,
        stall_ms: args.get("stall-ms", 300)?,
        work_ms: args.get("work-ms", 5)?,
    };
    if settings.workers == 0 || runs == 0 || settings.sections < settings.workers {
        return Err(
            "--workers and --runs must be at least 1, --sections at least --workers".into(),
        );
    }
    let nodes: usize = args.get("nodes", 1)?;
    let (sentinel, cluster) = (args.flag("sentinel"), args.flag("cluster"));
    let own_servers = args.raw("nodes").is_some() || sentinel || cluster;
    if args.raw("url").is_some() && own_servers {
        return Err(
            "--nodes, --sentinel and --cluster start a broker of their own; they cannot go with \
             --url"
                .into(),
        );
    }
    let launch = Launch::from_args(args)?;
    if [args.raw("nodes").is_some(), sentinel, cluster]
        .iter()
        .filter(|set| **set)
        .count()
        > 1
    {
        return Err("choose one of --nodes, --sentinel and --cluster".into());
    }
    let db = lostupdate::connect(&settings.pg).await?;
    let _stack = match args.raw("url") {
        Some(url) => {
            settings.url = url.to_owned();
            None
        }
        None => {
            let stack = if sentinel {
                Stack::start_sentinel(1, &launch).await?
            } else if cluster {
                Stack::start_cluster(3, 1, &launch).await?
            } else {
                Stack::start_with(nodes, 1, &launch).await?
            };
            settings.url.clone_from(&stack.urls[0]);
            Some(stack)
        }
    };
    let store = match nodes {
        _ if sentinel => "a primary found through Sentinel".to_owned(),
        _ if cluster => "a Redis Cluster of three primaries".to_owned(),
        1 => "one Redis".to_owned(),
        n => format!("quorum mode over {n} Redis nodes"),
    };
    println!(
        "lost-update lab: {} sections per run over {} worker processes, TTL {} ms, stall {} ms \
         after reading, work {} ms, {runs} run(s) per row, seed {seed}, broker on {store}",
        settings.sections, settings.workers, settings.ttl_ms, settings.stall_ms, settings.work_ms
    );
    let table_name = lostupdate::counter_table(std::process::id());
    let mut table: Vec<(f64, Mode, Vec<RunResult>)> = Vec::new();
    for (r, &rate) in rates.iter().enumerate() {
        for &mode in &modes {
            let mut results = Vec::new();
            for run in 0..runs {
                lostupdate::reset(&db, &table_name).await?;
                let lock = format!("lab-{}-{r}-{mode}-{run}", std::process::id());
                let run_seed = seed.wrapping_add((r as u64) << 32).wrapping_add(run << 16);
                let started = Instant::now();
                let tally = run_workers(&settings, (&lock, &table_name), mode, rate, run_seed)?;
                let result = RunResult {
                    tally,
                    final_value: lostupdate::final_value(&db, &table_name).await?,
                    seconds: started.elapsed().as_secs_f64(),
                };
                eprintln!(
                    "  stalls {:>5} {mode:<11} run {}: accepted {}, final {}, lost {}, rejected {}, stalled {}, late writes {}, {:.1} s",
                    percent(rate),
                    run + 1,
                    result.tally.accepted,
                    result.final_value,
                    result.lost(),
                    result.tally.rejected,
                    result.tally.stalls,
                    result.tally.late,
                    result.seconds
                );
                results.push(result);
            }
            table.push((rate, mode, results));
        }
    }
    lostupdate::drop_table(&db, &table_name).await?;
    print_table(&table);

    if !args.flag("check") {
        return Ok(true);
    }
    let mut ok = true;
    for (rate, mode, results) in &table {
        if *mode == Mode::ClaimFirst && results.iter().any(|r| r.lost() > 0) {
            println!(
                "CHECK FAILED: claim-first lost updates at {} stalls",
                percent(*rate)
            );
            ok = false;
        }
    }
    let top = rates.iter().copied().fold(f64::NAN, f64::max);
    if let Some((_, _, results)) = table
        .iter()
        .find(|(rate, mode, _)| *rate == top && *mode == Mode::NoFencing)
    {
        if results.iter().all(|r| r.lost() == 0) {
            println!(
                "CHECK FAILED: no fencing lost nothing at {} stalls, so the lab cannot see a loss",
                percent(top)
            );
            ok = false;
        }
    }
    println!("{}", if ok { "CHECK PASSED" } else { "CHECK FAILED" });
    Ok(ok)
}

fn list<T: std::str::FromStr>(raw: &str) -> Result<Vec<T>, String> {
    raw.split(',')
        .map(|item| {
            item.trim()
                .parse()
                .map_err(|_| format!("cannot parse {item:?}"))
        })
        .collect()
}

fn percent(rate: f64) -> String {
    format!("{}%", rate * 100.0)
}

/// Starts the workers, waits for them (bounded), and adds up their reports.
fn run_workers(
    s: &Settings,
    (lock, counter): (&str, &str),
    mode: Mode,
    rate: f64,
    seed: u64,
) -> Result<WorkerTally, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut children: Vec<Child> = Vec::new();
    for w in 0..s.workers {
        let share = s.sections / s.workers + u64::from(w < s.sections % s.workers);
        let child = Command::new(&exe)
            .arg("worker")
            .args([
                "--url", &s.url, "--pg", &s.pg, "--lock", lock, "--table", counter,
            ])
            .args(["--mode", mode.name(), "--sections", &share.to_string()])
            .args([
                "--stall-rate",
                &rate.to_string(),
                "--ttl-ms",
                &s.ttl_ms.to_string(),
            ])
            .args([
                "--stall-ms",
                &s.stall_ms.to_string(),
                "--work-ms",
                &s.work_ms.to_string(),
            ])
            .args(["--seed", &seed.wrapping_add(w).to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        children.push(child);
    }
    // Generous, but bounded: every section plus every stall, ten times over.
    let expected_ms = s.sections * (s.work_ms + 20) + (s.sections / 10 + 10) * s.stall_ms;
    let deadline = Instant::now() + Duration::from_millis(expected_ms * 10 + 60_000);
    let mut total = WorkerTally::default();
    let mut failure = None;
    for child in &mut children {
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = child.kill();
                    failure.get_or_insert("a worker did not finish in time".to_owned());
                    break;
                }
            }
        }
        let status = child.wait().map_err(|e| format!("worker: {e}"))?;
        let line = child
            .stdout
            .take()
            .and_then(|out| BufReader::new(out).lines().next())
            .and_then(Result::ok)
            .unwrap_or_default();
        match WorkerTally::from_json(&line) {
            Some(tally) if status.success() => total.add(tally),
            _ => {
                failure.get_or_insert(format!("a worker failed ({status})"));
            }
        }
    }
    match failure {
        Some(message) => Err(message),
        None => Ok(total),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn print_table(table: &[(f64, Mode, Vec<RunResult>)]) {
    println!();
    println!(
        "| stall rate | mode        | lost (median) | lost (max) | lost per run         | rejected (median) | stalled (median) | late writes (median) | s per run |"
    );
    println!(
        "|-----------:|-------------|--------------:|-----------:|----------------------|------------------:|-----------------:|---------------------:|----------:|"
    );
    for (rate, mode, results) in table {
        let lost: Vec<f64> = results.iter().map(|r| r.lost() as f64).collect();
        let each: Vec<String> = results.iter().map(|r| r.lost().to_string()).collect();
        let max = results.iter().map(RunResult::lost).max().unwrap_or(0);
        println!(
            "| {:>10} | {:<11} | {:>13} | {:>10} | {:<20} | {:>17} | {:>16} | {:>20} | {:>9.1} |",
            percent(*rate),
            mode.name(),
            median(lost),
            max,
            each.join(" "),
            median(results.iter().map(|r| r.tally.rejected as f64).collect()),
            median(results.iter().map(|r| r.tally.stalls as f64).collect()),
            median(results.iter().map(|r| r.tally.late as f64).collect()),
            median(results.iter().map(|r| r.seconds).collect()),
        );
    }
}
